"""Recurrent layers and cells (mx.gluon.rnn): the fused layers, the unrolled cells and a NumPy
reference of MXNet's equations agree; shapes, layouts, states, parameter names and files,
gradients and the modifier cells."""
import numpy as np
import pytest

import ember as mx
from ember.gluon import rnn

RNG = np.random.default_rng(11)
MODES = ['rnn_relu', 'rnn_tanh', 'lstm', 'gru']
WEIGHTS = ('i2h_weight', 'h2h_weight', 'i2h_bias', 'h2h_bias')


def rand(*shape):
    return (RNG.standard_normal(shape) * 0.5).astype(np.float32)


def close(actual, expected, tol=1e-5):
    actual = actual.asnumpy() if isinstance(actual, mx.nd.NDArray) else actual
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# NumPy reference of MXNet's equations

def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def step_ref(mode, x, states, wx, wh, bx, bh):
    """One step: LSTM gates i, f, c, o; GRU gates r, z, n with r applied to W_hn h + b_hn."""
    h = states[0]
    gx, gh = x @ wx.T + bx, h @ wh.T + bh
    if mode == 'rnn_relu':
        h = np.maximum(gx + gh, 0)
        return h, [h]
    if mode == 'rnn_tanh':
        h = np.tanh(gx + gh)
        return h, [h]
    if mode == 'lstm':
        i, f, g, o = np.split(gx + gh, 4, axis=1)
        c = sigmoid(f) * states[1] + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        return h, [h, c]
    xr, xz, xn = np.split(gx, 3, axis=1)
    hr, hz, hn = np.split(gh, 3, axis=1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    h = (1 - z) * np.tanh(xn + r * hn) + z * h
    return h, [h]


def direction_ref(mode, x, states, weights):
    outputs = []
    for t in range(x.shape[0]):
        out, states = step_ref(mode, x[t], states, *weights)
        outputs.append(out)
    return np.stack(outputs), states


def layer_ref(mode, x, states, params, num_layers, directions):
    """x (T, N, C); states [(L*D, N, H)...]; params {'l0_i2h_weight': array, ...}."""
    finals = [[] for _ in states]
    for layer in range(num_layers):
        outputs = []
        for d, side in enumerate('lr'[:directions]):
            weights = [params[f'{side}{layer}_{kind}'] for kind in WEIGHTS]
            begin = [s[layer * directions + d] for s in states]
            seq = x if d == 0 else x[::-1]
            out, last = direction_ref(mode, seq, begin, weights)
            outputs.append(out if d == 0 else out[::-1])
            for k, state in enumerate(last):
                finals[k].append(state)
        x = np.concatenate(outputs, axis=2)
    return x, [np.stack(f) for f in finals]


# ---------------------------------------------------------------------------------------------
# Helpers

def make_layer(mode, hidden, **kwargs):
    if mode.startswith('rnn_'):
        return rnn.RNN(hidden, activation=mode[4:], **kwargs)
    return {'lstm': rnn.LSTM, 'gru': rnn.GRU}[mode](hidden, **kwargs)


def make_cell(mode, hidden, **kwargs):
    if mode.startswith('rnn_'):
        return rnn.RNNCell(hidden, activation=mode[4:], **kwargs)
    return {'lstm': rnn.LSTMCell, 'gru': rnn.GRUCell}[mode](hidden, **kwargs)


def randomize(block, x, *args):
    """Initialize `block` (shapes from a first call) and give every parameter random values."""
    block.initialize()
    block(x, *args)
    values = {}
    for name, param in block._reg_params.items():
        values[name] = rand(*param.shape)
        param.set_data(mx.nd.array(values[name]))
    return values


def copy_to_cell(cell, layer, side_layer):
    """Give `cell` the weights of direction/layer `side_layer` ('l0_', 'r1_', ...) of `layer`."""
    cell.initialize()
    for kind in WEIGHTS:
        getattr(cell, kind).set_data(getattr(layer, side_layer + kind).data())


def layer_states(mode, layers, batch, hidden):
    return [rand(layers, batch, hidden) for _ in range(2 if mode == 'lstm' else 1)]


def nd_list(arrays):
    return [mx.nd.array(a) for a in arrays]


# ---------------------------------------------------------------------------------------------
# Layers against the reference and the cells

@pytest.mark.parametrize('mode', MODES)
def test_layer_equals_numpy_reference_and_unrolled_cell(mode):
    T, N, C, H = 4, 3, 5, 6
    x = rand(T, N, C)
    states = layer_states(mode, 1, N, H)
    layer = make_layer(mode, H)
    params = randomize(layer, mx.nd.array(x))
    out, new_states = layer(mx.nd.array(x), nd_list(states))
    ref_out, ref_states = layer_ref(mode, x, states, params, 1, 1)
    close(out, ref_out)
    assert len(new_states) == len(ref_states)
    for got, want in zip(new_states, ref_states):
        close(got, want)

    cell = make_cell(mode, H, input_size=C)
    copy_to_cell(cell, layer, 'l0_')
    cell_out, cell_states = cell.unroll(T, mx.nd.array(x), nd_list([s[0] for s in states]),
                                        layout='TNC', merge_outputs=True)
    close(cell_out, ref_out)
    for got, want in zip(cell_states, ref_states):
        close(got, want[0])


@pytest.mark.parametrize('mode', ['lstm', 'gru', 'rnn_tanh'])
def test_bidirectional_multilayer_layer_equals_reference_and_cell_stack(mode):
    T, N, C, H, L = 3, 2, 4, 5, 2
    x = rand(T, N, C)
    states = layer_states(mode, L * 2, N, H)
    layer = make_layer(mode, H, num_layers=L, bidirectional=True)
    params = randomize(layer, mx.nd.array(x))
    out, new_states = layer(mx.nd.array(x), nd_list(states))
    assert out.shape == (T, N, 2 * H)
    assert [s.shape for s in new_states] == [(L * 2, N, H)] * len(states)
    ref_out, ref_states = layer_ref(mode, x, states, params, L, 2)
    close(out, ref_out)
    for got, want in zip(new_states, ref_states):
        close(got, want)

    stack = rnn.SequentialRNNCell()
    begin = []
    for i in range(L):
        width = C if i == 0 else 2 * H
        l_cell, r_cell = (make_cell(mode, H, input_size=width) for _ in range(2))
        copy_to_cell(l_cell, layer, f'l{i}_')
        copy_to_cell(r_cell, layer, f'r{i}_')
        stack.add(rnn.BidirectionalCell(l_cell, r_cell))
        begin += [s[2 * i + d] for d in range(2) for s in states]
    cell_out, cell_states = stack.unroll(T, mx.nd.array(x), nd_list(begin), layout='TNC',
                                         merge_outputs=True)
    close(cell_out, ref_out)
    per_cell = len(states)
    for k, got in enumerate(cell_states):
        layer_dir, which = divmod(k, per_cell)
        close(got, ref_states[which][layer_dir])


@pytest.mark.parametrize('mode', MODES)
def test_unfused_layer_shares_parameters_and_output(mode):
    x = mx.nd.array(rand(3, 2, 4))
    layer = make_layer(mode, 3, num_layers=2, bidirectional=True, prefix='net_')
    randomize(layer, x)
    stack = layer._unfuse()
    assert set(stack.collect_params().keys()) == set(layer.collect_params().keys())
    out, _ = stack.unroll(3, x, layout='TNC', merge_outputs=True)
    close(out, layer(x).asnumpy())


def test_ntc_layout_is_the_transpose_of_tnc():
    x = rand(2, 4, 3)    # N, T, C
    tnc = rnn.GRU(5, num_layers=2)
    params = randomize(tnc, mx.nd.array(x.transpose(1, 0, 2)))
    ntc = rnn.GRU(5, num_layers=2, layout='NTC')
    randomize(ntc, mx.nd.array(x))
    for name, value in params.items():
        getattr(ntc, name).set_data(mx.nd.array(value))
    out, (h,) = ntc(mx.nd.array(x), ntc.begin_state(batch_size=2))
    assert out.shape == (2, 4, 5) and h.shape == (2, 2, 5)
    ref_out, ref_states = layer_ref('gru', x.transpose(1, 0, 2), [np.zeros((2, 2, 5))],
                                    params, 2, 1)
    close(out, ref_out.transpose(1, 0, 2))
    close(h, ref_states[0])
    close(tnc(mx.nd.array(x.transpose(1, 0, 2))), ref_out)


def test_states_are_returned_only_when_given():
    layer = rnn.LSTM(4, input_size=3)
    layer.initialize()
    x = mx.nd.array(rand(5, 2, 3))
    alone = layer(x)
    assert isinstance(alone, mx.nd.NDArray) and alone.shape == (5, 2, 4)
    out, states = layer(x, layer.begin_state(batch_size=2))
    assert isinstance(states, list) and [s.shape for s in states] == [(1, 2, 4), (1, 2, 4)]
    close(out, alone.asnumpy())
    # the last output step is the final hidden state
    close(states[0][0], out.asnumpy()[-1])


def test_single_state_array_is_accepted_and_bad_state_shapes_are_rejected():
    layer = rnn.GRU(4, input_size=3)
    layer.initialize()
    x = mx.nd.array(rand(5, 2, 3))
    out, states = layer(x, mx.nd.zeros((1, 2, 4)))
    assert len(states) == 1 and states[0].shape == (1, 2, 4)
    with pytest.raises(ValueError, match=r'begin state 0 has shape \(1, 3, 4\); expected '
                                         r'\(1, 2, 4\)'):
        layer(x, [mx.nd.zeros((1, 3, 4))])
    with pytest.raises(ValueError, match='takes 1 begin state'):
        layer(x, [mx.nd.zeros((1, 2, 4))] * 2)


def test_sequence_length_stops_each_sequence_at_its_length():
    T, N, C, H = 5, 3, 2, 4
    x = rand(T, N, C)
    layer = rnn.LSTM(H, bidirectional=True, use_sequence_length=True)
    params = randomize(layer, mx.nd.array(x), None, mx.nd.array([T] * N))
    lengths = [5, 2, 3]
    out, (h, c) = layer(mx.nd.array(x), layer.begin_state(batch_size=N),
                        mx.nd.array(lengths))
    for n, length in enumerate(lengths):
        ref_out, (ref_h, ref_c) = layer_ref('lstm', x[:length, n:n + 1],
                                            [np.zeros((2, 1, H))] * 2, params, 1, 2)
        close(out.asnumpy()[:length, n], ref_out[:, 0])
        close(out.asnumpy()[length:, n], 0)
        close(h.asnumpy()[:, n], ref_h[:, 0])
        close(c.asnumpy()[:, n], ref_c[:, 0])
    with pytest.raises(ValueError, match='pass sequence_length'):
        layer(mx.nd.array(x))


def test_layer_gradients_reach_every_weight_and_equal_the_cells_gradients():
    T, N, C, H = 3, 3, 4, 4
    x = mx.nd.array(rand(T, N, C))
    head = mx.nd.array(rand(T, N, H))
    for mode in MODES:
        layer = make_layer(mode, H)
        randomize(layer, x)
        # non-zero begin states: with zeros a relu layer may leave h2h without gradient
        begin = layer_states(mode, 1, N, H)
        cell = make_cell(mode, H, input_size=C)
        copy_to_cell(cell, layer, 'l0_')
        with mx.autograd.record():
            out, _ = layer(x, nd_list(begin))
            loss = (out * head).sum()
        loss.backward()
        with mx.autograd.record():
            outputs, _ = cell.unroll(T, x, nd_list([s[0] for s in begin]), layout='TNC',
                                     merge_outputs=True)
            cell_loss = (outputs * head).sum()
        cell_loss.backward()
        for kind in WEIGHTS:
            grad = getattr(layer, 'l0_' + kind).grad().asnumpy()
            assert np.abs(grad).sum() > 0, (mode, kind)
            close(grad, getattr(cell, kind).grad().asnumpy(), tol=1e-4)


def test_multilayer_bidirectional_gradients_reach_every_weight():
    x = mx.nd.array(rand(3, 2, 4))
    x.attach_grad()
    layer = rnn.LSTM(3, num_layers=2, bidirectional=True, layout='TNC')
    randomize(layer, x)
    with mx.autograd.record():
        out, states = layer(x, layer.begin_state(batch_size=2))
        loss = out.sum() + states[1].sum()
    loss.backward()
    assert np.abs(x.grad.asnumpy()).sum() > 0
    for name, param in layer.collect_params().items():
        assert np.abs(param.grad().asnumpy()).sum() > 0, name


# ---------------------------------------------------------------------------------------------
# Layer API: names, deferred shapes, files, repr

def test_parameter_names_shapes_and_deferred_input_size():
    layer = rnn.LSTM(4, num_layers=2, bidirectional=True, prefix='lstm_')
    expected = [f'lstm_{side}{i}_{kind}' for i in range(2) for side in 'lr' for kind in WEIGHTS]
    assert sorted(layer.collect_params().keys()) == sorted(expected)
    assert layer.l0_i2h_weight.shape == (16, 0)
    assert layer.l1_i2h_weight.shape == (16, 8) and layer.r1_h2h_weight.shape == (16, 4)
    layer.initialize()
    layer(mx.nd.ones((2, 1, 7)))
    assert layer.l0_i2h_weight.shape == (16, 7) and layer.r0_i2h_weight.shape == (16, 7)
    assert repr(layer) == 'LSTM(7 -> 4, TNC, num_layers=2, bidirectional)'
    assert repr(rnn.RNN(3, dropout=0.5)) == 'RNN(None -> 3, TNC, dropout=0.5)'


def test_begin_state_shapes_names_and_custom_function():
    layer = rnn.RNN(6, num_layers=3, bidirectional=True, prefix='rnn_')
    states = layer.begin_state(batch_size=4)
    assert [s.shape for s in states] == [(6, 4, 6)]
    names = []

    def record(name, shape, **kwargs):
        names.append(name)
        return mx.nd.ones(shape)
    (ones,) = layer.begin_state(batch_size=2, func=record)
    assert names == ['rnn_h0_0'] and ones.asnumpy().min() == 1
    assert layer.state_info(2)[0]['__layout__'] == 'LNC'


def test_parameter_files_use_mxnet_unfused_names_and_round_trip(tmp_path):
    x = mx.nd.array(rand(3, 2, 4))
    layer = rnn.GRU(3, num_layers=2, bidirectional=True)
    randomize(layer, x)
    path = str(tmp_path / 'gru.params')
    layer.save_parameters(path)
    keys = set(mx.nd.load(path).keys())
    assert '_unfused.0.l_cell.i2h_weight' in keys and '_unfused.1.r_cell.h2h_bias' in keys
    assert len(keys) == 16
    fresh = rnn.GRU(3, num_layers=2, bidirectional=True)
    fresh.load_parameters(path)
    close(fresh(x), layer(x).asnumpy())

    single = rnn.RNN(2, input_size=4)
    single.initialize()
    single.save_parameters(path)
    assert set(mx.nd.load(path).keys()) == {f'_unfused.0.{kind}' for kind in WEIGHTS}


def test_invalid_layer_arguments_name_the_value():
    with pytest.raises(ValueError, match="layout='CTN'"):
        rnn.LSTM(3, layout='CTN')
    with pytest.raises(ValueError, match="activation='sigmoid'"):
        rnn.RNN(3, activation='sigmoid')
    with pytest.raises(NotImplementedError, match='projection_size=2'):
        rnn.LSTM(3, projection_size=2)


def test_lstm_state_clipping_bounds_the_cell_state():
    layer = rnn.LSTM(4, input_size=3, state_clip_min=-0.1, state_clip_max=0.1)
    layer.initialize(mx.init.One())
    _, (h, c) = layer(mx.nd.ones((6, 2, 3)) * 3, layer.begin_state(batch_size=2))
    close(c, np.full((1, 2, 4), 0.1, np.float32))


# ---------------------------------------------------------------------------------------------
# Cells

@pytest.mark.parametrize('mode', MODES)
def test_cell_step_matches_reference_and_infers_input_size(mode):
    N, C, H = 3, 4, 5
    cell = make_cell(mode, H)
    x = rand(N, C)
    begin = [rand(N, H) for _ in cell.state_info()]
    params = randomize(cell, mx.nd.array(x), nd_list(begin))
    assert cell.i2h_weight.shape[1] == C
    out, states = cell(mx.nd.array(x), nd_list(begin))
    ref_out, ref_states = step_ref(mode, x, begin, *(params[k] for k in WEIGHTS))
    close(out, ref_out)
    for got, want in zip(states, ref_states):
        close(got, want)


@pytest.mark.parametrize('activation', ['softsign', 'leaky', 'callable'])
def test_rnn_cell_activation_by_name_block_or_callable(activation):
    reference = {'softsign': lambda v: v / (1 + np.abs(v)),
                 'leaky': lambda v: np.where(v > 0, v, 0.1 * v),
                 'callable': lambda v: v * 2}[activation]
    given = {'softsign': 'softsign', 'leaky': mx.gluon.nn.LeakyReLU(0.1),
             'callable': lambda v: v * 2}[activation]
    cell = rnn.RNNCell(4, activation=given, input_size=3)
    x, h = rand(2, 3), rand(2, 4)
    params = randomize(cell, mx.nd.array(x), [mx.nd.array(h)])
    out, _ = cell(mx.nd.array(x), [mx.nd.array(h)])
    pre = x @ params['i2h_weight'].T + params['i2h_bias'] + h @ params['h2h_weight'].T \
        + params['h2h_bias']
    close(out, reference(pre))


def test_unroll_input_and_output_forms():
    cell = rnn.GRUCell(3, input_size=2)
    cell.initialize()
    x = rand(4, 5, 2)    # N, T, C
    merged, states = cell.unroll(5, mx.nd.array(x), layout='NTC', merge_outputs=True)
    assert merged.shape == (4, 5, 3)
    steps, _ = cell.unroll(5, [mx.nd.array(x[:, t]) for t in range(5)], layout='NTC')
    assert isinstance(steps, list) and len(steps) == 5
    tnc, _ = cell.unroll(5, mx.nd.array(x.transpose(1, 0, 2)), layout='TNC',
                         merge_outputs=True)
    for t in range(5):
        close(steps[t], merged.asnumpy()[:, t])
        close(tnc[t], merged.asnumpy()[:, t])
    close(states[0], merged.asnumpy()[:, -1])
    with pytest.raises(ValueError, match='length=3'):
        cell.unroll(3, mx.nd.array(x), layout='NTC')


def test_cell_names_state_info_and_repr():
    cell = rnn.LSTMCell(4, prefix='enc_')
    assert sorted(cell.collect_params().keys()) == sorted(f'enc_{k}' for k in WEIGHTS)
    assert cell.state_info(2) == [{'shape': (2, 4), '__layout__': 'NC'}] * 2
    assert [s.shape for s in cell.begin_state(batch_size=2)] == [(2, 4), (2, 4)]
    assert repr(cell) == 'LSTMCell(None -> 16, tanh)'
    assert repr(rnn.RNNCell(3, 'relu', input_size=2)) == 'RNNCell(2 -> 3, relu)'


def test_hybrid_sequential_cell_steps_through_its_cells():
    first, second = rnn.LSTMCell(4, input_size=3), rnn.RNNCell(2, input_size=4)
    stack = rnn.HybridSequentialRNNCell()
    stack.add(first)
    stack.add(second)
    stack.initialize()
    x = mx.nd.array(rand(5, 3))
    states = stack.begin_state(batch_size=5)
    assert len(states) == 3 and len(stack) == 2 and stack[1] is second
    out, new_states = stack(x, states)
    mid, first_states = first(x, states[:2])
    want, second_states = second(mid, states[2:])
    close(out, want.asnumpy())
    for got, ref in zip(new_states, first_states + second_states):
        close(got, ref.asnumpy())


def test_dropout_cell_drops_only_while_training():
    cell = rnn.DropoutCell(0.5)
    x = mx.nd.ones((50, 40))
    out, states = cell(x, [])
    close(out, np.ones((50, 40)))
    with mx.autograd.train_mode():
        dropped, _ = cell(x, [])
    values = dropped.asnumpy()
    assert set(np.unique(values)) <= {0.0, 2.0} and 0.3 < (values == 0).mean() < 0.7
    merged, _ = cell.unroll(3, mx.nd.ones((2, 3, 4)), merge_outputs=True)
    assert merged.shape == (2, 3, 4)
    with pytest.raises(ValueError, match='rate=1.5'):
        rnn.DropoutCell(1.5)


def test_residual_cell_adds_inputs_to_base_outputs():
    base = rnn.GRUCell(3, input_size=3)
    base.initialize()
    x = mx.nd.array(rand(2, 4, 3))
    plain, plain_states = base.unroll(4, x, merge_outputs=True)
    cell = rnn.ResidualCell(base)
    out, states = cell.unroll(4, x, merge_outputs=True)
    close(out, plain.asnumpy() + x.asnumpy())
    close(states[0], plain_states[0].asnumpy())
    step, _ = cell(x[:, 0], cell.begin_state(batch_size=2))
    close(step, out.asnumpy()[:, 0])
    with pytest.raises(RuntimeError, match='modifier cell'):
        base.begin_state(batch_size=2)
    with pytest.raises(RuntimeError, match='already wrapped'):
        rnn.ZoneoutCell(base)


def test_zoneout_keeps_previous_values_only_while_training():
    base = rnn.RNNCell(30, input_size=2)
    base.initialize()
    x = mx.nd.array(rand(20, 2))
    begin = [mx.nd.array(rand(20, 30))]
    fresh, _ = base(x, begin)
    cell = rnn.ZoneoutCell(base, zoneout_outputs=0.5, zoneout_states=0.5)
    out, states = cell(x, begin)
    close(out, fresh.asnumpy())
    cell.reset()
    with mx.autograd.train_mode():
        out, states = cell(x, begin)
    out, state, new = out.asnumpy(), states[0].asnumpy(), fresh.asnumpy()
    kept_output = out == 0          # the previous output of the first step is zero
    assert np.all(kept_output | (out == new)) and 0.2 < kept_output.mean() < 0.8
    kept_state = state == begin[0].asnumpy()
    assert np.all(kept_state | (state == new)) and 0.2 < kept_state.mean() < 0.8


def test_bidirectional_cell_cannot_be_stepped():
    cell = rnn.BidirectionalCell(rnn.GRUCell(2, input_size=1), rnn.GRUCell(2, input_size=1))
    with pytest.raises(NotImplementedError, match='unroll'):
        cell(mx.nd.ones((1, 1)), cell.begin_state(batch_size=1))
    stack = rnn.SequentialRNNCell()
    stack.add(cell)
    with pytest.raises(TypeError, match='cannot be stepped'):
        stack(mx.nd.ones((1, 1)), stack.begin_state(batch_size=1))


_SEQUENCE_OPS = ('SequenceMask', 'SequenceLast', 'SequenceReverse')


@pytest.mark.skipif(not all(hasattr(mx.nd, name) for name in _SEQUENCE_OPS),
                    reason='valid_length needs the SequenceMask/Last/Reverse operators')
def test_unroll_with_valid_length_equals_truncated_sequences_and_the_layer():
    T, N, C, H = 4, 3, 2, 3
    x = rand(N, T, C)
    lengths = [4, 1, 2]
    layer = rnn.LSTM(H, bidirectional=True, layout='NTC', use_sequence_length=True)
    randomize(layer, mx.nd.array(x), None, mx.nd.array(lengths))
    want, want_states = layer(mx.nd.array(x), layer.begin_state(batch_size=N),
                              mx.nd.array(lengths))
    cells = [rnn.LSTMCell(H, input_size=C) for _ in range(2)]
    copy_to_cell(cells[0], layer, 'l0_')
    copy_to_cell(cells[1], layer, 'r0_')
    bi = rnn.BidirectionalCell(*cells)
    out, states = bi.unroll(T, mx.nd.array(x), layout='NTC', merge_outputs=True,
                            valid_length=mx.nd.array(lengths))
    close(out, want.asnumpy())
    for k, got in enumerate(states):       # [h_l, c_l, h_r, c_r]
        close(got, want_states[k % 2].asnumpy()[k // 2])
