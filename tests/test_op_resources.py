"""MXNET_CPU_TEMP_COPY and MXNET_CPU_PARALLEL_RAND_COPY: operators that ask for a temporary
workspace ('temp') or a random stream ('random') get a copy from ``ember.resource``, and the
number of copies bounds how many such operators run at once.

A test operator, registered here, asks for one resource and records how many of its calls are
running: each call waits (up to `hold` seconds) for another to join it. Two calls on unrelated
arrays, pushed to an engine with two CPU workers, run together only when they were handed
different copies; with one copy the engine orders them one after the other.
"""
import threading

import numpy as np
import pytest

import ember as mx
from ember import config, device, resource
from ember.op import registry
from ember.op.registry import Param, p_float

CPU = device.cpu()
COPIES = {'temp': 'MXNET_CPU_TEMP_COPY', 'random': 'MXNET_CPU_PARALLEL_RAND_COPY'}


class Overlap:
    """How many calls of the test operator run at once, and which copies they were handed."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.together = threading.Event()
        self.copies = []
        self.threads = set()

    def enter(self, copy):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.copies.append(copy)
            self.threads.add(threading.current_thread().name)
            if self.running == 2:
                self.together.set()

    def leave(self):
        with self.lock:
            self.running -= 1


RECORD = {'overlap': Overlap()}


def _slow_kernel(kind):
    def kernel(attrs, ins, outs, ctx):
        RECORD['overlap'].enter(ctx.temp if kind == 'temp' else ctx.random)
        try:
            RECORD['overlap'].together.wait(timeout=attrs['hold'])
        finally:
            RECORD['overlap'].leave()
        outs[0][...] = ins[0]
    return kernel


def _slow_op(kind):
    name = f'_test_op_resources_slow_{kind}'
    if name not in registry.all_ops():     # the module may be imported twice (doctest run)
        registry.register(name, _slow_kernel(kind), resources=(kind,), random=kind == 'random',
                          params=(Param('hold', p_float, 0.3, 'seconds to wait for a partner'),))
    return getattr(mx.nd, name)


@pytest.fixture
def overlap():
    RECORD['overlap'] = Overlap()
    yield RECORD['overlap']
    RECORD['overlap'] = Overlap()


def run_two(kind, copies, hold):
    """Push two calls of the slow `kind` operator with `copies` copies and two workers."""
    settings = {COPIES[kind]: copies, 'MXNET_CPU_WORKER_NTHREADS': 2,
                'MXNET_ENGINE_TYPE': 'ThreadedEnginePerDevice'}
    with config.override(**settings):
        slow = _slow_op(kind)
        first, second = mx.nd.ones((2, 2)), mx.nd.zeros((2, 2))
        outputs = [slow(first, hold=hold), slow(second, hold=hold)]
        mx.nd.waitall()
        handed_out = resource.copies(CPU)[0 if kind == 'temp' else 1]
    assert [o.asnumpy().tolist() for o in outputs] == [[[1, 1], [1, 1]], [[0, 0], [0, 0]]]
    return handed_out


@pytest.mark.parametrize('kind', ['temp', 'random'])
def test_one_copy_runs_its_operators_one_at_a_time(kind, overlap):
    handed_out = run_two(kind, copies=1, hold=0.3)
    assert overlap.most == 1
    assert len(overlap.copies) == 2 and overlap.copies[0] is overlap.copies[1]
    assert overlap.copies[0] is handed_out[0]


@pytest.mark.parametrize('kind', ['temp', 'random'])
def test_two_copies_let_two_operators_run_at_once(kind, overlap):
    handed_out = run_two(kind, copies=2, hold=10.0)
    assert overlap.most == 2 and len(overlap.threads) == 2
    assert {id(c) for c in overlap.copies} == {id(c) for c in handed_out}


# ----------------------------------------------------------------------------------------------
# The registered operators ask ember.resource for their copies.


def _conv():
    return mx.nd.Convolution(mx.nd.ones((1, 2, 4, 4)), mx.nd.ones((3, 2, 3, 3)),
                             mx.nd.zeros((3,)), kernel=(3, 3), num_filter=3)


def _dropout():
    with mx.autograd.train_mode():
        return mx.nd.Dropout(mx.nd.ones((4, 4)), p=0.5)


def _rrelu():
    with mx.autograd.train_mode():
        return mx.nd.LeakyReLU(-mx.nd.ones((4, 4)), act_type='rrelu')


OPERATORS = [
    ('Convolution', 'temp', _conv),
    ('Dropout', 'dropout', _dropout),      # a GPU's dropout states; the CPU's random streams
    ('LeakyReLU', 'random', _rrelu),
    ('_random_uniform', 'random', lambda: mx.nd.random.uniform(shape=(3,))),
    ('_random_normal', 'random', lambda: mx.nd.random.normal(shape=(3,))),
]


@pytest.mark.parametrize('name,kind,call', OPERATORS, ids=[o[0] for o in OPERATORS])
def test_operators_take_their_copies_from_the_resource_manager(name, kind, call, monkeypatch):
    assert kind in registry.get(name).resources
    handed = []
    getter = {'temp': 'temp_space', 'random': 'random_stream', 'dropout': 'dropout_state'}[kind]
    source = getattr(resource, getter)

    def recording(dev):
        copy = source(dev)
        handed.append(copy)
        return copy
    monkeypatch.setattr(resource, getter, recording)
    result = call()
    result.wait_to_read()
    assert np.isfinite(result.asnumpy()).all()
    pool = resource.copies(CPU)[0 if kind == 'temp' else 1]
    assert len(handed) == 1 and any(handed[0] is copy for copy in pool)
