"""Gluon names MXNet programs reach for directly: Block, Constant, ParameterDict,
DeferredInitializationError, Dataset, Sampler, the recurrent base cells, hooks, and the small
utilities of gluon.utils."""
import numpy as np
import pytest

import ember as mx
from ember import gluon


def test_a_block_written_by_the_user_with_a_constant():
    class Scale(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.factor = self.params.get_constant('factor', mx.nd.array([3.0]))

        def forward(self, x):
            return x * self.factor.data()
    block = Scale(prefix='scale_')
    block.initialize()
    assert block(mx.nd.ones((2,))).asnumpy().tolist() == [3.0, 3.0]
    assert isinstance(block.factor, gluon.Constant)
    assert isinstance(block.collect_params(), gluon.ParameterDict)
    assert block.collect_params().keys() == {'scale_factor'}


def test_deferred_parameters_say_so_until_the_first_batch():
    dense = gluon.nn.Dense(2)
    dense.initialize()
    with pytest.raises(gluon.DeferredInitializationError):
        dense.weight.data()
    dense(mx.nd.ones((1, 5)))
    assert dense.weight.data().shape == (2, 5)


def test_datasets_and_samplers_written_by_the_user():
    class Squares(gluon.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return np.float32(index * index)

    class Backwards(gluon.data.Sampler):
        def __init__(self, length):
            self.length = length

        def __iter__(self):
            return iter(range(self.length - 1, -1, -1))

        def __len__(self):
            return self.length
    loader = gluon.data.DataLoader(Squares(), batch_size=2, sampler=Backwards(4))
    assert [batch.asnumpy().tolist() for batch in loader] == [[9.0, 4.0], [1.0, 0.0]]


def test_recurrent_base_cells():
    cell = gluon.rnn.LSTMCell(3, input_size=2)
    assert isinstance(cell, gluon.rnn.HybridRecurrentCell)
    assert isinstance(cell, gluon.rnn.RecurrentCell)
    zoneout = gluon.rnn.ZoneoutCell(cell, zoneout_states=0.5)
    assert isinstance(zoneout, gluon.rnn.ModifierCell) and zoneout.base_cell is cell
    zoneout.initialize()
    outputs, _ = zoneout.unroll(2, mx.nd.ones((1, 2, 2)), merge_outputs=True)
    assert outputs.shape == (1, 2, 3)


def test_forward_hooks_come_off_with_their_handle():
    seen = []
    dense = gluon.nn.Dense(1, in_units=1)
    dense.initialize()
    handle = dense.register_forward_hook(lambda block, inputs, output: seen.append(1))
    assert isinstance(handle, gluon.utils.HookHandle)
    dense(mx.nd.ones((1, 1)))
    handle.detach()
    dense(mx.nd.ones((1, 1)))
    assert seen == [1]


def test_small_utilities(tmp_path):
    assert gluon.utils.shape_is_known((2, 3)) and not gluon.utils.shape_is_known((0, 3))
    source, target = tmp_path / 'new', tmp_path / 'old'
    source.write_text('new')
    target.write_text('old')
    gluon.utils.replace_file(str(source), str(target))
    assert target.read_text() == 'new' and not source.exists()


def test_parameterless_activations_take_block_arguments():
    for layer in (gluon.nn.SELU(prefix='s_'), gluon.nn.GELU(prefix='g_'),
                  gluon.nn.Flatten(prefix='f_')):
        assert layer.prefix.endswith('_') and layer(mx.nd.zeros((1, 2))).shape == (1, 2)


def test_model_zoo_classes_behind_the_functions():
    from ember.gluon.model_zoo import vision
    # (every model's parameters match MXNet's: test_api_values.py)
    for build, cls in ((vision.alexnet, vision.AlexNet), (vision.vgg11, vision.VGG),
                       (vision.resnet18_v2, vision.ResNetV2),
                       (vision.mobilenet0_25, vision.MobileNet),
                       (vision.mobilenet_v2_0_25, vision.MobileNetV2),
                       (vision.squeezenet1_1, vision.SqueezeNet)):
        assert isinstance(build(), cls)
    blocks = {type(b) for b in vision.resnet50_v2().features._children.values()
              for b in getattr(b, '_children', {}).values()}
    assert vision.BottleneckV2 in blocks
    assert vision.BasicBlockV2 in {type(b) for b in vision.resnet18_v2().features._children[
        '5']._children.values()}
    assert any(isinstance(b, vision.mobilenet.LinearBottleneck)
               for b in vision.mobilenet_v2_0_25().features._children.values())
    aux = vision.inception.make_aux(7)
    aux.initialize()
    assert aux(mx.nd.zeros((1, 768, 17, 17))).shape == (1, 7)
    assert vision.mobilenet.RELU6(prefix='r_')(mx.nd.array([-1.0, 7.0])).asnumpy().tolist() == [
        0.0, 6.0]


def test_batchnorm_relu_tensor_types_and_symbol_block_in_nn():
    layer = gluon.nn.BatchNormReLU(in_channels=2)
    layer.initialize()
    data = mx.nd.array([[-2.0, 1.0], [2.0, 3.0]])
    with mx.autograd.record():
        fused = layer(data)
    plain = gluon.nn.BatchNorm(in_channels=2)
    plain.initialize()
    with mx.autograd.record():
        reference = mx.nd.relu(plain(data))
    np.testing.assert_allclose(fused.asnumpy(), reference.asnumpy(), rtol=1e-6)
    assert isinstance(mx.nd.ones(1), gluon.tensor_types)
    assert isinstance(mx.sym.var('x'), gluon.parameter.tensor_types)
    assert gluon.nn.SymbolBlock is gluon.SymbolBlock
    assert isinstance(mx.optimizer.get_updater(mx.optimizer.SGD()), mx.optimizer.Updater)
