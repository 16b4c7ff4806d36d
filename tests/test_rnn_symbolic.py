"""mx.rnn: symbolic cells (values checked against MXNet in test_api_values.py), their weights,
checkpoints, and the bucketing sentence iterator."""
import numpy as np
import pytest

import ember as mx


def test_unpack_and_pack_split_gates_and_join_them_again():
    cell = mx.rnn.LSTMCell(2, prefix='l_')
    args = {'l_i2h_weight': mx.nd.array(np.arange(24.0).reshape(8, 3)),
            'l_i2h_bias': mx.nd.arange(8), 'l_h2h_weight': mx.nd.ones((8, 2)),
            'l_h2h_bias': mx.nd.zeros(8)}
    pieces = cell.unpack_weights(args)
    assert sorted(pieces)[:4] == ['l_h2h_c_bias', 'l_h2h_c_weight', 'l_h2h_f_bias',
                                  'l_h2h_f_weight']
    assert pieces['l_i2h_f_bias'].asnumpy().tolist() == [2.0, 3.0]
    packed = cell.pack_weights(pieces)
    assert sorted(packed) == sorted(args)
    np.testing.assert_array_equal(packed['l_i2h_weight'].asnumpy(), np.arange(24.0).reshape(8, 3))


def test_rnn_checkpoints_store_gates_apart(tmp_path):
    cell = mx.rnn.GRUCell(2, prefix='g_')
    outputs, _ = cell.unroll(2, mx.sym.var('data'), merge_outputs=True)
    args = {name: mx.nd.array(np.random.default_rng(0).normal(size=shape))
            for name, shape in zip(outputs.list_arguments()[1:], [(6, 3), (6,), (6, 2), (6,)])}
    prefix = str(tmp_path / 'gru')
    mx.rnn.save_rnn_checkpoint(cell, prefix, 3, outputs, args, {})
    _, saved, _ = mx.model.load_checkpoint(prefix, 3)
    assert 'g_i2h_z_weight' in saved and 'g_i2h_weight' not in saved
    symbol, loaded, aux = mx.rnn.load_rnn_checkpoint([cell], prefix, 3)
    assert symbol.list_arguments() == outputs.list_arguments() and aux == {}
    for name, value in args.items():
        np.testing.assert_array_equal(loaded[name].asnumpy(), value.asnumpy())
    mx.rnn.do_rnn_checkpoint(cell, prefix, period=2)(1, outputs, args, {})
    assert (tmp_path / 'gru-0002.params').exists()


def test_fused_parameters_start_per_gate_with_the_forget_bias():
    cell = mx.rnn.FusedRNNCell(3, mode='lstm', forget_bias=4.0, prefix='f_')
    outputs, _ = cell.unroll(2, mx.sym.var('data'), layout='TNC', merge_outputs=True)
    module = mx.mod.Module(outputs, data_names=['data'], label_names=None)
    module.bind(data_shapes=[('data', (2, 1, 5))])
    module.init_params(mx.init.Xavier())
    pieces = cell.unpack_weights(module.get_params()[0])
    assert pieces['f_l0_i2h_f_bias'].asnumpy().tolist() == [4.0] * 3
    assert pieces['f_l0_h2h_i_bias'].asnumpy().tolist() == [0.0] * 3
    assert float(np.abs(pieces['f_l0_i2h_c_weight'].asnumpy()).sum()) > 0


def test_cells_that_only_unroll_say_so():
    data, state = mx.sym.var('x'), [mx.sym.var('h')]
    with pytest.raises(TypeError, match='call unroll'):
        mx.rnn.FusedRNNCell(2)(data, state)
    with pytest.raises(TypeError, match='call unroll'):
        mx.rnn.BidirectionalCell(mx.rnn.RNNCell(2, prefix='a_'),
                                 mx.rnn.RNNCell(2, prefix='b_'))(data, state)
    with pytest.raises(TypeError, match='unfuse'):
        mx.rnn.ZoneoutCell(mx.rnn.FusedRNNCell(2))
    base = mx.rnn.RNNCell(2, prefix='z_')
    zoneout = mx.rnn.ZoneoutCell(base, 0.5, 0.5)
    with pytest.raises(mx.MXNetError, match='call the modifier'):
        base.begin_state()
    assert len(zoneout.begin_state()) == 1
    with pytest.raises(ValueError, match="mode='lstmm'"):
        mx.rnn.FusedRNNCell(2, mode='lstmm')


def test_begin_states_can_be_variables_and_dropout_steps():
    cell = mx.rnn.LSTMCell(2, prefix='v_')
    states = cell.begin_state(func=mx.sym.var)
    assert [s.name for s in states] == ['v_begin_state_0', 'v_begin_state_1']
    outputs, _ = cell.unroll(2, mx.sym.var('data'), begin_state=states, merge_outputs=True)
    assert {'v_begin_state_0', 'v_begin_state_1'} <= set(outputs.list_arguments())
    dropout = mx.rnn.DropoutCell(0.5)
    out, none = dropout.unroll(3, mx.sym.var('d'), merge_outputs=True)
    assert none == [] and out.infer_shape(d=(2, 3, 4))[1] == [(2, 3, 4)]
    with pytest.warns(DeprecationWarning, match='rnn_unroll'):
        mx.rnn.rnn_unroll(mx.rnn.RNNCell(2, prefix='u_'), 2, mx.sym.var('d'))


def test_conv_cells_keep_the_spatial_size_and_check_kernels():
    cell = mx.rnn.ConvRNNCell((1, 2, 4, 4), 3, prefix='c_')
    assert cell.state_shape == [(0, 3, 4, 4)]
    with pytest.raises(ValueError, match='odd'):
        mx.rnn.ConvLSTMCell((1, 2, 4, 4), 3, h2h_kernel=(2, 2))


def test_bucket_sentence_iter_pads_shifts_and_buckets():
    np.random.seed(1)
    sentences = [[1, 2], [3, 4], [5, 6, 7], [8, 9, 1], [2, 3, 4, 5, 6]]
    it = mx.rnn.BucketSentenceIter(sentences, batch_size=2, buckets=[2, 3], invalid_label=0)
    batches = list(it)
    assert sorted(b.bucket_key for b in batches) == [2, 3]
    three = next(b for b in batches if b.bucket_key == 3)
    data, label = three.data[0].asnumpy(), three.label[0].asnumpy()
    assert sorted(data.tolist()) == [[5, 6, 7], [8, 9, 1]]
    np.testing.assert_array_equal(label[:, :-1], data[:, 1:])
    assert (label[:, -1] == 0).all()
    it.reset()
    assert len(list(it)) == 2
    time_major = mx.rnn.BucketSentenceIter(sentences[:2], batch_size=2, layout='TN')
    assert time_major.provide_data[0].shape == (2, 2)
    assert next(time_major).data[0].shape == (2, 2)
    with pytest.raises(ValueError, match="layout='NCT'"):
        mx.rnn.BucketSentenceIter(sentences, 2, layout='NCT')


def test_a_bucketed_lstm_language_model_trains():
    np.random.seed(0)
    mx.random.seed(0)
    sentences = [[1, 2, 3, 1, 2], [2, 3, 1, 2, 3], [3, 1, 2, 3, 1], [1, 2, 3, 1]] * 4
    it = mx.rnn.BucketSentenceIter(sentences, batch_size=4, buckets=[4, 5], invalid_label=0)
    cell = mx.rnn.LSTMCell(8, prefix='lm_')

    def sym_gen(length):
        data, label = mx.sym.var('data'), mx.sym.var('softmax_label')
        embed = mx.sym.Embedding(data, input_dim=4, output_dim=4, name='embed')
        cell.reset()
        outputs, _ = cell.unroll(length, embed, merge_outputs=True)
        pred = mx.sym.FullyConnected(mx.sym.reshape(outputs, shape=(-1, 8)), num_hidden=4,
                                     name='pred')
        out = mx.sym.SoftmaxOutput(pred, mx.sym.reshape(label, shape=(-1,)), name='softmax',
                                   ignore_label=0, use_ignore=True)
        return out, ('data',), ('softmax_label',)
    module = mx.mod.BucketingModule(sym_gen, default_bucket_key=it.default_bucket_key)
    metric = mx.metric.Perplexity(ignore_label=0)
    module.fit(it, eval_metric=metric, num_epoch=8, optimizer='adam',
               optimizer_params={'learning_rate': 0.05}, initializer=mx.init.Xavier())
    assert module.score(it, mx.metric.Perplexity(ignore_label=0))[0][1] < 1.5


def test_a_cell_written_by_the_user_unrolls_and_a_modifier_wraps_it():
    class Accumulator(mx.rnn.BaseRNNCell):
        """h_t = h_(t-1) + x_t."""
        @property
        def state_info(self):
            return [{'shape': (0, 2), '__layout__': 'NC'}]

        def __call__(self, inputs, states):
            self._counter += 1
            out = mx.sym.elemwise_add(inputs, states[0])
            return out, [out]

    class Doubled(mx.rnn.ModifierCell):
        def __call__(self, inputs, states):
            out, states = self.base_cell(inputs, states)
            return out * 2, states
    outputs, _ = Doubled(Accumulator()).unroll(3, mx.sym.var('data'), merge_outputs=True)
    exe = outputs.simple_bind(mx.cpu(), data=(1, 3, 2), grad_req='null')
    exe.forward(data=mx.nd.ones((1, 3, 2)))
    # the state runs 1, 2, 3; the modifier doubles the outputs only
    assert exe.outputs[0].asnumpy()[0, :, 0].tolist() == [2.0, 4.0, 6.0]
    conv = mx.rnn.ConvGRUCell((1, 1, 3, 3), 2)
    assert isinstance(conv, mx.rnn.BaseConvRNNCell)
    with pytest.raises(TypeError, match='no step'):
        mx.rnn.BaseConvRNNCell.__call__(conv, None, None)
