/* ember._winograd: Winograd F(4x4, 3x3) convolution of channel-last float32 data.
 *
 * The output is cut into 4x4 tiles; tile (sample, r, c) covers output rows 4r..4r+3 and
 * columns 4c..4c+3 and reads the 6x6 input patch from row 4r - pad_top, column 4c - pad_left.
 * Tiles are numbered sample by sample, row by row. convolve() runs the tiles [tile_lo,
 * tile_hi) and the filters [f_lo, f_hi) in chunks of `chunk` tiles, each chunk in three steps
 * whose data stays in the core's cache:
 *
 *   input:   V = B^T d B of each tile, tile-position-major: V[p][t][c] for the 36 positions
 *            p. Patch pixels outside the input read as zeros (the padding); no padded copy.
 *   product: M[p] = V[p] U[p], 36 GEMMs (tiles x C) @ (C x F), U = G g G^T packed in panels
 *            of 16 filters (transform_weights()); 6 tiles x 16 filters in registers, summed
 *            over all channels, per step.
 *   output:  Y = A^T M A of each tile, plus bias, plus residual, then relu, scattered to NHWC;
 *            outputs past the bottom or right edge are dropped.
 *
 * weight_gradient() runs the weight gradient of the same convolution in the Winograd domain:
 * per chunk, V of the input tiles as above and A dY A^T of the output gradient's tiles, then
 * dU[p] += V[p]^T (A dY A^T)[p], the sum over the chunk's tiles (6 channels x 16 filters in
 * registers); finish_gradient() returns dU to 3x3 as G^T dU G. pointwise_gradient() runs the
 * same sums on the rows of dy and x themselves: the weight gradient of a 1x1 convolution.
 *
 * line() runs a 1-D Winograd F(m, r) along one axis, for 1 x r and r x 1 kernels: tiles of m
 * outputs along the axis, each reading a = m + r - 1 input points, in the same three steps
 * per chunk with the transforms given as dense matrices (B^T, A^T) and U = G g packed as
 * convolve()'s U with a positions in place of 36; the products are the same code.
 *
 * The GIL is released throughout, so kernel threads run disjoint tile or filter ranges. With
 * a shared counter (`claim`), convolve()'s threads instead take the next chunk of tiles, or
 * the next group of filter panels of a chunk, from it as they go: a thread that starts late (woken
 * 0.1 ms after the caller on a virtual machine) does less, and none waits for another.
 * team() runs several calls of one kernel at once on the calling thread's OpenMP team (built
 * with -fopenmp: the libgomp threads that oneDNN's primitives use, still spinning after the
 * last one), each call parsed and checked first, then all run without the GIL. The
 * transforms are the separable 1-D ones, vectorised over 8 channels (GCC vector extensions).
 * The kernels (the second half of this file, which includes itself once per build) are
 * compiled three times: for AVX-512 (F and VL), for AVX2 + FMA and for the architecture's
 * baseline (SSE2 on x86-64); the widest the CPU runs is chosen at import, so the module needs
 * no -march flag. The AVX-512 build multiplies with 16-float vectors, two panels by 12 tiles
 * per register block, each output summed in the same order as in the others.
 */
#ifndef ISA      /* the module; the kernels follow below the #else, included once per build */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include "_buffers.h"
#include "_team.h"

#define TILE 6          /* input patch (and transformed tile) side */
#define OUT 4           /* output tile side */
#define POSITIONS (TILE * TILE)
#define LANES 8         /* floats per vector */
#define PANEL 16        /* filters per packed weight panel: two vectors */
#define LINE_POINTS_MAX 16     /* line_weights(): the most points and taps of G */
#define LINE_TAPS_MAX 8
#define ROWS 6          /* tiles per GEMM register block */

/* Vectors pass only between always-inlined functions: no call between objects sees their ABI. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float vec __attribute__((vector_size(LANES * sizeof(float))));
typedef int mask __attribute__((vector_size(LANES * sizeof(int))));
typedef float unaligned_vec __attribute__((vector_size(LANES * sizeof(float)), aligned(4)));

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_AVX2_BUILD 1
#include <immintrin.h>
#else
#define HAVE_AVX2_BUILD 0
#endif

#define INLINE static inline __attribute__((always_inline))

/* Loops over a tile's values or a register block, unrolled at any optimisation level so that
 * their vectors stay in registers (GCC unrolls them by itself only from -O3). */
#if defined(__GNUC__) && !defined(__clang__)
#define UNROLL _Pragma("GCC unroll 36")
#else
#define UNROLL
#endif

/* ------------------------------------------------------------------------------------------ */
/* One call's work */

typedef struct {
    Py_ssize_t batch, height, width, channels;      /* input, NHWC */
    Py_ssize_t out_h, out_w, filters;               /* output, NHWC */
    Py_ssize_t pad_top, pad_left, tiles_h, tiles_w;
} Geometry;

typedef struct {
    Geometry g;
    const float *x, *u, *bias, *residual;
    const float *zeros;         /* `channels` zeros, read for the padding */
    float *out, *v, *m;         /* v: 36 positions of chunk * channels floats, m of chunk *
                                   width, each position_stride() apart */
    float *du;                  /* weight gradient: 36 positions of (channels, du_row),
                                   position_stride() apart, accumulated */
    Py_ssize_t du_row;          /* filters rounded up to whole panels */
    int zero;                   /* weight_gradient(): zero du's range before the sums */
    Py_ssize_t f_lo, f_hi;      /* filters: f_lo a multiple of PANEL */
    Py_ssize_t width;           /* M's row: f_hi - f_lo rounded up to whole panels */
    Py_ssize_t chunk;
    long long *claim;           /* shared: the next item to take, or NULL (the range given) */
    Py_ssize_t claim_panels;    /* 0: items are chunks of tiles; else groups of this many
                                   panels of filters of a chunk */
    Py_ssize_t u_step;          /* floats from one position of u to the next, each holding
                                   panels (C, PANEL) ... */
    Py_ssize_t u_first;         /* ... the first of them the filters' panel u_first */
    /* the weights transformed group by group as the threads take them (claim_panels):
     * OHWI 3x3, element [f, y, x, c] at f, y, x, c * w_steps, times scale[f] where given,
     * into own_u (a thread's claim_panels panels); NULL: u holds all the panels */
    const float *w, *scale;
    Py_ssize_t w_steps[4];
    float *own_u;
    /* with w: the weights of the item this many on are fetched into L2 during each item's
     * products (the item the thread likely takes next: the number of threads), where each
     * filter's weights are one range; fetch/fetch_lines the range of the item running */
    Py_ssize_t ahead_items;
    const char *fetch;
    Py_ssize_t fetch_lines;
    int relu;
} Conv;

/* A 1x1 stride-1 convolution's call: rows of the (N*H*W, C) input and (N*H*W, F) output. */
typedef struct {
    const float *x, *u, *bias, *residual;       /* u: (ceil(F / 16), C, 16), W^T in panels */
    float *out;
    Py_ssize_t channels, filters, chunk, depth;
    long long *claim;           /* shared: the next row to take, or NULL (the range given) */
    int relu;
} Pointwise;

/* One tile of the output transform. */
typedef struct {
    float *out;                 /* the tile's first output pixel */
    const float *residual;      /* the same pixel of the residual, or NULL */
    Py_ssize_t rows, cols;      /* outputs inside the edges */
    Py_ssize_t row_step;        /* values from one output row to the next */
} OutputTile;

/* A 1-D convolution F(m, r) along one axis of channel-last data (line()): tile t holds the m
 * outputs from `start` of one line (the pixels along the axis that share the other
 * coordinates) and reads its a = m + r - 1 input points from start - pad. */
#define MAX_POINTS 12
#define MAX_OUTPUTS 8

typedef struct {
    const float *x, *u, *bias, *residual;       /* u: (points, ceil(F / 16), C, 16) */
    const float *bt, *at;       /* B^T (points x points) and A^T (outputs x points) */
    const float *zeros;         /* `channels` zeros, read for the padding */
    float *out, *v, *m;         /* v: points * chunk * channels; m: points * chunk * width */
    Py_ssize_t channels, filters, width;        /* width: filters in whole panels */
    Py_ssize_t points, outputs, pad, chunk;
    Py_ssize_t axis;            /* 1: the lines are columns; 2: they are rows */
    Py_ssize_t lines, tiles_along;      /* lines per sample; tiles per line */
    /* pixels along the axis; floats from one pixel along it to the next, from one line to
     * the next, from one sample to the next */
    Py_ssize_t in_length, in_step, in_line, in_sample;
    Py_ssize_t out_length, out_step, out_line, out_sample;
    long long *claim;           /* shared: the next tile to take, or NULL (the range given) */
    int relu;
} Line;

/* dense(): out[r, o] = x[r] . w[o] + bias[o] (then relu) for the rows r of x and the outputs
 * o of a range, each row of w read once for all the rows of x (a few: one per image of a batch
 * of 1 to 4). At batch 1 an inner product reads each weight once: its speed is the memory's. */
typedef struct {
    const float *x, *w, *bias;  /* x (rows, inputs), w (outputs, inputs), C-contiguous */
    float *out;                 /* (rows, outputs) */
    Py_ssize_t rows, inputs, outputs, chunk;
    long long *claim;           /* shared: the next output to take, or NULL (the range given) */
    int relu;
} Dense;

/* Up to two ranges of memory to fetch into cache, a few lines at a time, while other work runs
 * (fetch_ahead()): the next chunk's rows of a kernel that reads its rows from memory. */
typedef struct {
    const char *at[2];
    Py_ssize_t bytes[2];
} Ahead;

static inline Py_ssize_t ahead_lines(const Ahead *a) {
    return (a->bytes[0] + a->bytes[1] + 63) / 64;
}

/* Asks for the next `lines` cache lines of the ranges, first range first. */
static inline void fetch_ahead(Ahead *a, Py_ssize_t lines) {
    for (int r = 0; r < 2 && lines > 0; r++) {
        for (; a->bytes[r] > 0 && lines > 0; lines--) {
            __builtin_prefetch(a->at[r], 0, 3);
            a->at[r] += 64;
            a->bytes[r] -= 64;
        }
    }
}

/* Floats from one tile position's rows to the next in V and M (36 of them): `count` rows of
 * `row` floats, rounded up to an odd number of cache lines. The transforms write (input) and
 * read (output) one vector at each of a tile's 36 positions in turn; a whole number of 4 KB
 * between positions put all 36 in one 12-way L1 set, and 2 KB in two. 128 channels at 28x28,
 * batch 16, one thread: chunks of 16 or 24 tiles (8 KB, 12 KB) ran the forward convolution
 * in 9.0 ms, chunks of 18 or 22 in 6.3 ms. */
static inline Py_ssize_t position_stride(Py_ssize_t count, Py_ssize_t row) {
    return (((count * row + 15) / 16) | 1) * 16;
}

/* Floats from one position to the next of a thread's own U of `panels` panels (convolve()
 * with w): an odd number of cache lines, so that the transform writes each channel's 36
 * lines straight into U, in different L1 sets. */
static inline Py_ssize_t own_u_step(Py_ssize_t panels, Py_ssize_t channels) {
    return position_stride(panels * channels, PANEL);
}

/* ------------------------------------------------------------------------------------------ */
/* The kernels, compiled for the baseline and, where GCC can, for AVX2 + FMA and AVX-512. The
 * options must hold for the whole of each copy, inlined helpers included: GCC lowers a
 * broadcast in a helper compiled without AVX to lane-by-lane inserts before inlining it. */

#define ISA(name) name##_baseline
#include "_winograd.c"
#undef ISA

#if HAVE_AVX2_BUILD
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define FUSED 1
#define ISA(name) name##_avx2
#include "_winograd.c"
#undef ISA
#pragma GCC pop_options

/* The AVX-512 copy: the transforms as in the AVX2 one (8 channels per vector), the products
 * on 16-float vectors, two panels of filters by WIDE_ROWS rows per register block. */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
#define WIDE 1
#define ISA(name) name##_avx512
#include "_winograd.c"
#undef ISA
#undef WIDE
#undef FUSED
#pragma GCC pop_options
#endif

#define EMBER_ISA_BUILDS HAVE_AVX2_BUILD
#include "_builds.h"

/* ------------------------------------------------------------------------------------------ */
/* Calls: one kernel call's arrays and arguments, run without the GIL; team() runs several */

typedef struct {
    const float *w;             /* OHWI 3x3, element [f, y, x, c] at f, y, x, c * steps */
    const float *scale;         /* per filter, or NULL: w is transformed as it is */
    float *u;
    Py_ssize_t channels, filters, steps[4];
} Weights;

/* line_weights(): U = G g of the 1-D F(m, r) of 1 x r and r x 1 layers (ember/op/nn/conv/line.py),
 * summed in double and rounded once */
typedef struct {
    const float *w;             /* (F, r, 1, C): tap k of filter f, channel c at f, k, c * steps */
    const float *scale;         /* per filter, or NULL */
    float *u;                   /* (points, panels, C, PANEL) */
    double g[LINE_POINTS_MAX * LINE_TAPS_MAX];     /* G, (points, taps) row-major */
    Py_ssize_t points, taps, channels, filters, steps[4];
} LineWeights;

typedef struct {
    const float *du;            /* weight_gradient()'s sums */
    float *dw;
    Py_ssize_t channels, filters, du_row;
} Finish;

typedef struct {
    const float *dy, *x;
    float *dw, *db;
    Py_ssize_t filters, channels, chunk;
    int zero;                   /* dw and db are zeroed before the sums */
} Sums;

/* patches(): im2col rows of channel-last data, one row per output pixel of the output lines
 * [lo, hi) (line = sample * out_h + output row), each the kernel's taps (y, x) of C values. */
typedef struct {
    const float *x;             /* (batch, height, width, channels) */
    float *rows;
    Py_ssize_t batch, height, width, channels, out_h, out_w;
    Py_ssize_t pad[2], stride[2], kernel[2], dilate[2];
} Patches;

typedef struct Job {
    Buffers b;                  /* the arrays, held until end_job() */
    void (*run)(const struct Job *);
    float *zeros;               /* owned: `channels` zeros read for the padding, or NULL */
    Py_ssize_t lo, hi;          /* the tiles, rows, panels or channels to run */
    union {
        Conv conv;
        Pointwise pointwise;
        Line line;
        Weights weights;
        LineWeights line_weights;
        Finish finish;
        Sums sums;
        Patches patches;
        Dense dense;
    } k;
} Job;

static void run_convolve(const Job *j) {
    DISPATCH(convolve, &j->k.conv, j->lo, j->hi);
}

static void run_gradient(const Job *j) {
    DISPATCH(weight_gradient, &j->k.conv, j->lo, j->hi);
}

static void run_finish(const Job *j) {
    const Finish *f = &j->k.finish;
    DISPATCH(finish_gradient, f->du, f->channels, f->filters, f->du_row, f->dw, j->lo, j->hi);
}

static void run_pointwise(const Job *j) {
    DISPATCH(pointwise, &j->k.pointwise, j->lo, j->hi);
}

static void run_sums(const Job *j) {
    const Sums *s = &j->k.sums;
    if (s->zero) {          /* by the thread that sums into them, not the caller's */
        memset(s->dw, 0, (size_t)(s->filters * s->channels) * sizeof(float));
        if (s->db != NULL) {
            memset(s->db, 0, (size_t)s->filters * sizeof(float));
        }
    }
    DISPATCH(pointwise_gradient, s->dy, s->x, s->dw, s->db, s->filters, s->channels, j->lo,
             j->hi, s->chunk);
}

static void run_line(const Job *j) {
    DISPATCH(line, &j->k.line, j->lo, j->hi);
}

static void run_dense(const Job *j) {
    DISPATCH(dense, &j->k.dense, j->lo, j->hi);
}

static void run_weights(const Job *j) {
    const Weights *w = &j->k.weights;
    DISPATCH(transform_weights, w->w, w->steps, w->scale, w->channels, w->filters, w->u,
             (w->filters + PANEL - 1) / PANEL * PANEL * w->channels, 0, j->lo, j->hi);
}

static void run_line_weights(const Job *j) {
    const LineWeights *k = &j->k.line_weights;
    DISPATCH(line_weights, k->w, k->steps, k->scale, k->g, k->points, k->taps, k->channels,
             k->filters, k->u, j->lo, j->hi);
}

static void end_job(Job *j) {
    PyMem_Free(j->zeros);
    j->zeros = NULL;
    release_all(&j->b);
}

/* `channels` zeros for `j`'s reads of the padding; NULL with MemoryError. */
static const float *job_zeros(Job *j, Py_ssize_t channels) {
    j->zeros = PyMem_Calloc((size_t)channels, sizeof(float));
    if (j->zeros == NULL) {
        PyErr_NoMemory();
    }
    return j->zeros;
}
/* ------------------------------------------------------------------------------------------ */
/* Arguments */

/* `obj`'s memory as C-contiguous float32 values, held in `b` until release_all; NULL with an
 * exception naming `name` otherwise. With `shape` the array must be 4-D: its shape is written
 * there, or checked against it where `check` is set; without, it must hold at least `count`
 * values. */
static float *borrow(Buffers *b, PyObject *obj, const char *name, Py_ssize_t *shape,
                     int check, Py_ssize_t count, int writable) {
    Py_buffer *view = borrow_float32(b, obj, name, writable);
    if (view == NULL) {
        return NULL;
    }
    if (shape == NULL) {
        if (view->len < count * (Py_ssize_t)sizeof(float)) {
            PyErr_Format(PyExc_ValueError, "%s: expected at least %zd float32 values, got %zd",
                         name, count, view->len / (Py_ssize_t)sizeof(float));
            return NULL;
        }
        return (float *)view->buf;
    }
    if (view->ndim != 4) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 4-D (NHWC) array, got %d dimensions",
                     name, view->ndim);
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (check && view->shape[i] != shape[i]) {
            PyErr_Format(PyExc_ValueError, "%s: expected shape (%zd, %zd, %zd, %zd) like out",
                         name, shape[0], shape[1], shape[2], shape[3]);
            return NULL;
        }
        shape[i] = view->shape[i];
    }
    return (float *)view->buf;
}

/* `obj` as 4-D float32 values of any strides (negative ones too), its shape into `shape` and
 * its strides in floats into `steps`; NULL with an exception naming `name` otherwise. */
static const float *borrow_strided(Buffers *b, PyObject *obj, const char *name,
                                   Py_ssize_t *shape, Py_ssize_t *steps) {
    Py_buffer *view = borrow_float32_view(b, obj, name, PyBUF_STRIDED_RO | PyBUF_FORMAT);
    if (view == NULL) {
        return NULL;
    }
    if (view->ndim != 4) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 4-D (OHWI) array, got %d dimensions",
                     name, view->ndim);
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (view->strides[i] % (Py_ssize_t)sizeof(float) != 0) {
            PyErr_Format(PyExc_ValueError, "%s: stride %zd of axis %d is not a whole number "
                         "of float32 values", name, view->strides[i], i);
            return NULL;
        }
        shape[i] = view->shape[i];
        steps[i] = view->strides[i] / (Py_ssize_t)sizeof(float);
    }
    return (const float *)view->buf;
}

static void set_geometry(Geometry *g, const Py_ssize_t *x, const Py_ssize_t *out) {
    g->batch = x[0];
    g->height = x[1];
    g->width = x[2];
    g->channels = x[3];
    g->out_h = out[1];
    g->out_w = out[2];
    g->filters = out[3];
    g->tiles_h = (g->out_h + OUT - 1) / OUT;
    g->tiles_w = (g->out_w + OUT - 1) / OUT;
}

/* The ranges and sizes that the buffers are then checked against; 0 with an exception. */
static int valid_ranges(const Conv *k, const Py_ssize_t *x, const Py_ssize_t *out,
                        Py_ssize_t lo, Py_ssize_t hi) {
    const Geometry *g = &k->g;
    Py_ssize_t tiles = g->batch * g->tiles_h * g->tiles_w;
    if (out[0] != x[0] || g->channels < 1 || g->filters < 1 || g->out_h < 1 || g->out_w < 1) {
        PyErr_Format(PyExc_ValueError, "x (%zd, %zd, %zd, %zd) and out (%zd, %zd, %zd, %zd): "
                     "expected the same batch and no empty dimension", x[0], x[1], x[2], x[3],
                     out[0], out[1], out[2], out[3]);
        return 0;
    }
    if (lo < 0 || hi < lo || hi > tiles) {
        PyErr_Format(PyExc_ValueError, "tiles [%zd, %zd): expected 0 <= lo <= hi <= %zd", lo,
                     hi, tiles);
        return 0;
    }
    if (k->f_lo < 0 || k->f_lo % PANEL || k->f_hi <= k->f_lo || k->f_hi > g->filters) {
        PyErr_Format(PyExc_ValueError, "filters [%zd, %zd): expected 0 <= lo < hi <= %zd, lo "
                     "a multiple of %d", k->f_lo, k->f_hi, g->filters, PANEL);
        return 0;
    }
    if (k->chunk < 1) {
        PyErr_Format(PyExc_ValueError, "chunk %zd: expected >= 1 tiles", k->chunk);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Module functions */

/* Whether `name` has OHWI 3x3 shape `ws` and [lo, hi) of its `unit`s lies in [0, limit);
   sets the exception where not. */
static int valid_weights(const char *name, const Py_ssize_t ws[4], const char *unit,
                         Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t limit) {
    if (ws[1] != 3 || ws[2] != 3 || ws[3] < 1 || ws[0] < 1) {
        PyErr_Format(PyExc_ValueError, "%s (%zd, %zd, %zd, %zd): expected OHWI 3x3 weights",
                     name, ws[0], ws[1], ws[2], ws[3]);
        return 0;
    }
    if (lo < 0 || hi < lo || hi > limit) {
        PyErr_Format(PyExc_ValueError, "%s [%zd, %zd): expected 0 <= lo <= hi <= %zd", unit, lo,
                     hi, limit);
        return 0;
    }
    return 1;
}

/* convolve()'s w and scale (not None), checked against the call's geometry; 0 with an
 * exception. */
static int borrow_fused(Conv *k, Buffers *b, PyObject *w, PyObject *scale) {
    Py_ssize_t ws[4];
    if (k->claim == NULL || k->claim_panels < 1) {
        PyErr_SetString(PyExc_ValueError, "w: the weights are transformed as the threads "
                        "claim groups of filter panels: expected a claim and claim_panels >= 1");
        return 0;
    }
    if (!(k->w = borrow_strided(b, w, "w", ws, k->w_steps)) ||
        !valid_weights("w", ws, "panels", 0, 0, 0)) {
        return 0;
    }
    if (ws[0] != k->g.filters || ws[3] != k->g.channels) {
        PyErr_Format(PyExc_ValueError, "w (%zd, 3, 3, %zd): expected %zd filters of %zd "
                     "channels, as out and x have", ws[0], ws[3], k->g.filters, k->g.channels);
        return 0;
    }
    return scale == Py_None ||
           (k->scale = borrow(b, scale, "scale", NULL, 0, k->g.filters, 0)) != NULL;
}

static int borrow_all(Conv *k, Buffers *b, PyObject *const *objs, Py_ssize_t *xs,
                      Py_ssize_t *os, Py_ssize_t lo, Py_ssize_t hi, PyObject *w,
                      PyObject *scale) {
    /* objs: x, u, out, bias, residual, v, m; u is U of all the panels, or with k->w set the
     * thread's own of claim_panels panels (written) */
    if (!(k->x = borrow(b, objs[0], "x", xs, 0, 0, 0)) ||
        !(k->out = borrow(b, objs[2], "out", os, 0, 0, 1))) {
        return 0;
    }
    set_geometry(&k->g, xs, os);
    if (!valid_ranges(k, xs, os, lo, hi) ||
        (w != Py_None && !borrow_fused(k, b, w, scale))) {
        return 0;
    }
    Py_ssize_t panels = (k->g.filters + PANEL - 1) / PANEL;
    k->width = (k->f_hi - k->f_lo + PANEL - 1) / PANEL * PANEL;
    if (k->claim_panels > 0 && k->claim_panels * PANEL < k->width) {
        k->width = k->claim_panels * PANEL;       /* one group of filters at a time */
    }
    k->u_first = 0;
    k->u_step = panels * PANEL * k->g.channels;
    Py_ssize_t u_size = POSITIONS * k->u_step;
    if (k->w != NULL) {
        k->u_step = own_u_step(k->claim_panels, k->g.channels);
        u_size = POSITIONS * k->u_step + PANEL;         /* aligned to a cache line below */
    }
    float *u = borrow(b, objs[1], "u", NULL, 0, u_size, k->w != NULL);
    if (u != NULL && k->w != NULL) {
        u = k->own_u = (float *)(((uintptr_t)u + 63) & ~(uintptr_t)63);
    }
    return (k->u = u) &&
           (objs[3] == Py_None || (k->bias = borrow(b, objs[3], "bias", NULL, 0,
                                                    k->g.filters, 0))) &&
           (objs[4] == Py_None || (k->residual = borrow(b, objs[4], "residual", os, 1, 0,
                                                        0))) &&
           (k->v = borrow(b, objs[5], "v", NULL, 0,
                          POSITIONS * position_stride(k->chunk, k->g.channels), 1)) &&
           (k->m = borrow(b, objs[6], "m", NULL, 0,
                          POSITIONS * position_stride(k->chunk, k->width), 1));
}

/* The shared counter of convolve(): one writable, aligned int64 (held in `b`); NULL with an
 * exception otherwise. */
static long long *borrow_claim(Buffers *b, PyObject *obj) {
    Py_buffer *view = next_view(b, "claim");
    if (view == NULL || PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        return NULL;
    }
    b->count++;
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') {
        f++;
    }
    if (view->itemsize != 8 || view->len < 8 || (f[0] != 'q' && f[0] != 'l') || f[1] != '\0' ||
        (size_t)view->buf % 8 != 0) {
        PyErr_Format(PyExc_TypeError, "claim: expected a writable, aligned int64 array, got "
                     "buffer format '%s' of %zd bytes", f, view->len);
        return NULL;
    }
    return (long long *)view->buf;
}

static int parse_convolve(PyObject *args, Job *j) {
    PyObject *objs[7], *claim = Py_None, *w = Py_None, *scale = Py_None;
    Py_ssize_t xs[4], os[4];
    Conv *k = &j->k.conv;
    if (!PyArg_ParseTuple(args, "OOOOOp(nn)(nn)(nn)nOO|OnOOn:convolve", &objs[0], &objs[1],
                          &objs[2], &objs[3], &objs[4], &k->relu, &k->g.pad_top,
                          &k->g.pad_left, &j->lo, &j->hi, &k->f_lo, &k->f_hi, &k->chunk,
                          &objs[5], &objs[6], &claim, &k->claim_panels, &w, &scale,
                          &k->ahead_items)) {
        return 0;
    }
    if (k->ahead_items < 0) {
        PyErr_Format(PyExc_ValueError, "ahead_items %zd: expected >= 0", k->ahead_items);
        return 0;
    }
    if (k->claim_panels < 0) {
        PyErr_Format(PyExc_ValueError, "claim_panels %zd: expected >= 0 (0: claim tiles)",
                     k->claim_panels);
        return 0;
    }
    if (w == Py_None && scale != Py_None) {
        PyErr_SetString(PyExc_ValueError, "scale: given without w (u is already scaled)");
        return 0;
    }
    j->run = run_convolve;
    if (claim != Py_None && (k->claim = borrow_claim(&j->b, claim)) == NULL) {
        return 0;
    }
    return borrow_all(k, &j->b, objs, xs, os, j->lo, j->hi, w, scale) &&
           (k->zeros = job_zeros(j, k->g.channels)) != NULL;
}

static int parse_transform_weights(PyObject *args, Job *j) {
    PyObject *w, *u, *scale = Py_None;
    Py_ssize_t ws[4];
    Weights *k = &j->k.weights;
    k->scale = NULL;
    if (!PyArg_ParseTuple(args, "OO(nn)|O:transform_weights", &w, &u, &j->lo, &j->hi,
                          &scale) ||
        !(k->w = borrow_strided(&j->b, w, "w", ws, k->steps))) {
        return 0;
    }
    k->channels = ws[3], k->filters = ws[0];
    Py_ssize_t panels = (k->filters + PANEL - 1) / PANEL;
    j->run = run_weights;
    return valid_weights("w", ws, "panels", j->lo, j->hi, panels) &&
           (k->u = borrow(&j->b, u, "u", NULL, 0, POSITIONS * panels * PANEL * k->channels,
                          1)) != NULL &&
           (scale == Py_None ||
            (k->scale = borrow(&j->b, scale, "scale", NULL, 0, k->filters, 0)) != NULL);
}

static int parse_line_weights(PyObject *args, Job *j) {
    PyObject *w, *g, *u, *scale = Py_None;
    Py_ssize_t ws[4];
    LineWeights *k = &j->k.line_weights;
    k->scale = NULL;
    if (!PyArg_ParseTuple(args, "OOO(nn)|O:line_weights", &w, &g, &u, &j->lo, &j->hi,
                          &scale) ||
        !(k->w = borrow_strided(&j->b, w, "w", ws, k->steps))) {
        return 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(g, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return 0;
    }
    int is_double = view.itemsize == 8 && view.format != NULL &&
                    strcmp(view.format + (view.format[0] == '<' || view.format[0] == '=' ||
                                          view.format[0] == '@'), "d") == 0;
    int fits = view.ndim == 2 && view.shape[0] >= 1 && view.shape[0] <= LINE_POINTS_MAX &&
               view.shape[1] == ws[1];
    if (is_double && fits) {
        k->points = view.shape[0];
        memcpy(k->g, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    if (!is_double || !fits) {
        PyErr_Format(PyExc_ValueError, "g: expected float64 (points, %zd) with 1 to %d points, "
                     "the taps of w", ws[1], LINE_POINTS_MAX);
        return 0;
    }
    if (ws[1] < 1 || ws[1] > LINE_TAPS_MAX || ws[2] != 1 || ws[0] < 1 || ws[3] < 1) {
        PyErr_Format(PyExc_ValueError, "w (%zd, %zd, %zd, %zd): expected (F, r, 1, C) taps, r "
                     "from 1 to %d", ws[0], ws[1], ws[2], ws[3], LINE_TAPS_MAX);
        return 0;
    }
    k->taps = ws[1], k->channels = ws[3], k->filters = ws[0];
    Py_ssize_t panels = (k->filters + PANEL - 1) / PANEL;
    if (j->lo < 0 || j->hi < j->lo || j->hi > panels) {
        PyErr_Format(PyExc_ValueError, "panels [%zd, %zd): expected 0 <= lo <= hi <= %zd",
                     j->lo, j->hi, panels);
        return 0;
    }
    j->run = run_line_weights;
    return (k->u = borrow(&j->b, u, "u", NULL, 0,
                          k->points * panels * PANEL * k->channels, 1)) != NULL &&
           (scale == Py_None ||
            (k->scale = borrow(&j->b, scale, "scale", NULL, 0, k->filters, 0)) != NULL);
}

static int parse_weight_gradient(PyObject *args, Job *j) {
    PyObject *x, *dy, *du, *v, *m;
    Py_ssize_t xs[4], ds[4];
    Conv *k = &j->k.conv;
    k->zero = 0;
    if (!PyArg_ParseTuple(args, "OOO(nn)(nn)(nn)nOO|p:weight_gradient", &x, &dy, &du,
                          &k->g.pad_top, &k->g.pad_left, &j->lo, &j->hi, &k->f_lo, &k->f_hi,
                          &k->chunk, &v, &m, &k->zero)) {
        return 0;
    }
    if (!(k->x = borrow(&j->b, x, "x", xs, 0, 0, 0)) ||
        !(k->out = borrow(&j->b, dy, "dy", ds, 0, 0, 0))) {
        return 0;
    }
    set_geometry(&k->g, xs, ds);
    if (!valid_ranges(k, xs, ds, j->lo, j->hi)) {
        return 0;
    }
    k->width = (k->f_hi - k->f_lo + PANEL - 1) / PANEL * PANEL;
    k->du_row = (k->g.filters + PANEL - 1) / PANEL * PANEL;
    j->run = run_gradient;
    return (k->du = borrow(&j->b, du, "du", NULL, 0,
                           POSITIONS * position_stride(k->g.channels, k->du_row), 1)) &&
           (k->v = borrow(&j->b, v, "v", NULL, 0,
                          POSITIONS * position_stride(k->chunk, k->g.channels), 1)) &&
           (k->m = borrow(&j->b, m, "m", NULL, 0,
                          POSITIONS * position_stride(k->chunk, k->width), 1)) &&
           (k->zeros = job_zeros(j, k->g.channels)) != NULL;
}

static int parse_finish_gradient(PyObject *args, Job *j) {
    PyObject *du, *dw;
    Py_ssize_t ws[4];
    Finish *k = &j->k.finish;
    if (!PyArg_ParseTuple(args, "OO(nn):finish_gradient", &du, &dw, &j->lo, &j->hi) ||
        !(k->dw = borrow(&j->b, dw, "dw", ws, 0, 0, 1))) {
        return 0;
    }
    k->channels = ws[3], k->filters = ws[0];
    k->du_row = (k->filters + PANEL - 1) / PANEL * PANEL;
    j->run = run_finish;
    return valid_weights("dw", ws, "channels", j->lo, j->hi, k->channels) &&
           (k->du = borrow(&j->b, du, "du", NULL, 0,
                           POSITIONS * position_stride(k->channels, k->du_row), 0)) != NULL;
}

static int parse_pointwise_gradient(PyObject *args, Job *j) {
    PyObject *dy, *x, *dw, *db;
    Py_ssize_t ds[4], xs[4];
    Sums *k = &j->k.sums;
    k->zero = 0;
    if (!PyArg_ParseTuple(args, "OOOO(nn)n|p:pointwise_gradient", &dy, &x, &dw, &db, &j->lo,
                          &j->hi, &k->chunk, &k->zero) ||
        !(k->dy = borrow(&j->b, dy, "dy", ds, 0, 0, 0)) ||
        !(k->x = borrow(&j->b, x, "x", xs, 0, 0, 0))) {
        return 0;
    }
    Py_ssize_t rows = ds[0] * ds[1] * ds[2];
    k->filters = ds[3], k->channels = xs[3];
    if (xs[0] != ds[0] || xs[1] != ds[1] || xs[2] != ds[2]) {
        PyErr_Format(PyExc_ValueError, "x: expected the samples, rows and columns of dy "
                     "(%zd, %zd, %zd), got (%zd, %zd, %zd)", ds[0], ds[1], ds[2], xs[0],
                     xs[1], xs[2]);
        return 0;
    }
    if (xs[3] % PANEL != 0) {
        PyErr_Format(PyExc_ValueError, "x: expected channels in whole panels of %d, got %zd",
                     PANEL, xs[3]);
        return 0;
    }
    if (j->lo < 0 || j->lo > j->hi || j->hi > rows) {
        PyErr_Format(PyExc_ValueError, "rows [%zd, %zd): expected 0 <= lo <= hi <= %zd",
                     j->lo, j->hi, rows);
        return 0;
    }
    if (k->chunk < 1) {
        PyErr_Format(PyExc_ValueError, "chunk: expected at least 1 row, got %zd", k->chunk);
        return 0;
    }
    j->run = run_sums;
    return (k->dw = borrow(&j->b, dw, "dw", NULL, 0, ds[3] * xs[3], 1)) &&
           (db == Py_None || (k->db = borrow(&j->b, db, "db", NULL, 0, ds[3], 1)));
}

static int parse_pointwise(PyObject *args, Job *j) {
    PyObject *x, *u, *y, *bias, *residual, *claim = Py_None;
    Py_ssize_t xs[4], os[4];
    Pointwise *k = &j->k.pointwise;
    if (!PyArg_ParseTuple(args, "OOOOOp(nn)nn|O:pointwise", &x, &u, &y, &bias, &residual,
                          &k->relu, &j->lo, &j->hi, &k->chunk, &k->depth, &claim)) {
        return 0;
    }
    if (!(claim == Py_None || (k->claim = borrow_claim(&j->b, claim)) != NULL) ||
        !(k->x = borrow(&j->b, x, "x", xs, 0, 0, 0)) ||
        !(k->out = borrow(&j->b, y, "out", os, 0, 0, 1))) {
        return 0;
    }
    Py_ssize_t rows = xs[0] * xs[1] * xs[2];
    k->channels = xs[3], k->filters = os[3];
    if (os[0] != xs[0] || os[1] != xs[1] || os[2] != xs[2] || k->channels < 1 ||
        k->filters < 1) {
        PyErr_Format(PyExc_ValueError, "x (%zd, %zd, %zd, %zd) and out (%zd, %zd, %zd, %zd): "
                     "expected the same samples, rows and columns, and channels and filters",
                     xs[0], xs[1], xs[2], xs[3], os[0], os[1], os[2], os[3]);
        return 0;
    }
    if (j->lo < 0 || j->lo > j->hi || j->hi > rows) {
        PyErr_Format(PyExc_ValueError, "rows [%zd, %zd): expected 0 <= lo <= hi <= %zd",
                     j->lo, j->hi, rows);
        return 0;
    }
    if (k->chunk < 1 || k->depth < 1) {
        PyErr_Format(PyExc_ValueError, "chunk %zd, depth %zd: expected at least 1 row and 1 "
                     "channel", k->chunk, k->depth);
        return 0;
    }
    Py_ssize_t panels = (k->filters + PANEL - 1) / PANEL;
    j->run = run_pointwise;
    return (k->u = borrow(&j->b, u, "u", NULL, 0, panels * k->channels * PANEL, 0)) &&
           (bias == Py_None || (k->bias = borrow(&j->b, bias, "bias", NULL, 0, k->filters,
                                                 0))) &&
           (residual == Py_None || (k->residual = borrow(&j->b, residual, "residual", os, 1,
                                                         0, 0)));
}

/* `obj` as a C-contiguous 2-D float32 matrix (held in `b`), its shape written to `shape`;
 * NULL with an exception naming `name` otherwise. */
static const float *borrow_matrix(Buffers *b, PyObject *obj, const char *name,
                                  Py_ssize_t *shape) {
    Py_buffer *view = borrow_float32(b, obj, name, 0);
    if (view == NULL) {
        return NULL;
    }
    if (view->ndim != 2) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 2-D matrix, got %d dimensions", name,
                     view->ndim);
        return NULL;
    }
    shape[0] = view->shape[0], shape[1] = view->shape[1];
    return (const float *)view->buf;
}

static int parse_dense(PyObject *args, Job *j) {
    PyObject *x, *w, *bias, *out, *claim = Py_None;
    Py_ssize_t xs[2], ws[2], os[2];
    Dense *k = &j->k.dense;
    if (!PyArg_ParseTuple(args, "OOOOp(nn)n|O:dense", &x, &w, &bias, &out, &k->relu, &j->lo,
                          &j->hi, &k->chunk, &claim)) {
        return 0;
    }
    Py_buffer *view;
    if (!(claim == Py_None || (k->claim = borrow_claim(&j->b, claim)) != NULL) ||
        !(k->x = borrow_matrix(&j->b, x, "x", xs)) ||
        !(k->w = borrow_matrix(&j->b, w, "w", ws)) ||
        !(view = borrow_float32(&j->b, out, "out", 1))) {
        return 0;
    }
    if (view->ndim != 2) {
        PyErr_Format(PyExc_ValueError, "out: expected a 2-D matrix, got %d dimensions",
                     view->ndim);
        return 0;
    }
    os[0] = view->shape[0], os[1] = view->shape[1];
    k->out = (float *)view->buf;
    if (xs[1] != ws[1] || os[0] != xs[0] || os[1] != ws[0] || xs[1] < 1) {
        PyErr_Format(PyExc_ValueError, "x (%zd, %zd), w (%zd, %zd) and out (%zd, %zd): "
                     "expected x (rows, inputs), w (outputs, inputs) and out (rows, outputs), "
                     "at least 1 input", xs[0], xs[1], ws[0], ws[1], os[0], os[1]);
        return 0;
    }
    k->rows = xs[0], k->inputs = xs[1], k->outputs = ws[0];
    if (j->lo < 0 || j->lo > j->hi || j->hi > k->outputs) {
        PyErr_Format(PyExc_ValueError, "outputs [%zd, %zd): expected 0 <= lo <= hi <= %zd",
                     j->lo, j->hi, k->outputs);
        return 0;
    }
    if (k->chunk < 1) {
        PyErr_Format(PyExc_ValueError, "chunk %zd: expected at least 1 output", k->chunk);
        return 0;
    }
    j->run = run_dense;
    return bias == Py_None ||
           (k->bias = borrow(&j->b, bias, "bias", NULL, 0, k->outputs, 0)) != NULL;
}

/* The transforms' and the geometry's fields of `k` from the shapes of B^T (bs), A^T (as),
 * x (xs) and out (os); 0 with an exception where they do not fit together. */
static int line_geometry(Line *k, const Py_ssize_t *bs, const Py_ssize_t *as,
                         const Py_ssize_t *xs, const Py_ssize_t *os) {
    if (bs[0] != bs[1] || bs[0] < 2 || bs[0] > MAX_POINTS) {
        PyErr_Format(PyExc_ValueError, "bt (%zd, %zd): expected a square matrix of 2 to %d "
                     "points", bs[0], bs[1], MAX_POINTS);
        return 0;
    }
    if (as[1] != bs[0] || as[0] < 1 || as[0] > MAX_OUTPUTS || as[0] > as[1]) {
        PyErr_Format(PyExc_ValueError, "at (%zd, %zd): expected (outputs, %zd) with 1 <= "
                     "outputs <= %d and outputs <= the %zd points", as[0], as[1], bs[0],
                     MAX_OUTPUTS, bs[0]);
        return 0;
    }
    if (k->axis != 1 && k->axis != 2) {
        PyErr_Format(PyExc_ValueError, "axis %zd: expected 1 (the rows: an r x 1 kernel) or "
                     "2 (the columns: 1 x r)", k->axis);
        return 0;
    }
    int across = 3 - (int)k->axis;        /* the other axis: kernel 1, no padding */
    if (os[0] != xs[0] || os[across] != xs[across] || xs[3] < 1 || os[3] < 1 ||
        os[1] < 1 || os[2] < 1) {
        PyErr_Format(PyExc_ValueError, "x (%zd, %zd, %zd, %zd) and out (%zd, %zd, %zd, %zd): "
                     "expected the same batch and %s, and no empty dimension", xs[0], xs[1],
                     xs[2], xs[3], os[0], os[1], os[2], os[3],
                     k->axis == 1 ? "columns" : "rows");
        return 0;
    }
    if (k->pad < 0) {
        PyErr_Format(PyExc_ValueError, "pad %zd: expected >= 0 zeros before the first input",
                     k->pad);
        return 0;
    }
    k->points = bs[0], k->outputs = as[0];
    k->channels = xs[3], k->filters = os[3];
    k->width = (k->filters + PANEL - 1) / PANEL * PANEL;
    k->in_length = xs[k->axis], k->out_length = os[k->axis];
    k->lines = os[across];
    k->tiles_along = (k->out_length + k->outputs - 1) / k->outputs;
    k->in_sample = xs[1] * xs[2] * xs[3], k->out_sample = os[1] * os[2] * os[3];
    k->in_step = k->axis == 1 ? xs[2] * xs[3] : xs[3];
    k->out_step = k->axis == 1 ? os[2] * os[3] : os[3];
    k->in_line = k->axis == 1 ? xs[3] : xs[2] * xs[3];
    k->out_line = k->axis == 1 ? os[3] : os[2] * os[3];
    return 1;
}

static int borrow_line(Line *k, Buffers *b, PyObject *const *objs, Py_ssize_t lo,
                       Py_ssize_t hi) {
    /* objs: x, u, out, bias, residual, bt, at, v, m */
    Py_ssize_t xs[4], os[4], bs[2], as[2];
    if (!(k->x = borrow(b, objs[0], "x", xs, 0, 0, 0)) ||
        !(k->out = borrow(b, objs[2], "out", os, 0, 0, 1)) ||
        !(k->bt = borrow_matrix(b, objs[5], "bt", bs)) ||
        !(k->at = borrow_matrix(b, objs[6], "at", as)) ||
        !line_geometry(k, bs, as, xs, os)) {
        return 0;
    }
    Py_ssize_t tiles = xs[0] * k->lines * k->tiles_along;
    if (lo < 0 || hi < lo || hi > tiles) {
        PyErr_Format(PyExc_ValueError, "tiles [%zd, %zd): expected 0 <= lo <= hi <= %zd", lo,
                     hi, tiles);
        return 0;
    }
    if (k->chunk < 1) {
        PyErr_Format(PyExc_ValueError, "chunk %zd: expected >= 1 tiles", k->chunk);
        return 0;
    }
    Py_ssize_t block = k->points * k->chunk;
    return (k->u = borrow(b, objs[1], "u", NULL, 0, k->points * k->width * k->channels, 0)) &&
           (objs[3] == Py_None || (k->bias = borrow(b, objs[3], "bias", NULL, 0, k->filters,
                                                    0))) &&
           (objs[4] == Py_None || (k->residual = borrow(b, objs[4], "residual", os, 1, 0,
                                                        0))) &&
           (k->v = borrow(b, objs[7], "v", NULL, 0, block * k->channels, 1)) &&
           (k->m = borrow(b, objs[8], "m", NULL, 0, block * k->width, 1));
}

static int parse_line(PyObject *args, Job *j) {
    PyObject *objs[9], *claim = Py_None;
    Line *k = &j->k.line;
    if (!PyArg_ParseTuple(args, "OOOOOpnnOO(nn)nOO|O:line", &objs[0], &objs[1], &objs[2],
                          &objs[3], &objs[4], &k->relu, &k->axis, &k->pad, &objs[5], &objs[6],
                          &j->lo, &j->hi, &k->chunk, &objs[7], &objs[8], &claim)) {
        return 0;
    }
    j->run = run_line;
    return (claim == Py_None || (k->claim = borrow_claim(&j->b, claim)) != NULL) &&
           borrow_line(k, &j->b, objs, j->lo, j->hi) &&
           (k->zeros = job_zeros(j, k->channels)) != NULL;
}

/* The rows of patches(): a kernel row's taps that lie inside the input are one run of
 * memory when undilated (7 pixels of 3 channels, 84 bytes, for resnet's first layer); those
 * outside are zeros. */
static void run_patches(const Job *j) {
    const Patches *k = &j->k.patches;
    Py_ssize_t c = k->channels, row = k->kernel[0] * k->kernel[1] * c;
    float *dst = k->rows;
    for (Py_ssize_t line = j->lo; line < j->hi; line++) {
        Py_ssize_t n = line / k->out_h, oy = line % k->out_h;
        const float *sample = k->x + n * k->height * k->width * c;
        for (Py_ssize_t ox = 0; ox < k->out_w; ox++, dst += row) {
            float *at = dst;
            Py_ssize_t left = ox * k->stride[1] - k->pad[1];
            for (Py_ssize_t ky = 0; ky < k->kernel[0]; ky++) {
                Py_ssize_t iy = oy * k->stride[0] - k->pad[0] + ky * k->dilate[0];
                if (iy < 0 || iy >= k->height) {
                    memset(at, 0, (size_t)(k->kernel[1] * c) * sizeof(float));
                    at += k->kernel[1] * c;
                    continue;
                }
                const float *line_in = sample + iy * k->width * c;
                if (k->dilate[1] == 1) {    /* the taps [first, end) lie inside */
                    Py_ssize_t kw = k->kernel[1];
                    Py_ssize_t first = left >= 0 ? 0 : -left < kw ? -left : kw;
                    Py_ssize_t end = k->width - left < kw ? k->width - left : kw;
                    end = end > first ? end : first;
                    memset(at, 0, (size_t)(first * c) * sizeof(float));
                    if (end > first) {
                        memcpy(at + first * c, line_in + (left + first) * c,
                               (size_t)((end - first) * c) * sizeof(float));
                    }
                    memset(at + end * c, 0, (size_t)((kw - end) * c) * sizeof(float));
                    at += kw * c;
                    continue;
                }
                for (Py_ssize_t kx = 0; kx < k->kernel[1]; kx++, at += c) {
                    Py_ssize_t ix = left + kx * k->dilate[1];
                    if (ix < 0 || ix >= k->width) {
                        memset(at, 0, (size_t)c * sizeof(float));
                    } else {
                        memcpy(at, line_in + ix * c, (size_t)c * sizeof(float));
                    }
                }
            }
        }
    }
}

static int parse_patches(PyObject *args, Job *j) {
    PyObject *x, *rows;
    Py_ssize_t xs[4];
    Patches *k = &j->k.patches;
    if (!PyArg_ParseTuple(args, "OO(nn)(nn)(nn)(nn)(nn)(nn):patches", &x, &rows, &k->out_h,
                          &k->out_w, &k->pad[0], &k->pad[1], &k->stride[0], &k->stride[1],
                          &k->kernel[0], &k->kernel[1], &k->dilate[0], &k->dilate[1], &j->lo,
                          &j->hi) ||
        !(k->x = borrow(&j->b, x, "x", xs, 0, 0, 0))) {
        return 0;
    }
    k->batch = xs[0], k->height = xs[1], k->width = xs[2], k->channels = xs[3];
    for (int i = 0; i < 2; i++) {
        if (k->stride[i] < 1 || k->kernel[i] < 1 || k->dilate[i] < 1 || k->pad[i] < 0) {
            PyErr_Format(PyExc_ValueError, "patches: stride (%zd, %zd), kernel (%zd, %zd) and "
                         "dilate (%zd, %zd) must be >= 1, pad (%zd, %zd) >= 0", k->stride[0],
                         k->stride[1], k->kernel[0], k->kernel[1], k->dilate[0], k->dilate[1],
                         k->pad[0], k->pad[1]);
            return 0;
        }
    }
    if (k->out_h < 0 || k->out_w < 0 || j->lo < 0 || j->lo > j->hi ||
        j->hi > k->batch * k->out_h) {
        PyErr_Format(PyExc_ValueError, "patches: output lines [%zd, %zd) of %zd samples of "
                     "(%zd, %zd): expected 0 <= lo <= hi <= %zd", j->lo, j->hi, k->batch,
                     k->out_h, k->out_w, k->batch * k->out_h);
        return 0;
    }
    j->run = run_patches;
    return (k->rows = borrow(&j->b, rows, "rows", NULL, 0, (j->hi - j->lo) * k->out_w *
                             k->kernel[0] * k->kernel[1] * k->channels, 1)) != NULL;
}

/* One call of the kernel that `parse` reads: its arrays borrowed, run without the GIL. */
static PyObject *call(PyObject *args, int (*parse)(PyObject *, Job *)) {
    Job j = {.b = {.count = 0}};
    if (!parse(args, &j)) {
        end_job(&j);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    j.run(&j);
    Py_END_ALLOW_THREADS
    end_job(&j);
    Py_RETURN_NONE;
}

static PyObject *convolve(PyObject *self, PyObject *args) {
    return call(args, parse_convolve);
}

static PyObject *transform_weights(PyObject *self, PyObject *args) {
    return call(args, parse_transform_weights);
}

static PyObject *line_weights(PyObject *self, PyObject *args) {
    return call(args, parse_line_weights);
}

static PyObject *weight_gradient(PyObject *self, PyObject *args) {
    return call(args, parse_weight_gradient);
}

static PyObject *finish_gradient(PyObject *self, PyObject *args) {
    return call(args, parse_finish_gradient);
}

static PyObject *pointwise_gradient(PyObject *self, PyObject *args) {
    return call(args, parse_pointwise_gradient);
}

static PyObject *pointwise(PyObject *self, PyObject *args) {
    return call(args, parse_pointwise);
}

static PyObject *line(PyObject *self, PyObject *args) {
    return call(args, parse_line);
}

static PyObject *patches(PyObject *self, PyObject *args) {
    return call(args, parse_patches);
}

static PyObject *dense(PyObject *self, PyObject *args) {
    return call(args, parse_dense);
}

/* ------------------------------------------------------------------------------------------ */
/* team(): several calls of one kernel at once, on the OpenMP team of the calling thread */

static const struct {
    PyCFunction function;
    int (*parse)(PyObject *, Job *);
} team_kernels[] = {
    {convolve, parse_convolve},
    {transform_weights, parse_transform_weights},
    {line_weights, parse_line_weights},
    {weight_gradient, parse_weight_gradient},
    {finish_gradient, parse_finish_gradient},
    {pointwise_gradient, parse_pointwise_gradient},
    {pointwise, parse_pointwise},
    {line, parse_line},
    {dense, parse_dense},
};

/* Runs the `n` jobs, job i on team thread i % threads; with `cores`, team thread t > 0 pins
 * itself to cores[t] first (the caller, thread 0, stays where it is). */
static void run_team(Job *jobs, Py_ssize_t n, const int *cores) {
#pragma omp parallel num_threads((int)n) if (n > 1)
    {
        int t = TEAM_THREAD(), threads = TEAM_SIZE();
        team_pin(cores, t);
        for (Py_ssize_t i = t; i < n; i += threads) {
            jobs[i].run(&jobs[i]);
        }
    }
}

static PyObject *team(PyObject *self, PyObject *args) {
    PyObject *kernel, *calls, *cores = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O:team", &kernel, &calls, &cores)) {
        return NULL;
    }
    int (*parse)(PyObject *, Job *) = NULL;
    if (PyCFunction_Check(kernel) && PyCFunction_GET_SELF(kernel) == self) {
        for (size_t i = 0; i < sizeof team_kernels / sizeof team_kernels[0]; i++) {
            if (PyCFunction_GET_FUNCTION(kernel) == team_kernels[i].function) {
                parse = team_kernels[i].parse;
            }
        }
    }
    if (parse == NULL) {
        PyErr_Format(PyExc_TypeError, "kernel: expected one of this module's kernels "
                     "(convolve, transform_weights, weight_gradient, finish_gradient, "
                     "pointwise_gradient, pointwise, line, dense), got %R", kernel);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(calls, "calls: expected a sequence of argument tuples");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), parsed = 0;
    int asked = 0, ok = 1;
    int *core_list = team_cores(cores, n, "calls", &asked);
    Job *jobs = NULL;
    if ((asked && core_list == NULL) || n == 0) {
        ok = !asked || core_list != NULL;
    } else if ((jobs = PyMem_Calloc((size_t)n, sizeof(Job))) == NULL) {
        PyErr_NoMemory();
        ok = 0;
    } else {
        for (; ok && parsed < n; parsed++) {
            PyObject *item = PySequence_Fast_GET_ITEM(seq, parsed);
            if (!PyTuple_Check(item)) {
                PyErr_Format(PyExc_TypeError, "calls[%zd]: expected a tuple of the kernel's "
                             "arguments, got %.100s", parsed, Py_TYPE(item)->tp_name);
                ok = 0;
            } else {
                ok = parse(item, &jobs[parsed]);
            }
        }
        if (ok) {
            Py_BEGIN_ALLOW_THREADS
            run_team(jobs, n, core_list);
            Py_END_ALLOW_THREADS
        }
        for (Py_ssize_t i = 0; i < parsed; i++) {
            end_job(&jobs[i]);
        }
    }
    PyMem_Free(jobs);
    PyMem_Free(core_list);
    Py_DECREF(seq);
    if (!ok) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *own_u_floats(PyObject *self, PyObject *args) {
    Py_ssize_t panels, channels;
    if (!PyArg_ParseTuple(args, "nn:own_u_floats", &panels, &channels)) {
        return NULL;
    }
    if (panels < 1 || channels < 1) {
        PyErr_Format(PyExc_ValueError, "own_u_floats: panels %zd and channels %zd must be >= 1",
                     panels, channels);
        return NULL;
    }
    return PyLong_FromSsize_t(POSITIONS * own_u_step(panels, channels) + PANEL);
}

static PyObject *tile_floats(PyObject *self, PyObject *args) {
    Py_ssize_t count, row;
    if (!PyArg_ParseTuple(args, "nn:tile_floats", &count, &row)) {
        return NULL;
    }
    if (count < 0 || row < 0) {
        PyErr_Format(PyExc_ValueError, "tile_floats: count %zd and row %zd must be >= 0",
                     count, row);
        return NULL;
    }
    return PyLong_FromSsize_t(POSITIONS * position_stride(count, row));
}

/* Whether `level`'s build exists here and the CPU runs it. */
static int supported(int level) {
#if HAVE_AVX2_BUILD
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return level == BASELINE || (avx2 && (level == AVX2 || (
        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))));
#else
    return level == BASELINE;
#endif
}

static PyMethodDef methods[] = {
    {"convolve", convolve, METH_VARARGS,
     "convolve(x, u, out, bias, residual, relu, (pad_top, pad_left), (tile_lo, tile_hi),\n"
     "         (f_lo, f_hi), chunk, v, m, claim=None, claim_panels=0, w=None, scale=None,\n"
     "         ahead_items=0)\n\n"
     "out[..., f_lo:f_hi] = relu?(conv(x, w) + bias + residual) over the output tiles\n"
     "[tile_lo, tile_hi), `chunk` tiles at a time. x, out, residual: NHWC float32; u: G w G^T\n"
     "as (36, ceil(F / 16), C, 16); v, m: scratch of tile_floats(chunk, C) and\n"
     "tile_floats(chunk, round_up(f_hi - f_lo, 16)) floats. bias and residual may be None.\n"
     "claim: an int64 array of one value, 0 before the first of the threads that share the\n"
     "work calls (each with the same arguments but its own v and m); each then takes the\n"
     "next chunk of tiles (claim_panels 0), or the next group of claim_panels filter panels\n"
     "of a chunk, chunk by chunk (then m needs tile_floats(chunk, 16 * claim_panels)), until\n"
     "none is left. w: OHWI 3x3 weights (any strides), times scale (per filter) where given:\n"
     "each thread then transforms the weights of the groups of filters it takes into its own\n"
     "u, of own_u_floats(claim_panels, C) floats, instead of reading U of all of them;\n"
     "during each item's products it fetches the weights of the item ahead_items on (0:\n"
     "none), the one it likely takes next where that many threads share the claim."},
    {"transform_weights", transform_weights, METH_VARARGS,
     "transform_weights(w, u, (panel_lo, panel_hi), scale=None)\n\n"
     "u = G w G^T of OHWI 3x3 float32 weights of any strides (a view of OIHW weights, or\n"
     "one flipped) as (36, ceil(F / 16), C, 16), the panels of 16 filters\n"
     "[panel_lo, panel_hi) only; zeros past the last filter. scale: F float32 factors, each\n"
     "filter's weights multiplied by its own before the transform (one rounding, as\n"
     "NumPy's w * scale)."},
    {"line_weights", line_weights, METH_VARARGS,
     "line_weights(w, g, u, (panel_lo, panel_hi), scale=None)\n\n"
     "u = G g of the 1-D Winograd F(m, r): w the taps as (F, r, 1, C) float32 of any\n"
     "strides, g float64 G (points, r), u (points, ceil(F / 16), C, 16), the panels of 16\n"
     "filters [panel_lo, panel_hi) only, zeros past the last filter. Each value summed over\n"
     "the taps in double, times the filter's scale (F float32 factors) where given, rounded\n"
     "once to float32."},
    {"weight_gradient", weight_gradient, METH_VARARGS,
     "weight_gradient(x, dy, du, (pad_top, pad_left), (tile_lo, tile_hi), (f_lo, f_hi),\n"
     "                chunk, v, m, zero=False)\n\n"
     "du[p, :, f_lo:f_hi] += sum over the output tiles [tile_lo, tile_hi) of (B^T d B)[p]^T\n"
     "(A dY A^T)[p], `chunk` tiles at a time: the weight gradient of conv(x, w) in the\n"
     "Winograd domain (finish_gradient() returns it to 3x3); with zero, du[p, :, f_lo:f_hi]\n"
     "(whole panels) is zeroed first. x: NHWC input; dy: NHWC output gradient; du: the 36\n"
     "positions p of (C, round_up(F, 16)), tile_floats(C, round_up(F, 16)) floats; v, m:\n"
     "scratch of tile_floats(chunk, C) and tile_floats(chunk, round_up(f_hi - f_lo, 16))\n"
     "floats. f_lo a multiple of 16."},
    {"finish_gradient", finish_gradient, METH_VARARGS,
     "finish_gradient(du, dw, (c_lo, c_hi))\n\n"
     "dw[..., c_lo:c_hi] = G^T du G: the OHWI 3x3 weight gradient of the channels\n"
     "[c_lo, c_hi) from weight_gradient()'s sums (du laid out as there)."},
    {"pointwise_gradient", pointwise_gradient, METH_VARARGS,
     "pointwise_gradient(dy, x, dw, db, (lo, hi), chunk, zero=False)\n\n"
     "dw += dy^T x (with zero, dw = and db =) over the rows [lo, hi) of the (N*H*W, F) and\n"
     "(N*H*W, C) matrices that the\n"
     "NHWC arrays dy and x are, `chunk` rows at a time: the weight gradient of a 1x1\n"
     "stride-1 convolution, (F, C) float32 values (OHWI). C a multiple of 16. db, None or F\n"
     "float32 values: += the column sums of those rows of dy (the bias gradient)."},
    {"pointwise", pointwise, METH_VARARGS,
     "pointwise(x, u, out, bias, residual, relu, (lo, hi), chunk, depth, claim=None)\n\n"
     "out = relu?(x @ W^T + residual + bias) over the rows [lo, hi) of the (N*H*W, C) and\n"
     "(N*H*W, F) matrices that the NHWC arrays x and out are: a 1x1 stride-1 convolution.\n"
     "u: W (F, C) as ceil(F / 16) panels of (C, 16), zeros past the last filter. `chunk`\n"
     "rows at a time, `depth` channels at a time. bias (F values) and residual (shaped like\n"
     "out; it may be out itself) may be None. claim: as convolve()'s, the threads then\n"
     "take the next chunk of rows from it."},
    {"line", line, METH_VARARGS,
     "line(x, u, out, bias, residual, relu, axis, pad, bt, at, (tile_lo, tile_hi), chunk,\n"
     "     v, m, claim=None)\n\n"
     "out = relu?(conv(x, w) + bias + residual) for a kernel of r taps along `axis` (1: the\n"
     "rows, an r x 1 kernel; 2: the columns, 1 x r), stride 1, `pad` zeros before the first\n"
     "input along it, by Winograd F(m, r) over the output tiles [tile_lo, tile_hi), `chunk`\n"
     "tiles at a time. A tile is m outputs along the axis; it reads a = m + r - 1 inputs.\n"
     "x, out, residual: NHWC float32, the same along the other axis; bt: B^T (a x a); at:\n"
     "A^T (m x a), a <= 12, m <= 8; u: G w as (a, ceil(F / 16), C, 16), zeros past the last\n"
     "filter; v, m: scratch of a * chunk * C and a * chunk * round_up(F, 16) floats. bias\n"
     "and residual (it may be out itself) may be None. Tiles are numbered sample, row, tile\n"
     "(axis 2) or sample, tile, column (axis 1). claim: as convolve()'s, the threads then\n"
     "take the next chunk of tiles from it."},
    {"dense", dense, METH_VARARGS,
     "dense(x, w, bias, out, relu, (lo, hi), chunk, claim=None)\n\n"
     "out[:, lo:hi] = relu?(x @ w[lo:hi].T + bias[lo:hi]): an inner product of a few rows,\n"
     "x (rows, inputs), w (outputs, inputs) and out (rows, outputs) C-contiguous float32,\n"
     "bias None or one value per output. Each row of w is read once for up to 4 rows of x\n"
     "(more rows read it again for each 4), each output summed in 16 lanes, input j into\n"
     "lane j % 16, then the lanes in a fixed tree: the same bits on any thread and in the\n"
     "AVX2 and AVX-512 builds. claim: as convolve()'s, the threads then take the next\n"
     "`chunk` outputs from it."},
    {"team", team, METH_VARARGS,
     "team(kernel, calls, cores=None)\n\n"
     "kernel(*args) for each tuple of arguments in `calls`, all at once: call i runs on\n"
     "thread i of the calling thread's OpenMP team (the threads that its oneDNN kernels\n"
     "use), the caller running call 0, where the module is built with OpenMP (`openmp`\n"
     "true), else one after the other. Calls that share a claim share its work as on\n"
     "separate threads. kernel: one of this module's kernels. cores: None or a core number\n"
     "for each call; team thread i > 0 pins itself to cores[i] (Linux)."},
    {"patches", patches, METH_VARARGS,
     "patches(x, rows, (out_h, out_w), (pad_top, pad_left), (stride_h, stride_w),\n"
     "        (kernel_h, kernel_w), (dilate_h, dilate_w), (lo, hi))\n\n"
     "im2col of channel-last float32 x (N, H, W, C): for each output pixel of the output\n"
     "lines [lo, hi) (line = sample * out_h + output row), one row of rows: the kernel's taps\n"
     "in (y, x) order, C values each, zeros where a tap falls in the padding. rows: at least\n"
     "(hi - lo) * out_w * kernel_h * kernel_w * C float32 values, C-contiguous."},
    {"own_u_floats", own_u_floats, METH_VARARGS,
     "own_u_floats(panels, channels)\n\nThe floats of a thread's own U for convolve() with w "
     "and claim_panels\npanels: each position an odd number of cache lines, and one line more "
     "to align it."},
    {"tile_floats", tile_floats, METH_VARARGS,
     "tile_floats(count, row): the floats of convolve()'s or weight_gradient()'s v (row: the\n"
     "channels) or m (row: the filters of one thread's range in whole panels) for chunks of\n"
     "`count` tiles, or of weight_gradient()'s du (count: the channels; row: the filters in\n"
     "whole panels): 36 positions of count * row floats, each rounded up to an odd number of\n"
     "cache lines."},
    {"instruction_set", instruction_set, METH_NOARGS,
     "The build that runs: 'avx512' (AVX-512 F and VL), 'avx2' (AVX2 + FMA) or 'baseline'."},
    {"use_instruction_set", use_instruction_set, METH_VARARGS,
     "use_instruction_set('avx512', 'avx2' or 'baseline'): the build that runs from now on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ember._winograd",
    .m_doc = "Winograd F(4x4, 3x3) convolution of channel-last float32 data, its weight "
             "gradient, the weight gradient of 1x1 convolutions by the same sums, and "
             "1-D Winograd F(m, r) convolutions of 1 x r and r x 1 kernels.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__winograd(void) {
    build = widest_build();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "openmp", TEAM_OPENMP) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

#else            /* ISA defined: the kernels of one build */

/* ------------------------------------------------------------------------------------------ */
/* Vectors of n <= LANES floats: lanes past n read as zero and are not written. Callers pass
 * n = LANES as a constant for whole vectors, which makes each access one instruction. */

INLINE vec ISA(load)(const float *p, Py_ssize_t n) {
    if (n == LANES) {
        return *(const unaligned_vec *)p;
    }
    vec v = {0};
    memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}

INLINE void ISA(store)(float *p, const vec *v, Py_ssize_t n) {
    if (n == LANES) {
        *(unaligned_vec *)p = *v;
    } else {
        memcpy(p, v, (size_t)n * sizeof(float));
    }
}

INLINE vec ISA(splat)(float s) {
    vec v = {s, s, s, s, s, s, s, s};
    return v;
}

/* a * b + c. setup.py compiles the module with -ffp-contract=off, so the compiler fuses
 * nothing by itself: only these do, rounding once where the build has FMA (twice in the
 * baseline one). Left to the compiler, whether an expression is fused depends on its version
 * and on the code around it (GCC 13 fuses the same product differently in the one- and
 * two-panel register blocks); written out, every build, code path and compiler sums each
 * output through the same chain of roundings. */
INLINE vec ISA(fma)(vec a, vec b, vec c) {
#ifdef FUSED
    return (vec)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}

/* max(v, 0) as np.maximum computes it: NaN stays NaN. */
INLINE void ISA(relu)(vec *v) {
    mask keep = (*v > 0) | (*v != *v);
    *v = (vec)((mask)*v & keep);
}

/* B^T d for the 6 values d[0], d[step], ..., d[5 * step] (Lavin and Gray's F(4x4, 3x3)). */
INLINE void ISA(input_1d)(const vec *d, Py_ssize_t step, vec *t) {
    vec d0 = d[0], d1 = d[step], d2 = d[2 * step], d3 = d[3 * step], d4 = d[4 * step],
        d5 = d[5 * step];
    vec four = ISA(splat)(4.0f), minus_four = ISA(splat)(-4.0f), minus_five = ISA(splat)(-5.0f),
        two = ISA(splat)(2.0f), minus_two = ISA(splat)(-2.0f);
    vec a = d3 + d4, b = d1 + d2, c = d4 - d3, e = d1 - d2, f = d4 - d2, g = d3 - d1;
    t[0] = ISA(fma)(four, d0, ISA(fma)(minus_five, d2, d4));
    t[1] = ISA(fma)(minus_four, b, a);
    t[2] = ISA(fma)(four, e, c);
    t[3] = ISA(fma)(two, g, f);
    t[4] = ISA(fma)(minus_two, g, f);
    t[5] = ISA(fma)(four, d1, ISA(fma)(minus_five, d3, d5));
}

/* A^T m for the 6 values m[0], m[step], ..., m[5 * step]. */
INLINE void ISA(output_1d)(const vec *m, Py_ssize_t step, vec *o, Py_ssize_t out_step) {
    vec m1 = m[step], m2 = m[2 * step], m3 = m[3 * step], m4 = m[4 * step];
    vec sum12 = m1 + m2, diff12 = m1 - m2, sum34 = m3 + m4, diff34 = m3 - m4;
    o[0] = m[0] + sum12 + sum34;
    o[out_step] = ISA(fma)(ISA(splat)(2.0f), diff34, diff12);
    o[2 * out_step] = ISA(fma)(ISA(splat)(4.0f), sum34, sum12);
    o[3 * out_step] = ISA(fma)(ISA(splat)(8.0f), diff34, diff12) + m[5 * step];
}

/* (sample, tile row, tile column) of tile number t. */
INLINE void ISA(tile_place)(const Geometry *g, Py_ssize_t t, Py_ssize_t *sample,
                            Py_ssize_t *row, Py_ssize_t *col) {
    Py_ssize_t per_sample = g->tiles_h * g->tiles_w;
    *sample = t / per_sample;
    *row = t % per_sample / g->tiles_w;
    *col = t % g->tiles_w;
}

/* ------------------------------------------------------------------------------------------ */
/* Input transform */

/* Pointers to the 36 patch pixels of tile t (channel 0); padding points to `zeros`. */
INLINE void ISA(patch_pixels)(const Conv *k, Py_ssize_t t, const float **pixel) {
    const Geometry *g = &k->g;
    Py_ssize_t sample, row, col;
    ISA(tile_place)(g, t, &sample, &row, &col);
    Py_ssize_t top = OUT * row - g->pad_top, left = OUT * col - g->pad_left;
    const float *base = k->x + sample * g->height * g->width * g->channels;
    UNROLL
    for (int i = 0; i < TILE; i++) {
        UNROLL
        for (int j = 0; j < TILE; j++) {
            Py_ssize_t y = top + i, x = left + j;
            int inside = y >= 0 && y < g->height && x >= 0 && x < g->width;
            pixel[i * TILE + j] = inside ? base + (y * g->width + x) * g->channels : k->zeros;
        }
    }
}

/* The n <= LANES channels from c of one tile. Each pass reads its 6 vectors and writes its 6
 * results straight through, so only the intermediate (d B) goes to the stack. */
INLINE void ISA(input_block)(const float **pixel, Py_ssize_t c, Py_ssize_t n, float *v,
                             Py_ssize_t stride) {
    vec rows[POSITIONS];
    UNROLL
    for (int i = 0; i < TILE; i++) {                /* d B: along each row of the patch */
        vec d[TILE];
        UNROLL
        for (int j = 0; j < TILE; j++) {
            d[j] = ISA(load)(pixel[i * TILE + j] + c, n);
        }
        ISA(input_1d)(d, 1, rows + i * TILE);
    }
    UNROLL
    for (int j = 0; j < TILE; j++) {                /* B^T (d B): down each column */
        vec t[TILE];
        ISA(input_1d)(rows + j, TILE, t);
        UNROLL
        for (int i = 0; i < TILE; i++) {
            ISA(store)(v + (i * TILE + j) * stride + c, &t[i], n);
        }
    }
}

/* V of the `count` tiles from `first`. */
INLINE void ISA(input_chunk)(const Conv *k, Py_ssize_t first, Py_ssize_t count) {
    Py_ssize_t channels = k->g.channels, stride = position_stride(count, channels);
    const float *pixel[POSITIONS];
    for (Py_ssize_t t = 0; t < count; t++) {
        ISA(patch_pixels)(k, first + t, pixel);
        float *v = k->v + t * channels;
        Py_ssize_t c = 0;
        for (; c + LANES <= channels; c += LANES) {
            ISA(input_block)(pixel, c, LANES, v, stride);
        }
        if (c < channels) {
            ISA(input_block)(pixel, c, channels - c, v, stride);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Products: M[p] (count x width) = V[p] (count x C) @ U[p] (C x width) */

/* The register block both products share: for each of `rows` rows r,
   sum[r] = sum over k < steps of a[r * a_row + k * a_step] * (the 16 floats at b + k * b_step). */
INLINE void ISA(outer_sums)(const float *a, Py_ssize_t a_row, Py_ssize_t a_step,
                            const float *b, Py_ssize_t b_step, Py_ssize_t steps,
                            vec sum[ROWS][2], int rows) {
    UNROLL
    for (int r = 0; r < rows; r++) {
        sum[r][0] = sum[r][1] = ISA(splat)(0.0f);
    }
    for (Py_ssize_t k = 0; k < steps; k++) {
        vec low = ISA(load)(b + k * b_step, LANES), high = ISA(load)(b + k * b_step + LANES, LANES);
        UNROLL
        for (int r = 0; r < rows; r++) {
            vec value = ISA(splat)(a[r * a_row + k * a_step]);
            sum[r][0] = ISA(fma)(value, low, sum[r][0]);
            sum[r][1] = ISA(fma)(value, high, sum[r][1]);
        }
    }
}

/* `rows` <= ROWS rows of v (v_row floats apart) by one panel of 16 filters, the sum over
 * `steps` channels in registers. */
INLINE void ISA(product_block)(const float *v, Py_ssize_t v_row, Py_ssize_t steps,
                               const float *panel, float *m, Py_ssize_t width, int rows) {
    vec sum[ROWS][2];
    ISA(outer_sums)(v, v_row, 1, panel, PANEL, steps, sum, rows);
    UNROLL
    for (int r = 0; r < rows; r++) {
        ISA(store)(m + r * width, &sum[r][0], LANES);
        ISA(store)(m + r * width + LANES, &sum[r][1], LANES);
    }
}

/* The last block of a position has 1..ROWS tiles: one constant count per branch. */
INLINE void ISA(product_tail)(const float *v, Py_ssize_t v_row, Py_ssize_t steps,
                              const float *panel, float *m, Py_ssize_t width, Py_ssize_t rows) {
    switch (rows) {
    case 1: ISA(product_block)(v, v_row, steps, panel, m, width, 1); break;
    case 2: ISA(product_block)(v, v_row, steps, panel, m, width, 2); break;
    case 3: ISA(product_block)(v, v_row, steps, panel, m, width, 3); break;
    case 4: ISA(product_block)(v, v_row, steps, panel, m, width, 4); break;
    case 5: ISA(product_block)(v, v_row, steps, panel, m, width, 5); break;
    default: ISA(product_block)(v, v_row, steps, panel, m, width, ROWS); break;
    }
}

#ifdef WIDE
/* The AVX-512 register block: WIDE_ROWS rows by two panels (32 filters), or by one panel where
 * a single one is left. Each output is the same chain of multiply-adds, in the same order, as
 * in outer_sums(): the builds agree bit for bit. */
#define WIDE_ROWS 12
typedef float wide __attribute__((vector_size(PANEL * sizeof(float))));
typedef float unaligned_wide __attribute__((vector_size(PANEL * sizeof(float)), aligned(4)));

INLINE wide ISA(wide_splat)(float s) {
    wide v = {s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
    return v;
}

INLINE wide ISA(wide_fma)(wide a, wide b, wide c) {
    return (wide)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}

/* For each of `rows` rows r and each of the `panels` (1 or 2) panels j: sum[r][j] = sum over
   k < steps of a[r * a_row + k * a_step] * (the 16 floats at b + k * b_step + j * b_next). */
/* One step k of wide_sums(): the rows' values at k times the panels' vectors at k. */
INLINE void ISA(wide_step)(const float *a, Py_ssize_t a_row, Py_ssize_t a_step,
                           const float *b, Py_ssize_t b_step, Py_ssize_t b_next, Py_ssize_t k,
                           wide sum[WIDE_ROWS][2], int rows, int panels) {
    wide first = *(const unaligned_wide *)(b + k * b_step);
    wide second = panels == 2 ? *(const unaligned_wide *)(b + k * b_step + b_next) : first;
    UNROLL
    for (int r = 0; r < rows; r++) {
        wide value = ISA(wide_splat)(a[r * a_row + k * a_step]);
        sum[r][0] = ISA(wide_fma)(value, first, sum[r][0]);
        if (panels == 2) {
            sum[r][1] = ISA(wide_fma)(value, second, sum[r][1]);
        }
    }
}

INLINE void ISA(wide_sums)(const float *a, Py_ssize_t a_row, Py_ssize_t a_step,
                           const float *b, Py_ssize_t b_step, Py_ssize_t b_next,
                           const float *ahead, Py_ssize_t steps, wide sum[WIDE_ROWS][2],
                           int rows, int panels) {
    UNROLL
    for (int r = 0; r < rows; r++) {
        sum[r][0] = sum[r][1] = ISA(wide_splat)(0.0f);
    }
    /* two loops: with the test inside one, pointwise() took 10.0 against 8.2 ms on 64->256
     * at 56x56, batch 32, where its later chunks pass no `ahead` */
    if (ahead == NULL) {
        for (Py_ssize_t k = 0; k < steps; k++) {
            ISA(wide_step)(a, a_row, a_step, b, b_step, b_next, k, sum, rows, panels);
        }
        return;
    }
    for (Py_ssize_t k = 0; k < steps; k++) {
        __builtin_prefetch(ahead + k * b_step, 0, 3);
        __builtin_prefetch(ahead + k * b_step + b_next, 0, 3);
        ISA(wide_step)(a, a_row, a_step, b, b_step, b_next, k, sum, rows, panels);
    }
}

/* Calls block(..., rows, panels) with both as constants, rows = 1 .. WIDE_ROWS. */
#define WIDE_BLOCK(block, rows, panels, ...)                                                   \
    do {                                                                                       \
        switch ((panels) * 16 + (int)(rows)) {                                                 \
        case 17: block(__VA_ARGS__, 1, 1); break;  case 33: block(__VA_ARGS__, 1, 2); break;   \
        case 18: block(__VA_ARGS__, 2, 1); break;  case 34: block(__VA_ARGS__, 2, 2); break;   \
        case 19: block(__VA_ARGS__, 3, 1); break;  case 35: block(__VA_ARGS__, 3, 2); break;   \
        case 20: block(__VA_ARGS__, 4, 1); break;  case 36: block(__VA_ARGS__, 4, 2); break;   \
        case 21: block(__VA_ARGS__, 5, 1); break;  case 37: block(__VA_ARGS__, 5, 2); break;   \
        case 22: block(__VA_ARGS__, 6, 1); break;  case 38: block(__VA_ARGS__, 6, 2); break;   \
        case 23: block(__VA_ARGS__, 7, 1); break;  case 39: block(__VA_ARGS__, 7, 2); break;   \
        case 24: block(__VA_ARGS__, 8, 1); break;  case 40: block(__VA_ARGS__, 8, 2); break;   \
        case 25: block(__VA_ARGS__, 9, 1); break;  case 41: block(__VA_ARGS__, 9, 2); break;   \
        case 26: block(__VA_ARGS__, 10, 1); break; case 42: block(__VA_ARGS__, 10, 2); break;  \
        case 27: block(__VA_ARGS__, 11, 1); break; case 43: block(__VA_ARGS__, 11, 2); break;  \
        case 28: block(__VA_ARGS__, 12, 1); break; default: block(__VA_ARGS__, 12, 2); break;  \
        }                                                                                      \
    } while (0)

/* `rows` rows of v (v_row floats apart) by `panels` panels, the sum over `steps` channels:
   M's rows from V's rows and U's panels (the next one panel_next floats on). */
INLINE void ISA(wide_product)(const float *v, Py_ssize_t v_row, Py_ssize_t steps,
                              const float *panel, Py_ssize_t panel_next, const float *ahead,
                              float *m, Py_ssize_t width, int rows, int panels) {
    wide sum[WIDE_ROWS][2];
    ISA(wide_sums)(v, v_row, 1, panel, PANEL, panel_next, ahead, steps, sum, rows, panels);
    UNROLL
    for (int r = 0; r < rows; r++) {
        *(unaligned_wide *)(m + r * width) = sum[r][0];
        if (panels == 2) {
            *(unaligned_wide *)(m + r * width + PANEL) = sum[r][1];
        }
    }
}

/* dU's `rows` channels by `panels` panels += the sums over the chunk's `count` tiles. */
INLINE void ISA(wide_gradient_sum)(const float *v, Py_ssize_t channels, const float *m,
                                   Py_ssize_t width, Py_ssize_t count, float *du,
                                   Py_ssize_t du_row, int rows, int panels) {
    wide sum[WIDE_ROWS][2];
    ISA(wide_sums)(v, 1, channels, m, width, PANEL, NULL, count, sum, rows, panels);
    UNROLL
    for (int r = 0; r < rows; r++) {
        for (int j = 0; j < panels; j++) {
            unaligned_wide *at = (unaligned_wide *)(du + r * du_row + j * PANEL);
            *at = *at + sum[r][j];
        }
    }
}
#endif

/* M[p] (count x width) = V[p] (count x channels) @ U[p] (channels x width) for the `positions`
 * positions p, V and M position-major, their positions v_step and m_step floats apart; U's
 * positions u_step floats apart, each (panels, channels, PANEL), its panels from first_panel.
 * The 2-D and the 1-D convolutions share it, and so its register blocks. */
INLINE void ISA(products)(const float *vs, Py_ssize_t v_step, const float *u, float *ms,
                          Py_ssize_t m_step, int positions, Py_ssize_t count,
                          Py_ssize_t channels, Py_ssize_t u_step, Py_ssize_t first_panel,
                          Py_ssize_t width, const char *fetch, Py_ssize_t fetch_lines) {
    for (int p = 0; p < positions; p++) {
        /* a share of the `fetch_lines` cache lines from `fetch` into L2, position by position:
         * memory another call reads next */
        for (Py_ssize_t line = fetch_lines * p / positions;
             line < fetch_lines * (p + 1) / positions; line++) {
            __builtin_prefetch(fetch + 64 * line, 0, 2);
        }
        const float *v = vs + p * v_step;
        float *m = ms + p * m_step;
#ifdef WIDE
        for (Py_ssize_t f = 0; f < width; f += 2 * PANEL) {
            const float *panel = u + p * u_step + (first_panel + f / PANEL) * channels * PANEL;
            int pair = f + PANEL < width ? 2 : 1;
            /* the panels that come next, fetched while these are multiplied: in a network
             * U comes from memory, and the hardware's prefetch alone fell behind (batch 1,
             * 8 layers with their own U in turn: 256 channels at 14x14 0.73 -> 0.62 ms a
             * layer, 128 at 28x28 0.33 -> 0.26 ms) */
            const float *ahead = NULL;
            if (f + 2 * PANEL < width) {
                ahead = panel + 2 * channels * PANEL;
            } else if (p + 1 < positions) {
                ahead = u + (p + 1) * u_step + first_panel * channels * PANEL;
            }
            /* blocks of as many rows as can be (16 tiles: 8 and 8, not 12 and 4, whose 4
             * chains of one panel wait on each multiply-add's latency) */
            Py_ssize_t blocks = (count + WIDE_ROWS - 1) / WIDE_ROWS;
            for (Py_ssize_t t = 0, b = 0, rows; t < count; t += rows, b++) {
                rows = (count - t + blocks - b - 1) / (blocks - b);
                WIDE_BLOCK(ISA(wide_product), rows, pair, v + t * channels, channels, channels,
                           panel, channels * PANEL, t ? NULL : ahead, m + t * width + f, width);
            }
        }
#else
        for (Py_ssize_t f = 0; f < width; f += PANEL) {
            const float *panel = u + p * u_step + (first_panel + f / PANEL) * channels * PANEL;
            Py_ssize_t t = 0;
            for (; t + ROWS <= count; t += ROWS) {
                ISA(product_block)(v + t * channels, channels, channels, panel,
                                   m + t * width + f, width, ROWS);
            }
            if (t < count) {
                ISA(product_tail)(v + t * channels, channels, channels, panel,
                                  m + t * width + f, width, count - t);
            }
        }
#endif
    }
}

INLINE void ISA(product_chunk)(const Conv *k, Py_ssize_t count) {
    ISA(products)(k->v, position_stride(count, k->g.channels), k->u, k->m,
                  position_stride(count, k->width), POSITIONS, count, k->g.channels,
                  k->u_step, k->f_lo / PANEL - k->u_first, k->width, k->fetch, k->fetch_lines);
}

/* ------------------------------------------------------------------------------------------ */
/* Output transform */

/* The n <= LANES filters from f (of the call's range) of one tile. */
INLINE void ISA(output_block)(const Conv *k, const OutputTile *tile, const float *m,
                              Py_ssize_t stride, Py_ssize_t f, Py_ssize_t n) {
    vec cols[OUT * TILE];
    UNROLL
    for (int j = 0; j < TILE; j++) {                /* A^T M: down each column */
        vec column[TILE];
        UNROLL
        for (int i = 0; i < TILE; i++) {
            column[i] = ISA(load)(m + (i * TILE + j) * stride + f, n);
        }
        ISA(output_1d)(column, 1, cols + j, TILE);
    }
    Py_ssize_t channel = k->f_lo + f;
    vec bias = k->bias ? ISA(load)(k->bias + channel, n) : ISA(splat)(0.0f);
    for (Py_ssize_t i = 0; i < tile->rows; i++) {   /* (A^T M) A: along each row */
        vec y[OUT];
        ISA(output_1d)(cols + i * TILE, 1, y, 1);
        for (Py_ssize_t j = 0; j < tile->cols; j++) {
            Py_ssize_t at = i * tile->row_step + j * k->g.filters + channel;
            vec value = y[j] + bias;
            if (tile->residual) {
                value += ISA(load)(tile->residual + at, n);
            }
            if (k->relu) {
                ISA(relu)(&value);
            }
            ISA(store)(tile->out + at, &value, n);
        }
    }
}

/* Y of the `count` tiles from `first`. */
INLINE void ISA(output_chunk)(const Conv *k, Py_ssize_t first, Py_ssize_t count) {
    const Geometry *g = &k->g;
    Py_ssize_t filters = k->f_hi - k->f_lo, stride = position_stride(count, k->width);
    for (Py_ssize_t t = 0; t < count; t++) {
        Py_ssize_t sample, row, col;
        ISA(tile_place)(g, first + t, &sample, &row, &col);
        Py_ssize_t top = OUT * row, left = OUT * col;
        Py_ssize_t at = ((sample * g->out_h + top) * g->out_w + left) * g->filters;
        OutputTile tile = {
            .out = k->out + at,
            .residual = k->residual ? k->residual + at : NULL,
            .rows = g->out_h - top < OUT ? g->out_h - top : OUT,
            .cols = g->out_w - left < OUT ? g->out_w - left : OUT,
            .row_step = g->out_w * g->filters,
        };
        const float *m = k->m + t * k->width;
        Py_ssize_t f = 0;
        for (; f + LANES <= filters; f += LANES) {
            ISA(output_block)(k, &tile, m, stride, f, LANES);
        }
        if (f < filters) {
            ISA(output_block)(k, &tile, m, stride, f, filters - f);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Weight transform: U = G g G^T, 16 filters (one panel) at a time */

/* G g for the 3 values g[0], g[step], g[2 * step], and the 36 values of U for the 9 taps g
 * (G g down each column of taps, then (G g) G^T along each row), on vectors of type T: the
 * 8-lane vec of every build, and the AVX-512 build's 16-lane wide. The same operations in the
 * same order: both round alike. */
#define WEIGHT_TRANSFORMS(T, SPLAT, FMA, ONE_D, TILE_OF)                                      \
    INLINE void ONE_D(const T *g, Py_ssize_t step, T *t, Py_ssize_t out_step) {               \
        T g0 = g[0], g1 = g[step], g2 = g[2 * step];                                           \
        T outer = g0 + g2, quarter = SPLAT(0.25f), sixth = SPLAT(1.0f / 6.0f);                 \
        T near = FMA(SPLAT(1.0f / 24.0f), g0, sixth * g2);                                     \
        T mid = SPLAT(1.0f / 12.0f) * g1;                                                      \
        t[0] = quarter * g0;                                                                   \
        t[out_step] = -sixth * (outer + g1);                                                   \
        t[2 * out_step] = -sixth * (outer - g1);                                               \
        t[3 * out_step] = near + mid;                                                          \
        t[4 * out_step] = near - mid;                                                          \
        t[5 * out_step] = g2;                                                                  \
    }                                                                                          \
    INLINE void TILE_OF(const T *g, T *u) {                                                    \
        T rows[TILE * 3];                                                                      \
        UNROLL                                                                                 \
        for (int j = 0; j < 3; j++) {                                                          \
            ONE_D(g + j, 3, rows + j, 3);                                                      \
        }                                                                                      \
        UNROLL                                                                                 \
        for (int i = 0; i < TILE; i++) {                                                       \
            ONE_D(rows + i * 3, 1, u + i * TILE, 1);                                           \
        }                                                                                      \
    }

WEIGHT_TRANSFORMS(vec, ISA(splat), ISA(fma), ISA(weight_1d), ISA(weight_tile))
#ifdef WIDE
WEIGHT_TRANSFORMS(wide, ISA(wide_splat), ISA(wide_fma), ISA(wide_weight_1d),
                  ISA(wide_weight_tile))
#endif

/* The 36 vectors of one channel c for the filters [f, f + n) of OHWI weights, n <= LANES,
 * each filter's taps times its scale where `scale` is given (one rounding, as NumPy's
 * w * scale). */
INLINE void ISA(weight_block)(const float *w, const Py_ssize_t *steps, const float *scale,
                              Py_ssize_t filters, Py_ssize_t f, Py_ssize_t c, vec *u) {
    float taps[9][LANES] = {{0}};
    for (Py_ssize_t k = 0; k < LANES && f + k < filters; k++) {
        const float *at = w + (f + k) * steps[0] + c * steps[3];
        UNROLL
        for (int tap = 0; tap < 9; tap++) {         /* gather: one filter's taps */
            float value = at[tap / 3 * steps[1] + tap % 3 * steps[2]];
            taps[tap][k] = scale ? value * scale[f + k] : value;
        }
    }
    vec g[9];
    UNROLL
    for (int tap = 0; tap < 9; tap++) {
        g[tap] = ISA(load)(taps[tap], LANES);
    }
    ISA(weight_tile)(g, u);
}

#if defined(__clang__)
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (mask){__VA_ARGS__})
#endif

/* The 8 x 8 transpose of r: r[i] lane j becomes r[j] lane i (LANES 8). */
INLINE void ISA(transpose8)(vec *r) {
    vec t[8], q[8];
    for (int i = 0; i < 8; i += 2) {                /* pairs of rows, within each half */
        t[i] = SHUFFLE(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = SHUFFLE(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4) {                /* fours of rows, within each half */
        q[i] = SHUFFLE(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        q[i + 1] = SHUFFLE(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        q[i + 2] = SHUFFLE(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        q[i + 3] = SHUFFLE(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int j = 0; j < 4; j++) {                   /* the halves */
        r[j] = SHUFFLE(q[j], q[j + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        r[j + 4] = SHUFFLE(q[j], q[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}

/* weight_block of the LANES channels from c at once, for LANES whole filters from f, where
 * the channels lie next to each other (steps[3] == 1: OHWI weights as inference has them).
 * Gathering across the filters read each tap's cache line for 8 channels at a time, lines that
 * lie a multiple of 1 KB apart and so fall in few L1 sets (9.8 ns a filter and channel for
 * 256 channels against 5.6 for OIHW weights); here each filter's tap is one vector of
 * channels, turned into vectors across the filters by transposes. */
INLINE void ISA(weight_blocks)(const float *w, const Py_ssize_t *steps, const float *scale,
                               Py_ssize_t f, Py_ssize_t c, vec u[][POSITIONS]) {
    vec g[LANES][9];
    vec factor = scale ? ISA(load)(scale + f, LANES) : ISA(splat)(1.0f);
    UNROLL
    for (int tap = 0; tap < 9; tap++) {
        vec r[LANES];
        for (int k = 0; k < LANES; k++) {
            r[k] = ISA(load)(w + (f + k) * steps[0] + tap / 3 * steps[1] + tap % 3 * steps[2]
                             + c, LANES);
        }
        ISA(transpose8)(r);
        for (int k = 0; k < LANES; k++) {
            g[k][tap] = scale ? r[k] * factor : r[k];
        }
    }
    for (int k = 0; k < LANES; k++) {
        ISA(weight_tile)(g[k], u[k]);
    }
}

/* U of the panels [lo, hi) (of w times `scale` per filter, where given) into u laid out as
 * (36, panels, C, PANEL) whose first panel is panel `first`; zeros past the last filter. A
 * block of channels at a time goes through the stack, so that each position's rows are
 * written as whole cache lines: the positions lie a power of two apart, in the same L1 set. */
#ifdef WIDE
/* Two vectors of 8 as one of 16: a's lanes, then b's. */
INLINE wide ISA(join)(vec a, vec b) {
    __m512d low = _mm512_castpd256_pd512(_mm256_castps_pd((__m256)a));
    return (wide)_mm512_castpd_ps(_mm512_insertf64x4(low, _mm256_castps_pd((__m256)b), 1));
}

/* The taps of the LANES channels from c (g[k]: channel c + k) for the whole panel of filters
 * from f, where the channels lie next to each other: weight_blocks()'s loads on vectors of 16
 * filters. */
INLINE void ISA(wide_weight_taps)(const float *w, const Py_ssize_t *steps, const float *scale,
                                  Py_ssize_t f, Py_ssize_t c, wide g[][9]) {
    wide factor = scale ? *(const unaligned_wide *)(scale + f) : ISA(wide_splat)(1.0f);
    UNROLL
    for (int tap = 0; tap < 9; tap++) {
        vec r[2][LANES];
        for (int half = 0; half < 2; half++) {
            for (int k = 0; k < LANES; k++) {
                r[half][k] = ISA(load)(w + (f + half * LANES + k) * steps[0]
                                       + tap / 3 * steps[1] + tap % 3 * steps[2] + c, LANES);
            }
            ISA(transpose8)(r[half]);
        }
        for (int k = 0; k < LANES; k++) {
            wide both = ISA(join)(r[0][k], r[1][k]);
            g[k][tap] = scale ? both * factor : both;
        }
    }
}

/* wide_weight_taps() where each filter's taps lie next to each other, channel by channel
 * (OIHW weights seen as OHWI, as the graph passes them): the 8 channels' 72 taps of each
 * filter are 9 vectors, transposed 8 filters at a time. Gathered, the taps of 16 filters,
 * 36 bytes x C apart, fell in few L1 sets: 19 ns a filter and channel at 256 channels. */
INLINE void ISA(wide_weight_runs)(const float *w, const Py_ssize_t *steps, const float *scale,
                                  Py_ssize_t f, Py_ssize_t c, wide g[][9]) {
    wide factor = scale ? *(const unaligned_wide *)(scale + f) : ISA(wide_splat)(1.0f);
    UNROLL
    for (int j = 0; j < 9; j++) {
        vec r[2][LANES];
        for (int half = 0; half < 2; half++) {
            for (int k = 0; k < LANES; k++) {
                r[half][k] = ISA(load)(w + (f + half * LANES + k) * steps[0] + c * 9 + j * LANES,
                                       LANES);
            }
            ISA(transpose8)(r[half]);
        }
        for (int i = 0; i < LANES; i++) {
            wide both = ISA(join)(r[0][i], r[1][i]);
            g[(j * LANES + i) / 9][(j * LANES + i) % 9] = scale ? both * factor : both;
        }
    }
}

/* The taps of channel c for the panel of filters from f, gathered (zeros past the last
 * filter). */
INLINE void ISA(wide_weight_gather)(const float *w, const Py_ssize_t *steps, const float *scale,
                                    Py_ssize_t filters, Py_ssize_t f, Py_ssize_t c, wide *g) {
    float taps[9][PANEL] = {{0}};
    for (Py_ssize_t k = 0; k < PANEL && f + k < filters; k++) {
        const float *at = w + (f + k) * steps[0] + c * steps[3];
        UNROLL
        for (int tap = 0; tap < 9; tap++) {
            float value = at[tap / 3 * steps[1] + tap % 3 * steps[2]];
            taps[tap][k] = scale ? value * scale[f + k] : value;
        }
    }
    UNROLL
    for (int tap = 0; tap < 9; tap++) {
        g[tap] = *(const unaligned_wide *)taps[tap];
    }
}
#endif

static void ISA(transform_weights)(const float *w, const Py_ssize_t *steps, const float *scale,
                                   Py_ssize_t channels, Py_ssize_t filters, float *u,
                                   Py_ssize_t u_step, Py_ssize_t first, Py_ssize_t lo,
                                   Py_ssize_t hi) {
    enum { BLOCK = 8 };
#ifdef WIDE
    /* a whole panel (16 filters) per vector: half the transforms' operations. Where U's
     * positions lie in different L1 sets (a thread's own U, own_u_step()) each channel's
     * 36 vectors go straight there; else a block of channels through the stack. */
    int straight = u_step % 1024 != 0;
    for (Py_ssize_t panel = lo; panel < hi; panel++) {
        Py_ssize_t f = panel * PANEL;
        for (Py_ssize_t c0 = 0; c0 < channels; c0 += BLOCK) {
            Py_ssize_t n = channels - c0 < BLOCK ? channels - c0 : BLOCK;
            wide g[BLOCK][9], block[BLOCK][POSITIONS];
            if ((steps[3] == 1 && c0 % (2 * BLOCK) == 0) || steps[3] == 9) {
                /* the weights come from memory: the lines 64 channels on (of this panel, or
                 * the next), of 16 streams (the filters) or 144 (also the taps, C x 4 bytes
                 * apart), too many for the hardware's prefetch, which held up the loads */
                Py_ssize_t ahead = c0 + 8 * BLOCK, next = f;
                if (ahead >= channels) {
                    ahead -= channels, next += PANEL;
                }
                for (Py_ssize_t k = next; k < next + PANEL && k < filters && k < hi * PANEL;
                     k++) {
                    const float *at = w + k * steps[0] + ahead * steps[3];
                    if (steps[3] == 1) {
                        UNROLL
                        for (int tap = 0; tap < 9; tap++) {
                            __builtin_prefetch(at + tap / 3 * steps[1] + tap % 3 * steps[2], 0,
                                               3);
                        }
                    } else {                        /* 8 channels' 288 bytes */
                        for (int line = 0; line < 5; line++) {
                            __builtin_prefetch(at + line * 16, 0, 3);
                        }
                    }
                }
            }
            int whole = n == LANES && f + PANEL <= filters;
            if (whole && steps[3] == 1) {
                ISA(wide_weight_taps)(w, steps, scale, f, c0, g);
            } else if (whole && steps[3] == 9 && steps[1] == 3 && steps[2] == 1) {
                ISA(wide_weight_runs)(w, steps, scale, f, c0, g);
            } else {
                for (Py_ssize_t c = 0; c < n; c++) {
                    ISA(wide_weight_gather)(w, steps, scale, filters, f, c0 + c, g[c]);
                }
            }
            float *at = u + ((panel - first) * channels + c0) * PANEL;
            for (Py_ssize_t c = 0; c < n; c++) {
                if (straight) {
                    wide out[POSITIONS];
                    ISA(wide_weight_tile)(g[c], out);
                    UNROLL
                    for (int p = 0; p < POSITIONS; p++) {
                        *(unaligned_wide *)(at + p * u_step + c * PANEL) = out[p];
                    }
                } else {
                    ISA(wide_weight_tile)(g[c], block[c]);
                }
            }
            for (int p = 0; p < POSITIONS && !straight; p++) {
                for (Py_ssize_t c = 0; c < n; c++) {
                    *(unaligned_wide *)(at + p * u_step + c * PANEL) = block[c][p];
                }
            }
        }
    }
#else
    for (Py_ssize_t panel = lo; panel < hi; panel++) {
        for (Py_ssize_t c0 = 0; c0 < channels; c0 += BLOCK) {
            Py_ssize_t n = channels - c0 < BLOCK ? channels - c0 : BLOCK;
            vec block[POSITIONS][BLOCK][PANEL / LANES];
            for (int half = 0; half < PANEL / LANES; half++) {
                Py_ssize_t f = panel * PANEL + half * LANES;
                if (steps[3] == 1 && n == LANES && f + LANES <= filters) {
                    vec out[LANES][POSITIONS];
                    ISA(weight_blocks)(w, steps, scale, f, c0, out);
                    for (Py_ssize_t c = 0; c < n; c++) {
                        UNROLL
                        for (int p = 0; p < POSITIONS; p++) {
                            block[p][c][half] = out[c][p];
                        }
                    }
                    continue;
                }
                for (Py_ssize_t c = 0; c < n; c++) {
                    vec out[POSITIONS];
                    ISA(weight_block)(w, steps, scale, filters, f, c0 + c, out);
                    UNROLL
                    for (int p = 0; p < POSITIONS; p++) {
                        block[p][c][half] = out[p];
                    }
                }
            }
            for (int p = 0; p < POSITIONS; p++) {
                float *at = u + p * u_step + ((panel - first) * channels + c0) * PANEL;
                memcpy(at, block[p], (size_t)n * PANEL * sizeof(float));
            }
        }
    }
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Weight gradient: dU[p] += V[p]^T (A dY A^T)[p] over the tiles, then dw = G^T dU G */

/* A d for the 4 output-gradient values d[0], d[step], ..., d[3 * step]: 6 values. */
INLINE void ISA(gradient_1d)(const vec *d, Py_ssize_t step, vec *t, Py_ssize_t out_step) {
    vec d0 = d[0], d1 = d[step], d2 = d[2 * step], d3 = d[3 * step];
    vec even = d0 + d2, odd = d1 + d3;
    vec near = ISA(fma)(ISA(splat)(4.0f), d2, d0);
    vec far = ISA(fma)(ISA(splat)(2.0f), d1, ISA(splat)(8.0f) * d3);
    t[0] = d0;
    t[out_step] = even + odd;
    t[2 * out_step] = even - odd;
    t[3 * out_step] = near + far;
    t[4 * out_step] = near - far;
    t[5 * out_step] = d3;
}

/* A dY A^T of the n <= LANES filters from f (of the call's range) of one tile; zeros stand
 * for outputs past the edges, and for lanes past n. */
INLINE void ISA(gradient_block)(const Conv *k, const OutputTile *tile, float *m,
                                Py_ssize_t stride, Py_ssize_t f, Py_ssize_t n) {
    vec rows[OUT * TILE];
    Py_ssize_t channel = k->f_lo + f;
    UNROLL
    for (int i = 0; i < OUT; i++) {                 /* d A^T: along each row */
        vec d[OUT];
        UNROLL
        for (int j = 0; j < OUT; j++) {
            d[j] = i < tile->rows && j < tile->cols
                ? ISA(load)(tile->out + i * tile->row_step + j * k->g.filters + channel, n)
                : ISA(splat)(0.0f);
        }
        ISA(gradient_1d)(d, 1, rows + i * TILE, 1);
    }
    UNROLL
    for (int j = 0; j < TILE; j++) {                /* A (d A^T): down each column */
        vec t[TILE];
        ISA(gradient_1d)(rows + j, TILE, t, 1);
        UNROLL
        for (int i = 0; i < TILE; i++) {
            ISA(store)(m + (i * TILE + j) * stride + f, &t[i], LANES);
        }
    }
}

/* A dY A^T of the `count` tiles from `first`, whole panels wide. */
INLINE void ISA(gradient_chunk)(const Conv *k, Py_ssize_t first, Py_ssize_t count) {
    const Geometry *g = &k->g;
    Py_ssize_t filters = k->f_hi - k->f_lo, stride = position_stride(count, k->width);
    for (Py_ssize_t t = 0; t < count; t++) {
        Py_ssize_t sample, row, col;
        ISA(tile_place)(g, first + t, &sample, &row, &col);
        Py_ssize_t top = OUT * row, left = OUT * col;
        OutputTile tile = {
            .out = k->out + ((sample * g->out_h + top) * g->out_w + left) * g->filters,
            .rows = g->out_h - top < OUT ? g->out_h - top : OUT,
            .cols = g->out_w - left < OUT ? g->out_w - left : OUT,
            .row_step = g->out_w * g->filters,
        };
        float *m = k->m + t * k->width;
        for (Py_ssize_t f = 0; f < k->width; f += LANES) {
            Py_ssize_t n = filters - f;
            ISA(gradient_block)(k, &tile, m, stride, f, n < 0 ? 0 : n < LANES ? n : LANES);
        }
    }
}

/* dU[c .. c + rows) x one panel += the chunk's sum over its `count` tiles. */
INLINE void ISA(sum_block)(const float *v, Py_ssize_t channels, const float *m,
                           Py_ssize_t width, Py_ssize_t count, float *du, Py_ssize_t du_row,
                           int rows) {
    vec sum[ROWS][2];
    ISA(outer_sums)(v, 1, channels, m, width, count, sum, rows);
    UNROLL
    for (int r = 0; r < rows; r++) {
        vec low = ISA(load)(du + r * du_row, LANES) + sum[r][0];
        vec high = ISA(load)(du + r * du_row + LANES, LANES) + sum[r][1];
        ISA(store)(du + r * du_row, &low, LANES);
        ISA(store)(du + r * du_row + LANES, &high, LANES);
    }
}

INLINE void ISA(sum_tail)(const float *v, Py_ssize_t channels, const float *m,
                          Py_ssize_t width, Py_ssize_t count, float *du, Py_ssize_t du_row,
                          Py_ssize_t rows) {
    switch (rows) {
    case 1: ISA(sum_block)(v, channels, m, width, count, du, du_row, 1); break;
    case 2: ISA(sum_block)(v, channels, m, width, count, du, du_row, 2); break;
    case 3: ISA(sum_block)(v, channels, m, width, count, du, du_row, 3); break;
    case 4: ISA(sum_block)(v, channels, m, width, count, du, du_row, 4); break;
    case 5: ISA(sum_block)(v, channels, m, width, count, du, du_row, 5); break;
    default: ISA(sum_block)(v, channels, m, width, count, du, du_row, ROWS); break;
    }
}

/* Fetches du's rows of the register block that follows the one at channel c and filter f, in
 * blocks of `rows` channels by `cols` filters, channels first. The weight gradient reads a
 * block's sums only after all its multiply-adds, and a position's sums (256 KB for 256 by 256
 * channels) come from L2 or L3 once per chunk: the loads stalled the block's end. resnet50_v1
 * in the training step at batch 16, two threads, alternated in one process: 256 channels at
 * 14x14 4.9-6.5 -> 4.3-5.4 ms a call; 128 at 28x28 and 64 at 56x56 even or a few per cent
 * faster. The 1x1 sums (pointwise_gradient()) fetch their next rows instead: these fetches
 * as well made a training step 1-2% slower. */
INLINE void ISA(fetch_next_sums)(float *du, Py_ssize_t du_row, Py_ssize_t channels,
                                 Py_ssize_t width, Py_ssize_t c, Py_ssize_t f, int rows,
                                 int cols) {
    c += rows;
    if (c >= channels) {
        c = 0, f += cols;
    }
    for (Py_ssize_t r = c; f < width && r < c + rows && r < channels; r++) {
        for (Py_ssize_t line = 0; line < cols && f + line < width; line += 16) {
            __builtin_prefetch(du + r * du_row + f + line, 1, 3);     /* 16 floats a line */
        }
    }
}

/* du (rows of du_row, `channels` of them) += v^T m over `count` rows: v (count x channels)
   and m (count x width, width a multiple of PANEL). With `ahead` (else NULL), the lines of
   its ranges are fetched a share per register block, so that they come from memory while
   these sums run; with `fetch`, each block's sums are fetched during the block before. */
INLINE void ISA(sum_rows)(const float *v, Py_ssize_t channels, const float *m, Py_ssize_t width,
                          Py_ssize_t count, float *du, Py_ssize_t du_row, Ahead *ahead,
                          int fetch) {
#ifdef WIDE
    Py_ssize_t blocks = (width + 2 * PANEL - 1) / (2 * PANEL)
                        * ((channels + WIDE_ROWS - 1) / WIDE_ROWS);
    Py_ssize_t share = ahead ? (ahead_lines(ahead) + blocks - 1) / blocks : 0;
    for (Py_ssize_t f = 0; f < width; f += 2 * PANEL) {
        int pair = f + PANEL < width ? 2 : 1;
        for (Py_ssize_t c = 0; c < channels; c += WIDE_ROWS) {
            Py_ssize_t rows = channels - c < WIDE_ROWS ? channels - c : WIDE_ROWS;
            if (share) {
                fetch_ahead(ahead, share);
            }
            if (fetch) {
                ISA(fetch_next_sums)(du, du_row, channels, width, c, f, WIDE_ROWS,
                                     2 * PANEL);
            }
            WIDE_BLOCK(ISA(wide_gradient_sum), rows, pair, v + c, channels, m + f, width,
                       count, du + c * du_row + f, du_row);
        }
    }
#else
    (void)ahead;
    for (Py_ssize_t f = 0; f < width; f += PANEL) {
        Py_ssize_t c = 0;
        for (; c + ROWS <= channels; c += ROWS) {
            if (fetch) {
                ISA(fetch_next_sums)(du, du_row, channels, width, c, f, ROWS, PANEL);
            }
            ISA(sum_block)(v + c, channels, m + f, width, count, du + c * du_row + f,
                           du_row, ROWS);
        }
        if (c < channels) {
            ISA(sum_tail)(v + c, channels, m + f, width, count, du + c * du_row + f,
                          du_row, channels - c);
        }
    }
#endif
}

INLINE void ISA(sum_chunk)(const Conv *k, Py_ssize_t count) {
    Py_ssize_t channels = k->g.channels, width = k->width, du_row = k->du_row;
    for (int p = 0; p < POSITIONS; p++) {
        ISA(sum_rows)(k->v + p * position_stride(count, channels), channels,
                      k->m + p * position_stride(count, width), width,
                      count, k->du + p * position_stride(channels, du_row) + k->f_lo, du_row,
                      NULL, 1);
    }
}

/* The weight gradient of a 1x1 stride-1 convolution, the same sums without the transforms:
   dw (filters x channels) += dy^T x over the rows [lo, hi), `chunk` rows at a time, and
   where db is given db += the column sums of those rows of dy, read while they are in cache. */
static void ISA(pointwise_gradient)(const float *dy, const float *x, float *dw, float *db,
                                    Py_ssize_t filters, Py_ssize_t channels, Py_ssize_t lo,
                                    Py_ssize_t hi, Py_ssize_t chunk) {
    for (Py_ssize_t first = lo; first < hi; first += chunk) {
        Py_ssize_t count = hi - first < chunk ? hi - first : chunk;
        const float *rows = dy + first * filters;
        /* the next chunk's rows of dy and x, from memory while this chunk's sums run: the
         * sums read each row a few lines at a time, which the hardware's prefetch followed
         * too slowly (resnet50_v1's 64->256 at 56x56, batch 16, two threads: 4.9 -> 3.9 ms) */
        Py_ssize_t next = first + count, more = hi - next < chunk ? hi - next : chunk;
        more = more > 0 ? more : 0;
        Ahead ahead = {{(const char *)(dy + next * filters),
                        (const char *)(x + next * channels)},
                       {more * filters * 4, more * channels * 4}};
        ISA(sum_rows)(rows, filters, x + first * channels, channels, count, dw, channels,
                      &ahead, 0);
        for (Py_ssize_t f = 0; db != NULL && f < filters; f += LANES) {
            Py_ssize_t n = filters - f < LANES ? filters - f : LANES;
            vec sum = ISA(load)(db + f, n);
            for (Py_ssize_t r = 0; r < count; r++) {
                sum += ISA(load)(rows + r * filters + f, n);
            }
            ISA(store)(db + f, &sum, n);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* A 1x1 stride-1 convolution: the products without the transforms */

/* out's `rows` rows of the n <= PANEL filters from f = sums (sums_row floats a row) plus, for
 * the first block of channels, the residual (if any) and for the others what out holds;
 * after the last block plus the bias, then relu. */
INLINE void ISA(pointwise_store)(const Pointwise *k, const float *sums, Py_ssize_t sums_row,
                                 Py_ssize_t first_row, Py_ssize_t rows, Py_ssize_t f,
                                 Py_ssize_t n, int first, int last) {
    for (Py_ssize_t r = 0; r < rows; r++) {
        Py_ssize_t at = (first_row + r) * k->filters + f;
        for (Py_ssize_t i = 0; i < n; i += LANES) {
            Py_ssize_t lanes = n - i < LANES ? n - i : LANES;
            vec value = ISA(load)(sums + r * sums_row + i, LANES);
            if (!first) {
                value = ISA(load)(k->out + at + i, lanes) + value;
            } else if (k->residual) {
                value = ISA(load)(k->residual + at + i, lanes) + value;
            }
            if (last && k->bias) {
                value += ISA(load)(k->bias + f + i, lanes);
            }
            if (last && k->relu) {
                ISA(relu)(&value);
            }
            ISA(store)(k->out + at + i, &value, lanes);
        }
    }
}

#ifdef WIDE
#define POINTWISE_ROWS WIDE_ROWS
#define POINTWISE_WIDTH (2 * PANEL)
typedef int wide_mask __attribute__((vector_size(PANEL * sizeof(int))));

/* The register block of pointwise(): `rows` rows from first_row by `panels` panels from f,
 * summed over `steps` channels from x and panel, then stored as pointwise_store() does: the
 * same operations on 16 lanes, for whole panels. */
INLINE void ISA(wide_pointwise)(const Pointwise *k, const float *x, Py_ssize_t steps,
                                const float *panel, const float *ahead, Py_ssize_t first_row,
                                Py_ssize_t f, int first, int last, int rows, int panels) {
    wide sum[WIDE_ROWS][2];
    ISA(wide_sums)(x, k->channels, 1, panel, PANEL, k->channels * PANEL, ahead, steps, sum,
                   rows, panels);
    for (int j = 0; j < panels; j++) {
        Py_ssize_t lo = f + j * PANEL, n = k->filters - lo;
        if (n < PANEL) {                           /* the last filters: through memory */
            float part[WIDE_ROWS * PANEL];
            UNROLL
            for (int r = 0; r < rows; r++) {
                *(unaligned_wide *)(part + r * PANEL) = sum[r][j];
            }
            ISA(pointwise_store)(k, part, PANEL, first_row, rows, lo, n, first, last);
            continue;
        }
        wide bias = last && k->bias ? *(const unaligned_wide *)(k->bias + lo)
                                    : ISA(wide_splat)(0.0f);
        UNROLL
        for (int r = 0; r < rows; r++) {
            Py_ssize_t at = (first_row + r) * k->filters + lo;
            wide value = sum[r][j];
            if (!first) {
                value = *(const unaligned_wide *)(k->out + at) + value;
            } else if (k->residual) {
                value = *(const unaligned_wide *)(k->residual + at) + value;
            }
            if (last && k->bias) {
                value += bias;
            }
            if (last && k->relu) {
                wide_mask keep = (value > 0) | (value != value);
                value = (wide)((wide_mask)value & keep);
            }
            *(unaligned_wide *)(k->out + at) = value;
        }
    }
}
#else
#define POINTWISE_ROWS ROWS
#define POINTWISE_WIDTH PANEL
#endif

/* The rows [first, first + count) of pointwise(); `fetch`: the thread's first chunk. */
INLINE void ISA(pointwise_chunk)(const Pointwise *k, Py_ssize_t first, Py_ssize_t count,
                                 int fetch) {
    Py_ssize_t channels = k->channels, panels = (k->filters + PANEL - 1) / PANEL;
    for (Py_ssize_t c = 0; c < channels; c += k->depth) {
        Py_ssize_t steps = channels - c < k->depth ? channels - c : k->depth;
        int first_block = c == 0, last_block = c + steps >= channels;
        for (Py_ssize_t f = 0; f < panels * PANEL; f += POINTWISE_WIDTH) {
            const float *panel = k->u + (f / PANEL * channels + c) * PANEL;
#ifdef WIDE
            /* in the thread's first chunk, the next pair of panels, fetched while this one
             * is multiplied: the weights come from memory then (batch 1, 16 layers of
             * 256->1024 at 14x14 in turn: 0.24 -> 0.22 ms a layer); later chunks find them
             * in cache */
            const float *ahead = fetch && f + POINTWISE_WIDTH < panels * PANEL
                ? panel + POINTWISE_WIDTH * channels : NULL;
#else
            (void)fetch;
#endif
            for (Py_ssize_t t = 0; t < count; t += POINTWISE_ROWS) {
                Py_ssize_t rows = count - t < POINTWISE_ROWS ? count - t : POINTWISE_ROWS;
                const float *x = k->x + (first + t) * channels + c;
#ifdef WIDE
                int pair = f + PANEL < panels * PANEL ? 2 : 1;
                WIDE_BLOCK(ISA(wide_pointwise), rows, pair, k, x, steps, panel,
                           t ? NULL : ahead, first + t, f, first_block, last_block);
#else
                float sums[ROWS * PANEL];
                ISA(product_tail)(x, channels, steps, panel, sums, PANEL, rows);
                Py_ssize_t n = k->filters - f < PANEL ? k->filters - f : PANEL;
                ISA(pointwise_store)(k, sums, PANEL, first + t, rows, f, n, first_block,
                                     last_block);
#endif
            }
        }
    }
}

/* The first item of a thread's next chunk of `chunk` items from lo: with a shared claim,
 * the next chunk that no thread has taken yet; without, `next` (its own next one). */
INLINE Py_ssize_t ISA(next_chunk)(long long *claim, Py_ssize_t lo, Py_ssize_t next,
                                  Py_ssize_t chunk) {
    if (claim == NULL) {
        return next;
    }
    return lo + (Py_ssize_t)__atomic_fetch_add(claim, (long long)chunk, __ATOMIC_RELAXED);
}

/* out rows [lo, hi) = relu?(x rows @ W^T + residual + bias), `chunk` rows at a time (with a
 * claim, the next chunk that no thread has taken), over blocks of `depth` channels: the
 * first block's sums go to out, the others' are added to it. Per block of a chunk, each
 * pair of panels (one in the narrower builds) stays in L1 while the chunk's rows pass under
 * it in register blocks. */
static void ISA(pointwise)(const Pointwise *k, Py_ssize_t lo, Py_ssize_t hi) {
    int fetch = 1;
    for (Py_ssize_t first = ISA(next_chunk)(k->claim, lo, lo, k->chunk); first < hi;
         first = ISA(next_chunk)(k->claim, lo, first + k->chunk, k->chunk), fetch = 0) {
        ISA(pointwise_chunk)(k, first, hi - first < k->chunk ? hi - first : k->chunk, fetch);
    }
}

#undef POINTWISE_ROWS
#undef POINTWISE_WIDTH

static void ISA(weight_gradient)(const Conv *k, Py_ssize_t tile_lo, Py_ssize_t tile_hi) {
    if (k->zero) {      /* this call's filters, the padding past the last one included */
        Py_ssize_t step = position_stride(k->g.channels, k->du_row);
        for (int p = 0; p < POSITIONS; p++) {
            for (Py_ssize_t c = 0; c < k->g.channels; c++) {
                memset(k->du + p * step + c * k->du_row + k->f_lo, 0,
                       (size_t)k->width * sizeof(float));
            }
        }
    }
    for (Py_ssize_t first = tile_lo; first < tile_hi; first += k->chunk) {
        Py_ssize_t count = tile_hi - first < k->chunk ? tile_hi - first : k->chunk;
        ISA(input_chunk)(k, first, count);
        ISA(gradient_chunk)(k, first, count);
        ISA(sum_chunk)(k, count);
    }
}

/* G^T u for the 6 values u[0], u[step], ..., u[5 * step]: 3 values. */
INLINE void ISA(finish_1d)(const vec *u, Py_ssize_t step, vec *g, Py_ssize_t out_step) {
    vec u0 = u[0], u1 = u[step], u2 = u[2 * step], u3 = u[3 * step], u4 = u[4 * step],
        u5 = u[5 * step];
    vec outer = u1 + u2, inner = u3 + u4, sixth = ISA(splat)(1.0f / 6.0f);
    g[0] = ISA(fma)(ISA(splat)(1.0f / 24.0f), inner,
                    ISA(fma)(-sixth, outer, ISA(splat)(0.25f) * u0));
    g[out_step] = ISA(fma)(sixth, u2 - u1, ISA(splat)(1.0f / 12.0f) * (u3 - u4));
    g[2 * out_step] = ISA(fma)(sixth, inner - outer, u5);
}

/* dw (OHWI, 3x3) = G^T dU G of the channels [lo, hi), 8 filters by up to 8 channels at a time:
 * the block's 9 taps of each filter are written as runs of channels. One channel at a time,
 * each filter's taps were 9 values a row of dw apart: 256 channels wrote 2304 lines per
 * channel, a few L1 sets apart, and took 1.3 ms (10x 128 channels, with 4x the work). */
static void ISA(finish_gradient)(const float *du, Py_ssize_t channels, Py_ssize_t filters,
                                 Py_ssize_t du_row, float *dw, Py_ssize_t lo, Py_ssize_t hi) {
    Py_ssize_t step = position_stride(channels, du_row);
    for (Py_ssize_t c0 = lo; c0 < hi; c0 += LANES) {
        Py_ssize_t count = hi - c0 < LANES ? hi - c0 : LANES;
        for (Py_ssize_t f = 0; f < filters; f += LANES) {
            float taps[LANES][9][LANES];        /* [channel][tap][filter] of the block */
            for (Py_ssize_t i = 0; i < count; i++) {
                vec u[POSITIONS], rows[TILE * 3], g[9];
                UNROLL
                for (int p = 0; p < POSITIONS; p++) {
                    u[p] = ISA(load)(du + p * step + (c0 + i) * du_row + f, LANES);
                }
                UNROLL
                for (int a = 0; a < TILE; a++) {    /* (dU) G: along each row */
                    ISA(finish_1d)(u + a * TILE, 1, rows + a * 3, 1);
                }
                UNROLL
                for (int j = 0; j < 3; j++) {       /* G^T (dU G): down each column */
                    ISA(finish_1d)(rows + j, 3, g + j, 3);
                }
                UNROLL
                for (int tap = 0; tap < 9; tap++) {
                    ISA(store)(taps[i][tap], &g[tap], LANES);
                }
            }
            for (Py_ssize_t q = 0; q < LANES && f + q < filters; q++) {
                for (int tap = 0; tap < 9; tap++) {
                    float *at = dw + ((f + q) * 9 + tap) * channels + c0;
                    for (Py_ssize_t i = 0; i < count; i++) {
                        at[i] = taps[i][tap][q];
                    }
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* A call's tiles, chunk by chunk */

INLINE void ISA(convolve_chunk)(const Conv *k, Py_ssize_t first, Py_ssize_t count) {
    ISA(input_chunk)(k, first, count);
    ISA(product_chunk)(k, count);
    ISA(output_chunk)(k, first, count);
}

/* Whether each filter's 9 C weights are one range, w_steps[0] floats long (OHWI or OIHW). */
INLINE int ISA(filters_apart)(const Conv *k) {
    const Py_ssize_t *s = k->w_steps, c = k->g.channels;
    return s[0] == 9 * c && ((s[1] == 3 * c && s[2] == c && s[3] == 1) ||
                             (s[1] == 3 && s[2] == 1 && s[3] == 9));
}

static void ISA(convolve)(const Conv *k, Py_ssize_t tile_lo, Py_ssize_t tile_hi) {
    if (k->claim == NULL) {
        for (Py_ssize_t first = tile_lo; first < tile_hi; first += k->chunk) {
            Py_ssize_t count = tile_hi - first < k->chunk ? tile_hi - first : k->chunk;
            ISA(convolve_chunk)(k, first, count);
        }
        return;
    }
    if (k->claim_panels == 0) {                     /* items: chunks of tiles */
        for (;;) {
            Py_ssize_t first = tile_lo + (Py_ssize_t)__atomic_fetch_add(
                k->claim, (long long)k->chunk, __ATOMIC_RELAXED);
            if (first >= tile_hi) {
                return;
            }
            ISA(convolve_chunk)(k, first, tile_hi - first < k->chunk ? tile_hi - first
                                                                     : k->chunk);
        }
    }
    /* items: (chunk of tiles, group of claim_panels filter panels), chunk by chunk; a thread
     * transforms a chunk's inputs once for the items of it that it takes in a row, and (with
     * w) a group's weights once for the items of it it takes in a row: into its own U, which
     * stays in its cache for the products, where U of all the panels written by one call and
     * read by the next went through memory (a layer at batch 1, whose few tiles read U once) */
    Conv group = *k;
    Py_ssize_t step = k->claim_panels * PANEL;
    Py_ssize_t groups = (k->f_hi - k->f_lo + step - 1) / step;
    Py_ssize_t items = (tile_hi - tile_lo + k->chunk - 1) / k->chunk * groups;
    Py_ssize_t held = -1;                           /* the chunk whose inputs v holds */
    Py_ssize_t held_weights = -1;                   /* the group whose U own_u holds */
    if (k->w != NULL) {
        group.u = k->own_u;
    }
    for (;;) {
        Py_ssize_t item = (Py_ssize_t)__atomic_fetch_add(k->claim, 1LL, __ATOMIC_RELAXED);
        if (item >= items) {
            return;
        }
        Py_ssize_t chunk = item / groups, lo = k->f_lo + item % groups * step;
        Py_ssize_t first = tile_lo + chunk * k->chunk;
        Py_ssize_t count = tile_hi - first < k->chunk ? tile_hi - first : k->chunk;
        group.f_lo = lo;
        group.f_hi = k->f_hi - lo < step ? k->f_hi : lo + step;
        group.width = (group.f_hi - lo + PANEL - 1) / PANEL * PANEL;
        if (k->w != NULL && item % groups != held_weights) {
            held_weights = item % groups;
            group.u_first = lo / PANEL;
            ISA(transform_weights)(k->w, k->w_steps, k->scale, k->g.channels, k->g.filters,
                                   k->own_u, k->u_step, lo / PANEL, lo / PANEL,
                                   (group.f_hi + PANEL - 1) / PANEL);
        }
        if (chunk != held) {
            ISA(input_chunk)(&group, first, count);
            held = chunk;
        }
        group.fetch_lines = 0;
        if (k->w != NULL && k->ahead_items > 0 && item + k->ahead_items < items &&
            ISA(filters_apart)(k)) {
            Py_ssize_t next = k->f_lo + (item + k->ahead_items) % groups * step;
            Py_ssize_t end = k->f_hi - next < step ? k->f_hi : next + step;
            group.fetch = (const char *)(k->w + next * k->w_steps[0]);
            group.fetch_lines = (end - next) * k->w_steps[0] * (Py_ssize_t)sizeof(float) / 64;
        }
        ISA(product_chunk)(&group, count);
        ISA(output_chunk)(&group, first, count);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* A 1-D convolution F(m, r) along one axis: line() */

/* Calls block(..., points) with points = 2 .. MAX_POINTS (line() checks) as a constant, so
 * that the transforms' vectors stay in registers. */
#define LINE_POINTS(block, points, ...)                                                       \
    do {                                                                                       \
        switch (points) {                                                                      \
        case 2: block(__VA_ARGS__, 2); break;   case 3: block(__VA_ARGS__, 3); break;          \
        case 4: block(__VA_ARGS__, 4); break;   case 5: block(__VA_ARGS__, 5); break;          \
        case 6: block(__VA_ARGS__, 6); break;   case 7: block(__VA_ARGS__, 7); break;          \
        case 8: block(__VA_ARGS__, 8); break;   case 9: block(__VA_ARGS__, 9); break;          \
        case 10: block(__VA_ARGS__, 10); break; case 11: block(__VA_ARGS__, 11); break;        \
        default: block(__VA_ARGS__, MAX_POINTS); break;                                        \
        }                                                                                      \
    } while (0)

/* Tile t's first output along its line (`start`), and the offsets of its line's first input
 * and output pixels. Tiles are numbered so that neighbours lie next to each other: along a
 * row (axis 2) sample, row, tile; down the columns (axis 1) sample, tile row, column. */
INLINE void ISA(line_place)(const Line *k, Py_ssize_t t, Py_ssize_t *start, Py_ssize_t *in,
                            Py_ssize_t *out) {
    Py_ssize_t per_sample = k->lines * k->tiles_along;
    Py_ssize_t sample = t / per_sample, rest = t % per_sample, line, tile;
    if (k->axis == 2) {
        line = rest / k->tiles_along, tile = rest % k->tiles_along;
    } else {
        tile = rest / k->lines, line = rest % k->lines;
    }
    *start = tile * k->outputs;
    *in = sample * k->in_sample + line * k->in_line;
    *out = sample * k->out_sample + line * k->out_line + *start * k->out_step;
}

/* V[p] = sum over j of B^T[p][j] d[j] for the n <= LANES channels from c of one tile. */
INLINE void ISA(line_input_block)(const float *const *point, const float *bt, Py_ssize_t c,
                                  Py_ssize_t n, float *v, Py_ssize_t stride, int points) {
    vec d[MAX_POINTS];
    UNROLL
    for (int j = 0; j < points; j++) {
        d[j] = ISA(load)(point[j] + c, n);
    }
    UNROLL
    for (int p = 0; p < points; p++) {
        vec sum = ISA(splat)(bt[p * points]) * d[0];
        UNROLL
        for (int j = 1; j < points; j++) {
            sum = ISA(fma)(ISA(splat)(bt[p * points + j]), d[j], sum);
        }
        ISA(store)(v + p * stride + c, &sum, n);
    }
}

INLINE void ISA(line_input_tile)(const Line *k, const float *const *point, float *v,
                                 Py_ssize_t stride, int points) {
    Py_ssize_t c = 0;
    for (; c + LANES <= k->channels; c += LANES) {
        ISA(line_input_block)(point, k->bt, c, LANES, v, stride, points);
    }
    if (c < k->channels) {
        ISA(line_input_block)(point, k->bt, c, k->channels - c, v, stride, points);
    }
}

/* V of the `count` tiles from `first`; points outside the input read `zeros`. */
INLINE void ISA(line_input_chunk)(const Line *k, Py_ssize_t first, Py_ssize_t count) {
    Py_ssize_t stride = count * k->channels;
    const float *point[MAX_POINTS];
    for (Py_ssize_t t = 0; t < count; t++) {
        Py_ssize_t start, in, out;
        ISA(line_place)(k, first + t, &start, &in, &out);
        for (Py_ssize_t j = 0; j < k->points; j++) {
            Py_ssize_t at = start - k->pad + j;
            point[j] = at >= 0 && at < k->in_length ? k->x + in + at * k->in_step : k->zeros;
        }
        LINE_POINTS(ISA(line_input_tile), k->points, k, point, k->v + t * k->channels,
                    stride);
    }
}

/* y[i] = sum over p of A^T[i][p] M[p], + bias, + residual, relu, for the `valid` outputs of
 * one tile (at `at` in out) and the n <= LANES filters from f. */
INLINE void ISA(line_output_block)(const Line *k, const float *m, Py_ssize_t stride,
                                   Py_ssize_t at, Py_ssize_t valid, Py_ssize_t f,
                                   Py_ssize_t n, int points) {
    vec product[MAX_POINTS];
    UNROLL
    for (int p = 0; p < points; p++) {
        product[p] = ISA(load)(m + p * stride + f, n);
    }
    vec bias = k->bias ? ISA(load)(k->bias + f, n) : ISA(splat)(0.0f);
    for (Py_ssize_t i = 0; i < valid; i++) {
        const float *row = k->at + i * points;
        vec y = ISA(splat)(row[0]) * product[0];
        UNROLL
        for (int p = 1; p < points; p++) {
            y = ISA(fma)(ISA(splat)(row[p]), product[p], y);
        }
        Py_ssize_t pixel = at + i * k->out_step + f;
        vec value = y + bias;
        if (k->residual) {
            value += ISA(load)(k->residual + pixel, n);
        }
        if (k->relu) {
            ISA(relu)(&value);
        }
        ISA(store)(k->out + pixel, &value, n);
    }
}

INLINE void ISA(line_output_tile)(const Line *k, const float *m, Py_ssize_t stride,
                                  Py_ssize_t at, Py_ssize_t valid, int points) {
    Py_ssize_t f = 0;
    for (; f + LANES <= k->filters; f += LANES) {
        ISA(line_output_block)(k, m, stride, at, valid, f, LANES, points);
    }
    if (f < k->filters) {
        ISA(line_output_block)(k, m, stride, at, valid, f, k->filters - f, points);
    }
}

/* Y of the `count` tiles from `first`; outputs past the end of the line are dropped. */
INLINE void ISA(line_output_chunk)(const Line *k, Py_ssize_t first, Py_ssize_t count) {
    Py_ssize_t stride = count * k->width;
    for (Py_ssize_t t = 0; t < count; t++) {
        Py_ssize_t start, in, at;
        ISA(line_place)(k, first + t, &start, &in, &at);
        Py_ssize_t valid = k->out_length - start < k->outputs ? k->out_length - start
                                                               : k->outputs;
        LINE_POINTS(ISA(line_output_tile), k->points, k, k->m + t * k->width, stride, at,
                    valid);
    }
}

/* The tiles [lo, hi), `chunk` at a time (with a claim, the next chunk no thread has taken):
 * V, then the `points` products M[p] = V[p] U[p] on the 2-D convolution's register blocks,
 * then Y, while the chunk's V and M stay in the core's cache. */
static void ISA(line)(const Line *k, Py_ssize_t lo, Py_ssize_t hi) {
    Py_ssize_t panels = k->width / PANEL;
    for (Py_ssize_t first = ISA(next_chunk)(k->claim, lo, lo, k->chunk); first < hi;
         first = ISA(next_chunk)(k->claim, lo, first + k->chunk, k->chunk)) {
        Py_ssize_t count = hi - first < k->chunk ? hi - first : k->chunk;
        ISA(line_input_chunk)(k, first, count);
        ISA(products)(k->v, count * k->channels, k->u, k->m, count * k->width,
                      (int)k->points, count, k->channels, panels * k->channels * PANEL, 0,
                      k->width, NULL, 0);
        ISA(line_output_chunk)(k, first, count);
    }
}

#undef LINE_POINTS

/* ------------------------------------------------------------------------------------------ */
/* dense(): a few rows of an inner product, each row of the weights read once for all of them */

/* 16 running sums: one wide vector in the AVX-512 build, two vec in the others, each lane the
 * same chain of fma()s, so every build with FMA rounds alike. */
typedef struct {
#ifdef WIDE
    wide v;
#else
    vec lo, hi;
#endif
} ISA(sums16);

/* s plus the products of the 16 floats at w and at x, lane by lane. */
INLINE ISA(sums16) ISA(sums16_fma)(const float *w, const float *x, ISA(sums16) s) {
#ifdef WIDE
    s.v = ISA(wide_fma)(*(const unaligned_wide *)w, *(const unaligned_wide *)x, s.v);
#else
    s.lo = ISA(fma)(ISA(load)(w, LANES), ISA(load)(x, LANES), s.lo);
    s.hi = ISA(fma)(ISA(load)(w + LANES, LANES), ISA(load)(x + LANES, LANES), s.hi);
#endif
    return s;
}

/* The 16 sums added as a tree: lane j + 8 into lane j, then j + 4, j + 2, j + 1. */
INLINE float ISA(sums16_total)(ISA(sums16) s) {
    float lane[16];
    memcpy(lane, &s, sizeof lane);
    for (int width = 8; width > 0; width /= 2) {
        for (int j = 0; j < width; j++) {
            lane[j] += lane[j + width];
        }
    }
    return lane[0];
}

/* The outputs [o, o + outs) of the rows [r, r + rows) of x: rows x outs sums in registers,
 * the rows' inputs and the outputs' weights read 16 at a time; a tail of fewer than 16 inputs
 * is read as 16 with zeros after it. rows and outs are constants (dense_block's switch). */
INLINE void ISA(dense_sums)(const Dense *k, Py_ssize_t r, Py_ssize_t o, int rows, int outs) {
    ISA(sums16) s[4][4];
    memset(s, 0, sizeof s);
    Py_ssize_t n = k->inputs, i = 0;
    const float *x = k->x + r * n, *w = k->w + o * n;
    for (; i + 16 <= n; i += 16) {
        UNROLL
        for (int q = 0; q < outs; q++) {
            UNROLL
            for (int p = 0; p < rows; p++) {
                s[p][q] = ISA(sums16_fma)(w + q * n + i, x + p * n + i, s[p][q]);
            }
        }
    }
    if (i < n) {
        float xt[4][16] = {{0}}, wt[4][16] = {{0}};
        for (int p = 0; p < rows; p++) {
            memcpy(xt[p], x + p * n + i, (size_t)(n - i) * sizeof(float));
        }
        for (int q = 0; q < outs; q++) {
            memcpy(wt[q], w + q * n + i, (size_t)(n - i) * sizeof(float));
        }
        for (int q = 0; q < outs; q++) {
            for (int p = 0; p < rows; p++) {
                s[p][q] = ISA(sums16_fma)(wt[q], xt[p], s[p][q]);
            }
        }
    }
    for (int p = 0; p < rows; p++) {
        for (int q = 0; q < outs; q++) {
            float value = ISA(sums16_total)(s[p][q]);
            if (k->bias != NULL) {
                value += k->bias[o + q];
            }
            if (k->relu && !(value > 0) && value == value) {
                value = 0.0f;               /* as np.maximum(value, 0): NaN stays NaN */
            }
            k->out[(r + p) * k->outputs + o + q] = value;
        }
    }
}

/* dense_sums() with rows (1 to 4) and outs (1 to DENSE_OUTS) as constants. */
#ifdef WIDE
#define DENSE_OUTS 4
#else
#define DENSE_OUTS 2    /* 16 ymm registers: 4 rows x 2 outputs x 2 halves */
#endif
#define DENSE_CASE(rows, outs)                                                                 \
    case (rows) * 8 + (outs): ISA(dense_sums)(k, r, o, rows, outs); break;
INLINE void ISA(dense_block)(const Dense *k, Py_ssize_t r, Py_ssize_t o, int rows, int outs) {
    switch (rows * 8 + outs) {
        DENSE_CASE(1, 1) DENSE_CASE(1, 2) DENSE_CASE(2, 1) DENSE_CASE(2, 2)
        DENSE_CASE(3, 1) DENSE_CASE(3, 2) DENSE_CASE(4, 1) DENSE_CASE(4, 2)
#if DENSE_OUTS == 4
        DENSE_CASE(1, 3) DENSE_CASE(1, 4) DENSE_CASE(2, 3) DENSE_CASE(2, 4)
        DENSE_CASE(3, 3) DENSE_CASE(3, 4) DENSE_CASE(4, 3) DENSE_CASE(4, 4)
#endif
    default: break;
    }
}
#undef DENSE_CASE

/* The outputs [lo, hi) for every row, 4 rows at a time. */
INLINE void ISA(dense_range)(const Dense *k, Py_ssize_t lo, Py_ssize_t hi) {
    for (Py_ssize_t r = 0; r < k->rows; r += 4) {
        int rows = k->rows - r < 4 ? (int)(k->rows - r) : 4;
        for (Py_ssize_t o = lo; o < hi; o += DENSE_OUTS) {
            ISA(dense_block)(k, r, o, rows, hi - o < DENSE_OUTS ? (int)(hi - o) : DENSE_OUTS);
        }
    }
}
#undef DENSE_OUTS

/* The outputs [lo, hi), `chunk` at a time (with a claim, the next chunk no thread has taken). */
static void ISA(dense)(const Dense *k, Py_ssize_t lo, Py_ssize_t hi) {
    for (Py_ssize_t first = ISA(next_chunk)(k->claim, lo, lo, k->chunk); first < hi;
         first = ISA(next_chunk)(k->claim, lo, first + k->chunk, k->chunk)) {
        ISA(dense_range)(k, first, hi - first < k->chunk ? hi : first + k->chunk);
    }
}


/* line_weights(): the panels [lo, hi) of U of the 1-D F(m, r), (points, panels, C, PANEL): per
 * panel, channel and point, the 16 filters' sums in double vectors, each over the taps in
 * order, times the filter's scale, rounded once (zeros past the last filter): the float64
 * product of G and the taps, then the scale, as NumPy forms it. Vectors of the build's width
 * (SSE2 pairs, 4 or 8 doubles): 16 filters as 64-byte vectors in the AVX2 copy ran 8x slower. */
#if defined(WIDE)
#define LINE_VECTOR_BYTES 64
#elif defined(FUSED)
#define LINE_VECTOR_BYTES 32
#else
#define LINE_VECTOR_BYTES 16
#endif
#define LINE_LANES (LINE_VECTOR_BYTES / (int)sizeof(double))
#define LINE_VECTORS (PANEL / LINE_LANES)
typedef double ISA(doubles) __attribute__((vector_size(LINE_VECTOR_BYTES)));

static void ISA(line_weights)(const float *w, const Py_ssize_t *steps, const float *scale,
                              const double *g_all, Py_ssize_t points, Py_ssize_t r,
                              Py_ssize_t channels, Py_ssize_t filters, float *u_all,
                              Py_ssize_t lo, Py_ssize_t hi) {
    const Py_ssize_t panels = (filters + PANEL - 1) / PANEL;
    for (Py_ssize_t panel = lo; panel < hi; panel++) {
        ISA(doubles) factors[LINE_VECTORS];
        for (int v = 0; v < LINE_VECTORS; v++) {
            factors[v] = (ISA(doubles)){0};     /* then lane by lane */
        }
        for (int i = 0; i < PANEL; i++) {
            Py_ssize_t f = panel * PANEL + i;
            factors[i / LINE_LANES][i % LINE_LANES] =
                f >= filters ? 0.0 : scale != NULL ? (double)scale[f] : 1.0;
        }
        for (Py_ssize_t c = 0; c < channels; c++) {
            ISA(doubles) taps[LINE_TAPS_MAX][LINE_VECTORS];
            for (int i = 0; i < PANEL; i++) {
                Py_ssize_t f = panel * PANEL + i;
                for (Py_ssize_t t = 0; t < r; t++) {
                    taps[t][i / LINE_LANES][i % LINE_LANES] =
                        f < filters ? w[f * steps[0] + t * steps[1] + c * steps[3]] : 0.0;
                }
            }
            for (Py_ssize_t p = 0; p < points; p++) {
                const double *g = g_all + p * r;
                float *u = u_all + ((p * panels + panel) * channels + c) * PANEL;
                ISA(doubles) sums[LINE_VECTORS];
                for (int v = 0; v < LINE_VECTORS; v++) {
                    sums[v] = (ISA(doubles)){0};
                }
                for (Py_ssize_t t = 0; t < r; t++) {
                    for (int v = 0; v < LINE_VECTORS; v++) {
                        sums[v] += g[t] * taps[t][v];
                    }
                }
                for (int v = 0; v < LINE_VECTORS; v++) {
                    sums[v] *= factors[v];
                    for (int i = 0; i < LINE_LANES; i++) {
                        u[v * LINE_LANES + i] = (float)sums[v][i];
                    }
                }
            }
        }
    }
}
#undef LINE_VECTOR_BYTES
#undef LINE_LANES
#undef LINE_VECTORS

#endif
