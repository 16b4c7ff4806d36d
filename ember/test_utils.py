"""Helpers for testing programs and operators, as MXNet's ``mx.test_utils``.

Comparisons take NDArrays or NumPy arrays and choose tolerances from the dtypes compared;
gradient checks compare ``mx.autograd`` against central finite differences; configuration
changes for a block go through :func:`ember.config.override`, never the process environment.

MXNet's ``check_numeric_gradient`` and ``check_symbolic_forward/backward`` take a Symbol. Until
``mx.sym`` exists they take a function of NDArrays instead; Symbol support arrives with it.

>>> import numpy as np
>>> import ember as mx
>>> from ember.test_utils import assert_almost_equal, check_numeric_gradient
>>> assert_almost_equal(mx.nd.array([1.0, 2.0]), np.array([1.0, 2.00001]))
>>> check_numeric_gradient(lambda x: mx.nd.sin(x) * x, [np.array([0.5, 1.5])],
...                        dtype=np.float64, rtol=1e-5, numeric_eps=1e-6)
"""
from __future__ import annotations

import functools
import numbers

import numpy as np

from ember import autograd, config, device
from ember import ndarray as nd
from ember.ndarray import NDArray

__all__ = ['default_context', 'set_default_context', 'default_dtype', 'default_rtols',
           'default_atols', 'get_rtol', 'get_atol', 'get_tols', 'almost_equal',
           'assert_almost_equal', 'assert_allclose', 'same', 'rand_shape_2d', 'rand_shape_3d',
           'rand_shape_nd', 'rand_ndarray', 'random_arrays', 'np_reduce',
           'check_numeric_gradient', 'numeric_grad', 'check_symbolic_forward',
           'check_symbolic_backward', 'environment', 'assert_exception', 'retry']


# ----------------------------------------------------------------------------------------------
# Devices and dtypes

def default_context():
    """The device tests run on: the current default device.

    >>> default_context()
    cpu(0)
    """
    return device.current_device()


def set_default_context(ctx) -> None:
    """Make `ctx` the default device of this thread (``with ctx:`` restores it afterwards and
    is what tests should prefer).

    >>> import ember as mx
    >>> before = default_context()
    >>> set_default_context(mx.cpu(1)); default_context()
    cpu(1)
    >>> set_default_context(before)
    """
    if not isinstance(ctx, device.Device):
        raise TypeError(f'set_default_context: expected a device such as mx.cpu(0), got {ctx!r}')
    device.set_current_device(ctx)


def default_dtype():
    """The dtype test data is drawn in (float32)."""
    return np.float32


# ----------------------------------------------------------------------------------------------
# Tolerances and comparisons

_EXACT = (np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
          np.uint64)


def default_rtols() -> dict:
    """Relative tolerance per dtype, as MXNet's."""
    found = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4,
             np.dtype(np.float64): 1e-5}
    found.update({np.dtype(t): 0 for t in _EXACT})
    return found


def default_atols() -> dict:
    """Absolute tolerance per dtype, as MXNet's."""
    found = {np.dtype(np.float16): 1e-1, np.dtype(np.float32): 1e-3,
             np.dtype(np.float64): 1e-20}
    found.update({np.dtype(t): 0 for t in _EXACT})
    return found


def _dtype_of_data(value) -> np.dtype:
    if isinstance(value, NDArray):
        return np.dtype(value.dtype)
    if isinstance(value, np.ndarray | np.generic):
        return value.dtype
    return np.asarray(value).dtype


def _default_tol(value, table) -> float:
    # bfloat16 and other exotic types: compare like float16
    return table.get(_dtype_of_data(value), table[np.dtype(np.float16)])


def get_rtol(rtol=None, dtype=np.float32) -> float:
    """`rtol`, or the default relative tolerance of `dtype`."""
    return default_rtols()[np.dtype(dtype)] if rtol is None else rtol


def get_atol(atol=None, dtype=np.float32) -> float:
    """`atol`, or the default absolute tolerance of `dtype`."""
    return default_atols()[np.dtype(dtype)] if atol is None else atol


def get_tols(x, y, rtol=None, atol=None) -> tuple:
    """(rtol, atol) for comparing `x` with `y`: the given values, else the looser default of
    the two dtypes.

    >>> get_tols(np.float16(1), np.float32(1))
    (0.01, 0.1)
    """
    if rtol is None:
        rtol = max(_default_tol(x, default_rtols()), _default_tol(y, default_rtols()))
    if atol is None:
        atol = max(_default_tol(x, default_atols()), _default_tol(y, default_atols()))
    return rtol, atol


def _host(value) -> np.ndarray:
    if isinstance(value, NDArray):
        return value.asnumpy()
    return np.asarray(value)


def almost_equal(a, b, rtol=None, atol=None, equal_nan=False) -> bool:
    """Whether ``|a - b| <= atol + rtol * |b|`` everywhere (NDArrays or NumPy arrays).

    >>> almost_equal(np.array([1.0]), np.array([1.0 + 1e-6])), almost_equal([1.0], [1.1])
    (True, False)
    """
    rtol, atol = get_tols(a, b, rtol, atol)
    return bool(np.allclose(_host(a), _host(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def assert_almost_equal(a, b, rtol=None, atol=None, names=('a', 'b'), equal_nan=False) -> None:
    """Raise AssertionError unless ``|a - b| <= atol + rtol * |b|`` everywhere; the message
    names the worst element, both values there and the share of elements out of tolerance.

    >>> assert_almost_equal(np.array([1.0, 2.0]), np.array([1.0, 2.5]), names=('got', 'want'))
    Traceback (most recent call last):
    ...
    AssertionError: got and want differ at (1,): 2.0 vs 2.5 (error 0.5 > tolerance 2.5e-05...
    """
    rtol, atol = get_tols(a, b, rtol, atol)
    got, want = _host(a), _host(b)
    if got.shape != want.shape:
        raise AssertionError(f'{names[0]} has shape {got.shape} but {names[1]} has shape '
                             f'{want.shape}')
    if np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=equal_nan):
        return
    raise AssertionError(_violation_text(got, want, rtol, atol, names, equal_nan))


def _violation_text(got, want, rtol, atol, names, equal_nan):
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    error = np.abs(wide_got - wide_want)
    tolerance = atol + rtol * np.abs(wide_want)
    bad = ~np.isclose(wide_got, wide_want, rtol=rtol, atol=atol, equal_nan=equal_nan)
    excess = np.where(bad, np.nan_to_num(error - tolerance, nan=np.inf), -np.inf)
    index = np.unravel_index(int(np.argmax(excess)), got.shape) if got.ndim else ()
    share = 100.0 * bad.sum() / max(bad.size, 1)
    values = f'{float(wide_got[index])!r} vs {float(wide_want[index])!r}'
    return (f'{names[0]} and {names[1]} differ at {tuple(int(i) for i in index)}: {values} '
            f'(error {error[index]:.6g} > tolerance {tolerance[index]:.6g}; rtol={rtol:g}, '
            f'atol={atol:g}); {share:.1f}% of {bad.size} elements out of tolerance')


def assert_allclose(actual, desired, rtol=1e-7, atol=0, equal_nan=True, err_msg='') -> None:
    """``numpy.testing.assert_allclose`` that also takes NDArrays.

    >>> import ember as mx
    >>> assert_allclose(mx.nd.array([1, 2]), [1, 2])
    """
    np.testing.assert_allclose(_host(actual), _host(desired), rtol=rtol, atol=atol,
                               equal_nan=equal_nan, err_msg=err_msg)


def same(a, b) -> bool:
    """Whether `a` and `b` have the same shape and exactly the same values.

    >>> same(np.array([1, 2]), np.array([1, 2])), same(np.array([1]), np.array([1, 1]))
    (True, False)
    """
    return bool(np.array_equal(_host(a), _host(b)))


# ----------------------------------------------------------------------------------------------
# Random shapes and data (drawn from NumPy's global generator, as in MXNet)

def _low(allow_zero_size):
    return 0 if allow_zero_size else 1


def rand_shape_2d(dim0=10, dim1=10, allow_zero_size=False) -> tuple:
    """A random 2-D shape with sides up to `dim0` and `dim1`.

    >>> all(1 <= n <= 4 for n in rand_shape_2d(4, 4))
    True
    """
    low = _low(allow_zero_size)
    return np.random.randint(low, dim0 + 1), np.random.randint(low, dim1 + 1)


def rand_shape_3d(dim0=10, dim1=10, dim2=10, allow_zero_size=False) -> tuple:
    """A random 3-D shape with sides up to `dim0`, `dim1` and `dim2`."""
    low = _low(allow_zero_size)
    return (np.random.randint(low, dim0 + 1), np.random.randint(low, dim1 + 1),
            np.random.randint(low, dim2 + 1))


def rand_shape_nd(num_dim, dim=10, allow_zero_size=False) -> tuple:
    """A random shape of `num_dim` axes, each up to `dim` long.

    >>> len(rand_shape_nd(5, 2))
    5
    """
    return tuple(int(n) for n in np.random.randint(_low(allow_zero_size), dim + 1,
                                                      size=num_dim))


def random_arrays(*shapes):
    """Standard-normal NumPy arrays of the given shapes in the default dtype (one array for one
    shape, else a list).

    >>> a, b = random_arrays((2, 3), (4,))
    >>> a.shape, b.shape, a.dtype
    ((2, 3), (4,), dtype('float32'))
    """
    arrays = [np.array(np.random.randn(), dtype=default_dtype()) if len(shape) == 0
              else np.random.randn(*shape).astype(default_dtype()) for shape in shapes]
    return arrays[0] if len(arrays) == 1 else arrays


def rand_ndarray(shape, stype='default', density=None, dtype=None, ctx=None):
    """An NDArray of standard-normal values, or for 'csr' and 'row_sparse' a sparse array
    storing a fraction `density` (random when None, as in MXNet) of its entries or rows,
    uniform in [0, 1).

    >>> rand_ndarray((2, 2), dtype='float64').dtype
    <class 'numpy.float64'>
    >>> rand_ndarray((100, 3), 'row_sparse', density=0.1).stype
    'row_sparse'
    """
    if stype == 'default':
        return nd.array(random_arrays(tuple(shape)), ctx=ctx, dtype=dtype or default_dtype())
    density = np.random.rand() if density is None else density
    dtype = dtype or default_dtype()
    if stype == 'row_sparse':
        rows = np.flatnonzero(np.random.rand(shape[0]) < density)
        values = np.random.uniform(size=(rows.size,) + tuple(shape[1:]))
        return nd.sparse.row_sparse_array((values, rows), shape=shape, ctx=ctx, dtype=dtype)
    import scipy.sparse
    matrix = scipy.sparse.random(shape[0], shape[1], density, format='csr', dtype=np.float64)
    return nd.sparse.csr_matrix(matrix, ctx=ctx, dtype=dtype)


def np_reduce(dat, axis, keepdims, numpy_reduce_func):
    """Reduce `dat` over `axis` (an int, a sequence or None for all) one axis at a time with
    `numpy_reduce_func` (e.g. ``np.sum``): a reference for reduction operators.

    >>> np_reduce(np.ones((2, 3, 4)), (0, 2), True, np.sum).shape
    (1, 3, 1)
    """
    if isinstance(axis, int):
        axis = [axis]
    else:
        axis = list(axis) if axis is not None else list(range(len(dat.shape)))
    result = dat
    for index in reversed(sorted(a % dat.ndim for a in axis)):
        result = numpy_reduce_func(result, axis=index)
    if keepdims:
        shape = list(dat.shape)
        for index in axis:
            shape[index] = 1
        result = result.reshape(tuple(shape))
    return result


# ----------------------------------------------------------------------------------------------
# Gradient and forward checks over functions of NDArrays

def _as_function(sym):
    if hasattr(sym, 'list_arguments'):
        raise TypeError('Symbol arguments are supported once mx.sym exists; pass a function of '
                        'NDArrays (e.g. lambda x, w: mx.nd.dot(x, w)) instead')
    if not callable(sym):
        raise TypeError(f'expected a function of NDArrays, got {type(sym).__name__}')
    return sym


class _Arguments:
    """The named host values a function is called with: `location` first, then `aux_states`.

    A list is passed positionally (names are the indices), a dict by keyword."""

    def __init__(self, location, aux_states, dtype):
        self.by_keyword = isinstance(location, dict)
        self.names, self.values = self._split(location, dtype)
        if aux_states is not None and isinstance(aux_states, dict) != self.by_keyword:
            raise TypeError('location and aux_states must both be lists or both be dicts')
        self.aux_names, self.aux_values = self._split(aux_states or (), dtype)

    @staticmethod
    def _split(values, dtype):
        if isinstance(values, dict):
            names = list(values)
            values = [values[n] for n in names]
        else:
            values = list(values)
            names = list(range(len(values)))
        return names, [np.array(_host(v), dtype=dtype) for v in values]

    def arrays(self, ctx, values=None):
        values = self.values if values is None else values
        return ([nd.array(v, ctx=ctx, dtype=v.dtype) for v in values],
                [nd.array(v, ctx=ctx, dtype=v.dtype) for v in self.aux_values])

    def call(self, fn, arrays, aux_arrays):
        if self.by_keyword:
            kwargs = dict(zip(self.names, arrays))
            kwargs.update(zip(self.aux_names, aux_arrays))
            return _output_list(fn(**kwargs))
        return _output_list(fn(*arrays, *aux_arrays))

    def index_of(self, node):
        if node not in self.names:
            raise KeyError(f'grad_nodes names {node!r}, which is not an argument; arguments '
                           f'are {self.names}')
        return self.names.index(node)


def _output_list(result):
    if isinstance(result, NDArray):
        return [result]
    if isinstance(result, (list, tuple)) and all(isinstance(r, NDArray) for r in result):
        return list(result)
    raise TypeError(f'the checked function must return an NDArray or a list of NDArrays, got '
                    f'{type(result).__name__}')


def _grad_indices(args, grad_nodes):
    if grad_nodes is None:
        return list(range(len(args.names)))
    if isinstance(grad_nodes, dict):
        grad_nodes = [name for name, req in grad_nodes.items() if req != 'null']
    return [args.index_of(node) for node in grad_nodes]


def _projection(outputs, dtype):
    """Random weights of a linear functional of the outputs (MXNet's random projection), with
    random signs so that errors of opposite sign in two outputs cannot cancel."""
    weights = []
    for out in outputs:
        magnitude = np.random.uniform(0.1, 1.1, out.shape)
        sign = np.random.choice([-1.0, 1.0], out.shape)
        weights.append((magnitude * sign).astype(dtype))
    return weights


def numeric_grad(fn, values, index, eps, projection=None):
    """Central finite differences of ``sum(projection_i * fn(values)_i)`` with respect to
    ``values[index]``; `fn` maps the list of host arrays to a list of host arrays (weights of
    one when `projection` is None).

    >>> numeric_grad(lambda v: [v[0] ** 2], [np.array([1.0, 3.0])], 0, 1e-4).tolist()
    [2.0..., 6.0...]
    """
    def functional(current):
        outputs = fn(current)
        weights = projection or [np.ones_like(o) for o in outputs]
        return sum(float(np.sum(np.asarray(o, np.float64) * w)) for o, w in zip(outputs, weights))

    values = [np.array(v) for v in values]
    target = values[index]
    grad = np.zeros(target.shape, np.float64)
    flat_target, flat_grad = target.reshape(-1), grad.reshape(-1)
    for i in range(flat_target.size):
        original = flat_target[i]
        flat_target[i] = original + eps
        plus = functional(values)
        flat_target[i] = original - eps
        minus = functional(values)
        flat_target[i] = original
        flat_grad[i] = (plus - minus) / (2 * eps)
    return grad


def check_numeric_gradient(sym, location, aux_states=None, numeric_eps=1e-3, rtol=1e-2,
                           atol=None, grad_nodes=None, use_forward_train=True, ctx=None,
                           grad_stype_dict=None, dtype=np.float32):
    """Check the autograd gradient of `sym` against central finite differences.

    `sym` is a function of NDArrays returning an NDArray or a list of them; `location` holds
    its arguments (a list, passed positionally, or a dict, passed by keyword) and `aux_states`
    further arguments that are not differentiated. The gradient of a random linear functional
    of every output is compared for the arguments named in `grad_nodes` (indices or names;
    all by default), computed in `dtype`. Raises AssertionError naming the argument that
    differs.

    >>> import ember as mx
    >>> w = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> check_numeric_gradient(lambda x, w: mx.nd.dot(x, w), {'x': np.ones((1, 2)), 'w': w},
    ...                        dtype=np.float64, rtol=1e-6, numeric_eps=1e-6)
    >>> check_numeric_gradient(lambda x: mx.nd.BlockGrad(x) * x, [np.array([2.0])])
    Traceback (most recent call last):
    ...
    AssertionError: NUMERICAL_0 and BACKWARD_0 differ at (0,): ...
    """
    if grad_stype_dict:
        raise ValueError('check_numeric_gradient: grad_stype_dict: only dense gradients exist')
    fn, ctx = _as_function(sym), ctx or default_context()
    args = _Arguments(location, aux_states, dtype)
    indices = _grad_indices(args, grad_nodes)
    analytic, projection = _autograd_grads(fn, args, indices, use_forward_train, ctx, dtype)

    def host_outputs(values):
        arrays, aux_arrays = args.arrays(ctx, values)
        with autograd.pause(train_mode=use_forward_train):
            return [o.asnumpy() for o in args.call(fn, arrays, aux_arrays)]

    for index, computed in zip(indices, analytic):
        numeric = numeric_grad(host_outputs, args.values, index, numeric_eps, projection)
        name = args.names[index]
        assert_almost_equal(numeric.astype(dtype), computed, rtol, atol,
                            names=(f'NUMERICAL_{name}', f'BACKWARD_{name}'))


def _autograd_grads(fn, args, indices, train, ctx, dtype):
    arrays, aux_arrays = args.arrays(ctx)
    for index in indices:
        arrays[index].attach_grad()
    with autograd.record(train_mode=train):
        outputs = args.call(fn, arrays, aux_arrays)
    projection = _projection(outputs, dtype)
    heads = [nd.array(p, ctx=ctx, dtype=o.dtype) for p, o in zip(projection, outputs)]
    autograd.backward(outputs, heads, train_mode=train)
    return [arrays[i].grad.asnumpy() for i in indices], projection


def _expected_list(expected, names, what):
    if isinstance(expected, dict):
        missing = [n for n in expected if n not in names]
        if missing:
            raise KeyError(f'{what} names {missing}, which are not among {names}')
        return [(names.index(n), v) for n, v in expected.items()]
    return list(enumerate(expected))


def check_symbolic_forward(sym, location, expected, rtol=None, atol=None, aux_states=None,
                           ctx=None, equal_nan=False, dtype=np.float32):
    """Run `sym` (a function of NDArrays) in prediction mode on `location` and compare its
    outputs with `expected` (a list, one array per output). Returns the outputs as NumPy.

    >>> import ember as mx
    >>> check_symbolic_forward(lambda x: x * 2, [np.array([1.0, 2.0])], [np.array([2.0, 4.0])])
    [array([2., 4.], dtype=float32)]
    """
    fn, ctx = _as_function(sym), ctx or default_context()
    args = _Arguments(location, aux_states, dtype)
    with autograd.predict_mode():
        outputs = [o.asnumpy() for o in args.call(fn, *args.arrays(ctx))]
    names = [f'output{i}' for i in range(len(outputs))]
    for index, want in _expected_list(expected, names, 'expected'):
        assert_almost_equal(outputs[index], want, rtol, atol, equal_nan=equal_nan,
                            names=(f'EXPECTED_{names[index]}', f'FORWARD_{names[index]}'))
    return outputs


def check_symbolic_backward(sym, location, out_grads, expected, rtol=None, atol=None,
                            aux_states=None, grad_req='write', ctx=None, grad_stypes=None,
                            equal_nan=False, dtype=np.float32):
    """Run `sym` forward in training mode, backward with head gradients `out_grads`, and
    compare the arguments' gradients with `expected` (a list per argument, or a dict by
    argument name; None skips one). With grad_req='add' the gradients start from random values
    that the check adds to `expected`. Returns the gradients as NumPy.

    >>> import ember as mx
    >>> grads = check_symbolic_backward(lambda x: x * x, [np.array([3.0])], [np.array([1.0])],
    ...                                 [np.array([6.0])])
    >>> grads[0].tolist()
    [6.0]
    """
    if grad_stypes:
        raise ValueError('check_symbolic_backward: grad_stypes: only dense gradients exist')
    fn, ctx = _as_function(sym), ctx or default_context()
    args = _Arguments(location, aux_states, dtype)
    arrays, aux_arrays = args.arrays(ctx)
    reqs = _grad_reqs(grad_req, args.names)
    initial = _attach_grads(arrays, reqs, dtype)
    with autograd.record(train_mode=True):
        outputs = args.call(fn, arrays, aux_arrays)
    heads = [nd.array(_host(g), ctx=ctx, dtype=o.dtype) for g, o in zip(out_grads, outputs)]
    autograd.backward(outputs, heads)
    grads = [None if a.grad is None else a.grad.asnumpy() for a in arrays]
    for index, want in _expected_list(expected, args.names, 'expected'):
        if want is None or reqs[index] == 'null':
            continue
        want = _host(want) + initial[index] if reqs[index] == 'add' else want
        name = args.names[index]
        assert_almost_equal(grads[index], want, rtol, atol, equal_nan=equal_nan,
                            names=(f'BACKWARD_{name}', f'EXPECTED_{name}'))
    return grads


def _grad_reqs(grad_req, names):
    if isinstance(grad_req, str):
        return [grad_req] * len(names)
    if isinstance(grad_req, dict):
        return [grad_req.get(n, 'null') for n in names]
    return list(grad_req)


def _attach_grads(arrays, reqs, dtype):
    initial = []
    for array, req in zip(arrays, reqs):
        start = np.random.normal(size=array.shape).astype(dtype) if req == 'add' else None
        if req != 'null':
            array.attach_grad(grad_req=req)
            if start is not None:
                array.grad[:] = start
        initial.append(start)
    return initial


# ----------------------------------------------------------------------------------------------
# Configuration, exceptions and flaky tests

def environment(*args):
    """Set configuration variables for a block or a function: ``environment(name, value)`` or
    ``environment({name: value, ...})``, through :func:`ember.config.override` (the process
    environment is never touched). ``None`` means unset (the default applies).

    >>> from ember import config
    >>> with environment('MXNET_SAFE_ACCUMULATION', '1'):
    ...     config.get('MXNET_SAFE_ACCUMULATION')
    True
    >>> @environment({'MXNET_CPU_PARALLEL_SIZE': 10})
    ... def parallel_size():
    ...     return config.get('MXNET_CPU_PARALLEL_SIZE')
    >>> parallel_size()
    10
    """
    if len(args) == 2 and isinstance(args[0], str):
        values = {args[0]: args[1]}
    elif len(args) == 1 and isinstance(args[0], dict):
        values = dict(args[0])
    else:
        raise TypeError(f'environment: expected (name, value) or a dict of names to values, '
                        f'got {args!r}')
    return config.override(**values)


def assert_exception(f, exception_type, *args, **kwargs) -> None:
    """Raise AssertionError unless ``f(*args, **kwargs)`` raises `exception_type`.

    >>> assert_exception(int, ValueError, 'x')
    >>> assert_exception(int, ValueError, '1')
    Traceback (most recent call last):
    ...
    AssertionError: int did not raise ValueError
    """
    try:
        f(*args, **kwargs)
    except exception_type:
        return
    name = getattr(f, '__name__', repr(f))
    raise AssertionError(f'{name} did not raise {exception_type.__name__}')


def retry(n: int):
    """Decorator: run a stochastic test up to `n` times; it fails only if every run fails an
    assertion (other exceptions propagate at once).

    >>> tries = []
    >>> @retry(3)
    ... def flaky():
    ...     tries.append(1)
    ...     assert len(tries) == 2
    >>> flaky(); len(tries)
    2
    """
    if not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f'retry({n!r}): expected a positive number of attempts')

    def decorate(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            for attempt in range(n):
                try:
                    return test(*args, **kwargs)
                except AssertionError:
                    if attempt == n - 1:
                        raise
        return run
    return decorate

