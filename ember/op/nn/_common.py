"""Helpers shared by the neural-network operators: parameters, shape checks, layouts,
sliding windows (im2col / col2im) and scratch memory."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ember.base import prod
from ember.op.accumulate import accumulation_dtype as _accumulation_dtype
from ember.op.registry import Param, ShapeError, p_enum, p_optional, p_shape

CHANNEL_FIRST = ('NCW', 'NCHW', 'NCDHW')
CHANNEL_LAST = ('NWC', 'NHWC', 'NDHWC')
LAYOUTS = CHANNEL_FIRST + CHANNEL_LAST


def shape_param(name, default=(), doc=''):
    return Param(name, p_shape, default, doc)


def layout_param():
    return Param('layout', p_optional(p_enum(*LAYOUTS)), None,
                 'Data layout; None means channel-first (NCW, NCHW or NCDHW).')


def pool_window(attrs, size_in):
    """The Window of a Pooling operator over data of spatial size `size_in`."""
    op, nd = 'Pooling', len(size_in)
    ones = (1,) * nd
    if attrs['global_pool']:
        return make_window(tuple(size_in), ones, ones, (0,) * nd, size_in, ones)
    kernel = attrs['kernel']
    if len(kernel) != nd:
        raise ShapeError(f'Pooling: kernel {kernel} has {len(kernel)} dims but the data has '
                         f'{nd} spatial dims' + ('' if kernel else '; set kernel or global_pool'))
    stride, pad = spatial_defaults(op, attrs, nd, ('stride', 'pad'))
    convention = attrs['pooling_convention']
    if convention == 'same':
        if any(pad):
            raise ShapeError(f"Pooling: pooling_convention='same' computes its own padding; "
                             f'got pad={pad}')
        size_out = tuple(-(-n // s) for n, s in zip(size_in, stride))
        total = [max((o - 1) * s + k - n, 0) for o, s, k, n in
                 zip(size_out, stride, kernel, size_in)]
        pad = tuple(t // 2 for t in total)
    else:
        spans = [n + 2 * p - k for n, p, k in zip(size_in, pad, kernel)]
        if convention == 'valid':
            size_out = tuple(span // s + 1 for span, s in zip(spans, stride))
        else:
            size_out = tuple(-(-span // s) + 1 for span, s in zip(spans, stride))
    if any(o <= 0 for o in size_out):
        raise ShapeError(f'Pooling: kernel {kernel} does not fit data of spatial size '
                         f'{tuple(size_in)} padded by {pad}')
    return make_window(kernel, stride, ones, pad, size_in, size_out)


# ----------------------------------------------------------------------------------------------
# Shape and type inference helpers.

def assign_shape(op, in_shapes, index, name, expected):
    """Fill input `index` with `expected`, or check that its known shape matches."""
    given = in_shapes[index]
    if given is None or -1 in given or 0 in given:
        in_shapes[index] = tuple(expected)
    elif tuple(given) != tuple(expected):
        raise ShapeError(f'{op}: {name} has shape {tuple(given)}, expected {tuple(expected)}')


def normalize_axis(op, axis, ndim, what='axis'):
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f'{op}: {what}={axis} is out of range for {ndim}-D data')
    return axis % max(ndim, 1)


def typed_like_first(free=(), out_dtypes=None):
    """infer_type: inputs share the first input's dtype except the `free` ones (labels,
    indices), which default to it when unknown; outputs take it unless `out_dtypes(attrs, dtype)`
    says otherwise."""
    def infer(attrs, in_dtypes):
        known = [d for i, d in enumerate(in_dtypes) if d is not None and i not in free]
        dtype = known[0] if known else None
        for other in known[1:]:
            if other != dtype:
                raise ShapeError(f'inputs must have the same dtype, got {dtype} and {other}')
        ins = [d if i in free and d is not None else dtype for i, d in enumerate(in_dtypes)]
        outs = out_dtypes(attrs, dtype) if out_dtypes else [dtype]
        return ins, outs
    return infer


def accumulation_dtype(dtype, safe=None):
    """The dtype the neural-network kernels reduce in: the one rule of
    :func:`ember.op.accumulate.accumulation_dtype`, with 16-bit floats always in float32.

    Kernels pass ``ctx.safe_accumulation`` as `safe`, the flag of their call.
    """
    return _accumulation_dtype(dtype, safe, half_in_float32=True)


# ----------------------------------------------------------------------------------------------
# Layouts: kernels work channel-first; channel-last data is handled through views.

def is_channel_last(layout):
    return layout is not None and layout in CHANNEL_LAST


def check_layout(op, layout, shape):
    if layout is not None and len(layout) != len(shape):
        raise ShapeError(f'{op}: layout {layout} needs {len(layout)}-D data, got shape {shape}')


def split_layout(shape, layout):
    """(batch, channels, spatial dims) of a data shape."""
    if is_channel_last(layout):
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


def join_layout(batch, channels, spatial, layout):
    if is_channel_last(layout):
        return (batch,) + tuple(spatial) + (channels,)
    return (batch, channels) + tuple(spatial)


@functools.lru_cache(maxsize=None)
def _last_to_second(ndim):
    """The axes that move an array's last axis to position 1: ``moveaxis(a, -1, 1)`` without
    its argument checks, which cost more than the rest of a small convolution's setup."""
    return (0, ndim - 1) + tuple(range(1, ndim - 1))


def channel_first(xp, array, layout):
    """A channel-first view of `array` (no copy)."""
    return array.transpose(_last_to_second(array.ndim)) if is_channel_last(layout) else array


def weight_channel_first(xp, weight, layout):
    """Weights of channel-last layouts are (F, *kernel, C); kernels want (F, C, *kernel)."""
    return weight.transpose(_last_to_second(weight.ndim)) if is_channel_last(layout) \
        else weight


def reshape_view(array, shape):
    """`array` reshaped as a view, or None when that needs a copy."""
    if not isinstance(array, np.ndarray):       # CuPy: its shape setter refuses a copy
        view = array.view()
        try:
            view.shape = shape
        except AttributeError:
            return None
        return view
    try:
        return array.reshape(shape, copy=False)
    except ValueError:                          # a copy needed, or the sizes disagree
        known = prod(d for d in shape if d != -1)
        if known == array.size or -1 in shape and known and array.size % known == 0:
            return None
        raise


# ----------------------------------------------------------------------------------------------
# Sliding windows.

@dataclass(frozen=True)
class Window:
    """Geometry of a sliding window over the spatial dims of channel-first data.

    Output position o of dim i covers padded input positions o * stride + k * dilate for
    k < kernel; ``pad_after`` may exceed ``pad_before`` so that every window fits.
    """
    kernel: tuple
    stride: tuple
    dilate: tuple
    pad_before: tuple
    pad_after: tuple
    size_in: tuple
    size_out: tuple

    @property
    def padded(self):
        return tuple(b + n + a for b, n, a in zip(self.pad_before, self.size_in, self.pad_after))

    @property
    def has_padding(self):
        return any(self.pad_before) or any(self.pad_after)

    @property
    def is_pointwise(self):
        """1x1 kernel, stride 1, no padding: patches are the input itself."""
        return (all(k == 1 for k in self.kernel) and all(s == 1 for s in self.stride)
                and not self.has_padding and self.size_in == self.size_out)


def dilated(kernel, dilate):
    return tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilate))


def make_window(kernel, stride, dilate, pad, size_in, size_out):
    """A Window whose trailing padding covers every output position."""
    extent = [(o - 1) * s + dk for o, s, dk in zip(size_out, stride, dilated(kernel, dilate))]
    after = tuple(max(p, e - p - n) for p, e, n in zip(pad, extent, size_in))
    return Window(tuple(kernel), tuple(stride), tuple(dilate), tuple(pad), after,
                  tuple(size_in), tuple(size_out))


def spatial_defaults(op, attrs, nd, names=('stride', 'dilate', 'pad')):
    """stride/dilate/pad (and others in `names`) with MXNet's empty-means-default rule."""
    fill = {'stride': 1, 'dilate': 1, 'pad': 0, 'adj': 0}
    values = []
    for name in names:
        value = attrs.get(name) or (fill[name],) * nd
        if len(value) != nd:
            raise ShapeError(f'{op}: {name}={value} has {len(value)} dims but kernel '
                             f'{attrs["kernel"]} has {nd}')
        values.append(tuple(value))
    return values


def padded_input(xp, x, window, fill, buffer=None):
    """`x` (N, C, *spatial) with the window's padding, in `buffer` when given."""
    if not window.has_padding:
        return x
    padded = buffer if buffer is not None else xp.empty(x.shape[:2] + window.padded, x.dtype)
    padded.fill(fill)
    padded[interior(window)] = x
    return padded


def interior(window):
    """Index of the unpadded region inside a padded array."""
    return (slice(None), slice(None)) + tuple(
        slice(b, b + n) for b, n in zip(window.pad_before, window.size_in))


def im2col(padded, window, cols):
    """Copy the windows of `padded` into `cols` laid out (N, C, *kernel, *out)."""
    # one strided copy per kernel tap is several times faster than one transposing copy
    for offset, tap in window_slices(window):
        cols[(slice(None), slice(None)) + offset] = padded[tap]
    return cols


def window_slices(window):
    """(kernel offset, index into the padded array) for every kernel tap: the index selects the
    input element that tap reads in each window, laid out like the output."""
    for offset in np.ndindex(*window.kernel):
        yield offset, (slice(None), slice(None)) + tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s)
            for k, d, o, s in zip(offset, window.dilate, window.size_out, window.stride))


def col2im(dcols, window, dpadded):
    """Add patch gradients `dcols` (N, C, *kernel, *out) back onto `dpadded` (N, C, *padded)."""
    for offset, target in window_slices(window):
        dpadded[target] += dcols[(slice(None), slice(None)) + offset]
    return dpadded


# ----------------------------------------------------------------------------------------------
# Scratch memory: one request to the temporary workspace per kernel call, since a later, larger
# request may move the workspace and invalidate earlier views.

_ALIGN = 64


def scratch(ctx, xp, *specs):
    """Arrays of the given (shape, dtype) specs, carved from the 'temp' resource when the
    kernel has one, else freshly allocated. A spec of None gives None. The same specs carve
    the same arrays while the resource keeps its buffer (``TempSpace.carved``): about 5 us
    of a layer's call, which asks for the same scratch every time."""
    if ctx is None or ctx.temp is None:
        return [None if s is None else xp.empty(s[0], s[1]) for s in specs]
    cache = getattr(ctx.temp, 'carved', None)
    try:
        carved = None if cache is None else cache.get(specs)
    except TypeError:                       # a shape given as a list: carved afresh
        carved = cache = None
    if carved is not None:
        return list(carved)
    arrays = _carve(ctx.temp, specs)
    if cache is not None:
        cache[specs] = tuple(arrays)
    return arrays


def _carve(temp, specs):
    sizes = [0 if s is None else _round_up(prod(s[0]) * np.dtype(s[1]).itemsize) for s in specs]
    buffer = temp.get((max(sum(sizes), 1),), np.uint8)
    arrays, start = [], 0
    for spec, size in zip(specs, sizes):
        if spec is None:
            arrays.append(None)
            continue
        nbytes = prod(spec[0]) * np.dtype(spec[1]).itemsize
        arrays.append(buffer[start:start + nbytes].view(spec[1]).reshape(spec[0]))
        start += size
    return arrays


def _round_up(nbytes):
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


def outputs_of(result, count):
    """The outputs of an F call as a list (NDArray and Symbol results alike)."""
    return [result] if count == 1 else [result[i] for i in range(count)]


def weight_token(ctx, *indices):
    """``((engine variable, version), ...)`` of the inputs at `indices` (None ones skipped)
    that a layer's weight is made from, in inference (a convolution's or a FullyConnected's
    kernels keep what they derive from it while it stays); None in training or when one of
    them is not a variable of the graph (it may then change between any two calls)."""
    if ctx.is_train:
        return None
    pairs = []
    for index in indices:
        if index is not None:
            pair = ctx.input_version(index)
            if pair is None:
                return None
            pairs.append(pair)
    return tuple(pairs) or None
