"""Image codecs and resampling in native code: OpenCV (``opencv-python-headless``), or Pillow
where OpenCV is missing. Both release the GIL while they work, so decoding threads run in
parallel.

Images are NumPy arrays of shape (height, width, channels), uint8 or float32. ``decode``
returns RGB unless asked for OpenCV's BGR; ``encode`` takes what OpenCV takes (BGR).

>>> import numpy as np
>>> image = np.zeros((4, 6, 3), np.uint8)
>>> image[:, :, 0] = 200                       # red, in RGB
>>> png = encode(image[:, :, ::-1], '.png')     # encode takes BGR
>>> decoded = decode(png)
>>> decoded.shape, decoded[0, 0].tolist()
((4, 6, 3), [200, 0, 0])
>>> resize(decoded, 3, 2).shape
(2, 3, 3)
"""
from __future__ import annotations

import io
import os
import threading

import numpy as np

from ember import config
from ember.base import EmberError

__all__ = ['available', 'opencv', 'decode', 'encode', 'resize', 'copy_make_border',
           'set_num_threads', 'num_threads', 'INTERPOLATIONS', 'ImageDecodeError']

PACKAGE = 'opencv-python-headless'
INSTALL_HINT = (f"install OpenCV with `pip install {PACKAGE}` (or `pip install 'ember[image]'`)")
# MXNet's interpolation codes: 0 nearest, 1 bilinear, 2 bicubic, 3 area, 4 Lanczos.
INTERPOLATIONS = {0: 'nearest', 1: 'bilinear', 2: 'bicubic', 3: 'area', 4: 'lanczos'}


class ImageDecodeError(EmberError, ValueError):
    """The bytes are not an image that the codec can read."""


_lock = threading.Lock()
_modules: dict = {}


def _import(name):
    with _lock:
        if name not in _modules:
            try:
                _modules[name] = __import__(name)
            except ImportError:
                _modules[name] = None
        return _modules[name]


def opencv():
    """The ``cv2`` module, or None where OpenCV is not installed."""
    return _import('cv2')


def _pillow():
    if _import('PIL') is None:
        return None
    from PIL import Image
    return Image


def available() -> str | None:
    """'opencv', 'pillow' or None: the codec this process uses."""
    if opencv() is not None:
        return 'opencv'
    return 'pillow' if _pillow() is not None else None


def require_opencv(what: str):
    """``cv2``, or an error saying that `what` needs OpenCV and how to install it."""
    cv2 = opencv()
    if cv2 is None:
        raise EmberError(f'{what} needs OpenCV, which is not installed: {INSTALL_HINT}')
    return cv2


def _no_codec(what):
    return EmberError(f'{what} needs an image codec: {INSTALL_HINT} (Pillow also works for '
                      f'decoding, encoding and resizing)')


# ----------------------------------------------------------------------------------------------
# Decoding and encoding

def decode(buf, flag: int = 1, to_rgb: bool = True) -> np.ndarray:
    """Decode image bytes: `flag` 1 gives 3 channels, 0 one (gray), -1 the file's own (an
    alpha channel kept). Always 3-D; RGB(A) when `to_rgb`, else OpenCV's BGR(A)."""
    data = np.frombuffer(buf, np.uint8) if not isinstance(buf, np.ndarray) else buf
    if data.size == 0:
        raise ImageDecodeError('cannot decode an image from 0 bytes')
    cv2 = opencv()
    if cv2 is not None:
        image = cv2.imdecode(data.reshape(-1), flag)
        if image is None:
            raise ImageDecodeError(f'the {data.size} bytes are not an image OpenCV can decode '
                                   f'(they begin {bytes(data[:8])!r})')
        if image.ndim == 2:
            return image[:, :, None]
        if to_rgb:
            code = cv2.COLOR_BGR2RGB if image.shape[2] == 3 else cv2.COLOR_BGRA2RGBA
            image = cv2.cvtColor(image, code)
        return image
    return _pillow_decode(data, flag, to_rgb)


def _pillow_decode(data, flag, to_rgb):
    pil = _pillow()
    if pil is None:
        raise _no_codec('decoding an image')
    try:
        image = pil.open(io.BytesIO(data.tobytes()))
        image.load()
    except Exception as exc:  # noqa: BLE001  (Pillow raises several kinds)
        raise ImageDecodeError(f'the {data.size} bytes are not an image Pillow can decode: '
                               f'{exc}') from None
    mode = {1: 'RGB', 0: 'L'}.get(flag, 'RGBA' if 'A' in image.mode else 'RGB')
    array = np.asarray(image.convert(mode))
    if array.ndim == 2:
        return array[:, :, None]
    return array if to_rgb else np.ascontiguousarray(array[:, :, ::-1])


def encode(image: np.ndarray, ext: str = '.jpg', quality: int = 95) -> bytes:
    """Encode a BGR (or gray) uint8 image as `ext` ('.jpg' or '.png'): `quality` is JPEG's
    quality (1-100) or PNG's compression level (0-9; larger values mean 9, as in OpenCV)."""
    kind = ext.lower()
    if kind not in ('.jpg', '.jpeg', '.png'):
        raise ValueError(f"encode: ext={ext!r}: expected '.jpg', '.jpeg' or '.png'")
    if kind == '.png':
        quality = min(int(quality), 9)
    cv2 = opencv()
    if cv2 is not None:
        flag = cv2.IMWRITE_PNG_COMPRESSION if kind == '.png' else cv2.IMWRITE_JPEG_QUALITY
        ok, buf = cv2.imencode(ext, image, [flag, int(quality)])
        if not ok:
            raise EmberError(f'encode: OpenCV could not encode an image of shape '
                             f'{image.shape} and dtype {image.dtype} as {ext}')
        return buf.tobytes()
    return _pillow_encode(image, kind, quality)


def _pillow_encode(image, kind, quality):
    pil = _pillow()
    if pil is None:
        raise _no_codec('encoding an image')
    array = image[:, :, 0] if image.ndim == 3 and image.shape[2] == 1 else image
    if array.ndim == 3:
        array = array[:, :, ::-1]
    out = io.BytesIO()
    if kind == '.png':
        pil.fromarray(np.ascontiguousarray(array)).save(out, 'PNG', compress_level=quality)
    else:
        pil.fromarray(np.ascontiguousarray(array)).save(out, 'JPEG', quality=quality)
    return out.getvalue()


# ----------------------------------------------------------------------------------------------
# Resampling

def _interpolation_code(interp):
    if interp not in INTERPOLATIONS:
        raise ValueError(f'interp={interp!r}: expected 0 (nearest), 1 (bilinear), 2 (bicubic), '
                         f'3 (area) or 4 (Lanczos)')
    return interp


def resize(image: np.ndarray, width: int, height: int, interp: int = 1) -> np.ndarray:
    """`image` (H, W, C) resized to (height, width, C) with MXNet's interpolation code."""
    interp = _interpolation_code(interp)
    if width <= 0 or height <= 0:
        raise ValueError(f'resize: the new size ({width}, {height}) must be positive')
    cv2 = opencv()
    if cv2 is not None:
        flags = (cv2.INTER_NEAREST, cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_AREA,
                 cv2.INTER_LANCZOS4)
        out = cv2.resize(image, (int(width), int(height)), interpolation=flags[interp])
        return out[:, :, None] if out.ndim == 2 else out
    return _pillow_resize(image, width, height, interp)


def _pillow_resize(image, width, height, interp):
    pil = _pillow()
    if pil is None:
        raise _no_codec('resizing an image')
    filters = (pil.NEAREST, pil.BILINEAR, pil.BICUBIC, pil.BOX, pil.LANCZOS)
    planes = []
    for channel in range(image.shape[2]):
        plane = image[:, :, channel]
        mode = 'L' if plane.dtype == np.uint8 else 'F'
        source = pil.fromarray(np.ascontiguousarray(plane.astype(
            np.uint8 if mode == 'L' else np.float32)), mode)
        planes.append(np.asarray(source.resize((width, height), filters[interp])))
    return np.stack(planes, axis=2).astype(image.dtype)


def copy_make_border(image, top, bottom, left, right, border_type=0, value=0.0, values=()):
    """`image` padded by the given pixels: `border_type` is OpenCV's (0 constant: `values`,
    one per channel, when given, else `value`; 1 replicate, 2 reflect, 3 wrap, 4
    reflect-101)."""
    cv2 = require_opencv('copyMakeBorder')
    fill = tuple(values) + (0.0,) * (4 - len(values)) if values else (value,) * 4
    out = cv2.copyMakeBorder(image, int(top), int(bottom), int(left), int(right),
                             int(border_type), value=fill)
    return out[:, :, None] if out.ndim == 2 else out


# ----------------------------------------------------------------------------------------------
# Threads

def set_num_threads(count: int) -> None:
    """OpenCV's own thread count for one call (resize of a large image); below 1 turns its
    threading off, as ``MXNET_MP_OPENCV_NUM_THREADS`` asks. No-op without OpenCV."""
    cv2 = opencv()
    if cv2 is not None:
        cv2.setNumThreads(max(int(count), 0))


def num_threads() -> int:
    """OpenCV's thread count now (1 without OpenCV)."""
    cv2 = opencv()
    return cv2.getNumThreads() if cv2 is not None else 1


# OpenCV's pthreads pool does not survive fork: a child forked while a pool thread held the
# pool's lock hung in its first setNumThreads (3 of 40 forks here). Before a fork the pool is
# shut down (one thread: no helper threads); the parent gets its count back after, and the
# child starts MXNET_MP_OPENCV_NUM_THREADS threads, as MXNet gives its forked workers.
_counts_before_fork: list = []


def _before_fork():
    cv2 = _modules.get('cv2')
    if cv2 is not None:
        _counts_before_fork.append(cv2.getNumThreads())
        cv2.setNumThreads(1)


def _after_fork_in_parent():
    cv2 = _modules.get('cv2')
    if cv2 is not None and _counts_before_fork:
        cv2.setNumThreads(_counts_before_fork.pop())


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()
    _counts_before_fork.clear()
    if _modules.get('cv2') is not None:
        set_num_threads(config.get('MXNET_MP_OPENCV_NUM_THREADS'))


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
