/* Fenwick-tree kernels for DJA's ordered entries (joinlib/runtime/algorithms/ordered.py).
 *
 * Why C: a DJA update names the entries whose counts changed by their position in V, so the home and
 * every replica find positions and keys at positions (O(log n) steps each) for every changed entry,
 * every epoch; in Python each step is a few bytecodes and the three operations were about a quarter
 * of an SM-S2 plan's CPU.  The tree is the 1-based Python list of ints ordered.py keeps (the number of
 * removed slots under each node), read in place; ordered.py keeps the same loops in Python as the
 * fallback.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static int tree_of(PyObject *o, Py_ssize_t *n) {
    if (!PyList_CheckExact(o)) {
        PyErr_SetString(PyExc_TypeError, "the tree must be a list of ints");
        return -1;
    }
    *n = PyList_GET_SIZE(o);
    return 0;
}

static int item(PyObject *tree, Py_ssize_t i, long long *v) {
    *v = PyLong_AsLongLong(PyList_GET_ITEM(tree, i));
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* mark(tree, slot): one more removed slot at 0-based ``slot``. */
static PyObject *mark(PyObject *self, PyObject *args) {
    PyObject *tree;
    Py_ssize_t slot, n;
    if (!PyArg_ParseTuple(args, "On", &tree, &slot) || tree_of(tree, &n) < 0)
        return NULL;
    if (slot < 0 || slot + 1 >= n) {
        PyErr_SetString(PyExc_IndexError, "slot outside the tree");
        return NULL;
    }
    for (Py_ssize_t i = slot + 1; i < n; i += i & -i) {
        long long v;
        if (item(tree, i, &v) < 0)
            return NULL;
        PyObject *w = PyLong_FromLongLong(v + 1);
        if (w == NULL)
            return NULL;
        if (PyList_SetItem(tree, i, w) < 0)   /* steals w */
            return NULL;
    }
    Py_RETURN_NONE;
}

/* The removed slots among slots 0 .. slot - 1 of a tree of n entries, in *removed; -1 with an exception. */
static int prefix(PyObject *tree, Py_ssize_t n, Py_ssize_t slot, long long *removed) {
    if (slot < 0 || slot >= n) {
        PyErr_SetString(PyExc_IndexError, "slot outside the tree");
        return -1;
    }
    *removed = 0;
    for (Py_ssize_t i = slot; i > 0; i -= i & -i) {
        long long v;
        if (item(tree, i, &v) < 0)
            return -1;
        *removed += v;
    }
    return 0;
}

/* removed_before(tree, slot) -> int: removed slots among slots 0 .. slot - 1. */
static PyObject *removed_before(PyObject *self, PyObject *args) {
    PyObject *tree;
    Py_ssize_t slot, n;
    long long removed;
    if (!PyArg_ParseTuple(args, "On", &tree, &slot) || tree_of(tree, &n) < 0 || prefix(tree, n, slot, &removed) < 0)
        return NULL;
    return PyLong_FromLongLong(removed);
}

/* positions(tree, slots) -> list[int]: per 0-based slot of ``slots``, the slot less the removed slots
 * below it (the live key's position): the positions of an epoch's changed entries in one call. */
static PyObject *positions(PyObject *self, PyObject *args) {
    PyObject *tree, *slots;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OO!", &tree, &PyList_Type, &slots) || tree_of(tree, &n) < 0)
        return NULL;
    Py_ssize_t m = PyList_GET_SIZE(slots);
    PyObject *out = PyList_New(m);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_ssize_t slot = PyLong_AsSsize_t(PyList_GET_ITEM(slots, j));
        long long removed;
        if ((slot == -1 && PyErr_Occurred()) || prefix(tree, n, slot, &removed) < 0)
            goto fail;
        PyObject *w = PyLong_FromLongLong((long long)slot - removed);
        if (w == NULL)
            goto fail;
        PyList_SET_ITEM(out, j, w);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* The 0-based slot holding the live key at 0-based ``position`` among the first ``used`` slots (the
 * caller checked that it exists); -1 with an exception set on a malformed tree. */
static Py_ssize_t find_slot(PyObject *tree, Py_ssize_t used, long long position) {
    Py_ssize_t i = 0, step = 1;
    long long rest = position + 1;
    while (step <= used)
        step <<= 1;
    for (; step; step >>= 1) {   /* the largest slot prefix holding fewer than position + 1 live keys */
        Py_ssize_t j = i + step;
        if (j <= used) {
            long long v;
            if (item(tree, j, &v) < 0)
                return -1;
            long long live = (long long)step - v;
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
    Py_ssize_t used, position, n;
    if (!PyArg_ParseTuple(args, "Onn", &tree, &used, &position) || tree_of(tree, &n) < 0)
        return NULL;
    if (used < 0 || used >= n || position < 0) {
        PyErr_SetString(PyExc_IndexError, "position or used slots outside the tree");
        return NULL;
    }
    Py_ssize_t i = find_slot(tree, used, position);
    return i < 0 ? NULL : PyLong_FromSsize_t(i);
}

/* slots_of(tree, used, positions) -> list[int]: slot_of for each of ``positions`` (one call for the
 * entries an update names). */
static PyObject *slots_of(PyObject *self, PyObject *args) {
    PyObject *tree, *positions;
    Py_ssize_t used, n;
    if (!PyArg_ParseTuple(args, "OnO!", &tree, &used, &PyList_Type, &positions) || tree_of(tree, &n) < 0)
        return NULL;
    if (used < 0 || used >= n) {
        PyErr_SetString(PyExc_IndexError, "used slots outside the tree");
        return NULL;
    }
    Py_ssize_t m = PyList_GET_SIZE(positions);
    PyObject *out = PyList_New(m);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < m; j++) {
        long long position = PyLong_AsLongLong(PyList_GET_ITEM(positions, j));
        if (position == -1 && PyErr_Occurred())
            goto fail;
        if (position < 0) {
            PyErr_SetString(PyExc_IndexError, "a position is negative");
            goto fail;
        }
        Py_ssize_t i = find_slot(tree, used, position);
        PyObject *w = i < 0 ? NULL : PyLong_FromSsize_t(i);
        if (w == NULL)
            goto fail;
        PyList_SET_ITEM(out, j, w);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"mark", mark, METH_VARARGS, "mark(tree, slot): one more removed slot"},
    {"removed_before", removed_before, METH_VARARGS, "removed_before(tree, slot) -> removed slots below slot"},
    {"positions", positions, METH_VARARGS, "positions(tree, slots) -> the live keys' positions at those slots"},
    {"slot_of", slot_of, METH_VARARGS, "slot_of(tree, used, position) -> the slot of the live key at position"},
    {"slots_of", slots_of, METH_VARARGS, "slots_of(tree, used, positions) -> slot_of of each position"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fenwickc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fenwickc(void) { return PyModule_Create(&module); }
