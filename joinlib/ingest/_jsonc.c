/* The live decoder's fast path in C: a flat JSON record -> its event, in one pass over the record's bytes.
 *
 * Why: a node draining a backlog decodes every record of its sources.  In Python that is orjson building a
 * dict (the 1,250-character payload copied into a str), a layout's itemgetter, type checks, and the payload
 * copied again into its Avro bytes: 3.5-7 us a record, a fifth of a busy node's CPU.  decode_flat reads the
 * record once and writes the payload's Avro bytes straight from it.
 *
 * It takes a strict subset of JSON and answers None for anything else, so that the caller's Python path
 * (records.Decoder) decides: the Python path is the definition, and where decode_flat answers an event it is
 * the event that path would answer (tests/unit/test_jsonc.py checks both on drawn records).  The subset: one
 * object (whitespace: space, tab, CR, LF) whose members have distinct names without escapes, and values that
 * are strings without escapes or control characters (valid UTF-8), integers within 64 bits (no fraction, no
 * exponent), true, false or null.  Floats, escapes, nested values, duplicate names: None.
 *
 * decode_flat(value, spec, partition, offset) -> Event | None, with
 *   spec = (names, has_id, nkeys, width, named, origin, Event): names the layout's field names (UTF-8 bytes: the
 *   event time, the id if has_id, the nkeys join attributes, then the payload's), width the number of members a
 *   record must have (-1: any, others ignored), named: the payload interleaves each name with its value. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 64
enum { V_STR, V_INT, V_TRUE, V_FALSE, V_NULL };

typedef struct {
    int kind;
    const uint8_t *s;    /* V_STR: the characters (between the quotes) */
    Py_ssize_t n;
    long long i;         /* V_INT */
    int ascii;
} Val;

static int utf8_ok(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0))
                return 0;   /* overlong; a surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))
                return 0;   /* overlong; beyond U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define HAS_ZERO(v) (((v) - ONES) & ~(v) & HIGHS)

/* A string's characters from p (after the opening quote) to its closing quote: 1 and *end past the quote, or
 * 0 (an escape, a control character, invalid UTF-8, no closing quote). */
static int scan_string(const uint8_t *p, const uint8_t *e, Val *v, const uint8_t **end) {
    const uint8_t *q = p;
    uint64_t high = 0;
    while (e - q >= 8) {   /* eight bytes at a time while none is a quote, a backslash or a control character */
        uint64_t w;
        memcpy(&w, q, 8);
        if (HAS_ZERO(w ^ (0x22 * ONES)) || HAS_ZERO(w ^ (0x5C * ONES)) || ((w - 0x20 * ONES) & ~w & HIGHS))
            break;
        high |= w;
        q += 8;
    }
    for (;; q++) {
        if (q >= e)
            return 0;
        uint8_t c = *q;
        if (c == '"')
            break;
        if (c == '\\' || c < 0x20)
            return 0;
        high |= c;
    }
    v->kind = V_STR;
    v->s = p;
    v->n = q - p;
    v->ascii = (high & HIGHS) == 0;
    if (!v->ascii && !utf8_ok(p, v->n))
        return 0;
    *end = q + 1;
    return 1;
}

static int scan_int(const uint8_t *p, const uint8_t *e, Val *v, const uint8_t **end) {
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= e || *p < '0' || *p > '9')
        return 0;
    if (*p == '0' && p + 1 < e && p[1] >= '0' && p[1] <= '9')
        return 0;   /* a leading zero: not JSON */
    unsigned long long m = 0;
    const unsigned long long lim = neg ? (1ULL << 63) : (1ULL << 63) - 1;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        unsigned d = *p - '0';
        if (m > (lim - d) / 10)
            return 0;   /* beyond 64 bits */
        m = m * 10 + d;
    }
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E'))
        return 0;   /* a float */
    v->kind = V_INT;
    v->i = neg ? (long long)(0 - m) : (long long)m;
    *end = p;
    return 1;
}

static int scan_value(const uint8_t *p, const uint8_t *e, Val *v, const uint8_t **end) {
    if (p >= e)
        return 0;
    switch (*p) {
    case '"':
        return scan_string(p + 1, e, v, end);
    case 't':
        if (e - p >= 4 && memcmp(p, "true", 4) == 0) { v->kind = V_TRUE; *end = p + 4; return 1; }
        return 0;
    case 'f':
        if (e - p >= 5 && memcmp(p, "false", 5) == 0) { v->kind = V_FALSE; *end = p + 5; return 1; }
        return 0;
    case 'n':
        if (e - p >= 4 && memcmp(p, "null", 4) == 0) { v->kind = V_NULL; *end = p + 4; return 1; }
        return 0;
    default:
        return scan_int(p, e, v, end);
    }
}

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* The members of the object in [p, e): each named one's value in vals (found[i] set); 1, or 0 (not the subset,
 * a duplicate name, a member count other than width). */
static int scan_object(const uint8_t *p, const uint8_t *e, PyObject *names, Py_ssize_t width, Val *vals,
                       char *found) {
    Py_ssize_t nn = PyTuple_GET_SIZE(names), members = 0;
    p = skip_ws(p, e);
    if (p >= e || *p != '{')
        return 0;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') {
        p++;
    } else {
        const uint8_t *seen[MAX_FIELDS * 4];   /* the member names read, to refuse duplicates */
        Py_ssize_t seen_n[MAX_FIELDS * 4];
        for (;;) {
            Val k, v;
            if (p >= e || *p != '"' || !scan_string(p + 1, e, &k, &p))
                return 0;
            if (members >= MAX_FIELDS * 4)
                return 0;
            for (Py_ssize_t j = 0; j < members; j++)
                if (seen_n[j] == k.n && memcmp(seen[j], k.s, k.n) == 0)
                    return 0;
            seen[members] = k.s;
            seen_n[members] = k.n;
            members++;
            p = skip_ws(p, e);
            if (p >= e || *p != ':')
                return 0;
            p = skip_ws(p + 1, e);
            if (!scan_value(p, e, &v, &p))
                return 0;
            for (Py_ssize_t j = 0; j < nn; j++) {
                PyObject *nm = PyTuple_GET_ITEM(names, j);
                if (PyBytes_GET_SIZE(nm) == k.n && memcmp(PyBytes_AS_STRING(nm), k.s, k.n) == 0) {
                    vals[j] = v;   /* no break: a layout may name a field twice (a join attribute as the id) */
                    found[j] = 1;
                }
            }
            p = skip_ws(p, e);
            if (p < e && *p == ',') {
                p = skip_ws(p + 1, e);
                continue;
            }
            if (p < e && *p == '}') {
                p++;
                break;
            }
            return 0;
        }
    }
    if (skip_ws(p, e) != e)
        return 0;   /* anything after the object */
    return width < 0 || members == width;
}

static PyObject *as_object(const Val *v) {
    switch (v->kind) {
    case V_STR:
        return PyUnicode_DecodeUTF8((const char *)v->s, v->n, "strict");
    case V_INT:
        return PyLong_FromLongLong(v->i);
    case V_TRUE:
        Py_RETURN_TRUE;
    case V_FALSE:
        Py_RETURN_FALSE;
    default:
        Py_RETURN_NONE;
    }
}

static Py_ssize_t put_varint(uint8_t *out, long long n) {
    unsigned long long z = ((unsigned long long)n << 1) ^ (unsigned long long)(n >> 63);
    Py_ssize_t i = 0;
    while (z > 0x7F) {
        out[i++] = (uint8_t)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    out[i++] = (uint8_t)z;
    return i;
}

static Py_ssize_t put_string(uint8_t *o, const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t at = 0;
    o[at++] = 0x08;
    at += put_varint(o + at, n);
    memcpy(o + at, s, n);
    return at + n;
}

/* values.encode_values of the payload: [value, ...] or, named, [name, value, ...]. */
static PyObject *encode_rest(PyObject *names, Py_ssize_t from, int named, const Val *vals) {
    Py_ssize_t nn = PyTuple_GET_SIZE(names), count = (nn - from) * (named ? 2 : 1), size = 12;
    for (Py_ssize_t j = from; j < nn; j++)
        size += 22 + (vals[j].kind == V_STR ? vals[j].n : 0) + (named ? PyBytes_GET_SIZE(PyTuple_GET_ITEM(names, j)) : 0);
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t at = 0;
    if (count)
        at += put_varint(o, count);
    for (Py_ssize_t j = from; j < nn; j++) {
        const Val *v = &vals[j];
        if (named) {
            PyObject *nm = PyTuple_GET_ITEM(names, j);
            at += put_string(o + at, (const uint8_t *)PyBytes_AS_STRING(nm), PyBytes_GET_SIZE(nm));
        }
        switch (v->kind) {
        case V_STR: at += put_string(o + at, v->s, v->n); break;
        case V_INT: o[at++] = 0x04; at += put_varint(o + at, v->i); break;
        case V_TRUE: o[at++] = 0x02; o[at++] = 1; break;
        case V_FALSE: o[at++] = 0x02; o[at++] = 0; break;
        default: o[at++] = 0x00;
        }
    }
    o[at++] = 0x00;
    if (_PyBytes_Resize(&out, at) < 0)
        return NULL;
    return out;
}

static PyObject *decode_flat(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *names, *event_type;
    int has_id, named;
    Py_ssize_t nkeys, width;
    long long origin;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "decode_flat(value: bytes, spec: tuple, partition, offset)");
        return NULL;
    }
    if (!PyArg_ParseTuple(args[1], "O!pnnpLO", &PyTuple_Type, &names, &has_id, &nkeys, &width, &named, &origin,
                          &event_type))
        return NULL;
    Py_ssize_t nn = PyTuple_GET_SIZE(names), head = has_id ? 2 : 1;
    if (nn > MAX_FIELDS || nn < head + nkeys || !PyType_Check(event_type)) {
        PyErr_SetString(PyExc_ValueError, "decode_flat: a bad spec");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < nn; j++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, j))) {
            PyErr_SetString(PyExc_TypeError, "decode_flat: names must be bytes");
            return NULL;
        }
    Val vals[MAX_FIELDS];
    char found[MAX_FIELDS] = {0};
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    if (!scan_object(p, p + PyBytes_GET_SIZE(args[0]), names, width, vals, found))
        Py_RETURN_NONE;
    for (Py_ssize_t j = 0; j < nn; j++)
        if (!found[j])
            Py_RETURN_NONE;
    long long ts, id;
    if (vals[0].kind != V_INT || __builtin_sub_overflow(vals[0].i, origin, &ts))
        Py_RETURN_NONE;   /* an event time that is no integer; one the origin pushes beyond 64 bits */
    if (has_id) {
        if (vals[1].kind != V_INT)
            Py_RETURN_NONE;
        id = vals[1].i;
    } else {
        long long part = PyLong_AsLongLong(args[2]), off = PyLong_AsLongLong(args[3]);
        if (PyErr_Occurred())
            return NULL;
        if (part < 0 || part >= (1LL << 14) || off < 0 || off >= (1LL << 48))
            Py_RETURN_NONE;
        id = (part << 48) + off;   /* records.derived_id */
    }
    PyObject *key = PyTuple_New(nkeys), *items[4] = {NULL, NULL, key, NULL};
    if (key == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < nkeys; j++) {
        PyObject *o = as_object(&vals[head + j]);
        if (o == NULL)
            goto fail;
        PyTuple_SET_ITEM(key, j, o);
    }
    if (!(items[0] = PyLong_FromLongLong(ts)) || !(items[1] = PyLong_FromLongLong(id)) ||
        !(items[3] = encode_rest(names, head + nkeys, named, vals)))
        goto fail;
    PyTypeObject *tp = (PyTypeObject *)event_type;
    PyObject *ev = tp->tp_alloc(tp, 4);   /* a tuple subclass without fields of its own (a NamedTuple) */
    if (ev == NULL)
        goto fail;
    for (int i = 0; i < 4; i++)
        PyTuple_SET_ITEM(ev, i, items[i]);
    return ev;
fail:
    for (int i = 0; i < 4; i++)
        Py_XDECREF(items[i]);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_flat", (PyCFunction)(void (*)(void))decode_flat, METH_FASTCALL,
     "decode_flat(value, spec, partition, offset) -> Event | None (the module's comment says which records)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__jsonc(void) { return PyModule_Create(&module); }
