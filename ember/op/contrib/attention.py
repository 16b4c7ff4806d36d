"""MXNet's interleaved attention products (``interleaved_matmul_*``).

Projections arrive as (sequence, batch, heads * parts * head_dim) with each head's parts side by
side: self-attention's ``queries_keys_values`` holds (q, k, v) per head, encoder-decoder
attention's ``keys_values`` holds (k, v). Scores come out as (batch * heads, query length, key
length), with the queries scaled by 1/sqrt(head_dim); weighted values go back to (sequence,
batch, heads * head_dim).

>>> import numpy as np
>>> from ember.op import registry
>>> qkv = np.ones((2, 1, 6))          # 2 steps, batch 1, 1 head of size 2
>>> op, out = registry.get("_contrib_interleaved_matmul_selfatt_qk"), np.empty((1, 2, 2))
>>> op.kernel({'heads': 1}, [qkv], [out], registry.KernelContext(None))
>>> out.round(3).tolist()
[[[1.414, 1.414], [1.414, 1.414]]]
"""
from __future__ import annotations

import math

import numpy as np

from ember.op.host import register
from ember.op.registry import Param, ShapeError, p_int, same_type

__all__ = []

HEADS = (Param('heads', p_int, doc='The number of attention heads.'),)


def _parts(x, heads, parts):
    """(seq, batch, heads*parts*dim) -> (parts, batch*heads, seq, dim) views."""
    seq, batch, width = x.shape
    dim = width // (heads * parts)
    split = x.reshape(seq, batch, heads, parts, dim)
    return np.moveaxis(split, 3, 0).transpose(0, 2, 3, 1, 4).reshape(parts, batch * heads,
                                                                       seq, dim)


def _merge(parts_array, seq, batch, heads):
    """(parts, batch*heads, seq, dim) -> (seq, batch, heads*parts*dim)."""
    parts, _, _, dim = parts_array.shape
    split = parts_array.reshape(parts, batch, heads, seq, dim)
    return split.transpose(3, 1, 2, 0, 4).reshape(seq, batch, heads * parts * dim)


def _heads_of(seq, batch, heads):
    """(batch*heads, seq, dim) -> (seq, batch, heads*dim)."""
    _, _, dim = seq.shape
    return seq.reshape(batch, heads, -1, dim).transpose(2, 0, 1, 3).reshape(-1, batch,
                                                                            heads * dim)


def _width_check(shape, heads, parts, what):
    if len(shape) != 3:
        raise ShapeError(f'{what} must be (sequence, batch, features), got shape {shape}')
    if heads < 1 or shape[2] % (heads * parts):
        raise ShapeError(f'{what} has {shape[2]} features, not a multiple of heads * {parts} '
                         f'= {heads * parts}')
    return shape[2] // (heads * parts)


def _scale(dim):
    return 1.0 / math.sqrt(dim)


# ----------------------------------------------------------------------------------------------
# Self-attention.

def _selfatt_qk_shape(attrs, in_shapes):
    (qkv,) = in_shapes
    if qkv is None:
        return list(in_shapes), [None]
    _width_check(qkv, attrs['heads'], 3, 'queries_keys_values')
    return list(in_shapes), [(qkv[1] * attrs['heads'], qkv[0], qkv[0])]


def _selfatt_qk(attrs, ins, outs, ctx):
    q, k, _ = _parts(ins[0], attrs['heads'], 3)
    np.matmul(q * _scale(q.shape[-1]), np.swapaxes(k, 1, 2), out=outs[0])


def _selfatt_qk_backward(attrs, ins, outs, ctx):
    grad, qkv = ins
    q, k, _ = _parts(qkv, attrs['heads'], 3)
    scale = _scale(q.shape[-1])
    grads = np.stack([grad @ k * scale, np.swapaxes(grad, 1, 2) @ q * scale, np.zeros_like(q)])
    outs[0][...] = _merge(grads, qkv.shape[0], qkv.shape[1], attrs['heads'])


def _selfatt_valatt_shape(attrs, in_shapes):
    qkv, att = in_shapes
    if qkv is None:
        return list(in_shapes), [None]
    dim = _width_check(qkv, attrs['heads'], 3, 'queries_keys_values')
    want = (qkv[1] * attrs['heads'], qkv[0], qkv[0])
    if att is not None and tuple(att) != want:
        raise ShapeError(f'attention must have shape {want}, got {att}')
    return [qkv, want], [(qkv[0], qkv[1], attrs['heads'] * dim)]


def _selfatt_valatt(attrs, ins, outs, ctx):
    qkv, att = ins
    _, _, v = _parts(qkv, attrs['heads'], 3)
    outs[0][...] = _heads_of(att @ v, qkv.shape[1], attrs['heads'])


def _selfatt_valatt_backward(attrs, ins, outs, ctx):
    grad, qkv, att = ins
    heads = attrs['heads']
    q, _, v = _parts(qkv, heads, 3)
    g = _parts(grad, heads, 1)[0]
    zeros = np.zeros_like(q)
    outs[0][...] = _merge(np.stack([zeros, zeros, np.swapaxes(att, 1, 2) @ g]), qkv.shape[0],
                          qkv.shape[1], heads)
    np.matmul(g, np.swapaxes(v, 1, 2), out=outs[1])


# ----------------------------------------------------------------------------------------------
# Encoder-decoder attention.

def _encdec_qk_shape(attrs, in_shapes):
    queries, kv = in_shapes
    if queries is None or kv is None:
        return list(in_shapes), [None]
    dim = _width_check(queries, attrs['heads'], 1, 'queries')
    if _width_check(kv, attrs['heads'], 2, 'keys_values') != dim or kv[1] != queries[1]:
        raise ShapeError(f'keys_values {kv} must hold 2 * heads * {dim} features for the '
                         f'batch of queries {queries}')
    return list(in_shapes), [(queries[1] * attrs['heads'], queries[0], kv[0])]


def _encdec_qk(attrs, ins, outs, ctx):
    queries, kv = ins
    q = _parts(queries, attrs['heads'], 1)[0]
    k, _ = _parts(kv, attrs['heads'], 2)
    np.matmul(q * _scale(q.shape[-1]), np.swapaxes(k, 1, 2), out=outs[0])


def _encdec_qk_backward(attrs, ins, outs, ctx):
    grad, queries, kv = ins
    heads = attrs['heads']
    q = _parts(queries, heads, 1)[0]
    k, v = _parts(kv, heads, 2)
    scale = _scale(q.shape[-1])
    outs[0][...] = _merge((grad @ k * scale)[None], queries.shape[0], queries.shape[1], heads)
    outs[1][...] = _merge(np.stack([np.swapaxes(grad, 1, 2) @ q * scale, np.zeros_like(v)]),
                          kv.shape[0], kv.shape[1], heads)


def _encdec_valatt_shape(attrs, in_shapes):
    kv, att = in_shapes
    if kv is None or att is None:
        return list(in_shapes), [None]
    dim = _width_check(kv, attrs['heads'], 2, 'keys_values')
    if len(att) != 3 or att[0] != kv[1] * attrs['heads'] or att[2] != kv[0]:
        raise ShapeError(f'attention must be (batch*heads, query length, {kv[0]}), got {att}')
    return list(in_shapes), [(att[1], kv[1], attrs['heads'] * dim)]


def _encdec_valatt(attrs, ins, outs, ctx):
    kv, att = ins
    _, v = _parts(kv, attrs['heads'], 2)
    outs[0][...] = _heads_of(att @ v, kv.shape[1], attrs['heads'])


def _encdec_valatt_backward(attrs, ins, outs, ctx):
    grad, kv, att = ins
    heads = attrs['heads']
    k, v = _parts(kv, heads, 2)
    g = _parts(grad, heads, 1)[0]
    outs[0][...] = _merge(np.stack([np.zeros_like(k), np.swapaxes(att, 1, 2) @ g]),
                          kv.shape[0], kv.shape[1], heads)
    np.matmul(g, np.swapaxes(v, 1, 2), out=outs[1])


def _backward_shapes(attrs, shapes):
    return list(shapes), list(shapes[1:])


def _backward_types(attrs, dtypes):
    return list(dtypes), list(dtypes[1:])


def _declare(name, kernel, backward, inputs, infer_shape, doc):
    register(f'_contrib_interleaved_matmul_{name}', kernel, inputs=inputs,
             infer_shape=infer_shape, infer_type=same_type, params=HEADS,
             gradient=lambda F, attrs, ins, outs, og: _as_list(getattr(
                 F, f'_backward_interleaved_matmul_{name}')(og[0], *ins, **attrs), len(ins)),
             doc=doc)
    register(f'_backward_interleaved_matmul_{name}', backward,
             inputs=('out_grad',) + inputs, outputs=tuple(f'{n}_grad' for n in inputs),
             infer_shape=_backward_shapes, infer_type=_backward_types, params=HEADS,
             doc=f'The gradient of interleaved_matmul_{name}.')


def _as_list(grads, count):
    return [grads] if count == 1 else list(grads)


_declare('selfatt_qk', _selfatt_qk, _selfatt_qk_backward, ('queries_keys_values',),
         _selfatt_qk_shape,
         'Self-attention scores q*k^T/sqrt(head_dim) per head from interleaved projections.')
_declare('selfatt_valatt', _selfatt_valatt, _selfatt_valatt_backward,
         ('queries_keys_values', 'attention'), _selfatt_valatt_shape,
         'Self-attention output: the attention weights times the interleaved values.')
_declare('encdec_qk', _encdec_qk, _encdec_qk_backward, ('queries', 'keys_values'),
         _encdec_qk_shape,
         'Encoder-decoder scores q*k^T/sqrt(head_dim) per head from interleaved keys.')
_declare('encdec_valatt', _encdec_valatt, _encdec_valatt_backward,
         ('keys_values', 'attention'), _encdec_valatt_shape,
         'Encoder-decoder output: the attention weights times the interleaved values.')
