"""mx.operator: CustomOp / CustomOpProp / register and mx.nd.Custom.

MXNet's classic example (a Softmax written with NumPy) matches and trains like the built-in
SoftmaxOutput; custom operators that call mx.nd operators and wait inside forward and backward
finish on every engine; auxiliary states are updated; per-call state reaches backward; errors in
the user's code surface at the wait as EmberError; the registry operator Custom runs the same
code on a thread that may wait and refuses an engine worker."""
import threading
import warnings

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.base import EmberError
from ember.ndarray import invoke
from ember.op import registry
from ember.op.registry import ShapeError

ENGINES = ['ThreadedEnginePerDevice', 'ThreadedEngine', 'NaiveEngine']


def finishes(fn, seconds=60):
    """fn() run on a thread that must finish in time: a deadlock fails instead of hanging."""
    outcome = {}

    def target():
        try:
            outcome['value'] = fn()
        except BaseException as error:  # noqa: BLE001 - re-raised below
            outcome['error'] = error
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f'did not finish in {seconds} s: deadlock'
    if 'error' in outcome:
        raise outcome['error']
    return outcome['value']


# ----------------------------------------------------------------------------------------------
# MXNet's example/numpy-ops/custom_softmax.py

class NumpySoftmax(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0].asnumpy()
        y = np.exp(x - x.max(axis=1).reshape((x.shape[0], 1)))
        y /= y.sum(axis=1).reshape((x.shape[0], 1))
        self.assign(out_data[0], req[0], mx.nd.array(y))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        label = in_data[1].asnumpy().ravel().astype(np.int64)
        y = out_data[0].asnumpy()
        y[np.arange(label.shape[0]), label] -= 1.0
        self.assign(in_grad[0], req[0], mx.nd.array(y))


@mx.operator.register('test_numpy_softmax')
class NumpySoftmaxProp(mx.operator.CustomOpProp):
    def __init__(self):
        super(NumpySoftmaxProp, self).__init__(need_top_grad=False)

    def list_arguments(self):
        return ['data', 'label']

    def list_outputs(self):
        return ['output']

    def infer_shape(self, in_shape):
        data_shape = in_shape[0]
        label_shape = (in_shape[0][0],)
        output_shape = in_shape[0]
        return [data_shape, label_shape], [output_shape], []

    def infer_type(self, in_type):
        return in_type, [in_type[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return NumpySoftmax()


def test_numpy_softmax_matches_softmax_output_forward_and_backward():
    rng = np.random.default_rng(0)
    x, label = rng.standard_normal((5, 4)), np.array([0, 3, 1, 1, 2])
    results = []
    for run in (lambda d, lab: mx.nd.Custom(d, lab, op_type='test_numpy_softmax'),
                lambda d, lab: mx.nd.SoftmaxOutput(d, lab)):
        data = mx.nd.array(x)
        data.attach_grad()
        with mx.autograd.record():
            out = run(data, mx.nd.array(label))
        out.backward()
        results.append((out.asnumpy(), data.grad.asnumpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-7)


def train(output_layer, steps=30, lr=0.5):
    """Softmax regression on three separable blobs, by plain SGD through mx.autograd."""
    rng = np.random.default_rng(1)
    centers = np.array([[2.0, 0.0], [-2.0, 1.0], [0.0, -2.5]])
    label = np.repeat(np.arange(3), 20)
    features = centers[label] + 0.5 * rng.standard_normal((60, 2))
    x, y = mx.nd.array(features), mx.nd.array(label)
    weight, bias = mx.nd.zeros((3, 2)), mx.nd.zeros((3,))
    for param in (weight, bias):
        param.attach_grad()
    for _ in range(steps):
        with mx.autograd.record():
            prob = output_layer(mx.nd.FullyConnected(x, weight, bias, num_hidden=3), y)
        prob.backward()
        for param in (weight, bias):
            param[:] = param - lr / 60 * param.grad
    accuracy = (prob.asnumpy().argmax(axis=1) == label).mean()
    return weight.asnumpy(), accuracy


def test_numpy_softmax_trains_like_the_builtin():
    custom_weight, custom_accuracy = train(
        lambda d, lab: mx.nd.Custom(d, lab, op_type='test_numpy_softmax'))
    builtin_weight, builtin_accuracy = train(mx.nd.SoftmaxOutput)
    np.testing.assert_allclose(custom_weight, builtin_weight, rtol=1e-4, atol=1e-6)
    assert custom_accuracy == builtin_accuracy and custom_accuracy > 0.9


# ----------------------------------------------------------------------------------------------
# mx.nd operators and waits inside the user's code

class NdSoftmax(mx.operator.CustomOp):
    """Softmax over axis 1 written with mx.nd operators, waiting on their results."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        e = mx.nd.exp(x - mx.nd.max(x, axis=1, keepdims=True))
        total = mx.nd.sum(e, axis=1, keepdims=True)
        assert total.asnumpy().min() >= 1.0         # a wait inside forward
        self.assign(out_data[0], req[0], mx.nd.broadcast_div(e, total))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        y, g = out_data[0], out_grad[0]
        dot = mx.nd.sum(g * y, axis=1, keepdims=True)
        dot.wait_to_read()
        self.assign(in_grad[0], req[0], y * mx.nd.broadcast_sub(g, dot))


@mx.operator.register('test_nd_softmax')
class NdSoftmaxProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return NdSoftmax()


def softmax_and_gradient(op, x, head):
    data = mx.nd.array(x)
    data.attach_grad()
    with mx.autograd.record():
        loss = (op(data) * mx.nd.array(head)).sum()
    loss.backward()
    return loss.asscalar(), data.grad.asnumpy()


@pytest.mark.parametrize('kind', ENGINES)
def test_nd_operators_and_waits_inside_forward_and_backward_finish(kind):
    rng = np.random.default_rng(2)
    x, head = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    with config.override(MXNET_ENGINE_TYPE=kind, MXNET_CPU_WORKER_NTHREADS=1):
        custom = finishes(lambda: softmax_and_gradient(
            lambda d: mx.nd.Custom(d, op_type='test_nd_softmax'), x, head))
        builtin = softmax_and_gradient(mx.nd.softmax, x, head)
    np.testing.assert_allclose(custom[0], builtin[0], rtol=1e-5)
    np.testing.assert_allclose(custom[1], builtin[1], rtol=1e-4, atol=1e-6)


def test_custom_calls_do_not_wait_for_the_work_they_push():
    # a long chain of custom calls without waits stays correct: each output is an engine array
    x = mx.nd.array(np.random.default_rng(3).standard_normal((3, 4)))
    y = x
    for _ in range(20):
        y = mx.nd.Custom(y, op_type='test_nd_softmax')
    expected = x.asnumpy()
    for _ in range(20):
        e = np.exp(expected - expected.max(axis=1, keepdims=True))
        expected = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y.asnumpy(), expected, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# Auxiliary states, training mode, per-call state, several outputs, keyword arguments

class Centering(mx.operator.CustomOp):
    """Subtracts a running mean of the batch means, kept as an auxiliary state."""

    def __init__(self, momentum):
        super().__init__()
        self.momentum = momentum
        self.modes = []

    def forward(self, is_train, req, in_data, out_data, aux):
        self.modes.append(is_train)
        x, running = in_data[0], aux[0]
        if is_train:
            running[:] = running * self.momentum + mx.nd.mean(x, axis=0) * (1 - self.momentum)
        self.assign(out_data[0], req[0], mx.nd.broadcast_sub(x, running.reshape((1, -1))))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0])


CREATED = []


@mx.operator.register('test_centering')
class CenteringProp(mx.operator.CustomOpProp):
    def __init__(self, momentum='0.9'):
        super().__init__()
        self.momentum = float(momentum)

    def list_auxiliary_states(self):
        return ['running_mean']

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], [(in_shape[0][1],)]

    def create_operator(self, ctx, shapes, dtypes):
        op = Centering(self.momentum)
        CREATED.append((op, ctx, shapes, dtypes))
        return op


def test_auxiliary_states_are_updated_in_training_only():
    x = mx.nd.array([[1.0, 2.0], [3.0, 6.0]])
    running = mx.nd.zeros((2,))
    x.attach_grad()
    with mx.autograd.record():
        out = mx.nd.Custom(x, running, op_type='test_centering', momentum=0.5)
    out.backward(mx.nd.ones((2, 2)) * 2)
    np.testing.assert_allclose(running.asnumpy(), [1.0, 2.0])           # 0.5 * mean
    np.testing.assert_allclose(out.asnumpy(), [[0.0, 0.0], [2.0, 4.0]])
    np.testing.assert_allclose(x.grad.asnumpy(), np.full((2, 2), 2.0))
    op, ctx, shapes, dtypes = CREATED[-1]
    assert ctx == mx.cpu(0) and shapes == [[2, 2], [2]] and dtypes == [np.float32, np.float32]
    predicted = mx.nd.Custom(x, running, op_type='test_centering')
    np.testing.assert_allclose(predicted.asnumpy(), [[0.0, 0.0], [2.0, 4.0]])
    np.testing.assert_allclose(running.asnumpy(), [1.0, 2.0])           # unchanged
    assert CREATED[-2][0].modes == [True] and CREATED[-1][0].modes == [False]


def test_aux_states_can_be_passed_by_name():
    running = mx.nd.zeros((3,))
    with mx.autograd.train_mode():
        mx.nd.Custom(data=mx.nd.ones((2, 3)), running_mean=running, op_type='test_centering',
                     momentum='0')
    np.testing.assert_allclose(running.asnumpy(), np.ones(3))


class RememberingSquare(mx.operator.CustomOp):
    """Keeps its input on self in forward and reads it in backward."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.saved = in_data[0].asnumpy()
        self.assign(out_data[0], req[0], in_data[0] * in_data[0])
        self.assign(out_data[1], req[1], in_data[0] * 3)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        grad = 2 * self.saved * out_grad[0].asnumpy() + 3 * out_grad[1].asnumpy()
        self.assign(in_grad[0], req[0], grad)


@mx.operator.register('test_remembering')
class RememberingProp(mx.operator.CustomOpProp):
    def list_outputs(self):
        return ['square', 'triple']

    def create_operator(self, ctx, shapes, dtypes):
        return RememberingSquare()


def test_each_call_keeps_its_own_operator_for_backward_and_outputs_are_a_list():
    a, b = mx.nd.array([1.0, 2.0]), mx.nd.array([5.0, -1.0])
    for x in (a, b):
        x.attach_grad()
    with mx.autograd.record():
        square_a, triple_a = mx.nd.Custom(a, op_type='test_remembering')
        outputs_b = mx.nd.Custom(b, op_type='test_remembering')
        loss = (square_a + triple_a * 2).sum() + outputs_b[0].sum()
    assert isinstance(outputs_b, list) and len(outputs_b) == 2
    loss.backward()
    np.testing.assert_allclose(a.grad.asnumpy(), 2 * np.array([1.0, 2.0]) + 6)
    np.testing.assert_allclose(b.grad.asnumpy(), 2 * np.array([5.0, -1.0]))


def test_keyword_arguments_reach_the_prop_as_strings():
    seen = []

    @mx.operator.register('test_kwargs')
    class KwargsProp(mx.operator.CustomOpProp):
        def __init__(self, scale, flag='False'):
            super().__init__()
            seen.append((scale, flag))
            self.scale = float(scale)

        def create_operator(self, ctx, shapes, dtypes):
            scale = self.scale

            class Scale(mx.operator.CustomOp):
                def forward(self, is_train, req, in_data, out_data, aux):
                    self.assign(out_data[0], req[0], in_data[0] * scale)
            return Scale()
    out = mx.nd.Custom(mx.nd.ones((2,)), op_type='test_kwargs', scale=2.5, flag=True)
    assert out.asnumpy().tolist() == [2.5, 2.5]
    assert seen == [('2.5', 'True')]


def test_out_argument_receives_the_result():
    target = mx.nd.zeros((2, 3))
    returned = mx.nd.Custom(mx.nd.ones((2, 3)), op_type='test_nd_softmax', out=target)
    assert returned is target
    np.testing.assert_allclose(target.asnumpy(), np.full((2, 3), 1 / 3), rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# Errors

class Failing(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        if in_data[0].asnumpy().sum() < 0:
            raise ValueError('negative input')
        self.assign(out_data[0], req[0], in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise RuntimeError('no backward today')


@mx.operator.register('test_failing')
class FailingProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Failing()


def test_an_error_in_forward_surfaces_at_the_wait():
    out = mx.nd.Custom(mx.nd.array([-1.0, -2.0]), op_type='test_failing')   # does not raise
    with pytest.raises(EmberError, match='negative input') as caught:
        out.asnumpy()
    assert isinstance(caught.value.__cause__, ValueError)
    out = mx.nd.Custom(mx.nd.array([-1.0]), op_type='test_failing')
    with pytest.raises(EmberError, match=r'Custom\[test_failing\]\.forward'):
        out.wait_to_read()
    mx.nd.Custom(mx.nd.array([-1.0]), op_type='test_failing')
    with pytest.raises(EmberError, match='negative input'):
        mx.nd.waitall()


def test_an_error_in_backward_surfaces_when_the_gradient_is_read():
    x = mx.nd.array([1.0, 2.0])
    x.attach_grad()
    with mx.autograd.record():
        out = mx.nd.Custom(x, op_type='test_failing')
    out.backward()                                                  # does not raise
    with pytest.raises(EmberError, match='no backward today'):
        x.grad.asnumpy()


def test_shape_and_argument_errors_raise_at_the_call():
    with pytest.raises(EmberError, match="did you mean 'test_failing'"):
        mx.nd.Custom(mx.nd.ones((2,)), op_type='test_failng')
    with pytest.raises(TypeError, match='missing op_type'):
        mx.nd.Custom(mx.nd.ones((2,)))
    with pytest.raises(TypeError, match=r'expected 2 inputs \(data, label\)'):
        mx.nd.Custom(mx.nd.ones((2, 3)), op_type='test_numpy_softmax')
    with pytest.raises(ShapeError, match='input 1 has shape'):
        mx.nd.Custom(mx.nd.ones((2, 3)), mx.nd.ones((3,)), op_type='test_numpy_softmax')
    with pytest.raises(TypeError, match='unknown inputs'):
        mx.nd.Custom(mx.nd.ones((2,)), weight=mx.nd.ones((2,)), op_type='test_failing')

    @mx.operator.register('test_bad_infer')
    class BadInferProp(mx.operator.CustomOpProp):
        def infer_shape(self, in_shape):
            return [in_shape[0]], []
    with pytest.raises(ShapeError, match='returned 0 output entries, expected 1'):
        mx.nd.Custom(mx.nd.ones((2,)), op_type='test_bad_infer')


def test_register_checks_its_class_and_warns_on_replacement():
    with pytest.raises(TypeError, match='CustomOpProp subclass'):
        mx.operator.register('test_not_a_prop')(object)

    class First(mx.operator.CustomOpProp):
        pass

    class Second(mx.operator.CustomOpProp):
        pass
    mx.operator.register('test_replaced')(First)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        mx.operator.register('test_replaced')(Second)
    assert any('Second replaces First' in str(w.message) for w in caught)
    assert 'test_replaced' in mx.operator.get_all_registered_operators()


# ----------------------------------------------------------------------------------------------
# The base classes

def test_assign_follows_req():
    op = mx.operator.CustomOp()
    dst = mx.nd.ones((2,))
    op.assign(dst, 'null', mx.nd.array([5, 5]))
    op.assign(dst, 'add', np.array([1.0, 2.0]))
    assert dst.asnumpy().tolist() == [2.0, 3.0]
    op.assign(dst, 'write', mx.nd.array([7, 8]))
    op.assign(dst, 'inplace', dst * 2)
    assert dst.asnumpy().tolist() == [14.0, 16.0]
    with pytest.raises(ValueError, match="req='sum'"):
        op.assign(dst, 'sum', dst)


def test_prop_defaults():
    prop = mx.operator.CustomOpProp()
    assert (prop.list_arguments(), prop.list_outputs(), prop.list_auxiliary_states()) == \
        (['data'], ['output'], [])
    assert prop.infer_shape([[2, 3]]) == ([[2, 3]], ([2, 3],), ())
    assert prop.infer_type([np.float16]) == ([np.float16], [np.float16], [])
    assert prop.declare_backward_dependency([1], [2], [3]) == [1, 2, 3]
    assert mx.operator.CustomOpProp(need_top_grad=False).declare_backward_dependency(
        [1], [2], [3]) == [2, 3]
    assert prop.infer_storage_type(['default']) == (['default'], ['default'], [])
    with pytest.raises(NotImplementedError):
        prop.create_operator(mx.cpu(), [[2]], [np.float32])


# ----------------------------------------------------------------------------------------------
# The registry operator (graph execution)

def test_registry_operator_declares_inputs_outputs_and_inference():
    op = registry.get('Custom')
    attrs = op.parse_attrs({'op_type': 'test_centering'})
    assert op.input_names(attrs) == ['data', 'running_mean']
    assert op.output_names(attrs) == ['output']
    assert op.mutate_indices(attrs) == (1,)
    assert op.infer_shape(attrs, [(4, 3), None]) == ([(4, 3), None], [None])
    assert op.infer_shape(attrs, [(4, 3), (3,)]) == ([(4, 3), (3,)], [(4, 3)])
    backward = registry.get('_backward_Custom')
    assert backward.input_names(attrs) == ['out_grad_output', 'in_data_data',
                                           'out_data_output', 'aux_running_mean']


def test_registry_operator_runs_on_the_calling_thread_with_naive_engine():
    rng = np.random.default_rng(4)
    x, head = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    op = registry.get('Custom')
    with config.override(MXNET_ENGINE_TYPE='NaiveEngine'):
        custom = softmax_and_gradient(
            lambda d: invoke(op, [d], {'op_type': 'test_nd_softmax'})[0], x, head)
        builtin = softmax_and_gradient(mx.nd.softmax, x, head)
    np.testing.assert_allclose(custom[0], builtin[0], rtol=1e-5)
    np.testing.assert_allclose(custom[1], builtin[1], rtol=1e-4, atol=1e-6)


def test_registry_operator_refuses_an_engine_worker():
    out = invoke(registry.get('Custom'), [mx.nd.ones((2, 3))], {'op_type': 'test_nd_softmax'})
    with pytest.raises(EmberError, match='engine worker thread'):
        out[0].asnumpy()


def test_symbolic_custom_matches_the_imperative_call():
    rng = np.random.default_rng(2)
    x, label = rng.standard_normal((3, 4)), np.array([1, 0, 3])
    expected = mx.nd.Custom(mx.nd.array(x), mx.nd.array(label), op_type='test_numpy_softmax')
    net = mx.sym.Custom(mx.sym.var('data'), mx.sym.var('label'), op_type='test_numpy_softmax')
    grad = mx.nd.zeros((3, 4))
    with config.override(MXNET_ENGINE_TYPE='NaiveEngine'):     # a graph runs it in place
        executor = net.bind(mx.cpu(), {'data': mx.nd.array(x), 'label': mx.nd.array(label)},
                            args_grad={'data': grad}, grad_req={'data': 'write', 'label': 'null'})
        out = executor.forward(is_train=True)[0]
        np.testing.assert_allclose(out.asnumpy(), expected.asnumpy(), rtol=1e-6)
        executor.backward()
    one_hot = np.eye(4)[label]
    np.testing.assert_allclose(grad.asnumpy(), out.asnumpy() - one_hot, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------------------------
# MXNet's older Python operators and the operator descriptions

def _legacy(cls):
    with pytest.warns(UserWarning, match='deprecated'):
        return cls()


class _NumpyScale(mx.operator.NumpyOp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ['data', 'weight']

    def forward(self, in_data, out_data):
        assert isinstance(in_data[0], np.ndarray)
        out_data[0][:] = in_data[0] * in_data[1]

    def backward(self, out_grad, in_data, out_data, in_grad):
        in_grad[0][:] = out_grad[0] * in_data[1]
        in_grad[1][:] = out_grad[0] * in_data[0]


class _NDArrayCube(mx.operator.NDArrayOp):
    def forward(self, in_data, out_data):
        assert isinstance(in_data[0], mx.nd.NDArray)
        out_data[0][:] = in_data[0] ** 3

    def backward(self, out_grad, in_data, out_data, in_grad):
        in_grad[0][:] = 3 * in_data[0] ** 2 * out_grad[0]


def test_numpy_and_ndarray_ops_run_forward_and_backward_as_symbols():
    x, w = np.array([1.0, -2.0, 3.0]), np.array([2.0, 0.5, -1.0])
    scale = _legacy(_NumpyScale)
    sym = scale(mx.sym.var('x'), weight=mx.sym.var('w'))
    assert sym.list_arguments() == ['x', 'w']
    grads = {'x': mx.nd.zeros(3), 'w': mx.nd.zeros(3)}
    ex = sym.bind(mx.cpu(), {'x': mx.nd.array(x), 'w': mx.nd.array(w)}, args_grad=grads)
    np.testing.assert_allclose(ex.forward(is_train=True)[0].asnumpy(), x * w)
    ex.backward(mx.nd.ones(3))
    np.testing.assert_allclose(grads['x'].asnumpy(), w)
    np.testing.assert_allclose(grads['w'].asnumpy(), x)

    cube = _legacy(_NDArrayCube)
    assert cube.need_top_grad() and cube.declare_backward_dependency([1], [2], [3]) == [1, 2, 3]
    grad = mx.nd.zeros(3)
    with config.override(MXNET_ENGINE_TYPE='NaiveEngine'):     # it calls mx.nd operators
        ex = cube.get_symbol(mx.sym.var('x')).bind(mx.cpu(), {'x': mx.nd.array(x)},
                                                    args_grad={'x': grad})
        np.testing.assert_allclose(ex.forward(is_train=True)[0].asnumpy(), x ** 3)
        ex.backward(mx.nd.ones(3))
    np.testing.assert_allclose(grad.asnumpy(), 3 * x ** 2)
    assert isinstance(_legacy(mx.operator.PythonOp), mx.operator.PythonOp)


def test_get_operator_arguments_names_inputs_then_parameters_as_mxnet():
    # names as MXNet 1.9.1's get_operator_arguments gives them
    fc = mx.operator.get_operator_arguments('FullyConnected')
    assert isinstance(fc, mx.operator.OperatorArguments)
    assert fc.names == ['data', 'weight', 'bias', 'num_hidden', 'no_bias', 'flatten']
    assert fc.narg == 6 and fc.types[:4] == ['NDArray-or-Symbol'] * 3 + ['int, required']
    assert fc.types[4:] == ['boolean, optional, default=0', 'boolean, optional, default=1']
    concat = mx.operator.get_operator_arguments('Concat')
    assert concat.names == ['data', 'num_args', 'dim']
    assert concat.types[0] == 'NDArray-or-Symbol[]'
    act = mx.operator.get_operator_arguments('Activation')
    assert act.types[1] == "{'relu', 'sigmoid', 'softrelu', 'softsign', 'tanh'}, required"
    with pytest.raises(AttributeError, match='FullyConnected'):
        mx.operator.get_operator_arguments('FullyConected')
    assert mx.operator.py_str(b'caf\xc3\xa9') == 'café'
    assert mx.operator.is_np_array() is False
