"""Pretrained weights of the model zoo: where they live, where they come from, how they are
checked.

A model's weights are the file ``<root>/<name>-<first 8 hex digits of its SHA-1>.params``;
`root` defaults to ``$MXNET_HOME/models``. When the file is absent (or its SHA-1 is wrong) it is
taken from ``$MXNET_GLUON_REPO/gluon/models/<name>-<hash>.zip``, as MXNet does. This machine has
no network, so the repository must be a local directory or a ``file://`` URL; an http(s)
repository gives an error that says where to put the file.

>>> from ember.gluon.model_zoo import model_store
>>> model_store.short_hash('resnet18_v1')
'a0666292'
"""
from __future__ import annotations

import difflib
import hashlib
import logging
import os
import re
import shutil
import tempfile
import urllib.parse
import urllib.request
import zipfile

from ember import config
from ember.base import EmberError, data_dir

__all__ = ['get_model_file', 'purge', 'short_hash', 'register', 'file_sha1',
           'ModelStoreError', 'ChecksumError', 'ModelFileNotFoundError']

_log = logging.getLogger(__name__)

# MXNet 1.9's published checksums of its Gluon model zoo files.
_model_sha1 = {name: checksum for checksum, name in [
    ('44335d1f0046b328243b32a26a4fbd62d9057b45', 'alexnet'),
    ('f27dbf2dbd5ce9a80b102d89c7483342cd33cb31', 'densenet121'),
    ('b6c8a95717e3e761bd88d145f4d0a214aaa515dc', 'densenet161'),
    ('2603f878403c6aa5a71a124c4a3307143d6820e9', 'densenet169'),
    ('1cdbc116bc3a1b65832b18cf53e1cb8e7da017eb', 'densenet201'),
    ('ed47ec45a937b656fcc94dabde85495bbef5ba1f', 'inceptionv3'),
    ('9f83e440996887baf91a6aff1cccc1c903a64274', 'mobilenet0.25'),
    ('8e9d539cc66aa5efa71c4b6af983b936ab8701c3', 'mobilenet0.5'),
    ('529b2c7f4934e6cb851155b22c96c9ab0a7c4dc2', 'mobilenet0.75'),
    ('6b8c5106c730e8750bcd82ceb75220a3351157cd', 'mobilenet1.0'),
    ('36da4ff1867abccd32b29592d79fc753bca5a215', 'mobilenetv2_1.0'),
    ('e2be7b72a79fe4a750d1dd415afedf01c3ea818d', 'mobilenetv2_0.75'),
    ('aabd26cd335379fcb72ae6c8fac45a70eab11785', 'mobilenetv2_0.5'),
    ('ae8f9392789b04822cbb1d98c27283fc5f8aa0a7', 'mobilenetv2_0.25'),
    ('a0666292f0a30ff61f857b0b66efc0228eb6a54b', 'resnet18_v1'),
    ('48216ba99a8b1005d75c0f3a0c422301a0473233', 'resnet34_v1'),
    ('0aee57f96768c0a2d5b23a6ec91eb08dfb0a45ce', 'resnet50_v1'),
    ('d988c13d6159779e907140a638c56f229634cb02', 'resnet101_v1'),
    ('671c637a14387ab9e2654eafd0d493d86b1c8579', 'resnet152_v1'),
    ('a81db45fd7b7a2d12ab97cd88ef0a5ac48b8f657', 'resnet18_v2'),
    ('9d6b80bbc35169de6b6edecffdd6047c56fdd322', 'resnet34_v2'),
    ('ecdde35339c1aadbec4f547857078e734a76fb49', 'resnet50_v2'),
    ('18e93e4f48947e002547f50eabbcc9c83e516aa6', 'resnet101_v2'),
    ('f2695542de38cf7e71ed58f02893d82bb409415e', 'resnet152_v2'),
    ('264ba4970a0cc87a4f15c96e25246a1307caf523', 'squeezenet1.0'),
    ('33ba0f93753c83d86e1eb397f38a667eaf2e9376', 'squeezenet1.1'),
    ('dd221b160977f36a53f464cb54648d227c707a05', 'vgg11'),
    ('ee79a8098a91fbe05b7a973fed2017a6117723a8', 'vgg11_bn'),
    ('6bc5de58a05a5e2e7f493e2d75a580d83efde38c', 'vgg13'),
    ('7d97a06c3c7a1aecc88b6e7385c2b373a249e95e', 'vgg13_bn'),
    ('e660d4569ccb679ec68f1fd3cce07a387252a90a', 'vgg16'),
    ('7f01cf050d357127a73826045c245041b0df7363', 'vgg16_bn'),
    ('ad2f660d101905472b83590b59708b71ea22b2e5', 'vgg19'),
    ('f360b758e856f1074a85abd5fd873ed1d98297c3', 'vgg19_bn')]}

_URL_FORMAT = '{repo_url}gluon/models/{file_name}.zip'
# Where MXNet's pretrained weights live (MXNET_GLUON_REPO's default).
apache_repo_url = config.REGISTRY['MXNET_GLUON_REPO'].default
_SHA1_PATTERN = re.compile(r'[0-9a-f]{40}')


class ModelStoreError(EmberError):
    """Pretrained weights could not be provided."""


class ChecksumError(ModelStoreError, ValueError):
    """A weights file does not have the SHA-1 the model store expects."""


class ModelFileNotFoundError(ModelStoreError, FileNotFoundError):
    """A weights file is neither in the model directory nor in a reachable repository."""


def short_hash(name):
    """The first 8 hex digits of the SHA-1 of model `name`'s weights (part of its file name)."""
    if name not in _model_sha1:
        known = sorted(_model_sha1)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ''
        raise ValueError(f'Pretrained model for {name!r} is not available: weights are '
                         f'registered for {", ".join(known)}{hint}')
    return _model_sha1[name][:8]


def register(name, sha1):
    """Declare the SHA-1 (40 hex digits) of the weights of model `name` (adds or replaces).

    >>> register('mynet', 'a' * 40)
    >>> short_hash('mynet')
    'aaaaaaaa'
    >>> del _model_sha1['mynet']
    """
    if not isinstance(sha1, str) or not _SHA1_PATTERN.fullmatch(sha1):
        raise ValueError(f'register({name!r}, sha1={sha1!r}): expected a SHA-1 of 40 lowercase '
                         f'hex digits')
    _model_sha1[name] = sha1


def file_sha1(path):
    """The SHA-1 of a file's bytes, as 40 hex digits."""
    digest = hashlib.sha1()
    with open(path, 'rb') as file:
        for chunk in iter(lambda: file.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def _models_dir(root):
    """`root` with ``~`` expanded; None means ``$MXNET_HOME/models``, read at each call."""
    return os.path.expanduser(root) if root is not None else os.path.join(data_dir(), 'models')


def get_model_file(name, root=None):
    """The path of model `name`'s pretrained parameters, fetched from the repository
    (``MXNET_GLUON_REPO``) into `root` when absent or corrupt.

    Raises ChecksumError when the repository's file has the wrong SHA-1 (nothing is kept),
    ModelFileNotFoundError when the file can be found nowhere.
    """
    file_name = f'{name}-{short_hash(name)}'
    root = _models_dir(root)
    file_path = os.path.join(root, file_name + '.params')
    expected = _model_sha1[name]
    if os.path.exists(file_path):
        actual = file_sha1(file_path)
        if actual == expected:
            return file_path
        _log.warning('%s has SHA-1 %s, expected %s; fetching it again.', file_path, actual,
                     expected)
    fetched = _fetch(file_name, root)
    actual = file_sha1(fetched)
    if actual != expected:
        os.remove(fetched)
        raise ChecksumError(f'{file_name}.params from {_repo_url()}: SHA-1 {actual} does not '
                            f'match the expected {expected} for model {name!r}; the file was '
                            f'not used. The repository copy is corrupt or of another version.')
    os.replace(fetched, file_path)
    return file_path


def _repo_url():
    repo = config.get('MXNET_GLUON_REPO')
    return repo if repo.endswith('/') else repo + '/'


def _local_repo_dir(repo_url):
    """The directory a repository URL names (a plain path or file://), None for a network URL."""
    parsed = urllib.parse.urlparse(repo_url)
    if parsed.scheme == 'file':
        return urllib.request.url2pathname(parsed.path)
    if parsed.scheme == '':
        return os.path.expanduser(repo_url)
    return None


def _fetch(file_name, root):
    """Unpack ``<file_name>.params`` from the repository's zip into a temporary file in `root`."""
    repo_url = _repo_url()
    url = _URL_FORMAT.format(repo_url=repo_url, file_name=file_name)
    repo_dir = _local_repo_dir(repo_url)
    where = (f'Put {file_name}.params in {root}, or {file_name}.zip in '
             f'<dir>/gluon/models/ and set MXNET_GLUON_REPO=<dir> (or file://<dir>).')
    if repo_dir is None:
        raise ModelFileNotFoundError(f'{file_name}.params is not in {root} and Ember cannot '
                                     f'download {url} (no network access). {where}')
    zip_path = os.path.join(repo_dir, 'gluon', 'models', file_name + '.zip')
    if not os.path.isfile(zip_path):
        raise ModelFileNotFoundError(f'{file_name}.params is not in {root} and the repository '
                                     f'MXNET_GLUON_REPO={repo_url!r} has no {zip_path}. {where}')
    os.makedirs(root, exist_ok=True)
    return _extract(zip_path, file_name + '.params', root)


def _extract(zip_path, member, root):
    """Copy `member` of the zip into a temporary file in `root` and return its path."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            if member not in archive.namelist():
                raise ModelFileNotFoundError(f'{zip_path} holds {archive.namelist()}, not '
                                             f'{member!r}')
            with archive.open(member) as source:
                return _copy_to_temp(source, root, member)
    except zipfile.BadZipFile as err:
        raise ModelStoreError(f'{zip_path} is not a valid zip archive: {err}') from err


def _copy_to_temp(source, root, member):
    # A partial copy must never be mistaken for the model file, so it is removed on failure.
    handle, path = tempfile.mkstemp(dir=root, prefix=member, suffix='.part')
    try:
        with os.fdopen(handle, 'wb') as target:
            shutil.copyfileobj(source, target)
    except BaseException:
        os.remove(path)
        raise
    return path


def purge(root=None):
    """Delete every downloaded ``.params`` file in `root` (default ``$MXNET_HOME/models``)."""
    root = _models_dir(root)
    if not os.path.isdir(root):
        return
    for name in os.listdir(root):
        if name.endswith('.params'):
            os.remove(os.path.join(root, name))
