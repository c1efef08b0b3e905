/* A reducer's per-tuple bookkeeping (joinlib/runtime/algorithms/reduce.py: Reducer.admit, and the candidates a
 * channel tests in Reducer.out_keys and Reducer.ship), in C.
 *
 * Why C: with about ten tuples an epoch per stream, a reduction's epoch is a dozen steps of tens of
 * microseconds each, mostly the interpreter's set-up of list comprehensions, attribute look-ups and calls;
 * a profile of the demo's query put the reducers' admit, sets out and ship at half of auto's processing time
 * (issue 27).  One call per phase does the same steps on the same Python objects (the reducer's ``pending``,
 * ``window``, ``_fresh``, ``_again``, ``_rank``, its key tables and indexes, called through their methods), so
 * the state others read is the same by construction; the Python form stays the fallback and the reference
 * the tests compare against (tests/property/test_reducer_c.py).  What admit called back into Python for it does
 * without: the batch's keys are read at their positions (reduce.py's key_of lambdas are the fallback), and a key
 * table adds and settles them in one call (KeyTable.add_settle).
 *
 * Also PassReducer.admit (a reducer that takes no sets: the window and each channel's new tuples), and
 * Reducer.take: a set that arrives, and _matched's loop over the pending keys it holds.
 *
 * ``Entry`` is reduce.py's ``_Entry`` (a pending tuple: t, seq, sent, shipped, keys, rank) as a C struct, so
 * that these loops read its fields without attribute look-ups; Python code reads and sets its fields as
 * attributes, as it does the Python class's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdlib.h>

#include "_pyattr.h"

typedef struct {
    PyObject_HEAD
    PyObject *t, *seq, *sent, *keys;
    char shipped;
    Py_ssize_t rank;
} Entry;

static PyTypeObject EntryType;
#define Entry_Check(o) (Py_TYPE(o) == &EntryType)

static PyObject *s_seq, *s_key, *s_ts, *s_pending, *s_window, *s_fresh, *s_again, *s_extract, *s_col_of,
    *s_rank, *s_index, *s_add_all, *s_add_settle, *s_new, *s_discard_all, *s_settle, *s_popleft, *s_extend, *s_pos, *s_best,
    *s_live_from, *s_sends, *s_op, *s_replica, *s_dirty, *s_table, *s_seqs, *s_update, *s_filters,
    *s_received, *s_live, *s_keys, *s_n, *s_more_live, *s_holding, *s_keys_, *empty, *one;

/* ---------------------------------------------------------------------------- Entry */

static Entry *entry_make(PyObject *t, PyObject *seq, PyObject *keys, Py_ssize_t rank) {
    Entry *x = PyObject_New(Entry, &EntryType);
    if (x == NULL)
        return NULL;
    x->t = Py_NewRef(t);
    x->seq = Py_NewRef(seq);
    x->sent = Py_NewRef(empty);
    x->keys = Py_NewRef(keys);
    x->shipped = 0;
    x->rank = rank;
    return x;
}

static PyObject *entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *t, *keys;
    Py_ssize_t rank;
    static char *kwlist[] = {"t", "keys", "rank", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!n", kwlist, &t, &PyTuple_Type, &keys, &rank))
        return NULL;
    PyObject *seq = PyObject_GetAttr(t, s_seq);
    if (seq == NULL)
        return NULL;
    Entry *x = entry_make(t, seq, keys, rank);
    Py_DECREF(seq);
    return (PyObject *)x;
}

static void entry_dealloc(Entry *x) {
    Py_XDECREF(x->t);
    Py_XDECREF(x->seq);
    Py_XDECREF(x->sent);
    Py_XDECREF(x->keys);
    PyObject_Free(x);
}

static PyMemberDef entry_members[] = {
    {"t", T_OBJECT_EX, offsetof(Entry, t), READONLY, "the tuple"},
    {"seq", T_OBJECT_EX, offsetof(Entry, seq), READONLY, "its seq"},
    {"sent", T_OBJECT_EX, offsetof(Entry, sent), 0, "the edges it went out on (a tuple)"},
    {"shipped", T_BOOL, offsetof(Entry, shipped), 0, "shipped to the result site"},
    {"keys", T_OBJECT_EX, offsetof(Entry, keys), READONLY, "its key toward each neighbour testing it"},
    {"rank", T_PYSSIZET, offsetof(Entry, rank), READONLY, "its rank in the window"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "joinlib.runtime.algorithms._reducerc.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pending tuple of a reducer: Entry(t, keys, rank) (reduce.py's _Entry).",
    .tp_members = entry_members,
    .tp_new = entry_new,
};

/* ---------------------------------------------------------------------------- helpers */

static int call_method(PyObject *o, PyObject *name, PyObject *a, PyObject *b) {
    PyObject *r = PyObject_CallMethodObjArgs(o, name, a, b, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static int entries_only(PyObject *const *xs, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!Entry_Check(xs[i])) {
            PyErr_Format(PyExc_TypeError, "a reducer's pending entry must be an Entry, not %.100s",
                         Py_TYPE(xs[i])->tp_name);
            return -1;
        }
    return 0;
}

/* _forget_all(red, xs): each table's discard_all(keys at its position, seqs). */
static int forget(PyObject *red, PyObject *xs) {
    Py_ssize_t n = PyList_GET_SIZE(xs);
    PyObject *extract = attr(red, s_extract, &PyList_Type), *seqs = NULL, *keys = NULL;
    int r = -1;
    if (extract == NULL || (seqs = PyList_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        PyList_SET_ITEM(seqs, i, Py_NewRef(((Entry *)PyList_GET_ITEM(xs, i))->seq));
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(extract); c++) {
        PyObject *ex = PyList_GET_ITEM(extract, c);   /* (key_of, table, i, positions) */
        if (!PyTuple_Check(ex) || PyTuple_GET_SIZE(ex) != 4) {
            PyErr_SetString(PyExc_TypeError, "an extract entry must be (key_of, table, i, positions)");
            goto done;
        }
        Py_ssize_t at = PyNumber_AsSsize_t(PyTuple_GET_ITEM(ex, 2), PyExc_OverflowError);
        if (at == -1 && PyErr_Occurred())
            goto done;
        if ((keys = PyList_New(n)) == NULL)
            goto done;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *ks = ((Entry *)PyList_GET_ITEM(xs, i))->keys;
            if (at < 0 || at >= PyTuple_GET_SIZE(ks)) {
                PyErr_SetString(PyExc_IndexError, "tuple index out of range");
                goto done;
            }
            PyList_SET_ITEM(keys, i, Py_NewRef(PyTuple_GET_ITEM(ks, at)));
        }
        if (call_method(PyTuple_GET_ITEM(ex, 1), s_discard_all, keys, seqs) < 0)
            goto done;
        Py_CLEAR(keys);
    }
    r = 0;
done:
    Py_XDECREF(extract);
    Py_XDECREF(seqs);
    Py_XDECREF(keys);
    return r;
}

/* Every list value of the dict d extended by items (a list or a tuple); what: the error if a value is no list. */
static int extend_each(PyObject *d, PyObject *items, const char *what) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!PyList_Check(v)) {
            PyErr_SetString(PyExc_TypeError, what);
            return -1;
        }
        if (PyList_SetSlice(v, PyList_GET_SIZE(v), PyList_GET_SIZE(v), items) < 0)
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------- admit */

/* The keys at ``positions`` of each of the batch's join values (``keylist``), as key_of (reduce.py's _keys_of)
 * gives them -- (key[i],) for one position, (key[i], key[j], ...) for several -- without its call: read directly
 * when every join value is a tuple and the positions are in range, else key_of's answer (and its errors).  A join
 * value that is all of the key is the key itself: a tuple fewer to make and free per tuple and table. */
static PyObject *keys_at(PyObject *keylist, PyObject *positions, PyObject *key_of) {
    Py_ssize_t n = PyList_GET_SIZE(keylist), np = PyTuple_Check(positions) ? PyTuple_GET_SIZE(positions) : 0;
    Py_ssize_t at[8];
    int direct = np > 0 && np <= 8;
    for (Py_ssize_t j = 0; j < np && direct; j++) {
        PyObject *p = PyTuple_GET_ITEM(positions, j);
        at[j] = PyLong_CheckExact(p) ? PyLong_AsSsize_t(p) : -1;
        if (at[j] < 0) {
            PyErr_Clear();
            direct = 0;
        }
    }
    for (Py_ssize_t i = 0; i < n && direct; i++) {
        PyObject *k = PyList_GET_ITEM(keylist, i);
        direct = PyTuple_CheckExact(k);
        for (Py_ssize_t j = 0; j < np && direct; j++)
            direct = at[j] < PyTuple_GET_SIZE(k);
    }
    if (!direct)
        return PyObject_CallOneArg(key_of, keylist);
    PyObject *col = PyList_New(n);
    if (col == NULL)
        return NULL;
    int whole = 1;   /* the positions are 0, 1, ...: a join value of that many is its own key (an equal tuple) */
    for (Py_ssize_t j = 0; j < np && whole; j++)
        whole = at[j] == j;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keylist, i), *key;
        if (whole && PyTuple_GET_SIZE(k) == np) {
            PyList_SET_ITEM(col, i, Py_NewRef(k));
            continue;
        }
        if ((key = PyTuple_New(np)) == NULL) {
            Py_DECREF(col);
            return NULL;
        }
        for (Py_ssize_t j = 0; j < np; j++)
            PyTuple_SET_ITEM(key, j, Py_NewRef(PyTuple_GET_ITEM(k, at[j])));
        PyList_SET_ITEM(col, i, key);
    }
    return col;
}

/* The batch's tuples ts[0..n) enter the window as (ts, seq, e) rows (seqs: their seqs, or NULL to read them). */
static int enter(PyObject *red, PyObject *const *ts, Py_ssize_t n, PyObject *seqs, PyObject *e) {
    PyObject *rows = PyList_New(n), *window = NULL;
    int r = -1;
    if (rows == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *tsv = PyObject_GetAttr(ts[i], s_ts), *seq = NULL, *row = NULL;
        if (tsv != NULL && (seq = seqs ? Py_NewRef(PyList_GET_ITEM(seqs, i)) : PyObject_GetAttr(ts[i], s_seq)) != NULL)
            row = PyTuple_Pack(3, tsv, seq, e);
        Py_XDECREF(tsv);
        Py_XDECREF(seq);
        if (row == NULL)
            goto done;
        PyList_SET_ITEM(rows, i, row);
    }
    if ((window = PyObject_GetAttr(red, s_window)) != NULL && call_method(window, s_extend, rows, NULL) == 0)
        r = 0;
done:
    Py_DECREF(rows);
    Py_XDECREF(window);
    return r;
}

/* Reducer._add_all(batch, e): new entries, indexed by their keys, pending, in the window (e not None) and
 * fresh for every channel.  settle: each key table's indexes settled too, by the table in the same call
 * (KeyTable.add_settle, what Reducer._settle_keys does after _add_all). */
static int add_batch(PyObject *red, PyObject *batch, PyObject *e, int settle) {
    PyObject *bf = PySequence_Fast(batch, "a batch must be a sequence"), *pending = NULL, *seqs = NULL,
             *keylist = NULL, *extract = NULL, *cols = NULL, *col_of = NULL, *new = NULL, *rankobj = NULL,
             *fresh = NULL;
    PyObject **byf = NULL;
    int r = -1;
    if (bf == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bf);
    PyObject **ts = PySequence_Fast_ITEMS(bf);
    if ((pending = attr(red, s_pending, &PyDict_Type)) == NULL || (rankobj = PyObject_GetAttr(red, s_rank)) == NULL)
        goto done;
    Py_ssize_t rank = PyNumber_AsSsize_t(rankobj, PyExc_OverflowError);
    if (rank == -1 && PyErr_Occurred())
        goto done;
    if ((seqs = PyList_New(n)) == NULL || (keylist = PyList_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyObject_GetAttr(ts[i], s_seq), *k;
        if (s == NULL)
            goto done;
        PyList_SET_ITEM(seqs, i, s);
        if ((k = PyObject_GetAttr(ts[i], s_key)) == NULL)
            goto done;
        PyList_SET_ITEM(keylist, i, k);
    }
    /* per key table: the batch's keys (key_of), indexed in one call */
    if ((extract = attr(red, s_extract, &PyList_Type)) == NULL)
        goto done;
    Py_ssize_t ncol = PyList_GET_SIZE(extract);
    if ((cols = PyList_New(ncol)) == NULL)
        goto done;
    for (Py_ssize_t c = 0; c < ncol; c++) {
        PyObject *ex = PyList_GET_ITEM(extract, c);
        if (!PyTuple_Check(ex) || PyTuple_GET_SIZE(ex) != 4) {
            PyErr_SetString(PyExc_TypeError, "an extract entry must be (key_of, table, i, positions)");
            goto done;
        }
        PyObject *col = keys_at(keylist, PyTuple_GET_ITEM(ex, 3), PyTuple_GET_ITEM(ex, 0));
        if (col == NULL)
            goto done;
        PyList_SET_ITEM(cols, c, col);
        if (!PyList_Check(col) || PyList_GET_SIZE(col) != n) {
            PyErr_SetString(PyExc_ValueError, "key_of must give a list of a key per tuple");
            goto done;
        }
        if (call_method(PyTuple_GET_ITEM(ex, 1), settle ? s_add_settle : s_add_all, col, seqs) < 0)
            goto done;
    }
    /* per neighbour testing it (in _filters order), its key's column */
    if ((col_of = attr(red, s_col_of, &PyList_Type)) == NULL)
        goto done;
    Py_ssize_t nf = PyList_GET_SIZE(col_of);
    if ((byf = PyMem_New(PyObject *, nf ? nf : 1)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < nf; j++) {
        Py_ssize_t c = PyNumber_AsSsize_t(PyList_GET_ITEM(col_of, j), PyExc_OverflowError);
        if (c == -1 && PyErr_Occurred())
            goto done;
        if (c < 0 || c >= ncol) {
            PyErr_SetString(PyExc_IndexError, "a neighbour's key column is out of range");
            goto done;
        }
        byf[j] = PyList_GET_ITEM(cols, c);
    }
    if ((new = PyList_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ks = PyTuple_New(nf);
        if (ks == NULL)
            goto done;
        for (Py_ssize_t j = 0; j < nf; j++)
            PyTuple_SET_ITEM(ks, j, Py_NewRef(PyList_GET_ITEM(byf[j], i)));
        Entry *x = entry_make(ts[i], PyList_GET_ITEM(seqs, i), ks, rank + i);
        Py_DECREF(ks);
        if (x == NULL)
            goto done;
        PyList_SET_ITEM(new, i, (PyObject *)x);
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyDict_SetItem(pending, PyList_GET_ITEM(seqs, i), PyList_GET_ITEM(new, i)) < 0)
            goto done;
    PyObject *next = PyLong_FromSsize_t(rank + n);
    if (next == NULL)
        goto done;
    int sr = PyObject_SetAttr(red, s_rank, next);
    Py_DECREF(next);
    if (sr < 0)
        goto done;
    if (e != Py_None && enter(red, ts, n, seqs, e) < 0)
        goto done;
    if ((fresh = attr(red, s_fresh, &PyDict_Type)) == NULL)
        goto done;
    if (extend_each(fresh, new, "a channel's fresh entries must be a list") < 0)
        goto done;
    r = 0;
done:
    PyMem_Free(byf);
    Py_XDECREF(bf);
    Py_XDECREF(pending);
    Py_XDECREF(seqs);
    Py_XDECREF(keylist);
    Py_XDECREF(extract);
    Py_XDECREF(cols);
    Py_XDECREF(col_of);
    Py_XDECREF(new);
    Py_XDECREF(rankobj);
    Py_XDECREF(fresh);
    return r;
}

/* The window's tuples below value in column col (0: ts, 1: seq) leave it: their pending entries, popped (entries
 * true: a Reducer's), or their seqs as a set (a PassReducer's, which keeps no entries). */
static PyObject *expire(PyObject *red, Py_ssize_t col, PyObject *value, int entries) {
    PyObject *window = PyObject_GetAttr(red, s_window), *pending = NULL, *gone = NULL, *first = NULL,
             *popleft = NULL;
    if (window == NULL || (entries && (pending = attr(red, s_pending, &PyDict_Type)) == NULL) ||
        (gone = entries ? PyList_New(0) : PySet_New(NULL)) == NULL)
        goto fail;
    for (;;) {
        Py_ssize_t len = PyObject_Size(window);
        if (len < 0)
            goto fail;
        if (len == 0)
            break;
        if ((first = PySequence_GetItem(window, 0)) == NULL)
            goto fail;
        if (!PyTuple_Check(first) || PyTuple_GET_SIZE(first) != 3) {
            PyErr_SetString(PyExc_TypeError, "a window row must be (ts, seq, epoch)");
            goto fail;
        }
        int below = PyObject_RichCompareBool(PyTuple_GET_ITEM(first, col), value, Py_LT);
        if (below < 0)
            goto fail;
        if (!below) {
            Py_CLEAR(first);
            break;
        }
        if (popleft == NULL && (popleft = PyObject_GetAttr(window, s_popleft)) == NULL)
            goto fail;
        PyObject *popped = PyObject_CallNoArgs(popleft);
        if (popped == NULL)
            goto fail;
        Py_DECREF(popped);
        PyObject *seq = PyTuple_GET_ITEM(first, 1), *x;
        if (!entries) {
            if (PySet_Add(gone, seq) < 0)
                goto fail;
        } else if ((x = PyDict_GetItemWithError(pending, seq)) != NULL) {
            Py_INCREF(x);
            int bad = PyDict_DelItem(pending, seq) < 0 || PyList_Append(gone, x) < 0;
            Py_DECREF(x);
            if (bad)
                goto fail;
        } else if (PyErr_Occurred()) {
            goto fail;
        }
        Py_CLEAR(first);
    }
    Py_DECREF(window);
    Py_XDECREF(pending);
    Py_XDECREF(popleft);
    return gone;
fail:
    Py_XDECREF(popleft);
    Py_XDECREF(window);
    Py_XDECREF(pending);
    Py_XDECREF(gone);
    Py_XDECREF(first);
    return NULL;
}

/* admit(red, e, batch, col, value): Reducer.admit -- B_e enters the window (its keys settled against every
 * index's live sets), the tuples below value in column col (0: ts, 1: seq) leave it. */
static PyObject *admit(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "admit(red, e, batch, col, value)");
        return NULL;
    }
    PyObject *red = args[0], *gone = NULL, *ret = NULL;
    Py_ssize_t col = PyNumber_AsSsize_t(args[3], PyExc_OverflowError);
    if (col == -1 && PyErr_Occurred())
        return NULL;
    if (col != 0 && col != 1) {
        PyErr_SetString(PyExc_ValueError, "col must be 0 (ts) or 1 (seq)");
        return NULL;
    }
    if (add_batch(red, args[2], args[1], 1) < 0)
        goto done;
    if ((gone = expire(red, col, args[4], 1)) == NULL)
        goto done;
    if (PyList_GET_SIZE(gone) && forget(red, gone) < 0)
        goto done;
    ret = Py_NewRef(Py_None);
done:
    Py_XDECREF(gone);
    return ret;
}

/* pass_admit(red, e, batch, col, value): PassReducer.admit -- B_e enters the window and every channel's new tuples,
 * the tuples below value in column col leave the window, and the channels' new tuples with them. */
static PyObject *pass_admit(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "pass_admit(red, e, batch, col, value)");
        return NULL;
    }
    PyObject *red = args[0], *bf = NULL, *newd = NULL, *gone = NULL, *ret = NULL;
    Py_ssize_t col = PyNumber_AsSsize_t(args[3], PyExc_OverflowError);
    if (col == -1 && PyErr_Occurred())
        return NULL;
    if (col != 0 && col != 1) {
        PyErr_SetString(PyExc_ValueError, "col must be 0 (ts) or 1 (seq)");
        return NULL;
    }
    if ((bf = PySequence_Fast(args[2], "a batch must be a sequence")) == NULL ||
        enter(red, PySequence_Fast_ITEMS(bf), PySequence_Fast_GET_SIZE(bf), NULL, args[1]) < 0 ||
        (newd = attr(red, s_new, &PyDict_Type)) == NULL)
        goto done;
    if (extend_each(newd, bf, "a channel's new tuples must be a list") < 0)
        goto done;
    if ((gone = expire(red, col, args[4], 0)) == NULL)
        goto done;
    /* only tuples no channel looked at yet can be among them: a channel whose first is not gone keeps its list */
    Py_ssize_t pos = 0;
    PyObject *c, *v;
    while (PySet_GET_SIZE(gone) && PyDict_Next(newd, &pos, &c, &v)) {
        if (!PyList_Check(v) || PyList_GET_SIZE(v) == 0)
            continue;
        PyObject *seq = PyObject_GetAttr(PyList_GET_ITEM(v, 0), s_seq), *kept;
        int in = seq == NULL ? -1 : PySet_Contains(gone, seq);
        Py_XDECREF(seq);
        if (in < 0)
            goto done;
        if (!in)
            continue;
        if ((kept = PyList_New(0)) == NULL)
            goto done;
        Py_INCREF(v);   /* setting the item below may free the list being read */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v) && in >= 0; i++) {
            PyObject *t = PyList_GET_ITEM(v, i);
            seq = PyObject_GetAttr(t, s_seq);
            in = seq == NULL ? -1 : PySet_Contains(gone, seq);
            Py_XDECREF(seq);
            if (in == 0 && PyList_Append(kept, t) < 0)
                in = -1;
        }
        int bad = in < 0 || PyDict_SetItem(newd, c, kept) < 0;
        Py_DECREF(kept);
        Py_DECREF(v);
        if (bad)
            goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    Py_XDECREF(bf);
    Py_XDECREF(newd);
    Py_XDECREF(gone);
    return ret;
}

/* add(red, batch, e): Reducer._add_all (e None: tuples already in the window, a snapshot's). */
static PyObject *add(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "add(red, batch, e)");
        return NULL;
    }
    return add_batch(args[0], args[1], args[2], 0) < 0 ? NULL : Py_NewRef(Py_None);
}

/* forget_all(red, entries): Reducer._forget_all. */
static PyObject *forget_all(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "forget_all(red, entries: list)");
        return NULL;
    }
    if (entries_only(PySequence_Fast_ITEMS(args[1]), PyList_GET_SIZE(args[1])) < 0 || forget(args[0], args[1]) < 0)
        return NULL;
    return Py_NewRef(Py_None);
}

/* ---------------------------------------------------------------------------- a channel's look */

static int by_rank(const void *a, const void *b) {
    Py_ssize_t x = (*(Entry *const *)a)->rank, y = (*(Entry *const *)b)->rank;
    return (x > y) - (x < y);
}

/* Reducer._candidates(channel): the fresh entries still pending and the dirty ones, in window order. */
static PyObject *candidates(PyObject *red, PyObject *channel, PyObject *pending) {
    PyObject *fresh = attr(red, s_fresh, &PyDict_Type), *again_d = NULL, *cand = NULL, *got = NULL, *it = NULL,
             *empty_list = NULL;
    if (fresh == NULL || (again_d = attr(red, s_again, &PyDict_Type)) == NULL)
        goto fail;
    PyObject *fl = dict_item(fresh, channel), *again;
    if (fl == NULL || (again = dict_item(again_d, channel)) == NULL)
        goto fail;
    if (!PyList_Check(fl) || !PySet_Check(again)) {
        PyErr_SetString(PyExc_TypeError, "a channel's fresh entries must be a list, its dirty seqs a set");
        goto fail;
    }
    Py_INCREF(fl);
    Py_INCREF(again);
    if ((cand = PyList_New(0)) == NULL)
        goto fail_held;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fl); i++) {
        PyObject *x = PyList_GET_ITEM(fl, i);
        if (!Entry_Check(x)) {
            entries_only(&x, 1);
            goto fail_held;
        }
        int in = PyDict_Contains(pending, ((Entry *)x)->seq);
        if (in < 0 || (in && PyList_Append(cand, x) < 0))
            goto fail_held;
    }
    if ((empty_list = PyList_New(0)) == NULL || PyDict_SetItem(fresh, channel, empty_list) < 0)
        goto fail_held;
    if (PySet_GET_SIZE(again)) {
        if ((got = PyDict_New()) == NULL)
            goto fail_held;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cand); i++) {
            PyObject *x = PyList_GET_ITEM(cand, i);
            if (PyDict_SetItem(got, ((Entry *)x)->seq, x) < 0)
                goto fail_held;
        }
        if ((it = PyObject_GetIter(again)) == NULL)
            goto fail_held;
        PyObject *seq;
        while ((seq = PyIter_Next(it)) != NULL) {
            PyObject *x = PyDict_GetItemWithError(pending, seq);
            int bad;
            if (x == NULL)
                bad = PyErr_Occurred() != NULL;
            else
                bad = entries_only(&x, 1) < 0 || PyDict_SetItem(got, seq, x) < 0;
            Py_DECREF(seq);
            if (bad)
                goto fail_held;
        }
        if (PyErr_Occurred() || PySet_Clear(again) < 0)
            goto fail_held;
        Py_SETREF(cand, PyDict_Values(got));
        if (cand == NULL)
            goto fail_held;
        qsort(PySequence_Fast_ITEMS(cand), PyList_GET_SIZE(cand), sizeof(PyObject *), by_rank);
    }
    Py_DECREF(fl);
    Py_DECREF(again);
    Py_DECREF(fresh);
    Py_DECREF(again_d);
    Py_XDECREF(got);
    Py_XDECREF(it);
    Py_DECREF(empty_list);
    return cand;
fail_held:
    Py_DECREF(fl);
    Py_DECREF(again);
fail:
    Py_XDECREF(fresh);
    Py_XDECREF(again_d);
    Py_XDECREF(cand);
    Py_XDECREF(got);
    Py_XDECREF(it);
    Py_XDECREF(empty_list);
    return NULL;
}

/* A neighbour's test: its key's position in an entry's keys, its index's ``best`` (a reference held), its live tag */
typedef struct {
    Py_ssize_t pos;
    PyObject *best;
    long long lf;
} Test;

/* Is best[k] < lf: 1, 0, -1 on error (KeyError for a key the index lacks, as best[k] raises). */
static int below(PyObject *best, PyObject *k, long long lf) {
    PyObject *b = dict_item(best, k);
    if (b == NULL)
        return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(b, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        return overflow < 0;
    return v < lf;
}

/* pass_channel(red, channel, nbr, among): what Reducer.out_keys (nbr: the neighbour the set goes to) or
 * Reducer.ship (nbr None) take -- the candidates of ``channel`` not yet sent to nbr (not yet shipped) that the
 * live sets of every neighbour of ``among`` but nbr hold -- marked sent (shipped), in window order; the
 * entries with nothing left to do are forgotten (Reducer._settle). */
static PyObject *pass_channel(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "pass_channel(red, channel, nbr, among: tuple)");
        return NULL;
    }
    PyObject *red = args[0], *channel = args[1], *nbr = args[2], *among = args[3];
    PyObject *pending = attr(red, s_pending, &PyDict_Type), *posd = NULL, *indexd = NULL, *lfd = NULL, *cand = NULL,
             *newly = NULL, *over = NULL, *op = NULL, *replica = NULL, *ret = NULL;
    Py_ssize_t na = PyTuple_GET_SIZE(among), nt = 0;
    Test *tests = PyMem_New(Test, na ? na : 1);
    if (tests == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (pending == NULL || (posd = attr(red, s_pos, &PyDict_Type)) == NULL ||
        (indexd = attr(red, s_index, &PyDict_Type)) == NULL || (lfd = attr(red, s_live_from, &PyDict_Type)) == NULL)
        goto done;
    for (Py_ssize_t a = 0; a < na; a++) {
        PyObject *n = PyTuple_GET_ITEM(among, a);
        if (nbr != Py_None) {
            int same = PyObject_RichCompareBool(n, nbr, Py_EQ);
            if (same < 0)
                goto done;
            if (same)
                continue;
        }
        PyObject *p = dict_item(posd, n), *ix = p ? dict_item(indexd, n) : NULL, *lf = ix ? dict_item(lfd, n) : NULL;
        if (lf == NULL)
            goto done;
        Test *t = &tests[nt];
        t->pos = PyNumber_AsSsize_t(p, PyExc_OverflowError);
        t->lf = PyLong_AsLongLong(lf);
        if (PyErr_Occurred())
            goto done;
        if ((t->best = PyObject_GetAttr(ix, s_best)) == NULL)
            goto done;
        nt++;
        if (!PyDict_Check(t->best)) {
            PyErr_SetString(PyExc_TypeError, "an index's best must be a dict");
            goto done;
        }
    }
    if ((cand = candidates(red, channel, pending)) == NULL || (newly = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cand); i++) {
        Entry *x = (Entry *)PyList_GET_ITEM(cand, i);
        if (x->sent == NULL) {   /* deleted: the Python form would fail on it too */
            PyErr_SetString(PyExc_AttributeError, "an entry has no 'sent'");
            goto done;
        }
        if (nbr != Py_None) {
            int in = PySequence_Contains(x->sent, nbr);
            if (in < 0)
                goto done;
            if (in)
                continue;
        } else if (x->shipped) {
            continue;
        }
        int ok = 1;
        for (Py_ssize_t j = 0; j < nt && ok; j++) {
            Test *t = &tests[j];
            if (t->pos < 0 || t->pos >= PyTuple_GET_SIZE(x->keys)) {
                PyErr_SetString(PyExc_IndexError, "tuple index out of range");
                goto done;
            }
            int b = below(t->best, PyTuple_GET_ITEM(x->keys, t->pos), t->lf);
            if (b < 0)
                goto done;
            ok = !b;
        }
        if (ok && PyList_Append(newly, (PyObject *)x) < 0)
            goto done;
    }
    /* marked, then those with nothing left to do forgotten */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(newly); i++) {
        Entry *x = (Entry *)PyList_GET_ITEM(newly, i);
        if (nbr != Py_None) {
            PyObject *one = PyTuple_Pack(1, nbr), *sent;
            if (one == NULL)
                goto done;
            sent = PySequence_Concat(x->sent, one);
            Py_DECREF(one);
            if (sent == NULL)
                goto done;
            Py_SETREF(x->sent, sent);
        } else {
            x->shipped = 1;
        }
    }
    Py_ssize_t sends = 0;
    PyObject *sv = PyObject_GetAttr(red, s_sends);
    if (sv == NULL)
        goto done;
    sends = PyNumber_AsSsize_t(sv, PyExc_OverflowError);
    Py_DECREF(sv);
    if ((sends == -1 && PyErr_Occurred()) || (op = PyObject_GetAttr(red, s_op)) == NULL ||
        (replica = PyObject_GetAttr(op, s_replica)) == NULL || (over = PyList_New(0)) == NULL)
        goto done;
    int ships = replica != Py_None;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(newly); i++) {
        Entry *x = (Entry *)PyList_GET_ITEM(newly, i);
        if (PyObject_Length(x->sent) == sends && (x->shipped || !ships)) {
            if (PyList_Append(over, (PyObject *)x) < 0 || PyDict_DelItem(pending, x->seq) < 0)
                goto done;
        }
    }
    if (PyList_GET_SIZE(over) && forget(red, over) < 0)
        goto done;
    ret = Py_NewRef(newly);
done:
    for (Py_ssize_t j = 0; j < nt; j++)
        Py_DECREF(tests[j].best);
    PyMem_Free(tests);
    Py_XDECREF(pending);
    Py_XDECREF(posd);
    Py_XDECREF(indexd);
    Py_XDECREF(lfd);
    Py_XDECREF(cand);
    Py_XDECREF(newly);
    Py_XDECREF(over);
    Py_XDECREF(op);
    Py_XDECREF(replica);
    return ret;
}

/* The key of t at positions (a tuple of ints): (t.key[p], ...), as keysets.keys_at makes it. */
static PyObject *key_at(PyObject *t, PyObject *positions) {
    PyObject *key = PyObject_GetAttr(t, s_key);
    if (key == NULL)
        return NULL;
    Py_ssize_t np = PyTuple_GET_SIZE(positions);
    PyObject *out = PyTuple_New(np);
    for (Py_ssize_t j = 0; out != NULL && j < np; j++) {
        Py_ssize_t p = PyNumber_AsSsize_t(PyTuple_GET_ITEM(positions, j), PyExc_IndexError);
        PyObject *v = (p == -1 && PyErr_Occurred()) ? NULL : PySequence_GetItem(key, p);
        if (v == NULL)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, j, v);
    }
    Py_DECREF(key);
    return out;
}

/* ages[i] = e - t.ts // tau (Python's floor division), a tuple's age at epoch e; *back the least age so far (the
 * first sets it). */
static int age_into(PyObject *ages, Py_ssize_t i, PyObject *t, long long e, long long tau, long long *back) {
    PyObject *tso = PyObject_GetAttr(t, s_ts);
    long long ts = tso == NULL ? -1 : PyLong_AsLongLong(tso);
    Py_XDECREF(tso);
    if (ts == -1 && PyErr_Occurred())
        return -1;
    long long q = ts / tau;
    if (ts % tau != 0 && ts < 0)   /* Python's floor division */
        q--;
    long long age = e - q;
    PyObject *a = PyLong_FromLongLong(age);
    if (a == NULL)
        return -1;
    PyList_SET_ITEM(ages, i, a);
    if (i == 0 || age < *back)
        *back = age;
    return 0;
}

/* out_keys(red, nbr, e, among, tau, Outgoing): Reducer.out_keys -- pass_channel's entries for nbr, then the
 * Outgoing of their keys toward nbr (kept in the entry when nbr's sets test it, else read at the edge's
 * positions), their ages (e - ts // tau), the least of them and the epochs back to the window's oldest arrival.
 * Why: out_keys ran as four Python frames around the kernel (two list comprehensions, the NamedTuple, oldest),
 * a third of a set's cost with ten keys; a reduction sends a set on every edge every epoch, every partition. */
static PyObject *out_keys(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "out_keys(red, nbr, e, among: tuple, tau, Outgoing)");
        return NULL;
    }
    PyObject *red = args[0], *nbr = args[1], *eo = args[2], *outgoing = args[5];
    long long e = PyLong_AsLongLong(eo), tau = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (tau <= 0) {
        PyErr_SetString(PyExc_ValueError, "tau must be positive");
        return NULL;
    }
    PyObject *pass_args[4] = {red, nbr, nbr, args[3]};
    PyObject *newly = pass_channel(mod, pass_args, 4), *posd = NULL, *keys = NULL, *ages = NULL, *positions = NULL,
             *window = NULL, *first = NULL, *ret = NULL;
    if (newly == NULL || (posd = attr(red, s_pos, &PyDict_Type)) == NULL)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(newly), at = -1;
    PyObject *p = PyDict_GetItemWithError(posd, nbr);
    if (p != NULL) {
        if ((at = PyNumber_AsSsize_t(p, PyExc_OverflowError)) == -1 && PyErr_Occurred())
            goto done;
    } else if (PyErr_Occurred()) {
        goto done;
    } else {
        PyObject *kd = attr(red, s_keys_, &PyDict_Type), *pos;
        if (kd == NULL)
            goto done;
        pos = dict_item(kd, nbr);
        positions = pos == NULL ? NULL : PySequence_Tuple(pos);
        Py_DECREF(kd);
        if (positions == NULL)
            goto done;
        if (PyTuple_GET_SIZE(positions) == 0) {   /* itemgetter() refuses no positions */
            PyErr_SetString(PyExc_TypeError, "an edge's key has no positions");
            goto done;
        }
    }
    if ((keys = PyList_New(n)) == NULL || (ages = PyList_New(n)) == NULL)
        goto done;
    long long back = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Entry *x = (Entry *)PyList_GET_ITEM(newly, i);
        PyObject *k;
        if (at >= 0) {
            if (at >= PyTuple_GET_SIZE(x->keys)) {
                PyErr_SetString(PyExc_IndexError, "tuple index out of range");
                goto done;
            }
            k = Py_NewRef(PyTuple_GET_ITEM(x->keys, at));
        } else if ((k = key_at(x->t, positions)) == NULL) {
            goto done;
        }
        PyList_SET_ITEM(keys, i, k);
        if (age_into(ages, i, x->t, e, tau, &back) < 0)
            goto done;
    }
    /* Reducer.oldest(e): the window's oldest arrival epoch, e + 1 when it is empty */
    long long oldest = e + 1;
    if ((window = PyObject_GetAttr(red, s_window)) == NULL)
        goto done;
    Py_ssize_t wn = PyObject_Length(window);
    if (wn < 0)
        goto done;
    if (wn > 0) {
        PyObject *ep;
        if ((first = PySequence_GetItem(window, 0)) == NULL || (ep = PySequence_GetItem(first, 2)) == NULL)
            goto done;
        oldest = PyLong_AsLongLong(ep);
        Py_DECREF(ep);
        if (PyErr_Occurred())
            goto done;
    }
    PyObject *bo = PyLong_FromLongLong(back), *lo = PyLong_FromLongLong(e - oldest);
    if (bo != NULL && lo != NULL) {
        PyObject *argv[4] = {keys, bo, lo, ages};
        ret = PyObject_Vectorcall(outgoing, argv, 4, NULL);
    }
    Py_XDECREF(bo);
    Py_XDECREF(lo);
done:
    Py_XDECREF(newly);
    Py_XDECREF(posd);
    Py_XDECREF(keys);
    Py_XDECREF(ages);
    Py_XDECREF(positions);
    Py_XDECREF(window);
    Py_XDECREF(first);
    return ret;
}

/* tups_outgoing(tups, e, tau, positions, live, Outgoing) -> Outgoing(keys, least age (0: none), live, ages): the
 * set of tuples that all pass at once -- a look-ahead's (joinlib.runtime.ahead) and a PassReducer's -- with each
 * tuple's key at ``positions`` (keysets.keys_at) and age e - ts // tau.  Why: those two sets were two list
 * comprehensions per epoch and edge, a twentieth of a reduction's bytecodes on the demo's query (issue 27). */
static PyObject *tups_outgoing(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyList_Check(args[0]) || !PyTuple_Check(args[3]) || PyTuple_GET_SIZE(args[3]) == 0) {
        PyErr_SetString(PyExc_TypeError, "tups_outgoing(tups: list, e, tau, positions: non-empty tuple, live, Outgoing)");
        return NULL;
    }
    PyObject *tups = args[0], *positions = args[3], *keys = NULL, *ages = NULL, *bo = NULL, *ret = NULL;
    long long e = PyLong_AsLongLong(args[1]), tau = PyLong_AsLongLong(args[2]), back = 0;
    if (PyErr_Occurred())
        return NULL;
    if (tau <= 0) {
        PyErr_SetString(PyExc_ValueError, "tau must be positive");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(tups);
    if ((keys = PyList_New(n)) == NULL || (ages = PyList_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(tups, i), *k = key_at(t, positions);
        if (k == NULL)
            goto done;
        PyList_SET_ITEM(keys, i, k);
        if (age_into(ages, i, t, e, tau, &back) < 0)
            goto done;
    }
    if ((bo = PyLong_FromLongLong(back)) != NULL) {
        PyObject *argv[4] = {keys, bo, args[4], ages};
        ret = PyObject_Vectorcall(args[5], argv, 4, NULL);
    }
done:
    Py_XDECREF(keys);
    Py_XDECREF(ages);
    Py_XDECREF(bo);
    return ret;
}

/* matched(red, nbr, tag, held): Reducer._matched's loop over the pending keys a new set of nbr tagged tag holds
 * (``held``): each key's latest tag moves up to tag, and a key that did not match nbr's live sets before (its
 * latest tag below the live tag) makes its pending seqs dirty for every other channel. */
static int match_held(PyObject *red, PyObject *nbr, PyObject *tagobj, PyObject *held) {
    PyObject *indexd = NULL, *lfd = NULL, *dirtyd = NULL, *best = NULL, *seqs = NULL, *table = NULL, *hf = NULL;
    int ret = -1;
    long long tag = PyLong_AsLongLong(tagobj), lf;
    if (tag == -1 && PyErr_Occurred())
        return -1;
    if ((indexd = attr(red, s_index, &PyDict_Type)) == NULL || (lfd = attr(red, s_live_from, &PyDict_Type)) == NULL ||
        (dirtyd = attr(red, s_dirty, &PyDict_Type)) == NULL)
        goto done;
    PyObject *index = dict_item(indexd, nbr), *lfo = index ? dict_item(lfd, nbr) : NULL,
             *dirty = lfo ? dict_item(dirtyd, nbr) : NULL;
    if (dirty == NULL)
        goto done;
    if ((lf = PyLong_AsLongLong(lfo)) == -1 && PyErr_Occurred())
        goto done;
    if (!PyList_Check(dirty)) {
        PyErr_SetString(PyExc_TypeError, "a neighbour's dirty sets must be a list");
        goto done;
    }
    if ((best = attr(index, s_best, &PyDict_Type)) == NULL || (table = PyObject_GetAttr(index, s_table)) == NULL ||
        (seqs = attr(table, s_seqs, &PyDict_Type)) == NULL ||
        (hf = PySequence_Fast(held, "held must be a sequence")) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(hf); i++) {
        PyObject *k = PySequence_Fast_GET_ITEM(hf, i);
        PyObject *oldo = dict_item(best, k);
        if (oldo == NULL)
            goto done;
        long long old = PyLong_AsLongLong(oldo);
        if (old == -1 && PyErr_Occurred())
            goto done;
        if (tag <= old)
            continue;
        if (PyDict_SetItem(best, k, tagobj) < 0)
            goto done;
        if (!(old < lf && lf <= tag))
            continue;
        PyObject *got = dict_item(seqs, k);
        if (got == NULL)
            goto done;
        Py_INCREF(got);
        for (Py_ssize_t d = 0; d < PyList_GET_SIZE(dirty); d++) {
            PyObject *set = PyList_GET_ITEM(dirty, d);
            int r;
            if (!PySet_Check(set)) {
                PyErr_SetString(PyExc_TypeError, "a dirty set must be a set");
                r = -1;
            } else if (PyLong_Check(got)) {
                r = PySet_Add(set, got);
            } else {
                PyObject *u = PyObject_CallMethodOneArg(set, s_update, got);
                r = u == NULL ? -1 : 0;
                Py_XDECREF(u);
            }
            if (r < 0) {
                Py_DECREF(got);
                goto done;
            }
        }
        Py_DECREF(got);
    }
    ret = 0;
done:
    Py_XDECREF(indexd);
    Py_XDECREF(lfd);
    Py_XDECREF(dirtyd);
    Py_XDECREF(best);
    Py_XDECREF(table);
    Py_XDECREF(seqs);
    Py_XDECREF(hf);
    return ret;
}

static PyObject *matched(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "matched(red, nbr, tag, held)");
        return NULL;
    }
    return match_held(args[0], args[1], args[2], args[3]) < 0 ? NULL : Py_NewRef(Py_None);
}

/* take(red, nbr, e, body, key_matchers): Reducer.take -- the live tag of nbr's sets moves up to e - body.live,
 * the sets below it are dropped, and the groups of the set that arrives (key_matchers(e, body): (tag, matcher))
 * still live are numbered, kept, added to the index's live forms (its more_live) and matched against the
 * pending keys (its holding, then matched's loop). */
static PyObject *take(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "take(red, nbr, e, body, key_matchers)");
        return NULL;
    }
    PyObject *red = args[0], *nbr = args[1], *e = args[2], *body = args[3];
    PyObject *lfd = NULL, *filters = NULL, *received = NULL, *indexd = NULL, *blive = NULL, *lfo = NULL,
             *fs = NULL, *keys = NULL, *n = NULL, *groups = NULL, *new = NULL, *r = NULL, *ret = NULL;
    long long ev = PyLong_AsLongLong(e);
    if (ev == -1 && PyErr_Occurred())
        return NULL;
    if ((lfd = attr(red, s_live_from, &PyDict_Type)) == NULL ||
        (filters = attr(red, s_filters, &PyDict_Type)) == NULL ||
        (received = attr(red, s_received, &PyDict_Type)) == NULL ||
        (indexd = attr(red, s_index, &PyDict_Type)) == NULL || (blive = PyObject_GetAttr(body, s_live)) == NULL)
        goto done;
    PyObject *cur = dict_item(lfd, nbr), *was = cur ? dict_item(filters, nbr) : NULL;
    if (was == NULL)
        goto done;
    long long lf = PyLong_AsLongLong(cur), back = PyLong_AsLongLong(blive);
    if (PyErr_Occurred())
        goto done;
    if (ev - back > lf)
        lf = ev - back;
    if ((lfo = PyLong_FromLongLong(lf)) == NULL || PyDict_SetItem(lfd, nbr, lfo) < 0)
        goto done;
    if (!PyList_Check(was)) {
        PyErr_SetString(PyExc_TypeError, "a neighbour's live sets must be a list");
        goto done;
    }
    if ((fs = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(was); i++) {
        PyObject *f = PyList_GET_ITEM(was, i);
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 3) {
            PyErr_SetString(PyExc_TypeError, "a live set must be (number, tag, matcher)");
            goto done;
        }
        long long tag = PyLong_AsLongLong(PyTuple_GET_ITEM(f, 1));
        if (tag == -1 && PyErr_Occurred())
            goto done;
        if (tag >= lf && PyList_Append(fs, f) < 0)
            goto done;
    }
    if (PyDict_SetItem(filters, nbr, fs) < 0 || (keys = PyObject_GetAttr(body, s_keys)) == NULL ||
        (n = PyObject_GetAttr(body, s_n)) == NULL)
        goto done;
    int any = PyObject_IsTrue(keys);
    if (any == 0)
        any = PyObject_IsTrue(n);
    if (any < 0)
        goto done;
    if (!any) {
        ret = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *km_args[2] = {e, body};
    if ((groups = PyObject_Vectorcall(args[4], km_args, 2, NULL)) == NULL || (new = PyList_New(0)) == NULL)
        goto done;
    if (!PyList_Check(groups)) {
        PyErr_SetString(PyExc_TypeError, "key_matchers must give a list");
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(groups); i++) {
        PyObject *g = PyList_GET_ITEM(groups, i);
        if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 2) {
            PyErr_SetString(PyExc_TypeError, "a group must be (tag, matcher)");
            goto done;
        }
        long long tag = PyLong_AsLongLong(PyTuple_GET_ITEM(g, 0));
        if (tag == -1 && PyErr_Occurred())
            goto done;
        if (tag < lf)   /* a run whose tuples already left the sender's window holds nothing live */
            continue;
        PyObject *rec = dict_item(received, nbr), *next, *t;
        if (rec == NULL)
            goto done;
        if ((next = PyNumber_Add(rec, one)) == NULL)
            goto done;
        int bad = PyDict_SetItem(received, nbr, next) < 0;
        t = bad ? NULL : PyTuple_Pack(3, next, PyTuple_GET_ITEM(g, 0), PyTuple_GET_ITEM(g, 1));
        Py_DECREF(next);
        if (t == NULL)
            goto done;
        bad = PyList_Append(new, t) < 0;
        Py_DECREF(t);
        if (bad)
            goto done;
    }
    if (PyList_SetSlice(fs, PyList_GET_SIZE(fs), PyList_GET_SIZE(fs), new) < 0)
        goto done;
    PyObject *index = dict_item(indexd, nbr);
    if (index == NULL)
        goto done;
    Py_INCREF(index);
    if ((r = PyObject_CallMethodObjArgs(index, s_more_live, fs, new, NULL)) == NULL) {
        Py_DECREF(index);
        goto done;
    }
    /* the index's holding is its table's (KeyIndex.holding): asked of the table, a call fewer per group */
    PyObject *table = PyObject_GetAttr(index, s_table);
    Py_DECREF(index);
    if (table == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(new); i++) {
        PyObject *t = PyList_GET_ITEM(new, i);
        PyObject *held = PyObject_CallMethodOneArg(table, s_holding, PyTuple_GET_ITEM(t, 2));
        if (held == NULL) {
            Py_DECREF(table);
            goto done;
        }
        int bad = match_held(red, nbr, PyTuple_GET_ITEM(t, 1), held) < 0;
        Py_DECREF(held);
        if (bad) {
            Py_DECREF(table);
            goto done;
        }
    }
    Py_DECREF(table);
    ret = Py_NewRef(Py_None);
done:
    Py_XDECREF(lfd);
    Py_XDECREF(filters);
    Py_XDECREF(received);
    Py_XDECREF(indexd);
    Py_XDECREF(blive);
    Py_XDECREF(lfo);
    Py_XDECREF(fs);
    Py_XDECREF(keys);
    Py_XDECREF(n);
    Py_XDECREF(groups);
    Py_XDECREF(new);
    Py_XDECREF(r);
    return ret;
}

/* ---------------------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"admit", (PyCFunction)(void (*)(void))admit, METH_FASTCALL,
     "admit(red, e, batch, col, value): Reducer.admit (col 0: the lower bound is a ts, 1: a seq)"},
    {"pass_admit", (PyCFunction)(void (*)(void))pass_admit, METH_FASTCALL,
     "pass_admit(red, e, batch, col, value): PassReducer.admit"},
    {"add", (PyCFunction)(void (*)(void))add, METH_FASTCALL, "add(red, batch, e): Reducer._add_all"},
    {"forget_all", (PyCFunction)(void (*)(void))forget_all, METH_FASTCALL,
     "forget_all(red, entries): Reducer._forget_all"},
    {"pass_channel", (PyCFunction)(void (*)(void))pass_channel, METH_FASTCALL,
     "pass_channel(red, channel, nbr, among): the entries newly passing for a set to nbr (None: to ship), "
     "marked; those done with forgotten"},
    {"out_keys", (PyCFunction)(void (*)(void))out_keys, METH_FASTCALL,
     "out_keys(red, nbr, e, among, tau, Outgoing): Reducer.out_keys"},
    {"tups_outgoing", (PyCFunction)(void (*)(void))tups_outgoing, METH_FASTCALL,
     "tups_outgoing(tups, e, tau, positions, live, Outgoing): the set of tuples that all pass at once"},
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
     "take(red, nbr, e, body, key_matchers): Reducer.take"},
    {"matched", (PyCFunction)(void (*)(void))matched, METH_FASTCALL,
     "matched(red, nbr, tag, held): Reducer._matched's loop over the keys a new set holds"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_reducerc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__reducerc(void) {
    struct {
        PyObject **at;
        const char *s;
    } names[] = {{&s_seq, "seq"}, {&s_key, "key"}, {&s_ts, "ts"}, {&s_pending, "pending"},
                 {&s_window, "window"}, {&s_fresh, "_fresh"}, {&s_again, "_again"}, {&s_extract, "_extract"},
                 {&s_col_of, "_col_of"}, {&s_rank, "_rank"}, {&s_index, "_index"}, {&s_add_all, "add_all"}, {&s_add_settle, "add_settle"}, {&s_new, "_new"},
                 {&s_discard_all, "discard_all"}, {&s_settle, "settle"}, {&s_popleft, "popleft"},
                 {&s_extend, "extend"}, {&s_pos, "_pos"}, {&s_best, "best"}, {&s_live_from, "live_from"},
                 {&s_sends, "_sends"}, {&s_op, "op"}, {&s_replica, "replica"},
                 {&s_dirty, "_dirty"}, {&s_table, "table"}, {&s_seqs, "seqs"}, {&s_update, "update"},
                 {&s_filters, "filters"}, {&s_received, "received"}, {&s_live, "live"}, {&s_keys, "keys"},
                 {&s_n, "n"}, {&s_more_live, "more_live"}, {&s_holding, "holding"}, {&s_keys_, "_keys"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i].at == NULL && (*names[i].at = PyUnicode_InternFromString(names[i].s)) == NULL)
            return NULL;
    if (empty == NULL && (empty = PyTuple_New(0)) == NULL)
        return NULL;
    if (one == NULL && (one = PyLong_FromLong(1)) == NULL)
        return NULL;
    if (PyType_Ready(&EntryType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Entry", (PyObject *)&EntryType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
