"""Image operators (``mx.nd.image``, registered as ``_image_*``) and OpenCV's resize and border.

Images are (H, W, C) or a batch (N, H, W, C), uint8 or float, except that ``normalize`` takes
tensors (C, H, W) or (N, C, H, W), which ``to_tensor`` makes. Colour operators read the first
three channels as R, G, B. Results of uint8 images are clamped to [0, 255] and truncated, as
MXNet stores them; float images are not clamped. The ``random_*`` operators draw one factor
per image from the device's random stream.

Where MXNet 1.9.1's kernels disagree with what the operators are documented to do, these
follow the documentation: ``flip_left_right`` of an odd width keeps the middle column
(MXNet's zeroes it), ``random_saturation`` blends with the true grey level (MXNet's uses only
the blue channel's share), and the gradients of flips, crop and normalize are those of the
functions (MXNet passes the flips' and brightness's gradient through unchanged).

>>> import numpy as np, ember as mx
>>> image = mx.nd.array(np.arange(12).reshape(2, 2, 3), dtype='uint8')
>>> mx.nd.image.to_tensor(image).shape
(3, 2, 2)
>>> mx.nd.image.flip_left_right(image).asnumpy()[0].tolist()
[[3, 4, 5], [0, 1, 2]]
"""
from __future__ import annotations

import ast
import numbers

import numpy as np

from ember.backend import imaging
from ember.op.registry import (REQUIRED, Param, ShapeError, p_bool, p_float, p_int, p_shape,
                               register)

__all__ = ['hue_rotated', 'EIGVAL', 'EIGVEC']

GRAY = np.array([0.299, 0.587, 0.114])                  # ITU-R 601 luma weights of R, G, B
# AlexNet's PCA of ImageNet's RGB pixels: eigenvalues and eigenvectors (columns).
EIGVAL = np.array([55.46, 4.794, 1.148])
EIGVEC = np.array([[-0.5675, 0.7192, 0.4009],
                   [-0.5808, -0.0045, -0.8140],
                   [-0.5836, -0.6948, 0.4203]])


def _p_floats(value):
    """A tuple of floats from a number, a sequence, or MXNet's '(0.1, 0.2)' text."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ValueError('a tuple of numbers such as (0.5, 0.5, 0.5)') from None
    if isinstance(value, numbers.Number):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise ValueError('a tuple of numbers such as (0.5, 0.5, 0.5)')
    return tuple(p_float(v) for v in value)


# ----------------------------------------------------------------------------------------------
# Shapes and types

def _image_shape(name, shape, channels=None):
    if shape is None:
        return None
    if len(shape) not in (3, 4):
        raise ShapeError(f'{name}: expected an image (H, W, C) or a batch (N, H, W, C), got '
                         f'shape {tuple(shape)}')
    if channels is not None and shape[-1] < channels:
        raise ShapeError(f'{name}: expected at least {channels} channels (R, G, B) in the last '
                         f'axis, got shape {tuple(shape)}')
    return tuple(shape)


def _same_image(name, channels=None):
    def infer(attrs, in_shapes):
        shape = _image_shape(name, in_shapes[0], channels)
        return [shape], [shape]
    return infer


def _same_dtype(attrs, in_dtypes):
    return list(in_dtypes), [in_dtypes[0]]


def _store(out, values):
    """Write float `values` into `out`: integer images are clamped and truncated."""
    if np.issubdtype(out.dtype, np.integer):
        info = np.iinfo(out.dtype)
        values = np.clip(values, info.min, info.max)
    np.copyto(out, values, casting='unsafe')


def _images(array):
    """(N, H, W, C) views of an image or a batch."""
    return array[None] if array.ndim == 3 else array


def _host(array):
    """A NumPy copy of a device array (kernels that call OpenCV run on the host)."""
    return array if isinstance(array, np.ndarray) else array.get()


def _to_device(xp, out, values):
    out[...] = values if xp is np else xp.asarray(values)


# ----------------------------------------------------------------------------------------------
# to_tensor and normalize

def _to_tensor_infer(attrs, in_shapes):
    shape = _image_shape('to_tensor', in_shapes[0])
    if shape is None:
        return [None], [None]
    return [shape], [shape[:-3] + (shape[-1],) + shape[-3:-1]]


def _to_tensor_kernel(attrs, ins, outs, ctx):
    moved = ctx.xp.moveaxis(ins[0], -1, -3)
    ctx.xp.divide(moved, np.float32(255), out=outs[0], dtype=outs[0].dtype, casting='unsafe')


register('_image_to_tensor', _to_tensor_kernel, infer_shape=_to_tensor_infer,
         infer_type=lambda attrs, dtypes: (list(dtypes), [np.dtype(np.float32)]),
         doc='An image (H, W, C) or batch (N, H, W, C) in [0, 255] as a float32 tensor '
             '(C, H, W) or (N, C, H, W) in [0, 1].')

NORMALIZE_PARAMS = (
    Param('mean', _p_floats, (0.0, 0.0, 0.0, 0.0), 'Mean of each channel (one value: all).'),
    Param('std', _p_floats, (1.0, 1.0, 1.0, 1.0), 'Standard deviation of each channel.'),
)


def _normalize_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return [None], [None]
    if len(shape) not in (3, 4):
        raise ShapeError(f'normalize: expected a tensor (C, H, W) or (N, C, H, W), got shape '
                         f'{tuple(shape)}')
    channels = shape[-3]
    for name in ('mean', 'std'):
        if len(attrs[name]) != 1 and len(attrs[name]) < channels:
            raise ShapeError(f'normalize: {name} has {len(attrs[name])} values for '
                             f'{channels} channels; give 1 or {channels}')
    if 0.0 in _per_channel(attrs['std'], channels):
        raise ShapeError(f'normalize: std={attrs["std"]} holds a zero')
    return [tuple(shape)], [tuple(shape)]


def _per_channel(values, channels):
    return values * channels if len(values) == 1 else values[:channels]


def _channel_column(values, array):
    column = np.array(_per_channel(values, array.shape[-3]), np.float64).reshape(-1, 1, 1)
    return column.astype(array.dtype) if array.dtype.kind == 'f' else column


def _normalize_kernel(attrs, ins, outs, ctx):
    x, xp = ins[0], ctx.xp
    mean = xp.asarray(_channel_column(attrs['mean'], x))
    std = xp.asarray(_channel_column(attrs['std'], x))
    if x.dtype.kind == 'f':
        xp.divide(xp.subtract(x, mean), std, out=outs[0])
    else:
        outs[0][...] = ((x - mean) / std).astype(outs[0].dtype)


def _normalize_gradient(F, attrs, inputs, outputs, out_grads):
    return [F._image_normalize(out_grads[0], mean=(0.0,), std=attrs['std'])]


register('_image_normalize', _normalize_kernel, infer_shape=_normalize_infer,
         infer_type=_same_dtype, params=NORMALIZE_PARAMS, gradient=_normalize_gradient,
         doc='(x - mean[c]) / std[c] for each channel c of a tensor (C, H, W) or '
             '(N, C, H, W).')


# ----------------------------------------------------------------------------------------------
# resize and crop

RESIZE_PARAMS = (
    Param('size', p_shape, (), 'New size: (width, height), or one number (see keep_ratio).'),
    Param('keep_ratio', p_bool, False, 'With one number: resize the short edge to it, '
          'keeping the aspect ratio (else both edges).'),
    Param('interp', p_int, 1, 'Interpolation: 0 nearest, 1 bilinear, 2 bicubic, 3 area, '
          '4 Lanczos.'),
)


def resized_hw(attrs, height, width):
    """(new height, new width) of an image of (height, width) under resize's attributes."""
    size = attrs['size']
    if len(size) == 2:
        return size[1], size[0]
    if len(size) != 1:
        raise ShapeError(f'resize: size={size}: expected (width, height) or one number')
    if not attrs['keep_ratio']:
        return size[0], size[0]
    if height > width:
        return height * size[0] // width, size[0]
    return size[0], width * size[0] // height


def _resize_infer(attrs, in_shapes):
    shape = _image_shape('resize', in_shapes[0])
    if attrs['interp'] not in imaging.INTERPOLATIONS:
        raise ShapeError(f'resize: interp={attrs["interp"]}: expected 0 (nearest), '
                         f'1 (bilinear), 2 (bicubic), 3 (area) or 4 (Lanczos)')
    if shape is None:
        return [None], [None]
    height, width = resized_hw(attrs, shape[-3], shape[-2])
    if height <= 0 or width <= 0:
        raise ShapeError(f'resize: size={attrs["size"]} gives an empty image')
    return [shape], [shape[:-3] + (height, width, shape[-1])]


def _resize_kernel(attrs, ins, outs, ctx):
    source, out = _host(ins[0]), outs[0]
    height, width = out.shape[-3:-1]
    resized = [imaging.resize(image, width, height, attrs['interp'])
               for image in _images(source)]
    _to_device(ctx.xp, out, np.stack(resized).reshape(out.shape))


register('_image_resize', _resize_kernel, infer_shape=_resize_infer, infer_type=_same_dtype,
         params=RESIZE_PARAMS,
         doc='Resize an image (H, W, C) or batch (N, H, W, C) with OpenCV.')

CROP_PARAMS = (
    Param('x', p_int, REQUIRED, 'Left edge of the crop.'),
    Param('y', p_int, REQUIRED, 'Top edge of the crop.'),
    Param('width', p_int, REQUIRED, 'Width of the crop.'),
    Param('height', p_int, REQUIRED, 'Height of the crop.'),
)


def _crop_infer(attrs, in_shapes):
    shape = _image_shape('crop', in_shapes[0])
    if shape is None:
        return [None], [None]
    x, y, width, height = (attrs[k] for k in ('x', 'y', 'width', 'height'))
    rows, cols = shape[-3:-1]
    if x < 0 or y < 0 or width <= 0 or height <= 0 or x + width > cols or y + height > rows:
        raise ShapeError(f'crop: the box x={x}, y={y}, width={width}, height={height} does not '
                         f'lie inside the {cols}x{rows} (width x height) image')
    return [shape], [shape[:-3] + (height, width, shape[-1])]


def _crop_window(attrs):
    return (slice(attrs['y'], attrs['y'] + attrs['height']),
            slice(attrs['x'], attrs['x'] + attrs['width']), slice(None))


def _crop_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0][(Ellipsis,) + _crop_window(attrs)]


def _crop_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data): the gradient lands in the box, zeros around it."""
    outs[0].fill(0)
    outs[0][(Ellipsis,) + _crop_window(attrs)] = ins[0]


def _crop_gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_image_crop(out_grads[0], inputs[0], **attrs)]


register('_image_crop', _crop_kernel, infer_shape=_crop_infer, infer_type=_same_dtype,
         params=CROP_PARAMS, gradient=_crop_gradient,
         doc='The box (x, y, width, height) of an image (H, W, C) or batch (N, H, W, C).')
register('_backward_image_crop', _crop_backward_kernel, inputs=('out_grad', 'data'),
         outputs=('data_grad',), params=CROP_PARAMS,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]))


def _crop_resize_infer(attrs, in_shapes):
    shapes, (cropped,) = _crop_infer(attrs, in_shapes)
    if cropped is None:
        return shapes, [None]
    width, height = attrs['size']
    return shapes, [cropped[:-3] + (height, width, cropped[-1])]


def _crop_resize_kernel(attrs, ins, outs, ctx):
    window = _host(ins[0])[(Ellipsis,) + _crop_window(attrs)]
    height, width = outs[0].shape[-3:-1]
    resized = [imaging.resize(image, width, height, attrs['interp'])
               for image in _images(window)]
    _to_device(ctx.xp, outs[0], np.stack(resized).reshape(outs[0].shape))


# mx.image.fixed_crop with a size: the crop feeds OpenCV as a view, so no crop is stored
register('_cvcropresize', _crop_resize_kernel, infer_shape=_crop_resize_infer,
         infer_type=_same_dtype,
         params=CROP_PARAMS + (Param('size', p_shape, REQUIRED, 'New size (width, height).'),
                               Param('interp', p_int, 1, 'Interpolation (as resize).')),
         doc='crop then resize to size (width, height), without storing the crop.')


# ----------------------------------------------------------------------------------------------
# Flips

def _flip_axis(array, axis_from_channels):
    return array.ndim - 1 - axis_from_channels


def _flipper(name, axis_from_channels, random):
    def kernel(attrs, ins, outs, ctx):
        x, out, xp = ins[0], outs[0], ctx.xp
        axis = _flip_axis(x, axis_from_channels)
        if not random:
            out[...] = xp.flip(x, axis)
            return
        flips = ctx.random.generator.random(len(_images(x))) < 0.5
        for image, source, flip in zip(_images(out), _images(x), flips):
            image[...] = xp.flip(source, axis - (x.ndim - 3)) if flip else source

    def gradient(F, attrs, inputs, outputs, out_grads):
        return [getattr(F, name)(out_grads[0])]

    extra = dict(resources=('random',), random=True) if random else dict(gradient=gradient)
    return kernel, extra


for _name, _axis, _what in (('flip_left_right', 1, 'left and right'),
                            ('flip_top_bottom', 2, 'top and bottom')):
    _kernel, _extra = _flipper(f'_image_{_name}', _axis, random=False)
    register(f'_image_{_name}', _kernel, infer_shape=_same_image(_name),
             infer_type=_same_dtype, doc=f'Swap {_what} of an image or of each image of a '
             f'batch.', **_extra)
    _kernel, _extra = _flipper(f'_image_{_name}', _axis, random=True)
    register(f'_image_random_{_name}', _kernel, infer_shape=_same_image(f'random_{_name}'),
             infer_type=_same_dtype, doc=f'Swap {_what} of each image with probability 0.5.',
             **_extra)


# ----------------------------------------------------------------------------------------------
# Colour

def _float(image):
    """The image in the type colour arithmetic runs in: float64 stays, others float32."""
    return image.astype(np.result_type(image.dtype, np.float32))


def _rgb(image):
    return _float(image[..., :3])


def _brightened(image, alpha):
    out = _float(image)
    return out * out.dtype.type(alpha)


def _contrasted(image, alpha):
    out = _float(image)
    kind = out.dtype.type
    gray_mean = (_rgb(image) @ GRAY.astype(kind)).mean(dtype=kind)
    return out * kind(alpha) + kind((1 - alpha) * gray_mean)


def _saturated(image, alpha):
    out = _float(image)
    kind = out.dtype.type
    gray = (_rgb(image) @ GRAY.astype(kind))[..., None] * kind(1 - alpha)
    out[..., :3] = out[..., :3] * kind(alpha) + gray
    return out


def _rgb_to_hls(rgb):
    """Hue in degrees, lightness and saturation in [0, 1] (OpenCV's HLS of float RGB)."""
    r, g, b = np.moveaxis(rgb / np.float32(255), -1, 0)
    vmax, vmin = rgb.max(-1) / np.float32(255), rgb.min(-1) / np.float32(255)
    diff = vmax - vmin
    light = (vmax + vmin) * np.float32(0.5)
    chroma = diff > np.finfo(np.float32).eps
    safe = np.where(chroma, diff, np.float32(1))
    sat = np.where(light < 0.5, diff / np.maximum(vmax + vmin, 1e-30),
                   diff / np.maximum(2 - vmax - vmin, 1e-30))
    step = np.float32(60) / safe
    hue = np.where(vmax == r, (g - b) * step,
                   np.where(vmax == g, (b - r) * step + 120, (r - g) * step + 240))
    hue = np.where(hue < 0, hue + 360, hue)
    return np.where(chroma, hue, 0).astype(np.float32), light, np.where(chroma, sat, 0)


# Which of (p2, p1, falling, rising) each of b, g, r takes in each 60-degree sector.
_SECTORS = np.array([[1, 3, 0], [1, 0, 2], [3, 0, 1], [0, 2, 1], [0, 1, 3], [2, 1, 0]])


def _hls_to_rgb(hue, light, sat):
    p2 = np.where(light <= 0.5, light * (1 + sat), light + sat - light * sat)
    p1 = 2 * light - p2
    position = np.mod(hue / np.float32(60), 6)
    sector = np.minimum(position.astype(np.int64), 5)
    fraction = position - sector
    table = np.stack([p2, p1, p1 + (p2 - p1) * (1 - fraction), p1 + (p2 - p1) * fraction])
    picks = _SECTORS[sector]                                      # (..., 3): b, g, r
    bgr = np.take_along_axis(np.moveaxis(table, 0, -1), picks, axis=-1)
    rgb = bgr[..., ::-1]
    gray = np.repeat(light[..., None], 3, axis=-1)
    return np.where((sat == 0)[..., None], gray, rgb).astype(np.float32) * np.float32(255)


def hue_rotated(image, alpha):
    """`image` with its hue turned by ``alpha * 360`` degrees (through HLS, as MXNet)."""
    out = _float(image)
    if abs(alpha) < 1e-4:
        return out
    hue, light, sat = _rgb_to_hls(_rgb(image).astype(np.float32))
    out[..., :3] = _hls_to_rgb(hue + np.float32(alpha * 360), light, sat)
    return out


def _lit(image, alpha):
    out = _float(image)
    eigvec, eigval = EIGVEC.astype(out.dtype), EIGVAL.astype(out.dtype)
    out[..., :3] += (eigvec * (np.asarray(alpha, out.dtype) * eigval)).sum(axis=1)
    return out


def _per_image(adjust, draw):
    """A kernel applying ``adjust(image, factor)`` with a fresh ``draw(attrs, generator)``
    for each image."""
    def kernel(attrs, ins, outs, ctx):
        source = _host(ins[0])
        results = np.empty(source.shape, outs[0].dtype)
        for image, out in zip(_images(source), _images(results)):
            _store(out, adjust(image, draw(attrs, ctx.random.generator)))
        _to_device(ctx.xp, outs[0], results)
    return kernel


def _uniform_factor(attrs, generator):
    return float(generator.uniform(attrs['min_factor'], attrs['max_factor']))


FACTOR_PARAMS = (Param('min_factor', p_float, REQUIRED, 'Smallest factor.'),
                 Param('max_factor', p_float, REQUIRED, 'Largest factor.'))


def _factor_infer(name):
    image_infer = _same_image(name, channels=3)

    def infer(attrs, in_shapes):
        if attrs['min_factor'] > attrs['max_factor']:
            raise ShapeError(f'{name}: min_factor={attrs["min_factor"]} exceeds '
                             f'max_factor={attrs["max_factor"]}')
        return image_infer(attrs, in_shapes)
    return infer


for _name, _adjust, _what in (
        ('brightness', _brightened, 'Scale each pixel by a factor from [min, max].'),
        ('contrast', _contrasted, 'Blend with the mean grey level by a factor from [min, max].'),
        ('saturation', _saturated, 'Blend each pixel with its grey level by a factor from '
                                   '[min, max].'),
        ('hue', hue_rotated, 'Turn the hue by factor * 360 degrees, factor from [min, max].')):
    register(f'_image_random_{_name}', _per_image(_adjust, _uniform_factor),
             infer_shape=_factor_infer(f'random_{_name}'), infer_type=_same_dtype,
             params=FACTOR_PARAMS, resources=('random',), random=True, doc=_what)

JITTER_PARAMS = tuple(Param(name, p_float, REQUIRED, f'How much to jitter {name}.')
                      for name in ('brightness', 'contrast', 'saturation', 'hue'))


def _jittered(image, attrs, generator):
    """Brightness, contrast, saturation and hue in a random order, each with its factor."""
    out = _float(image)
    for index in generator.permutation(4):
        name = ('brightness', 'contrast', 'saturation', 'hue')[index]
        amount = attrs[name]
        if amount <= 0:
            continue
        factor = float(generator.uniform(-amount, amount))
        if name == 'hue':
            out = hue_rotated(out, factor)
        else:
            out = {'brightness': _brightened, 'contrast': _contrasted,
                   'saturation': _saturated}[name](out, 1.0 + factor)
    return out


def _jitter_kernel(attrs, ins, outs, ctx):
    source = _host(ins[0])
    results = np.empty(source.shape, outs[0].dtype)
    for image, out in zip(_images(source), _images(results)):
        _store(out, _jittered(image, attrs, ctx.random.generator))
    _to_device(ctx.xp, outs[0], results)


register('_image_random_color_jitter', _jitter_kernel,
         infer_shape=_same_image('random_color_jitter', channels=3), infer_type=_same_dtype,
         params=JITTER_PARAMS, resources=('random',), random=True,
         doc='Jitter brightness, contrast, saturation and hue, in a random order.')


def _lighting_kernel(attrs, ins, outs, ctx):
    source = _host(ins[0])
    results = np.empty(source.shape, outs[0].dtype)
    for image, out in zip(_images(source), _images(results)):
        _store(out, _lit(image, attrs['alpha']))
    _to_device(ctx.xp, outs[0], results)


def _lighting_infer(attrs, in_shapes):
    if len(attrs['alpha']) != 3:
        raise ShapeError(f'adjust_lighting: alpha={attrs["alpha"]}: expected 3 values '
                         f'(R, G, B)')
    return _same_image('adjust_lighting', channels=3)(attrs, in_shapes)


register('_image_adjust_lighting', _lighting_kernel, infer_shape=_lighting_infer,
         infer_type=_same_dtype,
         params=(Param('alpha', _p_floats, REQUIRED, 'Weights of the three principal '
                       'components of ImageNet colour (AlexNet lighting).'),),
         gradient=lambda F, attrs, inputs, outputs, out_grads: [out_grads[0]],
         doc='Add AlexNet-style PCA lighting: eigvec @ (alpha * eigval) to R, G, B.')

register('_image_random_lighting',
         _per_image(_lit, lambda attrs, gen: gen.normal(0, attrs['alpha_std'], 3)),
         infer_shape=_same_image('random_lighting', channels=3), infer_type=_same_dtype,
         params=(Param('alpha_std', p_float, 0.05, 'Standard deviation of the weights.'),),
         resources=('random',), random=True,
         doc='adjust_lighting with weights drawn from N(0, alpha_std).')


# ----------------------------------------------------------------------------------------------
# OpenCV's resize and border (``mx.image.imresize``, ``copyMakeBorder``)

def _cv_resize_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is not None and len(shape) != 3:
        raise ShapeError(f'imresize: expected an image (H, W, C), got shape {tuple(shape)}')
    if attrs['w'] <= 0 or attrs['h'] <= 0:
        raise ShapeError(f'imresize: w={attrs["w"]}, h={attrs["h"]} must be positive')
    return [shape], [None if shape is None else (attrs['h'], attrs['w'], shape[2])]


def _cv_resize_kernel(attrs, ins, outs, ctx):
    resized = imaging.resize(_host(ins[0]), attrs['w'], attrs['h'], attrs['interp'])
    _to_device(ctx.xp, outs[0], resized)


register('_cvimresize', _cv_resize_kernel, infer_shape=_cv_resize_infer,
         infer_type=_same_dtype,
         params=(Param('w', p_int, REQUIRED, 'New width.'),
                 Param('h', p_int, REQUIRED, 'New height.'),
                 Param('interp', p_int, 1, 'Interpolation: 0 nearest, 1 bilinear, 2 bicubic, '
                       '3 area, 4 Lanczos.')),
         doc='Resize an image (H, W, C) to (h, w, C) with OpenCV.')

BORDER_PARAMS = tuple(Param(name, p_int, REQUIRED, f'Pixels added at the {name}.')
                      for name in ('top', 'bot', 'left', 'right')) + (
    Param('type', p_int, 0, "OpenCV's border type: 0 constant, 1 replicate, 2 reflect, "
          "3 wrap, 4 reflect-101."),
    Param('value', p_float, 0.0, 'The value of a constant border.'),
    Param('values', _p_floats, (), 'The constant border per channel (value when empty).'),
)


def _border_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is not None and len(shape) != 3:
        raise ShapeError(f'copyMakeBorder: expected an image (H, W, C), got {tuple(shape)}')
    if min(attrs[k] for k in ('top', 'bot', 'left', 'right')) < 0:
        raise ShapeError('copyMakeBorder: top, bot, left and right must be >= 0')
    if shape is None:
        return [None], [None]
    return [shape], [(shape[0] + attrs['top'] + attrs['bot'],
                      shape[1] + attrs['left'] + attrs['right'], shape[2])]


def _border_kernel(attrs, ins, outs, ctx):
    padded = imaging.copy_make_border(_host(ins[0]), attrs['top'], attrs['bot'], attrs['left'],
                                      attrs['right'], attrs['type'], attrs['value'],
                                      attrs['values'])
    _to_device(ctx.xp, outs[0], padded)


register('_cvcopyMakeBorder', _border_kernel, infer_shape=_border_infer,
         infer_type=_same_dtype, params=BORDER_PARAMS,
         doc="Pad an image (H, W, C) with OpenCV's copyMakeBorder.")
