/* Fenwick-tree kernels for DJA's ordered entries (joinlib/runtime/algorithms/ordered.py).
 *
 * Why C: a DJA update names the entries whose counts changed by their position in V, so the home and
 * every replica find positions and keys at positions (O(log n) steps each) for every changed entry,
 * every epoch; in Python each step is a few bytecodes and the three operations were about a quarter
 * of an SM-S2 plan's CPU.  The tree is the 1-based ``array('q')`` ordered.py keeps (the number of
 * removed slots under each node), read and written in place through its buffer (as a list of ints, each
 * step read an int object and a removal made one per level: a third of dja_apply's time); ordered.py keeps
 * the same loops in Python as the fallback.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A tree's entries in place: the buffer of an array('q') (or any writable, contiguous buffer of 8-byte signed
 * ints), held until tree_release. */
typedef struct {
    Py_buffer view;
    long long *t;
    Py_ssize_t n;
} Tree;

static int tree_get(PyObject *o, Tree *tr) {
    tr->t = NULL;
    tr->n = 0;
    if (PyObject_GetBuffer(o, &tr->view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "the tree must be an array('q') of ints");
        }
        return -1;
    }
    if (tr->view.itemsize != 8 || tr->view.format == NULL || strcmp(tr->view.format, "q") != 0) {
        PyBuffer_Release(&tr->view);
        PyErr_SetString(PyExc_TypeError, "the tree must be an array('q') of ints");
        return -1;
    }
    tr->t = (long long *)tr->view.buf;
    tr->n = tr->view.len / 8;
    return 0;
}

static void tree_release(Tree *tr) {
    if (tr->t != NULL) {
        PyBuffer_Release(&tr->view);
        tr->t = NULL;
        tr->n = 0;
    }
}

/* One more removed slot at 0-based ``slot``; -1 with an exception. */
static int mark_slot(Tree *tr, Py_ssize_t slot) {
    Py_ssize_t n = tr->n;
    if (slot < 0 || slot + 1 >= n) {
        PyErr_SetString(PyExc_IndexError, "slot outside the tree");
        return -1;
    }
    for (Py_ssize_t i = slot + 1; i < n; i += i & -i)
        tr->t[i] += 1;
    return 0;
}

/* mark(tree, slot): one more removed slot at 0-based ``slot``. */
static PyObject *mark(PyObject *self, PyObject *args) {
    PyObject *tree;
    Py_ssize_t slot;
    Tree tr;
    if (!PyArg_ParseTuple(args, "On", &tree, &slot) || tree_get(tree, &tr) < 0)
        return NULL;
    int r = mark_slot(&tr, slot);
    tree_release(&tr);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The removed slots among slots 0 .. slot - 1, in *removed; -1 with an exception. */
static int prefix(const Tree *tr, Py_ssize_t slot, long long *removed) {
    if (slot < 0 || slot >= tr->n) {
        PyErr_SetString(PyExc_IndexError, "slot outside the tree");
        return -1;
    }
    long long r = 0;
    for (Py_ssize_t i = slot; i > 0; i -= i & -i)
        r += tr->t[i];
    *removed = r;
    return 0;
}

/* removed_before(tree, slot) -> int: removed slots among slots 0 .. slot - 1. */
static PyObject *removed_before(PyObject *self, PyObject *args) {
    PyObject *tree;
    Py_ssize_t slot;
    long long removed;
    Tree tr;
    if (!PyArg_ParseTuple(args, "On", &tree, &slot) || tree_get(tree, &tr) < 0)
        return NULL;
    int r = prefix(&tr, slot, &removed);
    tree_release(&tr);
    return r < 0 ? NULL : PyLong_FromLongLong(removed);
}

/* positions(tree, slots) -> list[int]: per 0-based slot of ``slots``, the slot less the removed slots
 * below it (the live key's position): the positions of an epoch's changed entries in one call. */
static PyObject *positions(PyObject *self, PyObject *args) {
    PyObject *tree, *slots;
    Tree tr;
    if (!PyArg_ParseTuple(args, "OO!", &tree, &PyList_Type, &slots) || tree_get(tree, &tr) < 0)
        return NULL;
    Py_ssize_t m = PyList_GET_SIZE(slots);
    PyObject *out = PyList_New(m);
    if (out == NULL)
        goto done;
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_ssize_t slot = PyLong_AsSsize_t(PyList_GET_ITEM(slots, j));
        long long removed;
        if ((slot == -1 && PyErr_Occurred()) || prefix(&tr, slot, &removed) < 0)
            goto fail;
        PyObject *w = PyLong_FromLongLong((long long)slot - removed);
        if (w == NULL)
            goto fail;
        PyList_SET_ITEM(out, j, w);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    tree_release(&tr);
    return out;
}

/* The 0-based slot holding the live key at 0-based ``position`` among the first ``used`` slots (the
 * caller checked that it exists and that used < the tree's size). */
static Py_ssize_t find_slot(const Tree *tr, Py_ssize_t used, long long position) {
    Py_ssize_t i = 0, step = 1;
    long long rest = position + 1;
    while (step <= used)
        step <<= 1;
    for (; step; step >>= 1) {   /* the largest slot prefix holding fewer than position + 1 live keys */
        Py_ssize_t j = i + step;
        if (j <= used) {
            long long live = (long long)step - tr->t[j];
            if (live < rest) {
                i = j;
                rest -= live;
            }
        }
    }
    return i;
}

/* slot_of(tree, used, position) -> int: the slot of the live key at ``position`` (see find_slot). */
static PyObject *slot_of(PyObject *self, PyObject *args) {
    PyObject *tree;
    Py_ssize_t used, position;
    Tree tr;
    if (!PyArg_ParseTuple(args, "Onn", &tree, &used, &position) || tree_get(tree, &tr) < 0)
        return NULL;
    PyObject *out = NULL;
    if (used < 0 || used >= tr.n || position < 0)
        PyErr_SetString(PyExc_IndexError, "position or used slots outside the tree");
    else
        out = PyLong_FromSsize_t(find_slot(&tr, used, position));
    tree_release(&tr);
    return out;
}

/* slots_of(tree, used, positions) -> list[int]: slot_of for each of ``positions`` (one call for the
 * entries an update names). */
static PyObject *slots_of(PyObject *self, PyObject *args) {
    PyObject *tree, *positions;
    Py_ssize_t used;
    Tree tr;
    if (!PyArg_ParseTuple(args, "OnO!", &tree, &used, &PyList_Type, &positions) || tree_get(tree, &tr) < 0)
        return NULL;
    PyObject *out = NULL;
    if (used < 0 || used >= tr.n) {
        PyErr_SetString(PyExc_IndexError, "used slots outside the tree");
        goto done;
    }
    Py_ssize_t m = PyList_GET_SIZE(positions);
    if ((out = PyList_New(m)) == NULL)
        goto done;
    for (Py_ssize_t j = 0; j < m; j++) {
        long long position = PyLong_AsLongLong(PyList_GET_ITEM(positions, j));
        if (position == -1 && PyErr_Occurred())
            goto fail;
        if (position < 0) {
            PyErr_SetString(PyExc_IndexError, "a position is negative");
            goto fail;
        }
        PyObject *w = PyLong_FromSsize_t(find_slot(&tr, used, position));
        if (w == NULL)
            goto fail;
        PyList_SET_ITEM(out, j, w);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    tree_release(&tr);
    return out;
}

/* ------------------------------------------------------------------------------------------------ DJA's loops
 *
 * Why: SM-D1's and SM-S2's home ticks and replica applies (runtime/algorithms/dja.py) spend most of their time
 * in per-tuple and per-entry interpreter overhead (about ten tuples an epoch); these kernels run
 * DjaSender._update's and DjaReplica.apply's loops on an OrderedEntries' own objects (its _entries and _slot
 * dicts, _keys list and _tree array, read from its attributes and read again after a _rebuild it is asked for), in
 * the order and with the errors of the Python loops, which dja.py and ordered.py keep as the fallback. */

/* Dict operations with the key's hash computed once (a tuple key's hash is not cached: a key met in a tick is
 * looked up, inserted or removed in two dicts, five times in all); the public forms where the private ones are
 * gone. */
#if PY_VERSION_HEX < 0x030D0000
#define GET_KH(d, k, h) _PyDict_GetItem_KnownHash((d), (k), (h))
#define SET_KH(d, k, v, h) _PyDict_SetItem_KnownHash((d), (k), (v), (h))
#define DEL_KH(d, k, h) _PyDict_DelItem_KnownHash((d), (k), (h))
#else
#define GET_KH(d, k, h) PyDict_GetItemWithError((d), (k))
#define SET_KH(d, k, v, h) PyDict_SetItem((d), (k), (v))
#define DEL_KH(d, k, h) PyDict_DelItem((d), (k))
#endif

static PyObject *s_entries, *s_slot, *s_keys, *s_tree, *s_rebuild, *s_key, *s_ts, *s_seq, *s_append, *s_popleft,
    *i_zero, *i_one, *i_minus_one;

typedef struct {
    PyObject *oe, *entries, *slot, *keys, *tree;   /* the OrderedEntries (borrowed) and its state (owned) */
    Tree tr;                                       /* the tree's buffer (held while ``tree`` is) */
} State;

static void state_clear(State *s) {
    tree_release(&s->tr);
    Py_CLEAR(s->entries);
    Py_CLEAR(s->slot);
    Py_CLEAR(s->keys);
    Py_CLEAR(s->tree);
}

static int state_read(State *s) {
    state_clear(s);
    s->entries = PyObject_GetAttr(s->oe, s_entries);
    s->slot = s->entries ? PyObject_GetAttr(s->oe, s_slot) : NULL;
    s->keys = s->slot ? PyObject_GetAttr(s->oe, s_keys) : NULL;
    s->tree = s->keys ? PyObject_GetAttr(s->oe, s_tree) : NULL;
    if (s->tree == NULL)
        return -1;
    if (!PyDict_CheckExact(s->entries) || !PyDict_CheckExact(s->slot) || !PyList_CheckExact(s->keys)) {
        PyErr_SetString(PyExc_TypeError, "not the state of an OrderedEntries");
        return -1;
    }
    if (tree_get(s->tree, &s->tr) < 0)
        return -1;
    return 0;
}

/* KeyError(key), a tuple key included (as dict's own). */
static void key_error(PyObject *key) {
    PyObject *k = PyTuple_Pack(1, key);
    if (k != NULL) {
        PyErr_SetObject(PyExc_KeyError, k);
        Py_DECREF(k);
    }
}

/* entry[i], a new reference (an entry is the list [count, flag]). */
static PyObject *entry_get(PyObject *entry, Py_ssize_t i) {
    if (PyList_CheckExact(entry) && i < PyList_GET_SIZE(entry)) {
        PyObject *v = PyList_GET_ITEM(entry, i);
        Py_INCREF(v);
        return v;
    }
    return PySequence_GetItem(entry, i);
}

/* entry[i] = v (v borrowed). */
static int entry_set(PyObject *entry, Py_ssize_t i, PyObject *v) {
    if (PyList_CheckExact(entry) && i < PyList_GET_SIZE(entry)) {
        Py_INCREF(v);
        return PyList_SetItem(entry, i, v);
    }
    return PySequence_SetItem(entry, i, v);
}

/* entry[0] += delta */
static int entry_add(PyObject *entry, PyObject *delta) {
    PyObject *c = entry_get(entry, 0);
    if (c == NULL)
        return -1;
    PyObject *d = PyNumber_InPlaceAdd(c, delta);
    Py_DECREF(c);
    if (d == NULL)
        return -1;
    int r = entry_set(entry, 0, d);
    Py_DECREF(d);
    return r;
}

/* A key not in V appended with ``entry``: OrderedEntries.__setitem__'s and add's new-key path, _rebuild included. */
static int append_key_h(State *s, PyObject *key, Py_hash_t h, PyObject *entry) {
    Py_ssize_t used = PyList_GET_SIZE(s->keys);
    if (used + 1 >= s->tr.n) {
        Py_ssize_t capacity = 4 * PyDict_GET_SIZE(s->entries) + 2;   /* ordered._capacity */
        PyObject *cap = PyLong_FromSsize_t(capacity < 16 ? 16 : capacity);
        if (cap == NULL)
            return -1;
        PyObject *r = PyObject_CallMethodOneArg(s->oe, s_rebuild, cap);
        Py_DECREF(cap);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        if (state_read(s) < 0)
            return -1;
        used = PyList_GET_SIZE(s->keys);
    }
    PyObject *slot = PyLong_FromSsize_t(used);
    if (slot == NULL)
        return -1;
    int r = SET_KH(s->slot, key, slot, h);
    Py_DECREF(slot);
    if (r < 0 || PyList_Append(s->keys, key) < 0 || SET_KH(s->entries, key, entry, h) < 0)
        return -1;
    return 0;
}

/* del V[key]: OrderedEntries.__delitem__. */
static int delete_key_h(State *s, PyObject *key, Py_hash_t h) {
    if (DEL_KH(s->entries, key, h) < 0)
        return -1;
    PyObject *slot = GET_KH(s->slot, key, h);
    if (slot == NULL) {
        if (!PyErr_Occurred())
            key_error(key);
        return -1;
    }
    Py_ssize_t i = PyLong_AsSsize_t(slot);
    if ((i == -1 && PyErr_Occurred()) || DEL_KH(s->slot, key, h) < 0)
        return -1;
    Py_INCREF(Py_None);
    if (PyList_SetItem(s->keys, i, Py_None) < 0)
        return -1;
    return mark_slot(&s->tr, i);
}

static int delete_key(State *s, PyObject *key) {
    Py_hash_t h = PyObject_Hash(key);
    return h == -1 ? -1 : delete_key_h(s, key, h);
}

/* V[key], borrowed, KeyError if absent. */
static PyObject *entry_of(State *s, PyObject *key) {
    PyObject *entry = PyDict_GetItemWithError(s->entries, key);
    if (entry == NULL && !PyErr_Occurred())
        key_error(key);
    return entry;
}

/* t.key projected onto ``index`` (dja.projector): a new tuple. */
static PyObject *project(PyObject *t, PyObject *index) {
    PyObject *key = PyObject_GetAttr(t, s_key);
    if (key == NULL)
        return NULL;
    Py_ssize_t m = PyTuple_GET_SIZE(index);
    PyObject *out = PyTuple_New(m);
    for (Py_ssize_t j = 0; out != NULL && j < m; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(index, j));
        PyObject *v = NULL;
        if (!(i == -1 && PyErr_Occurred())) {
            if (PyTuple_CheckExact(key) && i >= 0 && i < PyTuple_GET_SIZE(key)) {
                v = PyTuple_GET_ITEM(key, i);
                Py_INCREF(v);
            } else {
                v = PySequence_GetItem(key, i);
            }
        }
        if (v == NULL)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, j, v);
    }
    Py_DECREF(key);
    return out;
}

/* A touched entry of an epoch's tick: its key and entry (strong references) and its slot. */
typedef struct {
    PyObject *key, *entry;
    Py_ssize_t slot;
    Py_hash_t hash;
} Touch;

typedef struct {
    Touch *at;
    Py_ssize_t n, cap;
} Touches;

static void touches_clear(Touches *t) {
    for (Py_ssize_t i = 0; i < t->n; i++) {
        Py_DECREF(t->at[i].key);
        Py_DECREF(t->at[i].entry);
    }
    PyMem_Free(t->at);
    t->at = NULL;
    t->n = t->cap = 0;
}

/* One more touched (key, entry), both borrowed (kept as strong references), the key's hash ``h``. */
static int touch(Touches *t, PyObject *key, Py_hash_t h, PyObject *entry) {
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? 2 * t->cap : 32;
        Touch *at = PyMem_Resize(t->at, Touch, cap);
        if (at == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->at = at;
        t->cap = cap;
    }
    Py_INCREF(key);
    Py_INCREF(entry);
    t->at[t->n].key = key;
    t->at[t->n].entry = entry;
    t->at[t->n].slot = 0;
    t->at[t->n].hash = h;
    t->n++;
    return 0;
}

/* The touches by slot: an insertion sort (an epoch touches a few tens of entries; qsort's merge sort with its
 * buffer cost a tenth of a tick), stable like the merge sort it replaces. */
static void sort_touches(Touch *at, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++) {
        Touch x = at[i];
        Py_ssize_t j = i;
        while (j > 0 && at[j - 1].slot > x.slot) {
            at[j] = at[j - 1];
            j--;
        }
        at[j] = x;
    }
}

/* entry[0] += delta for a small delta: an exact int count added in C, anything else by PyNumber_InPlaceAdd. */
static int entry_bump(PyObject *entry, long delta, PyObject *odelta) {
    if (PyList_CheckExact(entry) && PyList_GET_SIZE(entry) >= 1 && PyLong_CheckExact(PyList_GET_ITEM(entry, 0))) {
        int overflow;
        long c = PyLong_AsLongAndOverflow(PyList_GET_ITEM(entry, 0), &overflow);
        if (!overflow && !(c == -1 && PyErr_Occurred()) && c > LONG_MIN + 1 && c < LONG_MAX - 1) {
            PyObject *d = PyLong_FromLong(c + delta);
            if (d == NULL)
                return -1;
            PyObject *old = PyList_GET_ITEM(entry, 0);
            PyList_SET_ITEM(entry, 0, d);
            Py_DECREF(old);
            return 0;
        }
        PyErr_Clear();
    }
    return entry_add(entry, odelta);
}

/* Is entry[0] == 0 (1), not (0), or -1 with an exception. */
static int count_is_zero(PyObject *entry) {
    if (PyList_CheckExact(entry) && PyList_GET_SIZE(entry) >= 1 && PyLong_CheckExact(PyList_GET_ITEM(entry, 0))) {
        int overflow;
        long c = PyLong_AsLongAndOverflow(PyList_GET_ITEM(entry, 0), &overflow);
        if (c == -1 && PyErr_Occurred())
            return -1;
        return !overflow && c == 0;
    }
    PyObject *c = entry_get(entry, 0);
    int zero = c ? PyObject_RichCompareBool(c, i_zero, Py_EQ) : -1;
    Py_XDECREF(c);
    return zero;
}

/* OrderedEntries.changes(keys) and drop_empty(keys) of the touched entries ``t``: their slots found (sorted, each
 * entry once), v_C's (gap, count) pairs (a new list), then the entries whose count is 0 removed. */
static PyObject *changes_and_drop(State *s, Touches *t) {
    Py_ssize_t used = PyList_GET_SIZE(s->keys);
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyObject *slot = GET_KH(s->slot, t->at[i].key, t->at[i].hash);
        if (slot == NULL) {
            if (!PyErr_Occurred())
                key_error(t->at[i].key);
            return NULL;
        }
        if ((t->at[i].slot = PyLong_AsSsize_t(slot)) == -1 && PyErr_Occurred())
            return NULL;
    }
    sort_touches(t->at, t->n);
    Py_ssize_t j = 0;   /* each slot once: a key touched again has the same slot (and entry) */
    for (Py_ssize_t i = 0; i < t->n; i++) {
        if (j > 0 && t->at[j - 1].slot == t->at[i].slot) {
            Py_DECREF(t->at[i].key);
            Py_DECREF(t->at[i].entry);
            continue;
        }
        t->at[j++] = t->at[i];
    }
    t->n = j;
    PyObject *out = PyList_New(2 * j);
    if (out == NULL)
        return NULL;
    long long last = -1;
    for (Py_ssize_t k = 0; k < j; k++) {
        long long removed;
        if (prefix(&s->tr, t->at[k].slot, &removed) < 0 || t->at[k].slot >= used)
            goto fail;
        long long pos = (long long)t->at[k].slot - removed;
        PyObject *gap = PyLong_FromLongLong(pos - last - 1);
        if (gap == NULL)
            goto fail;
        PyList_SET_ITEM(out, 2 * k, gap);
        PyObject *count = entry_get(t->at[k].entry, 0);
        if (count == NULL)
            goto fail;
        PyList_SET_ITEM(out, 2 * k + 1, count);
        last = pos;
    }
    for (Py_ssize_t k = 0; k < j; k++) {   /* drop_empty */
        int empty = count_is_zero(t->at[k].entry);
        if (empty > 0)
            empty = delete_key_h(s, t->at[k].key, t->at[k].hash) < 0 ? -1 : 1;
        if (empty < 0)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* dja_tick(entries, fifo, batch, index, by_ts, bound, sf) -> (vj, vc): DjaSender._update's loops on the
 * OrderedEntries ``entries`` and the deque ``fifo`` of (ts, seq, key): the batch's tuples in (s_F: the new
 * tuples of flagged keys appended to the list ``sf`` unless None), those of ts (``by_ts``) or seq below
 * ``bound`` out, the touched entries' count changes, the emptied entries removed.  The touched entries are kept
 * with their keys as they are met (not in a set looked up again), their slots found once at the end. */
static PyObject *dja_tick(PyObject *self, PyObject *args) {
    PyObject *fifo, *batch, *index, *bound, *sf;
    int by_ts;
    State s = {NULL, NULL, NULL, NULL, NULL};
    Touches touched = {NULL, 0, 0};
    if (!PyArg_ParseTuple(args, "OOOO!pOO", &s.oe, &fifo, &batch, &PyTuple_Type, &index, &by_ts, &bound, &sf))
        return NULL;
    if (sf != Py_None && !PyList_Check(sf)) {
        PyErr_SetString(PyExc_TypeError, "sf must be a list or None");
        return NULL;
    }
    PyObject *append = NULL, *popleft = NULL, *seq = NULL, *vj = NULL, *dying = NULL, *vc = NULL, *out = NULL;
    if (state_read(&s) < 0 || (append = PyObject_GetAttr(fifo, s_append)) == NULL
            || (popleft = PyObject_GetAttr(fifo, s_popleft)) == NULL
            || (seq = PySequence_Fast(batch, "the batch must be a sequence")) == NULL
            || (vj = PyList_New(0)) == NULL || (dying = PyList_New(0)) == NULL)
        goto done;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i), *key = project(t, index), *rec = NULL;
        if (key == NULL)
            goto done;
        PyObject *ts = PyObject_GetAttr(t, s_ts), *sq = ts ? PyObject_GetAttr(t, s_seq) : NULL;
        if (sq != NULL)
            rec = PyTuple_Pack(3, ts, sq, key);
        Py_XDECREF(ts);
        Py_XDECREF(sq);
        PyObject *r = rec ? PyObject_CallOneArg(append, rec) : NULL;
        Py_XDECREF(rec);
        Py_XDECREF(r);
        Py_hash_t h = r != NULL ? PyObject_Hash(key) : -1;
        int ok = h != -1;
        PyObject *entry = ok ? GET_KH(s.entries, key, h) : NULL;
        if (ok && entry == NULL && !PyErr_Occurred()) {   /* new: in V, last, with [1, False] */
            PyObject *fresh = PyList_New(2);
            if (fresh != NULL) {
                Py_INCREF(i_one);
                Py_INCREF(Py_False);
                PyList_SET_ITEM(fresh, 0, i_one);
                PyList_SET_ITEM(fresh, 1, Py_False);
            }
            ok = fresh != NULL && append_key_h(&s, key, h, fresh) == 0 && PyList_Append(vj, key) == 0
                && touch(&touched, key, h, fresh) == 0;
            Py_XDECREF(fresh);
        } else if (ok && entry != NULL) {
            Py_INCREF(entry);
            ok = entry_bump(entry, 1, i_one) == 0 && touch(&touched, key, h, entry) == 0;
            PyObject *flag = ok ? entry_get(entry, 1) : NULL;
            int on = flag ? PyObject_IsTrue(flag) : -1;
            Py_XDECREF(flag);
            ok = on >= 0 && (!on || sf == Py_None || PyList_Append(sf, t) == 0);
            Py_DECREF(entry);
        } else {
            ok = 0;
        }
        Py_DECREF(key);
        if (!ok)
            goto done;
    }
    for (;;) {   /* the dying tuples: DjaSender._dying */
        Py_ssize_t left = PyObject_Size(fifo);
        if (left < 0)
            goto done;
        if (left == 0)
            break;
        PyObject *head = PySequence_GetItem(fifo, 0), *v;
        if (head != NULL && PyTuple_CheckExact(head) && PyTuple_GET_SIZE(head) == 3) {
            v = PyTuple_GET_ITEM(head, by_ts ? 0 : 1);
            Py_INCREF(v);
        } else {
            v = head ? PySequence_GetItem(head, by_ts ? 0 : 1) : NULL;
        }
        Py_XDECREF(head);
        int lt = v ? PyObject_RichCompareBool(v, bound, Py_LT) : -1;
        Py_XDECREF(v);
        if (lt < 0)
            goto done;
        if (!lt)
            break;
        PyObject *rec = PyObject_CallNoArgs(popleft);
        PyObject *key = rec ? PySequence_GetItem(rec, 2) : NULL;
        Py_XDECREF(rec);
        int r = key ? PyList_Append(dying, key) : -1;
        Py_XDECREF(key);
        if (r < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(dying); i++) {   /* bump(key, -1) */
        PyObject *key = PyList_GET_ITEM(dying, i);
        Py_hash_t h = PyObject_Hash(key);
        PyObject *entry = h == -1 ? NULL : GET_KH(s.entries, key, h);
        if (entry == NULL) {
            if (!PyErr_Occurred())
                key_error(key);
            goto done;
        }
        Py_INCREF(entry);
        int r = entry_bump(entry, -1, i_minus_one) < 0 || touch(&touched, key, h, entry) < 0 ? -1 : 0;
        Py_DECREF(entry);
        if (r < 0)
            goto done;
    }
    if ((vc = changes_and_drop(&s, &touched)) == NULL)
        goto done;
    out = PyTuple_Pack(2, vj, vc);
done:
    state_clear(&s);
    touches_clear(&touched);
    Py_XDECREF(append);
    Py_XDECREF(popleft);
    Py_XDECREF(seq);
    Py_XDECREF(vj);
    Py_XDECREF(dying);
    Py_XDECREF(vc);
    return out;
}

/* Mixed replicas' settle (MixedReplica._settle): a partial entry keeps its count; a full one takes ``p`` and
 * leaves in ``expire`` its expired full tuples (its count plus its s_F tuples, popped from ``sf``, less p). */
static int settle_mixed(PyObject *key, PyObject *entry, PyObject *p, PyObject *sf, PyObject *expire) {
    PyObject *flag = entry_get(entry, 1);
    int on = flag ? PyObject_IsTrue(flag) : -1;
    Py_XDECREF(flag);
    if (on <= 0)
        return on;
    Py_ssize_t q = 0;
    PyObject *tups = PyDict_GetItemWithError(sf, key);
    if (tups != NULL) {
        Py_INCREF(tups);
        q = PyObject_Size(tups);
        int r = q < 0 ? -1 : PyDict_DelItem(sf, key);
        Py_DECREF(tups);
        if (r < 0)
            return -1;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *c = entry_get(entry, 0), *qo = PyLong_FromSsize_t(q);
    PyObject *cq = c && qo ? PyNumber_Add(c, qo) : NULL;
    PyObject *k = cq ? PyNumber_Subtract(cq, p) : NULL;
    Py_XDECREF(c);
    Py_XDECREF(qo);
    Py_XDECREF(cq);
    int any = k ? PyObject_IsTrue(k) : -1;
    int r = any < 0 || (any && PyDict_SetItem(expire, key, k) < 0) ? -1 : entry_set(entry, 0, p);
    Py_XDECREF(k);
    return r;
}

/* dja_apply(entries, vj, vc, sf, expire): DjaReplica.apply of a DjaUpdate on the OrderedEntries ``entries``:
 * the new values ``vj`` in (with [0, False]), the counts of the (gap, count) pairs ``vc`` settled (by
 * DjaReplica._settle if ``sf`` and ``expire`` are None, by MixedReplica._settle on those dicts if not), the
 * entries of count 0 removed.  IndexError (before any count changes) if a pair names a position past V's
 * end or the pairs are odd. */
static PyObject *dja_apply(PyObject *self, PyObject *args) {
    PyObject *vj, *vc, *sf, *expire;
    State s = {NULL, NULL, NULL, NULL, NULL};
    if (!PyArg_ParseTuple(args, "OOOOO", &s.oe, &vj, &vc, &sf, &expire))
        return NULL;
    int mixed = sf != Py_None;
    if (mixed && (!PyDict_Check(sf) || !PyDict_Check(expire))) {
        PyErr_SetString(PyExc_TypeError, "sf and expire must be dicts or None");
        return NULL;
    }
    PyObject *newkeys = NULL, *counts = NULL, *dead = NULL, *out = NULL;
    long long *pos = NULL;
    if (state_read(&s) < 0 || (newkeys = PySequence_Fast(vj, "vj must be a sequence")) == NULL
            || (counts = PySequence_Fast(vc, "vc must be a sequence")) == NULL || (dead = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(newkeys); i++) {   /* entries[key] = [0, False] */
        PyObject *key = PySequence_Fast_GET_ITEM(newkeys, i), *fresh = PyList_New(2);
        if (fresh == NULL)
            goto done;
        Py_INCREF(i_zero);
        Py_INCREF(Py_False);
        PyList_SET_ITEM(fresh, 0, i_zero);
        PyList_SET_ITEM(fresh, 1, Py_False);
        Py_hash_t h = PyObject_Hash(key);
        PyObject *had = h == -1 ? NULL : GET_KH(s.entries, key, h);
        int r = had == NULL && PyErr_Occurred() ? -1
            : had != NULL ? SET_KH(s.entries, key, fresh, h) : append_key_h(&s, key, h, fresh);
        Py_DECREF(fresh);
        if (r < 0)
            goto done;
    }
    Py_ssize_t m = PySequence_Fast_GET_SIZE(counts), pairs = (m + 1) / 2;
    if ((pos = PyMem_New(long long, pairs > 0 ? pairs : 1)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    long long at = -1, live = (long long)PyDict_GET_SIZE(s.entries);
    int outside = 0;
    for (Py_ssize_t j = 0; j < pairs; j++) {   /* changed_entries: the positions, all checked first */
        int overflow;
        long long gap = PyLong_AsLongLongAndOverflow(PySequence_Fast_GET_ITEM(counts, 2 * j), &overflow);
        if (gap == -1 && PyErr_Occurred())
            goto done;
        if (overflow || __builtin_add_overflow(at, gap, &at) || __builtin_add_overflow(at, 1LL, &at)) {
            outside = 1;   /* past any long long: past V's end or before its start */
            at = 0;
        }
        pos[j] = at;
        if (at < 0 || at >= live)
            outside = 1;
    }
    if (outside || m % 2) {
        PyErr_SetString(PyExc_IndexError, outside ? "a count change names a position outside V" : "odd count changes");
        goto done;
    }
    Py_ssize_t used = PyList_GET_SIZE(s.keys);
    if (used >= s.tr.n) {
        PyErr_SetString(PyExc_IndexError, "used slots outside the tree");
        goto done;
    }
    for (Py_ssize_t j = 0; j < pairs; j++) {
        Py_ssize_t slot = find_slot(&s.tr, used, pos[j]);
        if (slot < 0)
            goto done;
        PyObject *key = slot < used ? PyList_GET_ITEM(s.keys, slot) : Py_None;
        if (key == Py_None) {
            PyErr_SetString(PyExc_AssertionError, "a position names a removed slot");
            goto done;
        }
        PyObject *entry = entry_of(&s, key), *p = PySequence_Fast_GET_ITEM(counts, 2 * j + 1);
        if (entry == NULL)
            goto done;
        Py_INCREF(key);
        Py_INCREF(entry);
        int r = mixed ? settle_mixed(key, entry, p, sf, expire) : entry_set(entry, 0, p);
        int zero = r < 0 ? -1 : PyObject_RichCompareBool(p, i_zero, Py_EQ);
        if (zero > 0)
            zero = PyList_Append(dead, key) < 0 ? -1 : 1;
        Py_DECREF(entry);
        Py_DECREF(key);
        if (zero < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(dead); i++)
        if (delete_key(&s, PyList_GET_ITEM(dead, i)) < 0)
            goto done;
    out = Py_None;
    Py_INCREF(out);
done:
    PyMem_Free(pos);
    state_clear(&s);
    Py_XDECREF(newkeys);
    Py_XDECREF(counts);
    Py_XDECREF(dead);
    return out;
}

static PyMethodDef methods[] = {
    {"mark", mark, METH_VARARGS, "mark(tree, slot): one more removed slot"},
    {"removed_before", removed_before, METH_VARARGS, "removed_before(tree, slot) -> removed slots below slot"},
    {"positions", positions, METH_VARARGS, "positions(tree, slots) -> the live keys' positions at those slots"},
    {"slot_of", slot_of, METH_VARARGS, "slot_of(tree, used, position) -> the slot of the live key at position"},
    {"slots_of", slots_of, METH_VARARGS, "slots_of(tree, used, positions) -> slot_of of each position"},
    {"dja_tick", dja_tick, METH_VARARGS,
     "dja_tick(entries, fifo, batch, index, by_ts, bound, sf) -> (vj, vc): DjaSender._update's loops"},
    {"dja_apply", dja_apply, METH_VARARGS, "dja_apply(entries, vj, vc, sf, expire): DjaReplica.apply's loops"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fenwickc", NULL, -1, methods};

static PyObject *intern(const char *name) { return PyUnicode_InternFromString(name); }

PyMODINIT_FUNC PyInit__fenwickc(void) {
    if (s_entries == NULL) {
        s_entries = intern("_entries");
        s_slot = intern("_slot");
        s_keys = intern("_keys");
        s_tree = intern("_tree");
        s_rebuild = intern("_rebuild");
        s_key = intern("key");
        s_ts = intern("ts");
        s_seq = intern("seq");
        s_append = intern("append");
        s_popleft = intern("popleft");
        i_zero = PyLong_FromLong(0);
        i_one = PyLong_FromLong(1);
        i_minus_one = PyLong_FromLong(-1);
        if (!s_entries || !s_slot || !s_keys || !s_tree || !s_rebuild || !s_key || !s_ts || !s_seq || !s_append
                || !s_popleft || !i_zero || !i_one || !i_minus_one)
            return NULL;
    }
    return PyModule_Create(&module);
}
