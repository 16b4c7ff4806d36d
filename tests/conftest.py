"""Shared fixtures: every test must leave configuration, default device and engine as found."""
import importlib

import numpy as np
import pytest

from ember import config, device


def _engine_state():
    try:
        engine = importlib.import_module('ember.engine')
    except ImportError:
        return None
    return engine.state_token()


@pytest.fixture(autouse=True, scope='session')
def compile_cache_aside(tmp_path_factory):
    """The suite compiles without the persistent compile cache (each executor compiles its
    own graph, as before the cache existed; tests of the cache give it a folder), and child
    processes keep theirs in a temporary folder, not under the user's MXNET_HOME."""
    import os
    folder = str(tmp_path_factory.mktemp('compile-cache'))
    saved = os.environ.get('NEURON_COMPILE_CACHE_URL')
    os.environ['NEURON_COMPILE_CACHE_URL'] = folder
    with config.override(NEURON_CC_FLAGS='--no_cache'):
        yield folder
    if saved is None:
        os.environ.pop('NEURON_COMPILE_CACHE_URL', None)
    else:
        os.environ['NEURON_COMPILE_CACHE_URL'] = saved


@pytest.fixture(autouse=True)
def no_leaked_state():
    before = (config.snapshot(), device.current_device(), _engine_state())
    yield
    after = (config.snapshot(), device.current_device(), _engine_state())
    assert after == before, f'test left global state changed: {before} -> {after}'


@pytest.fixture(autouse=True)
def graph_sized_budget_reset():
    """Each test starts from the fixed budget of kept Winograd weights: a large graph run by
    an earlier test would have raised it (ember.op.nn.conv.kept.note_graph)."""
    from ember.op.nn.conv.state import STATE
    STATE.largest_graph = 0
    yield
    STATE.largest_graph = 0


@pytest.fixture
def conv_tuning(monkeypatch):
    """conv_tuning(**values): the convolution subsystem runs with these tuning values
    (fields of ``ember.op.nn.conv.tuning.ConvTuning``) for the rest of the test, as
    ``tuning.tuned`` does for a block."""
    import dataclasses
    from ember.op.nn.conv import tuning

    def tune(**values):
        monkeypatch.setattr(tuning, 'TUNING', dataclasses.replace(tuning.TUNING, **values))
    return tune


@pytest.fixture
def force_conv(monkeypatch):
    """force_conv(name, gradient=None): every convolution runs algorithm `name`
    (``algorithms.ALGORITHMS``); its data and weight gradients run `gradient`
    (``DATA_GRADIENT_ALGORITHMS``, ``WEIGHT_GRADIENT_ALGORITHMS``), or the rule when None."""
    from ember.op.nn import onednn_provider
    from ember.op.nn.conv import algorithms

    def force(name, gradient=None):
        def choose(problem, *args, **kwargs):
            if not problem.gradient:
                return algorithms.ALGORITHMS[name]
            if gradient is not None:
                return algorithms.table(problem)[gradient]
            return algorithms.rule(problem, onednn_provider.enabled())
        monkeypatch.setattr(algorithms, 'choose', choose)
    return force


@pytest.fixture
def compiled_module(monkeypatch):
    """compiled_module(value): every convolution module sees `value` (None: not built; or a
    spy) as the compiled ember._winograd for the rest of the test."""
    from ember.op.nn import fully_connected
    from ember.op.nn.conv import compiled, gemm, line, pointwise, winograd, winograd_compiled

    def use(value):
        monkeypatch.setattr(compiled, 'MODULE', value)
        monkeypatch.setattr(winograd_compiled, 'MODULE', value)
        for module in (winograd, pointwise, line, gemm, fully_connected):
            monkeypatch.setattr(module, '_winograd', value)
    return use


def _each_build(request, module, name):
    """Run the test on `module`'s build `request.param`, skipped where it does not exist or
    the CPU does not run it, and put the module's build back afterwards."""
    if module is None:
        pytest.skip(f'{name} is not built')
    before = module.instruction_set()
    try:
        module.use_instruction_set(request.param)
    except ValueError:
        pytest.skip(f'{request.param} does not run here')
    yield request.param
    module.use_instruction_set(before)


@pytest.fixture(params=['avx512', 'avx2', 'baseline'])
def build(request):
    """Each build of ember._winograd in turn (AVX-512 and AVX2 where the CPU has them)."""
    from ember.op.nn.conv import compiled
    yield from _each_build(request, compiled.MODULE, 'ember._winograd')


@pytest.fixture(params=['avx512', 'avx2', 'baseline'])
def sparse_build(request):
    """Each build of ember._sparse in turn (AVX-512 and AVX2 where the CPU has them)."""
    from ember.op import sparse_ops
    yield from _each_build(request, sparse_ops._compiled, 'ember._sparse')


@pytest.fixture
def wide_and_narrow():
    """wide_and_narrow(run) -> (run() on the AVX-512 build, run() on the AVX2 build) of
    ember._winograd, the build that ran before restored; skips where the CPU lacks either."""
    from ember.op.nn.conv import compiled
    module = compiled.MODULE
    if module is None:
        pytest.skip('ember._winograd is not built')
    before = module.instruction_set()

    def both(run):
        try:
            module.use_instruction_set('avx512')
            module.use_instruction_set('avx2')
        except ValueError:
            pytest.skip('this CPU lacks AVX-512 or AVX2')
        try:
            module.use_instruction_set('avx512')
            wide = run()
            module.use_instruction_set('avx2')
            return wide, run()
        finally:
            module.use_instruction_set(before)
    return both


@pytest.fixture
def counted_alloc():
    """An `alloc` for the convolution kernels that returns new NumPy arrays and records the
    bytes each call asks for in ``counted_alloc.taken``."""
    taken = []

    def alloc(specs):
        taken.append(sum(int(np.prod(shape)) * np.dtype(dtype).itemsize
                         for shape, dtype in specs))
        return [np.empty(shape, dtype) for shape, dtype in specs]
    alloc.taken = taken
    return alloc
