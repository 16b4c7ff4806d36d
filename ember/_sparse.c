/* Compiled sparse kernels (see ember/op/sparse_ops.py and ember/op/sparse_optimizer.py):
 * a float32 csr matrix (or its transpose) times a dense matrix, the wanted rows of a
 * row_sparse array, and the lazy SGD and Adam steps of the rows a row_sparse gradient stores.
 * Their work splits over the calling thread's OpenMP team (ember/_team.h): the product by rows
 * of equal numbers of stored entries, the transposed product by output rows, retain by wanted
 * rows, the updates by gradient rows. Each step rounds as NumPy's float32 calls of the same
 * step round it.
 * Indices are checked against the arrays' sizes: a bad one raises, it is never followed. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_buffers.h"
#include "_team.h"

/* Rows are read in an order the hardware cannot guess (an index per stored entry, a row per
 * gradient row): the kernels fetch the rows a few steps ahead themselves. */
#if defined(__GNUC__)
#define PREFETCH(address, write) __builtin_prefetch((address), (write), 1)
#else
#define PREFETCH(address, write) ((void)(address))
#endif
#define AHEAD 8

/* The kernels whose inner loops run along rows (the products, the optimizer steps) are built
 * three times: for the architecture's baseline (SSE2 on x86-64), for AVX2 and for AVX-512,
 * each a wrapper of one inlined body with its own target; the widest that the CPU runs is
 * chosen at import (or by use_instruction_set, as ONEDNN_MAX_CPU_ISA caps it), so the module
 * needs no -march flag. Every build rounds alike: a multiply then an add, never fused
 * (-ffp-contract=off), and square roots and quotients are exact to the rounding anyway. */
#define INLINE static inline __attribute__((always_inline))
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define HAVE_ISA_BUILDS 1
#define ISA_BUILDS(type, name, params, args)                                                  \
    static type name##_baseline params { return name args; }                                   \
    __attribute__((target("avx2"))) static type name##_avx2 params { return name args; }       \
    __attribute__((target("avx512f"))) static type name##_avx512 params { return name args; }
#else
#define HAVE_ISA_BUILDS 0
#define ISA_BUILDS(type, name, params, args)                                                  \
    static type name##_baseline params { return name args; }
#endif

#define EMBER_ISA_BUILDS HAVE_ISA_BUILDS
#include "_builds.h"

/* Whether `level`'s build exists here and the CPU runs it. */
static int supported(int level) {
#if HAVE_ISA_BUILDS
    __builtin_cpu_init();
    return level == BASELINE || (level == AVX2 && __builtin_cpu_supports("avx2"))
           || (level == AVX512 && __builtin_cpu_supports("avx512f"));
#else
    return level == BASELINE;
#endif
}

/* `obj` as a C-contiguous int64 array of at least one dimension (writable when asked), held
 * in `b`; its element count in *count. NULL with an exception naming `name` otherwise. */
static int64_t *borrow_int64_view(Buffers *b, PyObject *obj, const char *name, int writable,
                                  Py_ssize_t *count) {
    Py_buffer *view = next_view(b, name);
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (view == NULL || PyObject_GetBuffer(obj, view, flags) < 0) {
        return NULL;
    }
    b->count++;
    const char *f = view->format;
    if (f != NULL && (f[0] == '<' || f[0] == '=' || f[0] == '@')) {
        f++;
    }
    if (view->itemsize != 8 || f == NULL || (f[0] != 'q' && f[0] != 'l') || f[1] != '\0') {
        PyErr_Format(PyExc_TypeError, "%s: expected int64 indices, got buffer format '%s'",
                     name, view->format ? view->format : "B");
        return NULL;
    }
    *count = view->len / 8;
    return (int64_t *)view->buf;
}

/* `obj` as read-only int64 indices (see borrow_int64_view). */
static const int64_t *borrow_int64(Buffers *b, PyObject *obj, const char *name,
                                   Py_ssize_t *count) {
    return borrow_int64_view(b, obj, name, 0, count);
}

/* `obj` as C-contiguous float32 values, their count in *count. */
static float *borrow_values(Buffers *b, PyObject *obj, const char *name, int writable,
                            Py_ssize_t *count) {
    Py_buffer *view = borrow_float32(b, obj, name, writable);
    if (view == NULL) {
        return NULL;
    }
    *count = view->len / (Py_ssize_t)sizeof(float);
    return (float *)view->buf;
}

/* 1 if indptr (rows + 1 entries) never decreases, else 0: the kernels walk a row's entries
 * from indptr[i] to indptr[i + 1], which stays within the data only when it ascends. */
static int indptr_ascends(const int64_t *indptr, Py_ssize_t rows) {
    for (Py_ssize_t i = 0; i < rows; i++) {
        if (indptr[i] > indptr[i + 1]) {
            return 0;
        }
    }
    return 1;
}

/* First row of team part t: rows split so that each part holds about as many stored
 * entries (indptr ascending, rows + 1 entries). */
static Py_ssize_t balanced_row(const int64_t *indptr, Py_ssize_t rows, int t, int parts) {
    int64_t target = indptr[rows] / parts * t + indptr[rows] % parts * t / parts;
    Py_ssize_t lo = 0, hi = rows;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (indptr[mid] < target) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return t == 0 ? 0 : lo;
}

/* out[i] = sum over row i's entries k of data[k] * rhs[indices[k]], rows [r0, r1); 0 if
 * every index lies below k_rows, else 1 (the rows from the bad one on are left unwritten). */
INLINE int csr_rows(const float *data, const int64_t *indices, const int64_t *indptr,
                    const float *rhs, float *out, Py_ssize_t width, Py_ssize_t k_rows,
                    Py_ssize_t r0, Py_ssize_t r1) {
    for (Py_ssize_t i = r0; i < r1; i++) {
        float *o = out + i * width;
        memset(o, 0, (size_t)width * sizeof(float));
        for (int64_t k = indptr[i]; k < indptr[i + 1]; k++) {
            int64_t column = indices[k];
            if (column < 0 || column >= k_rows) {
                return 1;
            }
            if (k + AHEAD < indptr[r1]) {
                int64_t next = indices[k + AHEAD];
                if (next >= 0 && next < k_rows) {
                    PREFETCH(rhs + next * width, 0);
                }
            }
            const float v = data[k], *r = rhs + column * width;
            for (Py_ssize_t j = 0; j < width; j++) {
                o[j] += v * r[j];
            }
        }
    }
    return 0;
}

ISA_BUILDS(int, csr_rows, (const float *data, const int64_t *indices, const int64_t *indptr,
                           const float *rhs, float *out, Py_ssize_t width, Py_ssize_t k_rows,
                           Py_ssize_t r0, Py_ssize_t r1),
           (data, indices, indptr, rhs, out, width, k_rows, r0, r1))

/* csr_dot(data, indices, indptr, rhs, out, width, *, threads, cores) */
static PyObject *csr_dot(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "", "", "threads", "cores", NULL};
    PyObject *objs[5], *cores = Py_None;
    Py_ssize_t width, threads = 1, n_data, n_indices, n_ptr, n_rhs, n_out;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOn|$nO:csr_dot", keywords, &objs[0],
                                     &objs[1], &objs[2], &objs[3], &objs[4], &width, &threads,
                                     &cores)) {
        return NULL;
    }
    int parts = team_size(threads), asked = 0, *core_list = NULL;
    if (parts < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    const float *data = borrow_values(&b, objs[0], "data", 0, &n_data);
    const int64_t *indices = data ? borrow_int64(&b, objs[1], "indices", &n_indices) : NULL;
    const int64_t *indptr = indices ? borrow_int64(&b, objs[2], "indptr", &n_ptr) : NULL;
    const float *rhs = indptr ? borrow_values(&b, objs[3], "rhs", 0, &n_rhs) : NULL;
    float *out = rhs ? borrow_values(&b, objs[4], "out", 1, &n_out) : NULL;
    Py_ssize_t rows = out ? n_ptr - 1 : 0;
    if (out != NULL && (width < 1 || rows < 0 || n_data != n_indices || n_rhs % width
                        || n_out != rows * width || indptr[0] != 0 || indptr[rows] != n_data
                        || !indptr_ascends(indptr, rows))) {
        PyErr_SetString(PyExc_ValueError, "csr_dot: the parts, rhs and out do not fit together");
        out = NULL;
    }
    if (out == NULL || ((core_list = team_cores(cores, parts, "threads", &asked)) == NULL
                        && asked)) {
        release_all(&b);
        return NULL;
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1) reduction(| : bad)
    {
        int t = TEAM_THREAD(), size = TEAM_SIZE();
        team_pin(core_list, t);
        bad |= DISPATCH(csr_rows, data, indices, indptr, rhs, out, width, n_rhs / width,
                        balanced_row(indptr, rows, t, size),
                        t + 1 == size ? rows : balanced_row(indptr, rows, t + 1, size));
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "csr_dot: a column index is out of range for rhs");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * csr^T x dense at the stored columns: each stored column c becomes row remap[c] of the
 * output, in ascending order of c, so the product never transposes the csr. */

/* mark_columns(indices, columns, remap): the distinct values of `indices` (each below
 * len(remap)) written ascending to `columns`, their count returned; remap[c] = the position of
 * stored column c among them (the other entries of remap are left as they were). A byte per
 * column marks the stored ones, so the cost is the entries plus the columns. */
static PyObject *mark_columns(PyObject *self, PyObject *args) {
    PyObject *objs[3];
    Py_ssize_t n_indices, n_columns, width;
    if (!PyArg_ParseTuple(args, "OOO:mark_columns", &objs[0], &objs[1], &objs[2])) {
        return NULL;
    }
    Buffers b = {.count = 0};
    const int64_t *indices = borrow_int64(&b, objs[0], "indices", &n_indices);
    int64_t *columns = indices ? borrow_int64_view(&b, objs[1], "columns", 1, &n_columns)
                               : NULL;
    int64_t *remap = columns ? borrow_int64_view(&b, objs[2], "remap", 1, &width) : NULL;
    unsigned char *seen = remap ? PyMem_Calloc((size_t)width + 1, 1) : NULL;
    if (remap != NULL && seen == NULL) {
        PyErr_NoMemory();
    }
    Py_ssize_t count = -1, bad = -1;
    if (seen != NULL) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n_indices && bad < 0; k++) {
            if ((uint64_t)indices[k] >= (uint64_t)width) {
                bad = k;
            } else {
                seen[indices[k]] = 1;
            }
        }
        count = 0;
        for (Py_ssize_t c = 0; bad < 0 && c < width; c++) {
            if (seen[c]) {
                if (count == n_columns) {
                    bad = -2;
                    break;
                }
                remap[c] = count;
                columns[count++] = c;
            }
        }
        Py_END_ALLOW_THREADS
        if (bad >= 0) {
            PyErr_Format(PyExc_ValueError, "mark_columns: column index %lld is out of range "
                         "for %zd columns", (long long)indices[bad], width);
        } else if (bad == -2) {
            PyErr_Format(PyExc_ValueError, "mark_columns: columns holds %zd values, fewer than "
                         "the stored columns", n_columns);
        }
    }
    PyMem_Free(seen);
    release_all(&b);
    return seen == NULL || bad != -1 ? NULL : PyLong_FromSsize_t(count);
}

/* The output's rows are taken in blocks of about BLOCK_BYTES, small enough to stay in a core's
 * L2 cache while their terms are added. For each block, each csr row adds the run of its
 * entries whose columns map into the block: a run, since a row's columns ascend and remap
 * keeps their order. So the rows of rhs are read in order, each output row sums its terms in
 * the csr's row order, and no transposed copy is made; adding each entry into an output of
 * many megabytes directly costs a cache miss per entry. */
#define BLOCK_BYTES (512 * 1024)

typedef struct {
    const float *data, *rhs;
    const int64_t *indices, *indptr, *remap;
    float *out;
    Py_ssize_t rows, n_remap, out_rows, width, block_rows;
} Transposed;

/* The first entry of row i whose output row is `at` or more, the row's output rows ascending
 * (an index out of range of remap counts as past every row: the walk reports it). */
static int64_t first_at_or_after(const Transposed *p, Py_ssize_t i, Py_ssize_t at) {
    int64_t lo = p->indptr[i], hi = p->indptr[i + 1];
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2, column = p->indices[mid];
        if ((uint64_t)column < (uint64_t)p->n_remap && p->remap[column] < at) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* Output rows [lo, hi) of csr^T x rhs, the entries of row i walked from start[i] to end[i]
 * (start is advanced as they are added). 0, or 1 where an index is out of range of remap, a
 * row's columns descend, or one maps outside [lo, hi): the entries of each row split over the
 * team by the same searches, each entry is added by one thread exactly, into its own rows. */
INLINE int transposed_part(const Transposed *p, int64_t *start, int64_t *end, Py_ssize_t lo,
                           Py_ssize_t hi) {
    const Py_ssize_t width = p->width;
    for (Py_ssize_t i = 0; i < p->rows; i++) {
        start[i] = lo == 0 ? p->indptr[i] : first_at_or_after(p, i, lo);
        end[i] = hi == p->out_rows ? p->indptr[i + 1] : first_at_or_after(p, i, hi);
    }
    for (Py_ssize_t block = lo; block < hi; block += p->block_rows) {
        const Py_ssize_t block_end = block + p->block_rows < hi ? block + p->block_rows : hi;
        memset(p->out + block * width, 0, (size_t)((block_end - block) * width) * sizeof(float));
        for (Py_ssize_t i = 0; i < p->rows; i++) {
            if (i + AHEAD < p->rows) {
                PREFETCH(p->indices + start[i + AHEAD], 0);
                PREFETCH(p->data + start[i + AHEAD], 0);
                PREFETCH(p->rhs + (i + AHEAD) * width, 0);
            }
            int64_t k = start[i];
            int64_t previous = k > p->indptr[i] ? p->indices[k - 1] : -1;
            const float *r = p->rhs + i * width;
            for (; k < end[i]; k++) {
                const int64_t column = p->indices[k];
                if (column < previous || (uint64_t)column >= (uint64_t)p->n_remap) {
                    return 1;
                }
                const int64_t at = p->remap[column];
                if (at >= block_end) {
                    break;
                }
                if (at < block) {
                    return 1;
                }
                const float v = p->data[k];
                float *o = p->out + at * width;
                for (Py_ssize_t j = 0; j < width; j++) {
                    o[j] += v * r[j];
                }
                previous = column;
            }
            start[i] = k;
        }
    }
    for (Py_ssize_t i = 0; i < p->rows; i++) {
        if (start[i] != end[i]) {
            return 1;               /* entries mapped past hi: in another thread's rows */
        }
    }
    return 0;
}

ISA_BUILDS(int, transposed_part, (const Transposed *p, int64_t *start, int64_t *end,
                                  Py_ssize_t lo, Py_ssize_t hi), (p, start, end, lo, hi))

/* csr_t_dot(data, indices, indptr, rhs, remap, out, width, *, threads, cores) */
static PyObject *csr_t_dot(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "", "", "", "threads", "cores", NULL};
    PyObject *objs[6], *cores = Py_None;
    Py_ssize_t width, threads = 1, n_data, n_indices, n_ptr, n_rhs, n_out;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOn|$nO:csr_t_dot", keywords,
                                     &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                                     &objs[5], &width, &threads, &cores)) {
        return NULL;
    }
    int parts = team_size(threads), asked = 0, *core_list = NULL;
    if (parts < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    Transposed p = {.width = width};
    p.data = borrow_values(&b, objs[0], "data", 0, &n_data);
    p.indices = p.data ? borrow_int64(&b, objs[1], "indices", &n_indices) : NULL;
    p.indptr = p.indices ? borrow_int64(&b, objs[2], "indptr", &n_ptr) : NULL;
    p.rhs = p.indptr ? borrow_values(&b, objs[3], "rhs", 0, &n_rhs) : NULL;
    p.remap = p.rhs ? borrow_int64(&b, objs[4], "remap", &p.n_remap) : NULL;
    p.out = p.remap ? borrow_values(&b, objs[5], "out", 1, &n_out) : NULL;
    p.rows = p.out ? n_ptr - 1 : 0;
    p.out_rows = p.out && width > 0 ? n_out / width : 0;
    p.block_rows = width > 0 && BLOCK_BYTES / width / 4 > 0 ? BLOCK_BYTES / width / 4 : 1;
    if (p.out != NULL && (width < 1 || p.rows < 0 || n_data != n_indices
                          || n_rhs != p.rows * width || n_out % width || p.indptr[0] != 0
                          || p.indptr[p.rows] != n_data || !indptr_ascends(p.indptr, p.rows))) {
        PyErr_SetString(PyExc_ValueError, "csr_t_dot: the parts, rhs and out do not fit "
                        "together");
        p.out = NULL;
    }
    /* each thread's start and end entry of every row */
    int64_t *bounds = p.out ? PyMem_Malloc((size_t)(2 * parts * p.rows + 1) * sizeof(int64_t))
                            : NULL;
    if (p.out != NULL && bounds == NULL) {
        PyErr_NoMemory();
    }
    if (bounds == NULL || ((core_list = team_cores(cores, parts, "threads", &asked)) == NULL
                           && asked)) {
        PyMem_Free(bounds);
        release_all(&b);
        return NULL;
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1) reduction(| : bad)
    {
        int t = TEAM_THREAD();
        Py_ssize_t lo, hi;
        int64_t *start = bounds + 2 * t * p.rows;
        team_pin(core_list, t);
        team_part(0, p.out_rows, t, TEAM_SIZE(), &lo, &hi);
        bad |= DISPATCH(transposed_part, &p, start, start + p.rows, lo, hi);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    PyMem_Free(bounds);
    release_all(&b);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "csr_t_dot: a column index is out of range for remap "
                        "or remaps outside out, or a row's columns descend");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * retain: the wanted rows of a row_sparse array, both index lists ascending. */

/* The first position at or after `from` whose stored index is >= `want`: a galloping search
 * (steps doubling from `from`, then halving), so a walk over ascending wanted indices costs
 * the log of the gaps between them rather than a full search each. */
static Py_ssize_t gallop(const int64_t *stored, Py_ssize_t n, Py_ssize_t from, int64_t want) {
    Py_ssize_t lo = from, step = 1;
    while (lo + step < n && stored[lo + step] < want) {
        lo += step;
        step *= 2;
    }
    Py_ssize_t hi = lo + step < n ? lo + step : n;
    if (lo < n && stored[lo] >= want) {
        return lo;
    }
    while (lo + 1 < hi) {          /* stored[lo] < want <= stored[hi] (or hi = n) */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (stored[mid] < want) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return hi;
}

/* Rows wanted[from:to] of the output: the stored row's values, or zeros. */
static void retain_part(const int64_t *stored, Py_ssize_t n_stored, const float *data,
                        const int64_t *wanted, Py_ssize_t from, Py_ssize_t to, float *out,
                        Py_ssize_t width) {
    Py_ssize_t at = from < to ? gallop(stored, n_stored, 0, wanted[from]) : 0;
    for (Py_ssize_t k = from; k < to; k++) {
        at = gallop(stored, n_stored, at, wanted[k]);
        float *o = out + k * width;
        if (at < n_stored && stored[at] == wanted[k]) {
            memcpy(o, data + at * width, (size_t)width * sizeof(float));
        } else {
            memset(o, 0, (size_t)width * sizeof(float));
        }
    }
}

/* retain_rows(stored, data, wanted, out, width, rows, *, threads, cores) */
static PyObject *retain_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "", "", "threads", "cores", NULL};
    PyObject *objs[4], *cores = Py_None;
    Py_ssize_t width, rows, threads = 1, n_stored, n_data, n_wanted, n_out;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOnn|$nO:retain_rows", keywords,
                                     &objs[0], &objs[1], &objs[2], &objs[3], &width, &rows,
                                     &threads, &cores)) {
        return NULL;
    }
    int parts = team_size(threads), asked = 0, *core_list = NULL;
    if (parts < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    const int64_t *stored = borrow_int64(&b, objs[0], "stored", &n_stored);
    const float *data = stored ? borrow_values(&b, objs[1], "data", 0, &n_data) : NULL;
    const int64_t *wanted = data ? borrow_int64(&b, objs[2], "wanted", &n_wanted) : NULL;
    float *out = wanted ? borrow_values(&b, objs[3], "out", 1, &n_out) : NULL;
    if (out != NULL && (width < 1 || n_data != n_stored * width || n_out != n_wanted * width)) {
        PyErr_SetString(PyExc_ValueError, "retain_rows: stored, data, wanted and out do not "
                        "fit together");
        out = NULL;
    }
    for (Py_ssize_t k = 0; out != NULL && k < n_wanted; k++) {
        if (wanted[k] < 0 || wanted[k] >= rows || (k && wanted[k] <= wanted[k - 1])) {
            PyErr_Format(PyExc_ValueError, "retain_rows: wanted[%zd] = %lld: expected "
                         "ascending distinct indices below %zd", k, (long long)wanted[k], rows);
            out = NULL;
        }
    }
    if (out == NULL || ((core_list = team_cores(cores, parts, "threads", &asked)) == NULL
                        && asked)) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1)
    {
        int t = TEAM_THREAD();
        Py_ssize_t from, to;
        team_pin(core_list, t);
        team_part(0, n_wanted, t, TEAM_SIZE(), &from, &to);
        retain_part(stored, n_stored, data, wanted, from, to, out, width);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * Lazy updates: row k of the gradient steps row rows[k] of the weight and states. */

typedef struct {
    float lr, wd, rescale, clip, momentum, beta1, beta2, one_beta1, one_beta2, epsilon, decay;
} Step;

INLINE float clipped(float g, float bound) {
    if (bound >= 0) {
        g = g < -bound ? -bound : (g > bound ? bound : g);
    }
    return g;
}

/* sgd: w = (1 - lr*wd) * w - lr * clip(rescale * g) */
INLINE void sgd_row(float *w, const float *g, Py_ssize_t n, const Step *s) {
    for (Py_ssize_t j = 0; j < n; j++) {
        w[j] = s->decay * w[j] - s->lr * clipped(s->rescale * g[j], s->clip);
    }
}

/* sgd with momentum: mom = momentum*mom - (lr*wd)*w - lr*clip(rescale*g); w = w + mom */
INLINE void sgd_mom_row(float *w, const float *g, float *mom, Py_ssize_t n, const Step *s) {
    for (Py_ssize_t j = 0; j < n; j++) {
        float step = clipped(s->rescale * g[j], s->clip) * s->lr;
        float m = mom[j] * s->momentum;
        m -= s->wd * w[j];               /* s->wd holds lr * wd for this step */
        m -= step;
        mom[j] = m;
        w[j] = w[j] + m;
    }
}

/* adam: g = clip(rescale*g + wd*w); mean, var decayed; w -= lr * mean / (sqrt(var) + eps) */
INLINE void adam_row(float *w, const float *g, float *mean, float *var, Py_ssize_t n,
                     const Step *s) {
    for (Py_ssize_t j = 0; j < n; j++) {
        float grad = clipped(s->rescale * g[j] + s->wd * w[j], s->clip);
        float m = s->beta1 * mean[j] + s->one_beta1 * grad;
        float v = s->beta2 * var[j] + s->one_beta2 * grad * grad;
        mean[j] = m;
        var[j] = v;
        w[j] = w[j] - s->lr * m / (sqrtf(v) + s->epsilon);
    }
}

enum { SGD, SGD_MOM, ADAM };

/* Gradient rows [from, to) step their weight and state rows, each fetched a few rows ahead
 * (every cache line of it: the rows are far apart). */
INLINE int update_rows(int kind, float *weight, const float *grad, const int64_t *rows,
                       float *const *states, Py_ssize_t width, Py_ssize_t from, Py_ssize_t to,
                       const Step *s) {
    const int want_states = kind == ADAM ? 2 : (kind == SGD_MOM ? 1 : 0);
    for (Py_ssize_t k = from; k < to; k++) {
        Py_ssize_t at = (Py_ssize_t)rows[k] * width;
        const float *g = grad + k * width;
        if (k + AHEAD < to) {
            Py_ssize_t ahead = (Py_ssize_t)rows[k + AHEAD] * width;
            for (Py_ssize_t j = 0; j < width; j += 64 / (Py_ssize_t)sizeof(float)) {
                PREFETCH(weight + ahead + j, 1);
                for (int state = 0; state < want_states; state++) {
                    PREFETCH(states[state] + ahead + j, 1);
                }
            }
        }
        if (kind == SGD) {
            sgd_row(weight + at, g, width, s);
        } else if (kind == SGD_MOM) {
            sgd_mom_row(weight + at, g, states[0] + at, width, s);
        } else {
            adam_row(weight + at, g, states[0] + at, states[1] + at, width, s);
        }
    }
    return 0;
}

ISA_BUILDS(int, update_rows, (int kind, float *weight, const float *grad, const int64_t *rows,
                              float *const *states, Py_ssize_t width, Py_ssize_t from,
                              Py_ssize_t to, const Step *s),
           (kind, weight, grad, rows, states, width, from, to, s))

/* lazy_update(kind, weight, grad, rows, states, lr, wd, rescale, clip, momentum, beta1,
 *             beta2, epsilon, *, threads, cores) */
static PyObject *lazy_update(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "", "", "", "", "", "", "", "", "", "threads",
                               "cores", NULL};
    PyObject *objs[4], *cores = Py_None;
    int kind;
    double lr, wd, rescale, clip, momentum, beta1, beta2, epsilon;
    Py_ssize_t threads = 1, n_w, n_g, n_rows, n_s[2] = {0, 0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOOOdddddddd|$nO:lazy_update", keywords,
                                     &kind, &objs[0], &objs[1], &objs[2], &objs[3], &lr, &wd,
                                     &rescale, &clip, &momentum, &beta1, &beta2, &epsilon,
                                     &threads, &cores)) {
        return NULL;
    }
    int parts = team_size(threads), asked = 0, *core_list = NULL;
    int want_states = kind == ADAM ? 2 : (kind == SGD_MOM ? 1 : 0);
    if (parts < 0) {
        return NULL;
    }
    if (kind < SGD || kind > ADAM || !PyTuple_Check(objs[3])
        || PyTuple_GET_SIZE(objs[3]) != want_states) {
        PyErr_SetString(PyExc_ValueError, "lazy_update: kind 0 (sgd), 1 (sgd_mom) or 2 (adam) "
                        "with a tuple of 0, 1 or 2 states");
        return NULL;
    }
    Buffers b = {.count = 0};
    float *weight = borrow_values(&b, objs[0], "weight", 1, &n_w);
    const float *grad = weight ? borrow_values(&b, objs[1], "grad", 0, &n_g) : NULL;
    const int64_t *rows = grad ? borrow_int64(&b, objs[2], "rows", &n_rows) : NULL;
    float *states[2] = {NULL, NULL};
    int ok = rows != NULL;
    for (int k = 0; ok && k < want_states; k++) {
        ok = (states[k] = borrow_values(&b, PyTuple_GET_ITEM(objs[3], k), "state", 1,
                                        &n_s[k])) != NULL;
    }
    Py_ssize_t width = ok && n_rows ? n_g / n_rows : 1;
    if (ok && (n_g != n_rows * width || width < 1 || n_w % width
               || (want_states && n_s[0] != n_w) || (want_states > 1 && n_s[1] != n_w))) {
        PyErr_SetString(PyExc_ValueError, "lazy_update: weight, grad, rows and states do not "
                        "fit together");
        ok = 0;
    }
    for (Py_ssize_t k = 0; ok && k < n_rows; k++) {
        if (rows[k] < 0 || rows[k] >= n_w / width) {
            PyErr_Format(PyExc_ValueError, "lazy_update: row %lld is out of range for %zd rows",
                         (long long)rows[k], n_w / width);
            ok = 0;
        }
    }
    if (!ok || ((core_list = team_cores(cores, parts, "threads", &asked)) == NULL && asked)) {
        release_all(&b);
        return NULL;
    }
    Step s = {(float)lr, (float)(kind == SGD_MOM ? lr * wd : wd), (float)rescale, (float)clip,
              (float)momentum, (float)beta1, (float)beta2, (float)(1 - beta1),
              (float)(1 - beta2), (float)epsilon, (float)(1 - lr * wd)};
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1)
    {
        int t = TEAM_THREAD();
        Py_ssize_t from, to;
        team_pin(core_list, t);
        team_part(0, n_rows, t, TEAM_SIZE(), &from, &to);
        DISPATCH(update_rows, kind, weight, grad, rows, states, width, from, to, &s);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    Py_RETURN_NONE;
}

#define TEAM_DOC                                                                               \
    " threads, cores (keyword-only): the work split into `threads` parts run on the calling " \
    "thread's OpenMP team (one after the other without OpenMP: `openmp` false); with cores, " \
    "team thread t > 0 first pins itself to cores[t]."

static PyMethodDef methods[] = {
    {"csr_dot", (PyCFunction)(void (*)(void))csr_dot, METH_VARARGS | METH_KEYWORDS,
     "csr_dot(data, indices, indptr, rhs, out, width, *, threads=1, cores=None): out = the "
     "float32 csr (data, indices, indptr: int64) times rhs, a C-contiguous float32 matrix of "
     "`width` columns; out has rows x width values. The team splits the rows by stored "
     "entries." TEAM_DOC},
    {"lazy_update", (PyCFunction)(void (*)(void))lazy_update, METH_VARARGS | METH_KEYWORDS,
     "lazy_update(kind, weight, grad, rows, states, lr, wd, rescale, clip, momentum, beta1, "
     "beta2, epsilon, *, threads=1, cores=None): kind 0 sgd, 1 sgd with momentum (states: "
     "(mom,)), 2 adam (states: (mean, var)); row k of grad steps row rows[k] of weight and "
     "states (float32, C-contiguous, rows of grad's width) in place; clip < 0: none. The team "
     "splits the rows." TEAM_DOC},
    {"mark_columns", (PyCFunction)mark_columns, METH_VARARGS,
     "mark_columns(indices, columns, remap) -> count: the distinct values of the int64 "
     "`indices` (each below len(remap)) written ascending to columns[:count], and remap[c] = "
     "the position of stored column c among them (other entries untouched)."},
    {"csr_t_dot", (PyCFunction)(void (*)(void))csr_t_dot, METH_VARARGS | METH_KEYWORDS,
     "csr_t_dot(data, indices, indptr, rhs, remap, out, width, *, threads=1, cores=None): "
     "out = the float32 csr's transpose times rhs (a C-contiguous float32 matrix of the csr's "
     "rows x `width`), column c of the csr giving row remap[c] of out (rows not named stay "
     "zero). The team splits the rows of out; each thread walks every entry." TEAM_DOC},
    {"retain_rows", (PyCFunction)(void (*)(void))retain_rows, METH_VARARGS | METH_KEYWORDS,
     "retain_rows(stored, data, wanted, out, width, rows, *, threads=1, cores=None): row k of "
     "out = the row of data (float32, `width` values a row) whose index in `stored` (int64, "
     "ascending) is wanted[k], or zeros where none is; `wanted` must ascend strictly and lie "
     "below `rows`. The team splits the wanted rows." TEAM_DOC},
    {"instruction_set", instruction_set, METH_NOARGS,
     "The build that runs csr_dot, csr_t_dot and lazy_update: 'avx512', 'avx2' or "
     "'baseline'."},
    {"use_instruction_set", use_instruction_set, METH_VARARGS,
     "use_instruction_set('avx512', 'avx2' or 'baseline'): the build that runs from now on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ember._sparse",
    "Compiled sparse kernels: csr x dense, csr^T x dense, retain of row_sparse rows, and the "
    "lazy SGD and Adam updates (see "
    "ember/op/sparse_ops.py and ember/op/sparse_optimizer.py).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__sparse(void) {
    build = widest_build();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "openmp", TEAM_OPENMP) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
