/* ember._accel: shape arithmetic of the imperative hot path, and the array addresses that
 * oneDNN's calls bind, without the interpreter.
 *
 * Mirrors the pure-Python implementation in ember/accel.py function for function, error
 * messages included (tests/test_accel.py compares both). Plain CPython C API, no state, so the
 * functions are safe to call from any thread. Shapes are tuples or lists of integers; every
 * dimension and every size fits in int64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>

#define STACK_DIMS 16

/* A growable array of int64 that lives on the stack while it is small. */
typedef struct {
    int64_t *v;
    Py_ssize_t n;
    int64_t stack[STACK_DIMS];
} Dims;

static int dims_init(Dims *d, Py_ssize_t capacity) {
    d->n = 0;
    d->v = d->stack;
    if (capacity > STACK_DIMS) {
        d->v = PyMem_New(int64_t, capacity);
        if (d->v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static void dims_free(Dims *d) {
    if (d->v != d->stack) {
        PyMem_Free(d->v);
    }
    d->v = d->stack;
}

static PyObject *tuple_of(const int64_t *v, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (t == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLongLong(v[i]);
        if (item == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

/* Product of the dimensions, -1 when it exceeds INT64_MAX (a zero wins). */
static int64_t size_or_none(const int64_t *v, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (v[i] == 0) {
            return 0;
        }
    }
    int64_t size = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (__builtin_mul_overflow(size, v[i], &size)) {
            return -1;
        }
    }
    return size;
}

static int check_sequence(PyObject *obj, const char *what) {
    if (PyTuple_Check(obj) || PyList_Check(obj)) {
        return 0;
    }
    PyObject *name = PyType_GetName(Py_TYPE(obj));
    if (name != NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple or list of integers, got %U",
                     what, name);
        Py_DECREF(name);
    }
    return -1;
}

/* Converts every item with __index__ first (a TypeError wins, as in Python), then reports the
 * first value out of range. `signed_codes` accepts any int64 (reshape targets); otherwise
 * values must be >= 0 (shapes). Fills `out`, which must be initialised by the caller. */
static int convert(PyObject *seq, const char *what, int signed_codes, Dims *out) {
    if (check_sequence(seq, what) < 0) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (dims_init(out, n) < 0) {
        return -1;
    }
    Py_ssize_t first_bad = -1;
    int bad_overflow = 0;
    for (Py_ssize_t i = 0; i < n && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(item);
        PyObject *index = PyNumber_Index(item);
        Py_DECREF(item);
        if (index == NULL) {
            return -1;
        }
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
        Py_DECREF(index);
        if (value == -1 && PyErr_Occurred()) {
            return -1;
        }
        out->v[out->n++] = value;
        if (first_bad < 0 && (overflow || (!signed_codes && value < 0))) {
            first_bad = i;
            bad_overflow = overflow;
        }
    }
    if (first_bad < 0) {
        return 0;
    }
    PyObject *value = PyNumber_Index(PySequence_Fast_GET_ITEM(seq, first_bad));
    if (value == NULL) {
        return -1;
    }
    if (signed_codes) {
        PyErr_Format(PyExc_ValueError, "%s %R: %S is out of range", what, seq, value);
    } else if (bad_overflow > 0) {
        PyErr_Format(PyExc_ValueError, "%s %R: dimension %S is too large", what, seq, value);
    } else {
        PyErr_Format(PyExc_ValueError, "%s %R: dimension %S is negative", what, seq, value);
    }
    Py_DECREF(value);
    return -1;
}

/* ---------------------------------------------------------------------------------------- */

static PyObject *broadcast_shape(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "broadcast_shape() takes 2 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    Dims lhs, rhs, out;
    lhs.v = rhs.v = out.v = NULL;
    PyObject *result = NULL;
    if (convert(args[0], "shape", 0, &lhs) < 0 || convert(args[1], "shape", 0, &rhs) < 0) {
        goto done;
    }
    Py_ssize_t ndim = lhs.n > rhs.n ? lhs.n : rhs.n;
    if (dims_init(&out, ndim) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < ndim; i++) {
        Py_ssize_t at_lhs = i - (ndim - lhs.n), at_rhs = i - (ndim - rhs.n);
        int64_t x = at_lhs >= 0 ? lhs.v[at_lhs] : 1;
        int64_t y = at_rhs >= 0 ? rhs.v[at_rhs] : 1;
        if (x == y || y == 1) {
            out.v[out.n++] = x;
        } else if (x == 1) {
            out.v[out.n++] = y;
        } else {
            PyObject *a = tuple_of(lhs.v, lhs.n), *b = tuple_of(rhs.v, rhs.n);
            if (a != NULL && b != NULL) {
                PyErr_Format(PyExc_ValueError, "shapes %R and %R cannot be broadcast "
                             "together: dimensions %lld and %lld differ and neither is 1",
                             a, b, (long long)x, (long long)y);
            }
            Py_XDECREF(a);
            Py_XDECREF(b);
            goto done;
        }
    }
    result = tuple_of(out.v, out.n);
done:
    if (lhs.v) dims_free(&lhs);
    if (rhs.v) dims_free(&rhs);
    if (out.v) dims_free(&out);
    return result;
}

static PyObject *too_many_elements(const Dims *d) {
    PyObject *t = tuple_of(d->v, d->n);
    if (t != NULL) {
        PyErr_Format(PyExc_ValueError, "shape %R has more than 2**63 - 1 elements", t);
        Py_DECREF(t);
    }
    return NULL;
}

static PyObject *shape_size(PyObject *self, PyObject *shape) {
    Dims d;
    d.v = NULL;
    PyObject *result = NULL;
    if (convert(shape, "shape", 0, &d) == 0) {
        int64_t size = size_or_none(d.v, d.n);
        result = size < 0 ? too_many_elements(&d) : PyLong_FromLongLong(size);
    }
    if (d.v) dims_free(&d);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* infer_reshape */

typedef struct {
    const Dims *src;
    const Dims *codes;
} Where;

/* Raises ValueError('reshape SRC -> TARGET: <detail>') and returns -1. */
static int reshape_error(const Where *w, const char *format, ...) {
    va_list va;
    va_start(va, format);
    PyObject *detail = PyUnicode_FromFormatV(format, va);
    va_end(va);
    PyObject *src = tuple_of(w->src->v, w->src->n);
    PyObject *codes = tuple_of(w->codes->v, w->codes->n);
    if (detail != NULL && src != NULL && codes != NULL) {
        PyErr_Format(PyExc_ValueError, "reshape %R -> %R: %U", src, codes, detail);
    }
    Py_XDECREF(detail);
    Py_XDECREF(src);
    Py_XDECREF(codes);
    return -1;
}

/* The two sizes that -4 splits `whole` into; one of them may be -1. */
static int split(const Where *w, int64_t whole, int64_t first, int64_t second, Dims *out) {
    if (first < -1 || second < -1) {
        return reshape_error(w, "-4 split sizes must be >= 0 or -1, got %lld and %lld",
                             (long long)first, (long long)second);
    }
    if (first == -1 && second == -1) {
        return reshape_error(w, "-4 split sizes cannot both be -1");
    }
    if (first == -1) {
        first = (second && whole % second == 0) ? whole / second : -1;
    } else if (second == -1) {
        second = (first && whole % first == 0) ? whole / first : -1;
    }
    int64_t pair[2] = {first, second};
    if (first < 0 || second < 0 || size_or_none(pair, 2) != whole) {
        return reshape_error(w, "split sizes %lld and %lld do not divide input dimension %lld",
                             (long long)first, (long long)second, (long long)whole);
    }
    out->v[out->n++] = first;
    out->v[out->n++] = second;
    return 0;
}

/* Applies the codes in `todo` to the dimensions `dims` (both already reversed if asked). */
static int apply_codes(const Where *w, const int64_t *dims, Py_ssize_t ndim,
                       const int64_t *todo, Py_ssize_t ncodes, int reverse, int64_t size,
                       Dims *out) {
    Py_ssize_t infer_at = -1, used = 0;
    for (Py_ssize_t i = 0; i < ncodes; i++) {
        int64_t code = todo[i];
        Py_ssize_t position = reverse ? ncodes - 1 - i : i;
        if (code > 0) {
            out->v[out->n++] = code;
            used++;
        } else if (code == 0) {
            if (used >= ndim) {
                return reshape_error(w, "0 at position %zd has no input dimension left to "
                                     "copy", position);
            }
            out->v[out->n++] = dims[used++];
        } else if (code == -1) {
            if (infer_at >= 0) {
                return reshape_error(w, "at most one dimension can be -1");
            }
            infer_at = out->n;
            out->v[out->n++] = 1;
            used++;
        } else if (code == -2) {
            for (; used < ndim; used++) {
                out->v[out->n++] = dims[used];
            }
        } else if (code == -3) {
            if (used + 1 >= ndim) {
                return reshape_error(w, "-3 at position %zd needs two input dimensions to "
                                     "merge", position);
            }
            int64_t merged = size_or_none(dims + used, 2);
            if (merged < 0) {
                return reshape_error(w, "merging %lld and %lld overflows",
                                     (long long)dims[used], (long long)dims[used + 1]);
            }
            out->v[out->n++] = merged;
            used += 2;
        } else if (code == -4) {
            if (i + 2 >= ncodes) {
                return reshape_error(w, "-4 at position %zd must be followed by two sizes",
                                     position);
            }
            if (used >= ndim) {
                return reshape_error(w, "-4 at position %zd has no input dimension left to "
                                     "split", position);
            }
            if (split(w, dims[used], todo[i + 1], todo[i + 2], out) < 0) {
                return -1;
            }
            used++;
            i += 2;
        } else {
            return reshape_error(w, "%lld at position %zd is neither a size nor a special "
                                 "code (0, -1, -2, -3, -4)", (long long)code, position);
        }
    }
    if (infer_at >= 0) {
        int64_t known = size_or_none(out->v, out->n);
        if (known <= 0 || size % known) {
            return reshape_error(w, "cannot infer the -1 dimension: the other dimensions do "
                                 "not divide the input size %lld", (long long)size);
        }
        out->v[infer_at] = size / known;
    }
    return 0;
}

static void reverse_in_place(int64_t *v, Py_ssize_t n) {
    for (Py_ssize_t i = 0, j = n - 1; i < j; i++, j--) {
        int64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static PyObject *reshape(PyObject *src_obj, PyObject *target_obj, int reverse) {
    Dims src, codes, dims, todo, out;
    src.v = codes.v = dims.v = todo.v = out.v = NULL;
    PyObject *result = NULL;
    if (convert(src_obj, "input shape", 0, &src) < 0
            || convert(target_obj, "reshape target", 1, &codes) < 0) {
        goto done;
    }
    int64_t size = size_or_none(src.v, src.n);
    if (size < 0) {
        too_many_elements(&src);
        goto done;
    }
    if (dims_init(&dims, src.n) < 0 || dims_init(&todo, codes.n) < 0
            || dims_init(&out, src.n + codes.n) < 0) {
        goto done;
    }
    memcpy(dims.v, src.v, sizeof(int64_t) * src.n);
    memcpy(todo.v, codes.v, sizeof(int64_t) * codes.n);
    if (reverse) {
        reverse_in_place(dims.v, src.n);
        reverse_in_place(todo.v, codes.n);
    }
    Where w = {&src, &codes};
    if (apply_codes(&w, dims.v, src.n, todo.v, codes.n, reverse, size, &out) < 0) {
        goto done;
    }
    if (reverse) {
        reverse_in_place(out.v, out.n);
    }
    if (size_or_none(out.v, out.n) != size) {
        PyObject *shape = tuple_of(out.v, out.n);
        if (shape != NULL) {
            reshape_error(&w, "output shape %R does not have the %lld elements of the input",
                          shape, (long long)size);
            Py_DECREF(shape);
        }
        goto done;
    }
    result = tuple_of(out.v, out.n);
done:
    if (src.v) dims_free(&src);
    if (codes.v) dims_free(&codes);
    if (dims.v) dims_free(&dims);
    if (todo.v) dims_free(&todo);
    if (out.v) dims_free(&out);
    return result;
}

static PyObject *infer_reshape(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    static const char *names[] = {"src_shape", "target", "reverse"};
    PyObject *values[3] = {NULL, NULL, Py_False};
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "infer_reshape() takes at most 3 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        values[i] = args[i];
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int slot = -1;
        for (int j = 0; j < 3; j++) {
            if (PyUnicode_CompareWithASCIIString(key, names[j]) == 0) {
                slot = j;
            }
        }
        if (slot < 0 || slot < nargs) {
            PyErr_Format(PyExc_TypeError, "infer_reshape() got %s keyword argument '%U'",
                         slot < 0 ? "an unexpected" : "a repeated", key);
            return NULL;
        }
        values[slot] = args[nargs + k];
    }
    if (values[0] == NULL || values[1] == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "infer_reshape() missing required argument 'src_shape' or 'target'");
        return NULL;
    }
    int reverse = PyObject_IsTrue(values[2]);
    if (reverse < 0) {
        return NULL;
    }
    return reshape(values[0], values[1], reverse);
}

/* ---------------------------------------------------------------------------------------- */

/* The address of the first element of an object with the buffer protocol (a NumPy array,
 * any strides): about 70 ns, against 1.6 us through __array_interface__. */
static PyObject *data_address(PyObject *self, PyObject *obj) {
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "data_address: expected an array (an object with the "
                     "buffer protocol), got %s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_STRIDES) < 0) {
        return NULL;
    }
    void *address = view.buf;
    PyBuffer_Release(&view);
    return PyLong_FromVoidPtr(address);
}

/* ---------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"broadcast_shape", (PyCFunction)(void (*)(void))broadcast_shape, METH_FASTCALL,
     "broadcast_shape(a, b) -> tuple: NumPy broadcasting of two shapes."},
    {"shape_size", shape_size, METH_O,
     "shape_size(shape) -> int: number of elements of a shape (1 for ())."},
    {"infer_reshape", (PyCFunction)(void (*)(void))infer_reshape,
     METH_FASTCALL | METH_KEYWORDS,
     "infer_reshape(src_shape, target, reverse=False) -> tuple: MXNet's Reshape with the "
     "special codes 0, -1, -2, -3, -4."},
    {"data_address", data_address, METH_O,
     "data_address(array) -> int: the address of the array's first element."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ember._accel",
    "Compiled shape arithmetic and array addresses for Ember's hot paths (see "
    "ember/accel.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__accel(void) {
    return PyModule_Create(&module);
}
