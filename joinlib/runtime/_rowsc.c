/* The rows a step hands to the next (joinlib/runtime/instance.py Instance.output), built in C.
 *
 * Why C: a step's output is factorised, (row, tuples of the probed stream); the next step probes once per full
 * row, so each group is expanded into one row per tuple.  With ~90 matches a probe that is one new tuple per
 * intermediate result, and building them in a Python generator was the largest single cost of a node emitting
 * ~80 results per input tuple.  The rows are exactly row[:pos] + (t,) + row[pos + 1:].
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

static PyMethodDef methods[] = {
    {"expand", expand, METH_VARARGS, "expand(out, groups, pos): the next step's rows, appended to out"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rowsc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rowsc(void) {
    return PyModule_Create(&module);
}
