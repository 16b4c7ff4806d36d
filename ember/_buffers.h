/* Buffer arguments of Ember's compiled kernel modules (ember/_kernels.c, ember/_winograd.c):
 * the views a call holds, released together, and borrowing one as float32. Included once by each
 * module after Python.h. */
#ifndef EMBER_BUFFERS_H
#define EMBER_BUFFERS_H

/* The most arrays one call takes (bn_data_grad with a mask: 9). */
#define MAX_BUFFERS 12

typedef struct {
    Py_buffer views[MAX_BUFFERS];
    int count;
} Buffers;

static void release_all(Buffers *b) {
    for (int i = 0; i < b->count; i++) {
        PyBuffer_Release(&b->views[i]);
    }
    b->count = 0;
}

static int is_float32(const Py_buffer *view) {
    const char *f = view->format;
    if (f != NULL && (f[0] == '<' || f[0] == '=' || f[0] == '@')) {
        f++;
    }
    return view->itemsize == 4 && f != NULL && f[0] == 'f' && f[1] == '\0';
}

/* The next free view of `b`; NULL with an exception when the call holds MAX_BUFFERS already. */
static Py_buffer *next_view(Buffers *b, const char *name) {
    if (b->count == MAX_BUFFERS) {
        PyErr_Format(PyExc_SystemError, "%s: a kernel call holds at most %d arrays", name,
                     MAX_BUFFERS);
        return NULL;
    }
    return &b->views[b->count];
}

/* `obj`'s memory as a float32 view of the buffer `flags` ask for (with PyBUF_FORMAT), held in
 * `b` until release_all; NULL with an exception naming `name` otherwise. */
static Py_buffer *borrow_float32_view(Buffers *b, PyObject *obj, const char *name, int flags) {
    Py_buffer *view = next_view(b, name);
    if (view == NULL) {
        return NULL;
    }
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        /* the exporter's message ("ndarray is not C-contiguous") with the argument's name */
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        PyErr_NormalizeException(&type, &value, &trace);
        if (type != NULL && value != NULL) {
            PyErr_Format(type, "%s: %S", name, value);
        } else {
            PyErr_Restore(type, value, trace);
            type = value = trace = NULL;
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(trace);
        return NULL;
    }
    b->count++;
    if (!is_float32(view)) {
        PyErr_Format(PyExc_TypeError, "%s: expected float32 values, got buffer format '%s'",
                     name, view->format ? view->format : "B");
        return NULL;
    }
    return view;
}

/* `obj`'s memory as a C-contiguous float32 view, held in `b` until release_all (writable
 * when asked); NULL with an exception naming `name` otherwise. */
static Py_buffer *borrow_float32(Buffers *b, PyObject *obj, const char *name, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    return borrow_float32_view(b, obj, name, flags);
}

#endif
