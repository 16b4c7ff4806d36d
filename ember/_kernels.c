/* ember._kernels: BatchNorm's channel-first CPU kernels, per range of channels.
 *
 * Data is float32, C-contiguous and seen as (outer, channels, inner): a channel is `outer` rows
 * of `inner` values, `channels * inner` values apart. Each function works on the channels
 * [lo, hi) with the GIL released, so engine.parallel_for runs disjoint ranges on every kernel
 * thread; a channel's results never depend on the range it was computed in (deterministic).
 *
 * A channel's passes follow each other while its rows are still in cache, so the data is read
 * from memory once: forward = the statistics, then scale and shift; backward = the two sums,
 * then the data gradient.
 *
 * Sums run in 16 float lanes (GCC/Clang vector types: SSE on any x86-64, NEON on arm64) that
 * pour into doubles every 512 values: as fast as float, about as exact as double.
 *
 * Build with -ffp-contract=off: out = x * scale + shift must round twice, as NumPy's
 * np.multiply then np.add do in ember/op/nn/bn_apply.py, never as one fused multiply-add.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "_buffers.h"

#if !defined(__GNUC__)
#error "ember._kernels is written with GCC/Clang vector types; without it Ember runs NumPy code"
#endif

#define LANES 16
#define BLOCK 512

typedef struct {
    Py_ssize_t outer, channels, inner;
} Layout;

static Py_ssize_t row_offset(const Layout *s, Py_ssize_t n, Py_ssize_t c) {
    return (n * s->channels + c) * s->inner;
}

/* ------------------------------------------------------------------------------------------ */
/* Sums */

/* Two running sums over a channel's rows in float lanes, added into doubles once they took
 * BLOCK values, so no lane adds up more than a few dozen floats. The lanes carry on from row
 * to row: rows are short (49 values at 7x7). Written with vector types, since compilers do not
 * vectorise float sums by themselves without -ffast-math. */
typedef float vec4 __attribute__((vector_size(16)));

#define VECS (LANES / 4)

typedef struct {
    vec4 a[VECS], b[VECS];
    Py_ssize_t pending;
    double total[2];
} Sums;

static vec4 load4(const float *p) {
    vec4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static vec4 splat4(float value) {
    vec4 v = {value, value, value, value};
    return v;
}

static void flush(Sums *s) {
    for (int v = 0; v < VECS; v++) {
        for (int k = 0; k < 4; k++) {
            s->total[0] += s->a[v][k];
            s->total[1] += s->b[v][k];
        }
        s->a[v] = s->b[v] = splat4(0);
    }
    s->pending = 0;
}

/* Where the stretch of row values from `i` that the lanes take before their next flush ends,
 * in whole vectors; flushes them first when they are full. */
static Py_ssize_t stretch(Sums *s, Py_ssize_t i, Py_ssize_t len) {
    if (s->pending >= BLOCK) {
        flush(s);
    }
    Py_ssize_t room = BLOCK - s->pending, vectors = (len - i) / 4 * 4;
    Py_ssize_t take = vectors < room ? vectors : room;
    s->pending += take;
    return i + take;
}

/* Adds sum(p - centre) and sum((p - centre)^2) of a row of `len` values. */
static void add_deviations(Sums *s, const float *p, Py_ssize_t len, float centre) {
    vec4 middle = splat4(centre);
    Py_ssize_t i = 0;
    for (Py_ssize_t stop = stretch(s, i, len); i < stop; stop = stretch(s, i, len)) {
        for (; i + LANES <= stop; i += LANES) {
            for (int v = 0; v < VECS; v++) {
                vec4 d = load4(p + i + 4 * v) - middle;
                s->a[v] += d;
                s->b[v] += d * d;
            }
        }
        for (; i < stop; i += 4) {
            vec4 d = load4(p + i) - middle;
            s->a[0] += d;
            s->b[0] += d * d;
        }
    }
    for (; i < len; i++) {
        double d = p[i] - centre;
        s->total[0] += d;
        s->total[1] += d * d;
    }
}

/* Adds sum(dy) and sum(dy * (x - centre)) of a row of `len` values. */
static void add_grad_sums(Sums *s, const float *dy, const float *x, Py_ssize_t len,
                          float centre) {
    vec4 middle = splat4(centre);
    Py_ssize_t i = 0;
    for (Py_ssize_t stop = stretch(s, i, len); i < stop; stop = stretch(s, i, len)) {
        for (; i + LANES <= stop; i += LANES) {
            for (int v = 0; v < VECS; v++) {
                vec4 g = load4(dy + i + 4 * v);
                s->a[v] += g;
                s->b[v] += g * (load4(x + i + 4 * v) - middle);
            }
        }
        for (; i < stop; i += 4) {
            vec4 g = load4(dy + i);
            s->a[0] += g;
            s->b[0] += g * (load4(x + i) - middle);
        }
    }
    for (; i < len; i++) {
        s->total[0] += dy[i];
        s->total[1] += (double)dy[i] * (x[i] - centre);
    }
}

/* sum(x - centre) and sum((x - centre)^2) over the first `rows` rows of channel c. */
static void channel_deviations(const float *x, const Layout *s, Py_ssize_t c, Py_ssize_t rows,
                               float centre, double *total) {
    Sums sums = {.pending = 0};
    for (Py_ssize_t n = 0; n < rows; n++) {
        add_deviations(&sums, x + row_offset(s, n, c), s->inner, centre);
    }
    flush(&sums);
    total[0] = sums.total[0];
    total[1] = sums.total[1];
}

/* sum(dy) and sum(dy * (x - centre)) over the rows of channel c. */
static void channel_grad_sums(const float *dy, const float *x, const Layout *s, Py_ssize_t c,
                              float centre, double *total) {
    Sums sums = {.pending = 0};
    for (Py_ssize_t n = 0; n < s->outer; n++) {
        Py_ssize_t at = row_offset(s, n, c);
        add_grad_sums(&sums, dy + at, x + at, s->inner, centre);
    }
    flush(&sums);
    total[0] = sums.total[0];
    total[1] = sums.total[1];
}

/* ------------------------------------------------------------------------------------------ */
/* Element-wise rows */

static void store4(float *p, vec4 v) {
    memcpy(p, &v, sizeof v);
}

static void row_scale_shift(const float *x, float *out, Py_ssize_t len, float scale,
                            float shift) {
    vec4 times = splat4(scale), plus = splat4(shift);
    Py_ssize_t i = 0;
    for (; i + 4 <= len; i += 4) {
        store4(out + i, load4(x + i) * times + plus);  /* two roundings: -ffp-contract=off */
    }
    for (; i < len; i++) {
        out[i] = x[i] * scale + shift;
    }
}

/* dx = (dy - mean_dy - (x - centre) * slope) * scale, the data gradient through batch
 * statistics with its per-channel constants folded. */
static void row_batch_grad(const float *dy, const float *x, float *dx, Py_ssize_t len,
                           float centre, float mean_dy, float slope, float scale) {
    vec4 middle = splat4(centre), mean = splat4(mean_dy), tilt = splat4(slope);
    vec4 times = splat4(scale);
    Py_ssize_t i = 0;
    for (; i + 4 <= len; i += 4) {
        vec4 g = load4(dy + i) - mean - (load4(x + i) - middle) * tilt;
        store4(dx + i, g * times);
    }
    for (; i < len; i++) {
        dx[i] = (dy[i] - mean_dy - (x[i] - centre) * slope) * scale;
    }
}

static void row_scaled(const float *dy, float *dx, Py_ssize_t len, float scale) {
    for (Py_ssize_t i = 0; i < len; i++) {
        dx[i] = dy[i] * scale;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Channels */

typedef struct {
    const float *x, *gamma, *beta;
    float *out, *mean, *var, *invstd;
    float eps;
    int fix_gamma;
} TrainForward;

/* Mean and biased variance of channel c in one pass over its rows, as sums of deviations from
 * the first row's mean. Where that lies more than a standard deviation from the channel's mean
 * (samples that differ widely), those sums would cancel: a second pass takes the deviations
 * from the mean itself. */
static void channel_moments(const float *x, const Layout *s, Py_ssize_t c, float *mean,
                            float *var) {
    double count = (double)s->outer * (double)s->inner, dev[2];
    channel_deviations(x, s, c, 1, 0.0f, dev);
    float centre = (float)(dev[0] / s->inner);
    channel_deviations(x, s, c, s->outer, centre, dev);
    if (dev[0] * dev[0] / count > dev[1] / 2) {
        centre = (float)(centre + dev[0] / count);
        channel_deviations(x, s, c, s->outer, centre, dev);
    }
    double spread = (dev[1] - dev[0] * dev[0] / count) / count;
    *mean = (float)(centre + dev[0] / count);
    *var = (float)(spread > 0 ? spread : 0);
}

/* Batch statistics of channel c, then out = x * scale + shift with exactly the float32
 * operations of ember/op/nn/normalization.py: invstd = 1 / sqrt(var + eps),
 * scale = gamma * invstd (invstd under fix_gamma), shift = beta - mean * scale. */
static void train_forward_channel(const TrainForward *a, const Layout *s, Py_ssize_t c) {
    float mean, var;
    channel_moments(a->x, s, c, &mean, &var);
    float invstd = 1.0f / sqrtf(var + a->eps);
    float scale = a->fix_gamma ? invstd : a->gamma[c] * invstd;
    float shift = a->beta[c] - mean * scale;
    for (Py_ssize_t n = 0; n < s->outer; n++) {
        Py_ssize_t at = row_offset(s, n, c);
        row_scale_shift(a->x + at, a->out + at, s->inner, scale, shift);
    }
    a->mean[c] = mean;
    a->var[c] = var;
    a->invstd[c] = invstd;
}

typedef struct {
    const float *dy, *x, *gamma, *mean, *invstd;
    float *dx, *dgamma, *dbeta;
    int fix_gamma, batch_stats;
} Backward;

/* dbeta = sum(dy), dgamma = sum(dy * xhat) and dx, with xhat = (x - mean) * invstd; through
 * the batch statistics dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), else
 * dx = gamma * invstd * dy (gamma = 1 under fix_gamma). */
static void backward_channel(const Backward *a, const Layout *s, Py_ssize_t c) {
    double count = (double)s->outer * (double)s->inner;
    float centre = a->mean[c], invstd = a->invstd[c];
    double sums[2];
    channel_grad_sums(a->dy, a->x, s, c, centre, sums);
    double dgamma = sums[1] * invstd;
    float scale = a->fix_gamma ? invstd : a->gamma[c] * invstd;
    float mean_dy = (float)(sums[0] / count);
    float slope = (float)(dgamma * invstd / count);
    for (Py_ssize_t n = 0; n < s->outer; n++) {
        Py_ssize_t at = row_offset(s, n, c);
        if (a->batch_stats) {
            row_batch_grad(a->dy + at, a->x + at, a->dx + at, s->inner, centre, mean_dy,
                           slope, scale);
        } else {
            row_scaled(a->dy + at, a->dx + at, s->inner, scale);
        }
    }
    a->dgamma[c] = a->fix_gamma ? 0.0f : (float)dgamma;
    a->dbeta[c] = (float)sums[0];
}

typedef struct {
    const float *x, *scale, *shift;
    float *out;
} Normalize;

static void normalize_channel(const Normalize *a, const Layout *s, Py_ssize_t c) {
    for (Py_ssize_t n = 0; n < s->outer; n++) {
        Py_ssize_t at = row_offset(s, n, c);
        row_scale_shift(a->x + at, a->out + at, s->inner, a->scale[c], a->shift[c]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Arguments */

/* `obj`'s memory as `count` C-contiguous float32 values, held in `b` until release_all; NULL
 * with an exception naming `name` otherwise. */
static float *borrow(Buffers *b, PyObject *obj, const char *name, Py_ssize_t count,
                     int writable) {
    Py_buffer *view = borrow_float32(b, obj, name, writable);
    if (view == NULL) {
        return NULL;
    }
    if (view->len != count * (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd float32 values, got %zd", name, count,
                     view->len / (Py_ssize_t)sizeof(float));
        return NULL;
    }
    return (float *)view->buf;
}

/* The layout's size, or -1 with an exception when a dimension or the range is invalid. */
static Py_ssize_t checked_size(const Layout *s, Py_ssize_t lo, Py_ssize_t hi) {
    if (s->outer < 1 || s->channels < 1 || s->inner < 1) {
        PyErr_Format(PyExc_ValueError, "layout (%zd, %zd, %zd): every dimension must be >= 1",
                     s->outer, s->channels, s->inner);
        return -1;
    }
    if (s->outer > PY_SSIZE_T_MAX / s->channels / s->inner / (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_OverflowError, "layout (%zd, %zd, %zd) is too large", s->outer,
                     s->channels, s->inner);
        return -1;
    }
    if (lo < 0 || hi < lo || hi > s->channels) {
        PyErr_Format(PyExc_ValueError, "channel range [%zd, %zd): expected 0 <= lo <= hi <= %zd",
                     lo, hi, s->channels);
        return -1;
    }
    return s->outer * s->channels * s->inner;
}

/* ------------------------------------------------------------------------------------------ */
/* Module functions */

static PyObject *train_forward(PyObject *self, PyObject *args) {
    PyObject *x, *out, *gamma, *beta, *mean, *var, *invstd;
    Layout s;
    Py_ssize_t lo, hi;
    double eps;
    int fix_gamma;
    if (!PyArg_ParseTuple(args, "OOOOOOO(nnn)nndp:bn_train_forward", &x, &out, &gamma, &beta,
                          &mean, &var, &invstd, &s.outer, &s.channels, &s.inner, &lo, &hi,
                          &eps, &fix_gamma)) {
        return NULL;
    }
    Py_ssize_t size = checked_size(&s, lo, hi);
    if (size < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    TrainForward a = {.eps = (float)eps, .fix_gamma = fix_gamma};
    if (!(a.x = borrow(&b, x, "x", size, 0)) || !(a.out = borrow(&b, out, "out", size, 1)) ||
        !(a.gamma = borrow(&b, gamma, "gamma", s.channels, 0)) ||
        !(a.beta = borrow(&b, beta, "beta", s.channels, 0)) ||
        !(a.mean = borrow(&b, mean, "mean", s.channels, 1)) ||
        !(a.var = borrow(&b, var, "var", s.channels, 1)) ||
        !(a.invstd = borrow(&b, invstd, "invstd", s.channels, 1))) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = lo; c < hi; c++) {
        train_forward_channel(&a, &s, c);
    }
    Py_END_ALLOW_THREADS
    release_all(&b);
    Py_RETURN_NONE;
}

static PyObject *backward(PyObject *self, PyObject *args) {
    PyObject *dy, *x, *gamma, *mean, *invstd, *dx, *dgamma, *dbeta;
    Layout s;
    Py_ssize_t lo, hi;
    int fix_gamma, batch_stats;
    if (!PyArg_ParseTuple(args, "OOOOOOOO(nnn)nnpp:bn_backward", &dy, &x, &gamma, &mean,
                          &invstd, &dx, &dgamma, &dbeta, &s.outer, &s.channels, &s.inner, &lo,
                          &hi, &fix_gamma, &batch_stats)) {
        return NULL;
    }
    Py_ssize_t size = checked_size(&s, lo, hi);
    if (size < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    Backward a = {.fix_gamma = fix_gamma, .batch_stats = batch_stats};
    if (!(a.dy = borrow(&b, dy, "dy", size, 0)) || !(a.x = borrow(&b, x, "x", size, 0)) ||
        !(a.gamma = borrow(&b, gamma, "gamma", s.channels, 0)) ||
        !(a.mean = borrow(&b, mean, "mean", s.channels, 0)) ||
        !(a.invstd = borrow(&b, invstd, "invstd", s.channels, 0)) ||
        !(a.dx = borrow(&b, dx, "dx", size, 1)) ||
        !(a.dgamma = borrow(&b, dgamma, "dgamma", s.channels, 1)) ||
        !(a.dbeta = borrow(&b, dbeta, "dbeta", s.channels, 1))) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = lo; c < hi; c++) {
        backward_channel(&a, &s, c);
    }
    Py_END_ALLOW_THREADS
    release_all(&b);
    Py_RETURN_NONE;
}

static PyObject *normalize(PyObject *self, PyObject *args) {
    PyObject *x, *out, *scale, *shift;
    Layout s;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "OOOO(nnn)nn:bn_normalize", &x, &out, &scale, &shift, &s.outer,
                          &s.channels, &s.inner, &lo, &hi)) {
        return NULL;
    }
    Py_ssize_t size = checked_size(&s, lo, hi);
    if (size < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    Normalize a;
    if (!(a.x = borrow(&b, x, "x", size, 0)) || !(a.out = borrow(&b, out, "out", size, 1)) ||
        !(a.scale = borrow(&b, scale, "scale", s.channels, 0)) ||
        !(a.shift = borrow(&b, shift, "shift", s.channels, 0))) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = lo; c < hi; c++) {
        normalize_channel(&a, &s, c);
    }
    Py_END_ALLOW_THREADS
    release_all(&b);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bn_train_forward", train_forward, METH_VARARGS,
     "bn_train_forward(x, out, gamma, beta, mean, var, invstd, (outer, channels, inner), lo, "
     "hi, eps, fix_gamma): BatchNorm with the batch statistics of channels [lo, hi); writes "
     "out and the per-channel mean, biased variance and 1 / sqrt(var + eps)."},
    {"bn_backward", backward, METH_VARARGS,
     "bn_backward(dy, x, gamma, mean, invstd, dx, dgamma, dbeta, (outer, channels, inner), lo, "
     "hi, fix_gamma, batch_stats): BatchNorm's data, gamma and beta gradients of channels "
     "[lo, hi), through the statistics when batch_stats."},
    {"bn_normalize", normalize, METH_VARARGS,
     "bn_normalize(x, out, scale, shift, (outer, channels, inner), lo, hi): out = x * scale[c] "
     "+ shift[c] for channels [lo, hi), rounded after the product and after the sum."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ember._kernels",
    "BatchNorm's compiled CPU kernels (see ember/op/nn/normalization.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    return PyModule_Create(&module);
}
