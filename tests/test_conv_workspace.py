"""Convolution lowers a batch a few samples at a time so scratch memory stays within `workspace`:
every NumPy algorithm, forward and backward, gives the same results whatever the budget."""
import numpy as np
import pytest

import ember as mx
from ember import config, resource
from ember.op.nn.conv import generic

NUMPY_ALGORITHMS = ('gemm', 'winograd2', 'winograd4')


@pytest.fixture
def forced(force_conv):
    """force(name): every convolution call runs NumPy algorithm `name` (oneDNN off; data
    gradients by the rule, NumPy's)."""
    with config.override(MXNET_MKLDNN_ENABLED=False):
        yield force_conv


def test_the_backward_chunks_cover_the_batch():
    x = np.zeros((6, 4, 10, 10), np.float32)
    w = np.zeros((5, 4, 3, 3), np.float32)
    window = generic.conv_window('Convolution', {'kernel': (3, 3), 'stride': (),
                                                 'dilate': (), 'pad': (1, 1)}, (10, 10))
    chunks = generic._batch_chunks(x, w, window, 20_000)
    assert len(chunks) > 1 and chunks[0][0] == 0 and chunks[-1][1] == 6
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))


@pytest.mark.parametrize('name', NUMPY_ALGORITHMS)
def test_chunked_batches_give_the_same_result_and_gradients(forced, name):
    forced(name)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((6, 4, 10, 10)), rng.standard_normal((5, 4, 3, 3))
    results = []
    for workspace in (1024, 0):     # 0 MB: one sample per chunk
        xs, ws = mx.nd.array(x), mx.nd.array(w)
        xs.attach_grad(), ws.attach_grad()
        with mx.autograd.record():
            y = mx.nd.Convolution(xs, ws, kernel=(3, 3), pad=(1, 1), num_filter=5,
                                  no_bias=True, workspace=workspace)
        y.backward(mx.nd.ones(y.shape))
        results.append([y.asnumpy(), xs.grad.asnumpy(), ws.grad.asnumpy()])
    for whole, chunked in zip(*results):
        # Winograd F(4x4) rounds to ~1e-5 of the largest value, differently per chunk size
        np.testing.assert_allclose(chunked, whole, rtol=1e-4, atol=1e-5 * np.abs(whole).max())


@pytest.mark.parametrize('name', NUMPY_ALGORITHMS)
@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
@config.override(MXNET_CPU_TEMP_COPY=1)     # fresh workspaces, whatever ran before
def test_scratch_stays_within_the_budget(forced, name, layout):
    forced(name)
    shape = (32, 16, 28, 28) if layout == 'NCHW' else (32, 28, 28, 16)
    weight = (16, 16, 3, 3) if layout == 'NCHW' else (16, 3, 3, 16)
    y = mx.nd.Convolution(mx.nd.ones(shape), mx.nd.ones(weight), kernel=(3, 3), pad=(1, 1),
                          num_filter=16, no_bias=True, workspace=1, layout=layout)
    y.wait_to_read()
    assert y[0, 5, 5, 5].asscalar() == 16 * 9
    largest = max(space.capacity for space in resource.copies(mx.cpu())[0])
    # a whole batch of patches would be 32 samples (14 MB); 1 MB allows a few at a time
    assert 0 < largest <= 1 << 20
