/* The per-instruction-set builds of a compiled module (ember/_winograd.c, ember/_sparse.c):
 * which one runs, the dispatch to it, and the module's instruction_set() and
 * use_instruction_set() (through which ONEDNN_MAX_CPU_ISA caps the module, and tests run
 * each build the CPU has). Include once, in the module's main part, with EMBER_ISA_BUILDS 1
 * where the AVX2 and AVX-512 builds were compiled; the module defines
 * `static int supported(int level)`: whether that build exists and the CPU runs it. */
#ifndef EMBER_BUILDS_H
#define EMBER_BUILDS_H

#include <Python.h>
#include <string.h>

/* The build that runs: the widest the CPU has, or the one use_instruction_set() chose. */
enum { BASELINE, AVX2, AVX512 };
static const char *const build_names[] = {"baseline", "avx2", "avx512"};
static int build = BASELINE;

#if EMBER_ISA_BUILDS
#define DISPATCH(name, ...) (build == AVX512 ? name##_avx512(__VA_ARGS__)                      \
                             : build == AVX2 ? name##_avx2(__VA_ARGS__)                        \
                             : name##_baseline(__VA_ARGS__))
#else
#define DISPATCH(name, ...) name##_baseline(__VA_ARGS__)
#endif

static int supported(int level);

/* The widest build that runs here (the module's initial choice). */
static int widest_build(void) {
    return supported(AVX512) ? AVX512 : supported(AVX2) ? AVX2 : BASELINE;
}

static PyObject *instruction_set(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(build_names[build]);
}

static PyObject *use_instruction_set(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s:use_instruction_set", &name)) {
        return NULL;
    }
    for (int level = BASELINE; level <= AVX512; level++) {
        if (strcmp(name, build_names[level]) == 0) {
            if (!supported(level)) {
                PyErr_Format(PyExc_ValueError, "instruction set '%s': this build or CPU does "
                             "not have it; '%s' runs", name, build_names[build]);
                return NULL;
            }
            build = level;
            Py_RETURN_NONE;
        }
    }
    PyErr_Format(PyExc_ValueError, "instruction set '%s': expected 'avx512', 'avx2' or "
                 "'baseline'", name);
    return NULL;
}

#endif
