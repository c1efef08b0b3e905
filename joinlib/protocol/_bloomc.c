/* Bloom filter kernels: the loops of joinlib/protocol/bloom.py's array form, in C.
 *
 * Why C: a reduction tests a handful of new keys against every live filter, and each new filter
 * against every pending key, every epoch.  The sizes are small (about 10 keys x 30 filters, or 500
 * keys x 1 filter), so numpy spends most of its time in per-call overhead and in an integer
 * modulo it cannot vectorise; a loop that stops at a key's first unset bit does the same work in
 * about a tenth of the time.  The answers are exactly Matcher.has's: bit p of a filter of m bits is
 * bit p % 8 of byte p / 8, and a key is held when the bits of its first k hash words (mod m) are all
 * set.  A key's hash words are its 64-byte BLAKE2b digest read as sixteen little-endian uint32; the
 * module refuses to load on a big-endian machine (bloom.py then keeps its numpy form).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define WORDS 16

static inline int held(const uint8_t *bits, uint32_t m, int k, const uint32_t *h) {
    for (int i = 0; i < k; i++) {
        uint32_t p = h[i] % m;
        if (!((bits[p >> 3] >> (p & 7)) & 1))
            return 0;
    }
    return 1;
}

/* The hash rows of a buffer: n rows of sixteen uint32 words. */
static int rows_of(Py_buffer *b, Py_ssize_t *n) {
    if (b->len % (WORDS * 4)) {
        PyErr_SetString(PyExc_ValueError, "hash rows must be whole rows of sixteen uint32 words");
        return -1;
    }
    *n = b->len / (WORDS * 4);
    return 0;
}

static int check_filter(Py_ssize_t nbytes, int k) {
    if (nbytes <= 0 || k < 1 || k > WORDS) {
        PyErr_SetString(PyExc_ValueError, "a filter needs at least one byte and 1..16 hash functions");
        return -1;
    }
    return 0;
}

/* filter_bits(digests, m, k) -> bytes: the m bits with each key's first k words (mod m) set. */
static PyObject *filter_bits(PyObject *self, PyObject *args) {
    Py_buffer d;
    Py_ssize_t m;
    int k;
    if (!PyArg_ParseTuple(args, "y*ni", &d, &m, &k))
        return NULL;
    Py_ssize_t n;
    if (rows_of(&d, &n) < 0 || m <= 0 || m % 8 || check_filter(m / 8, k) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "m must be a positive multiple of 8");
        PyBuffer_Release(&d);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, m / 8);
    if (out != NULL) {
        uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(out);
        memset(bits, 0, m / 8);
        const uint32_t *h = (const uint32_t *)d.buf;
        for (Py_ssize_t r = 0; r < n; r++, h += WORDS)
            for (int i = 0; i < k; i++) {
                uint32_t p = h[i] % (uint32_t)m;
                bits[p >> 3] |= (uint8_t)(1u << (p & 7));
            }
    }
    PyBuffer_Release(&d);
    return out;
}

/* hits(bits, k, rows) -> bytes: one byte per row, 1 where the filter holds the row's key. */
static PyObject *hits(PyObject *self, PyObject *args) {
    Py_buffer f, d;
    int k;
    if (!PyArg_ParseTuple(args, "y*iy*", &f, &k, &d))
        return NULL;
    Py_ssize_t n;
    PyObject *out = NULL;
    if (check_filter(f.len, k) == 0 && rows_of(&d, &n) == 0) {
        out = PyBytes_FromStringAndSize(NULL, n);
        if (out != NULL) {
            uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
            const uint32_t *h = (const uint32_t *)d.buf;
            uint32_t m = (uint32_t)(f.len * 8);
            for (Py_ssize_t r = 0; r < n; r++, h += WORDS)
                o[r] = (uint8_t)held((const uint8_t *)f.buf, m, k, h);
        }
    }
    PyBuffer_Release(&f);
    PyBuffer_Release(&d);
    return out;
}

/* hit_index(bits, k, rows) -> list[int]: the numbers of the rows whose keys the filter holds (a reducer's
 * pending keys against a new filter: the few hits, without a byte per row to scan again in Python). */
static PyObject *hit_index(PyObject *self, PyObject *args) {
    Py_buffer f, d;
    int k;
    if (!PyArg_ParseTuple(args, "y*iy*", &f, &k, &d))
        return NULL;
    Py_ssize_t n;
    PyObject *out = NULL;
    if (check_filter(f.len, k) == 0 && rows_of(&d, &n) == 0 && (out = PyList_New(0)) != NULL) {
        const uint32_t *h = (const uint32_t *)d.buf;
        uint32_t m = (uint32_t)(f.len * 8);
        for (Py_ssize_t r = 0; r < n; r++, h += WORDS) {
            if (!held((const uint8_t *)f.buf, m, k, h))
                continue;
            PyObject *v = PyLong_FromSsize_t(r);
            if (v == NULL || PyList_Append(out, v) < 0) {
                Py_XDECREF(v);
                Py_CLEAR(out);
                break;
            }
            Py_DECREF(v);
        }
    }
    PyBuffer_Release(&f);
    PyBuffer_Release(&d);
    return out;
}

/* A live filter (bits, k, tag) read without PyArg_ParseTuple's format parsing (a reduction passes thirty of them a
 * call, every epoch): the exact types read directly, anything else through the parser, which says what is wrong. */
static int filter_of(PyObject *f, char **b, Py_ssize_t *len, int *k, long long *tag) {
    if (PyTuple_CheckExact(f) && PyTuple_GET_SIZE(f) == 3 && PyBytes_CheckExact(PyTuple_GET_ITEM(f, 0)) &&
        PyLong_CheckExact(PyTuple_GET_ITEM(f, 1)) && PyLong_CheckExact(PyTuple_GET_ITEM(f, 2))) {
        int over_k, over_t;
        long kk = PyLong_AsLongAndOverflow(PyTuple_GET_ITEM(f, 1), &over_k);
        long long t = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(f, 2), &over_t);
        if (!over_k && !over_t && kk >= INT_MIN && kk <= INT_MAX && !((kk == -1 || t == -1) && PyErr_Occurred())) {
            *b = PyBytes_AS_STRING(PyTuple_GET_ITEM(f, 0));
            *len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(f, 0));
            *k = (int)kk;
            *tag = t;
            return 0;
        }
        PyErr_Clear();
    }
    return PyArg_ParseTuple(f, "y#iL", b, len, k, tag) ? 0 : -1;
}

/* latest(filters, rows) -> list[int]: per row, the largest tag of a filter holding its key (-1:
 * none); filters is a sequence of (bits, k, tag). */
static PyObject *latest(PyObject *self, PyObject *args) {
    PyObject *seq;
    Py_buffer d;
    if (!PyArg_ParseTuple(args, "Oy*", &seq, &d))
        return NULL;
    Py_ssize_t n, nf = 0;
    PyObject *fast = NULL, *out = NULL;
    const uint8_t **fb = NULL;
    uint32_t *fm = NULL;
    int *fk = NULL;
    long long *ft = NULL;
    if (rows_of(&d, &n) < 0 || (fast = PySequence_Fast(seq, "filters must be a sequence")) == NULL)
        goto done;
    nf = PySequence_Fast_GET_SIZE(fast);
    fb = PyMem_Malloc(sizeof(*fb) * (nf + 1));
    fm = PyMem_Malloc(sizeof(*fm) * (nf + 1));
    fk = PyMem_Malloc(sizeof(*fk) * (nf + 1));
    ft = PyMem_Malloc(sizeof(*ft) * (nf + 1));
    if (!fb || !fm || !fk || !ft) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < nf; j++) {
        char *b;
        Py_ssize_t len;
        if (filter_of(PySequence_Fast_GET_ITEM(fast, j), &b, &len, &fk[j], &ft[j]) < 0 || check_filter(len, fk[j]) < 0)
            goto done;
        fb[j] = (const uint8_t *)b;
        fm[j] = (uint32_t)(len * 8);
    }
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    const uint32_t *h = (const uint32_t *)d.buf;
    for (Py_ssize_t r = 0; r < n; r++, h += WORDS) {
        long long best = -1;
        for (Py_ssize_t j = 0; j < nf; j++)
            if (ft[j] > best && held(fb[j], fm[j], fk[j], h))
                best = ft[j];
        PyObject *v = PyLong_FromLongLong(best);
        if (v == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, r, v);
    }
done:
    PyMem_Free(fb);
    PyMem_Free(fm);
    PyMem_Free(fk);
    PyMem_Free(ft);
    Py_XDECREF(fast);
    PyBuffer_Release(&d);
    return out;
}

static PyMethodDef methods[] = {
    {"filter_bits", filter_bits, METH_VARARGS, "filter_bits(digests, m, k) -> bytes"},
    {"hits", hits, METH_VARARGS, "hits(bits, k, rows) -> bytes (one 0/1 byte per row)"},
    {"hit_index", hit_index, METH_VARARGS, "hit_index(bits, k, rows) -> list[int] (the rows held)"},
    {"latest", latest, METH_VARARGS, "latest([(bits, k, tag), ...], rows) -> list[int]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bloomc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__bloomc(void) {
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "_bloomc reads hash words as little-endian: not on this machine");
        return NULL;
    }
    return PyModule_Create(&module);
}
