"""``mx.np`` against NumPy: every function of ``tests/np_cases.py`` forward (values, shape and
dtype) and, where it is differentiable, its autograd gradient against central finite
differences in float64.

Dtypes are NumPy's except where MXNet's ``mx.np`` chose otherwise: a float64 result that no
float64 input asked for is float32 (MXNet's default float); cases name their dtype where MXNet's
rule is not that (sums of integers keep the integer dtype, ``arange(5)`` is float32). The
MXNet-only rules are checked against MXNet 1.9.1's own results in ``test_numpy_mxnet.py``.
"""
from __future__ import annotations

import zlib

import numpy as onp
import pytest

import ember as mx
from ember import numpy as np
from np_cases import CASES, Arr, reference

# The functions this table runs, for ``python -m ember api-coverage`` (it reads this list):
# mx.np's, and the same functions as mx.nd.np and mx.sym.np give them.
EXERCISED_API = sorted({f'ember.numpy.{c.name}' for c in CASES}
                       | {f'ember.ndarray.numpy.{c.name}' for c in CASES}
                       | {f'ember.symbol.numpy.{c.name}' for c in CASES}
                       | {f'ember.numpy.multiarray.{c.name}' for c in CASES if '.' not in c.name}
                       | {f'ember.numpy.fallback.{c.name}' for c in CASES if c.dtype == 'numpy'}
                       | {f'ember.numpy.fallback_linalg.{c.name[7:]}' for c in CASES
                          if c.name.startswith('linalg.')})

# Functions tested by other files rather than by this table (and why).
ELSEWHERE = {
    'set_printoptions': 'test_numpy_api.py (printing)',
    'genfromtxt': 'test_numpy_api.py (reads a file)',
}


def _function(name):
    target = np
    for part in name.split('.'):
        target = getattr(target, part)
    return target


def _draw(value, rng, float_dtype=None):
    """(NumPy value, Ember value) of a case argument."""
    if isinstance(value, Arr):
        dtype = float_dtype if float_dtype and onp.dtype(value.dtype).kind == 'f' else None
        values = value.draw(rng, dtype)
        return values, np.array(values, dtype=values.dtype)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Arr) for v in value):
        pairs = [_draw(v, rng, float_dtype) for v in value]
        return type(value)(p[0] for p in pairs), type(value)(p[1] for p in pairs)
    return value, value


def _draw_all(case, float_dtype=None):
    rng = onp.random.default_rng(zlib.crc32(case.id.encode()))
    pairs = [_draw(v, rng, float_dtype) for v in case.args]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _outputs(value):
    if isinstance(value, (list, tuple)) and not isinstance(value, onp.ndarray):
        return [x for v in value for x in _outputs(v)]
    return [value]


def _input_dtypes(values):
    found = []
    for value in values:
        if isinstance(value, onp.ndarray):
            found.append(value.dtype)
        elif isinstance(value, (list, tuple)):
            found += _input_dtypes(value)
    return found


def _expected_dtype(case, want, inputs):
    if case.dtype == 'numpy':
        return want.dtype
    if case.dtype is not None:
        return onp.dtype(case.dtype)
    if case.kwargs.get('dtype') is not None:
        return onp.dtype(case.kwargs['dtype'])
    if want.dtype == onp.float64 and onp.dtype(onp.float64) not in _input_dtypes(inputs):
        return onp.dtype(onp.float32)
    return want.dtype


def _tolerance(dtype, case):
    if dtype == onp.float16:
        return 1e-2, 1e-2
    if dtype == onp.float64:
        return 1e-9, 1e-10
    return case.rtol, 1e-5


def _check_output(case, got, want, inputs):
    if isinstance(want, float) or isinstance(want, onp.floating) and want.ndim == 0 and \
            not isinstance(got, mx.nd.NDArray):
        assert abs(float(got) - float(want)) <= 1e-9 * max(1.0, abs(float(want))), \
            f'{case.id}: {got!r} against NumPy {want!r}'
        return
    if not isinstance(want, (onp.ndarray, onp.generic)):
        assert got == want, f'{case.id}: {got!r} against NumPy {want!r}'
        return
    want = onp.asarray(want)
    if not isinstance(got, mx.nd.NDArray):
        assert onp.asarray(got).dtype == want.dtype, case.id
        onp.testing.assert_allclose(onp.asarray(got), want, rtol=1e-6, err_msg=case.id)
        return
    assert isinstance(got, np.ndarray), f'{case.id}: got {type(got).__name__}'
    assert got.shape == want.shape, f'{case.id}: shape {got.shape} against NumPy {want.shape}'
    expected = _expected_dtype(case, want, inputs)
    assert got.dtype == expected, f'{case.id}: dtype {got.dtype}, expected {expected}'
    if case.numpy_compare:
        rtol, atol = _tolerance(expected, case)
        scale = max(1.0, float(onp.abs(want.astype(onp.float64)).max())) if want.size and \
            want.dtype.kind in 'fiu' else 1.0
        onp.testing.assert_allclose(got.asnumpy().astype(onp.float64) if want.dtype.kind != 'b'
                                    else got.asnumpy(), want.astype(onp.float64)
                                    if want.dtype.kind != 'b' else want, rtol=rtol,
                                    atol=atol * scale, err_msg=case.id)


@pytest.mark.parametrize('case', CASES, ids=[c.id for c in CASES])
def test_forward_against_numpy(case):
    numpy_args, args = _draw_all(case)
    got = _function(case.name)(*args, **case.kwargs)
    want = reference(case)(*numpy_args, **case.kwargs)
    got_list, want_list = _outputs(got), _outputs(want)
    assert len(got_list) == len(want_list), f'{case.id}: {len(got_list)} outputs'
    for g, w in zip(got_list, want_list):
        _check_output(case, g, w, numpy_args)


# ----------------------------------------------------------------------------------------------
# Gradients

def _float_positions(case):
    """Positions (int, or (int, int) inside a list argument) of the float array arguments."""
    found = []
    for i, value in enumerate(case.args):
        if isinstance(value, Arr) and onp.dtype(value.dtype).kind == 'f':
            found.append(i)
    return found


def _differentiable(case):
    return case.grad != () and case.dtype != 'numpy' and (case.grad or _float_positions(case))


def _at(args, position):
    if isinstance(position, tuple):
        return args[position[0]][position[1]]
    return args[position]


def _with(args, position, value):
    args = list(args)
    if isinstance(position, tuple):
        inner = list(args[position[0]])
        inner[position[1]] = value
        args[position[0]] = inner
    else:
        args[position] = value
    return args


def _loss(case, args, weights):
    outputs = [o for o in _outputs(_function(case.name)(*args, **case.kwargs))
               if isinstance(o, mx.nd.NDArray) and o.dtype.kind == 'f']
    return sum(float((o.asnumpy().astype(onp.float64) * w).sum())
               for o, w in zip(outputs, weights)), outputs


DIFFERENTIABLE = [c for c in CASES if _differentiable(c)]


@pytest.mark.parametrize('case', DIFFERENTIABLE, ids=[c.id for c in DIFFERENTIABLE])
def test_gradient_against_finite_differences(case):
    numpy_args, args = _draw_all(case, float_dtype='float64')
    positions = list(case.grad) if case.grad else _float_positions(case)
    for position in positions:
        _at(args, position).attach_grad()
    with mx.autograd.record():
        outputs = [o for o in _outputs(_function(case.name)(*args, **case.kwargs))
                   if isinstance(o, mx.nd.NDArray) and o.dtype.kind == 'f']
        assert outputs, f'{case.id}: no float output to differentiate; give it grad=()'
        rng = onp.random.default_rng(1)
        weights = [rng.standard_normal(o.shape) for o in outputs]
        heads = [(o * np.array(w)).sum() for o, w in zip(outputs, weights)]
        total = heads[0]
        for head in heads[1:]:
            total = total + head
    total.backward()
    eps = 1e-6
    for position in positions:
        base = _at(numpy_args, position)
        analytic = _at(args, position).grad.asnumpy()
        numeric = onp.zeros(base.shape)
        for index in onp.ndindex(*base.shape):
            values = []
            for sign in (1, -1):
                moved = base.copy()
                moved[index] += sign * eps
                trial = _with(args, position, np.array(moved, dtype=moved.dtype))
                values.append(_loss(case, trial, weights)[0])
            numeric[index] = (values[0] - values[1]) / (2 * eps)
        onp.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-6,
                                    err_msg=f'{case.id}: gradient of argument {position}')


# ----------------------------------------------------------------------------------------------
# Every function has a row

def _public_functions():
    """(dotted name, function) of mx.np, mx.np.linalg and the fallback module."""
    found = []
    for prefix, module in (('', np), ('linalg.', np.linalg), ('fallback.', np.fallback)):
        for name in module.__all__:
            value = getattr(module, name)
            if callable(value) and not isinstance(value, type) and not hasattr(value,
                                                                                '__path__'):
                found.append((prefix + name, value))
    return [(n, v) for n, v in found if n != 'ndarray']


def test_every_function_has_a_row():
    covered = {id(_function(c.name)) for c in CASES} | {id(_function(n)) for n in ELSEWHERE}
    missing = sorted(n for n, value in _public_functions() if id(value) not in covered
                     and not n.startswith('random'))
    assert not missing, f'mx.np functions without a case in tests/np_cases.py: {missing}'


# ----------------------------------------------------------------------------------------------
# The same calls traced into a graph (as a hybridized block runs them)

def _traced(case, args):
    """Run the case on graph variables through a CachedOp; its outputs for `args`."""
    from ember.executor.cached_op import CachedOp
    from ember.numpy import symbol as npsym
    inputs, symbolic = [], []
    for i, value in enumerate(args):
        if isinstance(value, mx.nd.NDArray):
            symbolic.append(npsym.var(f'arg{i}'))
            inputs.append(value)
        else:
            symbolic.append(value)
    graph = _function(case.name)(*symbolic, **case.kwargs)
    outputs = list(graph) if isinstance(graph, (list, tuple)) else [graph]
    group = mx.sym.Group(outputs)
    names = group.list_inputs()
    by_name = {f'arg{i}': v for i, v in enumerate(args) if isinstance(v, mx.nd.NDArray)}
    result = CachedOp(group)(*[by_name[n] for n in names])
    return [r.as_np_ndarray() for r in (result if isinstance(result, (list, tuple))
                                        else [result])]


# Functions that need values or shapes of their inputs, which a graph does not have: they
# raise NotForSymbol or need arrays (MXNet's symbols cannot run them either).
UNTRACEABLE = {'nonzero', 'argwhere', 'flatnonzero', 'unique', 'bincount', 'unravel_index',
               'diag_indices_from', 'shape', 'size', 'ndim', 'may_share_memory',
               'shares_memory', 'atleast_1d', 'atleast_2d', 'atleast_3d', 'rollaxis',
               'vstack', 'row_stack', 'hstack', 'dstack', 'column_stack', 'hsplit', 'vsplit',
               'dsplit', 'meshgrid', 'broadcast_arrays', 'inner', 'linalg.tensorinv',
               'linalg.tensorsolve', 'linalg.matrix_power', 'delete', 'insert', 'average',
               'linalg.lstsq', 'linalg.matrix_rank', 'linalg.cond', 'msort', 'ediff1d',
               'tensordot', 'sort', 'histogram', 'empty_like', 'asarray', 'copy'}
# The graph executor keeps MXNet 1.x's convention that a 0 in a shape (or the shape ()) marks
# what is not known yet: graph inputs need a known shape without zero-size dimensions.
NOT_GRAPH_INPUTS = {'sum-empty': 'an input of shape (0, 3)', 'sum-zero-dim': 'an input of shape ()'}
TRACEABLE = [c for c in CASES if c.dtype != 'numpy' and c.name not in UNTRACEABLE
             and c.id not in NOT_GRAPH_INPUTS
             and not any(isinstance(a, (list, tuple)) and any(isinstance(v, Arr) for v in a)
                         for a in c.args)
             and any(isinstance(a, Arr) for a in c.args)]


@pytest.mark.parametrize('case', TRACEABLE, ids=[c.id for c in TRACEABLE])
def test_traced_graph_matches_imperative(case):
    numpy_args, args = _draw_all(case, float_dtype='float64')
    imperative = _outputs(_function(case.name)(*args, **case.kwargs))
    traced = _traced(case, args)
    assert len(traced) == len(imperative)
    for got, want in zip(traced, imperative):
        assert got.dtype == want.dtype and got.shape == want.shape, case.id
        if case.numpy_compare:
            onp.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-9, atol=1e-12,
                                        err_msg=case.id)


TRACEABLE_GRADIENTS = [c for c in TRACEABLE if _differentiable(c)
                       and all(isinstance(p, int) for p in (c.grad or ()))]


def _gradients(case, args, run):
    positions = list(case.grad) if case.grad else _float_positions(case)
    copies = [a.copy() if isinstance(a, mx.nd.NDArray) else a for a in args]
    for position in positions:
        copies[position].attach_grad()
    with mx.autograd.record():
        outputs = [o for o in run(copies) if o.dtype.kind == 'f']
        rng = onp.random.default_rng(2)
        total = None
        for output in outputs:
            term = (output * np.array(rng.standard_normal(output.shape))).sum()
            total = term if total is None else total + term
    total.backward()
    return [copies[p].grad.asnumpy() for p in positions]


@pytest.mark.parametrize('case', TRACEABLE_GRADIENTS, ids=[c.id for c in TRACEABLE_GRADIENTS])
def test_traced_gradients_match_imperative(case):
    _, args = _draw_all(case, float_dtype='float64')
    imperative = _gradients(case, args, lambda a: _outputs(_function(case.name)(*a,
                                                                                 **case.kwargs)))
    traced = _gradients(case, args, lambda a: _traced(case, a))
    for got, want in zip(traced, imperative):
        onp.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10, err_msg=case.id)


def test_every_np_operator_is_reached(monkeypatch):
    """Each forward operator of the mx.np families (``_npi_*``, ``_npx_*``) runs in this table
    (or, for the samplers, in test_numpy_api.py): none is left without a check."""
    from ember.numpy import multiarray
    from ember.op import registry
    reached = set()
    real_invoke = multiarray.invoke

    def recording(op, *args, **kwargs):
        reached.add(op.name)
        return real_invoke(op, *args, **kwargs)
    monkeypatch.setattr(multiarray, 'invoke', recording)
    for case in CASES:
        _, args = _draw_all(case)
        _function(case.name)(*args, **case.kwargs)
    x = np.ones((3, 2))
    x.attach_grad()
    with mx.autograd.record():       # recorded, basic indexing runs its operator
        x[1:, ::2]
    samplers = {f'_npi_random_{name}' for name in ('uniform', 'normal', 'gamma', 'beta',
                                                   'chisquare', 'exponential', 'gumbel',
                                                   'logistic', 'lognormal', 'pareto',
                                                   'power', 'rayleigh', 'weibull', 'randint',
                                                   'bernoulli')}
    samplers |= {'_npi_choice', '_npi_multinomial', '_npi_shuffle',
                 '_npi_multivariate_normal'}
    forward = {name for name in registry.all_ops()
               if name.startswith(('_npi_', '_npx_')) and not name.startswith('_backward')}
    # Imperatively these give views (no kernel runs); the traced tests run their kernels.
    views = {'_npi_reshape', '_npx_reshape', '_npi_expand_dims', '_npi_squeeze'}
    missing = sorted(forward - reached - samplers - views)
    assert not missing, f'operators no case reaches: {missing}'
