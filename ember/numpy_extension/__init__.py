"""``mx.npx``: MXNet's operators beyond NumPy (neural-network layers, ``reshape`` with special
codes, ``pick``, ``topk``, ...) on ``mx.np`` arrays, and the switches of NumPy semantics.

The layer operators are Ember's registered operators (``FullyConnected``, ``Convolution``,
...) taking and giving ``mx.np`` arrays; given Symbols they build graph nodes, so they serve
``hybrid_forward`` too.

>>> import ember as mx
>>> from ember import numpy as np, numpy_extension as npx
>>> x = np.array([[-1., 2.], [3., -4.]])
>>> npx.relu(x), npx.pick(x, np.array([1, 0]))
(array([[0., 2.],
       [3., 0.]]), array([2., 3.]))
>>> npx.reshape(np.zeros((2, 3, 4)), (-2, -5)).shape
(2, 12)
"""
from __future__ import annotations

from ember import backend
from ember import ndarray as _nd
from ember.device import Context, cpu, cpu_pinned, current_context, gpu
from ember.ndarray.ndarray import NDArray, waitall
from ember.numpy import _op as _np_op
from ember.numpy.multiarray import NotForSymbol, apply, as_np, is_symbol, ndarray, wrap
from ember.util import (get_cuda_compute_capability, is_np_array, is_np_shape, reset_np,
                        set_np)
from ember.numpy_extension import random, utils  # noqa: F401
from ember.numpy_extension.utils import load, save

__all__ = ['Context', 'cpu', 'cpu_pinned', 'gpu', 'current_context', 'num_gpus',
           'gpu_memory_info', 'get_cuda_compute_capability', 'waitall', 'set_np', 'reset_np',
           'is_np_array', 'is_np_shape', 'load', 'save', 'random', 'utils',
           'activation', 'batch_norm', 'convolution', 'deconvolution', 'pooling',
           'fully_connected', 'dropout', 'embedding', 'layer_norm', 'leaky_relu', 'softmax',
           'log_softmax', 'relu', 'sigmoid', 'one_hot', 'pick', 'topk', 'sequence_mask',
           'batch_dot', 'batch_flatten', 'cast', 'erf', 'erfinv', 'gamma', 'gammaln',
           'gather_nd', 'reshape', 'reshape_like', 'rnn', 'roi_pooling', 'shape_array',
           'slice', 'smooth_l1', 'arange_like', 'nonzero', 'constraint_check']


def num_gpus() -> int:
    """How many GPUs this process can use."""
    return backend.num_gpus()


def gpu_memory_info(device_id=0):
    """(free, total) bytes of memory of GPU `device_id`."""
    from ember.util import get_gpu_memory
    return get_gpu_memory(device_id)


# ----------------------------------------------------------------------------------------------
# Layer operators: Ember's registered operators on mx.np arrays (or Symbols)

def _call(op_name, inputs, params, public):
    """``mx.nd.<op_name>`` (``mx.sym`` with Symbols) on `inputs` (None ones left out)."""
    inputs = [x for x in inputs if x is not None]
    params = {k: v for k, v in params.items() if v is not None}
    if any(is_symbol(x) for x in inputs):
        from ember import symbol
        from ember.numpy.symbol import as_np_symbol
        result = getattr(symbol, op_name)(*inputs, **params)
        outputs = [as_np_symbol(symbol.Symbol([head])) for head in result._heads]
        return outputs[0] if len(outputs) == 1 else outputs
    for x in inputs:
        if not isinstance(x, NDArray):
            raise TypeError(f'npx.{public}: inputs must be mx.np arrays, got '
                            f'{type(x).__name__}')
    result = getattr(_nd, op_name)(*inputs, **params)
    if isinstance(result, (list, tuple)):
        return [wrap(r) for r in result]
    return wrap(result)


def activation(data, act_type='relu', **kwargs):
    """``act_type`` in relu, sigmoid, tanh, softrelu, softsign, applied element-wise."""
    return _call('Activation', [data], dict(kwargs, act_type=act_type), 'activation')


def relu(data, **kwargs):
    """max(data, 0)."""
    return _call('relu', [data], kwargs, 'relu')


def sigmoid(data, **kwargs):
    """1 / (1 + exp(-data))."""
    return _call('sigmoid', [data], kwargs, 'sigmoid')


def leaky_relu(data, gamma=None, act_type='leaky', slope=0.25, lower_bound=0.125,
               upper_bound=0.334, **kwargs):
    """Leaky ReLU and its kin (prelu with `gamma`, elu, selu, gelu, rrelu)."""
    return _call('LeakyReLU', [data, gamma], dict(kwargs, act_type=act_type, slope=slope,
                                                  lower_bound=lower_bound,
                                                  upper_bound=upper_bound), 'leaky_relu')


def softmax(data, length=None, axis=-1, temperature=None, dtype=None, use_length=False,
            **kwargs):
    """Softmax along `axis` (over the first `length` elements with ``use_length``)."""
    return _call('softmax', [data, length if use_length else None],
                 dict(kwargs, axis=axis, temperature=temperature, dtype=dtype,
                      use_length=use_length or None), 'softmax')


def log_softmax(data, length=None, axis=-1, temperature=None, dtype=None, use_length=False,
                **kwargs):
    """The log of :func:`softmax`, computed stably."""
    return _call('log_softmax', [data, length if use_length else None],
                 dict(kwargs, axis=axis, temperature=temperature, dtype=dtype,
                      use_length=use_length or None), 'log_softmax')


def fully_connected(x, weight, bias=None, num_hidden=None, no_bias=False, flatten=True,
                    **kwargs):
    """``x @ weight.T + bias`` (x flattened to 2-D first unless ``flatten=False``)."""
    num_hidden = weight.shape[0] if num_hidden is None and not is_symbol(weight) else num_hidden
    return _call('FullyConnected', [x, weight, None if no_bias else bias],
                 dict(kwargs, num_hidden=num_hidden, no_bias=no_bias or bias is None,
                      flatten=flatten), 'fully_connected')


def convolution(data, weight, bias=None, kernel=None, stride=None, dilate=None, pad=None,
                num_filter=None, num_group=1, workspace=1024, no_bias=False, cudnn_tune=None,
                cudnn_off=False, layout=None, **kwargs):
    """N-d convolution (channel-first unless `layout` says otherwise)."""
    if not is_symbol(weight):
        kernel = kernel or weight.shape[2:]
        num_filter = num_filter or weight.shape[0]
    return _call('Convolution', [data, weight, None if no_bias else bias],
                 dict(kwargs, kernel=kernel, stride=stride, dilate=dilate, pad=pad,
                      num_filter=num_filter, num_group=num_group, workspace=workspace,
                      no_bias=no_bias or bias is None, cudnn_tune=cudnn_tune,
                      cudnn_off=cudnn_off, layout=layout), 'convolution')


def deconvolution(data, weight, bias=None, kernel=None, stride=None, dilate=None, pad=None,
                  adj=None, target_shape=None, num_filter=None, num_group=1, workspace=512,
                  no_bias=True, cudnn_tune=None, cudnn_off=False, layout=None, **kwargs):
    """Transposed convolution."""
    if not is_symbol(weight):
        kernel = kernel or weight.shape[2:]
        num_filter = num_filter or weight.shape[1] * num_group
    return _call('Deconvolution', [data, weight, None if no_bias else bias],
                 dict(kwargs, kernel=kernel, stride=stride, dilate=dilate, pad=pad, adj=adj,
                      target_shape=target_shape, num_filter=num_filter, num_group=num_group,
                      workspace=workspace, no_bias=no_bias or bias is None,
                      cudnn_tune=cudnn_tune, cudnn_off=cudnn_off, layout=layout),
                 'deconvolution')


def pooling(data, kernel=None, pool_type='max', global_pool=False, cudnn_off=False,
            pooling_convention='valid', stride=None, pad=None, p_value=None,
            count_include_pad=None, layout=None, **kwargs):
    """Max, average, sum or Lp pooling over windows (or everything with ``global_pool``)."""
    return _call('Pooling', [data], dict(kwargs, kernel=kernel or (), pool_type=pool_type,
                                         global_pool=global_pool, cudnn_off=cudnn_off,
                                         pooling_convention=pooling_convention, stride=stride,
                                         pad=pad, p_value=p_value,
                                         count_include_pad=count_include_pad, layout=layout),
                 'pooling')


def batch_norm(x, gamma, beta, running_mean, running_var, eps=1e-3, momentum=0.9,
               fix_gamma=True, use_global_stats=False, output_mean_var=False, axis=1,
               cudnn_off=False, min_calib_range=None, max_calib_range=None, **kwargs):
    """Batch normalization; updates the running statistics in training mode."""
    return _call('BatchNorm', [x, gamma, beta, running_mean, running_var],
                 dict(kwargs, eps=eps, momentum=momentum, fix_gamma=fix_gamma,
                      use_global_stats=use_global_stats, output_mean_var=output_mean_var,
                      axis=axis, cudnn_off=cudnn_off), 'batch_norm')


def layer_norm(data, gamma, beta, axis=-1, eps=1e-5, output_mean_var=False, **kwargs):
    """Layer normalization over `axis`."""
    return _call('LayerNorm', [data, gamma, beta], dict(kwargs, axis=axis, eps=eps,
                                                        output_mean_var=output_mean_var),
                 'layer_norm')


def dropout(data, p=0.5, mode='training', axes=(), cudnn_off=False, **kwargs):
    """Zero elements with probability p in training mode (scaling the others by 1/(1-p))."""
    return _call('Dropout', [data], dict(kwargs, p=p, mode=mode, axes=axes or None,
                                         cudnn_off=cudnn_off), 'dropout')


def embedding(data, weight, input_dim=None, output_dim=None, dtype='float32',
              sparse_grad=False, **kwargs):
    """Rows of `weight` at the (integer) positions in `data`."""
    if not is_symbol(weight):
        input_dim = input_dim or weight.shape[0]
        output_dim = output_dim or weight.shape[1]
    return _call('Embedding', [data, weight], dict(kwargs, input_dim=input_dim,
                                                   output_dim=output_dim, dtype=dtype,
                                                   sparse_grad=sparse_grad or None),
                 'embedding')


def one_hot(data, depth=None, on_value=1.0, off_value=0.0, dtype='float32', **kwargs):
    """One-hot rows of length `depth` for the integer values of `data`."""
    return _call('one_hot', [data], dict(kwargs, depth=depth, on_value=on_value,
                                         off_value=off_value, dtype=dtype), 'one_hot')


def pick(data, index, axis=-1, mode='clip', keepdims=False, **kwargs):
    """The elements of `data` at positions `index` along `axis`."""
    return _call('pick', [data, index], dict(kwargs, axis=axis, mode=mode, keepdims=keepdims),
                 'pick')


def topk(data, axis=-1, k=1, ret_typ='indices', is_ascend=False, dtype='float32', **kwargs):
    """The k largest (or smallest) elements along `axis`: indices, values, both or a mask."""
    return _call('topk', [data], dict(kwargs, axis=axis, k=k, ret_typ=ret_typ,
                                      is_ascend=is_ascend, dtype=dtype), 'topk')


def sequence_mask(data, sequence_length=None, use_sequence_length=False, value=0.0, axis=0,
                  **kwargs):
    """Steps past each sequence's length set to `value`."""
    return _call('SequenceMask', [data, sequence_length if use_sequence_length else None],
                 dict(kwargs, use_sequence_length=use_sequence_length, value=value, axis=axis),
                 'sequence_mask')


def batch_dot(a, b, transpose_a=False, transpose_b=False, forward_stype=None, **kwargs):
    """Matrix products of matching matrices of two batches."""
    return _call('batch_dot', [a, b], dict(kwargs, transpose_a=transpose_a,
                                           transpose_b=transpose_b), 'batch_dot')


def batch_flatten(x, **kwargs):
    """Every axis after the first merged into one."""
    return _call('Flatten', [x], kwargs, 'batch_flatten')


def cast(data, dtype, **kwargs):
    """The values converted to `dtype`."""
    return _call('Cast', [data], dict(kwargs, dtype=dtype), 'cast')


def _elementwise(op_name, doc):
    def function(data, **kwargs):
        return _call(op_name, [data], kwargs, op_name)
    function.__name__ = function.__qualname__ = op_name
    function.__doc__ = doc
    return function


erf = _elementwise('erf', 'The error function.')
erfinv = _elementwise('erfinv', 'The inverse error function.')
gamma = _elementwise('gamma', 'The gamma function.')
gammaln = _elementwise('gammaln', 'The log of the absolute gamma function.')
shape_array = _elementwise('shape_array', 'The shape as an int64 array.')


def gather_nd(data, indices, **kwargs):
    """Elements of `data` at the positions in the columns of `indices`."""
    return _call('gather_nd', [data, indices], kwargs, 'gather_nd')


def smooth_l1(data, scalar=1.0, **kwargs):
    """The smooth L1 function (quadratic below 1/scalar**2)."""
    return _call('smooth_l1', [data], dict(kwargs, scalar=scalar), 'smooth_l1')


def slice(data, begin, end, step=(), **kwargs):  # noqa: A001  (MXNet's name)
    """A region of the input: begin, end and step per leading axis (None: the edge)."""
    return _call('slice', [data], dict(kwargs, begin=begin, end=end, step=step or None),
                 'slice')


def reshape_like(lhs, rhs, **kwargs):
    """`lhs` with the shape of `rhs`."""
    return _call('reshape_like', [lhs, rhs], kwargs, 'reshape_like')


def rnn(data=None, parameters=None, state=None, state_cell=None, sequence_length=None,
        state_size=None, num_layers=None, bidirectional=False, mode=None, p=0.0,
        state_outputs=False, projection_size=None, lstm_state_clip_min=None,
        lstm_state_clip_max=None, lstm_state_clip_nan=False, use_sequence_length=False,
        **kwargs):
    """Fused recurrent layers (rnn_relu, rnn_tanh, lstm, gru) over time-major `data`."""
    return _call('RNN', [data, parameters, state, state_cell,
                         sequence_length if use_sequence_length else None],
                 dict(kwargs, state_size=state_size, num_layers=num_layers,
                      bidirectional=bidirectional, mode=mode, p=p, state_outputs=state_outputs,
                      projection_size=projection_size, lstm_state_clip_min=lstm_state_clip_min,
                      lstm_state_clip_max=lstm_state_clip_max,
                      lstm_state_clip_nan=lstm_state_clip_nan or None,
                      use_sequence_length=use_sequence_length or None), 'rnn')


def roi_pooling(data, rois, pooled_size, spatial_scale, **kwargs):
    """Max pooling of regions of interest to `pooled_size`."""
    return _call('ROIPooling', [data, rois], dict(kwargs, pooled_size=pooled_size,
                                                  spatial_scale=spatial_scale), 'roi_pooling')


# ----------------------------------------------------------------------------------------------
# Operators of mx.npx's own

def reshape(a, newshape, reverse=False, order='C'):
    """Reshape with MXNet's codes: -1 infers, -2 copies a dimension, -3 drops a dimension of
    one, -4 copies the rest, -5 merges two dimensions, -6 splits one into the next two values.
    """
    if order != 'C':
        raise ValueError(f"npx.reshape: order={order!r}: arrays are row-major ('C')")
    newshape = (newshape,) if isinstance(newshape, int) else tuple(newshape)
    if is_symbol(a):
        return apply('_npx_reshape', [a], {'newshape': newshape, 'reverse': reverse})
    from ember.op.np_shape import npx_reshape_shape
    from ember.numpy._op import _view
    shape = npx_reshape_shape(a.shape, newshape, reverse)
    return _view(as_np(a), '_npx_reshape', {'newshape': newshape, 'reverse': reverse}, shape)


def arange_like(data, start=0.0, step=1.0, repeat=1, ctx=None, axis=None, **kwargs):
    """``start, start + step, ...`` (each `repeat` times) shaped like `data` (or along its
    `axis`)."""
    if is_symbol(data):
        raise NotForSymbol('npx.arange_like needs the shape of data: call it on arrays')
    length = data.size if axis is None else data.shape[axis]
    count = -(-length // repeat)
    values = _np_op.arange(start, start + step * count, step, ctx=ctx or data.context)
    if count and values.shape[0] != count:
        values = values[:count]
    if repeat > 1:
        values = _np_op.repeat(values, repeat)[:length]
    return values.reshape(data.shape) if axis is None else values


def nonzero(a):
    """Positions of the nonzero elements: an (N, a.ndim) int64 array, one row each."""
    positions = _np_op.nonzero(a)
    return _np_op.stack(positions, axis=-1) if positions else positions


def constraint_check(x, msg='Constraint violated!'):
    """Raise ValueError(msg) unless every element of bool array `x` is True; returns
    ``x.all()``."""
    result = _np_op.all(x)
    if not bool(result):
        raise ValueError(msg)
    return result


# Methods of mx.np arrays that are npx operators, as in MXNet.
for _name in ('relu', 'sigmoid', 'softmax', 'log_softmax', 'pick', 'one_hot', 'topk',
              'shape_array'):
    def _method(self, *args, _function=globals()[_name], **kwargs):
        return _function(self, *args, **kwargs)
    _method.__name__ = _name
    _method.__qualname__ = f'ndarray.{_name}'
    _method.__doc__ = f'``npx.{_name}(self, ...)``.'
    setattr(ndarray, _name, _method)



def _attach():
    """``mx.nd.npx`` and ``mx.sym.npx`` (the functions take arrays or Symbols alike)."""
    import sys
    from ember import symbol as _sym
    module = sys.modules[__name__]
    _nd.npx = _sym.npx = module


_attach()
