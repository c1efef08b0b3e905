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

/* removed_before(tree, slot) -> int: removed slots among slots 0 .. slot - 1. */
static PyObject *removed_before(PyObject *self, PyObject *args) {
    PyObject *tree;
    Py_ssize_t slot, n;
    if (!PyArg_ParseTuple(args, "On", &tree, &slot) || tree_of(tree, &n) < 0)
        return NULL;
    if (slot < 0 || slot >= n) {
        PyErr_SetString(PyExc_IndexError, "slot outside the tree");
        return NULL;
    }
    long long removed = 0;
    for (Py_ssize_t i = slot; i > 0; i -= i & -i) {
        long long v;
        if (item(tree, i, &v) < 0)
            return NULL;
        removed += v;
    }
    return PyLong_FromLongLong(removed);
}

/* slot_of(tree, used, position) -> int: the 0-based slot holding the live key at 0-based ``position``
 * among the first ``used`` slots (the caller checked that it exists). */
static PyObject *slot_of(PyObject *self, PyObject *args) {
    PyObject *tree;
    Py_ssize_t used, position, n;
    if (!PyArg_ParseTuple(args, "Onn", &tree, &used, &position) || tree_of(tree, &n) < 0)
        return NULL;
    if (used < 0 || used >= n || position < 0) {
        PyErr_SetString(PyExc_IndexError, "position or used slots outside the tree");
        return NULL;
    }
    Py_ssize_t i = 0, step = 1;
    long long rest = (long long)position + 1;
    while (step <= used)
        step <<= 1;
    for (; step; step >>= 1) {   /* the largest slot prefix holding fewer than position + 1 live keys */
        Py_ssize_t j = i + step;
        if (j <= used) {
            long long v;
            if (item(tree, j, &v) < 0)
                return NULL;
            long long live = (long long)step - v;
            if (live < rest) {
                i = j;
                rest -= live;
            }
        }
    }
    return PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"mark", mark, METH_VARARGS, "mark(tree, slot): one more removed slot"},
    {"removed_before", removed_before, METH_VARARGS, "removed_before(tree, slot) -> removed slots below slot"},
    {"slot_of", slot_of, METH_VARARGS, "slot_of(tree, used, position) -> the slot of the live key at position"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fenwickc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fenwickc(void) { return PyModule_Create(&module); }
