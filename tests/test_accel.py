"""The compiled accelerator and its pure-Python twin: same results, same errors; the
MXNET_ENABLE_CYTHON / MXNET_ENFORCE_CYTHON switches."""
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ember import accel, config

ROOT = Path(__file__).resolve().parents[1]
BIG = 2**62

# (function, args, kwargs, expected tuple or int, or (exception type, words in the message))
DOCUMENTED_RESHAPES = [
    # MXNet's Reshape documentation, one line per example.
    ((2, 3, 4), (4, 0, 2), {}, (4, 3, 2)),
    ((2, 3, 4), (2, 0, 0), {}, (2, 3, 4)),
    ((2, 3, 4), (6, 1, -1), {}, (6, 1, 4)),
    ((2, 3, 4), (3, -1, 8), {}, (3, 1, 8)),
    ((2, 3, 4), (-1,), {}, (24,)),
    ((2, 3, 4), (-2,), {}, (2, 3, 4)),
    ((2, 3, 4), (2, -2), {}, (2, 3, 4)),
    ((2, 3, 4), (-2, 1, 1), {}, (2, 3, 4, 1, 1)),
    ((2, 3, 4), (-3, 4), {}, (6, 4)),
    ((2, 3, 4, 5), (-3, -3), {}, (6, 20)),
    ((2, 3, 4), (0, -3), {}, (2, 12)),
    ((2, 3, 4), (-3, -2), {}, (6, 4)),
    ((2, 3, 4), (-4, 1, 2, -2), {}, (1, 2, 3, 4)),
    ((2, 3, 4), (2, -4, -1, 3, -2), {}, (2, 1, 3, 4)),
    ((10, 5, 4), (-1, 0), {}, (40, 5)),
    ((10, 5, 4), (-1, 0), {'reverse': True}, (50, 4)),
]

MORE_RESHAPES = [
    ((2, 3, 4), (-2, -1), {}, (2, 3, 4, 1)),
    ((3, 2), (-2, 1, 2, -4), {'reverse': True}, (3, 1, 2)),
    ((2, 3, 4), (0, -1), {'reverse': True}, (3, 8)),
    ((6,), (-4, -1, 2), {}, (3, 2)),
    ((0, 3), (-4, 0, 5, 0), {}, (0, 5, 3)),
    ((0, 3), (3, -1), {}, (3, 0)),
    ((), (1, 1), {}, (1, 1)),
    ((), (), {}, ()),
    ([2, 3], [np.int64(-1)], {}, (6,)),
    ((2, 3), (-1, -1), {}, (ValueError, 'at most one dimension can be -1')),
    ((2, 3), (5,), {}, (ValueError, 'output shape (5,) does not have the 6 elements')),
    ((2, 3), (-5,), {}, (ValueError, '-5 at position 0 is neither a size nor a special')),
    ((2, 3), (0, 0, 0), {}, (ValueError, '0 at position 2 has no input dimension left')),
    ((2, 3), (0, 0, 0), {'reverse': 1}, (ValueError, '0 at position 0 has no input')),
    ((2, 3), (-4, 1), {}, (ValueError, '-4 at position 0 must be followed by two sizes')),
    ((2, 3), (2, 3, -4, 1, 1), {}, (ValueError, '-4 at position 2 has no input dimension')),
    ((6,), (-4, -1, -1), {}, (ValueError, 'split sizes cannot both be -1')),
    ((6,), (-4, -2, 3), {}, (ValueError, 'must be >= 0 or -1, got -2 and 3')),
    ((6,), (-4, 4, -1), {}, (ValueError, 'split sizes 4 and -1 do not divide input dim')),
    ((6,), (-4, 0, -1), {}, (ValueError, 'split sizes 0 and -1 do not divide')),
    ((6,), (-4, 2, 2), {}, (ValueError, 'split sizes 2 and 2 do not divide input dimension 6')),
    ((6,), (-4, BIG, BIG), {}, (ValueError, 'do not divide input dimension 6')),
    ((2, 3, 4), (-3, -3), {}, (ValueError, '-3 at position 1 needs two input dimensions')),
    ((2, 0), (-1, 0), {}, (ValueError, 'cannot infer the -1 dimension')),
    ((2, 3), (4, -1), {}, (ValueError, 'do not divide the input size 6')),
    ((2, 3), (BIG, BIG, -1), {}, (ValueError, 'cannot infer the -1 dimension')),
    ((BIG, BIG, 0), (-3, 0), {}, (ValueError, f'merging {BIG} and {BIG} overflows')),
    ((BIG, 4), (-1,), {}, (ValueError, 'has more than 2**63 - 1 elements')),
    ((2, 3), (BIG, BIG), {}, (ValueError, 'does not have the 6 elements')),
    ((2, -3), (6,), {}, (ValueError, 'input shape (2, -3): dimension -3 is negative')),
    ((2, 3), (2**63,), {}, (ValueError, 'reshape target (9223372036854775808,): 9223372036')),
    ((2, 3), (-2**63 - 1,), {}, (ValueError, 'is out of range')),
    ((2, 3), (2.0, 3), {}, (TypeError, "'float' object cannot be interpreted as an integer")),
    ((2, 3), 6, {}, (TypeError, 'reshape target must be a tuple or list of integers, got int')),
    (np.zeros(2), (6,), {}, (TypeError, 'input shape must be a tuple or list of integers, '
                                        'got ndarray')),
]

BROADCASTS = [
    ((2, 1, 4), (3, 1), (2, 3, 4)),
    ((), (5, 2), (5, 2)),
    ((0, 1), (1, 3), (0, 3)),
    ((1,), (0,), (0,)),
    ([4, 1], (4, 4), (4, 4)),
    ((True, 3), (2, 1), (2, 3)),
    ((2, 3), (3, 2), (ValueError, 'shapes (2, 3) and (3, 2) cannot be broadcast together: '
                                  'dimensions 2 and 3 differ and neither is 1')),
    ((2, 3), (0,), (ValueError, 'dimensions 3 and 0 differ')),
    ((2, -1), (2,), (ValueError, 'shape (2, -1): dimension -1 is negative')),
    ((2, 2**63), (2,), (ValueError, 'dimension 9223372036854775808 is too large')),
    ((2, 1.5), (2,), (TypeError, "'float' object cannot be interpreted as an integer")),
    ((2, -1), (2, 'x'), (ValueError, 'is negative')),
    ((2, 3), None, (TypeError, 'shape must be a tuple or list of integers, got NoneType')),
]

SIZES = [
    ((), 1), ((2, 3, 4), 24), ([5], 5), ((0, BIG, BIG), 0), ((np.int32(3), 2), 6),
    ((2**31, 2**31), 2**62), ((2**63 - 1,), 2**63 - 1),
    ((BIG, 2), (ValueError, 'shape (4611686018427387904, 2) has more than 2**63 - 1 elements')),
    ((3, -2), (ValueError, 'shape (3, -2): dimension -2 is negative')),
    ('23', (TypeError, 'shape must be a tuple or list of integers, got str')),
]


def compiled_module():
    return pytest.importorskip('ember._accel', reason='ember._accel is not built; build it '
                               'with python setup.py build_ext --inplace')


def outcome(fn, *args, **kwargs):
    """The result, or (exception type, message): what both implementations must agree on."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)


def check(fn, args, kwargs, expected):
    got = outcome(fn, *args, **kwargs)
    if isinstance(expected, tuple) and expected and isinstance(expected[0], type):
        error, words = expected
        assert isinstance(got, tuple) and got[0] is error, got
        assert words in got[1], got[1]
    else:
        assert got == expected and type(got) is type(expected)
        assert all(type(dim) is int for dim in (got if isinstance(got, tuple) else [got]))
    return got


def implementations():
    yield accel.python_impl
    try:
        import ember._accel as compiled
    except ImportError:
        return
    yield compiled


@pytest.mark.parametrize('src, target, kwargs, expected', DOCUMENTED_RESHAPES + MORE_RESHAPES)
def test_infer_reshape(src, target, kwargs, expected):
    got = [check(impl.infer_reshape, (src, target), kwargs, expected)
           for impl in implementations()]
    assert all(g == got[0] for g in got)


@pytest.mark.parametrize('a, b, expected', BROADCASTS)
def test_broadcast_shape(a, b, expected):
    got = [check(impl.broadcast_shape, (a, b), {}, expected) for impl in implementations()]
    assert all(g == got[0] for g in got)


@pytest.mark.parametrize('shape, expected', SIZES)
def test_shape_size(shape, expected):
    got = [check(impl.shape_size, (shape,), {}, expected) for impl in implementations()]
    assert all(g == got[0] for g in got)


def test_broadcast_agrees_with_numpy():
    rng = random.Random(1)
    for _ in range(300):
        a = tuple(rng.choice((1, 1, 2, 3)) for _ in range(rng.randint(0, 4)))
        b = tuple(rng.choice((1, 2, 3)) for _ in range(rng.randint(0, 4)))
        try:
            expected = np.broadcast_shapes(a, b)
        except ValueError:
            expected = (ValueError, 'cannot be broadcast together')
        for impl in implementations():
            check(impl.broadcast_shape, (a, b), {}, expected)


def test_reshape_without_special_codes_agrees_with_numpy():
    rng = random.Random(2)
    for _ in range(300):
        src = tuple(rng.randint(1, 4) for _ in range(rng.randint(0, 4)))
        target = list(np.zeros(src).reshape(-1, *src[1:]).shape) if src else [1]
        target[rng.randrange(len(target))] = -1
        expected = np.zeros(src).reshape(target).shape
        for impl in implementations():
            check(impl.infer_reshape, (src, tuple(target)), {}, expected)


def test_compiled_and_python_agree_on_random_codes():
    compiled = compiled_module()
    rng = random.Random(3)
    codes = (0, -1, -2, -3, -4, -5, 1, 2, 3, 4, 6)
    for _ in range(5000):
        src = tuple(rng.choice((0, 1, 2, 3, 4)) for _ in range(rng.randint(0, 5)))
        target = tuple(rng.choice(codes) for _ in range(rng.randint(0, 6)))
        reverse = rng.random() < 0.5
        expected = outcome(accel.python_impl.infer_reshape, src, target, reverse)
        assert outcome(compiled.infer_reshape, src, target, reverse=reverse) == expected, \
            (src, target, reverse)


def test_compiled_argument_handling():
    compiled = compiled_module()
    assert compiled.infer_reshape(target=(-1,), src_shape=(2, 3)) == (6,)
    assert compiled.infer_reshape((2, 3), (-1,), False) == (6,)
    with pytest.raises(TypeError, match="unexpected keyword argument 'shape'"):
        compiled.infer_reshape((2, 3), shape=(6,))
    with pytest.raises(TypeError, match="repeated keyword argument 'src_shape'"):
        compiled.infer_reshape((2, 3), (6,), src_shape=(6,))
    with pytest.raises(TypeError, match='missing required argument'):
        compiled.infer_reshape((2, 3))
    with pytest.raises(TypeError, match='takes 2 arguments'):
        compiled.broadcast_shape((2,))


def test_data_address_is_the_first_element_of_any_view():
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    views = [base, base.transpose(0, 2, 1), base[:, 1:, ::2], base[::-1], base[0, 0, 3:],
             np.zeros((0, 3), np.float64), base.view(np.uint8)]
    for impl in implementations():
        for view in views:
            assert impl.data_address(view) == view.__array_interface__['data'][0]
        with pytest.raises(TypeError, match='data_address: expected an array .* got list'):
            impl.data_address([1.0])


def test_long_shapes_use_the_heap_path():
    shape = tuple([1] * 40 + [3])
    for impl in implementations():
        assert impl.broadcast_shape(shape, (2, 1)) == tuple([1] * 39 + [2, 3])
        assert impl.infer_reshape(shape, (-1,) + (0,) * 39, reverse=True) == (1,) * 39 + (3,)
        assert impl.shape_size(shape) == 3


# ----------------------------------------------------------------------------------------------
# The switches.

def test_override_disables_the_compiled_module():
    with config.override(MXNET_ENABLE_CYTHON=False):
        assert accel.BACKEND == 'python'
        assert accel.infer_reshape is accel.python_impl.infer_reshape
        assert accel.broadcast_shape((3, 1), (4,)) == (3, 4)
    expected = 'compiled' if len(list(implementations())) == 2 else 'python'
    assert accel.BACKEND == expected


def test_enforce_with_the_module_built_loads_it():
    compiled = compiled_module()
    with config.override(MXNET_ENFORCE_CYTHON=True):
        assert accel.BACKEND == 'compiled'
        assert accel.shape_size is compiled.shape_size


def test_enforce_in_process_without_the_module_raises_and_restores(monkeypatch):
    monkeypatch.setitem(sys.modules, 'ember._accel', None)
    try:
        with pytest.raises(ImportError, match='MXNET_ENFORCE_CYTHON=1 and MXNET_ENABLE_CYTHON'):
            with config.override(MXNET_ENFORCE_CYTHON=True):
                pass
        assert accel.BACKEND == 'python'
    finally:
        monkeypatch.undo()
        accel.reload()


def run_python(code, **env_vars):
    switches = {'MXNET_ENABLE_CYTHON': None, 'MXNET_ENFORCE_CYTHON': None, **env_vars}
    env = config.child_environ(PYTHONPATH=str(ROOT), **switches)
    return subprocess.run([sys.executable, '-c', code], env=env, capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


HIDE_MODULE = "import sys; sys.modules['ember._accel'] = None\n"


def test_enforce_without_the_module_fails_at_import():
    done = run_python(HIDE_MODULE + 'import ember.accel', MXNET_ENFORCE_CYTHON='1',
                      MXNET_ENABLE_CYTHON='1')
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith('ImportError:'), done.stderr
    assert 'MXNET_ENFORCE_CYTHON' in last and 'MXNET_ENABLE_CYTHON' in last
    assert "ember._accel" in last


def test_missing_module_falls_back_to_python_and_disabling_wins_over_enforce():
    fallback = run_python(HIDE_MODULE + 'import ember.accel as a; print(a.BACKEND)',
                          MXNET_ENABLE_CYTHON='1', MXNET_ENFORCE_CYTHON='0')
    assert fallback.stdout.split() == ['python'], fallback.stderr
    disabled = run_python('import ember.accel as a, sys; '
                          "print(a.BACKEND, 'ember._accel' in sys.modules)",
                          MXNET_ENABLE_CYTHON='0', MXNET_ENFORCE_CYTHON='1')
    assert disabled.stdout.split() == ['python', 'False'], disabled.stderr


def test_default_start_up_loads_the_compiled_module():
    compiled_module()
    started = run_python('import ember.accel as a; print(a.BACKEND)')
    assert started.stdout.split() == ['compiled'], started.stderr
