"""Shape-only operators of ``mx.np`` and ``mx.npx``: reshape with NumPy's rules, reshape with
``npx.reshape``'s special codes, expand_dims and squeeze. The imperative frontends give views
that share storage (as NumPy does); these operators serve autograd and traced graphs.

``npx.reshape`` codes: -1 infers one dimension, -2 copies an input dimension, -3 drops an input
dimension of size one, -4 copies all remaining input dimensions, -5 merges two input
dimensions, -6 splits one input dimension into the two values that follow (one may be -1).

>>> npx_reshape_shape((2, 3, 4), (-2, -5))
(2, 12)
>>> npx_reshape_shape((6, 4), (-6, 2, -1, -2))
(2, 3, 4)
"""
from __future__ import annotations

import numpy as np

from ember.op.np_rules import normalize_axis
from ember.op.registry import Param, ShapeError, p_axes, p_bool, p_optional, p_shape, register

__all__ = ['numpy_reshape_shape', 'npx_reshape_shape', 'expand_dims_shape', 'squeeze_shape']


def numpy_reshape_shape(shape, newshape):
    """NumPy's reshape: one -1 is inferred, every other value is a length."""
    size = int(np.prod(shape))
    unknown = [i for i, d in enumerate(newshape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in newshape):
        raise ShapeError(f'cannot reshape {tuple(shape)} into {tuple(newshape)}: only one '
                         f'length may be -1 and none may be below -1')
    known = int(np.prod([d for d in newshape if d != -1]))
    result = list(newshape)
    if unknown:
        if known == 0 or size % known:
            raise ShapeError(f'cannot reshape an array of size {size} into shape '
                             f'{tuple(newshape)}')
        result[unknown[0]] = size // known
    if int(np.prod(result)) != size:
        raise ShapeError(f'cannot reshape an array of size {size} into shape {tuple(newshape)}')
    return tuple(result)


def npx_reshape_shape(shape, newshape, reverse=False):
    """``npx.reshape``'s target shape of an input of `shape` (see the module docstring)."""
    if reverse:
        flipped = _npx_codes(tuple(reversed(shape)), _reverse_codes(newshape), shape)
        return tuple(reversed(flipped))
    return _npx_codes(tuple(shape), tuple(newshape), shape)


def _reverse_codes(codes):
    """Codes read right to left; a -6 keeps its two values in order after it."""
    out, i = [], len(codes) - 1
    while i >= 0:
        if i >= 2 and codes[i - 2] == -6:
            out.extend([-6, codes[i], codes[i - 1]])
            i -= 3
        else:
            out.append(codes[i])
            i -= 1
    return tuple(out)


def _npx_codes(shape, codes, original):
    result, src, i, infer_at = [], 0, 0, None
    while i < len(codes):
        code = codes[i]
        if code >= 0:
            result.append(code)
            src += 1
        elif code == -1:
            infer_at = len(result)
            result.append(-1)
            src += 1
        elif code == -2:
            result.append(_dim(shape, src, codes, original))
            src += 1
        elif code == -3:
            if _dim(shape, src, codes, original) != 1:
                raise ShapeError(f'npx.reshape: code -3 drops dimension {src} of '
                                 f'{tuple(original)}, which is not 1')
            src += 1
        elif code == -4:
            result.extend(shape[src:])
            src = len(shape)
        elif code == -5:
            result.append(_dim(shape, src, codes, original) *
                          _dim(shape, src + 1, codes, original))
            src += 2
        elif code == -6:
            whole = _dim(shape, src, codes, original)
            first, second = codes[i + 1], codes[i + 2]
            if first == -1:
                first = whole // second
            elif second == -1:
                second = whole // first
            if first * second != whole:
                raise ShapeError(f'npx.reshape: -6 cannot split {whole} into {first} x {second}')
            result.extend([first, second])
            src += 1
            i += 2
        else:
            raise ShapeError(f'npx.reshape: unknown code {code} in {tuple(codes)}')
        i += 1
    return _fill_inferred(result, infer_at, original, codes)


def _dim(shape, index, codes, original):
    if index >= len(shape):
        raise ShapeError(f'npx.reshape: codes {tuple(codes)} read past the dimensions of '
                         f'{tuple(original)}')
    return shape[index]


def _fill_inferred(result, infer_at, original, codes):
    size = int(np.prod(original))
    if infer_at is not None:
        known = int(np.prod([d for j, d in enumerate(result) if j != infer_at]))
        if known == 0 or size % known:
            raise ShapeError(f'npx.reshape: cannot reshape {tuple(original)} with '
                             f'{tuple(codes)}')
        result[infer_at] = size // known
    if int(np.prod(result)) != size:
        raise ShapeError(f'npx.reshape: codes {tuple(codes)} give {tuple(result)}, which does '
                         f'not hold the {size} elements of {tuple(original)}')
    return tuple(result)


def expand_dims_shape(shape, axis):
    axes = axis if isinstance(axis, tuple) else (axis,)
    ndim = len(shape) + len(axes)
    positions = normalize_axis(axes, ndim)
    it = iter(shape)
    return tuple(1 if i in positions else next(it) for i in range(ndim))


def squeeze_shape(shape, axis):
    if axis is None:
        return tuple(d for d in shape if d != 1)
    axes = normalize_axis(axis, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise ShapeError(f'cannot squeeze axis {a} of shape {tuple(shape)}: its length is '
                             f'not 1')
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _shape_rule(compute):
    def infer(attrs, in_shapes):
        if in_shapes[0] is None:
            return list(in_shapes), [None]
        return list(in_shapes), [compute(tuple(in_shapes[0]), attrs)]
    return infer


def _reshape_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0].reshape(outs[0].shape)


def _reshape_gradient(F, attrs, ins, outs, og):
    return [F.reshape_like(og[0], ins[0])]


_SHAPE_OPS = {
    '_npi_reshape': (lambda shape, attrs: numpy_reshape_shape(shape, attrs['newshape']),
                     (Param('newshape', p_shape),), 'np.reshape with NumPy\'s -1'),
    '_npx_reshape': (lambda shape, attrs: npx_reshape_shape(shape, attrs['newshape'],
                                                            attrs['reverse']),
                     (Param('newshape', p_shape), Param('reverse', p_bool, False)),
                     'npx.reshape with its special codes'),
    '_npi_expand_dims': (lambda shape, attrs: expand_dims_shape(shape, attrs['axis']),
                         (Param('axis', p_axes),), 'np.expand_dims'),
    '_npi_squeeze': (lambda shape, attrs: squeeze_shape(shape, attrs['axis']),
                     (Param('axis', p_optional(p_axes), None),), 'np.squeeze'),
}

for _name, (_compute, _params, _doc) in _SHAPE_OPS.items():
    register(_name, _reshape_kernel, inputs=('a',), params=_params,
             infer_shape=_shape_rule(_compute), gradient=_reshape_gradient,
             inplace=((0, 0),), doc=f'``{_doc}`` (a copy; the frontends give views).')
