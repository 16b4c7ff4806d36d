"""mx.io: DataDesc, DataBatch, DataIter, NDArrayIter, ResizeIter, PrefetchingIter, RecordIO."""
import pickle
import struct

import numpy as np
import pytest

import ember as mx
from ember import io
from ember.io import recordio


@pytest.fixture
def numpy_seed():
    """Seed NumPy's global generator (which shuffling uses) and restore it afterwards."""
    state = np.random.get_state()
    yield np.random.seed
    np.random.set_state(state)


def examples(n, width=2):
    """`n` examples whose row i is all i, and labels i, so a batch shows which rows it holds."""
    data = np.repeat(np.arange(n, dtype=np.float32)[:, None], width, axis=1)
    return data, np.arange(n, dtype=np.float32)


def rows(batch):
    return batch.data[0].asnumpy()[:, 0].tolist()


def epoch(it):
    return [(rows(b), b.pad) for b in it]


# ----------------------------------------------------------------------------------------------
# DataDesc, DataBatch, DataIter

def test_data_desc_is_a_name_shape_tuple_with_dtype_and_layout():
    desc = io.DataDesc('data', (4, 3), np.int32, 'NC')
    assert tuple(desc) == ('data', (4, 3))
    assert dict([desc]) == {'data': (4, 3)}
    assert (desc.dtype, desc.layout) == (np.int32, 'NC')
    assert repr(desc) == "DataDesc[data,(4, 3),<class 'numpy.int32'>,NC]"
    copy = pickle.loads(pickle.dumps(desc))
    assert (copy, copy.dtype, copy.layout) == (desc, np.int32, 'NC')


def test_data_desc_batch_axis_and_get_list():
    assert io.DataDesc.get_batch_axis('NCHW') == 0
    assert io.DataDesc.get_batch_axis('TNC') == 1
    assert io.DataDesc.get_batch_axis(None) == 0
    descs = io.DataDesc.get_list([('a', (1,)), ('b', (2,))], [('a', np.int8), ('b', np.float16)])
    assert [(d.name, d.shape, d.dtype) for d in descs] == [('a', (1,), np.int8),
                                                           ('b', (2,), np.float16)]
    assert io.DataDesc.get_list([('a', (1,))], None)[0].dtype == np.float32


def test_data_batch_holds_lists_and_rejects_a_bare_array():
    batch = io.DataBatch([mx.nd.zeros((2, 3))], [mx.nd.zeros((2,))], pad=1, index=[4, 5])
    assert str(batch) == 'DataBatch: data shapes: [(2, 3)] label shapes: [(2,)]'
    assert (batch.pad, batch.index, batch.bucket_key) == (1, [4, 5], None)
    with pytest.raises(TypeError, match='data must be a list of NDArrays'):
        io.DataBatch(mx.nd.zeros((2, 3)))


class Countdown(io.DataIter):
    """A DataIter written the MXNet way: iter_next and getters, provide_data set in __init__."""

    def __init__(self, n):
        super().__init__(batch_size=1)
        self.n = self.left = n
        self.provide_data = [io.DataDesc('x', (1,))]

    def reset(self):
        self.left = self.n

    def iter_next(self):
        self.left -= 1
        return self.left >= 0

    def getdata(self):
        return [mx.nd.array([self.left])]

    def getlabel(self):
        return []

    def getpad(self):
        return 0


def test_data_iter_builds_batches_from_iter_next_and_getters():
    it = Countdown(3)
    assert [b.data[0].asscalar() for b in it] == [2.0, 1.0, 0.0]
    with pytest.raises(StopIteration):
        it.next()
    it.reset()
    assert next(it).data[0].asscalar() == 2.0
    assert it.provide_data == [('x', (1,))]
    with pytest.raises(NotImplementedError, match='Countdown must define provide_label'):
        it.provide_label


def test_data_iter_without_iter_next_says_what_is_missing():
    with pytest.raises(NotImplementedError, match='DataIter must define iter_next or next'):
        next(io.DataIter())


# ----------------------------------------------------------------------------------------------
# NDArrayIter

def test_batches_in_order_with_the_last_padded_from_the_start():
    data, label = examples(10)
    it = io.NDArrayIter(data, label, batch_size=3)
    batches = list(it)
    assert [rows(b) for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 0, 1]]
    assert [b.pad for b in batches] == [0, 0, 0, 2]
    for b in batches:
        assert b.label[0].asnumpy().tolist() == rows(b)
        assert b.data[0].shape == (3, 2)


def test_layout_puts_the_batch_on_its_axis():
    steps = np.arange(3 * 5 * 2, dtype=np.float32).reshape(3, 5, 2)      # T, N, C
    it = io.NDArrayIter(steps, np.arange(5), batch_size=2, layout='TNC', shuffle=False)
    assert it.provide_data[0].shape == (3, 2, 2) and it.provide_data[0].layout == 'TNC'
    assert it.provide_label[0].shape == (2,)
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 1]
    np.testing.assert_array_equal(batches[1].data[0].asnumpy(), steps[:, 2:4])
    np.testing.assert_array_equal(batches[2].data[0].asnumpy(), steps[:, [4, 0]])
    assert batches[2].label[0].asnumpy().tolist() == [4, 0]


def test_pad_longer_than_the_data_repeats_it():
    data, label = examples(2)
    batch, = list(io.NDArrayIter(data, label, batch_size=5))
    assert (rows(batch), batch.pad) == ([0, 1, 0, 1, 0], 3)
    assert batch.label[0].asnumpy().tolist() == [0, 1, 0, 1, 0]


def test_discard_drops_the_incomplete_last_batch_every_epoch():
    data, label = examples(10)
    it = io.NDArrayIter(data, label, batch_size=3, last_batch_handle='discard')
    for _ in range(2):
        assert epoch(it) == [([0, 1, 2], 0), ([3, 4, 5], 0), ([6, 7, 8], 0)]
        it.reset()


def test_roll_over_carries_the_remainder_into_the_next_epoch():
    data, label = examples(10)
    it = io.NDArrayIter(data, label, batch_size=3, last_batch_handle='roll_over')
    assert epoch(it) == [([0, 1, 2], 0), ([3, 4, 5], 0), ([6, 7, 8], 0)]
    it.reset()
    second = list(it)
    assert [rows(b) for b in second] == [[9, 0, 1], [2, 3, 4], [5, 6, 7]]
    assert [b.pad for b in second] == [1, 0, 0]   # MXNet reports the rolled-over count
    assert second[0].label[0].asnumpy().tolist() == [9, 0, 1]


def test_roll_over_visits_the_data_as_one_endless_stream():
    data, label = examples(7)
    it = io.NDArrayIter(data, label, batch_size=3, last_batch_handle='roll_over')
    seen = []
    for _ in range(5):
        seen += [r for b in it for r in rows(b)]
        it.reset()
    assert seen == [i % 7 for i in range(len(seen))]
    assert len(seen) == 33   # 35 examples, of which 2 are still held for the next epoch


def test_roll_over_first_batch_equals_the_padded_last_batch():
    data, label = examples(10)
    padded = list(io.NDArrayIter(data, label, batch_size=4))[-1]
    it = io.NDArrayIter(data, label, batch_size=4, last_batch_handle='roll_over')
    list(it)
    it.reset()
    np.testing.assert_array_equal(it.next().data[0].asnumpy(), padded.data[0].asnumpy())


def test_hard_reset_drops_the_rolled_over_batch():
    data, label = examples(5)
    it = io.NDArrayIter(data, label, batch_size=2, last_batch_handle='roll_over')
    list(it)
    it.hard_reset()
    assert epoch(it) == [([0, 1], 0), ([2, 3], 0)]


def test_reset_restarts_and_exhausted_iterator_keeps_stopping():
    data, label = examples(4)
    it = io.NDArrayIter(data, label, batch_size=2)
    first = epoch(it)
    with pytest.raises(StopIteration):
        it.next()
    it.reset()
    assert epoch(it) == first == [([0, 1], 0), ([2, 3], 0)]


def test_shuffle_is_a_reproducible_permutation_that_keeps_pairs(numpy_seed):
    data, label = examples(20)
    numpy_seed(7)
    it = io.NDArrayIter(data, label, batch_size=5, shuffle=True)
    order = [r for b in it for r in rows(b)]
    assert sorted(order) == list(range(20))
    assert order != list(range(20))
    for b in io.NDArrayIter(data, label, batch_size=5, shuffle=True):
        assert b.label[0].asnumpy().tolist() == rows(b)
    numpy_seed(7)
    again = [r for b in io.NDArrayIter(data, label, batch_size=5, shuffle=True) for r in rows(b)]
    assert again == order
    it.reset()
    assert sorted(r for b in it for r in rows(b)) == list(range(20))


def test_shuffle_keeps_the_dtype_of_ndarray_inputs(numpy_seed):
    numpy_seed(0)
    values = mx.nd.array(np.arange(6), dtype='int32')
    batch = next(io.NDArrayIter(values, batch_size=6, shuffle=True))
    assert batch.data[0].dtype == np.int32
    assert sorted(batch.data[0].asnumpy().tolist()) == list(range(6))


def test_dict_inputs_are_sorted_by_name_and_described():
    it = io.NDArrayIter({'b': np.zeros((6, 2, 3)), 'a': mx.nd.ones((6, 4), dtype='int32')},
                        {'lbl': np.arange(6)}, batch_size=4)
    assert [(d.name, d.shape, d.dtype) for d in it.provide_data] == [
        ('a', (4, 4), np.int32), ('b', (4, 2, 3), np.float32)]
    assert [(d.name, d.shape) for d in it.provide_label] == [('lbl', (4,))]
    batch = next(it)
    assert [d.shape for d in batch.data] == [(4, 4), (4, 2, 3)]
    assert batch.data[0].dtype == np.int32
    assert batch.label[0].asnumpy().tolist() == [0, 1, 2, 3]


def test_list_inputs_and_default_names():
    data, label = examples(4)
    it = io.NDArrayIter([data, data * 2], label, batch_size=2)
    assert [d.name for d in it.provide_data] == ['_0_data', '_1_data']
    assert [d.name for d in it.provide_label] == ['softmax_label']
    named = io.NDArrayIter(data, label, data_name='x', label_name='y')
    assert (named.provide_data[0].name, named.provide_label[0].name) == ('x', 'y')
    batch = next(it)
    assert batch.data[1].asnumpy()[:, 0].tolist() == [0, 2]


def test_without_label_batches_have_an_empty_label_list():
    data, _ = examples(5)
    it = io.NDArrayIter(data, batch_size=2, last_batch_handle='roll_over')
    assert it.provide_label == []
    assert [b.label for b in it] == [[], []]
    it.reset()
    assert rows(next(it)) == [4, 0]


@pytest.mark.parametrize('kwargs, error, words', [
    (dict(data=np.zeros((4, 2)), label=np.zeros(3)), ValueError, 'same number of examples'),
    (dict(data=np.zeros((4, 2)), last_batch_handle='keep'), ValueError, "'roll_over'"),
    (dict(data=np.zeros((4, 2)), batch_size=0), ValueError, 'batch_size=0'),
    (dict(data=None), ValueError, 'data must be given'),
    (dict(data=[]), ValueError, 'at least one array'),
    (dict(data='text'), TypeError, 'got str'),
])
def test_bad_arguments_are_named(kwargs, error, words):
    with pytest.raises(error, match=words):
        io.NDArrayIter(**kwargs)


# ----------------------------------------------------------------------------------------------
# ResizeIter and PrefetchingIter

def test_resize_iter_wraps_around_and_shrinks():
    data, label = examples(4)
    longer = io.ResizeIter(io.NDArrayIter(data, label, batch_size=2), size=3)
    assert epoch(longer) == [([0, 1], 0), ([2, 3], 0), ([0, 1], 0)]
    assert longer.provide_data == [('data', (2, 2))] and longer.batch_size == 2
    longer.reset()
    assert epoch(longer) == [([0, 1], 0), ([2, 3], 0), ([0, 1], 0)]
    shorter = io.ResizeIter(io.NDArrayIter(data, label, batch_size=1), size=2)
    assert [rows(b) for b in shorter] == [[0], [1]]


def test_resize_iter_without_internal_reset_continues_the_inner_iterator():
    data, label = examples(6)
    it = io.ResizeIter(io.NDArrayIter(data, label, batch_size=2), size=2, reset_internal=False)
    assert [rows(b) for b in it] == [[0, 1], [2, 3]]
    it.reset()
    assert [rows(b) for b in it] == [[4, 5], [0, 1]]


def test_prefetching_iter_yields_what_the_plain_iterator_yields():
    data, label = examples(10)
    plain = io.NDArrayIter(data, label, batch_size=4, last_batch_handle='roll_over')
    expected = []
    for _ in range(3):
        expected.append([(rows(b), b.label[0].asnumpy().tolist(), b.pad) for b in plain])
        plain.reset()
    prefetching = io.PrefetchingIter(
        io.NDArrayIter(data, label, batch_size=4, last_batch_handle='roll_over'))
    got = []
    for _ in range(3):
        got.append([(rows(b), b.label[0].asnumpy().tolist(), b.pad) for b in prefetching])
        prefetching.reset()
    prefetching.close()
    assert got == expected
    assert prefetching.provide_data == plain.provide_data
    assert prefetching.batch_size == 4


def test_prefetching_iter_joins_iterators_and_renames_them():
    data, label = examples(4)
    it = io.PrefetchingIter([io.NDArrayIter(data, label, batch_size=2),
                             io.NDArrayIter(data * 10, label, batch_size=2)],
                            rename_data=[{'data': 'a'}, {'data': 'b'}],
                            rename_label=[{'softmax_label': 'la'}, {'softmax_label': 'lb'}])
    assert [d.name for d in it.provide_data] == ['a', 'b']
    assert [d.name for d in it.provide_label] == ['la', 'lb']
    batches = list(it)
    it.close()
    assert len(batches) == 2
    assert [d.asnumpy()[:, 0].tolist() for d in batches[1].data] == [[2, 3], [20, 30]]
    assert len(batches[1].label) == 2
    assert batches[1].provide_data == it.provide_data


def test_prefetching_iter_reports_iterators_of_different_lengths():
    data, label = examples(4)
    it = io.PrefetchingIter([io.NDArrayIter(data, label, batch_size=2),
                             io.NDArrayIter(data, label, batch_size=2,
                                            last_batch_handle='discard'),
                             io.NDArrayIter(data[:2], label[:2], batch_size=2)])
    next(it)
    with pytest.raises(ValueError, match='different numbers of batches'):
        next(it)
    it.close()
    data5, label5 = examples(5)
    it = io.PrefetchingIter([io.NDArrayIter(data5, label5, batch_size=3),
                             io.NDArrayIter(data, label, batch_size=3)])
    next(it)
    with pytest.raises(ValueError, match=r'pad their batches differently: pads \[1, 2\]'):
        next(it)
    it.close()


class Failing(io.DataIter):
    def __init__(self):
        super().__init__(batch_size=1)
        self.provide_data = [io.DataDesc('x', (1,))]
        self.provide_label = []

    def next(self):
        raise KeyError('broken record')


def test_prefetching_iter_raises_the_fetch_error_in_the_caller():
    it = io.PrefetchingIter(Failing())
    with pytest.raises(KeyError, match='broken record'):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    it.reset()
    with pytest.raises(KeyError, match='broken record'):
        next(it)
    it.close()


def test_prefetching_threads_stop_on_close_and_when_dropped():
    data, label = examples(4)
    it = io.PrefetchingIter(io.NDArrayIter(data, label, batch_size=2))
    threads = [p.thread for p in it._prefetchers]
    it.close()
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(RuntimeError, match='closed'):
        next(it)
    dropped = io.PrefetchingIter(io.NDArrayIter(data, label, batch_size=2))
    threads = [p.thread for p in dropped._prefetchers]
    del dropped
    assert not any(t.is_alive() for t in threads)


# ----------------------------------------------------------------------------------------------
# RecordIO

MAGIC = struct.pack('<I', 0xced7230a)


def word(flag, length):
    return struct.pack('<I', (flag << 29) | length)


def write_records(path, records):
    writer = recordio.MXRecordIO(str(path), 'w')
    for record in records:
        writer.write(record)
    writer.close()


def read_all(reader):
    records = []
    record = reader.read()
    while record is not None:
        records.append(record)
        record = reader.read()
    return records


@pytest.mark.parametrize('record, stored', [
    (b'abc', MAGIC + word(0, 3) + b'abc\0'),
    (b'', MAGIC + word(0, 0)),
    (b'abcd', MAGIC + word(0, 4) + b'abcd'),
    # the magic word at an aligned offset splits the record; the reader puts it back
    (b'1234' + MAGIC + b'56', MAGIC + word(1, 4) + b'1234' + MAGIC + word(3, 2) + b'56\0\0'),
    (MAGIC, MAGIC + word(1, 0) + MAGIC + word(3, 0)),
    (b'1234' + MAGIC + b'5678' + MAGIC + b'9', MAGIC + word(1, 4) + b'1234'
     + MAGIC + word(2, 4) + b'5678' + MAGIC + word(3, 1) + b'9\0\0\0'),
    (b'1234' + MAGIC + MAGIC, MAGIC + word(1, 4) + b'1234' + MAGIC + word(2, 0)
     + MAGIC + word(3, 0)),
    # not at an aligned offset: stored whole
    (b'1' + MAGIC + b'xyz', MAGIC + word(0, 8) + b'1' + MAGIC + b'xyz'),
    (b'12' + MAGIC + MAGIC + b'34', MAGIC + word(0, 12) + b'12' + MAGIC + MAGIC + b'34'),
])
def test_recordio_stores_dmlc_format_and_reads_it_back(tmp_path, record, stored):
    path = tmp_path / 'r.rec'
    write_records(path, [record, b'next'])
    assert path.read_bytes() == stored + MAGIC + word(0, 4) + b'next'
    reader = recordio.MXRecordIO(str(path), 'r')
    assert read_all(reader) == [record, b'next']
    reader.close()


def test_recordio_round_trips_random_records_and_resets(tmp_path):
    rng = np.random.default_rng(0)
    pieces = [MAGIC, b'\x0a\x23', b'abc', b'\0']
    records = [b''.join(pieces[i] for i in rng.integers(0, 4, rng.integers(0, 12)))
               for _ in range(200)]
    write_records(tmp_path / 'r.rec', records)
    reader = recordio.MXRecordIO(tmp_path / 'r.rec', 'r')
    assert read_all(reader) == records
    reader.reset()
    assert reader.read() == records[0]
    reader.close()
    reader.close()


def test_indexed_recordio_reads_by_key(tmp_path):
    idx, rec = tmp_path / 'd.idx', tmp_path / 'd.rec'
    writer = recordio.MXIndexedRecordIO(str(idx), str(rec), 'w', key_type=str)
    for key in ('b', 'a', 'c'):
        writer.write_idx(key, key.encode() * 5)
    writer.close()
    assert idx.read_text() == 'b\t0\na\t16\nc\t32\n'
    reader = recordio.MXIndexedRecordIO(str(idx), str(rec), 'r', key_type=str)
    assert reader.keys == ['b', 'a', 'c']
    assert [reader.read_idx(k) for k in ('c', 'a', 'b')] == [b'ccccc', b'aaaaa', b'bbbbb']
    assert reader.read() == b'aaaaa'   # reading on continues after the record of 'b'
    with pytest.raises(KeyError, match="no record with key 'z'"):
        reader.seek('z')
    reader.close()


def test_pickled_reader_reopens_and_leaves_the_original_alone(tmp_path):
    idx, rec = tmp_path / 'd.idx', tmp_path / 'd.rec'
    writer = recordio.MXIndexedRecordIO(idx, rec, 'w')
    for key in range(3):
        writer.write_idx(key, b'%d' % key)
    writer.close()
    reader = recordio.MXIndexedRecordIO(idx, rec, 'r')
    assert reader.read() == b'0'
    copy = pickle.loads(pickle.dumps(reader))
    assert (copy.read(), copy.read_idx(2), copy.keys) == (b'0', b'2', [0, 1, 2])
    assert reader.read() == b'1'
    copy.close()
    reader.close()


def test_recordio_in_another_process_reopens_a_reader_and_refuses_a_writer(tmp_path):
    write_records(tmp_path / 'r.rec', [b'one', b'two'])
    reader = recordio.MXRecordIO(tmp_path / 'r.rec', 'r')
    assert reader.read() == b'one'
    reader.pid = -1   # as if forked: the file position is shared with the parent
    assert reader.read() == b'one'
    reader.close()
    writer = recordio.MXRecordIO(tmp_path / 'w.rec', 'w')
    writer.pid = -1
    with pytest.raises(mx.EmberError, match='opened for writing in another process'):
        writer.write(b'x')
    writer.close()


def test_recordio_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="flag='a'"):
        recordio.MXRecordIO(tmp_path / 'x.rec', 'a')
    write_records(tmp_path / 'r.rec', [b'abcdefgh'])
    reader = recordio.MXRecordIO(tmp_path / 'r.rec', 'r')
    with pytest.raises(mx.EmberError, match="writing needs flag='w'"):
        reader.write(b'x')
    reader.close()
    with pytest.raises(mx.EmberError, match='is closed'):
        reader.read()
    (tmp_path / 'cut.rec').write_bytes((tmp_path / 'r.rec').read_bytes()[:12])
    (tmp_path / 'bad.rec').write_bytes(b'\0' * 12)
    for name, words in (('cut.rec', 'ends inside a record at byte 0'),
                        ('bad.rec', 'not a RecordIO file: found 0x00000000 at byte 0')):
        reader = recordio.MXRecordIO(tmp_path / name, 'r')
        with pytest.raises(mx.EmberError, match=words):
            reader.read()
        reader.close()


def test_pack_and_unpack_image_record_headers():
    record = recordio.pack(recordio.IRHeader(9, 2.5, 7, 1), b'payload')
    assert len(record) == 24 + 7
    header, payload = recordio.unpack(record)
    assert (header, payload) == (recordio.IRHeader(0, 2.5, 7, 1), b'payload')
    header, payload = recordio.unpack(recordio.pack((0, np.array([1, 2, 3]), 4, 0), b'img'))
    assert (header.flag, header.label.tolist(), header.id, payload) == (3, [1, 2, 3], 4, b'img')
    with pytest.raises(mx.EmberError, match='shorter than its 24-byte header'):
        recordio.unpack(b'short')
