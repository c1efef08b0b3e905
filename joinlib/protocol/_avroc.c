/* Avro kernels: the sizes joinlib/protocol/avro.py's encoders would write, without writing them; the arrays of
 * values and longs they write; node-to-node envelopes (wire.py's encode_envelope and envelope_size, then
 * decode_envelope; a Tup's encoding, encode_tuple, near the end).
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
#include <structmember.h>

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

/* Declined: what the writers do not take (a subclass, a value of another type, an int beyond its Avro type, a
 * sequence neither a list nor a tuple, an unset slot, a message that changed while it was written).  The entry
 * points wire.py and avro.py fall back from (envelope, envelope_size, encode_tuple) answer it as None, and the Python
 * form then writes the same bytes or raises its error; any other exception (no memory, a bug of this file)
 * propagates: falling back on it would hide a kernel bug.  A TypeError, so that encode_values' and encode_longs'
 * callers, which catch TypeError and OverflowError as their decline, keep working. */
static PyObject *Declined;

static int decline(const char *why) {
    PyErr_Clear();
    PyErr_SetString(Declined, why);
    return -1;
}

/* An entry point's answer ``r``, or None if it declined (see Declined). */
static PyObject *or_none(PyObject *r) {
    if (r == NULL && PyErr_ExceptionMatches(Declined)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return r;
}

/* getattr(o, name), an unset slot declined (the Python form raises its AttributeError). */
static PyObject *attr(PyObject *o, PyObject *name) {
    PyObject *x = PyObject_GetAttr(o, name);
    if (x == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
        decline("an unset slot");
    return x;
}

/* A writer: with ``o`` NULL it only counts the bytes (``n``); else it writes them into ``o`` (``cap`` bytes) and
 * refuses to write beyond (ValueError: what it writes changed since it was counted).  ``encode``: a tuple without
 * its encoding gets one (avro.encode_tuple, which caches it on the tuple, as the Python encoder does); else its
 * size is counted from its fields. */
typedef struct {
    uint8_t *o;
    Py_ssize_t n, cap;
    int encode;
} W;

static int w_room(W *w, Py_ssize_t k) {
    if (w->o != NULL && w->n + k > w->cap)
        return decline("the message changed while it was written");
    return 0;
}

static int w_put(W *w, const void *s, Py_ssize_t k) {
    if (w_room(w, k) < 0)
        return -1;
    if (w->o != NULL)
        memcpy(w->o + w->n, s, k);
    w->n += k;
    return 0;
}

static int w_byte(W *w, uint8_t c) {
    return w_put(w, &c, 1);
}

static int w_long(W *w, long long v) {
    Py_ssize_t k = zz_len(v);
    if (w_room(w, k) < 0)
        return -1;
    if (w->o != NULL)
        put_varint(w->o + w->n, v);
    w->n += k;
    return 0;
}

/* The value of an int within 64 bits (``int32``: within an Avro int) in *v, or -1 declined (the Python form then
 * answers: its bytes or its error). */
static int as_long(PyObject *x, long long *v, int int32) {
    if (!PyLong_Check(x))
        return decline("not an int");
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow || (int32 && (*v < INT32_MIN || *v > INT32_MAX)))
        return decline(int32 ? "beyond an Avro int" : "beyond an Avro long");
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* One Value-union item (avro._value) of an exact str (without surrogates), int (64-bit), float, bool or None;
 * declined for anything else. */
static int w_value(W *w, PyObject *v) {
    if (PyUnicode_CheckExact(v)) {
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(v, &len);
        if (u == NULL && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return decline("a str with surrogates");
        if (u == NULL || w_byte(w, 0x08) < 0 || w_long(w, len) < 0)
            return -1;
        return w_put(w, u, len);
    }
    if (v == Py_None)
        return w_byte(w, 0x00);
    if (PyBool_Check(v))
        return w_byte(w, 0x02) < 0 ? -1 : w_byte(w, v == Py_True ? 1 : 0);
    if (PyFloat_CheckExact(v)) {
        char d[8];
        if (PyFloat_Pack8(PyFloat_AS_DOUBLE(v), d, 1) < 0 || w_byte(w, 0x06) < 0)
            return -1;
        return w_put(w, d, 8);
    }
    if (!PyLong_CheckExact(v))
        return decline("not an exact scalar");
    long long x;
    if (as_long(v, &x, 0) < 0 || w_byte(w, 0x04) < 0)
        return -1;
    return w_long(w, x);
}

/* An array of Values (avro.put_key): one block of n items, then 0 (an empty array is the 0 alone). */
static int w_values(W *w, PyObject **items, Py_ssize_t n) {
    if (n && w_long(w, n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (w_value(w, items[i]) < 0)
            return -1;
    return w_byte(w, 0x00);
}

/* An array of longs (avro.put_longs): the count, each zig-zag varint, then 0. */
static int w_longs(W *w, PyObject **items, Py_ssize_t n) {
    if (n && w_long(w, n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long x;
        if (as_long(items[i], &x, 0) < 0 || w_long(w, x) < 0)
            return -1;
    }
    return w_byte(w, 0x00);
}

typedef int (*Put)(W *, PyObject *);

/* The bytes ``put`` writes of ``x``: one pass counts them, a second writes them into a bytes object of that size
 * (declined if it does not fill it exactly: ``x`` changed in between).  ``encode``: see W. */
static PyObject *written(Put put, PyObject *x, int encode) {
    W count = {NULL, 0, 0, encode};
    if (put(&count, x) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, count.n);
    if (out == NULL)
        return NULL;
    W w = {(uint8_t *)PyBytes_AS_STRING(out), 0, count.n, encode};
    if (put(&w, x) < 0 || w.n != count.n) {
        if (!PyErr_Occurred())
            decline("the message changed while it was written");
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static int put_fast_values(W *w, PyObject *fast) {
    return w_values(w, PySequence_Fast_ITEMS(fast), PySequence_Fast_GET_SIZE(fast));
}

static int put_fast_longs(W *w, PyObject *fast) {
    return w_longs(w, PySequence_Fast_ITEMS(fast), PySequence_Fast_GET_SIZE(fast));
}

/* ``put`` of the items of any sequence (a list made of it if it is neither a list nor a tuple). */
static PyObject *written_items(Put put, PyObject *arg) {
    PyObject *fast = PySequence_Fast(arg, "takes a sequence");
    if (fast == NULL)
        return NULL;
    PyObject *out = written(put, fast, 0);
    Py_DECREF(fast);
    return out;
}

/* encode_values(values) -> bytes: values.encode_values of a list of exact str, int (64-bit), float, bool and
 * None -- one array block, then 0; Declined (a TypeError) for anything else (values.py then answers: fastavro's
 * encoding or its error).  A live source's payload is encoded once per record with this. */
static PyObject *encode_values(PyObject *self, PyObject *arg) {
    return written_items(put_fast_values, arg);
}

/* encode_longs(xs) -> bytes: avro.put_longs's array of longs -- the count, each zig-zag varint, then 0 (an empty
 * array is the 0 alone); Declined (a TypeError) for anything but ints within 64 bits (avro.py then answers).
 * Update messages carry a count per changed key and per arrival: a C loop in place of a Python call each. */
static PyObject *encode_longs(PyObject *self, PyObject *arg) {
    return written_items(put_fast_longs, arg);
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

/* ------------------------------------------------------------------------------------------------- envelopes
 * envelope(env) -> bytes and envelope_size(env) -> int: wire.encode_envelope's bytes and their number, for the
 * classes wire.py registers (setup_envelopes) exactly -- a subclass, a value of another type, an int beyond its
 * Avro type or a list that is neither a list nor a tuple is declined (None: see Declined), and wire.py's Python
 * form then writes the same bytes or raises its own error.  Why: every message a plan sends is encoded on Kafka,
 * and sized in the simulator (the bytes each link carries); in Python that was about 3 us for a key set of a few
 * keys and 9 us for a batch of ten tuples.  The size is counted without writing: a tuple's cached encoding by its
 * length, one without by its fields (not encoded, not cached). */

enum { K_TUPLE_BATCH, K_KEY_BATCH, K_EXPIRY_UPDATE, K_DJA_UPDATE, K_WINDOW_SNAPSHOT, K_KEY_FILTER, K_SHIPPED_BATCH,
       NKINDS };
static PyObject *envelope_type, *tup_type, *body_types[NKINDS], *encode_tuple_fn;
static long long body_branch[NKINDS];
static PyObject *s_part, *s_gen, *s_flow, *s_epoch, *s_body, *s_rows, *s_keys, *s_expired, *s_arrivals, *s_vj,
    *s_vc, *s_sf, *s_base, *s_tuples, *s_counts, *s_back, *s_live, *s_bits, *s_hashes, *s_n, *s_ages;

/* The items of a list or a tuple, what the envelope writers take (declined for anything else). */
static int items_of(PyObject *seq, PyObject ***items, Py_ssize_t *n) {
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq))
        return decline("not a list or a tuple");
    *items = PySequence_Fast_ITEMS(seq);
    *n = PySequence_Fast_GET_SIZE(seq);
    return 0;
}

static int put_long(W *w, PyObject *x) {
    long long v;
    return as_long(x, &v, 0) < 0 ? -1 : w_long(w, v);
}

static int put_int(W *w, PyObject *x) {
    long long v;
    return as_long(x, &v, 1) < 0 ? -1 : w_long(w, v);
}

static int put_longs(W *w, PyObject *xs) {
    PyObject **items;
    Py_ssize_t n;
    return items_of(xs, &items, &n) < 0 ? -1 : w_longs(w, items, n);
}

static int put_key(W *w, PyObject *key) {
    PyObject **items;
    Py_ssize_t n;
    return items_of(key, &items, &n) < 0 ? -1 : w_values(w, items, n);
}

static int put_bytes(W *w, PyObject *b) {
    if (!PyBytes_CheckExact(b))
        return decline("not bytes");
    return w_put(w, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
}

/* An array of ``put`` of each item of a list or tuple (avro.put_keys, put_tups, a TupleBatch's rows): the count if
 * any, the items, 0.  An item is held while it is written (writing a tuple may call encode_tuple), and a list's
 * length read again each time. */
static int put_array(W *w, PyObject *seq, Put put) {
    PyObject **items;
    Py_ssize_t n;
    if (items_of(seq, &items, &n) < 0 || (n && w_long(w, n) < 0))
        return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(x);
        int r = put(w, x);
        Py_DECREF(x);
        if (r < 0)
            return -1;
    }
    return w_byte(w, 0x00);
}

static int put_keys(W *w, PyObject *keys) {
    return put_array(w, keys, put_key);
}

typedef struct {
    PyObject **name;   /* the attribute written; NULL: ``put`` writes the object itself */
    Put put;
} Field;

static int put_fields(W *w, PyObject *o, const Field *f) {
    for (; f->put != NULL; f++) {
        if (f->name == NULL) {
            if (f->put(w, o) < 0)
                return -1;
            continue;
        }
        PyObject *x = attr(o, *f->name);
        if (x == NULL)
            return -1;
        int r = f->put(w, x);
        Py_DECREF(x);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* A tuple not encoded yet, from its fields (avro.encode_tuple): pos, id, ts, seq, the key's Values, the rest. */
static int put_rest(W *w, PyObject *rest) {
    if (!PyBytes_CheckExact(rest))
        return decline("a tuple's rest must be bytes");
    return w_long(w, PyBytes_GET_SIZE(rest)) < 0 ? -1 : put_bytes(w, rest);
}

static const Field TUP_FIELDS[] = {{&s_pos, put_int}, {&s_id, put_long}, {&s_ts, put_long}, {&s_seq, put_long},
                                   {&s_key, put_key}, {&s_rest, put_rest}, {NULL, NULL}};

static PyObject *tup_wire(PyObject *t);

/* One joinlib.BaseTuple (a Tup exactly): its cached encoding; without one, when encoding, the kernel's (tup_wire,
 * which caches it; what it declines avro.encode_tuple's), else its fields. */
static int put_tup(W *w, PyObject *t) {
    if ((PyObject *)Py_TYPE(t) != tup_type)
        return decline("not a Tup");
    PyObject *wire = attr(t, s_wire);
    if (wire == NULL)
        return -1;
    if (wire == Py_None) {
        Py_DECREF(wire);
        if (!w->encode)
            return put_fields(w, t, TUP_FIELDS);
        if (w->o != NULL)   /* encoded by the counting pass */
            return decline("the message changed while it was written");
        if ((wire = tup_wire(t)) == NULL) {   /* declined: avro.encode_tuple's answer (its bytes or its error) */
            if (!PyErr_ExceptionMatches(Declined))
                return -1;
            PyErr_Clear();
            if ((wire = PyObject_CallOneArg(encode_tuple_fn, t)) == NULL)
                return -1;   /* its error: the Python form's for this tuple */
        }
    }
    int r = put_bytes(w, wire);
    Py_DECREF(wire);
    return r;
}

static int put_tups(W *w, PyObject *tups) {
    return put_array(w, tups, put_tup);
}

static int put_rows(W *w, PyObject *rows) {
    return put_array(w, rows, put_tups);
}

/* A KeyFilter's ``bloom`` union (wire._put_key_filter): the Ages record when there are ages, else null without
 * bits, else the Bloom record (bits, hashes, n). */
static int put_bloom(W *w, PyObject *body) {
    PyObject *ages = attr(body, s_ages), **items;
    Py_ssize_t n;
    if (ages == NULL)
        return -1;
    if (items_of(ages, &items, &n) < 0 || (n && (w_byte(w, 0x04) < 0 || w_longs(w, items, n) < 0))) {
        Py_DECREF(ages);
        return -1;
    }
    Py_DECREF(ages);
    if (n)
        return 0;
    PyObject *bits = attr(body, s_bits);
    if (bits == NULL)
        return -1;
    int r;
    if (!PyBytes_CheckExact(bits)) {
        r = decline("a Bloom filter's bits must be bytes");
    } else if (PyBytes_GET_SIZE(bits) == 0) {
        r = w_byte(w, 0x00);
    } else {
        static const Field rest[] = {{&s_hashes, put_int}, {&s_n, put_long}, {NULL, NULL}};
        r = (w_byte(w, 0x02) < 0 || w_long(w, PyBytes_GET_SIZE(bits)) < 0 || put_bytes(w, bits) < 0 ||
             put_fields(w, body, rest) < 0) ? -1 : 0;
    }
    Py_DECREF(bits);
    return r;
}

/* The fields of each body class after its union branch, in schema order. */
static const Field BODY_FIELDS[NKINDS][5] = {
    [K_TUPLE_BATCH] = {{&s_rows, put_rows}},
    [K_KEY_BATCH] = {{&s_keys, put_keys}},
    [K_EXPIRY_UPDATE] = {{&s_expired, put_long}, {&s_arrivals, put_longs}},
    [K_DJA_UPDATE] = {{&s_vj, put_keys}, {&s_vc, put_longs}, {&s_sf, put_tups}, {&s_arrivals, put_longs}},
    [K_WINDOW_SNAPSHOT] = {{&s_base, put_long}, {&s_tuples, put_tups}, {&s_keys, put_keys}, {&s_counts, put_longs}},
    [K_KEY_FILTER] = {{&s_back, put_long}, {&s_live, put_long}, {&s_keys, put_keys}, {NULL, put_bloom}},
    [K_SHIPPED_BATCH] = {{&s_tuples, put_tups}, {&s_arrivals, put_longs}},
};

static int put_body(W *w, PyObject *body) {
    int k = 0;
    while (k < NKINDS && (PyObject *)Py_TYPE(body) != body_types[k])
        k++;
    if (k == NKINDS)
        return decline("not a body class the kernel writes");
    return w_long(w, body_branch[k]) < 0 ? -1 : put_fields(w, body, BODY_FIELDS[k]);
}

static const Field ENVELOPE_FIELDS[] = {{&s_part, put_int}, {&s_gen, put_int}, {&s_flow, put_int},
                                        {&s_epoch, put_long}, {&s_body, put_body}, {NULL, NULL}};

static int put_envelope(W *w, PyObject *env) {
    if ((PyObject *)Py_TYPE(env) != envelope_type)
        return decline("not an Envelope (or setup_envelopes was not called)");
    return put_fields(w, env, ENVELOPE_FIELDS);
}

/* envelope(env) -> bytes: wire.encode_envelope(env), or None: declined. */
static PyObject *envelope(PyObject *mod, PyObject *env) {
    return or_none(written(put_envelope, env, 1));
}

/* envelope_size(env) -> int: len(wire.encode_envelope(env)), nothing written (nor any tuple encoded); or None:
 * declined. */
static PyObject *envelope_size(PyObject *mod, PyObject *env) {
    W w = {NULL, 0, 0, 0};
    return or_none(put_envelope(&w, env) < 0 ? NULL : PyLong_FromSsize_t(w.n));
}

/* ------------------------------------------------------------------------------------------------- decoding
 * decode_envelope(data, src, dst) -> Envelope | None: wire.decode_envelope's answer for the well-formed messages
 * wire.py's encoders write: the same classes with the same fields (a TupleBatch's tuples with their bytes as
 * ``wire``, as avro._rtup leaves them; the other bodies' tuples without, as wire's fastavro reads leave them; keys
 * as tuples, Bloom bits as bytes, fresh lists).  None: declined -- anything malformed (truncated, a bad union
 * branch, a negative or too long length, invalid UTF-8, trailing bytes, a Bloom filter or ages the Python form
 * refuses) or merely unusual (a varint beyond 64 bits, an int field beyond an Avro int, a negative array block
 * count, a boolean byte other than 0 or 1: fastavro and the hand decoder read some of these differently), and
 * data that is not bytes.  wire.py then decodes it in Python, which answers or raises as it always did: the
 * rejections of node/run_inputs.py name the same error.  Why: a node decodes every message it receives; through
 * fastavro that was about 30 us for a key set of ten keys and 60 us for a batch of ten 1,250-byte tuples.
 * Objects are made as the classes' __init__ makes them: allocated, then every slot set (setup_envelopes checks
 * that the slots are exactly those). */

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))
enum { NTUP = 8, NENV = 8, MAXFIELDS = 7 };
static const char *const TUP_SLOTS[NTUP] = {"pos", "id", "ts", "seq", "key", "rest", "wire", "idb"};
static const char *const ENV_SLOTS[NENV] = {"src", "dst", "flow", "epoch", "body", "part", "gen", "query"};
static const char *const BODY_SLOTS[NKINDS][MAXFIELDS + 1] = {
    [K_TUPLE_BATCH] = {"rows"},
    [K_KEY_BATCH] = {"keys"},
    [K_EXPIRY_UPDATE] = {"expired", "arrivals"},
    [K_DJA_UPDATE] = {"vj", "vc", "sf", "arrivals"},
    [K_WINDOW_SNAPSHOT] = {"base", "tuples", "keys", "counts"},
    [K_KEY_FILTER] = {"back", "live", "keys", "bits", "hashes", "n", "ages"},
    [K_SHIPPED_BATCH] = {"tuples", "arrivals"},
};
static Py_ssize_t tup_off[NTUP], env_off[NENV], body_off[NKINDS][MAXFIELDS];
static long long max_hashes;
static int decoding;   /* setup_envelopes checked the classes' slots */

/* The offsets of ``names`` (``n``, in order) in instances of ``type``; -1 with an exception unless they are exactly
 * its slots (writable object slots, no others, no __dict__) and it is made by object.__new__. */
static int slot_offsets(PyObject *type, const char *const *names, int n, Py_ssize_t *off) {
    PyTypeObject *tp = (PyTypeObject *)type;
    if (tp->tp_new != PyBaseObject_Type.tp_new || tp->tp_dictoffset != 0 || tp->tp_alloc == NULL) {
        PyErr_Format(PyExc_TypeError, "%s: not a plain class with __slots__", tp->tp_name);
        return -1;
    }
    Py_ssize_t members = 0;
    PyObject *mro = tp->tp_mro;
    for (Py_ssize_t i = 0; mro != NULL && i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *dict = ((PyTypeObject *)PyTuple_GET_ITEM(mro, i))->tp_dict, *k, *v;
        Py_ssize_t at = 0;
        while (dict != NULL && PyDict_Next(dict, &at, &k, &v))
            members += PyObject_TypeCheck(v, &PyMemberDescr_Type);
    }
    if (members != n) {
        PyErr_Format(PyExc_TypeError, "%s has %zd slots, the decoder sets %d", tp->tp_name, members, n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString(type, names[i]);
        if (d == NULL)
            return -1;
        int ok = PyObject_TypeCheck(d, &PyMemberDescr_Type);
        if (ok) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            ok = m->type == T_OBJECT_EX && !(m->flags & READONLY) && m->offset > 0;
            off[i] = m->offset;
        }
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a writable slot", tp->tp_name, names[i]);
            return -1;
        }
    }
    return 0;
}

/* A new instance of ``type`` with its ``n`` slots (offsets ``off``) set to ``v``, which it takes; NULL if any of
 * ``v`` is NULL (an exception was set making it) or the allocation fails (the others released). */
static PyObject *made(PyObject *type, const Py_ssize_t *off, PyObject **v, int n) {
    PyObject *o = NULL;
    int i;
    for (i = 0; i < n && v[i] != NULL; i++)
        ;
    if (i == n)
        o = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 0);
    for (i = 0; i < n; i++) {
        if (o != NULL)
            SLOT(o, off[i]) = v[i];
        else
            Py_XDECREF(v[i]);
    }
    return o;
}

/* The reader over a message's bytes.  The readers answer NULL (or -1) without an exception for what they
 * decline, with one for an error of their own (no memory). */
typedef struct {
    const uint8_t *b;
    Py_ssize_t i, n;
} R;

/* A long (zig-zag varint) within 64 bits. */
static int r_long(R *r, long long *v) {
    uint64_t z = 0;
    for (int shift = 0;; shift += 7) {
        if (r->i >= r->n)
            return -1;
        uint8_t c = r->b[r->i++];
        if (shift == 63 && c > 1)   /* beyond 64 bits */
            return -1;
        z |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80)
            break;
        if (shift == 63)
            return -1;
    }
    *v = (long long)((z >> 1) ^ (0 - (z & 1)));
    return 0;
}

static int r_int(R *r, long long *v) {
    return r_long(r, v) < 0 || *v < INT32_MIN || *v > INT32_MAX ? -1 : 0;
}

/* A length (of bytes, a string, an array block) that the rest of the message can hold: items are a byte at least. */
static int r_len(R *r, Py_ssize_t *len) {
    long long v;
    if (r_long(r, &v) < 0 || v < 0 || v > r->n - r->i)
        return -1;
    *len = (Py_ssize_t)v;
    return 0;
}

static PyObject *r_bytes(R *r) {
    Py_ssize_t len;
    if (r_len(r, &len) < 0)
        return NULL;
    r->i += len;
    return PyBytes_FromStringAndSize((const char *)r->b + r->i - len, len);
}

static PyObject *r_longobj(R *r) {
    long long v;
    return r_long(r, &v) < 0 ? NULL : PyLong_FromLongLong(v);
}

/* A Value-union item: null, boolean (0 or 1), long, double, string (strict UTF-8). */
static PyObject *r_value(R *r) {
    long long br;
    if (r_long(r, &br) < 0)
        return NULL;
    switch (br) {
    case 0:
        Py_RETURN_NONE;
    case 1:
        if (r->i >= r->n || r->b[r->i] > 1)
            return NULL;
        return PyBool_FromLong(r->b[r->i++]);
    case 2:
        return r_longobj(r);
    case 3: {
        if (r->n - r->i < 8)
            return NULL;
        double d = PyFloat_Unpack8((const char *)r->b + r->i, 1);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
        r->i += 8;
        return PyFloat_FromDouble(d);
    }
    case 4: {
        Py_ssize_t len;
        if (r_len(r, &len) < 0)
            return NULL;
        PyObject *s = PyUnicode_DecodeUTF8((const char *)r->b + r->i, len, NULL);
        if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            PyErr_Clear();   /* declined: the Python form raises its error */
        r->i += len;
        return s;
    }
    default:
        return NULL;
    }
}

typedef PyObject *(*Item)(R *);

/* An array of ``item``s: blocks of a count then the items, up to a count of 0; a list, or (``tuple``) a tuple. */
static PyObject *r_array(R *r, Item item, int tuple) {
    Py_ssize_t n;
    if (r_len(r, &n) < 0)
        return NULL;
    if (n == 0)
        return tuple ? PyTuple_New(0) : PyList_New(0);
    PyObject *out = tuple ? PyTuple_New(n) : PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = item(r);
        if (x == NULL)
            goto fail;
        if (tuple)
            PyTuple_SET_ITEM(out, i, x);
        else
            PyList_SET_ITEM(out, i, x);
    }
    if (r_len(r, &n) < 0)
        goto fail;
    if (n == 0)
        return out;
    if (tuple) {   /* more blocks (not what wire.py writes): a list, then its tuple */
        PyObject *list = PySequence_List(out);
        Py_SETREF(out, list);
        if (out == NULL)
            return NULL;
    }
    while (n) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = item(r);
            if (x == NULL)
                goto fail;
            int e = PyList_Append(out, x);
            Py_DECREF(x);
            if (e < 0)
                goto fail;
        }
        if (r_len(r, &n) < 0)
            goto fail;
    }
    if (tuple)
        Py_SETREF(out, PyList_AsTuple(out));
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *r_key(R *r) {
    return r_array(r, r_value, 1);
}

static PyObject *r_keys(R *r) {
    return r_array(r, r_key, 0);
}

static PyObject *r_longs(R *r) {
    return r_array(r, r_longobj, 0);
}

/* A joinlib.BaseTuple as a Tup; ``keep``: with its bytes as ``wire`` (avro._rtup), else without (tup_of_record). */
static PyObject *r_tup(R *r, int keep) {
    Py_ssize_t start = r->i, len;
    long long pos, id, ts, seq;
    if (r_int(r, &pos) < 0 || r_long(r, &id) < 0 || r_long(r, &ts) < 0 || r_long(r, &seq) < 0)
        return NULL;
    PyObject *key = r_key(r);
    if (key == NULL)
        return NULL;
    if (r_len(r, &len) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    const char *at = (const char *)r->b + r->i;
    r->i += len;
    PyObject *v[NTUP] = {PyLong_FromLongLong(pos), PyLong_FromLongLong(id), PyLong_FromLongLong(ts),
                         PyLong_FromLongLong(seq), key, PyBytes_FromStringAndSize(at, len),
                         keep ? PyBytes_FromStringAndSize((const char *)r->b + start, r->i - start) : Py_NewRef(Py_None),
                         Py_NewRef(Py_None)};
    return made(tup_type, tup_off, v, NTUP);
}

static PyObject *r_tup_wire(R *r) {
    return r_tup(r, 1);
}

static PyObject *r_tup_plain(R *r) {
    return r_tup(r, 0);
}

static PyObject *r_row(R *r) {
    return r_array(r, r_tup_wire, 1);
}

/* The fields of a KeyFilter's ``bloom`` union into v[0..3] (bits, hashes, n, ages), as wire._bloom_of answers:
 * null: b"", 0, 0, []; the Bloom record: its fields (hashes within 1..max_hashes when there are bits), []; Ages:
 * b"", 0, 0 and the runs, (age >= 0, count >= 1) pairs. */
static int r_bloom(R *r, PyObject **v) {
    long long br, hashes = 0, n = 0;
    PyObject *bits = NULL, *ages = NULL;
    if (r_long(r, &br) < 0)
        return -1;
    if (br == 1) {
        if ((bits = r_bytes(r)) == NULL)
            return -1;
        if (r_int(r, &hashes) < 0 || r_long(r, &n) < 0 ||
            (PyBytes_GET_SIZE(bits) && (hashes < 1 || hashes > max_hashes))) {
            Py_DECREF(bits);
            return -1;
        }
    } else if (br == 2) {
        if ((ages = r_longs(r)) == NULL)
            return -1;
        Py_ssize_t k = PyList_GET_SIZE(ages);
        int ok = k % 2 == 0;
        for (Py_ssize_t i = 0; ok && i < k; i++) {
            long long x = PyLong_AsLongLong(PyList_GET_ITEM(ages, i));
            ok = i % 2 ? x >= 1 : x >= 0;
        }
        if (!ok) {
            Py_DECREF(ages);
            return -1;
        }
    } else if (br != 0) {
        return -1;
    }
    v[0] = bits != NULL ? bits : PyBytes_FromStringAndSize(NULL, 0);
    v[1] = PyLong_FromLongLong(hashes);
    v[2] = PyLong_FromLongLong(n);
    v[3] = ages != NULL ? ages : PyList_New(0);
    return 0;
}

static PyObject *r_tups(R *r) {
    return r_array(r, r_tup_plain, 0);
}

static PyObject *r_rows(R *r) {
    return r_array(r, r_row, 0);
}

/* The readers of each body class's fields after its union branch, in schema order; then a KeyFilter's bloom. */
static const Item BODY_READERS[NKINDS][4] = {
    [K_TUPLE_BATCH] = {r_rows},
    [K_KEY_BATCH] = {r_keys},
    [K_EXPIRY_UPDATE] = {r_longobj, r_longs},
    [K_DJA_UPDATE] = {r_keys, r_longs, r_tups, r_longs},
    [K_WINDOW_SNAPSHOT] = {r_longobj, r_tups, r_keys, r_longs},
    [K_KEY_FILTER] = {r_longobj, r_longobj, r_keys},
    [K_SHIPPED_BATCH] = {r_tups, r_longs},
};

/* A body of kind ``k`` (its branch read), as wire.py's Python form makes it. */
static PyObject *r_body(R *r, int k) {
    PyObject *v[MAXFIELDS] = {NULL};
    int n = 0;
    for (; n < 4 && BODY_READERS[k][n] != NULL; n++)
        if ((v[n] = BODY_READERS[k][n](r)) == NULL)
            goto fail;
    if (k == K_KEY_FILTER) {
        if (r_bloom(r, v + n) < 0)
            goto fail;
        n += 4;
    }
    return made(body_types[k], body_off[k], v, n);
fail:
    for (int i = 0; i < MAXFIELDS; i++)
        Py_XDECREF(v[i]);
    return NULL;
}

/* decode_envelope(data, src, dst) -> Envelope, or None: declined (see above). */
static PyObject *decode_envelope(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "decode_envelope(data, src, dst)");
        return NULL;
    }
    if (!decoding || !PyBytes_CheckExact(args[0]))
        Py_RETURN_NONE;
    R r = {(const uint8_t *)PyBytes_AS_STRING(args[0]), 0, PyBytes_GET_SIZE(args[0])};
    long long part, gen, flow, epoch, br;
    int k = 0;
    if (r_int(&r, &part) < 0 || r_int(&r, &gen) < 0 || r_int(&r, &flow) < 0 || r_long(&r, &epoch) < 0 ||
        r_long(&r, &br) < 0)
        Py_RETURN_NONE;
    while (k < NKINDS && body_branch[k] != br)
        k++;
    PyObject *body = k < NKINDS ? r_body(&r, k) : NULL;
    if (body != NULL && r.i != r.n)   /* trailing bytes */
        Py_CLEAR(body);
    if (body == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *v[NENV] = {Py_NewRef(args[1]), Py_NewRef(args[2]), PyLong_FromLongLong(flow),
                         PyLong_FromLongLong(epoch), body, PyLong_FromLongLong(part), PyLong_FromLongLong(gen),
                         PyUnicode_New(0, 0)};
    return made(envelope_type, env_off, v, NENV);
}

/* ------------------------------------------------------------------------------------------------- tuples
 * encode_tuple(t) -> bytes: avro.encode_tuple(t) of a Tup exactly: its cached encoding (``wire``, the same object)
 * if it has one, else the joinlib.BaseTuple encoding, which is cached in ``wire`` -- pos (an Avro int), id, ts, seq
 * (longs), the key (an array of Values: one block, then 0), the rest (its length, its bytes).  Declined (None),
 * nothing cached: a subclass of Tup, a str with surrogates, an unset
 * slot, an int field that is not an int or a bool exactly, a key neither a tuple nor a list, a rest not bytes, a
 * value w_value does not take, an int beyond its Avro type; avro.py then answers in Python (its bytes or its error).
 * Why: a leaf node encodes every source tuple it ships; in Python (avro._tup_head) that was ~3 % of its CPU. */

enum { T_POS, T_ID, T_TS, T_SEQ, T_KEY, T_REST, T_WIRE };

static int w_tup(W *w, PyObject *t) {
    PyObject **items;
    Py_ssize_t n;
    for (int i = T_POS; i <= T_REST; i++)
        if (SLOT(t, tup_off[i]) == NULL)
            return decline("a tuple's slot is not set");
    for (int i = T_POS; i <= T_SEQ; i++) {
        PyObject *x = SLOT(t, tup_off[i]);
        long long v;
        if (!PyLong_CheckExact(x) && !PyBool_Check(x))
            return decline("not an int exactly");
        if (as_long(x, &v, i == T_POS) < 0 || w_long(w, v) < 0)
            return -1;
    }
    if (items_of(SLOT(t, tup_off[T_KEY]), &items, &n) < 0 || w_values(w, items, n) < 0)
        return -1;
    return put_rest(w, SLOT(t, tup_off[T_REST]));
}

/* avro.encode_tuple(t) by the kernel (see above): a new reference, or NULL with an exception (Declined: declined). */
static PyObject *tup_wire(PyObject *t) {
    if (tup_type == NULL || (PyObject *)Py_TYPE(t) != tup_type) {
        decline("not a Tup (or setup_tuples was not called)");
        return NULL;
    }
    PyObject *wire = SLOT(t, tup_off[T_WIRE]);
    if (wire == NULL) {
        decline("a tuple's slot is not set");
        return NULL;
    }
    if (wire != Py_None)
        return Py_NewRef(wire);
    if ((wire = written(w_tup, t, 0)) == NULL)
        return NULL;
    Py_XSETREF(SLOT(t, tup_off[T_WIRE]), Py_NewRef(wire));
    return wire;
}

/* encode_tuple(t) -> bytes: avro.encode_tuple(t), or None: declined. */
static PyObject *encode_tuple(PyObject *mod, PyObject *t) {
    return or_none(tup_wire(t));
}

/* setup_tuples(Tup): the class encode_tuple takes (and decode_envelope makes); TypeError (nothing set up) if its
 * slots are not those the decoder sets. */
static PyObject *setup_tuples(PyObject *mod, PyObject *tup_t) {
    Py_ssize_t toff[NTUP];
    if (!PyType_Check(tup_t)) {
        PyErr_SetString(PyExc_TypeError, "setup_tuples takes the Tup class");
        return NULL;
    }
    if (slot_offsets(tup_t, TUP_SLOTS, NTUP, toff) < 0)
        return NULL;
    Py_XSETREF(tup_type, Py_NewRef(tup_t));
    memcpy(tup_off, toff, sizeof toff);
    Py_RETURN_NONE;
}

/* setup_envelopes(Envelope, Tup, bodies, branches, encode_tuple, max_hashes): the classes the writers take and the
 * decoder makes (``bodies`` in the order TupleBatch, KeyBatch, ExpiryUpdate, DjaUpdate, WindowSnapshot, KeyFilter,
 * ShippedBatch), each body's union branch, avro.encode_tuple and the most hash functions a Bloom filter may have.
 * TypeError (nothing set up) if a class's slots are not those the decoder sets. */
static PyObject *setup_envelopes(PyObject *mod, PyObject *args) {
    PyObject *env_t, *tup_t, *bodies, *branches, *enc;
    long long hashes;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OL", &PyType_Type, &env_t, &PyType_Type, &tup_t, &PyTuple_Type, &bodies,
                          &PyTuple_Type, &branches, &enc, &hashes))
        return NULL;
    if (PyTuple_GET_SIZE(bodies) != NKINDS || PyTuple_GET_SIZE(branches) != NKINDS || !PyCallable_Check(enc)) {
        PyErr_SetString(PyExc_ValueError,
                        "setup_envelopes takes 7 body classes, 7 branches, encode_tuple and max_hashes");
        return NULL;
    }
    long long br[NKINDS];
    Py_ssize_t toff[NTUP], eoff[NENV], boff[NKINDS][MAXFIELDS];
    for (int k = 0; k < NKINDS; k++) {
        PyObject *cls = PyTuple_GET_ITEM(bodies, k);
        int nf = 0;
        while (nf < MAXFIELDS && BODY_SLOTS[k][nf] != NULL)
            nf++;
        if (!PyType_Check(cls)) {
            PyErr_SetString(PyExc_TypeError, "a body class is not a class");
            return NULL;
        }
        if (as_long(PyTuple_GET_ITEM(branches, k), &br[k], 1) < 0 || slot_offsets(cls, BODY_SLOTS[k], nf, boff[k]) < 0)
            return NULL;
    }
    if (slot_offsets(tup_t, TUP_SLOTS, NTUP, toff) < 0 || slot_offsets(env_t, ENV_SLOTS, NENV, eoff) < 0)
        return NULL;
    for (int k = 0; k < NKINDS; k++) {
        Py_XSETREF(body_types[k], Py_NewRef(PyTuple_GET_ITEM(bodies, k)));
        body_branch[k] = br[k];
    }
    Py_XSETREF(envelope_type, Py_NewRef(env_t));
    Py_XSETREF(tup_type, Py_NewRef(tup_t));
    Py_XSETREF(encode_tuple_fn, Py_NewRef(enc));
    memcpy(tup_off, toff, sizeof toff);
    memcpy(env_off, eoff, sizeof eoff);
    memcpy(body_off, boff, sizeof boff);
    max_hashes = hashes;
    decoding = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode_groups", encode_groups, METH_VARARGS,
     "encode_groups(groups, head_pos, names, last, limit) -> [(bytes, ngroups, nresults), ...]"},
    {"encode_values", encode_values, METH_O, "encode_values(values) -> bytes (values.encode_values)"},
    {"encode_longs", encode_longs, METH_O, "encode_longs(xs) -> bytes (avro.put_longs's array)"},
    {"tuples_size", tuples_size, METH_O, "tuples_size(tups) -> the sum of len(avro.encode_tuple(t))"},
    {"encode_tuple", encode_tuple, METH_O,
     "encode_tuple(t) -> bytes (avro.encode_tuple: cached in t.wire), or None: declined"},
    {"setup_tuples", setup_tuples, METH_O, "setup_tuples(Tup): the class encode_tuple takes"},
    {"keys_bytes", keys_bytes, METH_O, "keys_bytes(keys) -> joinlib.runtime.algorithms.base.keys_bytes(keys)"},
    {"envelope", envelope, METH_O, "envelope(env) -> bytes (wire.encode_envelope), or None: declined"},
    {"envelope_size", envelope_size, METH_O,
     "envelope_size(env) -> len(wire.encode_envelope(env)), or None: declined"},
    {"setup_envelopes", setup_envelopes, METH_VARARGS,
     "setup_envelopes(Envelope, Tup, bodies, branches, encode_tuple, max_hashes): the classes envelope() writes "
     "and decode_envelope() makes"},
    {"decode_envelope", (PyCFunction)(void (*)(void))decode_envelope, METH_FASTCALL,
     "decode_envelope(data, src, dst) -> Envelope, or None: declined (wire.decode_envelope)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avroc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__avroc(void) {
    static const char *const names[] = {"wire", "pos", "id", "ts", "seq", "key", "rest", "part", "gen", "flow",
                                        "epoch", "body", "rows", "keys", "expired", "arrivals", "vj", "vc", "sf",
                                        "base", "tuples", "counts", "back", "live", "bits", "hashes", "n", "ages"};
    PyObject **const slots[] = {&s_wire, &s_pos, &s_id, &s_ts, &s_seq, &s_key, &s_rest, &s_part, &s_gen, &s_flow,
                                &s_epoch, &s_body, &s_rows, &s_keys, &s_expired, &s_arrivals, &s_vj, &s_vc, &s_sf,
                                &s_base, &s_tuples, &s_counts, &s_back, &s_live, &s_bits, &s_hashes, &s_n, &s_ages};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*slots[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return NULL;
    if (Declined == NULL
            && (Declined = PyErr_NewException("joinlib.protocol._avroc.Declined", PyExc_TypeError, NULL)) == NULL)
        return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod != NULL && PyModule_AddObjectRef(mod, "Declined", Declined) < 0)
        Py_CLEAR(mod);
    return mod;
}
