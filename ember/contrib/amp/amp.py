"""Automatic mixed precision: MXNet 1.x's ``mx.contrib.amp``.

``init(target_dtype)`` makes ``mx.nd`` and ``mx.sym`` (and so Gluon layers) cast the inputs of
the target operators (convolutions, dense layers) to 'float16' or 'bfloat16' and those of the
sensitive ones (exponentials, reductions, softmax, normalisations, losses) to float32, by the
lists of :mod:`ember.contrib.amp.lists`; it is called once per process, before the model is
built. ``init_trainer(trainer)`` gives a Gluon Trainer dynamic loss scaling: ``scale_loss``
multiplies the loss by the scale (from 2**16), a step whose gradients overflowed is skipped and
halves the scale, 2000 clean steps double it (up to 2**24); ``unscale`` divides the gradients
back before, say, clipping them.

``convert_symbol``, ``convert_model`` and ``convert_hybrid_block`` do the same to a float32
model that exists already, by inserting ``amp_cast`` and ``amp_multicast`` nodes into its
graph (for inference).

>>> import ember as mx
>>> from ember.contrib import amp
>>> net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=4, name='fc')
>>> low = amp.convert_symbol(net, target_dtype='bfloat16')
>>> [n.op.name for n in low.to_graph().nodes if n.op]
['amp_cast', 'amp_cast', 'amp_cast', 'FullyConnected']
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging

import numpy as np

from ember import ndarray, symbol
from ember.base import EmberError, dtype_of
from ember.contrib.amp import lists
from ember.contrib.amp.loss_scaler import LossScaler
from ember.op import registry
from ember.passes._rewrite import Rewriter, unique_name
from ember.symbol.graph import Entry, make_node

__all__ = ['init', 'init_trainer', 'scale_loss', 'unscale', 'convert_symbol', 'convert_model',
           'convert_hybrid_block', 'convert_bucketing_module', 'list_lp16_ops', 'list_fp32_ops', 'list_lp16_fp32_ops',
           'list_conditional_fp32_ops', 'list_widest_type_cast', 'list_loss_output_functions',
           'list_lp16_use_fp32_params']

_log = logging.getLogger(__name__)
bfloat16 = dtype_of('bfloat16')     # MXNet's name of the type (ml_dtypes' here)
_initialized = None          # the target dtype name once init() ran
_loss_scaler = None
_scaler_taken = False


def _target_name(target_dtype) -> str:
    try:
        name = dtype_of(target_dtype).name
    except TypeError:
        name = str(target_dtype)
    if name not in lists.TARGETS:
        raise ValueError(f'AMP target_dtype {target_dtype!r}: expected float16 or bfloat16')
    return name


# ----------------------------------------------------------------------------------------------
# The lists, as MXNet names them

def list_lp16_ops(target_dtype):
    """Operators run in the low-precision type."""
    return lists.target_ops(_target_name(target_dtype))


def list_fp32_ops(target_dtype):
    """Operators run in float32."""
    return lists.fp32_ops(_target_name(target_dtype))


def list_lp16_fp32_ops(target_dtype):
    """Operators that run in either."""
    return lists.lp16_fp32_ops(_target_name(target_dtype))


def list_conditional_fp32_ops(target_dtype):
    """(operator, attribute, values) run in float32 for those attribute values."""
    return lists.conditional_fp32_ops(_target_name(target_dtype))


def list_widest_type_cast(target_dtype):
    """Operators whose inputs are cast to their widest floating type."""
    return lists.widest_type_casts(_target_name(target_dtype))


def list_loss_output_functions(target_dtype):
    """Output layers scaled by the dynamic loss scale."""
    return lists.loss_output_functions(_target_name(target_dtype))


def list_lp16_use_fp32_params(target_dtype):
    """Operator -> inputs kept in float32 (None when there are none)."""
    return lists.fp32_params(_target_name(target_dtype)) or None


# ----------------------------------------------------------------------------------------------
# init: the namespaces cast as they call

def init(target_dtype='float16', target_precision_ops=None, conditional_fp32_ops=None,
         fp32_ops=None):
    """Cast the inputs of ``mx.nd`` and ``mx.sym`` operators by the AMP lists (or the lists
    given); once per process, before the model is built."""
    global _initialized, _loss_scaler
    target = _target_name(target_dtype)
    if _initialized is not None:
        if _initialized != target:
            raise EmberError(f'amp.init({target!r}): AMP is initialised for {_initialized} '
                             f'already; it cannot change in a process')
        return
    _initialized = target
    _log.info('Using AMP with %s', target)
    dtype = dtype_of(target)
    targets = list(target_precision_ops if target_precision_ops is not None
                   else lists.target_ops(target))
    fp32 = list(fp32_ops if fp32_ops is not None else lists.fp32_ops(target))
    conditional = list(conditional_fp32_ops if conditional_fp32_ops is not None
                       else lists.conditional_fp32_ops(target))
    params = lists.fp32_params(target)
    for name in targets:
        _wrap(name, lambda f, n=name: _casting(f, dtype, params.get(n, ())))
    for name in fp32:
        _wrap(name, lambda f: _casting(f, np.dtype(np.float32)))
    for name, attr, values in conditional:
        _wrap(name, lambda f, a=attr, v=tuple(values): _casting(f, np.dtype(np.float32),
                                                                when=(a, v)))
    for name in lists.widest_type_casts(target):
        _wrap(name, _widest)
    _loss_scaler = LossScaler()
    for name in lists.loss_output_functions(target):
        _wrap(name, _loss_scaled, symbols=False)


def _namespaces(symbols=True):
    """The modules whose operator functions AMP replaces."""
    import sys
    names = ['ember.ndarray', 'ember.nd', 'ember.ndarray._internal']
    if symbols:
        names += ['ember.symbol', 'ember.sym', 'ember.symbol._internal']
    return [sys.modules[n] for n in names if n in sys.modules]


def _wrap(name, make, symbols=True):
    """Replace operator `name` in every namespace that has it by ``make(original)``."""
    for module in _namespaces(symbols):
        original = module.__dict__.get(name)
        if original is None or getattr(original, '_amp_original', None) is not None:
            continue
        wrapped = functools.wraps(original)(make(original))
        wrapped._amp_original = original
        setattr(module, name, wrapped)


def _casting(f, dtype, fp32_params=(), when=None):
    """`f` with its floating inputs cast to `dtype` (`fp32_params` by name left alone; with
    `when` = (attribute, values) only when the call's attribute is one of the values)."""
    def call(*args, **kwargs):
        if when is not None and kwargs.get(when[0]) not in when[1]:
            return f(*args, **kwargs)
        if any(isinstance(a, symbol.Symbol) for a in list(args) + list(kwargs.values())):
            return _cast_symbol_inputs(f(*args, **kwargs), dtype, fp32_params)
        args = [_cast(a, dtype) for a in args]
        kwargs = {k: v if k in fp32_params else _cast(v, dtype) for k, v in kwargs.items()}
        return f(*args, **kwargs)
    return call


def _cast(value, dtype):
    if isinstance(value, ndarray.NDArray) and value._view.dtype != dtype \
            and value._view.dtype in _FLOATS:
        return ndarray.amp_cast(value, dtype=dtype)
    return value


_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64),
           dtype_of('bfloat16'))


def _widest(f):
    def call(*args, **kwargs):
        arrays = [a for a in list(args) + list(kwargs.values())
                  if isinstance(a, (ndarray.NDArray, symbol.Symbol))]
        if not arrays:
            return f(*args, **kwargs)
        if any(isinstance(a, symbol.Symbol) for a in arrays):
            cast = symbol.amp_multicast(*arrays, num_outputs=len(arrays))
            cast = [cast[i] for i in range(len(arrays))] if len(arrays) > 1 else [cast]
        else:
            widest = max((a._view.dtype for a in arrays if a._view.dtype in _FLOATS),
                         key=lambda d: d.itemsize, default=None)
            cast = [_cast(a, widest) if widest is not None else a for a in arrays]
        replaced = dict(zip(map(id, arrays), cast))
        args = [replaced.get(id(a), a) for a in args]
        kwargs = {k: replaced.get(id(v), v) for k, v in kwargs.items()}
        return f(*args, **kwargs)
    return call


def _loss_scaled(f):
    def call(*args, **kwargs):
        kwargs['grad_scale'] = kwargs.get('grad_scale', 1.0) * _loss_scaler.loss_scale
        return f(*args, **kwargs)
    return call


def _cast_symbol_inputs(result, dtype, fp32_params):
    """`result` (one operator's symbol) with ``amp_cast`` on its inputs."""
    graph = result.to_graph()
    position = graph.outputs[0].node
    node = graph.nodes[position]
    keep = _kept_slots(node, fp32_params)
    slots = {slot: dtype for slot in range(len(node.inputs)) if slot not in keep}
    return symbol.Symbol.from_graph(_insert_casts(graph, {position: slots}))


def _kept_slots(node, fp32_params):
    names = node.input_names()
    mutated = set(node.op.mutate_indices(node.attrs))
    return {i for i, name in enumerate(names) if name in fp32_params or i in mutated}


# ----------------------------------------------------------------------------------------------
# Converting existing models

def convert_symbol(sym, target_dtype='float16', target_dtype_ops=None, fp32_ops=None,
                   conditional_fp32_ops=None, excluded_sym_names=None, data_names=None,
                   cast_optional_params=False):
    """A mixed-precision copy of float32 symbol `sym`: ``amp_cast`` before the target and
    the float32 operators, ``amp_multicast`` before the widest-type ones. Nodes named in
    `excluded_sym_names` stay as they are. Parameters stay float32 (cast where they are read:
    `cast_optional_params` is accepted for MXNet's sake); given `data_names`, every other input
    is marked float32 (``__dtype__``), as MXNet does, so that a module binds from the data's
    types alone."""
    if not isinstance(sym, symbol.Symbol):
        raise TypeError(f'convert_symbol: expected a Symbol, got {type(sym).__name__}')
    target = _target_name(target_dtype)
    chosen = _lists(target, target_dtype_ops, fp32_ops, conditional_fp32_ops)
    excluded = set(excluded_sym_names or ())
    graph = sym.to_graph()
    plan = {}
    for position, node in enumerate(graph.nodes):
        if node.op is None or node.name in excluded:
            continue
        slots = _slots(node, target, chosen)
        if slots:
            plan[position] = slots
    if data_names is not None:
        graph = _params_float32(graph, set(data_names))
    return symbol.Symbol.from_graph(_insert_casts(graph, plan))


def _params_float32(graph, data_names):
    """`graph` with its non-data variables that have no dtype marked float32 (MXNet's flag 0)."""
    nodes = list(graph.nodes)
    for position in graph.input_nodes:
        node = nodes[position]
        if node.name not in data_names and '__dtype__' not in node.attr_text:
            nodes[position] = dataclasses.replace(
                node, attr_text={**node.attr_text, '__dtype__': '0'})
    return dataclasses.replace(graph, nodes=nodes)


def _lists(target, target_ops, fp32, conditional):
    chosen = {'target': list(target_ops if target_ops is not None
                             else lists.target_ops(target)),
              'fp32': list(fp32 if fp32 is not None else lists.fp32_ops(target)),
              'conditional': list(conditional if conditional is not None
                                  else lists.conditional_fp32_ops(target)),
              'widest': lists.widest_type_casts(target)}
    names = {'target': set(chosen['target']), 'fp32': set(chosen['fp32']),
             'conditional': {c[0] for c in chosen['conditional']}}
    for a, b in (('target', 'fp32'), ('target', 'conditional'), ('conditional', 'fp32')):
        common = names[a] & names[b]
        if common:
            raise ValueError(f'AMP: operators {sorted(common)} are in both the {a} and the '
                             f'{b} lists; an operator belongs to one')
    known = set(registry.all_ops())
    unknown = sorted((names['target'] | names['fp32'] | names['conditional']) - known)
    if unknown:
        raise ValueError(f'AMP: {unknown} are not operators Ember registers; the lists take '
                         f'names of mx.contrib.amp.list_lp16_ops, list_fp32_ops, '
                         f'list_lp16_fp32_ops and list_conditional_fp32_ops')
    return chosen


def _slots(node, target, chosen):
    """{input slot: dtype, or 'widest'} for one node."""
    name, keep = node.op.name, _kept_slots(node, lists.fp32_params(target).get(node.op.name,
                                                                               ()))
    free = [slot for slot in range(len(node.inputs)) if slot not in keep]
    if name in chosen['target']:
        return {slot: dtype_of(target) for slot in free}
    conditional = any(name == op and str(node.attrs.get(attr)) in values
                      for op, attr, values in chosen['conditional'])
    if name in chosen['fp32'] or conditional:
        return {slot: np.dtype(np.float32) for slot in free}
    if name in chosen['widest'] and len(free) > 1:
        return {slot: 'widest' for slot in free}
    return {}


def _insert_casts(graph, plan):
    """`graph` with, per node position in `plan`, its input slots cast: ``amp_cast`` to a
    dtype (one node per entry and dtype), or one ``amp_multicast`` over the 'widest' slots."""
    rewriter, taken, casts = Rewriter(graph), {n.name for n in graph.nodes}, {}
    cast_op, multicast_op = registry.get('amp_cast'), registry.get('amp_multicast')
    for position, node in enumerate(graph.nodes):
        slots = plan.get(position)
        if not slots:
            rewriter.copy(position)
            continue
        inputs = [rewriter.new(e) for e in node.inputs]
        widest = [slot for slot, how in slots.items() if how == 'widest']
        if widest:
            name = unique_name(f'{node.name}_amp_multicast', taken)
            cast = rewriter.add(make_node(multicast_op, name, {'num_outputs': len(widest)},
                                          [inputs[s] for s in widest]))
            for index, slot in enumerate(widest):
                inputs[slot] = Entry(cast, index)
        for slot, dtype in slots.items():
            if dtype == 'widest':
                continue
            entry = node.inputs[slot]
            found = casts.get((entry, dtype.name))
            if found is None:
                source = graph.nodes[entry.node].name
                name = unique_name(f'{source}_amp_cast_{dtype.name}', taken)
                found = Entry(rewriter.add(make_node(cast_op, name, {'dtype': dtype.name},
                                                     [inputs[slot]])), 0)
                casts[(entry, dtype.name)] = found
            inputs[slot] = found
        rewriter.place(position, dataclasses.replace(node, inputs=tuple(inputs)))
    return rewriter.finish()


def convert_model(sym, arg_params, aux_params, target_dtype='float16', target_dtype_ops=None,
                  fp32_ops=None, conditional_fp32_ops=None, excluded_sym_names=None,
                  cast_optional_params=False):
    """(converted symbol, arg_params, aux_params): :func:`convert_symbol` of `sym`, with the
    parameters as they are (they stay float32 and are cast where they are read)."""
    if not isinstance(arg_params, dict) or not isinstance(aux_params, dict):
        raise TypeError('convert_model: arg_params and aux_params must be dicts of name -> '
                        'NDArray')
    data_names = [n for n in sym.list_inputs() if n not in arg_params and n not in aux_params]
    converted = convert_symbol(sym, target_dtype, target_dtype_ops, fp32_ops,
                               conditional_fp32_ops, excluded_sym_names, data_names,
                               cast_optional_params)
    return converted, arg_params, aux_params


def convert_hybrid_block(block, target_dtype='float16', target_dtype_ops=None, fp32_ops=None,
                         conditional_fp32_ops=None, excluded_sym_names=None, ctx=None,
                         cast_optional_params=False):
    """A SymbolBlock running hybridized `block`'s graph in mixed precision, with `block`'s
    parameters (on `ctx`, default: where they are). `block` must have been hybridized and
    called once."""
    from ember.gluon import HybridBlock, SymbolBlock
    if not isinstance(block, HybridBlock):
        raise TypeError(f'convert_hybrid_block: expected a HybridBlock, got '
                        f'{type(block).__name__}')
    if not block._cached_graph:
        raise RuntimeError('convert_hybrid_block: call block.hybridize() and run it once first, '
                           'so that its graph exists')
    inputs, sym = block._cached_graph
    converted = convert_symbol(sym, target_dtype, target_dtype_ops, fp32_ops,
                               conditional_fp32_ops, excluded_sym_names,
                               [v.name for v in inputs], cast_optional_params)
    result = SymbolBlock(converted, inputs)
    values = {name: param.data() for name, param in block.collect_params().items()}
    for name, param in result.collect_params().items():
        if name in values:
            param.initialize(ctx=ctx if ctx is not None else values[name].context)
            param.set_data(values[name])
    return result


def convert_bucketing_module(bucketing_mod, target_dtype='float16', target_dtype_ops=None,
                             fp32_ops=None, conditional_fp32_ops=None, excluded_sym_names=None,
                             cast_optional_params=False):
    """A BucketingModule whose every bucket runs :func:`convert_symbol` of the bucket's symbol,
    with `bucketing_mod`'s parameters. `bucketing_mod` must be bound and initialised; the
    result comes bound for its default bucket's shapes (Ember's modules take parameters once
    bound), so it runs batches at once."""
    from ember.module import BucketingModule
    if not isinstance(bucketing_mod, BucketingModule):
        raise TypeError(f'convert_bucketing_module: expected a BucketingModule, got '
                        f'{type(bucketing_mod).__name__}')
    if not bucketing_mod.binded or not bucketing_mod.params_initialized:
        raise RuntimeError('convert_bucketing_module: bind the BucketingModule and initialise '
                           'its parameters first')
    _target_name(target_dtype)
    arg_params, aux_params = bucketing_mod.get_params()

    def sym_gen(bucket_key):
        sym, data_names, label_names = bucketing_mod._sym_gen(bucket_key)
        converted = convert_symbol(sym, target_dtype, target_dtype_ops, fp32_ops,
                                   conditional_fp32_ops, excluded_sym_names, data_names,
                                   cast_optional_params)
        return converted, data_names, label_names

    default = bucketing_mod._buckets[bucketing_mod.default_bucket_key]
    result = BucketingModule(sym_gen, default_bucket_key=bucketing_mod.default_bucket_key,
                             **bucketing_mod._module_args)
    result.bind(default.data_shapes, default.label_shapes or None,
                for_training=default.for_training)
    result.set_params(arg_params, aux_params)
    return result


# ----------------------------------------------------------------------------------------------
# Dynamic loss scaling

def init_trainer(optimizer_or_trainer):
    """Give a Gluon Trainer a dynamic loss scaler (after :func:`init`)."""
    global _scaler_taken
    from ember.gluon.trainer import Trainer
    if _initialized is None:
        raise EmberError('amp.init_trainer: call amp.init() first')
    if not isinstance(optimizer_or_trainer, Trainer):
        raise TypeError(f'amp.init_trainer: AMP works with a Gluon Trainer, got '
                        f'{type(optimizer_or_trainer).__name__}')
    scaler = _loss_scaler if not _scaler_taken else LossScaler()
    _scaler_taken = True
    optimizer_or_trainer._amp_loss_scaler = scaler
    optimizer_or_trainer._amp_original_scale = optimizer_or_trainer._scale


@contextlib.contextmanager
def scale_loss(loss, optimizer_or_trainer):
    """Yield the loss (or list of losses) times the loss scale; the trainer's gradient scale
    divides it out again."""
    trainer = optimizer_or_trainer
    scaler = getattr(trainer, '_amp_loss_scaler', None)
    if scaler is None:
        raise EmberError('amp.scale_loss: the trainer has no loss scaler; call '
                         'amp.init_trainer(trainer) first')
    trainer._scale = trainer._amp_original_scale / scaler.loss_scale
    if isinstance(loss, (list, tuple)):
        yield [item * scaler.loss_scale for item in loss]
    else:
        yield loss * scaler.loss_scale


def unscale(optimizer_or_trainer):
    """Divide the gradients by the loss scale now (to clip them, say); the next step does not
    divide them again."""
    from ember.gluon.trainer import Trainer
    if not isinstance(optimizer_or_trainer, Trainer):
        raise TypeError(f'amp.unscale: AMP works with a Gluon Trainer, got '
                        f'{type(optimizer_or_trainer).__name__}')
    trainer = optimizer_or_trainer
    for param in trainer._params:
        if param.grad_req != 'null':
            for grad in param.list_grad():
                grad[:] *= trainer._scale
    trainer._scale = 1.0
