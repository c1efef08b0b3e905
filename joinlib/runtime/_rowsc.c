/* The rows a step hands to the next (joinlib/runtime/instance.py Instance.output), built in C.
 *
 * Why C: a step's output is factorised, (row, tuples of the probed stream); the next step probes once per full
 * row, so each group is expanded into one row per tuple.  With ~90 matches a probe that is one new tuple per
 * intermediate result, and building them in a Python generator was the largest single cost of a node emitting
 * ~80 results per input tuple.  The rows are exactly row[:pos] + (t,) + row[pos + 1:].
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>

/* expand(out, groups, pos): out += [row[:pos] + (t,) + row[pos + 1:] for row, tups in groups for t in tups]. */
static PyObject *expand(PyObject *self, PyObject *args) {
    PyObject *out, *groups;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyList_Type, &out, &PyList_Type, &groups, &pos))
        return NULL;
    Py_ssize_t g = PyList_GET_SIZE(groups);
    for (Py_ssize_t i = 0; i < g; i++) {   /* shapes first: nothing is appended unless all fit */
        PyObject *grp = PyList_GET_ITEM(groups, i);
        if (!PyTuple_Check(grp) || PyTuple_GET_SIZE(grp) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(grp, 0)) ||
            !PyList_Check(PyTuple_GET_ITEM(grp, 1)) || pos < 0 || pos >= PyTuple_GET_SIZE(PyTuple_GET_ITEM(grp, 0))) {
            PyErr_SetString(PyExc_TypeError, "a group is (row tuple, tuples list) with pos inside the row");
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < g; i++) {
        PyObject *grp = PyList_GET_ITEM(groups, i);
        PyObject *row = PyTuple_GET_ITEM(grp, 0), *tups = PyTuple_GET_ITEM(grp, 1);
        Py_ssize_t w = PyTuple_GET_SIZE(row), n = PyList_GET_SIZE(tups);
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *r = PyTuple_New(w);
            if (r == NULL)
                return NULL;
            for (Py_ssize_t k = 0; k < w; k++) {
                PyObject *x = k == pos ? PyList_GET_ITEM(tups, j) : PyTuple_GET_ITEM(row, k);
                Py_INCREF(x);
                PyTuple_SET_ITEM(r, k, x);
            }
            int err = PyList_Append(out, r);
            Py_DECREF(r);
            if (err < 0)
                return NULL;
        }
    }
    Py_RETURN_NONE;
}


/* ---------------------------------------------------------------------------- a step's probe (base.join)
 *
 * Why C: every plan probes windows with the rows of each epoch (central at its site, SP-S at the source, a
 * reduction at R, every partition of pmjoin); in Python grouping the rows by key and cutting each key's list by
 * two bisections per head was a fifth of central's embedded time and the largest part of a live central node's
 * join.  Both functions answer None where they decline (a value that is not what the fast path reads); the caller
 * then runs its Python form, which is the definition (tests/property/test_join_c.py compares them). */

static PyObject *s_key, *s_ts, *s_tups, *s_lo, *s_popleft;

/* by_key1(rows, p, i) -> {(row[p].key[i],): [row, ...]} in first-appearance order, or None. */
static PyObject *by_key1(PyObject *self, PyObject *args) {
    PyObject *rows;
    Py_ssize_t p, i;
    if (!PyArg_ParseTuple(args, "O!nn", &PyList_Type, &rows, &p, &i))
        return NULL;
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(rows); r++) {
        PyObject *row = PyList_GET_ITEM(rows, r);
        if (!PyTuple_CheckExact(row) || p < 0 || p >= PyTuple_GET_SIZE(row))
            goto decline;
        PyObject *keys = PyObject_GetAttr(PyTuple_GET_ITEM(row, p), s_key);
        if (keys == NULL) {
            PyErr_Clear();
            goto decline;
        }
        if (!PyTuple_CheckExact(keys) || i < 0 || i >= PyTuple_GET_SIZE(keys)) {
            Py_DECREF(keys);
            goto decline;
        }
        PyObject *k = PyTuple_Pack(1, PyTuple_GET_ITEM(keys, i));
        Py_DECREF(keys);
        if (k == NULL)
            goto fail;
        PyObject *lst = PyDict_GetItemWithError(out, k);   /* borrowed */
        if (lst == NULL) {
            if (PyErr_Occurred()) {   /* an unhashable value: the Python form says so */
                Py_DECREF(k);
                PyErr_Clear();
                goto decline;
            }
            lst = PyList_New(0);
            if (lst == NULL || PyDict_SetItem(out, k, lst) < 0) {
                Py_XDECREF(lst);
                Py_DECREF(k);
                goto fail;
            }
            Py_DECREF(lst);   /* the dict holds it */
        }
        Py_DECREF(k);
        if (PyList_Append(lst, row) < 0)
            goto fail;
    }
    return out;
decline:
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    Py_DECREF(out);
    return NULL;
}

/* The first index in [lo, hi) of the ints ts whose value is >= x (right: > x); -2 when a value is not an int. */
static Py_ssize_t bisect(PyObject *ts, long long x, Py_ssize_t lo, Py_ssize_t hi, int right) {
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        PyObject *v = PyList_GET_ITEM(ts, mid);
        if (!PyLong_CheckExact(v))
            return -2;
        int overflow;
        long long y = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return -2;
        if (right ? x < y : x <= y)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* time_groups(bykey, found, hp, size, right) -> [(row, tups[lo:hi]), ...]: join's time-window loop -- for each
 * key of found (in its order) and each of its rows, the key list's tuples in the window seen by the row's head
 * (hi: bisect_right (right) or bisect_left of the head's ts from kl.lo, lo: bisect_left of ts - size below hi);
 * rows of one head in a row share one list.  None: declined. */
static PyObject *time_groups(PyObject *self, PyObject *args) {
    PyObject *bykey, *found;
    Py_ssize_t hp;
    long long size;
    int right;
    if (!PyArg_ParseTuple(args, "O!O!nLp", &PyDict_Type, &bykey, &PyDict_Type, &found, &hp, &size, &right))
        return NULL;
    PyObject *groups = PyList_New(0), *k, *kl, *ts = NULL, *tups = NULL, *loobj = NULL, *got = NULL;
    if (groups == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    while (PyDict_Next(found, &pos, &k, &kl)) {
        PyObject *rows = PyDict_GetItemWithError(bykey, k);
        if (rows == NULL || !PyList_CheckExact(rows))
            goto decline;
        ts = PyObject_GetAttr(kl, s_ts);
        tups = ts != NULL ? PyObject_GetAttr(kl, s_tups) : NULL;
        loobj = tups != NULL ? PyObject_GetAttr(kl, s_lo) : NULL;
        if (loobj == NULL || !PyList_CheckExact(ts) || !PyList_CheckExact(tups) || !PyLong_CheckExact(loobj) ||
            PyList_GET_SIZE(ts) != PyList_GET_SIZE(tups))
            goto decline;
        Py_ssize_t first = PyLong_AsSsize_t(loobj), n = PyList_GET_SIZE(ts);
        if (first < 0 || first > n)
            goto decline;
        int have = 0;
        long long seen = 0;
        for (Py_ssize_t r = 0; r < PyList_GET_SIZE(rows); r++) {
            PyObject *row = PyList_GET_ITEM(rows, r);
            if (!PyTuple_CheckExact(row) || hp < 0 || hp >= PyTuple_GET_SIZE(row))
                goto decline;
            PyObject *hts = PyObject_GetAttr(PyTuple_GET_ITEM(row, hp), s_ts);
            if (hts == NULL || !PyLong_CheckExact(hts)) {
                Py_XDECREF(hts);
                goto decline;
            }
            int overflow;
            long long h = PyLong_AsLongLongAndOverflow(hts, &overflow);
            Py_DECREF(hts);
            if (overflow || size < 0 || h < LLONG_MIN + size)
                goto decline;
            if (!have || h != seen) {
                have = 1;
                seen = h;
                Py_CLEAR(got);
                Py_ssize_t hi = bisect(ts, h, first, n, right);
                Py_ssize_t lo = hi < 0 ? -2 : bisect(ts, h - size, first, hi, 0);
                if (hi < 0 || lo < 0)
                    goto decline;
                if (lo < hi && (got = PyList_GetSlice(tups, lo, hi)) == NULL)
                    goto fail;
            }
            if (got != NULL) {
                PyObject *g = PyTuple_Pack(2, row, got);
                if (g == NULL || PyList_Append(groups, g) < 0) {
                    Py_XDECREF(g);
                    goto fail;
                }
                Py_DECREF(g);
            }
        }
        Py_CLEAR(got);
        Py_CLEAR(ts);
        Py_CLEAR(tups);
        Py_CLEAR(loobj);
    }
    return groups;
decline:
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_AttributeError))
        goto fail;
    PyErr_Clear();
    Py_XDECREF(got);
    Py_XDECREF(ts);
    Py_XDECREF(tups);
    Py_XDECREF(loobj);
    Py_DECREF(groups);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(got);
    Py_XDECREF(ts);
    Py_XDECREF(tups);
    Py_XDECREF(loobj);
    Py_DECREF(groups);
    return NULL;
}

/* time_join(rows, p, i, table, hp, size, right) -> groups or None: by_key1, the keys found in table (a window
 * index: key -> KeyList) in the rows' order, then time_groups -- a step's whole probe of a memory window. */
static PyObject *time_join(PyObject *self, PyObject *args) {
    PyObject *rows, *table, *pi, *bykey = NULL, *found = NULL, *sub = NULL, *out = NULL;
    Py_ssize_t p, i, hp;
    long long size;
    int right;
    if (!PyArg_ParseTuple(args, "O!nnO!nLp", &PyList_Type, &rows, &p, &i, &PyDict_Type, &table, &hp, &size, &right))
        return NULL;
    if ((pi = Py_BuildValue("(Onn)", rows, p, i)) == NULL)
        return NULL;
    bykey = by_key1(self, pi);
    Py_DECREF(pi);
    if (bykey == NULL || bykey == Py_None)
        return bykey;
    if ((found = PyDict_New()) == NULL)
        goto done;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(bykey, &pos, &k, &v)) {
        PyObject *kl = PyDict_GetItemWithError(table, k);
        if (kl == NULL) {
            if (PyErr_Occurred())
                goto done;
            continue;
        }
        if (PyDict_SetItem(found, k, kl) < 0)
            goto done;
    }
    if (PyDict_GET_SIZE(found) == 0) {
        out = PyList_New(0);
        goto done;
    }
    if ((sub = Py_BuildValue("(OOnLi)", bykey, found, hp, size, right)) == NULL)
        goto done;
    out = time_groups(self, sub);
done:
    Py_XDECREF(bykey);
    Py_XDECREF(found);
    Py_XDECREF(sub);
    return out;
}


/* t.ts as a C long long.  A Tup keeps ts in a __slots__ member: its offset is read from the member descriptor once
 * per type and the slot read in place (what getattr does for it, without the type look-up); any other object, or a
 * ts that is not a plain slot, goes through getattr. */
static PyTypeObject *ts_type;
static Py_ssize_t ts_offset;   /* 0: getattr */

static int ts_of(PyObject *t, long long *out) {
    PyTypeObject *tp = Py_TYPE(t);
    if (tp != ts_type) {
        Py_ssize_t off = 0;
        if (tp->tp_getattro == PyObject_GenericGetAttr) {
            PyObject *d = _PyType_Lookup(tp, s_ts);   /* borrowed */
            if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
                PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
                if (m->type == T_OBJECT_EX)
                    off = m->offset;
            }
        }
        Py_INCREF(tp);
        Py_XSETREF(ts_type, tp);
        ts_offset = off;
    }
    PyObject *v = ts_offset ? *(PyObject **)((char *)t + ts_offset) : NULL;
    if (v != NULL) {
        *out = PyLong_AsLongLong(v);
        return *out == -1 && PyErr_Occurred() ? -1 : 0;
    }
    if ((v = PyObject_GetAttr(t, s_ts)) == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* take_below(src, end, start) -> (batch, late): HomeWindow.insert's loop (window._take_below) -- the tuples at the
 * left of the deque ``src`` while their ts is below ``end``, taken off it; those below ``start`` (arrived after their
 * epoch closed) are dropped and counted in ``late``, the others returned in order.  The deque is read with an
 * iterator, then the tuples read are popped with its bound popleft.  Why C: this runs once per input tuple of every
 * plan, at about 830 instructions a tuple in Python (issue 27). */
static PyObject *take_below(PyObject *self, PyObject *args) {
    PyObject *src, *batch = NULL, *it = NULL, *t = NULL, *pop = NULL;
    long long end, start, ts;
    Py_ssize_t late = 0, n = 0;
    if (!PyArg_ParseTuple(args, "OLL", &src, &end, &start))
        return NULL;
    if ((batch = PyList_New(0)) == NULL || (it = PyObject_GetIter(src)) == NULL)
        goto error;
    while ((t = PyIter_Next(it)) != NULL) {
        if (ts_of(t, &ts) < 0)
            goto error;
        if (ts >= end)
            break;
        n++;
        if (ts < start)
            late++;
        else if (PyList_Append(batch, t) < 0)
            goto error;
        Py_CLEAR(t);
    }
    Py_CLEAR(t);
    Py_CLEAR(it);
    if (PyErr_Occurred())
        goto error;
    if (n > 0) {
        if ((pop = PyObject_GetAttr(src, s_popleft)) == NULL)
            goto error;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *r = PyObject_CallNoArgs(pop);
            if (r == NULL)
                goto error;
            Py_DECREF(r);
        }
        Py_DECREF(pop);
    }
    return Py_BuildValue("(Nn)", batch, late);
error:
    Py_XDECREF(t);
    Py_XDECREF(it);
    Py_XDECREF(pop);
    Py_XDECREF(batch);
    return NULL;
}

static PyMethodDef methods[] = {
    {"expand", expand, METH_VARARGS, "expand(out, groups, pos): the next step's rows, appended to out"},
    {"by_key1", by_key1, METH_VARARGS, "by_key1(rows, p, i): rows by (row[p].key[i],), or None (declined)"},
    {"time_groups", time_groups, METH_VARARGS, "time_groups(bykey, found, hp, size, right): join's groups, or None"},
    {"time_join", time_join, METH_VARARGS, "time_join(rows, p, i, table, hp, size, right): a probe's groups, or None"},
    {"take_below", take_below, METH_VARARGS, "take_below(src, end, start) -> (batch, late): HomeWindow.insert's loop"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rowsc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rowsc(void) {
    if ((s_key = PyUnicode_InternFromString("key")) == NULL || (s_ts = PyUnicode_InternFromString("ts")) == NULL ||
        (s_tups = PyUnicode_InternFromString("tups")) == NULL || (s_lo = PyUnicode_InternFromString("lo")) == NULL ||
        (s_popleft = PyUnicode_InternFromString("popleft")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
