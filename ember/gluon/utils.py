"""Gluon helpers: splitting batches across devices, global-norm clipping, files.

>>> import ember as mx
>>> parts = mx.gluon.utils.split_data(mx.nd.arange(6), 3)
>>> [p.asnumpy().tolist() for p in parts]
[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
"""
from __future__ import annotations

import functools
import hashlib
import operator
import os
import shutil
import urllib.parse
import urllib.request
import warnings

import numpy as np

from ember import config
from ember import ndarray as nd
from ember.base import EmberError
from ember.gluon.block import HookHandle

__all__ = ['split_data', 'split_and_load', 'clip_global_norm', 'check_sha1', 'download',
           'HookHandle', 'shape_is_known', 'replace_file']


def split_data(data, num_slice, batch_axis=0, even_split=True):
    """Split `data` into `num_slice` slices along `batch_axis`.

    With ``even_split=False`` the last slice takes the remainder, and a batch smaller than
    `num_slice` gives one slice per sample.
    """
    size = data.shape[batch_axis]
    if even_split and size % num_slice != 0:
        raise ValueError(
            f'data with shape {data.shape} cannot be evenly split into {num_slice} slices '
            f'along axis {batch_axis}. Use a batch size that is a multiple of {num_slice} or '
            f'set even_split=False to allow uneven partitioning of data.')
    step = size // num_slice
    if not even_split and size < num_slice:
        step, num_slice = 1, size
    bounds = [(i * step, (i + 1) * step if i < num_slice - 1 else size)
              for i in range(num_slice)]
    if batch_axis == 0:
        return [data[begin:end] for begin, end in bounds]
    return [nd.slice_axis(data, axis=batch_axis, begin=begin, end=end)
            for begin, end in bounds]


def split_and_load(data, ctx_list, batch_axis=0, even_split=True):
    """Split `data` (an NDArray or NumPy array) along `batch_axis` and copy slice i to
    ``ctx_list[i]``.

    >>> import ember as mx
    >>> [x.shape for x in mx.gluon.utils.split_and_load(mx.nd.ones((4, 2)), [mx.cpu(0)] * 2)]
    [(2, 2), (2, 2)]
    """
    if not isinstance(data, nd.NDArray):
        data = nd.array(data, ctx=ctx_list[0])
    if len(ctx_list) == 1:
        return [data.as_in_context(ctx_list[0])]
    slices = split_data(data, len(ctx_list), batch_axis, even_split)
    return [part.as_in_context(ctx) for part, ctx in zip(slices, ctx_list)]


def _squared_norm(array):
    flat = array.reshape((-1,))
    return nd.dot(flat, flat)


def clip_global_norm(arrays, max_norm, check_isfinite=True):
    """Scale `arrays` in place so that their joint L2 norm is at most `max_norm`.

    Returns the norm before clipping: a float, or an NDArray when `check_isfinite` is False
    (which avoids waiting for the result).

    >>> import ember as mx
    >>> grads = [mx.nd.array([3.0]), mx.nd.array([4.0])]
    >>> float(mx.gluon.utils.clip_global_norm(grads, 1.0))
    5.0
    >>> [round(float(g.asnumpy()[0]), 3) for g in grads]
    [0.6, 0.8]
    """
    if not arrays:
        raise ValueError('clip_global_norm: arrays is empty; expected at least one NDArray')
    device = arrays[0].context
    squares = [_squared_norm(a).as_in_context(device) for a in arrays]
    total_norm = nd.sqrt(functools.reduce(operator.add, squares))
    if check_isfinite and not np.isfinite(total_norm.asscalar()):
        warnings.warn(UserWarning('nan or inf is detected. Clipping results will be '
                                  'undefined.'), stacklevel=2)
    scale = nd.minimum(max_norm / (total_norm + 1e-8), 1.0)
    for array in arrays:
        array *= scale.as_in_context(array.context)
    return total_norm.asscalar() if check_isfinite else total_norm


def shape_is_known(shape):
    """Whether every dimension of `shape` is known (MXNet 1.x marks unknown ones with 0)."""
    if shape is None:
        return False
    return all(int(d) > 0 for d in shape)


def check_sha1(filename, sha1_hash):
    """Whether the SHA-1 digest of the file is `sha1_hash` (hex).

    >>> import hashlib, tempfile
    >>> with tempfile.NamedTemporaryFile(delete=False) as f:
    ...     _ = f.write(b'ember')
    >>> check_sha1(f.name, hashlib.sha1(b'ember').hexdigest())
    True
    """
    sha1 = hashlib.sha1()
    with open(filename, 'rb') as file:
        for chunk in iter(lambda: file.read(1 << 20), b''):
            sha1.update(chunk)
    return sha1.hexdigest() == sha1_hash


def _local_source(url):
    """The local path a URL names (a plain path or file://), or None for a network URL."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == 'file':
        return urllib.request.url2pathname(parsed.path)
    if parsed.scheme == '':
        return os.path.expanduser(url)
    return None


def _target_path(url, path):
    name = url.rstrip('/').split('/')[-1]
    if path is None:
        return name
    path = os.path.expanduser(path)
    return os.path.join(path, name) if os.path.isdir(path) else path


def download(url, path=None, overwrite=False, sha1_hash=None, retries=5, verify_ssl=True):
    """Copy the file at `url` to `path` (a file or directory; default the current directory)
    and return the path written.

    `url` is a local path, a ``file://`` URL (for example under a local ``MXNET_GLUON_REPO``)
    or an http(s) URL, fetched with up to `retries` attempts when the network reaches it. An
    existing file with the right `sha1_hash` is kept unless `overwrite`; a fetched file whose
    SHA-1 differs is removed and reported.
    """
    target = _target_path(url, path)
    if os.path.exists(target) and not overwrite and (
            sha1_hash is None or check_sha1(target, sha1_hash)):
        return target
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    source = _local_source(url)
    if source is None:
        _fetch(url, target, retries, verify_ssl)
    elif not os.path.isfile(source):
        raise EmberError(f'download: {url!r}: no such file {source!r}')
    else:
        shutil.copyfile(source, target)
    if sha1_hash and not check_sha1(target, sha1_hash):
        os.remove(target)
        raise EmberError(f'download: {target!r} from {url!r} does not match the expected '
                         f'SHA-1 {sha1_hash}; the source file may be outdated or corrupt')
    return target


def _fetch(url, target, retries, verify_ssl):
    """Fetch an http(s) URL into `target` (through a temporary file beside it)."""
    import ssl
    context = None if verify_ssl else ssl._create_unverified_context()
    partial = f'{target}.{os.getpid()}.part'
    for attempt in range(max(1, retries)):
        try:
            with urllib.request.urlopen(url, timeout=30, context=context) as response, \
                    open(partial, 'wb') as out:
                shutil.copyfileobj(response, out)
            os.replace(partial, target)
            return
        except OSError as exc:
            reason = exc
            if os.path.exists(partial):
                os.remove(partial)
    raise EmberError(f'download: cannot fetch {url!r} ({reason}) after {max(1, retries)} '
                     f'attempts; copy the file here and pass its path, or set '
                     f'MXNET_GLUON_REPO to a local directory that mirrors the repository')


def _get_repo_url():
    """The repository of pretrained weights and datasets (MXNET_GLUON_REPO), ending in '/'."""
    repo = config.get('MXNET_GLUON_REPO')
    return repo if repo.endswith('/') else repo + '/'


def _get_repo_file_url(namespace, filename):
    """Where `filename` of `namespace` (e.g. 'gluon/models') lives in the repository."""
    return f'{_get_repo_url()}{namespace}/{filename}'


def replace_file(src, dst):
    """Move `src` over `dst` in one step (``os.replace``): a reader sees the old file or the
    new one, never half of it."""
    os.replace(src, dst)
