/* Avro size kernels: the sizes joinlib/protocol/avro.py's encoders would write, without writing them.
 *
 * Why C: a node prices every source tuple it takes in as the naive baseline (what shipping it to every other
 * site would cost, wire.naive_batch_size), and most of a selective plan's tuples are never encoded, so the size
 * is all that is asked; in Python, encoding a tuple's head to measure it was about 7 % of a live node's CPU.
 * The sizes are exactly len(avro.encode_tuple(t)): a varint per long (zig-zag, 7 bits a byte), the Value union's
 * branch byte then the value, an array's count and end.  Anything this file does not know (an int beyond 64
 * bits, a value of another type) raises, and avro.py's Python form then answers or raises as it always did.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline Py_ssize_t zz_len(long long n) {
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    Py_ssize_t len = 1;
    while (z >= 0x80) {
        z >>= 7;
        len++;
    }
    return len;
}

/* The varint size of a Python int, or -1 with an exception (not an int, or beyond 64 bits). */
static Py_ssize_t long_len(PyObject *o) {
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "beyond an Avro long");
        return -1;
    }
    if (v == -1 && PyErr_Occurred())
        return -1;
    return zz_len(v);
}

/* The size of a Value-union encoding of v (avro._value), or -1 with an exception. */
static Py_ssize_t value_len(PyObject *v) {
    if (v == Py_None)
        return 1;
    if (PyBool_Check(v))
        return 2;
    if (PyLong_Check(v)) {
        Py_ssize_t n = long_len(v);
        return n < 0 ? -1 : 1 + n;
    }
    if (PyFloat_Check(v))
        return 9;
    if (PyUnicode_Check(v)) {
        Py_ssize_t size;
        if (PyUnicode_AsUTF8AndSize(v, &size) == NULL)
            return -1;
        return 1 + zz_len(size) + size;
    }
    PyErr_SetString(PyExc_TypeError, "not an Avro Value");
    return -1;
}

static PyObject *s_wire, *s_pos, *s_id, *s_ts, *s_seq, *s_key, *s_rest;

/* The size of one tuple's encoding (avro.tuple_size), or -1 with an exception. */
static Py_ssize_t tuple_len(PyObject *t) {
    PyObject *wire = PyObject_GetAttr(t, s_wire);
    if (wire == NULL)
        return -1;
    if (wire != Py_None) {
        Py_ssize_t n = PyBytes_Check(wire) ? PyBytes_GET_SIZE(wire) : PyObject_Length(wire);
        Py_DECREF(wire);
        return n;
    }
    Py_DECREF(wire);
    Py_ssize_t size = 1;   /* the key array's end */
    PyObject *const names[] = {s_pos, s_id, s_ts, s_seq};
    for (int i = 0; i < 4; i++) {
        PyObject *x = PyObject_GetAttr(t, names[i]);
        if (x == NULL)
            return -1;
        Py_ssize_t n = long_len(x);
        Py_DECREF(x);
        if (n < 0)
            return -1;
        size += n;
    }
    PyObject *key = PyObject_GetAttr(t, s_key);
    if (key == NULL)
        return -1;
    if (!PyTuple_Check(key)) {
        Py_DECREF(key);
        PyErr_SetString(PyExc_TypeError, "a tuple's key must be a tuple");
        return -1;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(key);
    if (k)
        size += zz_len(k);
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t n = value_len(PyTuple_GET_ITEM(key, i));
        if (n < 0) {
            Py_DECREF(key);
            return -1;
        }
        size += n;
    }
    Py_DECREF(key);
    PyObject *rest = PyObject_GetAttr(t, s_rest);
    if (rest == NULL)
        return -1;
    Py_ssize_t r = PyBytes_Check(rest) ? PyBytes_GET_SIZE(rest) : PyObject_Length(rest);
    Py_DECREF(rest);
    if (r < 0)
        return -1;
    return size + zz_len(r) + r;
}

/* tuples_size(tups) -> int: the sum of the tuples' encoded sizes. */
static PyObject *tuples_size(PyObject *self, PyObject *arg) {
    PyObject *fast = PySequence_Fast(arg, "tuples_size takes a sequence of tuples");
    if (fast == NULL)
        return NULL;
    Py_ssize_t total = 0, n = PySequence_Fast_GET_SIZE(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t s = tuple_len(PySequence_Fast_GET_ITEM(fast, i));
        if (s < 0) {
            Py_DECREF(fast);
            return NULL;
        }
        total += s;
    }
    Py_DECREF(fast);
    return PyLong_FromSsize_t(total);
}

/* Append the zig-zag varint of n to out (at least 10 bytes of room). */
static inline Py_ssize_t put_varint(uint8_t *out, long long n) {
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    Py_ssize_t i = 0;
    while (z >= 0x80) {
        out[i++] = (uint8_t)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    out[i++] = (uint8_t)z;
    return i;
}

/* The end of an array that ``encode_values`` / ``encode_longs`` wrote into ``out`` (``at`` bytes so far): its 0,
 * ``out`` cut to size; ``fast`` (the items' sequence) released. */
static PyObject *end_array(PyObject *fast, PyObject *out, Py_ssize_t at) {
    ((uint8_t *)PyBytes_AS_STRING(out))[at++] = 0x00;
    Py_DECREF(fast);
    if (_PyBytes_Resize(&out, at) < 0)
        return NULL;
    return out;
}

/* encode_values(values) -> bytes: values.encode_values of a list of exact str, int (64-bit), float, bool and
 * None -- one array block, then 0; TypeError / OverflowError for anything else (values.py then answers: fastavro's
 * encoding or its error).  A live source's payload is encoded once per record with this. */
static PyObject *encode_values(PyObject *self, PyObject *arg) {
    PyObject *fast = PySequence_Fast(arg, "encode_values takes a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), size = 20;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {   /* an upper bound of the size, and the types checked */
        PyObject *v = items[i];
        if (PyUnicode_CheckExact(v)) {
            Py_ssize_t len;
            if (PyUnicode_AsUTF8AndSize(v, &len) == NULL)
                goto fail;
            size += 11 + len;
        } else if (v == Py_None || PyBool_Check(v) || PyFloat_CheckExact(v) || PyLong_CheckExact(v)) {
            size += 11;
        } else {
            PyErr_SetString(PyExc_TypeError, "not an exact scalar");
            goto fail;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        goto fail;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t at = 0;
    if (n)
        at += put_varint(o + at, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = items[i];
        if (PyUnicode_CheckExact(v)) {
            Py_ssize_t len;
            const char *u = PyUnicode_AsUTF8AndSize(v, &len);
            o[at++] = 0x08;
            at += put_varint(o + at, len);
            memcpy(o + at, u, len);
            at += len;
        } else if (v == Py_None) {
            o[at++] = 0x00;
        } else if (PyBool_Check(v)) {
            o[at++] = 0x02;
            o[at++] = v == Py_True ? 1 : 0;
        } else if (PyFloat_CheckExact(v)) {
            o[at++] = 0x06;
            if (PyFloat_Pack8(PyFloat_AS_DOUBLE(v), (char *)(o + at), 1) < 0) {
                Py_DECREF(out);
                goto fail;
            }
            at += 8;
        } else {
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow) {
                Py_DECREF(out);
                PyErr_SetString(PyExc_OverflowError, "beyond an Avro long");
                goto fail;
            }
            o[at++] = 0x04;
            at += put_varint(o + at, x);
        }
    }
    return end_array(fast, out, at);
fail:
    Py_DECREF(fast);
    return NULL;
}

/* encode_longs(xs) -> bytes: avro.put_longs's array of longs -- the count, each zig-zag varint, then 0 (an empty
 * array is the 0 alone); TypeError / OverflowError for anything but ints within 64 bits (avro.py then answers).
 * Update messages carry a count per changed key and per arrival: a C loop in place of a Python call each. */
static PyObject *encode_longs(PyObject *self, PyObject *arg) {
    PyObject *fast = PySequence_Fast(arg, "encode_longs takes a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), at = 0;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *out = PyBytes_FromStringAndSize(NULL, 10 * (n + 1) + 1);
    if (out == NULL)
        goto fail;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    if (n)
        at += put_varint(o + at, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = items[i];
        if (!PyLong_Check(v)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "not an int");
            goto fail;
        }
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            Py_DECREF(out);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_OverflowError, "beyond an Avro long");
            goto fail;
        }
        at += put_varint(o + at, x);
    }
    return end_array(fast, out, at);
fail:
    Py_DECREF(fast);
    return NULL;
}

/* A growable byte buffer. */
typedef struct {
    uint8_t *b;
    Py_ssize_t n, cap;
} Buf;

static int buf_room(Buf *b, Py_ssize_t more) {
    if (b->n + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more)
        cap *= 2;
    uint8_t *nb = PyMem_Realloc(b->b, cap);
    if (nb == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->b = nb;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_room(b, n) < 0)
        return -1;
    memcpy(b->b + b->n, s, n);
    b->n += n;
    return 0;
}

static int buf_long(Buf *b, long long v) {
    if (buf_room(b, 10) < 0)
        return -1;
    b->n += put_varint(b->b + b->n, v);
    return 0;
}

/* The 64-bit value of attribute ``name`` of ``o``, or -1 with an exception (see *err). */
static int attr_ll(PyObject *o, PyObject *name, long long *v) {
    PyObject *x = PyObject_GetAttr(o, name);
    if (x == NULL)
        return -1;
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(x, &overflow);
    Py_DECREF(x);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "beyond an Avro long");
        return -1;
    }
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int bytes_of(PyObject *o, const char **s, Py_ssize_t *n) {
    if (!PyBytes_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "names must be bytes");
        return -1;
    }
    *s = PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    return 0;
}

/* encode_groups(groups, head_pos, names, last, limit) -> [(bytes, ngroups, nresults), ...]: the groups of a
 * ResultBatch as KafkaResultSink writes them (per group: the head stream's name, the head's ts, the row's
 * (stream, id) pairs, the last stream's name and its tuples' ids), cut into runs of at least ``limit`` results
 * as its loop does.  ``names``: each stream's name as an Avro string; ``last``: the last stream's.  A run of
 * groups that share one tuples list (one head's rows, base.join) writes its ids once. */
static PyObject *encode_groups(PyObject *self, PyObject *args) {
    PyObject *groups, *names, *last;
    Py_ssize_t head_pos, limit;
    if (!PyArg_ParseTuple(args, "O!nO!On", &PyList_Type, &groups, &head_pos, &PyList_Type, &names, &last, &limit))
        return NULL;
    const char *head_s, *last_s;
    Py_ssize_t head_n, last_n, nnames = PyList_GET_SIZE(names);
    if (head_pos < 0 || head_pos >= nnames) {
        PyErr_SetString(PyExc_IndexError, "head_pos outside the names");
        return NULL;
    }
    if (bytes_of(PyList_GET_ITEM(names, head_pos), &head_s, &head_n) < 0 || bytes_of(last, &last_s, &last_n) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Buf b = {NULL, 0, 0}, ids = {NULL, 0, 0};
    PyObject *ids_of = NULL;   /* the tuples list whose ids ``ids`` holds */
    Py_ssize_t ngroups = 0, nresults = 0, g = PyList_GET_SIZE(groups);
    for (Py_ssize_t i = 0; i < g; i++) {
        PyObject *grp = PyList_GET_ITEM(groups, i);
        if (!PyTuple_Check(grp) || PyTuple_GET_SIZE(grp) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(grp, 0)) ||
            !PyList_Check(PyTuple_GET_ITEM(grp, 1))) {
            PyErr_SetString(PyExc_TypeError, "a group is (row tuple, tuples list)");
            goto fail;
        }
        PyObject *row = PyTuple_GET_ITEM(grp, 0), *tups = PyTuple_GET_ITEM(grp, 1);
        Py_ssize_t nt = PyList_GET_SIZE(tups), nr = PyTuple_GET_SIZE(row);
        if (nt == 0)
            continue;
        if (head_pos >= nr || nr > nnames) {
            PyErr_SetString(PyExc_IndexError, "a row does not fit the names");
            goto fail;
        }
        long long v;
        if (buf_put(&b, head_s, head_n) < 0 || attr_ll(PyTuple_GET_ITEM(row, head_pos), s_ts, &v) < 0 ||
            buf_long(&b, v) < 0)
            goto fail;
        Py_ssize_t present = 0;
        for (Py_ssize_t j = 0; j < nr; j++)
            present += PyTuple_GET_ITEM(row, j) != Py_None;
        if (present && buf_long(&b, present) < 0)
            goto fail;
        for (Py_ssize_t j = 0; j < nr; j++) {
            PyObject *t = PyTuple_GET_ITEM(row, j);
            if (t == Py_None)
                continue;
            const char *ns;
            Py_ssize_t nn;
            if (bytes_of(PyList_GET_ITEM(names, j), &ns, &nn) < 0 || buf_put(&b, ns, nn) < 0 ||
                attr_ll(t, s_id, &v) < 0 || buf_long(&b, v) < 0)
                goto fail;
        }
        if (buf_put(&b, "\0", 1) < 0 || buf_put(&b, last_s, last_n) < 0 || buf_long(&b, nt) < 0)
            goto fail;
        if (tups != ids_of) {
            ids.n = 0;
            ids_of = NULL;
            for (Py_ssize_t j = 0; j < nt; j++)
                if (attr_ll(PyList_GET_ITEM(tups, j), s_id, &v) < 0 || buf_long(&ids, v) < 0)
                    goto fail;
            ids_of = tups;
        }
        if (buf_put(&b, (const char *)ids.b, ids.n) < 0 || buf_put(&b, "\0", 1) < 0)
            goto fail;
        ngroups++;
        nresults += nt;
        if (nresults >= limit) {
            PyObject *item = Py_BuildValue("(y#nn)", (const char *)b.b, b.n, ngroups, nresults);
            if (item == NULL || PyList_Append(out, item) < 0) {
                Py_XDECREF(item);
                goto fail;
            }
            Py_DECREF(item);
            b.n = 0;
            ngroups = nresults = 0;
        }
    }
    if (ngroups) {
        PyObject *item = Py_BuildValue("(y#nn)", b.b ? (const char *)b.b : "", b.n, ngroups, nresults);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    PyMem_Free(b.b);
    PyMem_Free(ids.b);
    return out;
fail:
    PyMem_Free(b.b);
    PyMem_Free(ids.b);
    Py_DECREF(out);
    return NULL;
}

/* keys_bytes(keys): joinlib.runtime.algorithms.base.keys_bytes -- 1, then per key 1 and per value: a str its
 * UTF-8 length + 2, a float 9, anything else 4.  The side of the keys-or-filter choice every reduction weighs
 * each epoch for each set it sends (about 1 us a key in Python). */
static PyObject *keys_bytes(PyObject *mod, PyObject *keys) {
    PyObject *it = PyObject_GetIter(keys), *k;
    if (it == NULL)
        return NULL;
    long long n = 1;
    while ((k = PyIter_Next(it)) != NULL) {
        n += 1;
        PyObject *vf = PySequence_Fast(k, "a key must be a sequence of values");
        Py_DECREF(k);
        if (vf == NULL)
            goto fail;
        PyObject **vs = PySequence_Fast_ITEMS(vf);
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(vf); i++) {
            PyObject *v = vs[i];
            if (PyUnicode_Check(v)) {
                Py_ssize_t len;
                if (PyUnicode_IS_ASCII(v)) {
                    len = PyUnicode_GET_LENGTH(v);
                } else if (PyUnicode_AsUTF8AndSize(v, &len) == NULL) {
                    Py_DECREF(vf);
                    goto fail;
                }
                n += len + 2;
            } else {
                n += PyFloat_Check(v) ? 9 : 4;
            }
        }
        Py_DECREF(vf);
    }
    if (PyErr_Occurred())
        goto fail;
    Py_DECREF(it);
    return PyLong_FromLongLong(n);
fail:
    Py_DECREF(it);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_groups", encode_groups, METH_VARARGS,
     "encode_groups(groups, head_pos, names, last, limit) -> [(bytes, ngroups, nresults), ...]"},
    {"encode_values", encode_values, METH_O, "encode_values(values) -> bytes (values.encode_values)"},
    {"encode_longs", encode_longs, METH_O, "encode_longs(xs) -> bytes (avro.put_longs's array)"},
    {"tuples_size", tuples_size, METH_O, "tuples_size(tups) -> the sum of len(avro.encode_tuple(t))"},
    {"keys_bytes", keys_bytes, METH_O, "keys_bytes(keys) -> joinlib.runtime.algorithms.base.keys_bytes(keys)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avroc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__avroc(void) {
    if (!(s_wire = PyUnicode_InternFromString("wire")) || !(s_pos = PyUnicode_InternFromString("pos")) ||
        !(s_id = PyUnicode_InternFromString("id")) || !(s_ts = PyUnicode_InternFromString("ts")) ||
        !(s_seq = PyUnicode_InternFromString("seq")) || !(s_key = PyUnicode_InternFromString("key")) ||
        !(s_rest = PyUnicode_InternFromString("rest")))
        return NULL;
    return PyModule_Create(&module);
}
