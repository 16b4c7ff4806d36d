"""Random sampling with array parameters, densities, and draws shaped like an input.

``_sample_<dist>`` draws ``shape`` values per element of its parameter arrays (output
``params.shape + shape``); ``_random_<dist>_like`` draws with scalar parameters in the shape
and dtype of its input; ``_sample_multinomial`` draws class indices from probability rows
(optionally with their log-probabilities, which are differentiable); ``_random_pdf_<dist>``
evaluates densities (or their logs) of samples ``params.shape + extra``, with gradients for
the samples and the parameters. Draws come from the device's random stream.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_random_pdf_normal')
>>> out = np.empty((1, 2))
>>> op.kernel({'is_log': False}, [np.array([[0., 1.]]), np.zeros(1), np.ones(1)], [out],
...           registry.KernelContext(None))
>>> out.round(4)
array([[0.3989, 0.242 ]])
"""
from __future__ import annotations

import math

import numpy as np
from ember.base import EmberError
from ember.op.host import register
from ember.op.registry import (REQUIRED, Param, ShapeError, p_bool, p_dtype, p_float, p_int,
                               p_optional, p_shape)

__all__ = ['DISTRIBUTIONS']


def _gnb(gen, mu, alpha, size):
    """Negative binomial with mean mu and dispersion alpha: a gamma-Poisson mixture."""
    rate = np.where(alpha > 0, gen.gamma(1 / np.maximum(alpha, 1e-300), mu * alpha, size), mu)
    return gen.poisson(np.broadcast_to(rate, size))


# name: (parameter names, draw(generator, *params, size)) -- MXNet's parameterisations
DISTRIBUTIONS = {
    'uniform': (('low', 'high'), lambda gen, low, high, size: gen.uniform(low, high, size)),
    'normal': (('mu', 'sigma'), lambda gen, mu, sigma, size: gen.normal(mu, sigma, size)),
    'gamma': (('alpha', 'beta'), lambda gen, a, b, size: gen.gamma(a, b, size)),
    'exponential': (('lam',), lambda gen, lam, size: gen.exponential(1 / lam, size)),
    'poisson': (('lam',), lambda gen, lam, size: gen.poisson(lam, size)),
    'negative_binomial': (('k', 'p'), lambda gen, k, p, size: gen.negative_binomial(k, p, size)),
    'generalized_negative_binomial': (('mu', 'alpha'), _gnb),
}


# ----------------------------------------------------------------------------------------------
# _sample_<dist>: parameters as arrays.

_SAMPLE_PARAMS = (Param('shape', p_shape, (), 'Draws per parameter element.'),
                  Param('dtype', p_optional(p_dtype), None, 'dtype of the output (None: '
                                                            'float32).'))


def _sample_shape(attrs, in_shapes):
    known = [s for s in in_shapes if s is not None]
    if not known:
        return list(in_shapes), [None]
    first = tuple(known[0])
    if any(tuple(s) != first for s in known):
        raise ShapeError(f'the parameter arrays must have one shape, got {in_shapes}')
    return [first] * len(in_shapes), [first + tuple(attrs['shape'])]


def _sample_kernel(draw):
    def kernel(attrs, ins, outs, ctx):
        out = outs[0]
        extra = (1,) * len(attrs['shape'])
        params = [np.asarray(p, np.float64).reshape(p.shape + extra) for p in ins]
        try:
            values = draw(ctx.random.generator, *params, out.shape)
        except ValueError as exc:
            raise EmberError(f'invalid distribution parameters: {exc}') from None
        out[...] = ctx.xp.asarray(values)
    return kernel


for _name, (_params, _draw) in DISTRIBUTIONS.items():
    register(f'_sample_{_name}', _sample_kernel(_draw), inputs=_params,
             infer_shape=_sample_shape, params=_SAMPLE_PARAMS, resources=('random',),
             random=True, aliases=(f'sample_{_name}',),
             infer_type=lambda attrs, dtypes: (list(dtypes),
                                               [attrs['dtype'] or np.dtype(np.float32)]),
             doc=f'{_name} draws, `shape` of them per element of the parameter arrays '
                 f'{", ".join(_params)}.')


# ----------------------------------------------------------------------------------------------
# _random_<dist>_like: scalar parameters, the input's shape and dtype.

_LIKE_PARAMS = {
    'uniform': (Param('low', p_float, 0.0), Param('high', p_float, 1.0)),
    'normal': (Param('loc', p_float, 0.0), Param('scale', p_float, 1.0)),
    'gamma': (Param('alpha', p_float, 1.0), Param('beta', p_float, 1.0)),
    'exponential': (Param('lam', p_float, 1.0),),
    'poisson': (Param('lam', p_float, 1.0),),
    'negative_binomial': (Param('k', p_int, 1), Param('p', p_float, 1.0)),
    'generalized_negative_binomial': (Param('mu', p_float, 1.0), Param('alpha', p_float, 1.0)),
}


def _like_kernel(draw, names):
    def kernel(attrs, ins, outs, ctx):
        params = [np.float64(attrs[n]) for n in names]
        try:
            values = draw(ctx.random.generator, *params, outs[0].shape)
        except ValueError as exc:
            raise EmberError(f'invalid distribution parameters: {exc}') from None
        outs[0][...] = ctx.xp.asarray(values)
    return kernel


for _name, _params in _LIKE_PARAMS.items():
    register(f'_random_{_name}_like', _like_kernel(DISTRIBUTIONS[_name][1],
                                                   [p.name for p in _params]),
             params=_params, resources=('random',), random=True,
             gradient=lambda F, attrs, ins, outs, og: [F.zeros_like(ins[0])],
             doc=f'{_name} draws in the shape and dtype of the input.')


# ----------------------------------------------------------------------------------------------
# _sample_multinomial.

_MULTINOMIAL = (Param('shape', p_shape, (), 'Draws per probability row.'),
                Param('get_prob', p_bool, False, 'Also return the log-probability of each '
                                                 'draw.'),
                Param('dtype', p_dtype, np.dtype(np.int32), 'dtype of the class indices.'))


def _multinomial_outputs(attrs):
    return ['output', 'prob'] if attrs['get_prob'] else ['output']


def _multinomial_shape(attrs, in_shapes):
    data = in_shapes[0]
    count = len(_multinomial_outputs(attrs))
    if data is None:
        return list(in_shapes), [None] * count
    out = (tuple(data[:-1]) + tuple(attrs['shape'])) or (1,)
    return list(in_shapes), [out] * count


def _multinomial_kernel(attrs, ins, outs, ctx):
    probs = np.asarray(ins[0], np.float64)
    rows = probs.reshape(-1, probs.shape[-1])
    draws = int(np.prod(attrs['shape'])) if attrs['shape'] else 1
    cumulative = np.cumsum(rows, axis=1)
    uniform = ctx.random.generator.random((len(rows), draws)) * cumulative[:, -1:]
    picks = np.minimum((uniform[:, :, None] >= cumulative[:, None, :]).sum(-1),
                       rows.shape[1] - 1)
    outs[0][...] = picks.reshape(outs[0].shape)
    if attrs['get_prob']:
        chosen = np.take_along_axis(rows, picks, axis=1)
        outs[1][...] = np.log(chosen).reshape(outs[1].shape)


def _multinomial_backward(attrs, ins, outs, ctx):
    grad, data, picks = ins
    rows = data.reshape(-1, data.shape[-1])
    chosen = picks.reshape(len(rows), -1).astype(np.int64)
    out = np.zeros(rows.shape, np.float64)
    values = grad.reshape(chosen.shape) / np.take_along_axis(rows, chosen, axis=1)
    np.add.at(out, (np.arange(len(rows))[:, None], chosen), values)
    outs[0][...] = out.reshape(data.shape)


def _multinomial_grad(F, attrs, ins, outs, og):
    if not attrs['get_prob']:
        return [F.zeros_like(ins[0])]
    return [F._backward_sample_multinomial(og[1], ins[0], outs[0], **attrs)]


register('_sample_multinomial', _multinomial_kernel, outputs=_multinomial_outputs,
         infer_shape=_multinomial_shape, params=_MULTINOMIAL, resources=('random',),
         random=True, aliases=('sample_multinomial',), gradient=_multinomial_grad,
         infer_type=lambda attrs, dtypes: (list(dtypes), [attrs['dtype']]
                                           + [np.dtype(np.float32)] * attrs['get_prob']),
         doc='Class indices drawn from the probability rows of data (last axis), `shape` per '
             'row; with get_prob also their log-probabilities (differentiable in data).')
register('_backward_sample_multinomial', _multinomial_backward,
         inputs=('out_grad', 'data', 'output'), params=_MULTINOMIAL,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='The gradient of the log-probabilities of _sample_multinomial.')


# ----------------------------------------------------------------------------------------------
# _sample_unique_zipfian (sampled softmax): distinct classes from a log-uniform distribution.

def _distinct_draws(gen, count, range_max):
    """`count` distinct log-uniform classes in order of first appearance, and the number of
    draws that took."""
    log_range = math.log(range_max + 1)
    drawn = np.empty(0, np.int64)
    while True:
        more = (np.exp(gen.uniform(0, log_range, 2 * count + 16)) - 1).astype(np.int64)
        drawn = np.concatenate([drawn, more % range_max])
        _, first = np.unique(drawn, return_index=True)
        if len(first) >= count:
            first.sort()
            return drawn[first[:count]], first[count - 1] + 1


def _zipfian_kernel(attrs, ins, outs, ctx):
    samples, tries = outs
    if samples.shape[1] > attrs['range_max']:
        raise EmberError(f'_sample_unique_zipfian: {samples.shape[1]} distinct classes asked '
                         f'from range_max={attrs["range_max"]}')
    for row in range(samples.shape[0]):
        samples[row], tries[row] = _distinct_draws(ctx.random.generator, samples.shape[1],
                                                   attrs['range_max'])


register('_sample_unique_zipfian', _zipfian_kernel, inputs=(), outputs=('samples', 'tries'),
         params=(Param('range_max', p_int, REQUIRED, 'Classes are 0 .. range_max - 1.'),
                 Param('shape', p_shape, REQUIRED, '(rows, distinct draws per row).')),
         infer_shape=lambda attrs, shapes: ([], [tuple(attrs['shape']),
                                                 (tuple(attrs['shape'])[0],)]),
         infer_type=lambda attrs, dtypes: ([], [np.dtype(np.int64)] * 2),
         resources=('random',), random=True,
         doc='Distinct classes per row from the log-uniform (Zipfian) distribution, and how '
             'many draws each row took.')


# ----------------------------------------------------------------------------------------------
# _random_pdf_<dist>: densities, their logs, and their gradients.

def _expand(param, sample, event=0):
    """A parameter array broadcast against samples params.shape + extra (+ event axes)."""
    extra = sample.ndim - param.ndim
    return param.reshape(param.shape[:param.ndim - event] + (1,) * extra
                         + param.shape[param.ndim - event:])


def _special():
    # loaded on first use: SciPy brings its own BLAS, which an import of Ember should not load
    from scipy import special
    return special


def _log_pdf(name, x, p):
    """(log density, d/dx, [d/dparam...]) for samples x and broadcast parameters p."""
    special = _special()
    if name == 'normal':
        mu, sigma = p
        z = (x - mu) / sigma
        return (-0.5 * z * z - np.log(sigma) - 0.5 * math.log(2 * math.pi), -z / sigma,
                [z / sigma, (z * z - 1) / sigma])
    if name == 'uniform':
        low, high = p
        width = high - low
        return -np.log(width) + 0 * x, 0 * x, [1 / width + 0 * x, -1 / width + 0 * x]
    if name == 'gamma':
        alpha, rate = p
        log = alpha * np.log(rate) + (alpha - 1) * np.log(x) - rate * x - special.gammaln(alpha)
        return log, (alpha - 1) / x - rate, [np.log(rate) + np.log(x) - special.digamma(alpha),
                                              alpha / rate - x]
    if name == 'exponential':
        (lam,) = p
        return np.log(lam) - lam * x, -lam + 0 * x, [1 / lam - x]
    if name == 'poisson':
        (lam,) = p
        log = x * np.log(lam) - lam - special.gammaln(x + 1)
        return log, 0 * x, [x / lam - 1]
    if name == 'negative_binomial':
        k, prob = p
        return _nb_log_pdf(x, k, prob)
    if name == 'generalized_negative_binomial':
        mu, alpha = p
        k, prob = 1 / alpha, 1 / (1 + alpha * mu)
        log, dx, (dk, dprob) = _nb_log_pdf(x, k, prob)
        # chain rule through k = 1/alpha, p = 1/(1 + alpha mu)
        dmu = dprob * -alpha * prob * prob
        dalpha = dk * -k * k + dprob * -mu * prob * prob
        return log, dx, [dmu, dalpha]
    raise KeyError(name)


def _nb_log_pdf(x, k, prob):
    special = _special()
    log = (special.gammaln(x + k) - special.gammaln(x + 1) - special.gammaln(k)
           + k * np.log(prob) + x * np.log1p(-prob))
    dk = special.digamma(x + k) - special.digamma(k) + np.log(prob)
    dprob = k / prob - x / (1 - prob)
    return log, 0 * x, [dk, dprob]


def _pdf_shape(attrs, in_shapes):
    sample, params = in_shapes[0], in_shapes[1:]
    if sample is None or any(s is None for s in params):
        return list(in_shapes), [None]
    for shape in params:
        if tuple(sample[:len(shape)]) != tuple(shape):
            raise ShapeError(f'samples {sample} must start with the parameters\' shape {shape}')
    return list(in_shapes), [tuple(sample)]


def _pdf_kernel(name):
    def kernel(attrs, ins, outs, ctx):
        x = np.asarray(ins[0], np.float64)
        params = [_expand(np.asarray(p, np.float64), x) for p in ins[1:]]
        with np.errstate(divide='ignore', invalid='ignore'):
            log = _log_pdf(name, x, params)[0]
        outs[0][...] = log if attrs['is_log'] else np.exp(log)
    return kernel


def _pdf_backward(name):
    def kernel(attrs, ins, outs, ctx):
        grad, x, params = ins[0], np.asarray(ins[1], np.float64), ins[2:]
        wide = [_expand(np.asarray(p, np.float64), x) for p in params]
        with np.errstate(divide='ignore', invalid='ignore'):
            log, dx, dparams = _log_pdf(name, x, wide)
        scale = grad if attrs['is_log'] else grad * np.exp(log)
        outs[0][...] = scale * dx
        for out, param, dparam in zip(outs[1:], params, dparams):
            total = scale * dparam
            out[...] = total.reshape(param.shape + (-1,)).sum(axis=-1) if total.ndim > \
                param.ndim else total
    return kernel


_IS_LOG = (Param('is_log', p_bool, False, 'Return the log of the density.'),)
_PDF_PARAMS = {'uniform': ('low', 'high'), 'normal': ('mu', 'sigma'), 'gamma': ('alpha', 'beta'),
               'exponential': ('lam',), 'poisson': ('lam',), 'negative_binomial': ('k', 'p'),
               'generalized_negative_binomial': ('mu', 'alpha')}

for _name, _params in _PDF_PARAMS.items():
    register(f'_random_pdf_{_name}', _pdf_kernel(_name), inputs=('sample',) + _params,
             infer_shape=_pdf_shape, params=_IS_LOG, aliases=(f'random_pdf_{_name}',),
             infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
             gradient=(lambda name: lambda F, attrs, ins, outs, og: list(getattr(
                 F, f'_backward_pdf_{name}')(og[0], *ins, **attrs)))(_name),
             doc=f'The {_name} density (or its log) of each sample, for the parameters '
                 f'{", ".join(_params)} of its leading axes'
                 + (' (beta is the rate)' if _name == 'gamma' else '') + '.')
    register(f'_backward_pdf_{_name}', _pdf_backward(_name),
             inputs=('out_grad', 'sample') + _params,
             outputs=tuple(f'{n}_grad' for n in ('sample',) + _params), params=_IS_LOG,
             infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
             infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
             doc=f'The gradients of _random_pdf_{_name}.')


# Dirichlet: samples (..., K) against alpha (..., K), one density per sample.

def _dirichlet_log_pdf(x, alpha):
    special = _special()
    log = ((alpha - 1) * np.log(x)).sum(-1) + special.gammaln(alpha.sum(-1)) \
        - special.gammaln(alpha).sum(-1)
    dx = (alpha - 1) / x
    dalpha = np.log(x) + special.digamma(alpha.sum(-1, keepdims=True)) - special.digamma(alpha)
    return log, dx, dalpha


def _dirichlet_shape(attrs, in_shapes):
    sample, alpha = in_shapes
    if sample is None or alpha is None:
        return list(in_shapes), [None]
    if tuple(sample[:len(alpha) - 1]) != tuple(alpha[:-1]) or sample[-1] != alpha[-1]:
        raise ShapeError(f'samples {sample} must be alpha\'s leading shape {alpha[:-1]}, any '
                         f'draws, then {alpha[-1]} components')
    return list(in_shapes), [tuple(sample[:-1])]


def _dirichlet_kernel(attrs, ins, outs, ctx):
    x = np.asarray(ins[0], np.float64)
    alpha = _expand(np.asarray(ins[1], np.float64), x, event=1)
    with np.errstate(divide='ignore', invalid='ignore'):
        log = _dirichlet_log_pdf(x, alpha)[0]
    outs[0][...] = log if attrs['is_log'] else np.exp(log)


def _dirichlet_backward(attrs, ins, outs, ctx):
    grad, x, alpha_in = ins[0], np.asarray(ins[1], np.float64), ins[2]
    alpha = _expand(np.asarray(alpha_in, np.float64), x, event=1)
    with np.errstate(divide='ignore', invalid='ignore'):
        log, dx, dalpha = _dirichlet_log_pdf(x, alpha)
    scale = (grad if attrs['is_log'] else grad * np.exp(log))[..., None]
    outs[0][...] = scale * dx
    total = scale * dalpha
    extra = total.ndim - alpha_in.ndim
    outs[1][...] = total.sum(axis=tuple(range(alpha_in.ndim - 1, alpha_in.ndim - 1 + extra)))


register('_random_pdf_dirichlet', _dirichlet_kernel, inputs=('sample', 'alpha'),
         infer_shape=_dirichlet_shape, params=_IS_LOG, aliases=('random_pdf_dirichlet',),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
         gradient=lambda F, attrs, ins, outs, og: list(F._backward_pdf_dirichlet(og[0], *ins,
                                                                                 **attrs)),
         doc='The Dirichlet density (or its log) of each sample (last axis: components).')
register('_backward_pdf_dirichlet', _dirichlet_backward, inputs=('out_grad', 'sample', 'alpha'),
         outputs=('sample_grad', 'alpha_grad'), params=_IS_LOG,
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradients of _random_pdf_dirichlet.')
