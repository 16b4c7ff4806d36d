"""Control flow inside graphs: ``_foreach``, ``_while_loop`` and ``_cond``.

Each operator holds its body as a subgraph attribute: an object that ``mx.sym.contrib``
builds from the user's Python function (:class:`ember.symbol.control_flow.Subgraph`). The
operators here only need its protocol:

``input_positions``
    For each variable of the subgraph, the index of the operator input that feeds it.
``mutated``
    Indices of operator inputs the subgraph updates in place (auxiliary states).
``infer_shape(shapes)`` / ``infer_type(dtypes)``
    Given per operator input a shape (dtype) or None: (the inputs with what the subgraph
    filled in, the subgraph's output shapes (dtypes)).
``run(inputs, ctx)``
    The subgraph's outputs for operator inputs `inputs` (raw arrays), as new arrays.
``vjp(inputs, head_grads, ctx)``
    The gradient for each operator input (None where it gets none) of the outputs' inner
    product with `head_grads`.

Loop-carried values replace the inputs at their positions (a foreach step's data slice and
states, a while loop's loop variables). Random draws inside a body come from a generator
seeded per step from a seed the forward kernel stores in a hidden output, so the backward
kernel replays the same draws (a Dropout inside a loop keeps its masks).

>>> from ember.op import registry
>>> registry.get('_foreach').output_names({'num_outputs': 1, 'num_states': 2, 'num_data': 1,
...                                        'subgraph': None, 'num_inputs': 3})
['output0', 'state0', 'state1', 'seed']
"""
from __future__ import annotations

import types

import numpy as np

from ember import backend
from ember.op.registry import REQUIRED, KernelContext, Param, ShapeError, p_int, register

__all__ = ['p_subgraph']

_SEED = (1,)
_SEED_TYPE = np.dtype(np.int64)


def p_subgraph(value):
    """A subgraph built by mx.sym.contrib (graphs read from JSON cannot hold one yet)."""
    if hasattr(value, 'run') and hasattr(value, 'input_positions'):
        return value
    raise ValueError('a subgraph built by mx.sym.contrib.foreach, while_loop or cond (symbol '
                     'files holding control flow cannot be loaded yet)')


# ----------------------------------------------------------------------------------------------
# Running subgraphs.

def _step_context(ctx, seed, step):
    """The context of one step: the call's device, mode and workspace, and a generator of
    the device seeded by (seed, step) so that a replay draws the same numbers."""
    sequence = np.random.SeedSequence([int(seed), step])
    generator = backend.for_device(ctx.device).make_generator(sequence) \
        if ctx.device is not None else np.random.default_rng(sequence)
    stream = types.SimpleNamespace(generator=generator)
    return KernelContext(ctx.device, ctx.is_train, ctx.xp, temp=ctx.temp, random=stream,
                         safe_accumulation=ctx.safe_accumulation,
                         deterministic=ctx.deterministic)


def _draw_seed(ctx, out):
    generator = ctx.random.generator if ctx.random is not None else np.random.default_rng()
    out[...] = int(generator.integers(0, 2 ** 62))


def _replay_inputs(sub, inputs):
    """The inputs with copies of those the subgraph updates: a replay must not update them
    a second time."""
    copies = list(inputs)
    for index in sub.mutated:
        copies[index] = copies[index].copy()
    return copies


def _add(total, grad):
    if grad is None:
        return total
    return grad.copy() if total is None else total + grad


def _write(out, value):
    if value is None:
        out[...] = 0
    else:
        out[...] = value


# ----------------------------------------------------------------------------------------------
# _foreach: inputs data (sliced along axis 0), states, then the remaining inputs; outputs the
# per-step outputs stacked, the final states, and the seed.

_FOREACH = (Param('subgraph', p_subgraph, REQUIRED, 'The body: (data slices, states) -> '
                                                    '(outputs, new states).'),
            Param('num_data', p_int, REQUIRED, 'Inputs iterated along their first axis.'),
            Param('num_states', p_int, REQUIRED, 'Loop-carried states after the data.'),
            Param('num_outputs', p_int, REQUIRED, 'Per-step outputs of the body.'),
            Param('num_inputs', p_int, REQUIRED, 'All inputs: data, states, the others.'))


def _foreach_inputs(attrs):
    data, states = attrs['num_data'], attrs['num_states']
    rest = attrs['num_inputs'] - data - states
    return ([f'data{i}' for i in range(data)] + [f'state{i}' for i in range(states)]
            + [f'input{i}' for i in range(rest)])


def _foreach_outputs(attrs):
    return ([f'output{i}' for i in range(attrs['num_outputs'])]
            + [f'state{i}' for i in range(attrs['num_states'])] + ['seed'])


def _foreach_shape(attrs, in_shapes):
    data, states = attrs['num_data'], attrs['num_states']
    outputs = attrs['num_outputs']
    lengths = {s[0] for s in in_shapes[:data] if s is not None}
    if len(lengths) > 1:
        raise ShapeError(f'foreach: the data inputs must have one length, got {in_shapes[:data]}')
    length = lengths.pop() if lengths else None
    step = [None if s is None else _slice_shape(s) for s in in_shapes[:data]] + list(
        in_shapes[data:])
    step_in, step_out = attrs['subgraph'].infer_shape(step)
    _check_states(step_in[data:data + states], step_out[outputs:])
    filled = [in_shapes[k] or (None if length is None or step_in[k] is None else
                               (length,) + tuple(step_in[k])) for k in range(data)]
    filled += list(step_in[data:])
    stacked = [None if length is None or s is None else (length,) + tuple(s)
               for s in step_out[:outputs]]
    new_states = [a or b for a, b in zip(step_in[data:data + states], step_out[outputs:])]
    return filled, stacked + new_states + [_SEED]


def _slice_shape(shape):
    """A step's slice of data: MXNet 1.x's slice of 1-D data has shape (1,), not ()."""
    return tuple(shape[1:]) or (1,)


def _step_slice(x, step):
    return x[step:step + 1] if x.ndim == 1 else x[step]


def _check_states(given, produced):
    for index, (a, b) in enumerate(zip(given, produced)):
        if a is not None and b is not None and tuple(a) != tuple(b):
            raise ShapeError(f'loop state {index} enters with shape {tuple(a)} but the body '
                             f'returns shape {tuple(b)}')


def _foreach_type(attrs, in_dtypes):
    step_in, step_out = attrs['subgraph'].infer_type(list(in_dtypes))
    outputs, states = attrs['num_outputs'], attrs['num_states']
    data = attrs['num_data']
    new_states = [a or b for a, b in zip(step_in[data:data + states], step_out[outputs:])]
    return step_in, list(step_out[:outputs]) + new_states + [_SEED_TYPE]


def _foreach_steps(attrs, inputs, seed, ctx):
    """Yield (step, step inputs, step outputs) of a run of the loop."""
    data, states = attrs['num_data'], attrs['num_states']
    sub = attrs['subgraph']
    carried = list(inputs[data:data + states])
    for step in range(inputs[0].shape[0] if data else 0):
        step_inputs = [_step_slice(x, step) for x in inputs[:data]] + carried + list(
            inputs[data + states:])
        result = sub.run(step_inputs, _step_context(ctx, seed, step))
        yield step, step_inputs, result
        carried = result[attrs['num_outputs']:]


def _foreach_kernel(attrs, ins, outs, ctx):
    outputs, states = attrs['num_outputs'], attrs['num_states']
    _draw_seed(ctx, outs[-1])
    final = list(ins[attrs['num_data']:attrs['num_data'] + states])
    for step, _, result in _foreach_steps(attrs, ins, outs[-1][0], ctx):
        for k in range(outputs):
            outs[k][step] = result[k]
        final = result[outputs:]
    for k in range(states):
        outs[outputs + k][...] = final[k]


def _foreach_backward(attrs, ins, outs, ctx):
    outputs, states, data = attrs['num_outputs'], attrs['num_states'], attrs['num_data']
    sub = attrs['subgraph']
    heads, inputs, seed = ins[:outputs + states], list(ins[outputs + states:-1]), ins[-1][0]
    inputs = _replay_inputs(sub, inputs)
    history = [(step_inputs, _step_context(ctx, seed, step))
               for step, step_inputs, _ in _foreach_steps(attrs, inputs, seed, ctx)]
    state_grads = list(heads[outputs:])
    rest = [None] * (len(inputs) - data - states)
    for out in outs[:data]:
        out[...] = 0
    for step in range(len(history) - 1, -1, -1):
        step_inputs, step_ctx = history[step]
        grads = sub.vjp(step_inputs, [h[step] for h in heads[:outputs]] + state_grads,
                        step_ctx)
        for k in range(data):
            if grads[k] is not None:
                _step_slice(outs[k], step)[...] = grads[k]
        state_grads = [g if g is not None else ctx.xp.zeros_like(s) for g, s in
                       zip(grads[data:data + states], step_inputs[data:data + states])]
        rest = [_add(total, g) for total, g in zip(rest, grads[data + states:])]
    for k in range(states):
        _write(outs[data + k], state_grads[k])
    for k, total in enumerate(rest):
        _write(outs[data + states + k], total)


def _backward_inputs(forward_inputs, forward_outputs):
    def inputs(attrs):
        heads = [f'{name}_grad' for name in forward_outputs(attrs)[:-1]]
        return heads + forward_inputs(attrs) + ['seed']
    return inputs


def _loop_grad(name):
    def gradient(F, attrs, ins, outs, og):
        grads = getattr(F, f'_backward{name}')(*og[:-1], *ins, outs[-1], **attrs)
        return [grads] if len(ins) == 1 else list(grads)
    return gradient


def _grads_like_inputs(count_heads):
    def infer(attrs, values):
        return list(values), list(values[count_heads(attrs):-1])
    return infer


register('_foreach', _foreach_kernel, inputs=_foreach_inputs, outputs=_foreach_outputs,
         visible_outputs=lambda attrs: attrs['num_outputs'] + attrs['num_states'],
         infer_shape=_foreach_shape, infer_type=_foreach_type, params=_FOREACH,
         mutate=lambda attrs: attrs['subgraph'].mutated, resources=('temp', 'random'),
         random=True, gradient=_loop_grad('_foreach'),
         doc='Run the body over the first axis of the data, carrying states: the per-step '
             'outputs stacked, then the final states (mx.sym.contrib.foreach).')
register('_backward_foreach', _foreach_backward,
         inputs=_backward_inputs(_foreach_inputs, _foreach_outputs),
         outputs=lambda attrs: [f'{n}_grad' for n in _foreach_inputs(attrs)],
         infer_shape=_grads_like_inputs(lambda a: a['num_outputs'] + a['num_states']),
         infer_type=_grads_like_inputs(lambda a: a['num_outputs'] + a['num_states']),
         params=_FOREACH, resources=('temp',),
         doc='The gradient of _foreach: the steps replayed, then run backward in reverse.')


# ----------------------------------------------------------------------------------------------
# _while_loop: inputs the loop variables, then the remaining inputs; outputs the per-step
# outputs stacked and padded with zeros to max_iterations, the final loop variables, the seed.

_WHILE = (Param('cond', p_subgraph, REQUIRED, 'loop variables -> a one-element condition.'),
          Param('func', p_subgraph, REQUIRED, 'loop variables -> (outputs, new loop '
                                              'variables).'),
          Param('max_iterations', p_int, REQUIRED, 'Most steps; the outputs\' first axis.'),
          Param('num_loop_vars', p_int, REQUIRED, 'Loop variables (the first inputs).'),
          Param('num_outputs', p_int, REQUIRED, 'Per-step outputs of func.'),
          Param('num_inputs', p_int, REQUIRED, 'All inputs: loop variables, the others.'))


def _while_inputs(attrs):
    count = attrs['num_loop_vars']
    return ([f'loop_var{i}' for i in range(count)]
            + [f'input{i}' for i in range(attrs['num_inputs'] - count)])


def _while_outputs(attrs):
    return ([f'output{i}' for i in range(attrs['num_outputs'])]
            + [f'loop_var{i}' for i in range(attrs['num_loop_vars'])] + ['seed'])


def _merge(*shape_lists):
    return [next((s for s in options if s is not None), None) for options in zip(*shape_lists)]


def _while_shape(attrs, in_shapes):
    count, outputs = attrs['num_loop_vars'], attrs['num_outputs']
    cond_in, _ = attrs['cond'].infer_shape(list(in_shapes))
    func_in, func_out = attrs['func'].infer_shape(_merge(in_shapes, cond_in))
    _check_states(func_in[:count], func_out[outputs:])
    filled = _merge(func_in, cond_in, in_shapes)
    stacked = [None if s is None else (attrs['max_iterations'],) + tuple(s)
               for s in func_out[:outputs]]
    return filled, stacked + _merge(filled[:count], func_out[outputs:]) + [_SEED]


def _while_type(attrs, in_dtypes):
    count, outputs = attrs['num_loop_vars'], attrs['num_outputs']
    cond_in, _ = attrs['cond'].infer_type(list(in_dtypes))
    func_in, func_out = attrs['func'].infer_type(_merge(in_dtypes, cond_in))
    filled = _merge(func_in, cond_in, in_dtypes)
    return filled, (list(func_out[:outputs]) + _merge(filled[:count], func_out[outputs:])
                    + [_SEED_TYPE])


def _while_steps(attrs, inputs, seed, ctx):
    """Yield (step, step inputs, outputs of func) while the condition holds."""
    count = attrs['num_loop_vars']
    current = list(inputs)
    for step in range(attrs['max_iterations']):
        step_ctx = _step_context(ctx, seed, step)
        if not bool(attrs['cond'].run(current, step_ctx)[0].reshape(-1)[0]):
            return
        result = attrs['func'].run(current, step_ctx)
        yield step, current, result
        current = list(result[attrs['num_outputs']:]) + current[count:]


def _while_kernel(attrs, ins, outs, ctx):
    outputs, count = attrs['num_outputs'], attrs['num_loop_vars']
    _draw_seed(ctx, outs[-1])
    for out in outs[:outputs]:
        out[...] = 0
    final = list(ins[:count])
    for step, _, result in _while_steps(attrs, ins, outs[-1][0], ctx):
        for k in range(outputs):
            outs[k][step] = result[k]
        final = result[outputs:]
    for k in range(count):
        outs[outputs + k][...] = final[k]


def _while_backward(attrs, ins, outs, ctx):
    outputs, count = attrs['num_outputs'], attrs['num_loop_vars']
    func = attrs['func']
    heads, inputs, seed = ins[:outputs + count], list(ins[outputs + count:-1]), ins[-1][0]
    inputs = _replay_inputs(func, _replay_inputs(attrs['cond'], inputs))
    history = [(step, list(current)) for step, current, _ in
               _while_steps(attrs, inputs, seed, ctx)]
    carried = list(heads[outputs:])
    rest = [None] * (len(inputs) - count)
    for step, current in reversed(history):
        grads = func.vjp(current, [h[step] for h in heads[:outputs]] + carried,
                         _step_context(ctx, seed, step))
        carried = [g if g is not None else ctx.xp.zeros_like(v) for g, v in
                   zip(grads[:count], current[:count])]
        rest = [_add(total, g) for total, g in zip(rest, grads[count:])]
    for k in range(count):
        _write(outs[k], carried[k])
    for k, total in enumerate(rest):
        _write(outs[count + k], total)


register('_while_loop', _while_kernel, inputs=_while_inputs, outputs=_while_outputs,
         visible_outputs=lambda attrs: attrs['num_outputs'] + attrs['num_loop_vars'],
         infer_shape=_while_shape, infer_type=_while_type, params=_WHILE,
         mutate=lambda attrs: tuple(sorted(set(attrs['cond'].mutated)
                                           | set(attrs['func'].mutated))),
         resources=('temp', 'random'), random=True, gradient=_loop_grad('_while_loop'),
         doc='Run func while cond holds (at most max_iterations times): the per-step outputs '
             'stacked and padded with zeros, then the final loop variables '
             '(mx.sym.contrib.while_loop).')
register('_backward_while_loop', _while_backward,
         inputs=_backward_inputs(_while_inputs, _while_outputs),
         outputs=lambda attrs: [f'{n}_grad' for n in _while_inputs(attrs)],
         infer_shape=_grads_like_inputs(lambda a: a['num_outputs'] + a['num_loop_vars']),
         infer_type=_grads_like_inputs(lambda a: a['num_outputs'] + a['num_loop_vars']),
         params=_WHILE, resources=('temp',),
         doc='The gradient of _while_loop: the steps replayed, then run backward in reverse.')


# ----------------------------------------------------------------------------------------------
# _cond: every input any of the three subgraphs reads; outputs the chosen branch's outputs and
# the seed.

_COND = (Param('cond', p_subgraph, REQUIRED, 'inputs -> a one-element condition.'),
         Param('then_branch', p_subgraph, REQUIRED, 'The outputs where the condition holds.'),
         Param('else_branch', p_subgraph, REQUIRED, 'The outputs where it does not.'),
         Param('num_outputs', p_int, REQUIRED, 'Outputs of each branch.'),
         Param('num_inputs', p_int, REQUIRED, 'Inputs the subgraphs read.'))


def _cond_shape(attrs, in_shapes):
    cond_in, _ = attrs['cond'].infer_shape(list(in_shapes))
    then_in, then_out = attrs['then_branch'].infer_shape(list(in_shapes))
    else_in, else_out = attrs['else_branch'].infer_shape(list(in_shapes))
    for index, (a, b) in enumerate(zip(then_out, else_out)):
        if a is not None and b is not None and tuple(a) != tuple(b):
            raise ShapeError(f'cond: output {index} has shape {tuple(a)} in then_func but '
                             f'{tuple(b)} in else_func')
    return _merge(in_shapes, cond_in, then_in, else_in), _merge(then_out, else_out) + [_SEED]


def _cond_type(attrs, in_dtypes):
    cond_in, _ = attrs['cond'].infer_type(list(in_dtypes))
    then_in, then_out = attrs['then_branch'].infer_type(list(in_dtypes))
    else_in, else_out = attrs['else_branch'].infer_type(list(in_dtypes))
    return (_merge(in_dtypes, cond_in, then_in, else_in),
            _merge(then_out, else_out) + [_SEED_TYPE])


def _branch(attrs, inputs, ctx):
    holds = attrs['cond'].run(inputs, ctx)[0]
    return attrs['then_branch'] if bool(holds.reshape(-1)[0]) else \
        attrs['else_branch']


def _cond_kernel(attrs, ins, outs, ctx):
    _draw_seed(ctx, outs[-1])
    step_ctx = _step_context(ctx, outs[-1][0], 0)
    for out, value in zip(outs, _branch(attrs, ins, step_ctx).run(ins, step_ctx)):
        out[...] = value


def _cond_backward(attrs, ins, outs, ctx):
    count = attrs['num_outputs']
    heads, inputs, seed = ins[:count], ins[count:-1], ins[-1][0]
    for sub in ('cond', 'then_branch', 'else_branch'):
        inputs = _replay_inputs(attrs[sub], inputs)
    step_ctx = _step_context(ctx, seed, 0)
    grads = _branch(attrs, inputs, step_ctx).vjp(inputs, list(heads), step_ctx)
    for out, grad in zip(outs, grads):
        _write(out, grad)


register('_cond', _cond_kernel,
         inputs=lambda attrs: [f'input{i}' for i in range(attrs['num_inputs'])],
         outputs=lambda attrs: [f'output{i}' for i in range(attrs['num_outputs'])] + ['seed'],
         visible_outputs=lambda attrs: attrs['num_outputs'], infer_shape=_cond_shape,
         infer_type=_cond_type, params=_COND, resources=('temp', 'random'), random=True,
         mutate=lambda attrs: tuple(sorted(set().union(*(attrs[k].mutated for k in (
             'cond', 'then_branch', 'else_branch'))))),
         gradient=_loop_grad('_cond'),
         doc='The outputs of then_branch where cond holds, else those of else_branch '
             '(mx.sym.contrib.cond).')
register('_backward_cond', _cond_backward,
         inputs=lambda attrs: ([f'output{i}_grad' for i in range(attrs['num_outputs'])]
                               + [f'input{i}' for i in range(attrs['num_inputs'])] + ['seed']),
         outputs=lambda attrs: [f'input{i}_grad' for i in range(attrs['num_inputs'])],
         infer_shape=_grads_like_inputs(lambda a: a['num_outputs']),
         infer_type=_grads_like_inputs(lambda a: a['num_outputs']),
         params=_COND, resources=('temp',),
         doc='The gradient of _cond: the branch taken, run backward.')
