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

/* A filter's size m and what takes a hash word modulo m by two multiplications (Lemire, Kaser and Kurz, "Faster
 * remainder by direct computation", 2019: exact for every 32-bit word and m >= 1): a test reads about two bits,
 * and a division cost about as much as the rest of it.  Without 128-bit integers, the division. */
typedef struct {
    uint32_t m;
    uint64_t c;
} Mod;

static inline Mod mod_of(uint32_t m) {
    return (Mod){m, UINT64_MAX / m + 1};
}

static inline uint32_t mod(uint32_t h, Mod d) {
#ifdef __SIZEOF_INT128__
    return (uint32_t)(((__uint128_t)(d.c * h) * d.m) >> 64);
#else
    return h % d.m;
#endif
}

static inline unsigned bit(const uint8_t *bits, Mod m, uint32_t h) {
    uint32_t p = mod(h, m);
    return bits[p >> 3] >> (p & 7);
}

/* Four bits at a time, then one branch: a key a filter does not hold has each bit set about half the time, so a
 * branch per bit is mispredicted about once a key (more than the four bits cost), and one per four bits seldom. */
static inline int held(const uint8_t *bits, Mod m, int k, const uint32_t *h) {
    int i = 0;
    for (; i + 4 <= k; i += 4)
        if (!(bit(bits, m, h[i]) & bit(bits, m, h[i + 1]) & bit(bits, m, h[i + 2]) & bit(bits, m, h[i + 3]) & 1))
            return 0;
    for (; i < k; i++)
        if (!(bit(bits, m, h[i]) & 1))
            return 0;
    return 1;
}

/* Sets the bits of one key's first k words. */
static inline void set_bits(uint8_t *bits, Mod m, int k, const uint32_t *h) {
    for (int i = 0; i < k; i++) {
        uint32_t p = mod(h[i], m);
        bits[p >> 3] |= (uint8_t)(1u << (p & 7));
    }
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
        Mod mm = mod_of((uint32_t)m);
        for (Py_ssize_t r = 0; r < n; r++, h += WORDS)
            set_bits(bits, mm, k, h);
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
            Mod m = mod_of((uint32_t)(f.len * 8));
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
        Mod m = mod_of((uint32_t)(f.len * 8));
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
    Mod *fm = NULL;
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
        fm[j] = mod_of((uint32_t)(len * 8));
    }
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    const uint32_t *h = (const uint32_t *)d.buf;
    for (Py_ssize_t r = 0; r < n; r++, h += WORDS) {
        long long best = -1;
        for (Py_ssize_t j = nf - 1; j >= 0; j--)   /* the latest last, as a reducer lists them: tested first */
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

/* ------------------------------------------------------------------------------------------------- key sets
 * key_filter(out, fpr, fp_cost, stale, KeyFilter, filter_cost, digests, remember) -> KeyFilter, or None: declined.
 * joinlib.runtime.algorithms.keysets.key_filter (its Python form, key_filter_py, says what a set becomes): the
 * distinct keys and their youngest ages, their bytes written out (base.keys_bytes's count), the filter's price
 * (``filter_cost``, called: it is cached there); the ages' runs when they price lowest (keysets.runs_bytes and
 * stale_bytes, the same arithmetic), else the keys or the filter's bits (each key's digest from ``digests``,
 * bloom._DIGESTS, or ``remember``), then the message.  Why: a reduction sends a set on every edge every epoch,
 * and in Python that was 10-14 us a set of ten keys, most of it calls between small steps.  Anything unusual --
 * a key that is not a tuple where its bytes count, ages or ``back`` that are not ints, a ``stale`` that is not a
 * number, an error raised on the way (an unhashable key, a string that is not UTF-8) -- is declined, and the
 * Python form then answers or raises as it would have. */

typedef struct {
    long long age;
    Py_ssize_t slot;
} Aged;

static int by_age(const void *a, const void *b) {
    const Aged *x = a, *y = b;
    if (x->age != y->age)
        return x->age < y->age ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;   /* the slots' order: sorted()'s stability */
}

/* The KeyFilter (back, live, keys, bits, hashes, n, ages): steals keys, bits, hashes and ages. */
static PyObject *message(PyObject *cls, PyObject *back, PyObject *live, PyObject *keys, PyObject *bits,
                         PyObject *hashes, PyObject *n, PyObject *ages) {
    PyObject *out = NULL;
    if (keys && bits && hashes && n && ages) {
        PyObject *args[7] = {back, live, keys, bits, hashes, n, ages};
        out = PyObject_Vectorcall(cls, args, 7, NULL);
    }
    Py_XDECREF(keys);
    Py_XDECREF(bits);
    Py_XDECREF(hashes);
    Py_XDECREF(n);
    Py_XDECREF(ages);
    return out;
}

static PyObject *written_out(PyObject *cls, PyObject *back, PyObject *live, PyObject *keys, PyObject *ages) {
    return message(cls, back, live, keys, PyBytes_FromStringAndSize(NULL, 0), PyLong_FromLong(0), PyLong_FromLong(0),
                   ages ? ages : PyList_New(0));
}

/* The distinct keys' list (slots 0..n-1, the dictionary's order). */
static PyObject *key_list(PyObject **keys, Py_ssize_t n) {
    PyObject *out = PyList_New(n);
    for (Py_ssize_t j = 0; out != NULL && j < n; j++) {
        Py_INCREF(keys[j]);
        PyList_SET_ITEM(out, j, keys[j]);
    }
    return out;
}

/* base.keys_bytes of the distinct keys, -1: declined (a key that is not a tuple), -2: an error. */
static long long written_bytes(PyObject **keys, Py_ssize_t n) {
    long long total = 1;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (!PyTuple_CheckExact(keys[j]))
            return -1;
        total += 1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys[j]); i++) {
            PyObject *v = PyTuple_GET_ITEM(keys[j], i);
            if (PyUnicode_Check(v)) {
                Py_ssize_t len;
                if (PyUnicode_IS_ASCII(v))
                    len = PyUnicode_GET_LENGTH(v);
                else if (PyUnicode_AsUTF8AndSize(v, &len) == NULL)
                    return -2;
                total += len + 2;
            } else {
                total += PyFloat_Check(v) ? 9 : 4;
            }
        }
    }
    return total;
}

/* The m bits of the keys' digests (first k words each, mod m), or NULL (an error, or a digest that is not 64
 * bytes: declined).  As bloom.digests: every key looked up first, then the missing ones remembered. */
static PyObject *bits_of(PyObject **keys, Py_ssize_t n, Py_ssize_t m, int k, PyObject *digests, PyObject *remember) {
    PyObject **ds = PyMem_Calloc(n + 1, sizeof(*ds)), *out = NULL;
    if (ds == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t j = 0; j < n; j++) {
        ds[j] = PyDict_GetItemWithError(digests, keys[j]);
        if (ds[j] == NULL && PyErr_Occurred())
            goto done;
        Py_XINCREF(ds[j]);
    }
    for (Py_ssize_t j = 0; j < n; j++)
        if (ds[j] == NULL && (ds[j] = PyObject_CallOneArg(remember, keys[j])) == NULL)
            goto done;
    for (Py_ssize_t j = 0; j < n; j++)
        if (!PyBytes_CheckExact(ds[j]) || PyBytes_GET_SIZE(ds[j]) != WORDS * 4) {
            PyErr_SetString(PyExc_ValueError, "a key's digest is not 64 bytes");
            goto done;
        }
    if ((out = PyBytes_FromStringAndSize(NULL, m / 8)) == NULL)
        goto done;
    uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(out);
    memset(bits, 0, m / 8);
    Mod mm = mod_of((uint32_t)m);
    for (Py_ssize_t j = 0; j < n; j++) {
        uint32_t h[WORDS];
        memcpy(h, PyBytes_AS_STRING(ds[j]), sizeof(h));
        set_bits(bits, mm, k, h);
    }
done:
    for (Py_ssize_t j = 0; j < n; j++)
        Py_XDECREF(ds[j]);
    PyMem_Free(ds);
    return out;
}

/* A set's prices as bloom.choose weighs them: ``exact`` the keys written out (counted when a filter is priced, or
 * ``ages``: the runs are weighed against it), ``*priced`` the filter's (bits, hashes, cost) from ``filter_cost`` (a
 * new reference; NULL: no filter, no rate or no cost or no keys) and ``*cost`` its cost.  0, or -1: declined
 * (*declined set) or an error. */
static int price(PyObject *const *args, PyObject **keys, Py_ssize_t n, int ages, long long *exact, PyObject **priced,
                 double *cost, int *declined) {
    PyObject *fpr = args[1], *fp_cost = args[2];
    int filter = fpr != Py_None && fp_cost != Py_None && n > 0;
    *priced = NULL;
    if ((filter || ages) && (*exact = written_bytes(keys, n)) < 0) {
        *declined = *exact == -1;
        return -1;
    }
    if (!filter)
        return 0;
    PyObject *nn = PyLong_FromSsize_t(n);
    if (nn == NULL)
        return -1;
    PyObject *cargs[3] = {nn, fpr, fp_cost};
    PyObject *p = PyObject_Vectorcall(args[5], cargs, 3, NULL);
    Py_DECREF(nn);
    if (p == NULL)
        return -1;
    if (!PyTuple_CheckExact(p) || PyTuple_GET_SIZE(p) != 3 || !PyFloat_CheckExact(PyTuple_GET_ITEM(p, 2))) {
        Py_DECREF(p);
        *declined = 1;
        return -1;
    }
    *cost = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(p, 2));
    *priced = p;
    return 0;
}

/* bloom.choose's message over the distinct keys priced by price(): written out, or a filter when it costs less. */
static PyObject *chosen(PyObject *const *args, PyObject **keys, Py_ssize_t n, PyObject *back, PyObject *live,
                        long long exact, PyObject *priced, double cost, int *declined) {
    PyObject *cls = args[4];
    if (priced == NULL || !(cost < (double)exact))
        return written_out(cls, back, live, key_list(keys, n), NULL);
    PyObject *mo = PyTuple_GET_ITEM(priced, 0), *ko = PyTuple_GET_ITEM(priced, 1);
    Py_ssize_t m = PyLong_CheckExact(mo) ? PyLong_AsSsize_t(mo) : -1;
    long k = PyLong_CheckExact(ko) ? PyLong_AsLong(ko) : -1;
    if (m <= 0 || m % 8 || k < 1 || k > WORDS) {
        PyErr_Clear();
        *declined = 1;
        return NULL;
    }
    PyObject *bits = bits_of(keys, n, m, (int)k, args[6], args[7]), *nn = PyLong_FromSsize_t(n);
    if (bits == NULL || nn == NULL) {
        Py_XDECREF(bits);
        Py_XDECREF(nn);
        return NULL;
    }
    Py_INCREF(ko);
    return message(cls, back, live, PyList_New(0), bits, ko, nn, PyList_New(0));
}

/* The bytes of an Avro long (zig-zag varint): len(avro.encode_long(v)). */
static long long long_size(long long v) {
    unsigned long long z = ((unsigned long long)v << 1) ^ (unsigned long long)(v >> 63);
    long long size = 1;
    while (z >= 0x80) {
        z >>= 7;
        size++;
    }
    return size;
}

/* The distinct keys (slot j: its first tuple's key, yage[j] its youngest age) sorted by age into ``order``;
 * 1 when they are of several ages, and then ``*bytes`` (keysets.runs_bytes) and ``*late`` (the epochs its keys
 * would be live too long under the tag ``back``: keysets.stale_bytes's sum) of their runs. */
static int runs_of(Aged *order, const long long *yage, Py_ssize_t n, long long back, long long *bytes,
                   long long *late) {
    for (Py_ssize_t j = 0; j < n; j++)
        order[j] = (Aged){yage[j], j};
    qsort(order, n, sizeof(*order), by_age);
    if (n == 0 || order[0].age == order[n - 1].age)
        return 0;
    Py_ssize_t nruns = 0;
    *bytes = 1;
    *late = 0;
    for (Py_ssize_t i = 0, start = 0; i < n; i++) {
        if (i + 1 < n && order[i + 1].age == order[i].age)
            continue;
        long long count = i + 1 - start;
        *bytes += long_size(order[i].age) + long_size(count);
        *late += (order[i].age - back) * count;
        nruns += 2;
        start = i + 1;
    }
    *bytes += long_size(nruns);
    return 1;
}

/* The written-out keys in ``order`` with their ages' runs. */
static PyObject *aged(PyObject *cls, PyObject **keys, const Aged *order, Py_ssize_t n, PyObject *back,
                      PyObject *live) {
    PyObject *ks = PyList_New(n), *runs = PyList_New(0);
    if (ks == NULL || runs == NULL)
        goto fail;
    for (Py_ssize_t i = 0, start = 0; i < n; i++) {
        Py_INCREF(keys[order[i].slot]);
        PyList_SET_ITEM(ks, i, keys[order[i].slot]);
        if (i + 1 < n && order[i + 1].age == order[i].age)
            continue;
        PyObject *a = PyLong_FromLongLong(order[i].age), *c = PyLong_FromSsize_t(i + 1 - start);
        int bad = a == NULL || c == NULL || PyList_Append(runs, a) < 0 || PyList_Append(runs, c) < 0;
        Py_XDECREF(a);
        Py_XDECREF(c);
        if (bad)
            goto fail;
        start = i + 1;
    }
    return written_out(cls, back, live, ks, runs);
fail:
    Py_XDECREF(ks);
    Py_XDECREF(runs);
    return NULL;
}

/* The ages as C integers: 1 when they are all exact ints (*several: not all equal), 0: declined. */
static int ages_of(PyObject *ages, long long **out, Py_ssize_t *na, int *several) {
    if (!PyList_CheckExact(ages) && !PyTuple_CheckExact(ages))
        return 0;
    PyObject **items = PySequence_Fast_ITEMS(ages);
    *na = PySequence_Fast_GET_SIZE(ages);
    *several = 0;
    if ((*out = PyMem_Malloc(sizeof(**out) * (*na + 1))) == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < *na; i++) {
        int over;
        if (!PyLong_CheckExact(items[i]))
            return 0;
        (*out)[i] = PyLong_AsLongLongAndOverflow(items[i], &over);
        if (over)
            return 0;
        *several |= (*out)[i] != (*out)[0];
    }
    return 1;
}

/* An exact int in [-2^40, 2^40] (ages and ``back`` are epochs: their products with counts stay exact), 0: not. */
static int small_int(PyObject *v, long long *out) {
    int over;
    if (!PyLong_CheckExact(v))
        return 0;
    *out = PyLong_AsLongLongAndOverflow(v, &over);
    return !over && *out >= -(1LL << 40) && *out <= (1LL << 40);
}

static PyObject *key_filter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "key_filter(out, fpr, fp_cost, stale, KeyFilter, filter_cost, digests, remember)");
        return NULL;
    }
    PyObject *out = args[0];   /* an Outgoing: (keys, back, live, ages); a plain tuple has no fields to read */
    PyObject *stale = args[3];
    if (!PyTuple_Check(out) || PyTuple_CheckExact(out) || PyTuple_GET_SIZE(out) != 4 || !PyDict_CheckExact(args[6]) ||
        (stale != Py_None && !PyFloat_CheckExact(stale) && !PyLong_CheckExact(stale)))
        Py_RETURN_NONE;
    PyObject *kseq = PyTuple_GET_ITEM(out, 0), *back = PyTuple_GET_ITEM(out, 1), *live = PyTuple_GET_ITEM(out, 2);
    if (!PyList_CheckExact(kseq) && !PyTuple_CheckExact(kseq))
        Py_RETURN_NONE;
    /* a copy of the keys, and strong references to the distinct ones: a key's __eq__ may run Python */
    PyObject *keys = PySequence_Tuple(kseq), *seen = PyDict_New(), *res = NULL, **dk = NULL, *priced = NULL;
    long long *ages = NULL, *yage = NULL, exact = 0;
    Aged *order = NULL;
    Py_ssize_t na = 0, n = 0;
    int several = 0, declined = 0;
    double cost = 0.0;
    if (keys == NULL || seen == NULL)
        goto done;
    Py_ssize_t nk = PyTuple_GET_SIZE(keys);
    if (!ages_of(PyTuple_GET_ITEM(out, 3), &ages, &na, &several) || (several && na != nk)) {
        declined = 1;
        goto done;
    }
    dk = PyMem_Malloc(sizeof(*dk) * (nk + 1));
    yage = PyMem_Malloc(sizeof(*yage) * (nk + 1));
    order = PyMem_Malloc(sizeof(*order) * (nk + 1));
    if (dk == NULL || yage == NULL || order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nk; i++) {   /* dict.fromkeys, and each key's youngest age (age_runs) */
        PyObject *key = PyTuple_GET_ITEM(keys, i), *slot = PyDict_GetItemWithError(seen, key);
        if (slot != NULL) {
            Py_ssize_t j = PyLong_AsSsize_t(slot);
            if (several && ages[i] < yage[j])
                yage[j] = ages[i];
            continue;
        }
        if (PyErr_Occurred() || (slot = PyLong_FromSsize_t(n)) == NULL)
            goto done;
        int bad = PyDict_SetItem(seen, key, slot) < 0;
        Py_DECREF(slot);
        if (bad)
            goto done;
        Py_INCREF(key);
        dk[n] = key;
        yage[n++] = several ? ages[i] : 0;
    }
    long long rbytes = 0, late = 0, tag = 0;
    if (several && !small_int(back, &tag)) {
        declined = 1;
        goto done;
    }
    for (Py_ssize_t j = 0; several && j < n; j++)
        if (yage[j] < -(1LL << 40) || yage[j] > (1LL << 40)) {
            declined = 1;
            goto done;
        }
    int runs = several && runs_of(order, yage, n, tag, &rbytes, &late);
    if (runs && stale == Py_None) {   /* the ages not priced: sent */
        res = aged(args[4], dk, order, n, back, live);
        goto done;
    }
    if (price(args, dk, n, runs, &exact, &priced, &cost, &declined) < 0)
        goto done;
    if (runs) {
        double st = PyFloat_AsDouble(stale), one_tag = priced != NULL && cost < (double)exact ? cost : (double)exact;
        if (st == -1.0 && PyErr_Occurred())
            goto done;
        if ((double)(exact + rbytes) <= one_tag + (double)late * st) {
            res = aged(args[4], dk, order, n, back, live);
            goto done;
        }
    }
    res = chosen(args, dk, n, back, live, exact, priced, cost, &declined);
done:
    for (Py_ssize_t j = 0; j < n; j++)
        Py_DECREF(dk[j]);
    PyMem_Free(dk);
    PyMem_Free(yage);
    PyMem_Free(order);
    PyMem_Free(ages);
    Py_XDECREF(priced);
    Py_XDECREF(keys);
    Py_XDECREF(seen);
    if (res == NULL && (declined || PyErr_ExceptionMatches(PyExc_Exception))) {
        PyErr_Clear();   /* the Python form answers, or raises what it raises */
        Py_RETURN_NONE;
    }
    return res;
}

static PyMethodDef methods[] = {
    {"filter_bits", filter_bits, METH_VARARGS, "filter_bits(digests, m, k) -> bytes"},
    {"hits", hits, METH_VARARGS, "hits(bits, k, rows) -> bytes (one 0/1 byte per row)"},
    {"hit_index", hit_index, METH_VARARGS, "hit_index(bits, k, rows) -> list[int] (the rows held)"},
    {"latest", latest, METH_VARARGS, "latest([(bits, k, tag), ...], rows) -> list[int]"},
    {"key_filter", (PyCFunction)(void (*)(void))key_filter, METH_FASTCALL,
     "key_filter(out, fpr, fp_cost, stale, KeyFilter, filter_cost, digests, remember) -> KeyFilter, or None: declined"},
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
