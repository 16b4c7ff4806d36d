"""MXNet's ``mxnet.numpy_op_fallback``: NumPy computations as custom operators, so that they
can run inside graphs (``mx.nd.np._internal.<name>`` and ``mx.sym.np._internal.<name>``).

:func:`register` registers a :class:`~ember.operator.CustomOpProp` under a name and adds
``Custom(..., op_type=name)`` to both ``_internal`` namespaces; the operators MXNet registers
this way are here too: ``empty_like_fallback``, ``resize_fallback``,
``unravel_index_fallback`` and ``mvn_fallback`` (no gradients).

>>> import ember as mx
>>> from ember import numpy as np
>>> import ember.numpy_op_fallback
>>> mx.nd.np._internal.resize_fallback(np.arange(3.0), new_shape=(2, 2))
array([[0., 1.],
       [2., 0.]])
"""
from __future__ import annotations

import ast

import numpy as onp

from ember import operator
from ember.base import EmberError, dtype_of
from ember.numpy import ndarray_namespace, symbol_namespace
from ember.numpy import linalg as _linalg
from ember.numpy import random as _random
from ember.numpy.multiarray import array, as_np
from ember.numpy import _op
from ember.util import np_array, use_np

__all__ = ['register', 'np_array', 'use_np', 'EmptyLike', 'EmptyLikeProp', 'Resize',
           'ResizeProp', 'Unravel_index', 'Unravel_indexProp', 'MultivariateNormal',
           'MultivariateNormalProp']


def register(op_name, imperative=True, symbolic=True):
    """Class decorator: register a CustomOpProp as op_type `op_name` and add
    ``op_name(*inputs, **params)`` to ``mx.nd.np._internal`` (`imperative`) and
    ``mx.sym.np._internal`` (`symbolic`)."""
    def save(namespace, call):
        if hasattr(namespace, op_name):
            raise ValueError(f'{op_name} is already in {namespace.__name__}')
        setattr(namespace, op_name, call)

    def decorator(prop_cls):
        with np_array():
            prop_cls = operator.register(op_name)(prop_cls)
        if imperative:
            save(ndarray_namespace._internal, _imperative(op_name))
        if symbolic:
            save(symbol_namespace._internal, _symbolic(op_name))
        return prop_cls
    return decorator


def _imperative(op_name):
    def call(*inputs, **kwargs):
        result = operator.Custom(*inputs, op_type=op_name, **kwargs)
        return [as_np(r) for r in result] if isinstance(result, list) else as_np(result)
    call.__name__ = op_name
    return call


def _symbolic(op_name):
    def call(*inputs, **kwargs):
        from ember import symbol
        from ember.numpy.symbol import as_np_symbol
        return as_np_symbol(symbol.Custom(*inputs, op_type=op_name, **kwargs))
    call.__name__ = op_name
    return call


def _no_gradient(name):
    raise EmberError(f'{name} (a NumPy fallback) has no gradient')


def _literal(text):
    return ast.literal_eval(text) if isinstance(text, str) else text


# ----------------------------------------------------------------------------------------------

@use_np
class EmptyLike(operator.CustomOp):
    """An array like the input, its values not set (NumPy's ``empty_like``)."""

    def __init__(self, dtype, order, subok, shape):
        super().__init__()
        self._dtype, self._order, self._subok, self._shape = dtype, order, subok, shape

    def forward(self, is_train, req, in_data, out_data, aux):
        values = onp.empty_like(in_data[0].asnumpy(), dtype=self._dtype, order=self._order,
                                subok=self._subok, shape=self._shape)
        self.assign(out_data[0], req[0], array(values, dtype=values.dtype,
                                               ctx=in_data[0].context))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        _no_gradient('empty_like')


@register('empty_like_fallback')
class EmptyLikeProp(operator.CustomOpProp):
    def __init__(self, dtype, order, subok, shape):
        super().__init__(need_top_grad=True)
        self._dtype = None if dtype in (None, 'None') else dtype
        self._order = order
        self._subok = bool(_literal(subok))
        self._shape = _literal(shape)

    def list_arguments(self):
        return ['prototype']

    def infer_shape(self, in_shape):
        shape = in_shape[0] if self._shape is None else tuple(onp.atleast_1d(self._shape))
        return (in_shape[0],), (shape,), ()

    def infer_type(self, in_type):
        out = in_type[0] if self._dtype is None else dtype_of(self._dtype)
        return (in_type[0],), (out,), ()

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return EmptyLike(self._dtype, self._order, self._subok, self._shape)


@use_np
class Resize(operator.CustomOp):
    """NumPy's ``resize``: the flattened input repeated or cut to `new_shape`."""

    def __init__(self, new_shape):
        super().__init__()
        self._new_shape = new_shape

    def forward(self, is_train, req, in_data, out_data, aux):
        values = onp.resize(in_data[0].asnumpy(), self._new_shape)
        self.assign(out_data[0], req[0], array(values, dtype=values.dtype,
                                               ctx=in_data[0].context))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        _no_gradient('resize')


@register('resize_fallback')
class ResizeProp(operator.CustomOpProp):
    def __init__(self, new_shape):
        super().__init__(need_top_grad=True)
        self._new_shape = _literal(new_shape)

    def list_arguments(self):
        return ['a']

    def infer_shape(self, in_shape):
        shape = (self._new_shape,) if onp.isscalar(self._new_shape) else tuple(self._new_shape)
        return (in_shape[0],), (shape,), ()

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return Resize(self._new_shape)


@use_np
class Unravel_index(operator.CustomOp):  # noqa: N801  (MXNet's name)
    """NumPy's ``unravel_index``: flat positions as rows of coordinates."""

    def __init__(self, shape):
        super().__init__()
        self._shape = shape

    def forward(self, is_train, req, in_data, out_data, aux):
        indices = in_data[0].asnumpy()
        found = onp.stack(onp.unravel_index(indices.astype(onp.int64), self._shape))
        self.assign(out_data[0], req[0], array(found.astype(indices.dtype), dtype=indices.dtype,
                                               ctx=in_data[0].context))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        _no_gradient('unravel_index')


@register('unravel_index_fallback')
class Unravel_indexProp(operator.CustomOpProp):  # noqa: N801  (MXNet's name)
    def __init__(self, shape):
        super().__init__(need_top_grad=True)
        self._shape = _literal(shape)

    def list_arguments(self):
        return ['indices']

    def infer_shape(self, in_shape):
        count = 1 if onp.isscalar(self._shape) else len(self._shape)
        return (in_shape[0],), ((count,) + tuple(in_shape[0]),), ()

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return Unravel_index(self._shape)


@use_np
class MultivariateNormal(operator.CustomOp):
    """Draws of a multivariate normal distribution: loc + cholesky(cov) @ z."""

    def __init__(self, size=None):
        super().__init__()
        self._size = size

    def forward(self, is_train, req, in_data, out_data, aux):
        loc, cov = as_np(in_data[0]), as_np(in_data[1])
        scale = _linalg.cholesky(cov.astype('float32')).astype(cov.dtype) \
            if cov.dtype == onp.float16 else _linalg.cholesky(cov)
        noise = _random.normal(size=out_data[0].shape, dtype=loc.dtype, ctx=loc.context)
        self.assign(out_data[0], req[0], loc + _op.einsum('...jk,...j->...k', scale, noise))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        _no_gradient('random.multivariate_normal')


@register('mvn_fallback')
class MultivariateNormalProp(operator.CustomOpProp):
    def __init__(self, size=None):
        super().__init__(need_top_grad=True)
        self._size = None if size in (None, 'None') else _literal(size)

    def list_arguments(self):
        return ['mean', 'variance']

    def infer_shape(self, in_shape):
        loc, cov = in_shape
        size = () if self._size is None else tuple(onp.atleast_1d(self._size))
        return (loc, cov), (size + tuple(loc),), ()

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return MultivariateNormal(self._size)

