"""Operators that graph passes emit: a fused chain of element-wise operators, and a convolution
or dense layer fused with its residual add and activation.

``_FusedElemwise`` (from :mod:`ember.passes.fusion`) runs a chain, or small DAG, of element-wise
operators in one pass over memory. Its ``chain`` attribute describes the steps (see
:func:`chain_text`). The arrays are cut into blocks of about 64K elements and every step runs on a
block before the next block starts, so intermediate values stay in the cache instead of going
through memory. Each step calls its own operator's kernel, so results equal the unfused graph's.
The block function is Python source generated once per chain and compiled with ``compile()``,
cached by the chain's text; ``MXNET_FUSION_VERBOSE=1`` prints it on stderr. On a GPU the chain is
one CUDA kernel (:mod:`ember.op.fused_cuda`, printed the same way) where every step has a CUDA
expression, else the steps run on CuPy.

Two chains of ResNet training graphs have compiled kernels in ``ember._kernels``, with the same
results bit for bit: relu of a sum (``add_relu``: a residual block's output) and relu's gradient
of a sum of gradients (``add_relu_grad``). They run when every array is float32 NumPy,
C-contiguous and of the output's shape; anything else (broadcasting, other dtypes, another
device, no compiled module) runs the blocks.

``_sg_conv`` and ``_sg_fc`` (from :mod:`ember.passes.subgraph`) are Convolution with an optional
residual add (``with_sum``) and activation, and FullyConnected with an activation, applied in
place on the output (MXNet's oneDNN subgraph operators). ``_sg_conv`` may write over its residual.

Only a plain ``_sg_conv`` has a gradient (``_backward_sg_conv``): in training graphs the subgraph
pass puts convolutions channel-last with their weight left (F, C, *k), and fuses nothing. The
fusion pass runs after the gradient pass.

>>> import numpy as np
>>> from ember.op import registry
>>> chain = chain_text(1, [('_mul_scalar', {'scalar': '2'}, ['i0']), ('relu', {}, ['s0'])], [1])
>>> x, out = np.array([-1., 3.], np.float32), np.empty(2, np.float32)
>>> fused = registry.get('_FusedElemwise')
>>> fused.kernel({'chain': chain}, [x], [out], registry.KernelContext(None))
>>> out
array([0., 6.], dtype=float32)
"""
from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass

import numpy as np

from ember import backend, config, engine
from ember.backend import native
from ember.op import fused_cuda
from ember.engine.threads import team_arguments
from ember.op import registry, tuning
from ember.base import EmberError
from ember.op.nn._common import assign_shape, is_channel_last, outputs_of, weight_token
from ember.op.nn.activation import ACTIVATIONS
from ember.op.nn import fully_connected
from ember.op.nn.conv import convolution
from ember.op.nn.conv.convolution import CONV_PARAMS
from ember.op.nn.fully_connected import PARAMS as FC_PARAMS
from ember.op.registry import REQUIRED, OpDef, Param, p_bool, p_enum, p_optional, p_str, register

__all__ = ['BLOCK', 'Step', 'Chain', 'chain_text', 'parse_chain', 'compiled']

# Elements per block: a handful of float32 blocks (256 KB each) fit in a core's L2 cache.
BLOCK = 1 << 16

# the compiled forms of two chains (add_relu, add_relu_grad): a leaf C module that setup.py
# builds where it can; without it (no C compiler) the blocks run
_kernels = native.compiled_module('_kernels')

# Whether the compiled chains split on the OpenMP team where the module has one (tests turn it
# off to run the kernel-pool path).
use_team = True


# ----------------------------------------------------------------------------------------------
# The chain description.

@dataclass(frozen=True)
class Step:
    """One operator call of a chain; `args` are ('i', k) for input k or ('s', j) for step j."""
    op: OpDef
    attrs: dict
    args: tuple


@dataclass(frozen=True)
class Chain:
    num_inputs: int
    steps: tuple
    outputs: tuple          # the steps whose values are the operator's outputs, in order


def chain_text(num_inputs: int, steps, outputs) -> str:
    """The ``chain`` attribute: `steps` are ``(op name, parameter strings, args)`` with args
    ``'i<k>'`` (input k) or ``'s<j>'`` (step j's value); `outputs` lists step indices.

    >>> chain_text(1, [('exp', {}, ['i0'])], [0])
    '{"inputs": 1, "steps": [["exp", {}, ["i0"]]], "outputs": [0]}'
    """
    steps = [[name, dict(params), list(args)] for name, params, args in steps]
    return json.dumps({'inputs': num_inputs, 'steps': steps, 'outputs': list(outputs)})


@functools.lru_cache(maxsize=None)
def parse_chain(text: str) -> Chain:
    """The :class:`Chain` that `text` (from :func:`chain_text`) describes; a ValueError says
    what is wrong."""
    try:
        data = json.loads(text)
        num_inputs, outputs = int(data['inputs']), tuple(int(i) for i in data['outputs'])
        steps = tuple(_parse_step(step, num_inputs, position)
                      for position, step in enumerate(data['steps']))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f'a chain description from ember.op.fused.chain_text ({exc})') from None
    if not outputs or any(not 0 <= i < len(steps) for i in outputs):
        raise ValueError(f'a chain description whose outputs {list(outputs)} name some of its '
                         f'{len(steps)} steps')
    return Chain(num_inputs, steps, outputs)


def _chain_param(value):
    """The ``chain`` attribute, checked when the node is made."""
    text = p_str(value)
    parse_chain(text)
    return text


def _parse_step(step, num_inputs, position):
    name, params, args = step
    op = registry.get(name)
    refs = tuple(_parse_ref(arg, num_inputs, position) for arg in args)
    return Step(op, op.parse_attrs(params), refs)


def _parse_ref(arg, num_inputs, position):
    kind, index = arg[0], int(arg[1:])
    limit = {'i': num_inputs, 's': position}.get(kind)
    if limit is None or not 0 <= index < limit:
        raise ValueError(f'argument {arg!r} of step {position}: expected i0..i{num_inputs - 1} '
                         f'or an earlier step s0..s{position - 1}')
    return kind, index


# ----------------------------------------------------------------------------------------------
# Inference by replaying the steps' own rules.

def _replay(rule_name, chain, in_values):
    """Run every step's infer_shape or infer_type; unknown inputs are filled from what the
    steps infer about them."""
    inputs, values = list(in_values), []
    for step in chain.steps:
        args = [inputs[k] if kind == 'i' else values[k] for kind, k in step.args]
        filled, outs = getattr(step.op, rule_name)(step.attrs, args)
        for (kind, k), value in zip(step.args, filled):
            if kind == 'i' and inputs[k] is None:
                inputs[k] = value
        values.append(outs[0])
    return inputs, values


def _fused_shape(attrs, in_shapes):
    chain = parse_chain(attrs['chain'])
    inputs, values = _replay('infer_shape', chain, in_shapes)
    return inputs, [values[i] for i in chain.outputs]


def _fused_type(attrs, in_dtypes):
    chain = parse_chain(attrs['chain'])
    inputs, values = _replay('infer_type', chain, in_dtypes)
    return inputs, [values[i] for i in chain.outputs]


def _fused_inplace(attrs):
    """Output k may take input i's memory when the step writing k may work in place on i and
    no later step reads i (the block of i is overwritten once k's block is written)."""
    chain, pairs, taken = parse_chain(attrs['chain']), [], set()
    for out_index, step_index in enumerate(chain.outputs):
        step = chain.steps[step_index]
        for arg, _ in step.op.inplace_pairs(step.attrs):
            kind, k = step.args[arg]
            if kind == 'i' and k not in taken and not _read_after(chain, k, step_index):
                pairs.append((k, out_index))
                taken.add(k)
                break
    return tuple(pairs)


def _read_after(chain, input_index, step_index):
    return any(('i', input_index) in step.args for step in chain.steps[step_index + 1:])


# ----------------------------------------------------------------------------------------------
# Compiling a chain: generated block function, scratch slots, the block loop.

class _Program:
    """A compiled chain: ``program(ins, outs, ctx)`` runs it block by block."""

    def __init__(self, chain: Chain):
        self.chain = chain
        self.slots = _assign_slots(chain)
        self.num_slots = max((s for s in self.slots if s is not None), default=-1) + 1
        self.source = _block_source(chain, self.slots)
        namespace = {}
        for index, step in enumerate(chain.steps):
            namespace[f'k{index}'], namespace[f'a{index}'] = step.op.kernel, step.attrs
        # the one sanctioned use of compile(): the fused kernel body, once per chain
        exec(compile(self.source, '<fused elemwise>', 'exec'), namespace)  # noqa: S102
        self.block = namespace['fused_block']
        self.kernel = _compiled_kernel(chain)
        self._dtypes = {}
        self._cuda = {}         # (in dtypes, out dtypes, broadcast) -> FusedKernel or None
        self._launched = set()  # keys whose kernel compiled and ran once

    def step_dtypes(self, in_dtypes):
        found = self._dtypes.get(in_dtypes)
        if found is None:
            found = self._dtypes[in_dtypes] = _replay('infer_type', self.chain, in_dtypes)[1]
        return found

    def __call__(self, ins, outs, ctx):
        out, xp = outs[0], ctx.xp
        if xp is not np and self._run_cuda(ins, outs):
            return
        if self.kernel is not None and self.kernel.takes(ins, out, xp):
            self._run_kernel(ins, out)
            return
        dtypes = self.step_dtypes(tuple(np.dtype(x.dtype) for x in ins))
        if type(out) is not np.ndarray or out.size <= BLOCK or out.ndim == 0:
            buffers = self._buffers(xp, out.size, dtypes)
            self.block(ins, outs, self._views(buffers, dtypes, out.shape), ctx)
        elif all(x.shape == out.shape for x in ins) and all(o.flags.c_contiguous for o in outs):
            self._run_flat(ins, outs, ctx, dtypes)
        else:
            self._run_rows(ins, outs, ctx, dtypes)

    def _run_cuda(self, ins, outs) -> bool:
        """The chain as one CUDA kernel (:mod:`ember.op.fused_cuda`); False where it has no
        CUDA form or the arrays do not suit it (views with gaps): the steps run instead."""
        shape = outs[0].shape
        if not all(a.flags.c_contiguous for a in list(ins) + list(outs)) \
                or any(o.shape != shape for o in outs):
            return False
        broadcast = any(x.shape != shape for x in ins)
        key = (tuple(str(x.dtype) for x in ins), tuple(str(o.dtype) for o in outs), broadcast)
        kernel = self._cuda.get(key, False)
        if kernel is False:
            kernel = self._cuda[key] = fused_cuda.generate(self.chain, key[0], key[1],
                                                          broadcast)
            if kernel is not None and _verbose[0]:
                print(f'[ember fusion] CUDA kernel {kernel.name}\n{kernel.source}',
                      file=sys.stderr)
        if kernel is None:
            return False
        strides = fused_cuda.broadcast_strides([x.shape for x in ins], shape) if broadcast \
            else None
        try:
            backend.gpu.launch_elementwise(kernel, ins, outs, shape, strides)
        except Exception as error:  # noqa: BLE001 - NVRTC refused it: the steps run instead
            if key in self._launched:
                raise
            self._cuda[key] = None
            print(f'[ember fusion] CUDA kernel {kernel.name} not used: {error}', file=sys.stderr)
            return False
        self._launched.add(key)
        return True

    def _buffers(self, xp, size, dtypes):
        # raw bytes per slot; steps sharing a slot view it with their own dtype
        width = max(d.itemsize for d in dtypes)
        return [xp.empty(max(size, 1) * width, np.uint8) for _ in range(self.num_slots)]

    def _views(self, buffers, dtypes, shape):
        size = int(np.prod(shape, dtype=np.int64))
        views = []
        for slot, dtype in zip(self.slots, dtypes):
            if slot is None:
                views.append(None)
            else:
                raw = buffers[slot][:size * dtype.itemsize]
                views.append(raw.view(dtype).reshape(shape))
        return views

    def _run_flat(self, ins, outs, ctx, dtypes):
        flat_ins = [x.reshape(-1) for x in ins]
        flat_outs = [o.reshape(-1) for o in outs]

        def chunk(start, stop):
            buffers = self._buffers(np, min(BLOCK, stop - start), dtypes)
            views, views_size = None, None
            for begin in range(start, stop, BLOCK):
                end = min(begin + BLOCK, stop)
                if end - begin != views_size:
                    views_size = end - begin
                    views = self._views(buffers, dtypes, (views_size,))
                self.block([x[begin:end] for x in flat_ins], [o[begin:end] for o in flat_outs],
                           views, ctx)
        engine.parallel_for(outs[0].size, chunk, self._worth_splitting(ins, outs, ctx, dtypes))

    def _run_rows(self, ins, outs, ctx, dtypes):
        # broadcast inputs cannot be flattened: blocks are runs of rows of the first axis
        shape = outs[0].shape
        row_size = outs[0].size // shape[0]
        rows_per_block = max(1, BLOCK // row_size)
        full_ins = [np.broadcast_to(x, shape) for x in ins]

        def chunk(start, stop):
            first, last = -(-start // row_size), -(-stop // row_size)
            block_rows = min(rows_per_block, max(last - first, 1))
            buffers = self._buffers(np, block_rows * row_size, dtypes)
            for row in range(first, last, rows_per_block):
                end = min(row + rows_per_block, last)
                views = self._views(buffers, dtypes, (end - row,) + shape[1:])
                self.block([x[row:end] for x in full_ins], [o[row:end] for o in outs], views,
                           ctx)
        engine.parallel_for(outs[0].size, chunk, self._worth_splitting(ins, outs, ctx, dtypes))

    def _run_kernel(self, ins, out):
        # small arrays in one call, as the blocks run them; larger ones as the tuner says, split
        # on the OpenMP team where the module has one (see ember/_team.h)
        run = self.kernel.bind(ins, out)
        if out.size <= BLOCK or not self._kernel_worth_splitting(ins, out):
            run(0, out.size)
        elif use_team and _kernels.openmp:
            run(0, out.size, **team_arguments())
        else:
            engine.parallel_for(out.size, run, True)

    def _kernel_worth_splitting(self, ins, out):
        """The operator tuner's decision for the compiled kernel, timed on samples of the
        inputs under the kernel's own name: it costs about half the blocks' time per element,
        so the blocks' measurement would split arrays that gain less than the split costs."""
        def prepare(size):
            sample_ins = [tuning.prefix_sample(x, out.shape, size) for x in ins]
            run = self.kernel.bind(sample_ins, np.empty(size, out.dtype))
            return functools.partial(run, 0, size)
        name = f'_kernels.{self.kernel.function}'
        return tuning.should_split(name, out.dtype, out.size, prepare)

    def _worth_splitting(self, ins, outs, ctx, dtypes):
        """The operator tuner's decision, timing the chain on samples of its inputs."""
        shape = outs[0].shape

        def prepare(size):
            sample_ins = [tuning.prefix_sample(x, shape, size) for x in ins]
            sample_outs = [np.empty(size, o.dtype) for o in outs]
            views = self._views(self._buffers(np, size, dtypes), dtypes, (size,))
            return lambda: self.block(sample_ins, sample_outs, views, ctx)
        name = '_FusedElemwise[' + ','.join(step.op.name for step in self.chain.steps) + ']'
        return tuning.should_split(name, outs[0].dtype, outs[0].size, prepare)


@dataclass(frozen=True)
class _CompiledKernel:
    """A chain that one function of ember._kernels computes: ``function(*args, out, lo, hi)``
    with the chain's inputs `args` (indices, in the function's order)."""
    function: str
    args: tuple

    def takes(self, ins, out, xp) -> bool:
        """Whether the arrays suit the function: float32 NumPy arrays, C-contiguous, all shaped
        like the output (no broadcasting)."""
        if _kernels is None or xp is not np or not _flat_float32(out):
            return False
        return all(_flat_float32(x) and x.shape == out.shape for x in ins)

    def bind(self, ins, out):
        """``run(lo, hi)``: the function on the elements [lo, hi)."""
        function = getattr(_kernels, self.function)
        args = [ins[k] for k in self.args] + [out]
        return lambda lo, hi, **team: function(*args, lo, hi, **team)


def _flat_float32(x) -> bool:
    return type(x) is np.ndarray and x.dtype == np.float32 and x.flags.c_contiguous


_ADDS = ('elemwise_add', 'broadcast_add')


def _compiled_kernel(chain):
    """The _CompiledKernel of `chain` when it is an add of two inputs then relu (add_relu) or
    relu's gradient through an input (add_relu_grad), the last step's value its output."""
    if len(chain.steps) != 2 or chain.outputs != (1,):
        return None
    add, act = chain.steps
    if add.op.name not in _ADDS or any(kind != 'i' for kind, _ in add.args):
        return None
    summands = tuple(k for _, k in add.args)
    if _is_relu(act) and act.args == (('s', 0),):
        return _CompiledKernel('add_relu', summands)
    relu_grad = act.op.name == '_backward_Activation' and act.attrs['act_type'] == 'relu'
    if relu_grad and act.args[0] == ('s', 0) and act.args[1][0] == 'i':
        return _CompiledKernel('add_relu_grad', summands + (act.args[1][1],))
    return None


def _is_relu(step):
    # the relu operator computes np.maximum(x, 0) as Activation's relu does
    return step.op.name == 'relu' or (step.op.name == 'Activation'
                                      and step.attrs['act_type'] == 'relu')


def _assign_slots(chain):
    """Per step, the scratch slot holding its value within a block, or None for an output.
    A slot is reused once every reader of its value has run (never by one of those readers)."""
    last_use = {}
    for index, step in enumerate(chain.steps):
        for kind, k in step.args:
            if kind == 's':
                last_use[k] = index
    exported, free, slots, count = set(chain.outputs), [], [], 0
    for index in range(len(chain.steps)):
        if index in exported:
            slots.append(None)
        elif free:
            slots.append(free.pop())
        else:
            slots.append(count)
            count += 1
        free.extend(slots[j] for j, last in last_use.items()
                    if last == index and slots[j] is not None)
    return slots


def _block_source(chain, slots):
    output_of = {step: k for k, step in enumerate(chain.outputs)}

    def where(kind, k):
        if kind == 'i':
            return f'ins[{k}]'
        return f'outs[{output_of[k]}]' if slots[k] is None else f'tmp[{k}]'
    lines = ['def fused_block(ins, outs, tmp, ctx):']
    for index, step in enumerate(chain.steps):
        args = ', '.join(where(kind, k) for kind, k in step.args)
        target = where('s', index)
        lines.append(f'    k{index}(a{index}, [{args}], [{target}], ctx)'
                     f'  # s{index} = {step.op.name}{_attr_note(step)}')
    return '\n'.join(lines) + '\n'


def _attr_note(step):
    given = {k: v for k, v in step.attrs.items() if v is not None}
    return f' {given}' if given else ''


_PROGRAMS: dict = {}
# MXNET_FUSION_VERBOSE as read when the last program was made (its CUDA kernels are generated
# later, on a worker, for each dtype signature)
_verbose = [False]


def compiled(text: str) -> _Program:
    """The compiled program of chain `text` (compiled on first use, printed on stderr then
    when ``MXNET_FUSION_VERBOSE`` is set)."""
    program = _PROGRAMS.get(text)
    if program is None:
        program = _PROGRAMS.setdefault(text, _Program(parse_chain(text)))
        _verbose[0] = config.get('MXNET_FUSION_VERBOSE')
        if _verbose[0]:
            print(f'[ember fusion] chain {text}\n{program.source}', file=sys.stderr)
    return program


def _fused_kernel(attrs, ins, outs, ctx):
    compiled(attrs['chain'])(ins, outs, ctx)


register('_FusedElemwise', _fused_kernel, infer_shape=_fused_shape, infer_type=_fused_type,
         params=(Param('chain', _chain_param, REQUIRED, 'The steps (ember.op.fused.chain_text).'),),
         inputs=lambda attrs: [f'in{i}' for i in range(parse_chain(attrs['chain']).num_inputs)],
         outputs=lambda attrs: ['output'] + [f'output{i}' for i in
                                             range(1, len(parse_chain(attrs['chain']).outputs))],
         inplace=_fused_inplace,
         doc='A chain of element-wise operators run block by block in one pass over memory '
             '(emitted by the fusion pass).')


# ----------------------------------------------------------------------------------------------
# Convolution and FullyConnected with their residual add and activation.

_ACT = Param('act_type', p_optional(p_enum(*ACTIVATIONS)), None,
             'Activation applied to the output in place; None for none.')


def _activate(xp, out, act_type):
    if act_type == 'relu':
        xp.maximum(out, 0, out=out)
    elif act_type is not None:
        out[...] = ACTIVATIONS[act_type][0](xp, out)


def _conv_inputs(attrs):
    names = ['data', 'weight'] + ([] if attrs['no_bias'] else ['bias'])
    names += ['weight_scale'] if attrs['weight_scale'] else []
    return names + (['sum'] if attrs['with_sum'] else [])


def _oihw_for_layout(attrs) -> bool:
    """Whether the weight input stays (F, C, *k) while the data is channel-last."""
    return attrs['weight_layout'] == 'OIHW' and is_channel_last(attrs['layout'])


def _as_layout(shape):
    """(F, C, *k) -> (F, *k, C): the weight shape that channel-last Convolution expects."""
    return None if shape is None else (shape[0],) + tuple(shape[2:]) + (shape[1],)


def _as_oihw(shape):
    return None if shape is None else (shape[0], shape[-1]) + tuple(shape[1:-1])


def _sg_conv_infer(attrs, in_shapes):
    names = _conv_inputs(attrs)
    conv = [n for n in names if n in ('data', 'weight', 'bias')]
    shapes = list(in_shapes[:len(conv)])
    if _oihw_for_layout(attrs):
        shapes[1] = _as_layout(shapes[1])
    ins, outs = registry.get('Convolution').infer_shape(attrs, shapes)
    ins = list(ins)
    if _oihw_for_layout(attrs):
        ins[1] = _as_oihw(ins[1])
    filters = attrs['num_filter']
    if attrs['weight_scale']:
        ins.append(in_shapes[len(ins)])
        assign_shape('_sg_conv', ins, len(ins) - 1, 'weight_scale', (filters,))
    if not attrs['with_sum']:
        return ins, outs
    ins.append(in_shapes[len(ins)])
    if outs[0] is None:
        return ins, [ins[-1]]
    assign_shape('_sg_conv', ins, len(ins) - 1, 'sum (the residual)', outs[0])
    return ins, outs


def _sg_conv_kernel(attrs, ins, outs, ctx):
    # one call: oneDNN applies the residual and activation as post-ops, the NumPy algorithms
    # in their last pass over the output (the residual may be the output itself)
    spec = ctx.memo.get('sg_conv')
    if spec is None or spec[0] is not ins[1]:
        spec = ctx.memo['sg_conv'] = _sg_conv_spec(attrs, ins[1])
    _, weight, bias, residual, scale = spec
    convolution.forward(attrs, ins[0], weight, None if bias is None else ins[bias], outs[0],
                        ctx, None if residual is None else ins[residual], attrs['act_type'],
                        None if scale is None else ins[scale],
                        weight_token(ctx, 1, scale))


def _sg_conv_spec(attrs, weight):
    """(weight input, the weight as the convolution reads it, and the input positions of the
    bias, residual and weight scale, None where absent): a graph node keeps it in its memo,
    so that each call passes the same weight view (the convolution's replay then recognises
    it at once) and reads no names."""
    at = {name: index for index, name in enumerate(_conv_inputs(attrs))}
    return (weight, _ohwi(weight) if _oihw_for_layout(attrs) else weight, at.get('bias'),
            at.get('sum'), at.get('weight_scale'))


def _ohwi(weight):
    """An (F, C, *k) array seen as (F, *k, C): a view, no copy."""
    return weight.transpose((0,) + tuple(range(2, weight.ndim)) + (1,))


def _sg_conv_gradient(F, attrs, inputs, outputs, out_grads):
    """The gradients of a plain ``_sg_conv``: the channel-last Convolution with an OIHW weight
    that the subgraph pass puts in training graphs. The fused residual, activation and folded
    scale only come from the inference rewrite and have no gradient here."""
    fused = {name: attrs[name] for name in ('with_sum', 'act_type', 'weight_scale')
             if attrs[name] not in (False, None)}
    if fused:
        raise EmberError(f'_sg_conv: no gradient with {fused}; only the plain convolution '
                         '(with_sum=False, act_type=None, weight_scale=False) has one')
    grads = F._backward_sg_conv(out_grads[0], inputs[0], inputs[1], **attrs)
    return outputs_of(grads, 2 if attrs['no_bias'] else 3)


def _sg_conv_backward_kernel(attrs, ins, outs, ctx):
    """Convolution's gradients, the weight and its gradient seen channel-last when they stay
    (F, C, *k) under channel-last data (``weight_layout='OIHW'``)."""
    dy, data, weight = ins
    if _oihw_for_layout(attrs):
        weight = _ohwi(weight)
        outs = [outs[0], _ohwi(outs[1])] + list(outs[2:])
    convolution.backward(attrs, dy, data, weight, outs, ctx)


_SG_CONV_PARAMS = CONV_PARAMS + (
    Param('with_sum', p_bool, False, 'Add the last input (a residual shaped like the output).'),
    _ACT,
    Param('weight_scale', p_bool, False,
          'An input after the bias scales the weight per output channel (a BatchNorm folded '
          'in): the convolution uses weight * weight_scale.'),
    Param('weight_layout', p_optional(p_enum('OIHW')), None,
          "'OIHW': the weight stays (F, C, *k) for channel-last data; None: as layout says."))


register('_sg_conv', _sg_conv_kernel, infer_shape=_sg_conv_infer, inputs=_conv_inputs,
         params=_SG_CONV_PARAMS, gradient=_sg_conv_gradient,
         inplace=lambda attrs: ((len(_conv_inputs(attrs)) - 1, 0),) if attrs['with_sum'] else (),
         resources=('temp',),
         doc='Convolution, plus a residual input when with_sum, then an activation, in one '
             'operator (emitted by the subgraph pass: fused for inference, plain channel-last '
             'with an OIHW weight in training graphs).')

# shapes, types and outputs as Convolution's gradient: they depend on no_bias and num_filter only
_CONV_BACKWARD = registry.get('_backward_Convolution')
register('_backward_sg_conv', _sg_conv_backward_kernel, infer_shape=_CONV_BACKWARD.infer_shape,
         infer_type=_CONV_BACKWARD.infer_type, inputs=_CONV_BACKWARD.inputs,
         outputs=_CONV_BACKWARD.outputs, params=_SG_CONV_PARAMS, resources=('temp',))


def _sg_fc_kernel(attrs, ins, outs, ctx):
    if not fully_connected.forward(attrs, ins, outs, ctx, relu=attrs['act_type'] == 'relu'):
        _activate(ctx.xp, outs[0], attrs['act_type'])


register('_sg_fc', _sg_fc_kernel, infer_shape=registry.get('FullyConnected').infer_shape,
         inputs=lambda attrs: ['data', 'weight'] + ([] if attrs['no_bias'] else ['bias']),
         params=FC_PARAMS + (_ACT,),
         doc='FullyConnected then an activation in place (emitted by the subgraph pass for '
             'inference).')
