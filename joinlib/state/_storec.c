/* The in-memory window store's per-batch loops (joinlib/state/memory.py: MemoryWindowStore.insert's usual case
 * and _append, purge_below with KeyList.drop_below and pop_oldest), in C.
 *
 * Why C: every plan puts every tuple of every window it keeps through the store: an epoch's batch (about ten
 * tuples) is appended to the window and to each index's per-key lists, and the expired prefix is purged from
 * them.  In Python that is a key projection, a dict look-up and a KeyList made or three appends per tuple and
 * index, and a count of the purged keys per index: about a third of central:r1's processing time on the demo's
 * query.  These functions do the same steps on the same Python objects (the store's ``_all`` KeyList, its
 * ``_indexes`` dict of (table, projector), the tables' KeyLists with their ``ts``/``seq``/``tups`` lists and
 * ``lo``), in the same order (a table's new keys are inserted in the order the Python form inserts them), so
 * every reader sees the same state; the Python form stays the fallback and the reference the tests compare
 * against (tests/property/test_store_c.py).
 *
 * KeyList's and Tup's slots are read at their offsets (setup() checks they are object slots); an object of
 * another type is read through getattr, and a projector the kernel does not know is called.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

static PyObject *s_ts, *s_seq, *s_tups, *s_lo, *s_key, *s_n, *s_positions;
static PyTypeObject *keylist_type, *tup_type, *prefix_type, *pick_type;
static Py_ssize_t kl_ts, kl_seq, kl_tups, kl_lo;   /* KeyList's slots */
static Py_ssize_t tp_ts, tp_seq, tp_key;          /* Tup's */
static int kl_plain;                               /* KeyList made by object.__new__: of_one by tp_alloc */

enum { TS, SEQ, TUPS, LO };

/* ---------------------------------------------------------------------------- attributes */

/* The offset of the object slot ``name`` of ``type``; -1 with TypeError if it is not one. */
static Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name) {
    PyObject *d = PyObject_GetAttr((PyObject *)type, name);
    if (d == NULL)
        return -1;
    Py_ssize_t off = -1;
    if (PyObject_TypeCheck(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY) && m->offset > 0)
            off = m->offset;
    }
    Py_DECREF(d);
    if (off < 0)
        PyErr_Format(PyExc_TypeError, "%s.%U is not a writable object slot", type->tp_name, name);
    return off;
}

/* o.<slot at off> (o of the type the offset is of), or getattr(o, name) for another type: a new reference, or
 * NULL with AttributeError (an unset slot, as Python raises it) or getattr's error. */
static PyObject *field(PyObject *o, PyTypeObject *type, Py_ssize_t off, PyObject *name) {
    if (Py_TYPE(o) != type)
        return PyObject_GetAttr(o, name);
    PyObject *v = SLOT(o, off);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.50s' object has no attribute '%U'", type->tp_name, name);
        return NULL;
    }
    Py_INCREF(v);
    return v;
}

static const Py_ssize_t *kl_offs[] = {&kl_ts, &kl_seq, &kl_tups, &kl_lo};
static PyObject **kl_names[] = {&s_ts, &s_seq, &s_tups, &s_lo};

/* A KeyList's ts/seq/tups list (checked to be a list) or lo: a new reference or NULL. */
static PyObject *kl_field(PyObject *kl, int which) {
    PyObject *v = field(kl, keylist_type, *kl_offs[which], *kl_names[which]);
    if (v != NULL && which != LO && !PyList_Check(v)) {
        PyErr_Format(PyExc_TypeError, "KeyList.%U must be a list, not %.100s", *kl_names[which], Py_TYPE(v)->tp_name);
        Py_CLEAR(v);
    }
    return v;
}

static int kl_set_lo(PyObject *kl, Py_ssize_t lo) {
    PyObject *v = PyLong_FromSsize_t(lo);
    if (v == NULL)
        return -1;
    if (Py_TYPE(kl) == keylist_type) {
        Py_XSETREF(SLOT(kl, kl_lo), v);
        return 0;
    }
    int r = PyObject_SetAttr(kl, s_lo, v);
    Py_DECREF(v);
    return r;
}

static Py_ssize_t kl_get_lo(PyObject *kl) {
    PyObject *v = kl_field(kl, LO);
    if (v == NULL)
        return -1;
    Py_ssize_t lo = PyNumber_AsSsize_t(v, PyExc_OverflowError);
    Py_DECREF(v);
    return lo;
}

/* ---------------------------------------------------------------------------- KeyList steps */

/* KeyList._maybe_compact with the lists and lo already read. */
static int compact(PyObject *kl, PyObject **lists, Py_ssize_t lo) {
    if (lo > 64 && lo * 2 > PyList_GET_SIZE(lists[TUPS])) {
        for (int i = TS; i <= TUPS; i++)
            if (PyList_SetSlice(lists[i], 0, lo, NULL) < 0)
                return -1;
        return kl_set_lo(kl, 0);
    }
    return 0;
}

/* The three lists of kl into lists[TS..TUPS] (new references); -1 with them cleared on error. */
static int kl_lists(PyObject *kl, PyObject **lists) {
    for (int i = TS; i <= TUPS; i++)
        if ((lists[i] = kl_field(kl, i)) == NULL) {
            while (--i >= TS)
                Py_CLEAR(lists[i]);
            return -1;
        }
    return 0;
}

static void release(PyObject **v, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        Py_CLEAR(v[i]);
}

/* KeyList.of_one(t) with t's ts and seq. */
static PyObject *of_one(PyObject *t, PyObject *ts, PyObject *seq) {
    PyObject *l[3] = {PyList_New(1), PyList_New(1), PyList_New(1)}, *lo = PyLong_FromLong(0), *kl = NULL;
    if (l[0] == NULL || l[1] == NULL || l[2] == NULL || lo == NULL)
        goto done;
    Py_INCREF(ts), Py_INCREF(seq), Py_INCREF(t);
    PyList_SET_ITEM(l[0], 0, ts);
    PyList_SET_ITEM(l[1], 0, seq);
    PyList_SET_ITEM(l[2], 0, t);
    if (kl_plain) {
        kl = keylist_type->tp_alloc(keylist_type, 0);
        if (kl == NULL)
            goto done;
        SLOT(kl, kl_ts) = l[0], SLOT(kl, kl_seq) = l[1], SLOT(kl, kl_tups) = l[2], SLOT(kl, kl_lo) = lo;
        return kl;
    }
    kl = PyObject_CallNoArgs((PyObject *)keylist_type);
    if (kl != NULL)
        for (int i = TS; i <= LO; i++)
            if (PyObject_SetAttr(kl, *kl_names[i], i == LO ? lo : l[i]) < 0) {
                Py_CLEAR(kl);
                break;
            }
done:
    Py_XDECREF(l[0]), Py_XDECREF(l[1]), Py_XDECREF(l[2]), Py_XDECREF(lo);
    return kl;
}

/* ---------------------------------------------------------------------------- keys */

/* The keys of the tuples whose store keys are ``keys`` (``n`` of them) under ``proj`` (memory.py's projector():
 * a _Prefix, a _Pick with its ``positions``, or anything else, which is called), as memory._keys computes them:
 * new references into out, or -1 with out cleared. */
static int index_keys(PyObject *proj, PyObject **keys, Py_ssize_t n, PyObject **out) {
    Py_ssize_t i = 0, np = -1, npos = 0, pos[8];
    if (n == 0)
        return 0;
    if (Py_TYPE(proj) == prefix_type) {
        PyObject *v = PyObject_GetAttr(proj, s_n);
        if (v == NULL)
            return -1;
        np = PyNumber_AsSsize_t(v, PyExc_OverflowError);
        Py_DECREF(v);
        if (np == -1 && PyErr_Occurred())
            return -1;
        Py_ssize_t first = PyObject_Size(keys[0]);
        if (first < 0)
            return -1;
        if (first == np) {   /* every key whole (one stream: all keys have the same length) */
            for (i = 0; i < n; i++)
                Py_INCREF(out[i] = keys[i]);
            return 0;
        }
    } else if (Py_TYPE(proj) == pick_type) {
        PyObject *p = PyObject_GetAttr(proj, s_positions);
        if (p == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
        } else {
            if (PyTuple_CheckExact(p) && PyTuple_GET_SIZE(p) <= 8) {
                npos = PyTuple_GET_SIZE(p);
                for (Py_ssize_t j = 0; j < npos; j++) {
                    PyObject *x = PyTuple_GET_ITEM(p, j);
                    pos[j] = PyLong_CheckExact(x) ? PyLong_AsSsize_t(x) : -1;
                    if (pos[j] < 0) {
                        PyErr_Clear();
                        npos = 0;   /* not plain positions: call it */
                        break;
                    }
                }
            }
            Py_DECREF(p);
        }
    }
    for (i = 0; i < n; i++) {
        PyObject *k = keys[i], *o = NULL;
        if (np >= 0 && PyTuple_CheckExact(k)) {
            o = PyTuple_GET_SIZE(k) == np ? (Py_INCREF(k), k) : PyTuple_GetSlice(k, 0, np);
        } else if (npos > 0 && PyTuple_CheckExact(k)) {
            Py_ssize_t j;
            for (j = 0; j < npos && pos[j] < PyTuple_GET_SIZE(k); j++)
                ;
            if (j == npos) {   /* every position in range: else the call raises IndexError */
                if ((o = PyTuple_New(npos)) != NULL)
                    for (j = 0; j < npos; j++) {
                        PyObject *x = PyTuple_GET_ITEM(k, pos[j]);
                        Py_INCREF(x);
                        PyTuple_SET_ITEM(o, j, x);
                    }
            } else
                o = PyObject_CallOneArg(proj, k);
        } else
            o = PyObject_CallOneArg(proj, k);
        if ((out[i] = o) == NULL) {
            release(out, i);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------- batches */

typedef struct {
    PyObject **t, **ts, **seq, **key;   /* per tuple, new references (key read lazily: NULL until then) */
    Py_ssize_t n;
    PyObject *seqf;                     /* the PySequence_Fast of the tuples */
} Batch;

static void batch_free(Batch *b) {
    if (b->t != NULL) {
        release(b->ts, b->n), release(b->seq, b->n), release(b->key, b->n);
        PyMem_Free(b->t);
        b->t = NULL;
    }
    Py_CLEAR(b->seqf);
}

/* The tuples of ``tups`` with their ts and seq (``want_ts``: ts too); -1 on error (b freed). */
static int batch_read(Batch *b, PyObject *tups, int want_ts) {
    memset(b, 0, sizeof *b);
    if ((b->seqf = PySequence_Fast(tups, "tuples must be a sequence")) == NULL)
        return -1;
    Py_ssize_t n = b->n = PySequence_Fast_GET_SIZE(b->seqf);
    if ((b->t = PyMem_Calloc(n ? 4 * n : 1, sizeof(PyObject *))) == NULL) {
        PyErr_NoMemory();
        Py_CLEAR(b->seqf);
        return -1;
    }
    b->ts = b->t + n, b->seq = b->t + 2 * n, b->key = b->t + 3 * n;
    PyObject **items = PySequence_Fast_ITEMS(b->seqf);
    for (Py_ssize_t i = 0; i < n; i++) {
        b->t[i] = items[i];   /* borrowed: seqf holds them */
        if ((b->seq[i] = field(items[i], tup_type, tp_seq, s_seq)) == NULL ||
            (want_ts && (b->ts[i] = field(items[i], tup_type, tp_ts, s_ts)) == NULL)) {
            batch_free(b);
            return -1;
        }
    }
    return 0;
}

static int batch_keys(Batch *b) {
    for (Py_ssize_t i = 0; i < b->n; i++)
        if (b->key[i] == NULL && (b->key[i] = field(b->t[i], tup_type, tp_key, s_key)) == NULL)
            return -1;
    return 0;
}

/* ``v`` of the store's ``_indexes``: its (table, projector) as new references. */
static int index_entry(PyObject *v, PyObject **table, PyObject **proj) {
    if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 2) {
        PyErr_SetString(PyExc_TypeError, "an index must be a (table, projector) pair");
        return -1;
    }
    *table = PyTuple_GET_ITEM(v, 0), *proj = PyTuple_GET_ITEM(v, 1);
    if (!PyDict_Check(*table)) {
        PyErr_Format(PyExc_TypeError, "an index's table must be a dict, not %.100s", Py_TYPE(*table)->tp_name);
        return -1;
    }
    Py_INCREF(*table), Py_INCREF(*proj);
    return 0;
}

static int extend(PyObject *list, PyObject **v, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyList_Append(list, v[i]) < 0)
            return -1;
    return 0;
}

/* MemoryWindowStore._append: the batch at the end of the window and of its keys' lists. */
static int append_batch(PyObject *all, PyObject *indexes, Batch *b) {
    PyObject *lists[3], **keys = NULL;
    if (kl_lists(all, lists) < 0)
        return -1;
    int r = extend(lists[TS], b->ts, b->n) < 0 || extend(lists[SEQ], b->seq, b->n) < 0 ||
            extend(lists[TUPS], b->t, b->n) < 0 ? -1 : 0;
    release(lists, 3);
    if (r < 0 || PyDict_GET_SIZE(indexes) == 0)
        return r;
    if (batch_keys(b) < 0 || (keys = PyMem_Calloc(b->n, sizeof(PyObject *))) == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t at = 0;
    PyObject *k, *v;
    while (r == 0 && PyDict_Next(indexes, &at, &k, &v)) {
        PyObject *table, *proj;
        if (index_entry(v, &table, &proj) < 0)
            return PyMem_Free(keys), -1;
        if (index_keys(proj, b->key, b->n, keys) < 0)
            r = -1;
        for (Py_ssize_t i = 0; r == 0 && i < b->n; i++) {
            PyObject *kl = PyDict_GetItemWithError(table, keys[i]);
            if (kl == NULL) {
                if (PyErr_Occurred() || (kl = of_one(b->t[i], b->ts[i], b->seq[i])) == NULL)
                    r = -1;
                else {
                    r = PyDict_SetItem(table, keys[i], kl);
                    Py_DECREF(kl);
                }
            } else {
                Py_INCREF(kl);
                if (kl_lists(kl, lists) < 0)
                    r = -1;
                else {
                    r = PyList_Append(lists[TS], b->ts[i]) < 0 || PyList_Append(lists[SEQ], b->seq[i]) < 0 ||
                        PyList_Append(lists[TUPS], b->t[i]) < 0 ? -1 : 0;
                    release(lists, 3);
                }
                Py_DECREF(kl);
            }
        }
        release(keys, b->n);   /* (NULL where not made) */
        Py_DECREF(table), Py_DECREF(proj);
    }
    PyMem_Free(keys);
    return r;
}

/* Is the (read) batch MemoryWindowStore.insert's usual case: non-empty, in increasing seq order, all above the
 * newest stored?  1, 0, or -1 on error. */
static int in_order(PyObject *all, Batch *b) {
    if (b->n == 0)
        return 0;
    PyObject *seqs = kl_field(all, SEQ), *tups = kl_field(all, TUPS), *last = NULL;
    Py_ssize_t lo = seqs != NULL && tups != NULL ? kl_get_lo(all) : -1;
    if (!(lo == -1 && PyErr_Occurred())) {
        if (PyList_GET_SIZE(tups) - lo <= 0)   /* len(all_) == 0 */
            last = PyLong_FromLong(-1);
        else if (PyList_GET_SIZE(seqs) == 0)
            PyErr_SetString(PyExc_IndexError, "list index out of range");
        else
            Py_INCREF(last = PyList_GET_ITEM(seqs, PyList_GET_SIZE(seqs) - 1));   /* the newest stored's seq */
    }
    Py_XDECREF(seqs), Py_XDECREF(tups);
    if (last == NULL)
        return -1;
    int ok = PyObject_RichCompareBool(b->seq[0], last, Py_GT);
    Py_DECREF(last);
    for (Py_ssize_t i = 1; ok == 1 && i < b->n; i++)
        ok = PyObject_RichCompareBool(b->seq[i - 1], b->seq[i], Py_LT);
    return ok;
}

/* insert (``check``: the usual case only, answering whether it was) and append. */
static PyObject *add(PyObject *const *args, Py_ssize_t nargs, int check) {
    if (nargs != 3 || !PyDict_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "%s(all, indexes: dict, tups)", check ? "insert" : "append");
        return NULL;
    }
    Batch b;
    if (batch_read(&b, args[2], 1) < 0)
        return NULL;
    int ok = check ? in_order(args[0], &b) : 1;
    if (ok == 1 && append_batch(args[0], args[1], &b) < 0)
        ok = -1;
    batch_free(&b);
    if (ok < 0)
        return NULL;
    if (!check)
        Py_RETURN_NONE;
    return PyBool_FromLong(ok);
}

/* insert(all, indexes, tups) -> bool: MemoryWindowStore.insert's usual case (a non-empty batch in increasing seq
 * order, all above the newest stored): appended as _append does, True; False (nothing done) otherwise. */
static PyObject *insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return add(args, nargs, 1);
}

/* append(all, indexes, tups): MemoryWindowStore._append (the seqs are the tuples'). */
static PyObject *append(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return add(args, nargs, 0);
}

/* ---------------------------------------------------------------------------- purge */

/* bisect_left(arr, x, lo) */
static Py_ssize_t bisect_left(PyObject *arr, PyObject *x, Py_ssize_t lo) {
    if (lo < 0) {
        PyErr_SetString(PyExc_ValueError, "lo must be non-negative");
        return -1;
    }
    Py_ssize_t hi = PyList_GET_SIZE(arr);
    while (lo < hi) {
        Py_ssize_t mid = ((size_t)lo + hi) / 2;
        PyObject *m = PyList_GET_ITEM(arr, mid);
        Py_INCREF(m);
        int lt = PyObject_RichCompareBool(m, x, Py_LT);
        Py_DECREF(m);
        if (lt < 0)
            return -1;
        if (lt)
            lo = mid + 1;
        else
            hi = mid;
        if (hi > PyList_GET_SIZE(arr))
            hi = PyList_GET_SIZE(arr);
    }
    return lo;
}

/* KeyList.drop_below(ts=ts, seq=seq) of the window (ts or seq not None) */
static PyObject *drop_below(PyObject *kl, PyObject *ts, PyObject *seq) {
    PyObject *lists[3], *out = NULL;
    if (kl_lists(kl, lists) < 0)
        return NULL;
    Py_ssize_t lo = kl_get_lo(kl), hi;
    if (!(lo == -1 && PyErr_Occurred()) &&
        (hi = ts != Py_None ? bisect_left(lists[TS], ts, lo) : bisect_left(lists[SEQ], seq, lo)) >= 0 &&
        (out = PyList_GetSlice(lists[TUPS], lo, hi)) != NULL && (kl_set_lo(kl, hi) < 0 || compact(kl, lists, hi) < 0))
        Py_CLEAR(out);
    release(lists, 3);
    return out;
}

/* The purged tuples (``b``, keys read) out of one index: count them per key (first seen first), then drop each
 * key's oldest (the key's whole list: its entry) as purge_below does. */
static int purge_index(PyObject *table, PyObject *proj, Batch *b, PyObject **keys) {
    if (index_keys(proj, b->key, b->n, keys) < 0)
        return -1;
    int r = 0;
    Py_ssize_t m = 0, *count = PyMem_Calloc(b->n, sizeof(Py_ssize_t)), i;
    PyObject *first = PyDict_New(), **uniq = PyMem_Calloc(b->n, sizeof(PyObject *));  /* key -> its rank */
    if (count == NULL || first == NULL || uniq == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        r = -1;
    }
    for (i = 0; r == 0 && i < b->n; i++) {
        PyObject *at = PyDict_GetItemWithError(first, keys[i]);
        if (at != NULL)
            count[PyLong_AsSsize_t(at)]++;
        else if (PyErr_Occurred())
            r = -1;
        else {
            PyObject *rank = PyLong_FromSsize_t(m);
            if (rank == NULL || PyDict_SetItem(first, keys[i], rank) < 0)
                r = -1;
            else
                uniq[m] = keys[i], count[m++] = 1;
            Py_XDECREF(rank);
        }
    }
    for (i = 0; r == 0 && i < m; i++) {
        PyObject *k = uniq[i], *kl = PyDict_GetItemWithError(table, k), *lists[3];
        if (kl == NULL) {
            if (!PyErr_Occurred()) {
                PyObject *t = PyTuple_Pack(1, k);
                if (t != NULL)
                    PyErr_SetObject(PyExc_KeyError, t), Py_DECREF(t);
            }
            r = -1;
            break;
        }
        Py_INCREF(kl);
        Py_ssize_t lo;
        if (kl_lists(kl, lists) < 0)
            r = -1;
        else {
            if ((lo = kl_get_lo(kl)) == -1 && PyErr_Occurred())
                r = -1;
            else if (PyList_GET_SIZE(lists[TUPS]) - lo == count[i])   /* len(kl) == n: the key is gone */
                r = PyDict_DelItem(table, k);
            else {   /* kl.pop_oldest(n) */
                Py_ssize_t len = PyList_GET_SIZE(lists[TUPS]), lo2 = lo + count[i];
                Py_ssize_t a = lo < 0 ? (lo + len < 0 ? 0 : lo + len) : (lo > len ? len : lo);
                Py_ssize_t z = lo2 < 0 ? (lo2 + len < 0 ? 0 : lo2 + len) : (lo2 > len ? len : lo2);
                lo += z > a ? z - a : 0;   /* len(tups[lo:lo + n]) */
                r = kl_set_lo(kl, lo) < 0 || compact(kl, lists, lo) < 0 ? -1 : 0;
            }
            release(lists, 3);
        }
        Py_DECREF(kl);
    }
    release(keys, b->n);
    Py_XDECREF(first);
    PyMem_Free(count);
    PyMem_Free(uniq);
    return r;
}

/* purge_below(all, indexes, ts, seq) -> list: MemoryWindowStore.purge_below */
static PyObject *purge_below(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "purge_below(all, indexes: dict, ts, seq)");
        return NULL;
    }
    if (args[2] == Py_None && args[3] == Py_None) {
        PyErr_SetString(PyExc_TypeError, "drop_below needs ts or seq");
        return NULL;
    }
    PyObject *gone = drop_below(args[0], args[2], args[3]);
    if (gone == NULL || !PyList_Check(gone) || PyList_GET_SIZE(gone) == 0 || PyDict_GET_SIZE(args[1]) == 0)
        return gone;
    Batch b;
    PyObject **keys = NULL;
    if (batch_read(&b, gone, 0) < 0 || batch_keys(&b) < 0 ||
        (keys = PyMem_Calloc(b.n, sizeof(PyObject *))) == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t at = 0;
    PyObject *k, *v;
    while (PyDict_Next(args[1], &at, &k, &v)) {
        PyObject *table, *proj;
        if (index_entry(v, &table, &proj) < 0)
            goto fail;
        int r = purge_index(table, proj, &b, keys);
        Py_DECREF(table), Py_DECREF(proj);
        if (r < 0)
            goto fail;
    }
    PyMem_Free(keys);
    batch_free(&b);
    return gone;
fail:
    PyMem_Free(keys);
    if (b.seqf != NULL)
        batch_free(&b);
    Py_DECREF(gone);
    return NULL;
}

/* ---------------------------------------------------------------------------- setup */

/* setup(KeyList, Tup, _Prefix, _Pick): the classes whose slots the kernel reads and the projectors it knows */
static PyObject *setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2])
            || !PyType_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "setup(KeyList, Tup, _Prefix, _Pick)");
        return NULL;
    }
    PyTypeObject *kl = (PyTypeObject *)args[0], *tp = (PyTypeObject *)args[1];
    if ((kl_ts = slot_offset(kl, s_ts)) < 0 || (kl_seq = slot_offset(kl, s_seq)) < 0 ||
        (kl_tups = slot_offset(kl, s_tups)) < 0 || (kl_lo = slot_offset(kl, s_lo)) < 0 ||
        (tp_ts = slot_offset(tp, s_ts)) < 0 || (tp_seq = slot_offset(tp, s_seq)) < 0 ||
        (tp_key = slot_offset(tp, s_key)) < 0)
        return NULL;
    /* of_one by tp_alloc when KeyList is made by object.__new__ with exactly these four slots */
    kl_plain = kl->tp_new == PyBaseObject_Type.tp_new && kl->tp_dictoffset == 0 &&
               kl->tp_basicsize == PyBaseObject_Type.tp_basicsize + 4 * (Py_ssize_t)sizeof(PyObject *);
    Py_INCREF(kl), Py_INCREF(tp), Py_INCREF(args[2]), Py_INCREF(args[3]);
    Py_XSETREF(keylist_type, kl);
    Py_XSETREF(tup_type, tp);
    Py_XSETREF(prefix_type, (PyTypeObject *)args[2]);
    Py_XSETREF(pick_type, (PyTypeObject *)args[3]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))setup, METH_FASTCALL,
     "setup(KeyList, Tup, _Prefix, _Pick): the classes"},
    {"insert", (PyCFunction)(void (*)(void))insert, METH_FASTCALL,
     "insert(all, indexes, tups) -> bool: MemoryWindowStore.insert's in-order case (False: not that case)"},
    {"append", (PyCFunction)(void (*)(void))append, METH_FASTCALL,
     "append(all, indexes, tups): MemoryWindowStore._append"},
    {"purge_below", (PyCFunction)(void (*)(void))purge_below, METH_FASTCALL,
     "purge_below(all, indexes, ts, seq) -> list: MemoryWindowStore.purge_below"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_storec", NULL, -1, methods};

PyMODINIT_FUNC PyInit__storec(void) {
    if ((s_ts = PyUnicode_InternFromString("ts")) == NULL || (s_seq = PyUnicode_InternFromString("seq")) == NULL ||
        (s_tups = PyUnicode_InternFromString("tups")) == NULL || (s_lo = PyUnicode_InternFromString("lo")) == NULL ||
        (s_key = PyUnicode_InternFromString("key")) == NULL || (s_n = PyUnicode_InternFromString("n")) == NULL ||
        (s_positions = PyUnicode_InternFromString("positions")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
