"""Weight initializers (MXNet 1.x's ``mx.init``).

An initializer is called with a parameter's description (an :class:`InitDesc`: its name and
attributes) and the array to fill. It dispatches on the name as MXNet does: names ending in
``weight`` get the initializer's own pattern (``_init_weight``), ``bias`` and ``beta`` zeros,
``gamma`` ones, ``moving_mean`` zeros and ``moving_var`` ones. An ``__init__`` attribute (an
initializer or its ``dumps()`` text) overrides the name: Gluon passes a parameter's own
initializer that way.

Random initializers draw from Ember's random streams, so ``mx.random.seed`` makes them
reproducible.

>>> import numpy
>>> from ember import initializer
>>> bias = numpy.ones(3, dtype='float32')
>>> initializer.Xavier()(initializer.InitDesc('fc1_bias'), bias)
>>> bias
array([0., 0., 0.], dtype=float32)
>>> round(initializer.xavier_scale((64, 32, 3, 3), 'in', 3), 4)
0.1021
"""
from __future__ import annotations

import difflib
import json
import logging
import math
import re
import warnings

import numpy as np

from ember.base import prod, string_types
from ember.ndarray import io as nd_io
from ember.ndarray import random as nd_random
from ember.ndarray import NDArray
from ember.ndarray.io import load

__all__ = ['InitDesc', 'Initializer', 'Zero', 'One', 'Constant', 'Uniform', 'Normal',
           'Orthogonal', 'Xavier', 'MSRAPrelu', 'Bilinear', 'LSTMBias', 'FusedRNN', 'Mixed',
           'Load', 'register', 'alias', 'create', 'fan_in_out', 'xavier_scale', 'load', 'NDArray',
           'string_types']

_log = logging.getLogger(__name__)
_INITIALIZERS: dict[str, type] = {}


def register(klass):
    """Make an initializer class creatable by its lower-cased class name."""
    _INITIALIZERS[klass.__name__.lower()] = klass
    return klass


def alias(*names):
    """Make an initializer class creatable by more names as well."""
    def add(klass):
        for name in names:
            _INITIALIZERS[name.lower()] = klass
        return klass
    return add


class InitDesc(str):
    """A parameter's name, carrying its attributes and the global initializer.

    >>> desc = InitDesc('conv0_weight', {'__init__': '["zero", {}]'})
    >>> desc.endswith('weight'), desc.attrs['__init__']
    (True, '["zero", {}]')
    """

    def __new__(cls, name, attrs=None, global_init=None):
        desc = super().__new__(cls, name)
        desc.attrs = attrs or {}
        desc.global_init = global_init
        return desc


# Name suffix -> method, in the order MXNet tests them. The moving_* statistics of batch norm
# are here too: MXNet's graph attached them as __init__ attributes, Ember also matches names.
_BY_SUFFIX = (
    ('weight', '_init_weight'), ('bias', '_init_bias'), ('gamma', '_init_gamma'),
    ('beta', '_init_beta'), ('moving_mean', '_init_zero'), ('moving_var', '_init_one'),
    ('moving_inv_var', '_init_zero'), ('moving_avg', '_init_zero'),
    ('min', '_init_zero'), ('max', '_init_one'),
)


class Initializer:
    """Base class: dispatches on the parameter name; subclasses define ``_init_weight``."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs
        self._verbose = False
        self._print_func = None

    def set_verbosity(self, verbose=False, print_func=None):
        """Log each initialized array with ``print_func(arr)`` (default: its RMS value)."""
        self._verbose = verbose
        self._print_func = print_func or _root_mean_square
        return self

    def dumps(self):
        """The JSON text ``create`` rebuilds this initializer from.

        >>> Uniform(0.1).dumps()
        '["uniform", {"scale": 0.1}]'
        """
        return json.dumps([self.__class__.__name__.lower(), self._kwargs])

    def __call__(self, desc, arr):
        if not isinstance(desc, InitDesc):
            self._legacy_init(desc, arr)
            return
        if desc.global_init is None:
            desc.global_init = self
        init = desc.attrs.get('__init__', '')
        if init:
            create(init)._init_weight(desc, arr)
            self._verbose_print(desc, init, arr)
            return
        kind, method = self._dispatch(desc)
        method(desc, arr)
        self._verbose_print(desc, kind, arr)

    def _dispatch(self, name):
        for suffix, method in _BY_SUFFIX:
            if name.endswith(suffix):
                return suffix, getattr(self, method)
        return 'default', self._init_default

    def _legacy_init(self, name, arr):
        warnings.warn('Calling an initializer with (str, NDArray) is deprecated; use '
                      'init(mx.init.InitDesc(name), arr)', DeprecationWarning, stacklevel=3)
        if not isinstance(name, str):
            raise TypeError(f'name {name!r}: expected a string or an InitDesc')
        if name.startswith('upsampling'):
            self._init_bilinear(name, arr)
        elif name.startswith('stn_loc') and name.endswith('weight'):
            self._init_zero(name, arr)
        elif name.startswith('stn_loc') and name.endswith('bias'):
            self._init_loc_bias(name, arr)
        else:
            self._dispatch(name)[1](name, arr)

    def _verbose_print(self, desc, init, arr):
        if self._verbose and self._print_func:
            _log.info('Initialized %s as %s: %s', desc, init, self._print_func(arr))

    def _init_bilinear(self, _, arr):
        arr[:] = _bilinear_kernel(arr.shape)

    def _init_loc_bias(self, _, arr):
        if arr.shape[0] != 6:
            raise ValueError(f'stn_loc bias of shape {arr.shape}: expected 6 values')
        arr[:] = np.array([1.0, 0, 0, 0, 1.0, 0])

    def _init_zero(self, _, arr):
        arr[:] = 0.0

    def _init_one(self, _, arr):
        arr[:] = 1.0

    def _init_bias(self, _, arr):
        arr[:] = 0.0

    def _init_gamma(self, _, arr):
        arr[:] = 1.0

    def _init_beta(self, _, arr):
        arr[:] = 0.0

    def _init_weight(self, name, arr):
        raise NotImplementedError(f'{type(self).__name__} must define _init_weight')

    def _init_default(self, name, _):
        raise ValueError(f'Unknown initialization pattern for {name}. Default initialization '
                         'is limited to names ending in "weight", "bias", "gamma" (1.0), "beta" '
                         '(0.0) and the moving_mean/moving_var statistics; give the parameter '
                         'its own initializer (init=mx.init.*)')


def _root_mean_square(arr):
    values = _as_numpy(arr).astype(np.float64)
    return str(float(np.linalg.norm(values) / math.sqrt(max(values.size, 1))))


def _as_numpy(arr):
    return arr.asnumpy() if hasattr(arr, 'asnumpy') else np.asarray(arr)


# ----------------------------------------------------------------------------------------------
# Random draws from Ember's streams.

def _fill(kind, arr, a, b):
    """Fill arr with mx.nd.random.<kind>(a, b): drawn on its device, in its dtype."""
    draw = getattr(nd_random, kind)
    dtype = np.dtype(arr.dtype).name
    if hasattr(arr, 'asnumpy'):
        draw(a, b, shape=tuple(arr.shape), dtype=dtype, out=arr)
    else:
        # A NumPy array (a host-side buffer): draw on the CPU stream and copy.
        arr[:] = draw(a, b, shape=tuple(arr.shape), dtype=dtype).asnumpy()


# ----------------------------------------------------------------------------------------------
# Shape arithmetic, kept pure so it can be checked on its own.

def fan_in_out(shape):
    """(fan_in, fan_out) of a weight of ``shape``, counting the kernel's spatial size in both.

    >>> fan_in_out((64, 32, 3, 3))
    (288, 576)
    """
    if len(shape) < 2:
        raise ValueError(f'a weight of shape {tuple(shape)} has no fan-in and fan-out: '
                         'expected at least 2 dimensions')
    receptive_field = prod(shape[2:])
    return shape[1] * receptive_field, shape[0] * receptive_field


FACTOR_TYPES = ('avg', 'in', 'out')


def xavier_scale(shape, factor_type='avg', magnitude=3):
    """sqrt(magnitude / factor): the bound (uniform) or deviation (gaussian) Xavier uses."""
    fan_in, fan_out = fan_in_out(shape)
    factors = {'avg': (fan_in + fan_out) / 2.0, 'in': fan_in, 'out': fan_out}
    if factor_type not in factors:
        raise ValueError(f'factor_type={factor_type!r}: expected one of {FACTOR_TYPES}')
    return math.sqrt(magnitude / factors[factor_type])


def _bilinear_kernel(shape):
    """Weights of a bilinear upsampling filter (MXNet's _init_bilinear)."""
    width, height = shape[3], shape[2]
    f = math.ceil(width / 2.0)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    x = np.arange(width) / f - c
    y = np.arange(height) / f - c
    kernel = np.outer(1 - np.abs(y), 1 - np.abs(x)).astype(np.float32)
    return np.broadcast_to(kernel, shape)


# ----------------------------------------------------------------------------------------------
# Initializers.

@register
@alias('zeros')
class Zero(Initializer):
    """Fill with 0."""

    def _init_weight(self, _, arr):
        arr[:] = 0


@register
@alias('ones')
class One(Initializer):
    """Fill with 1."""

    def _init_weight(self, _, arr):
        arr[:] = 1


@register
class Constant(Initializer):
    """Fill with ``value``: a number, or an array broadcast to the parameter's shape.

    >>> weight = np.zeros(2)
    >>> Constant(0.5)(InitDesc('w_weight'), weight); weight
    array([0.5, 0.5])
    """

    def __init__(self, value):
        super().__init__(value=value)
        self.value = value

    def _init_weight(self, _, arr):
        arr[:] = self.value

    def dumps(self):
        value = self._kwargs['value']
        if not np.isscalar(value):
            self._kwargs['value'] = _as_numpy(value).tolist()
        return super().dumps()


@register
class Uniform(Initializer):
    """Uniform in [-scale, scale]."""

    def __init__(self, scale=0.07):
        super().__init__(scale=scale)
        self.scale = scale

    def _init_weight(self, _, arr):
        _fill('uniform', arr, -self.scale, self.scale)


@register
class Normal(Initializer):
    """Normal with mean 0 and standard deviation ``sigma``."""

    def __init__(self, sigma=0.01):
        super().__init__(sigma=sigma)
        self.sigma = sigma

    def _init_weight(self, _, arr):
        _fill('normal', arr, 0, self.sigma)


@register
class Orthogonal(Initializer):
    """``scale`` times an orthogonal matrix from the SVD of a random one (Saxe et al., 2013)."""

    def __init__(self, scale=1.414, rand_type='uniform'):
        super().__init__(scale=scale, rand_type=rand_type)
        if rand_type not in ('uniform', 'normal'):
            raise ValueError(f"rand_type={rand_type!r}: expected 'uniform' or 'normal'")
        self.scale = scale
        self.rand_type = rand_type

    def _init_weight(self, _, arr):
        rows = arr.shape[0]
        matrix = np.empty((rows, prod(arr.shape[1:])), dtype=np.float32)
        if self.rand_type == 'uniform':
            _fill('uniform', matrix, -1.0, 1.0)
        else:
            _fill('normal', matrix, 0.0, 1.0)
        u, _, v = np.linalg.svd(matrix, full_matrices=False)
        orthogonal = u if u.shape == matrix.shape else v
        arr[:] = (self.scale * orthogonal).reshape(arr.shape)


@register
class Xavier(Initializer):
    """Xavier/Glorot: uniform in [-s, s] or normal with deviation s, s = sqrt(magnitude /
    factor), the factor being the average of fan-in and fan-out, or either one.

    >>> round(xavier_scale((10, 20), 'avg', magnitude=3), 4)
    0.4472
    """

    def __init__(self, rnd_type='uniform', factor_type='avg', magnitude=3):
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        if rnd_type not in ('uniform', 'gaussian'):
            raise ValueError(f"rnd_type={rnd_type!r}: expected 'uniform' or 'gaussian'")
        if factor_type not in FACTOR_TYPES:
            raise ValueError(f'factor_type={factor_type!r}: expected one of {FACTOR_TYPES}')
        self.rnd_type = rnd_type
        self.factor_type = factor_type
        self.magnitude = float(magnitude)

    def _init_weight(self, name, arr):
        if len(arr.shape) < 2:
            raise ValueError(f'Xavier initializer cannot be applied to vector {name} of shape '
                             f'{tuple(arr.shape)}: it requires at least 2 dimensions')
        scale = xavier_scale(arr.shape, self.factor_type, self.magnitude)
        if self.rnd_type == 'uniform':
            _fill('uniform', arr, -scale, scale)
        else:
            _fill('normal', arr, 0, scale)


@register
class MSRAPrelu(Xavier):
    """He/MSRA for PReLU with negative ``slope``: gaussian Xavier with magnitude
    2 / (1 + slope^2)."""

    def __init__(self, factor_type='avg', slope=0.25):
        super().__init__('gaussian', factor_type, 2.0 / (1 + slope ** 2))
        self._kwargs = {'factor_type': factor_type, 'slope': slope}


@register
class Bilinear(Initializer):
    """A bilinear upsampling kernel (for Deconvolution weights)."""

    def _init_weight(self, _, arr):
        arr[:] = _bilinear_kernel(arr.shape)


@register
class LSTMBias(Initializer):
    """Zeros, except ``forget_bias`` for the forget gate (the second of four gates)."""

    def __init__(self, forget_bias=1.0):
        super().__init__(forget_bias=forget_bias)
        self.forget_bias = forget_bias

    def _init_weight(self, name, arr):
        arr[:] = 0.0
        num_hidden = int(arr.shape[0] / 4)
        arr[num_hidden:2 * num_hidden] = self.forget_bias


# Gates of a fused RNN layer, in the order of the packed parameters, as MXNet names them.
_FUSED_GATES = {'rnn_relu': ('',), 'rnn_tanh': ('',), 'lstm': ('_i', '_f', '_c', '_o'),
                'gru': ('_r', '_z', '_o')}


def fused_rnn_pieces(size, num_hidden, num_layers, mode, bidirectional):
    """(name, start, shape) of every gate's weight and bias in the packed parameter vector of
    a fused RNN layer of `size` values (input size worked out from it): weights layer by
    layer and direction by direction (input-to-hidden, then hidden-to-hidden), then biases in
    the same order, each split by gate (MXNet's FusedRNNCell names: ``l0_i2h_f_weight``).

    >>> [name for name, _, _ in fused_rnn_pieces(12, 1, 1, 'gru', False)][:4]
    ['l0_i2h_r_weight', 'l0_i2h_z_weight', 'l0_i2h_o_weight', 'l0_h2h_r_weight']
    """
    gates, directions = _FUSED_GATES[mode], ('l', 'r') if bidirectional else ('l',)
    rows = len(gates) * num_hidden
    deeper = (num_layers - 1) * len(directions) * rows * (len(directions) * num_hidden +
                                                           num_hidden + 2)
    input_size = (size - deeper) // (len(directions) * rows) - num_hidden - 2
    pieces, start = [], 0
    for kind in ('weight', 'bias'):
        for layer in range(num_layers):
            width = input_size if layer == 0 else len(directions) * num_hidden
            for direction in directions:
                for link, columns in (('i2h', width), ('h2h', num_hidden)):
                    for gate in gates:
                        shape = (num_hidden, columns) if kind == 'weight' else (num_hidden,)
                        pieces.append((f'{direction}{layer}_{link}{gate}_{kind}', start, shape))
                        start += prod(shape)
    if start != size:
        raise ValueError(f'FusedRNN: {size} parameters do not fit {num_layers} {mode} layers '
                         f'of {num_hidden} units (bidirectional={bidirectional})')
    return pieces


@register
class FusedRNN(Initializer):
    """Initializes the packed parameters of a fused RNN layer gate by gate: each gate's weight
    and bias with `init` (the global initializer when None; biases follow its bias rule),
    LSTM forget-gate biases with `forget_bias`, as MXNet does for ``rnn.FusedRNNCell``.

    >>> init = FusedRNN(Constant(0.5), num_hidden=1, num_layers=1, mode='lstm', forget_bias=2.0)
    >>> params = np.zeros(16)
    >>> init._init_weight(InitDesc('parameters'), params)
    >>> params.tolist()[:8], params.tolist()[8:]
    ([0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], [0.0, 2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0])
    """

    def __init__(self, init, num_hidden, num_layers, mode, bidirectional=False, forget_bias=1.0):
        if isinstance(init, str):
            init = create(init)
        super().__init__(init=init.dumps() if init is not None else None, num_hidden=num_hidden,
                         num_layers=num_layers, mode=mode, bidirectional=bidirectional,
                         forget_bias=forget_bias)
        self._init = init
        self._layout = (num_hidden, num_layers, mode, bidirectional)
        self._mode = mode
        self._forget_bias = forget_bias

    def _init_weight(self, desc, arr):
        values = np.array(_as_numpy(arr), dtype=np.float64).reshape(-1)
        for name, start, shape in fused_rnn_pieces(values.size, *self._layout):
            piece = np.zeros(shape)
            if self._mode == 'lstm' and name.endswith('_f_bias'):
                piece[:] = self._forget_bias
            else:
                global_init = getattr(desc, 'global_init', None)
                init = self._init or global_init
                if init is None:
                    raise ValueError(f'FusedRNN: no initializer for {name}: give init or '
                                     'initialize through a global initializer')
                init(InitDesc(name, global_init=global_init), piece)
            values[start:start + piece.size] = piece.reshape(-1)
        arr[:] = values.reshape(arr.shape)


@register
class Mixed:
    """The initializer of the first regular expression that matches the name.

    >>> init = Mixed(['.*bias', '.*'], [Zero(), One()])
    >>> weight = np.zeros(2)
    >>> init(InitDesc('fc_weight'), weight); weight
    array([1., 1.])
    """

    def __init__(self, patterns, initializers):
        if len(patterns) != len(initializers):
            raise ValueError(f'{len(patterns)} patterns for {len(initializers)} initializers: '
                             'expected one initializer per pattern')
        self.map = list(zip([re.compile(p) for p in patterns],
                            [create(i) for i in initializers]))

    def __call__(self, name, arr):
        for pattern, init in self.map:
            if pattern.match(name):
                init(name, arr)
                return
        raise ValueError(f'Parameter name {name} did not match any pattern. Consider adding a '
                         '".*" pattern at the end with a default Initializer.')


@register
class Load:
    """Values from a saved parameter dict (or a ``.params`` file); ``default_init`` for others.

    >>> init = Load({'arg:fc_weight': np.ones(2)}, default_init=Zero())
    >>> weight, bias = np.zeros(2), np.ones(2)
    >>> init(InitDesc('fc_weight'), weight); init(InitDesc('fc_bias'), bias); weight, bias
    (array([1., 1.]), array([0., 0.]))
    """

    def __init__(self, param, default_init=None, verbose=False):
        if isinstance(param, str):
            param = nd_io.load(param)
        if not isinstance(param, dict):
            raise TypeError(f'param of type {type(param).__name__}: expected a dict of arrays '
                            'or the path of a saved dict')
        # 'arg:' and 'aux:' prefixes of Module checkpoints name the same parameters.
        self.param = {_strip_prefix(name): value for name, value in param.items()}
        self.default_init = default_init
        self.verbose = verbose

    def __call__(self, name, arr):
        if name in self.param:
            self._copy(name, arr)
        elif self.default_init is None:
            raise ValueError(f'Cannot initialize {name}: it is not in the loaded parameters '
                             'and no default initializer was given')
        else:
            self.default_init(name, arr)
            if self.verbose:
                _log.info('Initialized %s by default', name)

    def _copy(self, name, arr):
        value = self.param[name]
        if tuple(arr.shape) != tuple(value.shape):
            raise ValueError(f'Parameter {name} cannot be initialized from loading: shape '
                             f'mismatch, target {tuple(arr.shape)} vs loaded '
                             f'{tuple(value.shape)}')
        arr[:] = value
        if self.verbose:
            _log.info('Initialized %s by loading', name)


def _strip_prefix(name):
    return name[4:] if name.startswith(('arg:', 'aux:')) else name


def create(init, *args, **kwargs):
    """An initializer from an instance (returned as is), a name, a ``dumps()`` text or a dict.

    >>> create('xavier', magnitude=2).magnitude
    2.0
    >>> create(Normal(0.5).dumps()).sigma
    0.5
    """
    if isinstance(init, (Initializer, Mixed, Load)):
        if args or kwargs:
            raise TypeError(f'create({init!r}) takes no arguments for an initializer instance')
        return init
    if isinstance(init, dict):
        config = dict(init, **kwargs)
        return create(config.pop('initializer'), *args, **config)
    if not isinstance(init, str):
        raise TypeError(f'initializer {init!r}: expected an Initializer, a name or its '
                        'dumps() text')
    if init.startswith('['):
        name, json_kwargs = json.loads(init)
        # straight to the class: its arguments may include one named `init` (FusedRNN)
        return _lookup(name)(*args, **dict(json_kwargs, **kwargs))
    return _lookup(init)(*args, **kwargs)


def _lookup(name):
    try:
        return _INITIALIZERS[name.lower()]
    except KeyError:
        close = difflib.get_close_matches(name.lower(), list(_INITIALIZERS), n=1)
        hint = f'; did you mean {close[0]!r}?' if close else ''
        raise ValueError(f'initializer {name!r} is not registered; known initializers: '
                         f'{", ".join(sorted(_INITIALIZERS))}{hint}') from None
