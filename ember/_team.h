/* The calling thread's OpenMP team for Ember's compiled kernel modules (ember/_kernels.c,
 * ember/_winograd.c): where a module is built with -fopenmp, its kernels split their work over
 * the libgomp threads that oneDNN's primitives run on, which spin for a while after each
 * primitive (GOMP_SPINCOUNT), so a kernel right after a convolution finds them awake. Ember's
 * own kernel pool (engine.parallel_for) sleeps between splits, and waking a sleeping thread
 * takes 0.1 ms and more on a virtual machine. Without OpenMP a team is the calling thread
 * alone. Included once by each module after Python.h. */
#ifndef EMBER_TEAM_H
#define EMBER_TEAM_H

#ifdef _OPENMP
#include <omp.h>
#include <sched.h>
#define TEAM_OPENMP 1
#define TEAM_THREAD() omp_get_thread_num()
#define TEAM_SIZE() omp_get_num_threads()
#else
#define TEAM_OPENMP 0
#define TEAM_THREAD() 0
#define TEAM_SIZE() 1
/* the team's omp pragmas: without OpenMP the block runs once, as thread 0 of 1 */
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#endif

#ifdef _OPENMP
/* The core this team thread last pinned itself to (-1: never). */
static __thread int pinned_core = -1;
#endif

/* With `cores` (one per team thread), team thread t > 0 pins itself to cores[t]; the caller,
 * thread 0, is the engine's to pin. */
static void team_pin(const int *cores, int t) {
#if defined(_OPENMP) && defined(__linux__)
    if (cores == NULL || t == 0) {
        return;
    }
    int core = cores[t];
    if (core >= 0 && core != pinned_core && core < CPU_SETSIZE) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(core, &set);
        if (sched_setaffinity(0, sizeof set, &set) == 0) {
            pinned_core = core;
        }
    }
#else
    (void)cores;
    (void)t;
#endif
}

/* `cores` (None or n core numbers, one for each of the n `what`) as a new array, or NULL
 * (none asked: *asked 0, or an exception set: *asked 1). */
static int *team_cores(PyObject *cores, Py_ssize_t n, const char *what, int *asked) {
    *asked = cores != Py_None;
    if (!*asked) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(cores, "cores: expected None or a sequence of core numbers");
    if (seq == NULL) {
        return NULL;
    }
    int *out = NULL;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "cores: expected one core for each of the %zd %s, "
                     "got %zd", n, what, PySequence_Fast_GET_SIZE(seq));
    } else if ((out = PyMem_Calloc((size_t)n, sizeof(int))) == NULL) {
        PyErr_NoMemory();
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            long core = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
            if (core == -1 && PyErr_Occurred()) {
                PyMem_Free(out);
                out = NULL;
                break;
            }
            if (core < 0 || core > 1 << 20) {
                PyErr_Format(PyExc_ValueError, "cores: expected core numbers >= 0, got %ld",
                             core);
                PyMem_Free(out);
                out = NULL;
                break;
            }
            out[i] = (int)core;
        }
    }
    Py_DECREF(seq);
    return out;
}

/* The team's size from a kernel's `threads` argument: 1 to 1024, or -1 with an exception. */
static inline int team_size(Py_ssize_t threads) {
    if (threads < 1 || threads > 1024) {
        PyErr_Format(PyExc_ValueError, "threads: expected 1 to 1024, got %zd", threads);
        return -1;
    }
    return (int)threads;
}

/* Part t of `parts` of the range [lo, hi): [*a, *z), as engine.parallel_for splits it. */
static inline void team_part(Py_ssize_t lo, Py_ssize_t hi, int t, int parts, Py_ssize_t *a,
                      Py_ssize_t *z) {
    *a = lo + (hi - lo) * t / parts;
    *z = lo + (hi - lo) * (t + 1) / parts;
}

#endif
