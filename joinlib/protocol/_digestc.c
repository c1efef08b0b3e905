/* A join key's digest (joinlib/protocol/bloom.py: _remember, _digest) in C: BLAKE2b-512 (RFC 7693) of the key's
 * canonical encoding, remembered in bloom.py's cache.
 *
 * Why: a reduction hashes every new join key once (its Bloom hashes, and the digests a key table keeps for the
 * filters it tests), so a run pays one digest per distinct key.  Through Python (_remember, _digest, str.encode,
 * hashlib's object and .digest()) that is about 2 us; here about 0.3 us.  The kernels that miss the cache
 * (_keytablec's add_all, _bloomc's key_filter) call bloom._remember, which is this module's ``remember`` when it
 * is built.  Only the usual key -- one str -- is encoded here; any other key goes to bloom.py's Python form (the
 * ``fallback`` of setup), as does a str that UTF-8 cannot encode without surrogatepass.  The digest is the same
 * bytes as hashlib.blake2b(data, digest_size=64).digest() (tests/property/test_digest_c.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const int SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const uint8_t *p) {   /* little-endian, on any machine */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
#else
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = (x << 8) | p[i];
    return x;
#endif
}

#define G(a, b, c, d, x, y)             \
    do {                                \
        v[a] = v[a] + v[b] + (x);       \
        v[d] = rotr(v[d] ^ v[a], 32);   \
        v[c] = v[c] + v[d];             \
        v[b] = rotr(v[b] ^ v[c], 24);   \
        v[a] = v[a] + v[b] + (y);       \
        v[d] = rotr(v[d] ^ v[a], 16);   \
        v[c] = v[c] + v[d];             \
        v[b] = rotr(v[b] ^ v[c], 63);   \
    } while (0)

#define ROUND(r)                                               \
    do {                                                       \
        G(0, 4, 8, 12, m[SIGMA[r][0]], m[SIGMA[r][1]]);        \
        G(1, 5, 9, 13, m[SIGMA[r][2]], m[SIGMA[r][3]]);        \
        G(2, 6, 10, 14, m[SIGMA[r][4]], m[SIGMA[r][5]]);       \
        G(3, 7, 11, 15, m[SIGMA[r][6]], m[SIGMA[r][7]]);       \
        G(0, 5, 10, 15, m[SIGMA[r][8]], m[SIGMA[r][9]]);       \
        G(1, 6, 11, 12, m[SIGMA[r][10]], m[SIGMA[r][11]]);     \
        G(2, 7, 8, 13, m[SIGMA[r][12]], m[SIGMA[r][13]]);      \
        G(3, 4, 9, 14, m[SIGMA[r][14]], m[SIGMA[r][15]]);      \
    } while (0)

/* RFC 7693's F: one 128-byte block into the state h; t bytes hashed so far (this block's included). */
static void compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t v[16], m[16];
    for (int i = 0; i < 16; i++)
        m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= t;   /* the counter's high word stays 0: keys are far below 2^64 bytes */
    if (last)
        v[14] = ~v[14];
    /* the rounds written out: SIGMA's indices are constants, so the message words stay in registers */
    ROUND(0); ROUND(1); ROUND(2); ROUND(3); ROUND(4); ROUND(5);
    ROUND(6); ROUND(7); ROUND(8); ROUND(9); ROUND(10); ROUND(11);
    for (int i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
}

/* BLAKE2b-512 (no key) of the n bytes of prefix (np of them: 0 or 1) followed by data, into out[64]. */
static void blake2b512(const uint8_t *prefix, size_t np, const uint8_t *data, size_t nd, uint8_t out[64]) {
    uint64_t h[8];
    uint8_t block[128];
    size_t total = np + nd, done = 0, fill = 0;
    memcpy(h, IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ 64;
    if (np)
        memcpy(block, prefix, np);
    fill = np;
    /* every full block but the last: the last (full or not, possibly empty) is compressed with the flag */
    while (total - done > 128) {
        size_t take = 128 - fill;
        memcpy(block + fill, data, take);
        data += take;
        done += 128;
        compress(h, block, done, 0);
        fill = 0;
    }
    size_t rest = total - done - fill;
    memcpy(block + fill, data, rest);
    memset(block + fill + rest, 0, 128 - fill - rest);
    compress(h, block, total, 1);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            out[8 * i + j] = (uint8_t)(h[i] >> (8 * j));
}

static PyObject *cache = NULL, *fallback = NULL;
static Py_ssize_t cap = 0;

/* setup(cache, cap, fallback): bloom.py's digest cache (a dict), its size limit, and its _digest. */
static PyObject *setup(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "setup(cache: dict, cap: int, fallback)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    Py_INCREF(args[0]);
    Py_INCREF(args[2]);
    Py_XSETREF(cache, args[0]);
    Py_XSETREF(fallback, args[2]);
    cap = n;
    Py_RETURN_NONE;
}

/* The digest of a one-str key (new reference), NULL without an exception if the key is not one. */
static PyObject *str_digest(PyObject *key) {
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 1 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(key, 0)))
        return NULL;
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(key, 0), &n);
    if (utf8 == NULL) {   /* lone surrogates: the Python form's surrogatepass */
        PyErr_Clear();
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 64);
    if (out != NULL)
        blake2b512((const uint8_t *)"s", 1, (const uint8_t *)utf8, (size_t)n, (uint8_t *)PyBytes_AS_STRING(out));
    return out;
}

/* remember(key): bloom._remember -- the key's digest, put in the cache (emptied first when full). */
static PyObject *remember(PyObject *mod, PyObject *key) {
    if (cache == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_digestc.setup was not called");
        return NULL;
    }
    PyObject *d = str_digest(key);
    if (d == NULL) {
        if (PyErr_Occurred())
            return NULL;
        d = PyObject_CallOneArg(fallback, key);
        if (d == NULL)
            return NULL;
    }
    if (PyDict_GET_SIZE(cache) >= cap)
        PyDict_Clear(cache);
    if (PyDict_SetItem(cache, key, d) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* blake2b(data): the 64-byte BLAKE2b of a bytes object (what the tests compare with hashlib's). */
static PyObject *blake2b_(PyObject *mod, PyObject *data) {
    Py_buffer b;
    if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 64);
    if (out != NULL)
        blake2b512(NULL, 0, b.buf, (size_t)b.len, (uint8_t *)PyBytes_AS_STRING(out));
    PyBuffer_Release(&b);
    return out;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))setup, METH_FASTCALL, "setup(cache, cap, fallback)"},
    {"remember", remember, METH_O, "remember(key) -> the key's 64-byte digest, cached (bloom._remember)"},
    {"blake2b", blake2b_, METH_O, "blake2b(data) -> BLAKE2b-512 of data"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_digestc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__digestc(void) { return PyModule_Create(&module); }
