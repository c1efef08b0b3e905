/* The scheduler's loop (joinlib/runtime/lanes.py run_lanes and Lane.run), in C.
 *
 * Why C: a host runs its lanes round robin until every lane has failed since the last one that moved, so each
 * call polls every lane at least once, and most polls find nothing to do (a phase waiting for a message, a window
 * not inserted that far).  A node calls it after every batch of messages: on the demo's query about two polls in
 * three fail, and the Python loop around each poll (attribute reads, the clock, the cursor) cost more than the
 * phases' own tests; live, the polls were about a fifth of a node's CPU.  This is the same loop, reading and writing
 * the same Lane attributes, so a Lane stays a plain Python object that other code (snapshots, repr, the adaptive
 * runtime) reads as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

static PyObject *s_inbox;

/* Where a __slots__ attribute of a type lives in its instances, cached per attribute name: the loop reads a few
 * names (Lane's epoch, cursor, _n, hi, phases; Phase's fn, op, wait; a host's inbox), each almost always of one
 * type, so each name keeps the last type it was read from and that type's offset (an inline cache: one compare per
 * read).  Why: PyObject_GetAttr on a slot goes through the type's method cache and the member descriptor, a few
 * hundred instructions, and the loop reads a lane's attributes about seven times a poll (a twelfth of a run's
 * instructions on the demo's query, callgrind, issue 27); a table of (type, name) pairs scanned per read cost 3.5 %
 * of a reduction's instructions on its own.  Only a type whose getattr and setattr are the generic ones and whose
 * attribute is a plain object slot is read in place, so the read is exactly what getattr does; anything else (a
 * property, __getattr__, a subclass's override, an instance dict) takes PyObject_GetAttr as before, and a name read
 * from another type than last time looks the type up again. */
typedef struct {
    PyObject *name;      /* interned */
    PyTypeObject *type;  /* the type last read from (a strong reference), NULL: none yet */
    Py_ssize_t offset;   /* 0: not a plain slot of that type (getattr each time) */
    int settable;        /* the type's setattr is the generic one too (a frozen dataclass's is not) */
} Slot;

static Slot c_hi, c_epoch, c_cursor, c_phases, c_n, c_fn, c_op, c_wait, c_gates;

static Py_ssize_t slot_fill(Slot *c, PyTypeObject *tp) {
    Py_ssize_t off = 0;
    if (tp->tp_getattro == PyObject_GenericGetAttr) {
        PyObject *d = _PyType_Lookup(tp, c->name);   /* borrowed */
        if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
                off = m->offset;
        }
    }
    Py_INCREF(tp);
    Py_XSETREF(c->type, tp);
    c->offset = off;
    c->settable = tp->tp_setattro == PyObject_GenericSetAttr;
    return off;
}

static inline Py_ssize_t slot_offset(PyObject *o, Slot *c, int set) {
    PyTypeObject *tp = Py_TYPE(o);
    Py_ssize_t off = c->type == tp ? c->offset : slot_fill(c, tp);
    return set && !c->settable ? 0 : off;
}

/* getattr(o, name): a new reference (a plain slot read in place, see slot_offset). */
static PyObject *get_attr(PyObject *o, Slot *c) {
    Py_ssize_t off = slot_offset(o, c, 0);
    PyObject *v = off ? *(PyObject **)((char *)o + off) : NULL;
    return v != NULL ? Py_NewRef(v) : PyObject_GetAttr(o, c->name);
}

/* getattr(o, name) as a C long long (an int attribute). */
static int get_ll(PyObject *o, Slot *c, long long *out) {
    Py_ssize_t off = slot_offset(o, c, 0);
    PyObject *v = off ? *(PyObject **)((char *)o + off) : NULL;
    if (v != NULL) {   /* an unset slot (NULL) raises through getattr below */
        *out = PyLong_AsLongLong(v);
        return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    v = PyObject_GetAttr(o, c->name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int set_ll(PyObject *o, Slot *c, long long x) {
    PyObject *v = PyLong_FromLongLong(x);
    if (v == NULL)
        return -1;
    Py_ssize_t off = slot_offset(o, c, 1);
    if (off) {
        Py_XSETREF(*(PyObject **)((char *)o + off), v);
        return 0;
    }
    int r = PyObject_SetAttr(o, c->name, v);
    Py_DECREF(v);
    return r;
}

static PyObject *t_perf_counter, *t_thread_time;   /* time.perf_counter, time.thread_time: read directly */

/* perf() as a double; -1 with an exception set on error (a clock never answers -1.0).  time.perf_counter and
 * time.thread_time are read as CPython reads them (clock_gettime of CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID),
 * without the call and the float; any other clock is called. */
static double clock_now(PyObject *perf) {
    struct timespec ts;
    if (perf == t_thread_time && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    if (perf == t_perf_counter && clock_gettime(CLOCK_MONOTONIC, &ts) == 0)
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    PyObject *t = PyObject_CallNoArgs(perf);
    if (t == NULL)
        return -1.0;
    double d = PyFloat_AsDouble(t);
    Py_DECREF(t);
    return d;
}

/* A phase's time to the sensor: on_phase(site, op, seconds), or, when the sensor's hook is its totals (a dict,
 * lanes.py _hook: a TotalsSensor), totals[(site, op)] += seconds in place -- what TotalsSensor.on_phase does. */
static int report(PyObject *on_phase, PyObject *site, PyObject *op, double seconds) {
    if (PyDict_Check(on_phase)) {
        PyObject *key = PyTuple_Pack(2, site, op);
        if (key == NULL)
            return -1;
        PyObject *old = PyDict_GetItemWithError(on_phase, key);   /* borrowed; no __missing__ */
        double sum = seconds;
        if (old != NULL) {
            sum = PyFloat_AsDouble(old) + seconds;
            if (sum == -1.0 && PyErr_Occurred()) {
                Py_DECREF(key);
                return -1;
            }
        } else if (PyErr_Occurred()) {
            Py_DECREF(key);
            return -1;
        }
        PyObject *v = PyFloat_FromDouble(sum);
        int r = v == NULL ? -1 : PyDict_SetItem(on_phase, key, v);
        Py_XDECREF(v);
        Py_DECREF(key);
        return r;
    }
    PyObject *dt = PyFloat_FromDouble(seconds);
    if (dt == NULL)
        return -1;
    PyObject *argv[3] = {site, op, dt};
    PyObject *r = PyObject_Vectorcall(on_phase, argv, 3, NULL);
    Py_DECREF(dt);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Phase.wait at epoch e: 1 the phase may run (no wait, e below its start, or its message in the host's inbox), 0 its
 * message is not there, -1 on error. */
static int waited(PyObject *ph, PyObject *e) {
    PyObject *w = get_attr(ph, &c_wait), *inbox = NULL, *key = NULL, *last = NULL;
    int r = -1;
    if (w == NULL)
        return -1;
    if (w == Py_None) {
        Py_DECREF(w);
        return 1;
    }
    if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(w, 1))) {
        PyErr_SetString(PyExc_TypeError, "a phase's wait is (host, key prefix: tuple, start)");
        goto done;
    }
    int below = PyObject_RichCompareBool(e, PyTuple_GET_ITEM(w, 2), Py_LT);
    if (below != 0) {
        r = below < 0 ? -1 : 1;
        goto done;
    }
    if ((inbox = PyObject_GetAttr(PyTuple_GET_ITEM(w, 0), s_inbox)) == NULL || (last = PyTuple_Pack(1, e)) == NULL ||
        (key = PySequence_Concat(PyTuple_GET_ITEM(w, 1), last)) == NULL)
        goto done;
    r = PySequence_Contains(inbox, key);
done:
    Py_DECREF(w);
    Py_XDECREF(inbox);
    Py_XDECREF(key);
    Py_XDECREF(last);
    return r;
}

/* Phase.gates at epoch e (lanes.py shut, negated): 1 every gate is open (or one reads a value that is not an int:
 * the phase is called and tests for itself), 0 one is shut (the phase would answer False), -1 on error.  A gate's
 * value is read without a Python call: a dict's item, else the attribute. */
static int gates_open(PyObject *ph, long long e) {
    PyObject *gs = get_attr(ph, &c_gates);
    int r = -1;
    if (gs == NULL)
        return -1;
    if (!PyTuple_Check(gs)) {
        PyErr_SetString(PyExc_TypeError, "a phase's gates are a tuple");
        goto done;
    }
    r = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(gs) && r == 1; i++) {
        PyObject *g = PyTuple_GET_ITEM(gs, i), *obj, *v;
        long long mul, add, start, x;
        if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 5) {
            PyErr_SetString(PyExc_TypeError, "a gate is (obj, name, mul, add, start)");
            r = -1;
            break;
        }
        mul = PyLong_AsLongLong(PyTuple_GET_ITEM(g, 2));
        add = PyLong_AsLongLong(PyTuple_GET_ITEM(g, 3));
        start = PyLong_AsLongLong(PyTuple_GET_ITEM(g, 4));
        if (PyErr_Occurred()) {
            r = -1;
            break;
        }
        if (e < start)
            continue;
        obj = PyTuple_GET_ITEM(g, 0);
        if (PyDict_CheckExact(obj)) {
            v = PyDict_GetItemWithError(obj, PyTuple_GET_ITEM(g, 1));   /* borrowed */
            if (v == NULL) {
                if (PyErr_Occurred()) {
                    r = -1;
                    break;
                }
                x = -1;
            } else if (!PyLong_CheckExact(v)) {
                continue;
            } else if ((x = PyLong_AsLongLong(v)) == -1 && PyErr_Occurred()) {
                PyErr_Clear();   /* beyond a long long: let the phase test it */
                continue;
            }
        } else {
            if ((v = PyObject_GetAttr(obj, PyTuple_GET_ITEM(g, 1))) == NULL) {
                r = -1;
                break;
            }
            int is_int = PyLong_CheckExact(v);
            x = is_int ? PyLong_AsLongLong(v) : 0;
            Py_DECREF(v);
            if (!is_int)
                continue;
            if (x == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                continue;
            }
        }
        if (x < mul * e + add)
            r = 0;
    }
done:
    Py_DECREF(gs);
    return r;
}

/* One phase of `lane` at its cursor, the clock read at *t0 before it: 1 ran (timed from *t0, reported; *t0 the
 * clock after it, the next phase's start), 0 could not run, -1 error. */
static int run_phase(PyObject *lane, PyObject *phases, PyObject *site, PyObject *on_phase, PyObject *perf,
                     double *t0) {
    long long cursor, epoch;
    if (get_ll(lane, &c_cursor, &cursor) < 0)
        return -1;
    if (cursor < 0 || cursor >= PyList_GET_SIZE(phases)) {
        PyErr_SetString(PyExc_IndexError, "a lane's cursor is past its phases");
        return -1;
    }
    PyObject *ph = PyList_GET_ITEM(phases, cursor);
    Py_INCREF(ph);
    PyObject *fn = get_attr(ph, &c_fn), *e = NULL, *res = NULL, *op = NULL;
    int out = -1;
    double t1;
    /* fn(lane.epoch): the attribute's own int object, as the Python form passes it (no new int per poll) */
    if (fn == NULL || (e = get_attr(lane, &c_epoch)) == NULL)
        goto done;
    if (!PyLong_CheckExact(e)) {   /* anything else as get_ll reads it */
        Py_CLEAR(e);
        if (get_ll(lane, &c_epoch, &epoch) < 0 || (e = PyLong_FromLongLong(epoch)) == NULL)
            goto done;
    }
    int open = waited(ph, e);
    if (open <= 0) {   /* the message the phase waits for is not here: it would answer False */
        out = open;
        goto done;
    }
    long long ev = PyLong_AsLongLong(e);
    if (ev == -1 && PyErr_Occurred())
        goto done;
    if ((open = gates_open(ph, ev)) <= 0) {   /* a gate is shut: it would answer False too */
        out = open;
        goto done;
    }
    if ((res = PyObject_CallOneArg(fn, e)) == NULL)
        goto done;
    int truth = PyObject_IsTrue(res);
    if (truth <= 0) {
        out = truth;
        goto done;
    }
    t1 = clock_now(perf);
    if ((t1 == -1.0 && PyErr_Occurred()) || (op = get_attr(ph, &c_op)) == NULL ||
        report(on_phase, site, op, t1 - *t0) < 0)
        goto done;
    *t0 = t1;
    out = 1;
done:
    Py_DECREF(ph);
    Py_XDECREF(fn);
    Py_XDECREF(e);
    Py_XDECREF(res);
    Py_XDECREF(op);
    return out;
}

/* Lane.run: phases while they can; 1 if any ran, 0 if none, -1 on error. */
static int run_lane(PyObject *lane, PyObject *site, PyObject *on_phase, PyObject *perf) {
    PyObject *hiobj = get_attr(lane, &c_hi);
    if (hiobj == NULL)
        return -1;
    int has_hi = hiobj != Py_None;
    long long hi = has_hi ? PyLong_AsLongLong(hiobj) : 0, epoch, cursor, n;
    Py_DECREF(hiobj);
    if ((hi == -1 && PyErr_Occurred()) || get_ll(lane, &c_epoch, &epoch) < 0)
        return -1;
    if (has_hi && epoch > hi)
        return 0;
    PyObject *phases = get_attr(lane, &c_phases);
    if (phases == NULL)
        return -1;
    int moved = 0;
    if (!PyList_Check(phases)) {
        PyErr_SetString(PyExc_TypeError, "a lane's phases are a list");
        goto error;
    }
    if (get_ll(lane, &c_n, &n) < 0)
        goto error;
    /* the clock once before the first phase, then once after each that runs: its end is the next one's start */
    double t0 = clock_now(perf);
    if (t0 == -1.0 && PyErr_Occurred())
        goto error;
    for (;;) {
        int ran = run_phase(lane, phases, site, on_phase, perf, &t0);
        if (ran < 0)
            goto error;
        if (ran == 0)
            break;
        moved = 1;
        if (get_ll(lane, &c_cursor, &cursor) < 0 || set_ll(lane, &c_cursor, cursor + 1) < 0)
            goto error;
        if (cursor + 1 == n) {
            if (set_ll(lane, &c_cursor, 0) < 0 || get_ll(lane, &c_epoch, &epoch) < 0 ||
                set_ll(lane, &c_epoch, epoch + 1) < 0)
                goto error;
            if (has_hi && epoch + 1 > hi)
                break;
        }
    }
    Py_DECREF(phases);
    return moved;
error:
    Py_DECREF(phases);
    return -1;
}

/* run_lanes(lanes, site, on_phase, perf) -> bool: every lane round robin until each has failed since the last one
 * that moved (lanes.py run_lanes). */
static PyObject *run_lanes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "run_lanes(lanes: list, site, on_phase, perf)");
        return NULL;
    }
    PyObject *lanes = PySequence_Tuple(args[0]);   /* the list as it is now, whatever a phase does to it */
    if (lanes == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(lanes), i = 0, idle = 0;
    int ran = 0;
    while (idle < n - 1 || (!ran && idle < n)) {
        int r = run_lane(PyTuple_GET_ITEM(lanes, i), args[1], args[2], args[3]);
        if (r < 0) {
            Py_DECREF(lanes);
            return NULL;
        }
        if (r) {
            ran = 1;
            idle = 0;
        } else {
            idle++;
        }
        i = i + 1 < n ? i + 1 : 0;
    }
    Py_DECREF(lanes);
    return PyBool_FromLong(ran);
}

/* run_lane(lane, site, on_phase, perf) -> bool: Lane.run. */
static PyObject *run_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run_lane(lane, site, on_phase, perf)");
        return NULL;
    }
    int r = run_lane(args[0], args[1], args[2], args[3]);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyMethodDef methods[] = {
    {"run_lanes", (PyCFunction)(void (*)(void))run_lanes, METH_FASTCALL,
     "run_lanes(lanes, site, on_phase, perf) -> bool: the host's round robin (lanes.run_lanes)"},
    {"run_lane", (PyCFunction)(void (*)(void))run_one, METH_FASTCALL,
     "run_lane(lane, site, on_phase, perf) -> bool: Lane.run"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lanesc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lanesc(void) {
    Slot *caches[] = {&c_hi, &c_epoch, &c_cursor, &c_phases, &c_n, &c_fn, &c_op, &c_wait, &c_gates};
    const char *names[] = {"hi", "epoch", "cursor", "phases", "_n", "fn", "op", "wait", "gates"};
    for (size_t i = 0; i < sizeof(caches) / sizeof(caches[0]); i++)
        if ((caches[i]->name = PyUnicode_InternFromString(names[i])) == NULL)
            return NULL;
    if ((s_inbox = PyUnicode_InternFromString("inbox")) == NULL)
        return NULL;
    PyObject *time = PyImport_ImportModule("time");
    if (time == NULL)
        return NULL;
    t_perf_counter = PyObject_GetAttrString(time, "perf_counter");
    t_thread_time = PyObject_GetAttrString(time, "thread_time");
    Py_DECREF(time);
    if (t_perf_counter == NULL || t_thread_time == NULL)
        return NULL;
    return PyModule_Create(&module);
}
