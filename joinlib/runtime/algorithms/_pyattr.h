/* The look-ups the reducer kernels (_keytablec.c, _reducerc.c) make on the Python objects they share with
 * reduce.py and keyindex.py: an attribute checked to be of the type the loops that follow assume, and a dict's
 * item with d[k]'s KeyError.  One definition, so that both kernels check and fail alike.
 *
 * Include after <Python.h> (and PY_SSIZE_T_CLEAN).
 */
#ifndef JOINLIB_PYATTR_H
#define JOINLIB_PYATTR_H

#include <Python.h>

/* getattr(o, name), checked to be an instance of type (NULL: anything); a new reference, or NULL with TypeError
 * ("<name> must be a dict, not list") or getattr's error set. */
static inline PyObject *attr(PyObject *o, PyObject *name, PyTypeObject *type) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v != NULL && type != NULL && !PyObject_TypeCheck(v, type)) {
        PyErr_Format(PyExc_TypeError, "%U must be a %s, not %.100s", name, type->tp_name, Py_TYPE(v)->tp_name);
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

/* d[k] for a dict d: a borrowed reference, or NULL with KeyError(k) (as d[k] raises it, a tuple key too) or the
 * key's hash or comparison error set. */
static inline PyObject *dict_item(PyObject *d, PyObject *k) {
    PyObject *v = PyDict_GetItemWithError(d, k);
    if (v == NULL && !PyErr_Occurred()) {
        PyObject *t = PyTuple_Pack(1, k);
        if (t != NULL) {
            PyErr_SetObject(PyExc_KeyError, t);
            Py_DECREF(t);
        }
    }
    return v;
}

#endif /* JOINLIB_PYATTR_H */
