/* ember._kernels: BatchNorm's CPU kernels, the two element-wise chains of ResNet training
 * graphs that ember/op/fused.py runs in one pass (see "Residual add and relu" below), and the
 * SGD-with-momentum update (ember/op/optimizer_ops.py), and spread: a strided 1x1
 * convolution's data gradient written out from the stride-1 one over its output pixels, with
 * the zeros between (ember/op/nn/conv_algorithms.py).
 *
 * Data is float32, C-contiguous and seen as (outer, channels, inner): a channel is `outer` rows
 * of `inner` values, `channels * inner` values apart. Channel-first data (inner >= 16) is worked
 * on channel by channel, channel-last data (inner == 1: a row holds every channel) across the
 * channels side by side. bn_train_forward, bn_backward and bn_normalize work on the channels
 * [lo, hi) with the GIL released, so engine.parallel_for runs disjoint ranges on every kernel
 * thread; a channel's results never depend on the range it was computed in (deterministic).
 * Large channel-last data is split by rows instead, with bn_chunk_sums and bn_data_grad (see
 * "Channel-last data" below).
 *
 * bn_chunk_sums, bn_data_grad, bn_normalize, the residual chains, the SGD update and spread split
 * their own work on the calling thread's OpenMP team when asked (keywords threads and cores;
 * see _team.h): where the module is built with OpenMP, those are the threads oneDNN's
 * convolution before them ran on, still awake, where engine.parallel_for would wake its
 * sleeping kernel threads.
 *
 * Channel-first, a channel's passes follow each other while its rows are still in cache, so the
 * data is read from memory once: forward = the statistics, then scale and shift; backward = the
 * two sums, then the data gradient. Channel-last, each pass sweeps the rows.
 *
 * Sums run in 16 float lanes (GCC/Clang vector types: SSE on any x86-64, NEON on arm64) that
 * pour into doubles every 512 values (channel-first) or every 32 rows (channel-last, a lane per
 * channel): as fast as float, about as exact as double.
 *
 * Build with -ffp-contract=off: out = x * scale + shift must round twice, as NumPy's
 * np.multiply then np.add do in ember/op/nn/bn_apply.py, never as one fused multiply-add.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_buffers.h"
#include "_team.h"

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

typedef int32_t ivec4 __attribute__((vector_size(16)));

/* np.maximum(v, 0) of each lane: v <= 0 (-0.0 too) becomes +0.0, NaN stays. */
static vec4 relu4(vec4 v) {
    ivec4 clear = v <= splat4(0.0f);
    return (vec4)((ivec4)v & ~clear);
}

static float relu1(float v) {
    return v <= 0.0f ? 0.0f : v;
}

/* NumPy's g * (y > 0) of relu's gradient: g where y > 0, else g * 0 (-0.0 for a negative g,
 * NaN for NaN or infinite g); a NaN y is not > 0. */
static vec4 through_relu4(vec4 g, vec4 y) {
    ivec4 open = y > splat4(0.0f);
    return g * (vec4)((ivec4)splat4(1.0f) & open);
}

static float through_relu1(float g, float y) {
    return g * (y > 0.0f ? 1.0f : 0.0f);
}

/* BatchNormWithReLU's backward pass takes dy through relu's gradient, with relu's output
 * recomputed from BatchNorm's input: y = x * scale + shift, the forward pass's float32
 * operations, so y > 0 exactly where the output was (channel-last: per-channel constants). */
typedef struct {
    const float *scale, *shift;
} Mask;

/* out = x * scale + shift, then + residual (when not NULL), then relu (when asked), each
 * rounded as NumPy's operators one after the other round it. */
static void row_scale_shift(const float *x, float *out, Py_ssize_t len, float scale,
                            float shift, const float *residual, int relu) {
    vec4 times = splat4(scale), plus = splat4(shift);
    Py_ssize_t i = 0;
    for (; i + 4 <= len; i += 4) {
        vec4 v = load4(x + i) * times + plus;          /* two roundings: -ffp-contract=off */
        v = residual != NULL ? v + load4(residual + i) : v;
        store4(out + i, relu ? relu4(v) : v);
    }
    for (; i < len; i++) {
        float v = x[i] * scale + shift;
        v = residual != NULL ? v + residual[i] : v;
        out[i] = relu ? relu1(v) : v;
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
        row_scale_shift(a->x + at, a->out + at, s->inner, scale, shift, NULL, 0);
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
    const float *x, *scale, *shift, *residual;   /* residual: NULL, or shaped like x */
    float *out;
    int relu;       /* out = np.maximum(x * scale + shift (+ residual), 0) */
} Normalize;

static void normalize_channel(const Normalize *a, const Layout *s, Py_ssize_t c) {
    for (Py_ssize_t n = 0; n < s->outer; n++) {
        Py_ssize_t at = row_offset(s, n, c);
        row_scale_shift(a->x + at, a->out + at, s->inner, a->scale[c], a->shift[c],
                        a->residual != NULL ? a->residual + at : NULL, a->relu);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Channel-last data (inner == 1)
 *
 * A row holds every channel, so the lanes run across channels: groups of LANES neighbouring
 * channels, one lane each, sum POUR_ROWS rows in float and pour into the channels' doubles, as
 * many values as a channel-first lane takes between pours. The rows go by chunks of CHUNK_ROWS
 * whose sums are added in order: bn_chunk_sums gives them one by one, so that the kernel
 * threads can share the rows (ember/op/nn/normalization.py adds them up as these kernels do).
 * Pours fall on the same rows whatever the range, and a lane rounds exactly as a scalar would,
 * so a channel's sums depend neither on the channels beside it nor on the split. */

#define POUR_ROWS (BLOCK / LANES)
#define PREFETCH_BYTES 65536
/* The grain of a split by rows; the sums' centre is the mean of the first chunk (neighbouring rows
 * of an image differ little, so a few rows would often lie far from the channel's mean). */
#define CHUNK_ROWS 512

/* Up to 4 values from p, zeros after `count`; one load when count is 4. */
static vec4 load_some(const float *p, int count) {
    vec4 v = splat4(0);
    memcpy(&v, p, (size_t)count * sizeof(float));
    return v;
}

static int lanes_in(int width, int v) {
    return width - 4 * v < 4 ? width - 4 * v : 4;
}

static void pour(const vec4 *a, const vec4 *b, int width, double *total_a, double *total_b) {
    float lanes_a[LANES], lanes_b[LANES];
    memcpy(lanes_a, a, sizeof lanes_a);
    memcpy(lanes_b, b, sizeof lanes_b);
    for (int i = 0; i < width; i++) {
        total_a[i] += lanes_a[i];
        total_b[i] += lanes_b[i];
    }
}

/* Walks the lines of the range PREFETCH_BYTES ahead of the sums in memory order, asking for
 * one per row that a group of lanes takes: the lanes read columns of lines, a row apart, an
 * order that neither the hardware prefetchers nor the memory's open pages favour (the sums of
 * dy and x took twice as long when asking for the same columns rows ahead). */
typedef struct {
    Py_ssize_t row, column, width, rows;
} Ahead;

static Ahead ahead_of(Py_ssize_t n, Py_ssize_t width, Py_ssize_t rows) {
    Py_ssize_t distance = PREFETCH_BYTES / (width * (Py_ssize_t)sizeof(float));
    Ahead a = {.row = n + (distance > 0 ? distance : 1), .column = 0, .width = width,
               .rows = rows};
    return a;
}

static void prefetch_next(Ahead *a, const float *dy, const float *x, Py_ssize_t stride) {
    if (a->row < a->rows) {
        __builtin_prefetch(x + a->row * stride + a->column);
        if (dy != NULL) {
            __builtin_prefetch(dy + a->row * stride + a->column);
        }
    }
    a->column += LANES;
    if (a->column >= a->width) {
        a->column = 0;
        a->row++;
    }
}

/* Adds the two sums over `rows` <= POUR_ROWS rows, `stride` values apart, of `width` <= LANES
 * channels: of x - centre and its square, or with dy, of dy and dy * (x - centre); `ahead`
 * walks the range from base (and dy_base). Inlined so that full groups get constant widths. */
static inline __attribute__((always_inline)) void lanes_sums(
        const float *dy, const float *x, Py_ssize_t stride, Py_ssize_t rows, Ahead *ahead,
        const float *dy_base, const float *base, const float *centre, const Mask *mask,
        int width, double *sum_a, double *sum_b) {
    int vecs = (width + 3) / 4;
    vec4 middle[VECS], a[VECS], b[VECS], times[VECS], plus[VECS];
    for (int v = 0; v < vecs; v++) {
        middle[v] = load_some(centre + 4 * v, lanes_in(width, v));
        a[v] = b[v] = splat4(0);
        if (mask != NULL) {
            times[v] = load_some(mask->scale + 4 * v, lanes_in(width, v));
            plus[v] = load_some(mask->shift + 4 * v, lanes_in(width, v));
        }
    }
    for (Py_ssize_t n = 0; n < rows; n++) {
        prefetch_next(ahead, dy_base, base, stride);
        for (int v = 0; v < vecs; v++) {
            Py_ssize_t at = n * stride + 4 * v;
            vec4 value = load_some(x + at, lanes_in(width, v)), d = value - middle[v];
            vec4 g = dy != NULL ? load_some(dy + at, lanes_in(width, v)) : d;
            if (mask != NULL) {
                g = through_relu4(g, value * times[v] + plus[v]);
            }
            a[v] += g;
            b[v] += g * d;
        }
    }
    pour(a, b, width, sum_a, sum_b);
}

static Py_ssize_t smaller(Py_ssize_t a, Py_ssize_t b) {
    return a < b ? a : b;
}

/* lanes_sums of the channels [lo, hi) over the rows [r0, r1), into sum_a and sum_b (indexed
 * from lo, like centre and the mask's constants). */
static void chunk_sums(const float *dy, const float *x, const Layout *s, Py_ssize_t lo,
                       Py_ssize_t hi, Py_ssize_t r0, Py_ssize_t r1, const float *centre,
                       const Mask *mask, double *sum_a, double *sum_b) {
    memset(sum_a, 0, (size_t)(hi - lo) * sizeof(double));
    memset(sum_b, 0, (size_t)(hi - lo) * sizeof(double));
    if (hi <= lo) {
        return;
    }
    const float *base = x + lo, *dy_base = dy != NULL ? dy + lo : NULL;
    for (Py_ssize_t n = r0; n < r1; n += POUR_ROWS) {
        Py_ssize_t rows = smaller(POUR_ROWS, r1 - n);
        Ahead ahead = ahead_of(n, hi - lo, s->outer);
        for (Py_ssize_t c = lo; c < hi; c += LANES) {
            Py_ssize_t at = n * s->channels + c, i = c - lo;
            const float *g = dy != NULL ? dy + at : NULL;
            Mask part, *m = NULL;
            if (mask != NULL) {
                part.scale = mask->scale + i, part.shift = mask->shift + i, m = &part;
            }
            if (hi - c >= LANES && dy != NULL && m != NULL) {
                lanes_sums(g, x + at, s->channels, rows, &ahead, dy_base, base, centre + i,
                           m, LANES, sum_a + i, sum_b + i);
            } else if (hi - c >= LANES && dy != NULL) {
                lanes_sums(g, x + at, s->channels, rows, &ahead, dy_base, base, centre + i,
                           NULL, LANES, sum_a + i, sum_b + i);
            } else if (hi - c >= LANES) {
                lanes_sums(NULL, x + at, s->channels, rows, &ahead, NULL, base, centre + i,
                           NULL, LANES, sum_a + i, sum_b + i);
            } else {
                lanes_sums(g, x + at, s->channels, rows, &ahead, dy_base, base, centre + i,
                           m, (int)(hi - c), sum_a + i, sum_b + i);
            }
        }
    }
}

/* chunk_sums over the first `rows` rows, chunk by chunk, the chunks' sums added in order;
 * `part` holds 2 * (hi - lo) doubles. */
static void column_sums(const float *dy, const float *x, const Layout *s, Py_ssize_t lo,
                        Py_ssize_t hi, Py_ssize_t rows, const float *centre, double *sum_a,
                        double *sum_b, double *part) {
    Py_ssize_t width = hi - lo;
    chunk_sums(dy, x, s, lo, hi, 0, smaller(CHUNK_ROWS, rows), centre, NULL, sum_a, sum_b);
    for (Py_ssize_t r0 = CHUNK_ROWS; r0 < rows; r0 += CHUNK_ROWS) {
        chunk_sums(dy, x, s, lo, hi, r0, smaller(r0 + CHUNK_ROWS, rows), centre, NULL, part,
                   part + width);
        for (Py_ssize_t i = 0; i < width; i++) {
            sum_a[i] += part[i];
            sum_b[i] += part[width + i];
        }
    }
}

/* row_scale_shift with each value's own scale and shift. */
static void row_scale_shift_each(const float *x, float *out, Py_ssize_t len, const float *scale,
                                 const float *shift, const float *residual, int relu) {
    Py_ssize_t i = 0;
    for (; i + 4 <= len; i += 4) {
        vec4 v = load4(x + i) * load4(scale + i) + load4(shift + i);
        v = residual != NULL ? v + load4(residual + i) : v;
        store4(out + i, relu ? relu4(v) : v);
    }
    for (; i < len; i++) {
        float v = x[i] * scale[i] + shift[i];
        v = residual != NULL ? v + residual[i] : v;
        out[i] = relu ? relu1(v) : v;
    }
}

/* dy through relu's gradient where a mask is given (see Mask), else dy itself. */
static vec4 masked4(const float *dy, const float *x, const Mask *m, Py_ssize_t i) {
    vec4 g = load4(dy + i);
    return m == NULL ? g : through_relu4(g, load4(x + i) * load4(m->scale + i)
                                                + load4(m->shift + i));
}

static float masked1(const float *dy, const float *x, const Mask *m, Py_ssize_t i) {
    return m == NULL ? dy[i] : through_relu1(dy[i], x[i] * m->scale[i] + m->shift[i]);
}

/* row_batch_grad with per-value constants, dy through the mask's relu when given. */
static void row_batch_grad_each(const float *dy, const float *x, float *dx, Py_ssize_t len,
                                const float *centre, const float *mean_dy, const float *slope,
                                const float *scale, const Mask *m) {
    Py_ssize_t i = 0;
    for (; i + 4 <= len; i += 4) {
        vec4 g = masked4(dy, x, m, i) - load4(mean_dy + i) - (load4(x + i) - load4(centre + i))
                 * load4(slope + i);
        store4(dx + i, g * load4(scale + i));
    }
    for (; i < len; i++) {
        dx[i] = (masked1(dy, x, m, i) - mean_dy[i] - (x[i] - centre[i]) * slope[i]) * scale[i];
    }
}

static void row_scaled_each(const float *dy, const float *x, float *dx, Py_ssize_t len,
                            const float *scale, const Mask *m) {
    for (Py_ssize_t i = 0; i < len; i++) {
        dx[i] = masked1(dy, x, m, i) * scale[i];
    }
}

/* Per-channel values of a channel-last range, allocated per call: the two sums of each
 * channel, a chunk's two sums, and the constants of the element-wise pass (forward: centre,
 * scale and shift; backward: mean(dy), slope and scale). */
typedef struct {
    double *sums[2], *part;
    float *constants[3];
} Scratch;

/* 0, or -1 with MemoryError. */
static int scratch_alloc(Scratch *w, Py_ssize_t width) {
    size_t each = (size_t)(width > 0 ? width : 1);
    char *block = PyMem_Malloc(each * (4 * sizeof(double) + 3 * sizeof(float)));
    if (block == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->sums[0] = (double *)block;
    w->sums[1] = w->sums[0] + each;
    w->part = w->sums[1] + each;
    w->constants[0] = (float *)(w->part + 2 * each);
    w->constants[1] = w->constants[0] + each;
    w->constants[2] = w->constants[1] + each;
    return 0;
}

/* channel_moments of each channel of [lo, hi), centred on the mean of the first chunk; the
 * second pass sweeps the span of the channels that need it: the others between them get their
 * sums again, bit for bit, since their centres did not change. */
static void columns_moments(const float *x, const Layout *s, Py_ssize_t lo, Py_ssize_t hi,
                            Scratch *w, float *mean, float *var) {
    double count = (double)s->outer, *sum = w->sums[0], *squares = w->sums[1];
    Py_ssize_t width = hi - lo, first = smaller(s->outer, CHUNK_ROWS), from = width, to = 0;
    float *centre = w->constants[0];
    memset(centre, 0, (size_t)width * sizeof(float));
    column_sums(NULL, x, s, lo, hi, first, centre, sum, squares, w->part);
    for (Py_ssize_t i = 0; i < width; i++) {
        centre[i] = (float)(sum[i] / first);
    }
    column_sums(NULL, x, s, lo, hi, s->outer, centre, sum, squares, w->part);
    for (Py_ssize_t i = 0; i < width; i++) {
        if (sum[i] * sum[i] / count > squares[i] / 2) {
            centre[i] = (float)(centre[i] + sum[i] / count);
            from = smaller(from, i);
            to = i + 1;
        }
    }
    if (from < to) {
        column_sums(NULL, x, s, lo + from, lo + to, s->outer, centre + from, sum + from,
                    squares + from, w->part);
    }
    for (Py_ssize_t i = 0; i < width; i++) {
        double spread = (squares[i] - sum[i] * sum[i] / count) / count;
        mean[lo + i] = (float)(centre[i] + sum[i] / count);
        var[lo + i] = (float)(spread > 0 ? spread : 0);
    }
}

/* train_forward_channel for the channels [lo, hi) of channel-last data. */
static void train_forward_columns(const TrainForward *a, const Layout *s, Py_ssize_t lo,
                                  Py_ssize_t hi, Scratch *w) {
    float *scale = w->constants[1], *shift = w->constants[2];
    columns_moments(a->x, s, lo, hi, w, a->mean, a->var);
    for (Py_ssize_t c = lo; c < hi; c++) {
        float invstd = 1.0f / sqrtf(a->var[c] + a->eps);
        scale[c - lo] = a->fix_gamma ? invstd : a->gamma[c] * invstd;
        shift[c - lo] = a->beta[c] - a->mean[c] * scale[c - lo];
        a->invstd[c] = invstd;
    }
    for (Py_ssize_t n = 0; n < s->outer; n++) {
        Py_ssize_t at = n * s->channels + lo;
        row_scale_shift_each(a->x + at, a->out + at, hi - lo, scale, shift, NULL, 0);
    }
}

/* dx of the channels [lo, hi) of channel-last data in the rows [r0, r1), their constants
 * (the mask's too) indexed from lo. */
static void rows_data_grad(const float *dy, const float *x, float *dx, const Layout *s,
                           Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t r0, Py_ssize_t r1,
                           const float *centre, const float *mean_dy, const float *slope,
                           const float *scale, int batch_stats, const Mask *mask) {
    for (Py_ssize_t n = r0; n < r1; n++) {
        Py_ssize_t at = n * s->channels + lo;
        if (batch_stats) {
            row_batch_grad_each(dy + at, x + at, dx + at, hi - lo, centre, mean_dy, slope,
                                scale, mask);
        } else {
            row_scaled_each(dy + at, x + at, dx + at, hi - lo, scale, mask);
        }
    }
}

/* backward_channel for the channels [lo, hi) of channel-last data. */
static void backward_columns(const Backward *a, const Layout *s, Py_ssize_t lo, Py_ssize_t hi,
                             Scratch *w) {
    double count = (double)s->outer, *sum = w->sums[0], *products = w->sums[1];
    float *mean_dy = w->constants[0], *slope = w->constants[1], *scale = w->constants[2];
    column_sums(a->dy, a->x, s, lo, hi, s->outer, a->mean + lo, sum, products, w->part);
    for (Py_ssize_t c = lo, i = 0; c < hi; c++, i++) {
        float invstd = a->invstd[c];
        double dgamma = products[i] * invstd;
        scale[i] = a->fix_gamma ? invstd : a->gamma[c] * invstd;
        mean_dy[i] = (float)(sum[i] / count);
        slope[i] = (float)(dgamma * invstd / count);
        a->dgamma[c] = a->fix_gamma ? 0.0f : (float)dgamma;
        a->dbeta[c] = (float)sum[i];
    }
    rows_data_grad(a->dy, a->x, a->dx, s, lo, hi, 0, s->outer, a->mean + lo, mean_dy, slope,
                   scale, a->batch_stats, NULL);
}

/* normalize_channel for the channels [lo, hi) of channel-last data, in the rows [r0, r1). */
static void normalize_columns(const Normalize *a, const Layout *s, Py_ssize_t lo,
                              Py_ssize_t hi, Py_ssize_t r0, Py_ssize_t r1) {
    for (Py_ssize_t n = r0; n < r1; n++) {
        Py_ssize_t at = n * s->channels + lo;
        row_scale_shift_each(a->x + at, a->out + at, hi - lo, a->scale + lo, a->shift + lo,
                             a->residual != NULL ? a->residual + at : NULL, a->relu);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Residual add and relu
 *
 * The _FusedElemwise chains relu(a + b) (a residual block's output) and (a + b) * (y > 0) (its
 * gradient: the two gradients reaching y added, through relu's output y), with exactly NumPy's
 * float32 results, NaN bits included: each value is one float add, then a select or a multiply
 * by 1 or 0 as NumPy's maximum and multiply do them. They work on the elements [lo, hi) of flat
 * arrays with the GIL released, so engine.parallel_for runs disjoint ranges on the kernel
 * threads (or they split the range on the OpenMP team themselves). Four values are read from
 * every input before their four results are stored, so out may be an input's memory (the same
 * elements; the graph's in-place outputs are). Written with vector types since GCC leaves the
 * gradient's scalar loop unvectorised: it keeps the float comparison as a branch under the
 * default -ftrapping-math. */

/* out = np.maximum(a + b, 0): a sum <= 0 becomes +0.0 (so does -0.0, as NumPy's maximum gives),
 * others, NaN among them, stay as they are. */
static void add_relu_range(const float *a, const float *b, float *out, Py_ssize_t lo,
                           Py_ssize_t hi) {
    Py_ssize_t i = lo;
    for (; i + 4 <= hi; i += 4) {
        store4(out + i, relu4(load4(a + i) + load4(b + i)));
    }
    for (; i < hi; i++) {
        out[i] = relu1(a[i] + b[i]);
    }
}

/* out = (a + b) * (y > 0), NumPy's multiply by the mask as 1.0f or 0.0f: the sum where y > 0,
 * else sum * 0 (-0.0 for a negative sum, NaN for a NaN or infinite one); NaN y is not > 0. */
static void add_relu_grad_range(const float *a, const float *b, const float *y, float *out,
                                Py_ssize_t lo, Py_ssize_t hi) {
    Py_ssize_t i = lo;
    for (; i + 4 <= hi; i += 4) {
        store4(out + i, through_relu4(load4(a + i) + load4(b + i), load4(y + i)));
    }
    for (; i < hi; i++) {
        out[i] = through_relu1(a[i] + b[i], y[i]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* A strided 1x1 convolution's data gradient from the stride-1 one over its output pixels:
 * channel-last dst (n, h, w, c) holds src (n, ho, wo, c) at every sh-th row and sw-th column
 * and zeros everywhere else, each value written once. */

typedef struct {
    const float *src;
    float *dst;
    Py_ssize_t h, w, c, ho, wo, sh, sw;
} Spread;

/* dst's rows [lo, hi) of w pixels, row r being (sample r / h, row r % h). */
static void spread_rows(const Spread *k, Py_ssize_t lo, Py_ssize_t hi) {
    size_t pixel = (size_t)k->c * sizeof(float);
    for (Py_ssize_t r = lo; r < hi; r++) {
        Py_ssize_t n = r / k->h, y = r % k->h;
        float *out = k->dst + r * k->w * k->c;
        if (y % k->sh != 0) {
            memset(out, 0, (size_t)k->w * pixel);
            continue;
        }
        const float *in = k->src + (n * k->ho + y / k->sh) * k->wo * k->c;
        for (Py_ssize_t x = 0; x < k->w; x++, out += k->c) {
            if (x % k->sw == 0) {
                memcpy(out, in + x / k->sw * k->c, pixel);
            } else {
                memset(out, 0, pixel);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* SGD with momentum: optimizer_ops._sgd_mom_step in one pass over the four arrays, where its
 * NumPy calls take six over cache-sized blocks. Each product and difference rounds to float32
 * in the same order as there (no FMA: -ffp-contract=off), so the bits are NumPy's:
 *   step = clip(rescale * g) * lr;  mom = mom * momentum - lr_wd * w - step;  out = w + mom.
 * clip < 0 clips nothing; np.clip passes NaN through, and so does the comparison here. out may
 * be w: w[i] is read before out[i] is written. */

static void sgd_mom_range(const float *w, const float *g, float *mom, float *out,
                          Py_ssize_t lo, Py_ssize_t hi, float rescale, float clip, float lr,
                          float lr_wd, float momentum) {
    int clipping = clip >= 0;       /* loop-invariant: the compiler splits the loop on it */
    for (Py_ssize_t i = lo; i < hi; i++) {
        float step = rescale * g[i];
        if (clipping) {
            step = step < -clip ? -clip : step > clip ? clip : step;
        }
        step = step * lr;
        float m = mom[i] * momentum;
        m = m - lr_wd * w[i];
        m = m - step;
        mom[i] = m;
        out[i] = w[i] + m;
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

/* `obj`'s memory as `count` writable C-contiguous float64 values, as borrow. */
static double *borrow_doubles(Buffers *b, PyObject *obj, const char *name, Py_ssize_t count) {
    Py_buffer *view = next_view(b, name);
    if (view == NULL || PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    b->count++;
    const char *format = view->format != NULL ? view->format : "B", *kind = format;
    if (kind[0] == '<' || kind[0] == '=' || kind[0] == '@') {
        kind++;
    }
    if (view->itemsize != 8 || strcmp(kind, "d") != 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected float64 values, got buffer format '%s'",
                     name, format);
        return NULL;
    }
    if (view->len != count * (Py_ssize_t)sizeof(double)) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd float64 values, got %zd", name, count,
                     view->len / (Py_ssize_t)sizeof(double));
        return NULL;
    }
    return (double *)view->buf;
}

/* The size of a channel-last layout, or -1 with an exception. */
static Py_ssize_t channel_last_size(const Layout *s, const char *function) {
    Py_ssize_t size = checked_size(s, 0, s->channels);
    if (size >= 0 && s->inner != 1) {
        PyErr_Format(PyExc_ValueError, "%s: layout (%zd, %zd, %zd): expected inner == 1 "
                     "(channel-last data)", function, s->outer, s->channels, s->inner);
        return -1;
    }
    return size;
}

/* The `count` arrays of an element-wise function (inputs, then the output written) as
 * C-contiguous float32 values, as many as the first, held in `b`; their number, or -1 with an
 * exception when an array or the element range [lo, hi) is invalid. */
static Py_ssize_t borrow_elementwise(Buffers *b, PyObject *const *objs, const char *const *names,
                                     int count, float **values, Py_ssize_t lo, Py_ssize_t hi) {
    Py_buffer *first = borrow_float32(b, objs[0], names[0], 0);
    if (first == NULL) {
        return -1;
    }
    Py_ssize_t size = first->len / (Py_ssize_t)sizeof(float);
    values[0] = (float *)first->buf;
    for (int k = 1; k < count; k++) {
        values[k] = borrow(b, objs[k], names[k], size, k == count - 1);
        if (values[k] == NULL) {
            return -1;
        }
    }
    if (lo < 0 || hi < lo || hi > size) {
        PyErr_Format(PyExc_ValueError, "element range [%zd, %zd): expected 0 <= lo <= hi <= %zd",
                     lo, hi, size);
        return -1;
    }
    return size;
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
    Scratch w = {.sums = {NULL}};
    if (s.inner == 1 && scratch_alloc(&w, hi - lo) < 0) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (s.inner == 1) {
        train_forward_columns(&a, &s, lo, hi, &w);
    } else {
        for (Py_ssize_t c = lo; c < hi; c++) {
            train_forward_channel(&a, &s, c);
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(w.sums[0]);
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
    Scratch w = {.sums = {NULL}};
    if (s.inner == 1 && scratch_alloc(&w, hi - lo) < 0) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (s.inner == 1) {
        backward_columns(&a, &s, lo, hi, &w);
    } else {
        for (Py_ssize_t c = lo; c < hi; c++) {
            backward_channel(&a, &s, c);
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(w.sums[0]);
    release_all(&b);
    Py_RETURN_NONE;
}

static PyObject *normalize(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "", "", "", "relu", "residual", "threads",
                               "cores", NULL};
    PyObject *x, *out, *scale, *shift, *residual = Py_None, *cores = Py_None;
    Layout s;
    Py_ssize_t lo, hi, threads = 1;
    int relu = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO(nnn)nn|pO$nO:bn_normalize", keywords,
                                     &x, &out, &scale, &shift, &s.outer, &s.channels, &s.inner,
                                     &lo, &hi, &relu, &residual, &threads, &cores)) {
        return NULL;
    }
    Py_ssize_t size = checked_size(&s, lo, hi);
    int parts = team_size(threads), asked = 0;
    if (size < 0 || parts < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    Normalize a = {.relu = relu, .residual = NULL};
    if (!(a.x = borrow(&b, x, "x", size, 0)) || !(a.out = borrow(&b, out, "out", size, 1)) ||
        (residual != Py_None && !(a.residual = borrow(&b, residual, "residual", size, 0))) ||
        !(a.scale = borrow(&b, scale, "scale", s.channels, 0)) ||
        !(a.shift = borrow(&b, shift, "shift", s.channels, 0))) {
        release_all(&b);
        return NULL;
    }
    int *core_list = team_cores(cores, parts, "threads", &asked);
    if (asked && core_list == NULL) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1)
    {
        int t = TEAM_THREAD(), n = TEAM_SIZE();
        Py_ssize_t from, to;
        team_pin(core_list, t);
        if (s.inner == 1) {
            team_part(0, s.outer, t, n, &from, &to);
            normalize_columns(&a, &s, lo, hi, from, to);
        } else {
            team_part(lo, hi, t, n, &from, &to);
            for (Py_ssize_t c = from; c < to; c++) {
                normalize_channel(&a, &s, c);
            }
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    Py_RETURN_NONE;
}

/* The Mask of the optional (mask_scale, mask_shift) arguments: 1 with `mask` set when both are
 * given, 0 when both are None, -1 with an exception otherwise. */
static int borrow_mask(Buffers *b, PyObject *scale, PyObject *shift, Py_ssize_t channels,
                       Mask *mask) {
    if (scale == Py_None && shift == Py_None) {
        return 0;
    }
    if (scale == Py_None || shift == Py_None) {
        PyErr_SetString(PyExc_ValueError, "mask_scale and mask_shift: expected both or neither");
        return -1;
    }
    if (!(mask->scale = borrow(b, scale, "mask_scale", channels, 0)) ||
        !(mask->shift = borrow(b, shift, "mask_shift", channels, 0))) {
        return -1;
    }
    return 1;
}

static PyObject *chunk_sums_of(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "", "", "", "mask_scale", "mask_shift",
                               "threads", "cores", NULL};
    PyObject *x, *dy, *centre, *sums, *mask_scale = Py_None, *mask_shift = Py_None;
    PyObject *cores = Py_None;
    Layout s;
    Py_ssize_t first, last, threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO(nnn)nn|OO$nO:bn_chunk_sums", keywords,
                                     &x, &dy, &centre, &sums, &s.outer, &s.channels, &s.inner,
                                     &first, &last, &mask_scale, &mask_shift, &threads,
                                     &cores)) {
        return NULL;
    }
    Py_ssize_t size = channel_last_size(&s, "bn_chunk_sums");
    int parts = team_size(threads), asked = 0;
    if (size < 0 || parts < 0) {
        return NULL;
    }
    Py_ssize_t chunks = (s.outer + CHUNK_ROWS - 1) / CHUNK_ROWS;
    if (first < 0 || last < first || last > chunks) {
        PyErr_Format(PyExc_ValueError, "chunk range [%zd, %zd): expected 0 <= first <= last "
                     "<= %zd", first, last, chunks);
        return NULL;
    }
    Buffers b = {.count = 0};
    const float *xs, *dys = NULL, *middle;
    double *out;
    Mask mask;
    int masked = 0;
    if (!(xs = borrow(&b, x, "x", size, 0)) ||
        (dy != Py_None && !(dys = borrow(&b, dy, "dy", size, 0))) ||
        !(middle = borrow(&b, centre, "centre", s.channels, 0)) ||
        !(out = borrow_doubles(&b, sums, "sums", chunks * 2 * s.channels)) ||
        (masked = borrow_mask(&b, mask_scale, mask_shift, s.channels, &mask)) < 0) {
        release_all(&b);
        return NULL;
    }
    if (masked && dys == NULL) {
        release_all(&b);
        PyErr_SetString(PyExc_ValueError, "bn_chunk_sums: a mask takes dy through relu's "
                        "gradient; expected dy, got None");
        return NULL;
    }
    int *core_list = team_cores(cores, parts, "threads", &asked);
    if (asked && core_list == NULL) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1)
    {
        int t = TEAM_THREAD();
        Py_ssize_t from, to;
        team_pin(core_list, t);
        team_part(first, last, t, TEAM_SIZE(), &from, &to);
        for (Py_ssize_t k = from; k < to; k++) {
            double *at = out + 2 * k * s.channels;
            chunk_sums(dys, xs, &s, 0, s.channels, k * CHUNK_ROWS,
                       smaller((k + 1) * CHUNK_ROWS, s.outer), middle, masked ? &mask : NULL,
                       at, at + s.channels);
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    Py_RETURN_NONE;
}

static PyObject *data_grad(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "", "", "", "", "", "mask_scale", "mask_shift",
                               "threads", "cores", NULL};
    PyObject *dy, *x, *mean, *mean_dy, *slope, *scale, *dx;
    PyObject *mask_scale = Py_None, *mask_shift = Py_None, *cores = Py_None;
    Layout s;
    Py_ssize_t threads = 1;
    int batch_stats;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOO(nnn)p|OO$nO:bn_data_grad", keywords,
                                     &dy, &x, &mean, &mean_dy, &slope, &scale, &dx, &s.outer,
                                     &s.channels, &s.inner, &batch_stats, &mask_scale,
                                     &mask_shift, &threads, &cores)) {
        return NULL;
    }
    Py_ssize_t size = channel_last_size(&s, "bn_data_grad");
    int parts = team_size(threads), asked = 0;
    if (size < 0 || parts < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    const float *dys, *xs, *centre, *mean_dys, *slopes, *scales;
    float *dxs;
    Mask mask;
    int masked = 0;
    if (!(dys = borrow(&b, dy, "dy", size, 0)) || !(xs = borrow(&b, x, "x", size, 0)) ||
        !(centre = borrow(&b, mean, "mean", s.channels, 0)) ||
        !(mean_dys = borrow(&b, mean_dy, "mean_dy", s.channels, 0)) ||
        !(slopes = borrow(&b, slope, "slope", s.channels, 0)) ||
        !(scales = borrow(&b, scale, "scale", s.channels, 0)) ||
        !(dxs = borrow(&b, dx, "dx", size, 1)) ||
        (masked = borrow_mask(&b, mask_scale, mask_shift, s.channels, &mask)) < 0) {
        release_all(&b);
        return NULL;
    }
    int *core_list = team_cores(cores, parts, "threads", &asked);
    if (asked && core_list == NULL) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1)
    {
        int t = TEAM_THREAD();
        Py_ssize_t from, to;
        team_pin(core_list, t);
        team_part(0, s.outer, t, TEAM_SIZE(), &from, &to);
        rows_data_grad(dys, xs, dxs, &s, 0, s.channels, from, to, centre, mean_dys, slopes,
                       scales, batch_stats, masked ? &mask : NULL);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    Py_RETURN_NONE;
}

/* add_relu(a, b, out, lo, hi) or add_relu_grad(a, b, y, out, lo, hi): the elements [lo, hi)
 * split over a team of `threads` (keyword) threads. */
static PyObject *residual_chain(PyObject *args, PyObject *kwargs, int grad) {
    static char *keywords[] = {"", "", "", "", "", "", "threads", "cores", NULL};
    static const char *const names[2][4] = {{"a", "b", "out"}, {"a", "b", "y", "out"}};
    PyObject *objs[4], *cores = Py_None;
    float *v[4];
    Py_ssize_t lo, hi, threads = 1;
    int count = grad ? 4 : 3, ok;
    if (grad) {
        ok = PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOnn|$nO:add_relu_grad", keywords,
                                         &objs[0], &objs[1], &objs[2], &objs[3], &lo, &hi,
                                         &threads, &cores);
    } else {
        ok = PyArg_ParseTupleAndKeywords(args, kwargs, "OOOnn|$nO:add_relu", keywords + 1,
                                         &objs[0], &objs[1], &objs[2], &lo, &hi, &threads,
                                         &cores);
    }
    int parts = ok ? team_size(threads) : -1, asked = 0;
    if (parts < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    int *core_list = NULL;
    if (borrow_elementwise(&b, objs, names[grad], count, v, lo, hi) < 0 ||
        ((core_list = team_cores(cores, parts, "threads", &asked)) == NULL && asked)) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1)
    {
        int t = TEAM_THREAD();
        Py_ssize_t from, to;
        team_pin(core_list, t);
        team_part(lo, hi, t, TEAM_SIZE(), &from, &to);
        if (grad) {
            add_relu_grad_range(v[0], v[1], v[2], v[3], from, to);
        } else {
            add_relu_range(v[0], v[1], v[2], from, to);
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    Py_RETURN_NONE;
}

static PyObject *add_relu(PyObject *self, PyObject *args, PyObject *kwargs) {
    return residual_chain(args, kwargs, 0);
}

static PyObject *add_relu_grad(PyObject *self, PyObject *args, PyObject *kwargs) {
    return residual_chain(args, kwargs, 1);
}

static PyObject *sgd_mom_update(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "", "", "", "", "", "", "", "threads", "cores",
                               NULL};
    PyObject *objs[4], *cores = Py_None;
    const char *const names[4] = {"weight", "grad", "mom", "out"};
    float *v[4];
    Py_ssize_t lo, hi, threads = 1;
    double rescale, clip, lr, lr_wd, momentum;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOnnddddd|$nO:sgd_mom_update", keywords,
                                     &objs[0], &objs[1], &objs[2], &objs[3], &lo, &hi,
                                     &rescale, &clip, &lr, &lr_wd, &momentum, &threads,
                                     &cores)) {
        return NULL;
    }
    int parts = team_size(threads), asked = 0;
    if (parts < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    Py_buffer *first = borrow_float32(&b, objs[0], names[0], 0);
    Py_ssize_t size = first == NULL ? 0 : first->len / (Py_ssize_t)sizeof(float);
    int ok = first != NULL;
    if (ok) {
        v[0] = (float *)first->buf;
    }
    for (int k = 1; ok && k < 4; k++) {
        ok = (v[k] = borrow(&b, objs[k], names[k], size, k >= 2)) != NULL;
    }
    if (ok && (lo < 0 || hi < lo || hi > size)) {
        PyErr_Format(PyExc_ValueError, "element range [%zd, %zd): expected 0 <= lo <= hi <= %zd",
                     lo, hi, size);
        ok = 0;
    }
    int *core_list = NULL;
    if (!ok || ((core_list = team_cores(cores, parts, "threads", &asked)) == NULL && asked)) {
        release_all(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1)
    {
        int t = TEAM_THREAD();
        Py_ssize_t from, to;
        team_pin(core_list, t);
        team_part(lo, hi, t, TEAM_SIZE(), &from, &to);
        sgd_mom_range(v[0], v[1], v[2], v[3], from, to, (float)rescale, (float)clip,
                      (float)lr, (float)lr_wd, (float)momentum);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    Py_RETURN_NONE;
}

/* spread(src, dst, stride_h, stride_w, *, threads, cores): see spread_rows; the team splits
 * dst's rows. */
static PyObject *spread(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"", "", "", "", "threads", "cores", NULL};
    PyObject *objs[2], *cores = Py_None;
    Py_ssize_t sh, sw, threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOnn|$nO:spread", keywords, &objs[0],
                                     &objs[1], &sh, &sw, &threads, &cores)) {
        return NULL;
    }
    if (sh < 1 || sw < 1) {
        PyErr_Format(PyExc_ValueError, "spread: strides must be at least 1, got (%zd, %zd)",
                     sh, sw);
        return NULL;
    }
    int parts = team_size(threads), asked = 0;
    if (parts < 0) {
        return NULL;
    }
    Buffers b = {.count = 0};
    Py_buffer *src = borrow_float32(&b, objs[0], "src", 0);
    Py_buffer *dst = src == NULL ? NULL : borrow_float32(&b, objs[1], "dst", 1);
    if (dst == NULL) {
        release_all(&b);
        return NULL;
    }
    if (src->ndim != 4 || dst->ndim != 4) {
        PyErr_Format(PyExc_ValueError, "spread: src and dst must be 4-D (n, h, w, c), got %d-D "
                     "and %d-D", src->ndim, dst->ndim);
        release_all(&b);
        return NULL;
    }
    const Py_ssize_t *is = src->shape, *os = dst->shape;
    if (is[0] != os[0] || is[3] != os[3] || is[1] != (os[1] + sh - 1) / sh ||
        is[2] != (os[2] + sw - 1) / sw) {
        PyErr_Format(PyExc_ValueError, "spread: src (%zd, %zd, %zd, %zd) is not dst (%zd, %zd, "
                     "%zd, %zd) at strides (%zd, %zd): expected (%zd, %zd, %zd, %zd)",
                     is[0], is[1], is[2], is[3], os[0], os[1], os[2], os[3], sh, sw, os[0],
                     (os[1] + sh - 1) / sh, (os[2] + sw - 1) / sw, os[3]);
        release_all(&b);
        return NULL;
    }
    int *core_list = team_cores(cores, parts, "threads", &asked);
    if (core_list == NULL && asked) {
        release_all(&b);
        return NULL;
    }
    Spread k = {src->buf, dst->buf, os[1], os[2], os[3], is[1], is[2], sh, sw};
    Py_ssize_t rows = os[0] * os[1];
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(parts) if (parts > 1)
    {
        int t = TEAM_THREAD();
        Py_ssize_t from, to;
        team_pin(core_list, t);
        team_part(0, rows, t, TEAM_SIZE(), &from, &to);
        spread_rows(&k, from, to);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(core_list);
    release_all(&b);
    Py_RETURN_NONE;
}

/* The keywords of the functions that split their work on the OpenMP team. */
#define TEAM_DOC                                                                               \
    " threads, cores (keyword-only): the work split into `threads` parts, as "                \
    "engine.parallel_for splits it, run on the calling thread's OpenMP team (one after the "  \
    "other where the module has no OpenMP: `openmp` false); with cores (one core number per " \
    "thread), team thread t > 0 first pins itself to cores[t]."

static PyMethodDef methods[] = {
    {"bn_train_forward", train_forward, METH_VARARGS,
     "bn_train_forward(x, out, gamma, beta, mean, var, invstd, (outer, channels, inner), lo, "
     "hi, eps, fix_gamma): BatchNorm with the batch statistics of channels [lo, hi); writes "
     "out and the per-channel mean, biased variance and 1 / sqrt(var + eps)."},
    {"bn_backward", backward, METH_VARARGS,
     "bn_backward(dy, x, gamma, mean, invstd, dx, dgamma, dbeta, (outer, channels, inner), lo, "
     "hi, fix_gamma, batch_stats): BatchNorm's data, gamma and beta gradients of channels "
     "[lo, hi), through the statistics when batch_stats."},
    {"bn_normalize", (PyCFunction)(void (*)(void))normalize, METH_VARARGS | METH_KEYWORDS,
     "bn_normalize(x, out, scale, shift, (outer, channels, inner), lo, hi, relu=False, "
     "residual=None, *, threads=1, cores=None): out = x * scale[c] + shift[c] for channels "
     "[lo, hi), rounded after the product and after the sum; then + residual (shaped like x, "
     "may be out) and, with relu, np.maximum of that and 0, each rounded in turn. The team "
     "splits the rows of channel-last data (inner 1), else the channels." TEAM_DOC},
    {"bn_chunk_sums", (PyCFunction)(void (*)(void))chunk_sums_of, METH_VARARGS | METH_KEYWORDS,
     "bn_chunk_sums(x, dy, centre, sums, (outer, channels, 1), first, last, mask_scale=None, "
     "mask_shift=None, *, threads=1, cores=None): channel-last data; "
     "for the chunks [first, last) of CHUNK_ROWS rows, sums[k] = (sum(x - centre), sum((x - "
     "centre)^2)) of every channel, or with dy, (sum(dy), sum(dy * (x - centre))). sums is "
     "float64 (chunks, 2, channels); bn_train_forward and bn_backward add the chunks in order. "
     "With mask_scale and mask_shift (per channel), dy first goes through relu's gradient: "
     "dy * (x * mask_scale + mask_shift > 0). The team splits the chunks." TEAM_DOC},
    {"bn_data_grad", (PyCFunction)(void (*)(void))data_grad, METH_VARARGS | METH_KEYWORDS,
     "bn_data_grad(dy, x, mean, mean_dy, slope, scale, dx, (outer, channels, 1), batch_stats, "
     "mask_scale=None, mask_shift=None, *, threads=1, cores=None): "
     "channel-last data; dx = (dy - mean_dy - (x - mean) * slope) * scale, or dx = dy * scale "
     "without batch_stats, with bn_backward's per-channel constants; with mask_scale and "
     "mask_shift, dy is dy * (x * mask_scale + mask_shift > 0) there (as in bn_chunk_sums). "
     "The team splits the rows." TEAM_DOC},
    {"add_relu", (PyCFunction)(void (*)(void))add_relu, METH_VARARGS | METH_KEYWORDS,
     "add_relu(a, b, out, lo, hi, *, threads=1, cores=None): out = np.maximum(a + b, 0) on "
     "the elements [lo, hi) of float32 arrays of one size, bit for bit; out may be a or b."
     TEAM_DOC},
    {"add_relu_grad", (PyCFunction)(void (*)(void))add_relu_grad, METH_VARARGS | METH_KEYWORDS,
     "add_relu_grad(a, b, y, out, lo, hi, *, threads=1, cores=None): out = (a + b) * (y > "
     "0), relu's gradient of a sum through its output y, on the elements [lo, hi) of float32 "
     "arrays of one size, bit for bit as NumPy; out may be a, b or y." TEAM_DOC},
    {"spread", (PyCFunction)(void (*)(void))spread, METH_VARARGS | METH_KEYWORDS,
     "spread(src, dst, stride_h, stride_w, *, threads=1, cores=None): C-contiguous float32 "
     "channel-last dst (n, h, w, c) = src (n, ceil(h / stride_h), ceil(w / stride_w), c) at "
     "every stride_h-th row and stride_w-th column, zeros elsewhere: a strided 1x1 "
     "convolution's data gradient from the stride-1 one over its output pixels. The team "
     "splits dst's rows." TEAM_DOC},
    {"sgd_mom_update", (PyCFunction)(void (*)(void))sgd_mom_update,
     METH_VARARGS | METH_KEYWORDS,
     "sgd_mom_update(weight, grad, mom, out, lo, hi, rescale, clip, lr, lr_wd, momentum, *, "
     "threads=1, cores=None): on the elements [lo, hi) of float32 arrays of one size, mom = "
     "mom * momentum - lr_wd * weight - clip(rescale * grad) * lr and out = weight + mom, each "
     "scalar as float32 and each step rounded as NumPy's float32 calls round it (clip < 0: "
     "none); out may be weight." TEAM_DOC},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ember._kernels",
    "BatchNorm's compiled CPU kernels (see ember/op/nn/normalization.py), and the residual "
    "add and relu chains of _FusedElemwise with their gradient (see ember/op/fused.py), and the "
    "spread of a strided 1x1 convolution's data gradient (see ember/op/nn/conv_algorithms.py).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddIntConstant(m, "CHUNK_ROWS", CHUNK_ROWS) < 0 ||
                      PyModule_AddIntConstant(m, "openmp", TEAM_OPENMP) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
