/* A reducer's key table (joinlib/runtime/algorithms/keyindex.py: KeyTable, KeyIndex.settle's explicit-set part and
 * KeyIndex.more_live), in C.
 *
 * Why C: a reducer adds and forgets an epoch's tuples, settles their keys and finds the pending keys a new set
 * holds every epoch, with about ten keys a call; in Python each step is a handful of interpreted operations per
 * key plus the call's set-up, 7-18 us a call, more than the reduction's tests themselves.  These functions work
 * on the very Python objects the Python form keeps (the table's ``seqs``, ``keys``, ``slot``, ``base``, ``dig``,
 * ``users``; an index's ``settled``, ``best``, ``_exact``), step for step as the Python form does, so the state
 * others read is the same by construction and the Python form stays the fallback (and the reference the tests
 * compare against, tests/unit/test_keytable_c.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_pyattr.h"

#define DIG 64   /* bytes of a key's digest */

static PyObject *s_seqs, *s_keys, *s_slot, *s_base, *s_dig, *s_users, *s_settled, *s_best, *s_exact, *s_table,
    *s_slack, *s_add, *s_discard, *s_pop, *s_blooms, *s_settle, *s_exact_sets,
    *s_exact_cap, *s_matchers, *s_live, *s_set, *s_bloom, *s_bits, *s_k, *minus_one;

/* ---------------------------------------------------------------------------- helpers */

/* getattr(o, name) as a Py_ssize_t; -1 with an exception set on error (check PyErr_Occurred). */
static Py_ssize_t attr_n(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    Py_ssize_t n = PyNumber_AsSsize_t(v, PyExc_OverflowError);
    Py_DECREF(v);
    return n;
}

static int set_attr_n(PyObject *o, PyObject *name, Py_ssize_t n) {
    PyObject *v = PyLong_FromSsize_t(n);
    if (v == NULL)
        return -1;
    int r = PyObject_SetAttr(o, name, v);
    Py_DECREF(v);
    return r;
}

/* The ValueError zip(strict=True) raises when the two arguments differ in length. */
static void unequal(Py_ssize_t nk, Py_ssize_t ns) {
    PyErr_Format(PyExc_ValueError, "zip() argument 2 is %s than argument 1", ns < nk ? "shorter" : "longer");
}

/* d[k] == n (d[k] must exist: KeyError otherwise): 1, 0, or -1 on error. */
static int item_is(PyObject *d, PyObject *k, Py_ssize_t n) {
    PyObject *v = dict_item(d, k);
    if (v == NULL)
        return -1;
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        return !overflow && x == (long long)n;
    }
    PyObject *w = PyLong_FromSsize_t(n);
    if (w == NULL)
        return -1;
    Py_INCREF(v);
    int r = PyObject_RichCompareBool(v, w, Py_EQ);
    Py_DECREF(v);
    Py_DECREF(w);
    return r;
}

/* Is the slot at i (counted from base) live: its key pending and the slot its latest.  1, 0, -1 on error. */
static int live_slot(PyObject *index, PyObject *slot, PyObject *k, Py_ssize_t at) {
    int in = PyDict_Contains(index, k);
    if (in <= 0)
        return in;
    return item_is(slot, k, at);
}

/* ---------------------------------------------------------------------------- KeyTable */

/* The digests of fs's keys appended to dig (a bytearray): cache.get(k) or remember(k), 64 bytes each. */
static int append_digests(PyObject *dig, PyObject *const *ks, Py_ssize_t n, PyObject *cache, PyObject *remember) {
    Py_ssize_t old = PyByteArray_GET_SIZE(dig);
    if (n > (PY_SSIZE_T_MAX - old) / DIG) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyByteArray_Resize(dig, old + DIG * n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyDict_GetItemWithError(cache, ks[i]);
        if (d != NULL)
            Py_INCREF(d);
        else if (!PyErr_Occurred())
            d = PyObject_CallOneArg(remember, ks[i]);
        if (d == NULL)
            goto fail;
        if (!PyBytes_Check(d) || PyBytes_GET_SIZE(d) != DIG) {
            PyErr_SetString(PyExc_ValueError, "a key's digest must be 64 bytes");
            Py_DECREF(d);
            goto fail;
        }
        /* the buffer is read again each time: remember() runs Python code */
        memcpy(PyByteArray_AS_STRING(dig) + old + DIG * i, PyBytes_AS_STRING(d), DIG);
        Py_DECREF(d);
    }
    return 0;
fail:
    if (PyByteArray_GET_SIZE(dig) == old + DIG * n) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (PyByteArray_Resize(dig, old) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    return -1;
}

/* seqs[k]: seq pending too (an int alone, a set of several).  A key not pending yet (most of a batch's) is looked
 * up and inserted at once (setdefault); one pending already has its entry changed as the Python form does. */
static int add_seq(PyObject *index, PyObject *k, PyObject *seq) {
    Py_ssize_t had = PyDict_GET_SIZE(index);
    PyObject *got = PyDict_SetDefault(index, k, seq);
    if (got == NULL)
        return -1;
    if (PyDict_GET_SIZE(index) != had)   /* inserted (got is seq itself, which may also be the value kept) */
        return 0;
    int r;
    Py_INCREF(got);
    if (PyLong_Check(got)) {
        PyObject *s = PySet_New(NULL);
        r = (s == NULL || PySet_Add(s, got) < 0 || PySet_Add(s, seq) < 0) ? -1 : PyDict_SetItem(index, k, s);
        Py_XDECREF(s);
    } else if (PySet_Check(got)) {
        r = PySet_Add(got, seq);
    } else {
        PyObject *x = PyObject_CallMethodOneArg(got, s_add, seq);
        r = x == NULL ? -1 : 0;
        Py_XDECREF(x);
    }
    Py_DECREF(got);
    return r;
}

/* The first half of add_all and discard_all: keys and seqs as fast sequences (*kf, *sf), the table's ``seqs``
 * (*index), and step(index, key, seq) for each pair, as zip(keys, seqs, strict=True) would pair them.  0, or -1
 * with an exception; the references set are the caller's to release either way. */
static int each_seq(PyObject *const *args, int (*step)(PyObject *, PyObject *, PyObject *), PyObject **kf,
                    PyObject **sf, PyObject **index) {
    if ((*kf = PySequence_Fast(args[1], "keys must be a sequence")) == NULL ||
        (*sf = PySequence_Fast(args[2], "seqs must be a sequence")) == NULL ||
        (*index = attr(args[0], s_seqs, &PyDict_Type)) == NULL)
        return -1;
    Py_ssize_t nk = PySequence_Fast_GET_SIZE(*kf), ns = PySequence_Fast_GET_SIZE(*sf), n = nk < ns ? nk : ns;
    PyObject **ks = PySequence_Fast_ITEMS(*kf), **ss = PySequence_Fast_ITEMS(*sf);
    for (Py_ssize_t i = 0; i < n; i++)
        if (step(*index, ks[i], ss[i]) < 0)
            return -1;
    if (nk != ns) {
        unequal(nk, ns);
        return -1;
    }
    return 0;
}

/* add_all(table, keys, seqs, cache, remember): KeyTable.add_all, with bloom.digests's cache and miss. */
static PyObject *add_all(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "add_all(table, keys, seqs, cache, remember)");
        return NULL;
    }
    PyObject *table = args[0], *cache = args[3], *remember = args[4];
    if (!PyDict_Check(cache)) {
        PyErr_SetString(PyExc_TypeError, "the digest cache must be a dict");
        return NULL;
    }
    PyObject *kf = NULL, *sf = NULL, *index = NULL, *keys = NULL, *slot = NULL, *dig = NULL, *ret = NULL;
    if (each_seq(args, add_seq, &kf, &sf, &index) < 0)
        goto done;
    Py_ssize_t nk = PySequence_Fast_GET_SIZE(kf);
    PyObject **ks = PySequence_Fast_ITEMS(kf);
    if (nk) {
        Py_ssize_t base = attr_n(table, s_base);
        if (base == -1 && PyErr_Occurred())
            goto done;
        if ((keys = attr(table, s_keys, &PyList_Type)) == NULL)
            goto done;
        Py_ssize_t at = base + PyList_GET_SIZE(keys);
        if (PyList_SetSlice(keys, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, kf) < 0)
            goto done;
        if ((slot = attr(table, s_slot, &PyDict_Type)) == NULL)
            goto done;
        for (Py_ssize_t i = 0; i < nk; i++) {
            PyObject *v = PyLong_FromSsize_t(at + i);
            if (v == NULL || PyDict_SetItem(slot, ks[i], v) < 0) {
                Py_XDECREF(v);
                goto done;
            }
            Py_DECREF(v);
        }
        if ((dig = attr(table, s_dig, &PyByteArray_Type)) == NULL ||
            append_digests(dig, ks, nk, cache, remember) < 0)
            goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    Py_XDECREF(kf);
    Py_XDECREF(sf);
    Py_XDECREF(index);
    Py_XDECREF(keys);
    Py_XDECREF(slot);
    Py_XDECREF(dig);
    return ret;
}

/* seqs[k]: seq no longer pending. */
static int discard_seq(PyObject *index, PyObject *k, PyObject *seq) {
    PyObject *got = dict_item(index, k);
    if (got == NULL)
        return -1;
    int r = 0;
    Py_INCREF(got);
    if (PyLong_Check(got)) {
        int eq = PyObject_RichCompareBool(got, seq, Py_EQ);
        r = eq < 0 ? -1 : eq ? PyDict_DelItem(index, k) : 0;
    } else if (PySet_Check(got)) {
        if (PySet_Discard(got, seq) < 0)
            r = -1;
        else if (PySet_GET_SIZE(got) == 1) {
            PyObject *one = PySet_Pop(got);
            r = one == NULL ? -1 : PyDict_SetItem(index, k, one);
            Py_XDECREF(one);
        }
    } else {
        PyObject *x = PyObject_CallMethodOneArg(got, s_discard, seq);
        Py_ssize_t len = x == NULL ? -1 : PyObject_Length(got);
        Py_XDECREF(x);
        if (len < 0)
            r = -1;
        else if (len == 1) {
            PyObject *one = PyObject_CallMethodNoArgs(got, s_pop);
            r = one == NULL ? -1 : PyDict_SetItem(index, k, one);
            Py_XDECREF(one);
        }
    }
    Py_DECREF(got);
    return r;
}

/* KeyTable._trim's rebuild: the live keys of the table's slots, their digests (copied from the old buffer: a key's
 * digest is a function of the key), their slots, and each index's ``best`` of them. */
static int sweep(PyObject *table, PyObject *index, PyObject *keys, PyObject *slot, PyObject *users) {
    int ok = -1;
    PyObject *live = NULL, *dig = NULL, *ndig = NULL, *nslot = NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys), nl = 0;
    Py_ssize_t *at = PyMem_New(Py_ssize_t, n ? n : 1);   /* the live slots' numbers */
    Py_ssize_t base = attr_n(table, s_base);
    if (at == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if ((base == -1 && PyErr_Occurred()) || (live = PyList_New(0)) == NULL ||
        (dig = attr(table, s_dig, &PyByteArray_Type)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n && i < PyList_GET_SIZE(keys); i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        Py_INCREF(k);
        int is = live_slot(index, slot, k, base + i);
        int r = is <= 0 ? is : PyList_Append(live, k);
        Py_DECREF(k);
        if (r < 0)
            goto done;
        if (is)
            at[nl++] = i;
    }
    if (nl < n) {
        if (PyByteArray_GET_SIZE(dig) < DIG * n) {
            PyErr_SetString(PyExc_ValueError, "the table's digests are fewer than its slots");
            goto done;
        }
        if ((ndig = PyByteArray_FromStringAndSize(NULL, DIG * nl)) == NULL)
            goto done;
        char *to = PyByteArray_AS_STRING(ndig), *from = PyByteArray_AS_STRING(dig);
        for (Py_ssize_t j = 0; j < nl; j++)
            memcpy(to + DIG * j, from + DIG * at[j], DIG);
        if (PyObject_SetAttr(table, s_keys, live) < 0 || PyObject_SetAttr(table, s_dig, ndig) < 0)
            goto done;
    }
    if ((nslot = PyDict_New()) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < nl; i++) {
        PyObject *v = PyLong_FromSsize_t(base + i);
        if (v == NULL || PyDict_SetItem(nslot, PyList_GET_ITEM(live, i), v) < 0) {
            Py_XDECREF(v);
            goto done;
        }
        Py_DECREF(v);
    }
    if (PyObject_SetAttr(table, s_slot, nslot) < 0)
        goto done;
    for (Py_ssize_t u = 0; u < PyList_GET_SIZE(users); u++) {
        PyObject *user = PyList_GET_ITEM(users, u);
        Py_INCREF(user);
        PyObject *best = attr(user, s_best, &PyDict_Type), *nbest = NULL;
        int r = -1;
        if (best != NULL && (nbest = PyDict_New()) != NULL) {
            r = 0;
            for (Py_ssize_t i = 0; i < nl && r == 0; i++) {
                PyObject *k = PyList_GET_ITEM(live, i);
                PyObject *v = PyDict_GetItemWithError(best, k);
                if (v != NULL)
                    r = PyDict_SetItem(nbest, k, v);
                else if (PyErr_Occurred())
                    r = -1;
            }
            if (r == 0)
                r = PyObject_SetAttr(user, s_best, nbest) < 0 || set_attr_n(user, s_settled, nl) < 0 ? -1 : 0;
        }
        Py_XDECREF(best);
        Py_XDECREF(nbest);
        Py_DECREF(user);
        if (r < 0)
            goto done;
    }
    ok = 0;
done:
    PyMem_Free(at);
    Py_XDECREF(live);
    Py_XDECREF(dig);
    Py_XDECREF(ndig);
    Py_XDECREF(nslot);
    return ok;
}

/* KeyTable._trim */
static int trim(PyObject *table, PyObject *index, PyObject *users) {
    int ok = -1;
    PyObject *keys = NULL, *slot = NULL, *dig = NULL;
    Py_ssize_t base = attr_n(table, s_base);
    if ((base == -1 && PyErr_Occurred()) || (keys = attr(table, s_keys, &PyList_Type)) == NULL ||
        (slot = attr(table, s_slot, &PyDict_Type)) == NULL)
        goto done;
    Py_ssize_t head = 0;
    while (head < PyList_GET_SIZE(keys)) {
        PyObject *k = PyList_GET_ITEM(keys, head);
        Py_INCREF(k);
        int is = live_slot(index, slot, k, base + head);
        Py_DECREF(k);
        if (is < 0)
            goto done;
        if (is)
            break;
        head++;
    }
    if (head) {
        for (Py_ssize_t u = 0; u < PyList_GET_SIZE(users); u++) {
            PyObject *user = PyList_GET_ITEM(users, u);
            Py_INCREF(user);
            Py_ssize_t s = attr_n(user, s_settled);
            int r = (s == -1 && PyErr_Occurred()) ? -1 : set_attr_n(user, s_settled, s - head);
            Py_DECREF(user);
            if (r < 0)
                goto done;
        }
        if (PyList_SetSlice(keys, 0, head, NULL) < 0 || (dig = attr(table, s_dig, NULL)) == NULL ||
            PySequence_DelSlice(dig, 0, DIG * head) < 0 || set_attr_n(table, s_base, base + head) < 0)
            goto done;
    }
    Py_ssize_t slack = attr_n(table, s_slack);
    if (slack == -1 && PyErr_Occurred())
        goto done;
    if (PyDict_GET_SIZE(slot) > 2 * PyDict_GET_SIZE(index) + slack && sweep(table, index, keys, slot, users) < 0)
        goto done;
    ok = 0;
done:
    Py_XDECREF(keys);
    Py_XDECREF(slot);
    Py_XDECREF(dig);
    return ok;
}

/* discard_all(table, keys, seqs): KeyTable.discard_all (and _trim when every index has settled the table). */
static PyObject *discard_all(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "discard_all(table, keys, seqs)");
        return NULL;
    }
    PyObject *table = args[0];
    PyObject *kf = NULL, *sf = NULL, *index = NULL, *keys = NULL, *users = NULL, *ret = NULL;
    if (each_seq(args, discard_seq, &kf, &sf, &index) < 0)
        goto done;
    if ((keys = attr(table, s_keys, NULL)) == NULL || (users = attr(table, s_users, &PyList_Type)) == NULL)
        goto done;
    Py_ssize_t len = PyObject_Length(keys);
    if (len < 0)
        goto done;
    for (Py_ssize_t u = 0; u < PyList_GET_SIZE(users); u++) {
        Py_ssize_t s = attr_n(PyList_GET_ITEM(users, u), s_settled);
        if (s == -1 && PyErr_Occurred())
            goto done;
        if (s != len) {
            ret = Py_NewRef(Py_None);
            goto done;
        }
    }
    if (trim(table, index, users) < 0)
        goto done;
    ret = Py_NewRef(Py_None);
done:
    Py_XDECREF(kf);
    Py_XDECREF(sf);
    Py_XDECREF(index);
    Py_XDECREF(keys);
    Py_XDECREF(users);
    return ret;
}

/* trim(table): KeyTable._trim */
static PyObject *trim_(PyObject *mod, PyObject *table) {
    PyObject *index = attr(table, s_seqs, &PyDict_Type), *users = NULL;
    int r = -1;
    if (index != NULL && (users = attr(table, s_users, &PyList_Type)) != NULL)
        r = trim(table, index, users);
    Py_XDECREF(index);
    Py_XDECREF(users);
    return r < 0 ? NULL : Py_NewRef(Py_None);
}

/* holding_set(seqs, held): the pending keys an explicit set holds, each once (KeyTable.holding). */
static PyObject *holding_set(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyAnySet_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "holding_set(seqs: dict, held: set)");
        return NULL;
    }
    PyObject *seqs = args[0], *held = args[1];
    PyObject *out = PyList_New(0), *it, *k;
    if (out == NULL)
        return NULL;
    int small = PySet_GET_SIZE(held) < PyDict_GET_SIZE(seqs);
    PyObject *among = small ? seqs : held;
    if ((it = PyObject_GetIter(small ? held : seqs)) == NULL)
        goto fail;
    while ((k = PyIter_Next(it)) != NULL) {
        int in = small ? PyDict_Contains(among, k) : PySet_Contains(among, k);
        int r = in <= 0 ? in : PyList_Append(out, k);
        Py_DECREF(k);
        if (r < 0) {
            Py_DECREF(it);
            goto fail;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        goto fail;
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* live_hits(table, hits): the keys of the slots ``hits`` (numbers in the buffer) that are live. */
static PyObject *live_hits(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "live_hits(table, hits)");
        return NULL;
    }
    PyObject *table = args[0];
    PyObject *hf = NULL, *index = NULL, *keys = NULL, *slot = NULL, *out = NULL;
    Py_ssize_t base = attr_n(table, s_base);
    if ((base == -1 && PyErr_Occurred()) || (hf = PySequence_Fast(args[1], "hits must be a sequence")) == NULL ||
        (index = attr(table, s_seqs, &PyDict_Type)) == NULL ||
        (keys = attr(table, s_keys, &PyList_Type)) == NULL || (slot = attr(table, s_slot, &PyDict_Type)) == NULL ||
        (out = PyList_New(0)) == NULL)
        goto fail;
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(hf); j++) {
        Py_ssize_t i = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(hf, j), PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            goto fail;
        Py_ssize_t n = PyList_GET_SIZE(keys);
        if (i < 0)
            i += n;
        if (i < 0 || i >= n) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            goto fail;
        }
        PyObject *k = PyList_GET_ITEM(keys, i);
        Py_INCREF(k);
        int is = live_slot(index, slot, k, base + i);
        int r = is <= 0 ? is : PyList_Append(out, k);
        Py_DECREF(k);
        if (r < 0)
            goto fail;
    }
    Py_DECREF(hf);
    Py_DECREF(index);
    Py_DECREF(keys);
    Py_DECREF(slot);
    return out;
fail:
    Py_XDECREF(hf);
    Py_XDECREF(index);
    Py_XDECREF(keys);
    Py_XDECREF(slot);
    Py_XDECREF(out);
    return NULL;
}

/* ---------------------------------------------------------------------------- KeyIndex */

/* settle(index, latest): KeyIndex.settle after its live sets are set: the keys of the table's slots since
 * ``index.settled`` get their latest tag in ``index.best`` -- with latest None (no live Bloom filter), the latest
 * tag of an explicit set holding them (-1: none); else ``latest`` (the filters' answer, a tag per key) raised to
 * an explicit set's tag where that is later. */
static int settle_index(PyObject *self, PyObject *latest) {
    PyObject *table = NULL, *keys = NULL, *exact = NULL, *best = NULL, *lf = NULL;
    int ret = -1;
    Py_ssize_t start = attr_n(self, s_settled);
    if ((start == -1 && PyErr_Occurred()) || (table = PyObject_GetAttr(self, s_table)) == NULL ||
        (keys = attr(table, s_keys, &PyList_Type)) == NULL)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (set_attr_n(self, s_settled, n) < 0)
        goto done;
    if (start < 0)   /* keys[start:] */
        start = start + n < 0 ? 0 : start + n;
    if (start >= n) {
        ret = 0;
        goto done;
    }
    if ((exact = attr(self, s_exact, &PyDict_Type)) == NULL || (best = attr(self, s_best, &PyDict_Type)) == NULL)
        goto done;
    /* the slots' keys first (a reference each: setting an item may run a key's __eq__) */
    Py_ssize_t m = n - start;
    PyObject *added = PyList_GetSlice(keys, start, n);
    if (added == NULL)
        goto done;
    if (latest == Py_None) {
        int any = PyDict_GET_SIZE(exact) > 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject *k = PyList_GET_ITEM(added, i), *v = minus_one;
            if (any && (v = PyDict_GetItemWithError(exact, k)) == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                v = minus_one;
            }
            Py_INCREF(v);
            int r = PyDict_SetItem(best, k, v);
            Py_DECREF(v);
            if (r < 0)
                goto fail;
        }
    } else {
        if ((lf = PySequence_Fast(latest, "latest must be a sequence")) == NULL)
            goto fail;
        if (PySequence_Fast_GET_SIZE(lf) != m) {
            unequal(m, PySequence_Fast_GET_SIZE(lf));
            goto fail;
        }
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject *k = PyList_GET_ITEM(added, i), *v = PySequence_Fast_GET_ITEM(lf, i);
            PyObject *e = PyDict_GetItemWithError(exact, k);
            Py_INCREF(v);
            if (e != NULL) {
                Py_INCREF(e);
                int later = PyObject_RichCompareBool(e, v, Py_GT);
                if (later > 0)
                    Py_SETREF(v, Py_NewRef(e));
                Py_DECREF(e);
                if (later < 0) {
                    Py_DECREF(v);
                    goto fail;
                }
            } else if (PyErr_Occurred()) {
                Py_DECREF(v);
                goto fail;
            }
            int r = PyDict_SetItem(best, k, v);
            Py_DECREF(v);
            if (r < 0)
                goto fail;
        }
    }
    ret = 0;
fail:
    Py_DECREF(added);
done:
    Py_XDECREF(table);
    Py_XDECREF(keys);
    Py_XDECREF(exact);
    Py_XDECREF(best);
    Py_XDECREF(lf);
    return ret;
}

static PyObject *settle(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "settle(index, latest)");
        return NULL;
    }
    return settle_index(args[0], args[1]) < 0 ? NULL : Py_NewRef(Py_None);
}

/* KeyIndex.settle() of an index whose live sets are set (KeyIndex._settle_c): with no live Bloom filter, the
 * explicit sets' tags; else latest(filters, digests of the slots since ``settled``) -- _bloomc.latest, what
 * bloom.latest_tags calls -- raised to the explicit sets' tags; with latest None (no Bloom kernel), the index's
 * own settle method, which tests the filters in its array form. */
static int settle_user(PyObject *user, PyObject *latest) {
    PyObject *blooms = attr(user, s_blooms, &PyList_Type), *table = NULL, *keys = NULL, *dig = NULL,
             *tail = NULL, *got = NULL;
    int ret = -1;
    if (blooms == NULL)
        return -1;
    if (PyList_GET_SIZE(blooms) == 0) {
        ret = settle_index(user, Py_None);
        goto done;
    }
    if (latest == Py_None) {
        PyObject *r = PyObject_CallMethodNoArgs(user, s_settle);
        ret = r == NULL ? -1 : 0;
        Py_XDECREF(r);
        goto done;
    }
    Py_ssize_t start = attr_n(user, s_settled);
    if ((start == -1 && PyErr_Occurred()) || (table = PyObject_GetAttr(user, s_table)) == NULL ||
        (keys = attr(table, s_keys, &PyList_Type)) == NULL)
        goto done;
    if (start == PyList_GET_SIZE(keys)) {
        ret = 0;
        goto done;
    }
    /* table.dig[64 * start:], as _settle_c slices it */
    PyObject *from = PyLong_FromSsize_t(DIG * start), *sl = from ? PySlice_New(from, Py_None, NULL) : NULL;
    Py_XDECREF(from);
    if (sl == NULL || (dig = PyObject_GetAttr(table, s_dig)) == NULL) {
        Py_XDECREF(sl);
        goto done;
    }
    tail = PyObject_GetItem(dig, sl);
    Py_DECREF(sl);
    if (tail == NULL)
        goto done;
    PyObject *la[2] = {blooms, tail};
    if ((got = PyObject_Vectorcall(latest, la, 2, NULL)) == NULL)
        goto done;
    ret = settle_index(user, got);
done:
    Py_DECREF(blooms);
    Py_XDECREF(table);
    Py_XDECREF(keys);
    Py_XDECREF(dig);
    Py_XDECREF(tail);
    Py_XDECREF(got);
    return ret;
}

/* add_settle(table, keys, seqs, cache, remember, latest): KeyTable.add_settle -- add_all, then every index over
 * the table settled (settle_user; latest: _bloomc.latest, or None).  A reducer's batch in one call, where the
 * Python form makes a call per index and three more per index with live filters. */
static PyObject *add_settle(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "add_settle(table, keys, seqs, cache, remember, latest)");
        return NULL;
    }
    PyObject *r = add_all(mod, args, 5), *users;
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    if ((users = attr(args[0], s_users, &PyList_Type)) == NULL)
        return NULL;
    for (Py_ssize_t u = 0; u < PyList_GET_SIZE(users); u++) {
        PyObject *user = PyList_GET_ITEM(users, u);
        Py_INCREF(user);
        int bad = settle_user(user, args[5]) < 0;
        Py_DECREF(user);
        if (bad) {
            Py_DECREF(users);
            return NULL;
        }
    }
    Py_DECREF(users);
    return Py_NewRef(Py_None);
}

/* KeyIndex._hold: an explicit set's keys at its tag in ``exact`` (a key keeps its latest tag), one more explicit set
 * counted in *nexact. */
static int hold(PyObject *exact, PyObject *held, PyObject *tag, Py_ssize_t *nexact) {
    PyObject *it = PyObject_GetIter(held), *k;
    int r = 0;
    if (it == NULL)
        return -1;
    ++*nexact;
    while (r == 0 && (k = PyIter_Next(it)) != NULL) {
        PyObject *old = PyDict_GetItemWithError(exact, k);
        int below = old == NULL ? (PyErr_Occurred() ? -1 : PyObject_RichCompareBool(minus_one, tag, Py_LT))
                                : PyObject_RichCompareBool(old, tag, Py_LT);
        r = below < 0 ? -1 : below ? PyDict_SetItem(exact, k, tag) : 0;
        Py_DECREF(k);
    }
    Py_DECREF(it);
    return r == 0 && PyErr_Occurred() ? -1 : r;
}

/* A live set (number, tag, matcher) kept in the forms an index tests: an explicit set's keys in ``exact``, a filter
 * as (m, tag) in ``matchers`` and (bits, k, tag) in ``blooms``. */
static int keep(PyObject *f, PyObject *exact, PyObject *matchers, PyObject *blooms, Py_ssize_t *nexact) {
    if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 3) {
        PyErr_SetString(PyExc_TypeError, "a live set must be (number, tag, matcher)");
        return -1;
    }
    PyObject *tag = PyTuple_GET_ITEM(f, 1), *m = PyTuple_GET_ITEM(f, 2), *held = PyObject_GetAttr(m, s_set);
    if (held == NULL)
        return -1;
    int r;
    if (held != Py_None) {
        r = hold(exact, held, tag, nexact);
    } else {
        PyObject *b = PyObject_GetAttr(m, s_bloom), *bits = NULL, *k = NULL, *pair = NULL, *form = NULL;
        r = b == NULL || (bits = PyObject_GetAttr(b, s_bits)) == NULL || (k = PyObject_GetAttr(b, s_k)) == NULL ||
            (pair = PyTuple_Pack(2, m, tag)) == NULL || (form = PyTuple_Pack(3, bits, k, tag)) == NULL ||
            PyList_Append(matchers, pair) < 0 || PyList_Append(blooms, form) < 0 ? -1 : 0;
        Py_XDECREF(b);
        Py_XDECREF(bits);
        Py_XDECREF(k);
        Py_XDECREF(pair);
        Py_XDECREF(form);
    }
    Py_DECREF(held);
    return r;
}

/* A filter (m, tag) of the forms kept before a rebuild, at or after *j of ``matchers`` (scanning forward): its
 * (m, tag) and (bits, k, tag) appended to the new forms as they are, 1; 0 when it is not there.  The live sets keep
 * the order they arrived in and only lose sets, so the filters that stay are found in one pass, and a rebuild
 * copies references instead of reading every filter's attributes and packing its forms anew. */
static int reuse(PyObject *m, PyObject *tag, PyObject *old_m, PyObject *old_b, Py_ssize_t *j, PyObject *matchers,
                 PyObject *blooms) {
    for (Py_ssize_t i = *j; i < PyList_GET_SIZE(old_m) && i < PyList_GET_SIZE(old_b); i++) {
        PyObject *pair = PyList_GET_ITEM(old_m, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || PyTuple_GET_ITEM(pair, 0) != m)
            continue;
        int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(pair, 1), tag, Py_EQ);
        if (same < 0)
            return -1;
        if (!same)
            continue;
        *j = i + 1;
        return PyList_Append(matchers, pair) < 0 || PyList_Append(blooms, PyList_GET_ITEM(old_b, i)) < 0 ? -1 : 1;
    }
    return 0;
}

/* KeyIndex.live: the forms rebuilt from the live sets (a filter kept already reused as it is: reuse). */
static int live_index(PyObject *self, PyObject *sets) {
    PyObject *sf = PySequence_Fast(sets, "the live sets must be a sequence"), *exact = NULL, *matchers = NULL,
             *blooms = NULL, *old_m = NULL, *old_b = NULL;
    Py_ssize_t nexact = 0, j = 0;
    int r = -1;
    if (sf == NULL || (exact = PyDict_New()) == NULL || (matchers = PyList_New(0)) == NULL ||
        (blooms = PyList_New(0)) == NULL || (old_m = attr(self, s_matchers, &PyList_Type)) == NULL ||
        (old_b = attr(self, s_blooms, &PyList_Type)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sf); i++) {
        PyObject *f = PySequence_Fast_GET_ITEM(sf, i);
        int got = 0;
        if (PyTuple_Check(f) && PyTuple_GET_SIZE(f) == 3 &&
            (got = reuse(PyTuple_GET_ITEM(f, 2), PyTuple_GET_ITEM(f, 1), old_m, old_b, &j, matchers, blooms)) < 0)
            goto done;
        if (!got && keep(f, exact, matchers, blooms, &nexact) < 0)
            goto done;
    }
    Py_ssize_t cap = 2 * PyDict_GET_SIZE(exact);
    if (PyObject_SetAttr(self, s_exact, exact) < 0 || set_attr_n(self, s_exact_sets, nexact) < 0 ||
        set_attr_n(self, s_exact_cap, cap > 64 ? cap : 64) < 0 || PyObject_SetAttr(self, s_matchers, matchers) < 0 ||
        PyObject_SetAttr(self, s_blooms, blooms) < 0)
        goto done;
    r = 0;
done:
    Py_XDECREF(sf);
    Py_XDECREF(exact);
    Py_XDECREF(matchers);
    Py_XDECREF(blooms);
    Py_XDECREF(old_m);
    Py_XDECREF(old_b);
    return r;
}

static PyObject *live(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "live(index, sets)");
        return NULL;
    }
    return live_index(args[0], args[1]) < 0 ? NULL : Py_NewRef(Py_None);
}

/* more_live(index, sets, new): KeyIndex.more_live -- the sets of ``new`` added to the forms kept, or the forms
 * rebuilt from ``sets`` (live_index) when the expired ones are too many.  A set arrives at every reducer every
 * epoch. */
static PyObject *more_live(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "more_live(index, sets, new)");
        return NULL;
    }
    PyObject *self = args[0], *sets = args[1], *nf = NULL, *exact = NULL, *matchers = NULL, *blooms = NULL,
             *ret = NULL;
    Py_ssize_t nexact = attr_n(self, s_exact_sets), cap = -1, nsets = -1;
    if (!PyErr_Occurred() && ((cap = attr_n(self, s_exact_cap)) != -1 || !PyErr_Occurred()))
        nsets = PyObject_Length(sets);
    if (nsets < 0 || (exact = attr(self, s_exact, &PyDict_Type)) == NULL ||
        (matchers = attr(self, s_matchers, &PyList_Type)) == NULL || (blooms = attr(self, s_blooms, &PyList_Type)) == NULL)
        goto done;
    if (4 * (nexact + PyList_GET_SIZE(matchers)) > 5 * nsets || PyDict_GET_SIZE(exact) > cap) {
        if (live_index(self, sets) == 0)
            ret = Py_NewRef(Py_None);
        goto done;
    }
    if ((nf = PySequence_Fast(args[2], "new must be a sequence")) == NULL)
        goto done;
    Py_ssize_t was = nexact;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(nf); i++)
        if (keep(PySequence_Fast_GET_ITEM(nf, i), exact, matchers, blooms, &nexact) < 0)
            goto done;
    if (nexact != was && set_attr_n(self, s_exact_sets, nexact) < 0)
        goto done;
    ret = Py_NewRef(Py_None);
done:
    Py_XDECREF(nf);
    Py_XDECREF(exact);
    Py_XDECREF(matchers);
    Py_XDECREF(blooms);
    return ret;
}

static PyMethodDef methods[] = {
    {"add_all", (PyCFunction)(void (*)(void))add_all, METH_FASTCALL,
     "add_all(table, keys, seqs, cache, remember): KeyTable.add_all (digests: cache.get(key) or remember(key))"},
    {"discard_all", (PyCFunction)(void (*)(void))discard_all, METH_FASTCALL,
     "discard_all(table, keys, seqs): KeyTable.discard_all"},
    {"trim", trim_, METH_O, "trim(table): KeyTable._trim"},
    {"holding_set", (PyCFunction)(void (*)(void))holding_set, METH_FASTCALL,
     "holding_set(seqs, held): the pending keys an explicit set holds (KeyTable.holding)"},
    {"live_hits", (PyCFunction)(void (*)(void))live_hits, METH_FASTCALL,
     "live_hits(table, hits): the keys of the live slots among a filter's hits (KeyTable.holding)"},
    {"add_settle", (PyCFunction)(void (*)(void))add_settle, METH_FASTCALL,
     "add_settle(table, keys, seqs, cache, remember, latest): KeyTable.add_settle (latest: _bloomc.latest or None)"},
    {"live", (PyCFunction)(void (*)(void))live, METH_FASTCALL, "live(index, sets): KeyIndex.live"},
    {"more_live", (PyCFunction)(void (*)(void))more_live, METH_FASTCALL,
     "more_live(index, sets, new): KeyIndex.more_live"},
    {"settle", (PyCFunction)(void (*)(void))settle, METH_FASTCALL,
     "settle(index, latest): KeyIndex.settle's update of best (latest None: explicit sets only)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_keytablec", NULL, -1, methods};

PyMODINIT_FUNC PyInit__keytablec(void) {
    struct {
        PyObject **at;
        const char *s;
    } names[] = {{&s_seqs, "seqs"}, {&s_keys, "keys"}, {&s_slot, "slot"}, {&s_base, "base"}, {&s_dig, "dig"},
                 {&s_users, "users"}, {&s_settled, "settled"}, {&s_best, "best"}, {&s_exact, "_exact"},
                 {&s_table, "table"}, {&s_slack, "slack"}, {&s_add, "add"}, {&s_discard, "discard"},
                 {&s_pop, "pop"}, {&s_blooms, "_blooms"}, {&s_settle, "settle"},
                 {&s_exact_sets, "_exact_sets"}, {&s_exact_cap, "_exact_cap"}, {&s_matchers, "_matchers"},
                 {&s_live, "live"}, {&s_set, "_set"}, {&s_bloom, "_bloom"}, {&s_bits, "bits"}, {&s_k, "k"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i].at == NULL && (*names[i].at = PyUnicode_InternFromString(names[i].s)) == NULL)
            return NULL;
    if (minus_one == NULL && (minus_one = PyLong_FromLong(-1)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
