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
    o[at++] = 0x00;
    Py_DECREF(fast);
    if (_PyBytes_Resize(&out, at) < 0)
        return NULL;
    return out;
fail:
    Py_DECREF(fast);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_values", encode_values, METH_O, "encode_values(values) -> bytes (values.encode_values)"},
    {"tuples_size", tuples_size, METH_O, "tuples_size(tups) -> the sum of len(avro.encode_tuple(t))"},
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
