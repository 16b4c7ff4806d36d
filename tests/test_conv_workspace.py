"""Convolution lowers a batch a few samples at a time so scratch memory stays within `workspace`."""
import numpy as np

import ember as mx
from ember import config, resource
from ember.op.nn import convolution


def conv(x, w, workspace, **kw):
    return mx.nd.Convolution(mx.nd.array(x), mx.nd.array(w), kernel=(3, 3), pad=(1, 1),
                             num_filter=w.shape[0], no_bias=True, workspace=workspace, **kw)


def test_chunked_batches_give_the_same_result_and_gradients():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((6, 4, 10, 10)), rng.standard_normal((5, 4, 3, 3))
    budget = convolution._batch_chunks
    chunks = budget(x.astype(np.float32), w.astype(np.float32),
                    convolution._conv_window('Convolution', {'kernel': (3, 3), 'stride': (),
                                                             'dilate': (), 'pad': (1, 1)},
                                             (10, 10)), 20_000)
    assert len(chunks) > 1 and chunks[0][0] == 0 and chunks[-1][1] == 6
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
        np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5)


@config.override(MXNET_CPU_TEMP_COPY=1)     # fresh workspaces, whatever ran before
def test_scratch_stays_within_the_budget():
    x = np.ones((32, 16, 28, 28), np.float32)
    w = np.ones((16, 16, 3, 3), np.float32)
    conv(x, w, workspace=1).wait_to_read()
    per_sample_cols = 16 * 9 * 28 * 28 * 4
    largest = max(space.capacity for space in resource.copies(mx.cpu())[0])
    # a whole-batch patch matrix would be 32 samples; 1 MB allows a single sample at a time
    assert largest < 4 * per_sample_cols
