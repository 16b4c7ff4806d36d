"""MXNet's smaller modules: mx.base's errors and helpers, mx.error, mx.log, mx.registry,
mx.misc, mx.runtime, mx.libinfo, mx.context's GPU memory and mx.callback.save_checkpoint."""
import importlib.util
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import ember as mx
from ember import base, error, libinfo, log, misc, registry, runtime

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# mx.base and mx.error

def test_errors_are_runtime_errors_registered_by_name():
    assert issubclass(mx.MXNetError, RuntimeError)
    assert base.error_types['MXNetError'] is mx.MXNetError
    assert base.error_types['InternalError'] is error.InternalError
    assert error.register is base.register_error
    with pytest.raises(mx.MXNetError, match='hint'):
        raise error.InternalError('lost a buffer')


def test_symbol_raises_not_implemented_for_symbol_where_mxnet_does():
    x = mx.sym.var('x')
    for call in (x.asnumpy, x.asscalar, x.wait_to_read, x.detach, x.backward,
                 lambda: x.as_in_context(mx.cpu()), lambda: bool(x)):
        with pytest.raises(base.NotImplementedForSymbol, match='not implemented for Symbol'):
            call()


def test_sparse_error_names_function_operator_and_arguments():
    problem = base.NotSupportedForSparseNDArray(np.reshape, None, (2, 3))
    assert str(problem) == ("Function reshape with arguments (<class 'tuple'>) is not supported "
                            "for SparseNDArray and only available in NDArray.")
    assert isinstance(problem, mx.MXNetError)


def test_python2_names_and_defaults():
    assert base.string_types == (str,) and base.basestring is str and base.long is int
    assert isinstance(np.float32(1), base.numeric_types)
    assert isinstance(np.int64(1), base.integer_types)
    assert base.mx_real_t is np.float32
    assert base.py_str(b'caf\xc3\xa9') == 'café'
    assert base.data_dir_default().endswith('.mxnet')
    with mx.config.override(MXNET_HOME=None):
        assert base.data_dir() == base.data_dir_default()


def test_docstrings_get_their_file_and_line():
    module = type(sys)('fileline_example')

    def documented():
        """Does a thing."""
    module.documented = documented
    base.add_fileline_to_docstring(module)
    assert documented.__doc__.startswith('Does a thing.\n\nFrom:')
    assert documented.__doc__.endswith(f':{documented.__code__.co_firstlineno}')


# ----------------------------------------------------------------------------------------------
# mx.log, mx.registry, mx.misc

def test_logger_writes_levels_to_a_file(tmp_path):
    path = tmp_path / 'run.log'
    logger = log.get_logger('ember.test.small_modules', filename=str(path), level=log.INFO)
    logger.info('started')
    logger.debug('hidden')
    for handler in logger.handlers:
        handler.flush()
    assert path.read_text() == 'started\n'
    with pytest.warns(DeprecationWarning, match='get_logger'):
        assert log.getLogger('ember.test.small_modules') is logger
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def test_registry_aliases_and_creation_from_json():
    class Base:
        pass

    alias = registry.get_alias_func(Base, 'thing')

    @alias('first', 'one')
    class First(Base):
        def __init__(self, size=1):
            self.size = size

    create = registry.get_create_func(Base, 'thing')
    assert create('ONE').size == 1
    assert create({'thing': 'first', 'size': 4}).size == 4
    assert create('{"thing": "first", "size": 5}').size == 5
    instance = First()
    assert create(instance) is instance
    with pytest.raises(ValueError, match="'second' is not a registered thing"):
        create('second')
    with pytest.raises(TypeError, match='subclasses of Base'):
        registry.get_register_func(Base, 'thing')(int)


def test_old_schedulers():
    assert misc.LearningRateScheduler().base_lr == 0.01
    schedule = misc.FactorScheduler(step=2, factor=0.5)
    assert [schedule(i) for i in range(5)] == [0.01, 0.01, 0.005, 0.005, 0.0025]
    with pytest.raises(ValueError, match='factor=2'):
        misc.FactorScheduler(1, factor=2)


# ----------------------------------------------------------------------------------------------
# mx.runtime and mx.libinfo: each feature against an independent look at the process

def test_features_say_what_this_process_has():
    features = runtime.Features()
    assert list(features)[:32] == list(runtime.NAMES[:32])
    assert features.is_enabled('CUDA') == (mx.context.num_gpus() > 0)
    assert features.is_enabled('MKLDNN') == mx.backend.onednn.available()
    assert features.is_enabled('OPENCV') == (importlib.util.find_spec('cv2') is not None)
    assert features.is_enabled('MPI') == (importlib.util.find_spec('mpi4py') is not None)
    blas = np.show_config(mode='dicts')['Build Dependencies']['blas']['name']
    assert features.is_enabled('BLAS_OPEN') == ('openblas' in blas)
    flags = Path('/proc/cpuinfo').read_text() if Path('/proc/cpuinfo').exists() else ''
    if flags:
        assert features.is_enabled('CPU_AVX2') == (' avx2' in flags)
    assert [f.name for f in runtime.feature_list()] == list(features)
    with pytest.raises(RuntimeError, match="'NOPE' is unknown"):
        features.is_enabled('NOPE')


def test_mkldnn_feature_follows_its_switch():
    with mx.config.override(MXNET_MKLDNN_ENABLED=False):
        assert not runtime.Features().is_enabled('MKLDNN')


def test_libinfo_finds_the_compiled_modules_and_headers():
    libraries = libinfo.find_lib_path()
    compiled = sorted(str(p) for p in (REPO / 'ember').glob('_*.so'))
    assert libraries[:len(compiled)] == compiled
    assert Path(libinfo.find_include_path(), '_buffers.h').exists()
    with pytest.raises(RuntimeError, match='libnothing'):
        libinfo.find_lib_path('libnothing')


# ----------------------------------------------------------------------------------------------
# mx.context, mx.callback

def test_gpu_memory_info():
    if mx.context.num_gpus() == 0:
        with pytest.raises(mx.MXNetError, match='no GPU 0'):
            mx.context.gpu_memory_info(0)
        return
    free, total = mx.context.gpu_memory_info(0)
    assert 0 < free <= total


def test_callback_save_checkpoint_writes_what_load_checkpoint_reads(tmp_path):
    import ember.model   # noqa: F401  (installs the checkpoint saver)
    net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2, name='fc')
    params = {'fc_weight': mx.nd.ones((2, 3)), 'fc_bias': mx.nd.zeros(2)}
    mx.callback.save_checkpoint(str(tmp_path / 'net'), 3, net, params, {})
    symbol, args, aux = mx.model.load_checkpoint(str(tmp_path / 'net'), 3)
    assert symbol.list_arguments() == net.list_arguments() and aux == {}
    assert args['fc_weight'].asnumpy().tolist() == [[1.0] * 3] * 2


def test_short_module_names():
    assert mx.rnd is mx.random
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        names = {}
        exec('from ember import *', names)
    assert names['runtime'] is runtime and names['rnd'] is mx.random


def test_star_import_of_autograd_brings_mxnets_names():
    child = subprocess.run(
        [sys.executable, '-c', 'from ember.autograd import *; '
         'print(sorted(n for n in ("record", "pause", "train_mode", "predict_mode", "backward",'
         ' "grad", "is_recording", "is_training", "set_recording", "set_training",'
         ' "mark_variables", "Function", "get_symbol") if n in globals()))'],
        capture_output=True, text=True, cwd=REPO, timeout=60,
        env=mx.config.child_environ(PYTHONPATH=str(REPO)))
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["['Function',", "'backward',", "'get_symbol',", "'grad',",
                                    "'is_recording',", "'is_training',", "'mark_variables',",
                                    "'pause',", "'predict_mode',", "'record',",
                                    "'set_recording',", "'set_training',", "'train_mode']"]


# ----------------------------------------------------------------------------------------------
# Registries and switches of the older modules


def test_metric_and_initializer_aliases_and_label_checks():
    @mx.metric.alias('twice_acc')
    class TwiceAccuracy(mx.metric.Accuracy):
        pass
    assert isinstance(mx.metric.create('twice_acc'), TwiceAccuracy)

    @mx.init.alias('halves')
    class Halves(mx.init.Initializer):
        def _init_weight(self, name, arr):
            arr[:] = 0.5
    weight = mx.nd.zeros((2,))
    mx.init.create('halves')(mx.init.InitDesc('w_weight'), weight)
    assert weight.asnumpy().tolist() == [0.5, 0.5]
    labels, preds = mx.metric.check_label_shapes(mx.nd.ones(2), mx.nd.ones(2), wrap=True)
    assert len(labels) == len(preds) == 1
    with pytest.raises(ValueError, match='does not match'):
        mx.metric.check_label_shapes([1, 2], [1])


def test_cc_sgd_is_sgd():
    weight = mx.nd.ones((2,))
    mx.optimizer.ccSGD(learning_rate=0.5).update(0, weight, mx.nd.ones((2,)), None)
    assert weight.asnumpy().tolist() == [0.5, 0.5] and issubclass(mx.optimizer.ccSGD,
                                                                  mx.optimizer.SGD)


def test_autograd_switches_and_marked_variables():
    assert not mx.autograd.is_recording() and not mx.autograd.is_training()
    previous = mx.autograd.set_recording(True)
    try:
        assert mx.autograd.is_recording() and previous is False
        assert mx.autograd.set_training(True) is False and mx.autograd.is_training()
    finally:
        mx.autograd.set_training(False)
        mx.autograd.set_recording(False)
    x, grad = mx.nd.array([3.0]), mx.nd.zeros((1,))
    mx.autograd.mark_variables([x], [grad])
    with mx.autograd.record():
        y = x * x
        with mx.autograd.pause():
            assert not mx.autograd.is_recording()
    y.backward()
    assert grad.asnumpy().tolist() == [6.0]


def test_executor_class_and_runtime_feature():
    exe = mx.sym.relu(mx.sym.var('x')).simple_bind(mx.cpu(), x=(2,))
    assert isinstance(exe, mx.executor.Executor)
    feature = mx.runtime.Feature('THING', True)
    assert repr(feature) == '✔ THING' and repr(mx.runtime.Feature('OTHER', 0)) == '✖ OTHER'


# ----------------------------------------------------------------------------------------------
# mx.contrib's autograd and io


def test_contrib_autograd_sections_and_gradients():
    contrib = mx.contrib.autograd
    x, y = mx.nd.array([1.0, 2.0]), mx.nd.array([3.0])
    grads, loss = contrib.grad_and_loss(lambda a, b: (a * b).sum(), argnum=[0])(x, y)
    assert grads[0].asnumpy().tolist() == [3.0, 3.0] and loss.asscalar() == 9.0
    assert contrib.grad(lambda a: a * a)(x)[0].asnumpy().tolist() == [2.0, 4.0]
    with contrib.train_section():
        assert mx.autograd.is_recording() and mx.autograd.is_training()
        with contrib.test_section():
            assert not mx.autograd.is_recording()
    assert not mx.autograd.is_training()
    grad = mx.nd.zeros((2,))
    contrib.mark_variables([x], [grad])
    with contrib.TrainingStateScope(True):
        z = x * 4
    contrib.compute_gradient([z])
    assert grad.asnumpy().tolist() == [4.0, 4.0]
    assert contrib.set_is_training(False) is False
    with pytest.raises(TypeError, match='list or tuple'):
        contrib.backward(z)


def test_contrib_data_loader_iter_pads_the_last_batch_for_a_module():
    data = np.arange(10, dtype=np.float32).reshape(5, 2)
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(data, np.arange(5)),
                                      batch_size=2)
    it = mx.contrib.io.DataLoaderIter(loader)
    assert it.provide_data[0].shape == (2, 2) and it.provide_label[0].name == 'softmax_label'
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 1]
    assert batches[-1].data[0].asnumpy().tolist() == [[8.0, 9.0], [0.0, 0.0]]
    it.reset()
    assert len(list(it)) == 3


def test_get_symbol_gives_the_recorded_graph_with_mxnets_names():
    x, w = mx.nd.array([1.0, -2.0]), mx.nd.array([3.0, 0.5])
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.relu(x * 2 + w)
    symbol = mx.autograd.get_symbol(y)
    assert symbol.list_arguments() == ['var0', 'null1']
    assert symbol.list_outputs() == ['node_2_output']
    executor = mx.sym.Group([symbol]).bind(mx.cpu(), {'var0': x, 'null1': w})
    assert executor.forward()[0].asnumpy().tolist() == y.asnumpy().tolist()

    class Twice(mx.autograd.Function):
        def forward(self, a):
            return a * 2

        def backward(self, grad):
            return grad * 2
    with mx.autograd.record():
        z = Twice()(x)
    with pytest.raises(mx.MXNetError, match='not an operator'):
        mx.autograd.get_symbol(z)
