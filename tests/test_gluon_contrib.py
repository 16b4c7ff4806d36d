"""gluon.contrib: Concurrent, the pixel shuffles, SyncBatchNorm over two devices, SparseEmbedding,
the deformable convolutions and IntervalSampler."""
import numpy as np
import pytest

import ember as mx
from ember import config
from ember.gluon.contrib.nn import (Concurrent, HybridConcurrent, Identity, PixelShuffle1D,
                                   PixelShuffle2D, PixelShuffle3D, SyncBatchNorm)

DEVICES = [mx.cpu(0), mx.cpu(1)]


def test_concurrent_concatenates_its_childrens_outputs():
    net = Concurrent(axis=1)
    net.add(mx.gluon.nn.Dense(2, in_units=3), Identity())
    net.initialize()
    assert net(mx.nd.ones((4, 3))).shape == (4, 5)
    hybrid = HybridConcurrent(axis=0)
    hybrid.add(Identity(), Identity())
    hybrid.hybridize()
    assert hybrid(mx.nd.ones((1, 2))).shape == (2, 2)


def test_pixel_shuffles_invert_space_to_depth():
    x = np.arange(2 * 12 * 2 * 3, dtype=np.float32).reshape(2, 12, 2, 3)
    y = PixelShuffle2D((2, 3))(mx.nd.array(x)).asnumpy()
    # channel c*6 + i*3 + j lands at (row * 2 + i, col * 3 + j) of output channel c
    expected = x.reshape(2, 2, 2, 3, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(2, 2, 4, 9)
    np.testing.assert_array_equal(y, expected)
    shuffle = PixelShuffle3D(2)
    shuffle.hybridize()
    assert shuffle(mx.nd.zeros((1, 16, 1, 2, 3))).shape == (1, 2, 2, 4, 6)
    assert repr(PixelShuffle1D(3)) == 'PixelShuffle1D(3)'
    with pytest.raises(ValueError, match='PixelShuffle2D: factor=.1, 2, 3.'):
        PixelShuffle2D((1, 2, 3))


def _split(array):
    return mx.gluon.utils.split_and_load(array, DEVICES)


def _batch_norm_reference(x, head):
    ref = mx.gluon.nn.BatchNorm(in_channels=x.shape[1])
    ref.initialize()
    data = mx.nd.array(x)
    data.attach_grad()
    with mx.autograd.record():
        out = ref(data)
    out.backward(mx.nd.array(head))
    return ref, out.asnumpy(), data.grad.asnumpy()


@pytest.mark.parametrize('hybridize', [False, True])
def test_sync_batch_norm_on_two_devices_is_batch_norm_of_the_whole_batch(hybridize):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 3, 2, 2)).astype(np.float32)
    head = rng.normal(size=x.shape).astype(np.float32)
    net = SyncBatchNorm(in_channels=3)
    net.initialize(ctx=DEVICES)
    if hybridize:
        net.hybridize()
    parts, heads = _split(x), _split(head)
    for part in parts:
        part.attach_grad()
    with mx.autograd.record():
        outputs = [net(part) for part in parts]
    mx.autograd.backward(outputs, heads)
    ref, ref_out, ref_grad = _batch_norm_reference(x, head)
    np.testing.assert_allclose(np.concatenate([o.asnumpy() for o in outputs]), ref_out,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([p.grad.asnumpy() for p in parts]), ref_grad,
                               rtol=1e-4, atol=1e-5)
    for name in ('running_mean', 'running_var'):
        for device in DEVICES:
            np.testing.assert_allclose(getattr(net, name).data(device).asnumpy(),
                                       getattr(ref, name).data().asnumpy(), rtol=1e-5)
    gamma_grad = sum(net.gamma.grad(device).asnumpy() for device in DEVICES)
    np.testing.assert_allclose(gamma_grad, ref.gamma.grad().asnumpy(), rtol=1e-4, atol=1e-5)


def test_sync_batch_norm_predicts_with_the_running_statistics():
    net = SyncBatchNorm(in_channels=2, num_devices=2)
    net.initialize(ctx=DEVICES)
    outputs = [net(part) for part in _split(np.ones((4, 2), np.float32))]
    np.testing.assert_allclose(outputs[1].asnumpy(), np.full((2, 2), 1 / np.sqrt(1 + 1e-5)),
                               rtol=1e-6)


def test_sync_batch_norm_says_when_its_parts_cannot_meet():
    net = SyncBatchNorm(in_channels=2, num_devices=2)
    net.initialize(ctx=DEVICES)
    with config.override(MXNET_ENGINE_TYPE='NaiveEngine'):
        with mx.autograd.record():
            out = net(mx.nd.ones((2, 2), ctx=DEVICES[0]))
        with pytest.raises(mx.MXNetError, match='needs each device.s part to run at the same'):
            out.asnumpy()


def test_allreduce_sums_every_part_and_times_out(monkeypatch):
    from ember.op.contrib import sync_batch_norm
    import threading
    monkeypatch.setattr(sync_batch_norm, '_check_engine', lambda count: None)  # plain threads
    found = {}

    def contribute(rank):
        found[rank] = sync_batch_norm.allreduce('t', 2, [np.array([rank + 1.0])])
    threads = [threading.Thread(target=contribute, args=(rank,)) for rank in (1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert {rank: value[0].tolist() for rank, value in found.items()} == {0: [3.0], 1: [3.0]}
    with pytest.raises(mx.MXNetError, match='1 of 2 devices arrived'):
        sync_batch_norm.allreduce('alone', 2, [np.zeros(1)], timeout=0.05)


# ----------------------------------------------------------------------------------------------
# gluon.contrib.rnn (values against MXNet's in test_api_values.py)


@pytest.mark.parametrize('cell_class, input_shape, states', [
    (mx.gluon.contrib.rnn.Conv1DRNNCell, (2, 6), 1),
    (mx.gluon.contrib.rnn.Conv1DLSTMCell, (2, 6), 2),
    (mx.gluon.contrib.rnn.Conv1DGRUCell, (2, 6), 1),
    (mx.gluon.contrib.rnn.Conv2DRNNCell, (2, 4, 4), 1),
    (mx.gluon.contrib.rnn.Conv2DLSTMCell, (2, 4, 4), 2),
    (mx.gluon.contrib.rnn.Conv2DGRUCell, (2, 4, 4), 1),
    (mx.gluon.contrib.rnn.Conv3DRNNCell, (2, 2, 3, 3), 1),
    (mx.gluon.contrib.rnn.Conv3DLSTMCell, (2, 2, 3, 3), 2),
    (mx.gluon.contrib.rnn.Conv3DGRUCell, (2, 2, 3, 3), 1),
])
def test_conv_cells_keep_their_states_shape(cell_class, input_shape, states):
    cell = cell_class(input_shape, 3, i2h_kernel=3, h2h_kernel=3, i2h_pad=1)
    cell.initialize()
    inputs = mx.nd.ones((2, 2) + input_shape)
    outputs, final = cell.unroll(2, inputs, merge_outputs=True)
    assert outputs.shape == (2, 2, 3) + input_shape[1:]
    assert [s.shape for s in final] == [(2, 3) + input_shape[1:]] * states
    assert repr(cell).startswith(f'{cell_class.__name__}(2 -> ')
    with pytest.raises(ValueError, match='odd'):
        cell_class(input_shape, 3, i2h_kernel=3, h2h_kernel=2)


def test_variational_dropout_keeps_one_mask_per_sequence():
    mx.random.seed(4)
    base = mx.gluon.rnn.RNNCell(4, input_size=4, activation='relu', prefix='r_')
    cell = mx.gluon.contrib.rnn.VariationalDropoutCell(base, drop_outputs=0.5)
    cell.initialize(mx.init.One())
    with mx.autograd.record():
        outputs, _ = cell.unroll(3, mx.nd.ones((1, 3, 4)), merge_outputs=True)
    dropped = (outputs.asnumpy()[0] == 0)
    assert dropped.any() and (dropped == dropped[0]).all()     # the same units at every step
    with pytest.raises(TypeError, match='BidirectionalCell'):
        mx.gluon.contrib.rnn.VariationalDropoutCell(mx.gluon.rnn.BidirectionalCell(
            mx.gluon.rnn.RNNCell(2), mx.gluon.rnn.RNNCell(2)), drop_states=0.5)


def test_channel_last_conv_cell_matches_channel_first():
    first = mx.gluon.contrib.rnn.Conv2DGRUCell((2, 4, 4), 3, 3, 3, i2h_pad=1, prefix='f_')
    last = mx.gluon.contrib.rnn.Conv2DGRUCell((4, 4, 2), 3, 3, 3, i2h_pad=1,
                                               conv_layout='NHWC', prefix='l_')
    for cell in (first, last):
        cell.initialize()
    data = np.random.default_rng(3).normal(size=(1, 2, 2, 4, 4)).astype(np.float32)
    first.unroll(2, mx.nd.array(data), merge_outputs=True)
    last.unroll(2, mx.nd.array(data.transpose(0, 1, 3, 4, 2)), merge_outputs=True)
    for name in ('i2h_weight', 'h2h_weight', 'i2h_bias', 'h2h_bias'):
        value = getattr(first, name).data()
        if value.ndim == 4:
            value = value.transpose((0, 2, 3, 1))
        getattr(last, name).set_data(value)
    out_first, _ = first.unroll(2, mx.nd.array(data), merge_outputs=True)
    out_last, _ = last.unroll(2, mx.nd.array(data.transpose(0, 1, 3, 4, 2)), merge_outputs=True)
    np.testing.assert_allclose(out_last.asnumpy(), out_first.asnumpy().transpose(0, 1, 3, 4, 2),
                               rtol=1e-4, atol=1e-5)


def test_sparse_embedding_trains_only_the_rows_a_batch_names():
    emb = mx.gluon.contrib.nn.SparseEmbedding(6, 2)
    emb.initialize(mx.init.One())
    trainer = mx.gluon.Trainer(emb.collect_params(), 'sgd', {'learning_rate': 0.5})
    with mx.autograd.record():
        out = emb(mx.nd.array([[1, 4], [4, 4]]))
    out.backward()
    assert emb.weight.grad().stype == 'row_sparse'
    assert emb.weight.grad().indices.asnumpy().tolist() == [1, 4]
    trainer.step(1)
    # row 1 once, row 4 three times; the others untouched
    weight = emb.weight.row_sparse_data(mx.nd.arange(6)).asnumpy()
    np.testing.assert_allclose(weight[:, 0], [1, 0.5, 1, 1, -0.5, 1])
    assert repr(emb) == 'SparseEmbedding(6 -> 2, float32)'
    with pytest.raises(mx.EmberError, match=r'via data\(\) because its storage type is '
                                            r'row_sparse'):
        emb.weight.data()


@pytest.mark.parametrize('layer', ['DeformableConvolution', 'ModulatedDeformableConvolution'])
@pytest.mark.parametrize('hybridize', [False, True])
def test_deformable_layers_sample_where_their_offset_convolution_says(layer, hybridize):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(1, 2, 5, 6))
    deform = getattr(mx.gluon.contrib.cnn, layer)(3, kernel_size=3, padding=1, in_channels=2)
    deform.initialize(mx.init.Normal(0.5))
    deform.offset_weight.set_data(mx.nd.zeros(deform.offset_weight.shape))
    bias = np.zeros(deform.offset_bias.shape)
    bias[:18][1::2] = 1.0           # every tap moves one pixel right (dx; dy stays 0)
    if layer == 'ModulatedDeformableConvolution':
        bias[18:] = 0.0             # masks sigmoid(0) * 2 = 1
    deform.offset_bias.set_data(mx.nd.array(bias))
    if hybridize:
        deform.hybridize()
    out = deform(mx.nd.array(x)).asnumpy()
    conv = mx.gluon.nn.Conv2D(3, 3, padding=1, in_channels=2)
    conv.initialize()
    conv.weight.set_data(deform.deformable_conv_weight.data())
    conv.bias.set_data(deform.deformable_conv_bias.data())
    shifted = np.concatenate([x[..., 1:], np.zeros((1, 2, 5, 1))], axis=-1)
    want = conv(mx.nd.array(shifted)).asnumpy()
    # column 0's left taps reach x's column 0 through the offset (the padding in `shifted`)
    np.testing.assert_allclose(out[..., 1:], want[..., 1:], rtol=1e-4, atol=1e-4)
    assert not np.allclose(out[..., 0], want[..., 0])
    assert repr(deform).startswith(f'{layer}(2 -> 3, kernel_size=(3, 3)')


def test_interval_sampler_interleaves_and_feeds_a_data_loader():
    from ember.gluon.contrib.data import IntervalSampler
    assert list(IntervalSampler(7, 3)) == [0, 3, 6, 1, 4, 2, 5]
    assert len(IntervalSampler(7, 3)) == 7 and len(IntervalSampler(7, 3, rollover=False)) == 3
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(np.arange(7.0)),
                                      batch_size=2, sampler=IntervalSampler(7, 3))
    assert [b.asnumpy().tolist() for b in loader] == [[0, 3], [6, 1], [4, 2], [5]]
    with pytest.raises(ValueError, match='interval=8'):
        IntervalSampler(7, 8)


# The layers the parametrized test above reaches by name, for `python -m ember api-coverage`.
EXERCISED_API = [mx.gluon.contrib.cnn.DeformableConvolution,
                 mx.gluon.contrib.cnn.ModulatedDeformableConvolution]
