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
from ember.ndarray.ndarray import waitall
from ember.numpy import _op as _np_op
from ember.numpy.multiarray import NotForSymbol, apply, as_np, is_symbol, ndarray
from ember.util import (get_cuda_compute_capability, is_np_array, is_np_shape, reset_np,
                        set_np)
from ember.op import registry
from ember.numpy_extension import image, random, utils  # noqa: F401
from ember.numpy_extension.operators import _call, operator_function
from ember.numpy_extension.utils import load, save

__all__ = ['Context', 'cpu', 'cpu_pinned', 'gpu', 'current_context', 'num_gpus',
           'gpu_memory_info', 'get_cuda_compute_capability', 'waitall', 'set_np', 'reset_np',
           'is_np_array', 'is_np_shape', 'load', 'save', 'random', 'utils', 'image',
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

def activation(data=None, act_type='relu', out=None, name=None, **kwargs):
    """``act_type`` in relu, sigmoid, tanh, softrelu, softsign, applied element-wise."""
    return _call('Activation', [data], dict(kwargs, act_type=act_type), 'activation', out)


def relu(data=None, out=None, name=None, **kwargs):
    """max(data, 0)."""
    return _call('relu', [data], kwargs, 'relu', out)


def sigmoid(data=None, out=None, name=None, **kwargs):
    """1 / (1 + exp(-data))."""
    return _call('sigmoid', [data], kwargs, 'sigmoid', out)


def leaky_relu(data=None, gamma=None, act_type='leaky', slope=0.25, lower_bound=0.125,
               upper_bound=0.334, out=None, name=None, **kwargs):
    """Leaky ReLU and its kin (prelu with `gamma`, elu, selu, gelu, rrelu)."""
    return _call('LeakyReLU', [data, gamma], dict(kwargs, act_type=act_type, slope=slope,
                                                  lower_bound=lower_bound,
                                                  upper_bound=upper_bound), 'leaky_relu', out)


def softmax(data=None, length=None, axis=-1, temperature=None, dtype=None, use_length=False,
            out=None, name=None, **kwargs):
    """Softmax along `axis` (over the first `length` elements with ``use_length``)."""
    return _call('softmax', [data, length if use_length else None],
                 dict(kwargs, axis=axis, temperature=temperature, dtype=dtype,
                      use_length=use_length or None), 'softmax', out)


def log_softmax(data=None, length=None, axis=-1, temperature=None, dtype=None,
                use_length=False, out=None, name=None, **kwargs):
    """The log of :func:`softmax`, computed stably."""
    return _call('log_softmax', [data, length if use_length else None],
                 dict(kwargs, axis=axis, temperature=temperature, dtype=dtype,
                      use_length=use_length or None), 'log_softmax', out)


def fully_connected(data=None, weight=None, bias=None, num_hidden=None, no_bias=False,
                    flatten=True, out=None, name=None, **kwargs):
    """``data @ weight.T + bias`` (data flattened to 2-D first unless ``flatten=False``)."""
    if num_hidden is None and not is_symbol(weight):
        num_hidden = weight.shape[0]
    return _call('FullyConnected', [data, weight, None if no_bias else bias],
                 dict(kwargs, num_hidden=num_hidden, no_bias=no_bias or bias is None,
                      flatten=flatten), 'fully_connected', out)


def convolution(data=None, weight=None, bias=None, kernel=None, stride=None, dilate=None,
                pad=None, num_filter=None, num_group=1, workspace=1024, no_bias=False,
                cudnn_tune=None, cudnn_off=False, layout=None, out=None, name=None, **kwargs):
    """N-d convolution (channel-first unless `layout` says otherwise)."""
    if not is_symbol(weight):
        kernel = kernel or weight.shape[2:]
        num_filter = num_filter or weight.shape[0]
    return _call('Convolution', [data, weight, None if no_bias else bias],
                 dict(kwargs, kernel=kernel, stride=stride, dilate=dilate, pad=pad,
                      num_filter=num_filter, num_group=num_group, workspace=workspace,
                      no_bias=no_bias or bias is None, cudnn_tune=cudnn_tune,
                      cudnn_off=cudnn_off, layout=layout), 'convolution', out)


def deconvolution(data=None, weight=None, bias=None, kernel=None, stride=None, dilate=None,
                  pad=None, adj=None, target_shape=None, num_filter=None, num_group=1,
                  workspace=512, no_bias=True, cudnn_tune=None, cudnn_off=False, layout=None,
                  out=None, name=None, **kwargs):
    """Transposed convolution."""
    if not is_symbol(weight):
        kernel = kernel or weight.shape[2:]
        num_filter = num_filter or weight.shape[1] * num_group
    return _call('Deconvolution', [data, weight, None if no_bias else bias],
                 dict(kwargs, kernel=kernel, stride=stride, dilate=dilate, pad=pad, adj=adj,
                      target_shape=target_shape, num_filter=num_filter, num_group=num_group,
                      workspace=workspace, no_bias=no_bias or bias is None,
                      cudnn_tune=cudnn_tune, cudnn_off=cudnn_off, layout=layout),
                 'deconvolution', out)


def pooling(data=None, kernel=None, pool_type='max', global_pool=False, cudnn_off=False,
            pooling_convention='valid', stride=None, pad=None, p_value=None,
            count_include_pad=None, layout=None, out=None, name=None, **kwargs):
    """Max, average, sum or Lp pooling over windows (or everything with ``global_pool``)."""
    return _call('Pooling', [data], dict(kwargs, kernel=kernel or (), pool_type=pool_type,
                                         global_pool=global_pool, cudnn_off=cudnn_off,
                                         pooling_convention=pooling_convention, stride=stride,
                                         pad=pad, p_value=p_value,
                                         count_include_pad=count_include_pad, layout=layout),
                 'pooling', out)


def batch_norm(data=None, gamma=None, beta=None, moving_mean=None, moving_var=None, eps=1e-3,
               momentum=0.9, fix_gamma=True, use_global_stats=False, output_mean_var=False,
               axis=1, cudnn_off=False, min_calib_range=None, max_calib_range=None, out=None,
               name=None, **kwargs):
    """Batch normalization; updates the moving statistics in training mode."""
    return _call('BatchNorm', [data, gamma, beta, moving_mean, moving_var],
                 dict(kwargs, eps=eps, momentum=momentum, fix_gamma=fix_gamma,
                      use_global_stats=use_global_stats, output_mean_var=output_mean_var,
                      axis=axis, cudnn_off=cudnn_off), 'batch_norm', out)


def layer_norm(data=None, gamma=None, beta=None, axis=-1, eps=1e-5, output_mean_var=False,
               out=None, name=None, **kwargs):
    """Layer normalization over `axis`."""
    return _call('LayerNorm', [data, gamma, beta], dict(kwargs, axis=axis, eps=eps,
                                                        output_mean_var=output_mean_var),
                 'layer_norm', out)


def dropout(data=None, p=0.5, mode='training', axes=(), cudnn_off=False, out=None, name=None,
            **kwargs):
    """Zero elements with probability p in training mode (scaling the others by 1/(1-p))."""
    return _call('Dropout', [data], dict(kwargs, p=p, mode=mode, axes=axes or None,
                                         cudnn_off=cudnn_off), 'dropout', out)


def embedding(data=None, weight=None, input_dim=None, output_dim=None, dtype='float32',
              sparse_grad=False, out=None, name=None, **kwargs):
    """Rows of `weight` at the (integer) positions in `data`."""
    if not is_symbol(weight):
        input_dim = input_dim or weight.shape[0]
        output_dim = output_dim or weight.shape[1]
    return _call('Embedding', [data, weight], dict(kwargs, input_dim=input_dim,
                                                   output_dim=output_dim, dtype=dtype,
                                                   sparse_grad=sparse_grad or None),
                 'embedding', out)


def one_hot(indices=None, depth=None, on_value=1.0, off_value=0.0, dtype='float32', out=None,
            name=None, **kwargs):
    """One-hot rows of length `depth` for the integer values of `indices`."""
    return _call('one_hot', [indices], dict(kwargs, depth=depth, on_value=on_value,
                                            off_value=off_value, dtype=dtype), 'one_hot', out)


def pick(data=None, index=None, axis=-1, keepdims=False, mode='clip', out=None, name=None,
         **kwargs):
    """The elements of `data` at positions `index` along `axis`."""
    return _call('pick', [data, index], dict(kwargs, axis=axis, mode=mode, keepdims=keepdims),
                 'pick', out)


def topk(data=None, axis=-1, k=1, ret_typ='indices', is_ascend=False, dtype='float32',
         out=None, name=None, **kwargs):
    """The k largest (or smallest) elements along `axis`: indices, values, both or a mask."""
    return _call('topk', [data], dict(kwargs, axis=axis, k=k, ret_typ=ret_typ,
                                      is_ascend=is_ascend, dtype=dtype), 'topk', out)


def sequence_mask(data=None, sequence_length=None, use_sequence_length=False, value=0.0,
                  axis=0, out=None, name=None, **kwargs):
    """Steps past each sequence's length set to `value`."""
    return _call('SequenceMask', [data, sequence_length if use_sequence_length else None],
                 dict(kwargs, use_sequence_length=use_sequence_length, value=value, axis=axis),
                 'sequence_mask', out)


def batch_dot(lhs=None, rhs=None, transpose_a=False, transpose_b=False, forward_stype=None,
              out=None, name=None, **kwargs):
    """Matrix products of matching matrices of two batches."""
    return _call('batch_dot', [lhs, rhs], dict(kwargs, transpose_a=transpose_a,
                                               transpose_b=transpose_b), 'batch_dot', out)


def batch_flatten(data=None, out=None, name=None, **kwargs):
    """Every axis after the first merged into one."""
    return _call('Flatten', [data], kwargs, 'batch_flatten', out)


def cast(data=None, dtype=None, out=None, name=None, **kwargs):
    """The values converted to `dtype`."""
    return _call('Cast', [data], dict(kwargs, dtype=dtype), 'cast', out)


def _elementwise(op_name, doc):
    def function(data=None, out=None, name=None, **kwargs):
        return _call(op_name, [data], kwargs, op_name, out)
    function.__name__ = function.__qualname__ = op_name
    function.__doc__ = doc
    return function


erf = _elementwise('erf', 'The error function.')
erfinv = _elementwise('erfinv', 'The inverse error function.')
gamma = _elementwise('gamma', 'The gamma function.')
gammaln = _elementwise('gammaln', 'The log of the absolute gamma function.')
shape_array = _elementwise('shape_array', 'The shape as an int64 array.')


def gather_nd(data=None, indices=None, out=None, name=None, **kwargs):
    """Elements of `data` at the positions in the columns of `indices`."""
    return _call('gather_nd', [data, indices], kwargs, 'gather_nd', out)


def smooth_l1(data=None, scalar=1.0, out=None, name=None, **kwargs):
    """The smooth L1 function (quadratic below 1/scalar**2)."""
    return _call('smooth_l1', [data], dict(kwargs, scalar=scalar), 'smooth_l1', out)


def slice(data=None, begin=None, end=None, step=(), out=None, name=None,  # noqa: A001
          **kwargs):
    """A region of the input: begin, end and step per leading axis (None: the edge)."""
    return _call('slice', [data], dict(kwargs, begin=begin, end=end, step=step or None),
                 'slice', out)


def reshape_like(lhs=None, rhs=None, lhs_begin=None, lhs_end=None, rhs_begin=None,
                 rhs_end=None, out=None, name=None, **kwargs):
    """`lhs` with the dimensions ``[lhs_begin, lhs_end)`` of its shape replaced by those
    ``[rhs_begin, rhs_end)`` of `rhs` (the whole shapes by default)."""
    if (lhs_begin, lhs_end, rhs_begin, rhs_end) == (None,) * 4:
        return _call('reshape_like', [lhs, rhs], kwargs, 'reshape_like', out)
    if is_symbol(lhs) or is_symbol(rhs):
        raise NotForSymbol('npx.reshape_like with begin/end needs the shapes: call it on '
                           'arrays')
    left, right = lhs.shape, rhs.shape
    shape = left[:lhs_begin or 0] + right[rhs_begin:rhs_end] + (
        left[lhs_end:] if lhs_end is not None else ())
    result = _np_op.reshape(lhs, shape)
    if out is not None:
        out[...] = result
        return out
    return result


def rnn(data=None, parameters=None, state=None, state_cell=None, sequence_length=None,
        state_size=None, num_layers=None, bidirectional=False, mode=None, p=0.0,
        state_outputs=False, projection_size=None, lstm_state_clip_min=None,
        lstm_state_clip_max=None, lstm_state_clip_nan=False, use_sequence_length=False,
        out=None, name=None, **kwargs):
    """Fused recurrent layers (rnn_relu, rnn_tanh, lstm, gru) over time-major `data`."""
    return _call('RNN', [data, parameters, state, state_cell,
                         sequence_length if use_sequence_length else None],
                 dict(kwargs, state_size=state_size, num_layers=num_layers,
                      bidirectional=bidirectional, mode=mode, p=p, state_outputs=state_outputs,
                      projection_size=projection_size, lstm_state_clip_min=lstm_state_clip_min,
                      lstm_state_clip_max=lstm_state_clip_max,
                      lstm_state_clip_nan=lstm_state_clip_nan or None,
                      use_sequence_length=use_sequence_length or None), 'rnn', out)


def roi_pooling(data=None, rois=None, pooled_size=None, spatial_scale=None, out=None,
                name=None, **kwargs):
    """Max pooling of regions of interest to `pooled_size`."""
    return _call('ROIPooling', [data, rois], dict(kwargs, pooled_size=pooled_size,
                                                  spatial_scale=spatial_scale), 'roi_pooling',
                 out)


# ----------------------------------------------------------------------------------------------
# Operators of mx.npx's own

def _no_more(function, kwargs):
    if kwargs:
        raise TypeError(f'npx.{function}: unknown arguments {sorted(kwargs)}')


def reshape(a, newshape, reverse=False, order='C', out=None, name=None, **kwargs):
    """Reshape with MXNet's codes: -1 infers, -2 copies a dimension, -3 drops a dimension of
    one, -4 copies the rest, -5 merges two dimensions, -6 splits one into the next two values.
    """
    _no_more('reshape', kwargs)
    if out is not None:
        out[...] = reshape(a, newshape, reverse, order)
        return out
    if order != 'C':
        raise ValueError(f"npx.reshape: order={order!r}: arrays are row-major ('C')")
    newshape = (newshape,) if isinstance(newshape, int) else tuple(newshape)
    if is_symbol(a):
        return apply('_npx_reshape', [a], {'newshape': newshape, 'reverse': reverse})
    from ember.op.np_shape import npx_reshape_shape
    from ember.numpy._op import _view
    shape = npx_reshape_shape(a.shape, newshape, reverse)
    return _view(as_np(a), '_npx_reshape', {'newshape': newshape, 'reverse': reverse}, shape)


def arange_like(data=None, start=0.0, step=1.0, repeat=1, ctx=None, axis=None, out=None,
                name=None, **kwargs):
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
    result = values.reshape(data.shape) if axis is None else values
    if out is not None:
        out[...] = result
        return out
    return result


def nonzero(a=None, out=None, name=None, **kwargs):
    """Positions of the nonzero elements: an (N, a.ndim) int64 array, one row each (`a` may
    also come as ``x``, the operator's input name)."""
    a = kwargs.pop('x', a)
    _no_more('nonzero', kwargs)
    if out is not None:
        out[...] = nonzero(a)
        return out
    positions = _np_op.nonzero(a)
    return _np_op.stack(positions, axis=-1) if positions else positions


def constraint_check(x=None, msg='Constraint violated!', out=None, name=None, **kwargs):
    """Raise ValueError(msg) unless every element of bool array `x` (the operator's input
    ``input``) is True; returns ``x.all()``."""
    x = kwargs.pop('input', x)
    _no_more('constraint_check', kwargs)
    result = _np_op.all(x, out=out)
    if not bool(result):
        raise ValueError(msg)
    return result


# ----------------------------------------------------------------------------------------------
# Operators of other families, where they are registered (the SSD operators of mx.nd.contrib)

_REGISTERED_ELSEWHERE = {'multibox_prior': '_contrib_MultiBoxPrior',
                         'multibox_target': '_contrib_MultiBoxTarget',
                         'multibox_detection': '_contrib_MultiBoxDetection'}


for _public, _op_name in _REGISTERED_ELSEWHERE.items():
    if _op_name in registry.all_ops():
        globals()[_public] = operator_function(_op_name, _public)
        __all__.append(_public)


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
    _nd.npx = _nd.numpy_extension = _sym.npx = _sym.numpy_extension = module
    for name in ('ember.ndarray.numpy_extension', 'ember.symbol.numpy_extension'):
        sys.modules.setdefault(name, module)
        sys.modules.setdefault(name + '.random', random)
        sys.modules.setdefault(name + '.image', image)


_attach()
