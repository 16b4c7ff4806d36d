"""MXNet 1.x NDArray list files: fixtures written by MXNet 1.9.1, byte-exact writing, and every
kind of damaged file rejected with EmberError."""
import io
import struct
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

from ember.base import EmberError
from ember.ndarray import io as ndio
from data_files import MXNET_FIXTURES as FIXTURES

FIXTURE_FILES = ('arrays.nd', 'list.nd', 'mlp-0001.params')


def fixture_bytes(name):
    return (FIXTURES / name).read_bytes()


def header(count):
    return struct.pack('<QQQ', 0x112, 0, count)


def record(shape, flag=0, data=b'', magic=0xF993FAC9, storage=0, device=(1, 0)):
    head = struct.pack(f'<IiI{len(shape)}q', magic, storage, len(shape), *shape)
    return head + struct.pack('<iii', device[0], device[1], flag) + data


def names_block(*names):
    encoded = [n.encode() for n in names]
    return struct.pack('<Q', len(encoded)) + b''.join(
        struct.pack('<Q', len(n)) + n for n in encoded)


def list_file(*records, names=()):
    return header(len(records)) + b''.join(records) + names_block(*names)


def rejected(blob, *words):
    with pytest.raises(EmberError) as info:
        ndio.loads(blob)
    message = str(info.value)
    assert '<bytes>' in message and 'offset' in message
    for word in words:
        assert word in message, message
    return message


# ----------------------------------------------------------------------------------------------
# Files written by MXNet 1.9.1.

def test_dict_fixture_has_documented_contents():
    loaded = ndio.loads(fixture_bytes('arrays.nd'))
    assert list(loaded) == ['a', 'b', 'c']
    np.testing.assert_array_equal(loaded['a'], np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(loaded['b'], np.array([1.5, -2.0]))
    np.testing.assert_array_equal(loaded['c'], np.array([[7]], dtype=np.int32))
    assert [v.dtype for v in loaded.values()] == [np.float32, np.float64, np.int32]


def test_list_fixture_has_documented_contents():
    loaded = ndio.loads(fixture_bytes('list.nd'))
    assert isinstance(loaded, list) and len(loaded) == 2
    assert loaded[0].dtype == np.float16 and loaded[1].dtype == np.uint8
    np.testing.assert_array_equal(loaded[0], np.ones((2, 2), np.float16))
    np.testing.assert_array_equal(loaded[1], np.array([[1, 2, 3]], np.uint8))


def test_params_fixture_names_and_shapes():
    loaded = ndio.loads(fixture_bytes('mlp-0001.params'))
    shapes = {name: value.shape for name, value in loaded.items()}
    assert shapes == {'arg:mlp_dense0_weight': (16, 8), 'arg:mlp_dense0_bias': (16,),
                      'arg:mlp_dense1_weight': (16, 16), 'arg:mlp_dense1_bias': (16,),
                      'arg:mlp_dense2_weight': (4, 16), 'arg:mlp_dense2_bias': (4,)}


@pytest.mark.parametrize('name', FIXTURE_FILES)
def test_saving_a_fixture_again_gives_its_bytes(name, tmp_path):
    original = fixture_bytes(name)
    loaded = ndio.load_arrays(FIXTURES / name)
    assert ndio.dumps(loaded) == original
    ndio.save_arrays(tmp_path / name, loaded)
    assert (tmp_path / name).read_bytes() == original


def test_loaded_arrays_are_writable_and_own_their_memory():
    blob = fixture_bytes('arrays.nd')
    loaded = ndio.loads(blob)
    loaded['a'][0, 0] = 42
    assert ndio.loads(blob)['a'][0, 0] == 0


def test_dense_arrays_are_read_into_the_memory_allocate_gives():
    blob = ndio.dumps({'f': np.arange(6, dtype=np.float32).reshape(2, 3),
                       'i': np.array([7, -8], np.int64), 'b': np.array([True, False])})
    asked, made = [], {}

    def allocate(shape, dtype):
        asked.append((shape, dtype.name))
        if dtype == np.int64:
            return None                         # declined: read into NumPy as before
        target = np.full(shape, -1, dtype)
        made[dtype.name] = target
        return ('holder', target), target.reshape(-1).view(np.uint8)
    loaded = ndio.loads(blob, allocate)
    # bool arrays are checked byte by byte, never read into given memory
    assert asked == [((2, 3), 'float32'), ((2,), 'int64')]
    holder, target = loaded['f']
    assert holder == 'holder' and target is made['float32']
    assert target.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert loaded['i'].tolist() == [7, -8] and loaded['b'].tolist() == [True, False]
    # a file that ends early still says so
    with pytest.raises(EmberError, match='truncated'):
        ndio.loads(blob[:-40], allocate)


def test_bytes_like_inputs_and_unseekable_streams():
    blob = fixture_bytes('list.nd')

    class Pipe:
        def __init__(self, data):
            self._data = io.BytesIO(data)

        def read(self, n=-1):
            return self._data.read(n)

    for source in (bytearray(blob), memoryview(blob)):
        assert ndio.loads(source)[1].tolist() == [[1, 2, 3]]
    assert ndio.load_arrays(Pipe(blob))[1].tolist() == [[1, 2, 3]]


def test_reading_from_an_open_file_at_an_offset(tmp_path):
    path = tmp_path / 'two.bin'
    path.write_bytes(b'prefix' + fixture_bytes('list.nd'))
    with open(path, 'rb') as stream:
        stream.read(6)
        assert ndio.load_arrays(stream)[0].shape == (2, 2)


# ----------------------------------------------------------------------------------------------
# Writing.

ALL_DTYPES = [('float32', 0), ('float64', 1), ('float16', 2), ('uint8', 3), ('int32', 4),
              ('int8', 5), ('int64', 6), ('bool', 7), (ml_dtypes.bfloat16, 12)]


@pytest.mark.parametrize('dtype, flag', ALL_DTYPES)
def test_every_dtype_round_trips_with_its_flag(dtype, flag):
    values = np.array([[0, 1, 2], [3, 0, 1]]).astype(dtype)
    blob = ndio.dumps([values])
    assert struct.unpack_from('<iii', blob, 24 + 12 + 16) == (1, 0, flag)
    loaded, = ndio.loads(blob)
    assert loaded.dtype == values.dtype
    np.testing.assert_array_equal(loaded, values)


def test_exact_bytes_of_a_small_dict():
    blob = ndio.dumps({'w': np.array([1, 2], np.int8)})
    expected = list_file(record((2,), flag=5, data=b'\x01\x02'), names=['w'])
    assert blob == expected


def test_layouts_are_written_in_c_order_native_values():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    for value in (base.T, np.asfortranarray(base), base[:, ::2], base.astype('>f4')):
        loaded, = ndio.loads(ndio.dumps([value]))
        assert loaded.dtype == np.float32 and loaded.flags.c_contiguous
        np.testing.assert_array_equal(loaded, value)


def test_empty_arrays_none_entries_and_unicode_names():
    data = {'zero-size': np.zeros((0, 3), np.int64), 'none': None, 'ünï': np.ones(1)}
    loaded = ndio.loads(ndio.dumps(data))
    assert list(loaded) == list(data)
    assert loaded['zero-size'].shape == (0, 3) and loaded['none'] is None
    none_record = struct.pack('<IiI', 0xF993FAC9, 0, 0)
    assert none_record in ndio.dumps([None])


def test_a_single_array_saves_as_a_list_and_empty_data_as_an_empty_list():
    assert len(ndio.loads(ndio.dumps(np.ones(2)))) == 1
    assert ndio.loads(ndio.dumps({})) == []


@pytest.mark.parametrize('data, error, words', [
    ([np.float32(1.0)], TypeError, 'entry 0'),
    ([np.zeros(())], EmberError, '0-d'),
    ({'x': np.zeros(2, np.complex64)}, EmberError, "entry x: dtype complex64"),
    ([np.zeros(2, np.uint16)], EmberError, 'uint16'),
    ({1: np.zeros(2)}, TypeError, 'int'),
    ('text', TypeError, 'str'),
])
def test_unsaveable_data_is_rejected_before_writing(data, error, words, tmp_path):
    target = io.BytesIO()
    with pytest.raises(error, match=words):
        ndio.save_arrays(target, data)
    assert target.getvalue() == b''


# ----------------------------------------------------------------------------------------------
# Damaged files.

@pytest.mark.parametrize('name', FIXTURE_FILES)
def test_every_truncation_raises_ember_error(name):
    blob = fixture_bytes(name)
    for end in range(len(blob)):
        with pytest.raises(EmberError):
            ndio.loads(blob[:end])


def test_random_byte_damage_never_raises_another_exception():
    blob = fixture_bytes('arrays.nd')
    rng = np.random.default_rng(0)
    outcomes = set()
    for _ in range(3000):
        damaged = bytearray(blob)
        for position in rng.integers(0, len(blob), size=rng.integers(1, 4)):
            damaged[position] = rng.integers(0, 256)
        try:
            ndio.loads(damaged)
            outcomes.add('loaded')
        except EmberError:
            outcomes.add('rejected')
    assert outcomes == {'loaded', 'rejected'}


def test_truncation_error_names_the_file_and_offset(tmp_path):
    path = tmp_path / 'cut.params'
    path.write_bytes(fixture_bytes('arrays.nd')[:70])
    with pytest.raises(EmberError, match=r'cut\.params: offset 64: truncated file: array 0 '
                                         r'data \(float32, shape \(2, 3\)\) needs 24 bytes'):
        ndio.load_arrays(path)


def test_wrong_list_magic():
    assert 'offset 0' in rejected(b'PK\x03\x04' + bytes(40), 'not an MXNet NDArray list file')
    rejected(b'{"nodes": []}', 'magic 0x227365646f6e227b')
    rejected(b'\x12\x01', 'truncated file: list magic needs 8 bytes, 2 left')


def test_wrong_array_magic():
    rejected(list_file(record((1,), data=bytes(4), magic=0x12345678)), 'array 0',
             'offset 24', 'magic 0x12345678')
    rejected(list_file(record((1,), data=bytes(4), magic=0xF993FACA)), 'npx.set_np')


@pytest.mark.parametrize('storage, kind', [(1, 'row_sparse'), (2, 'csr')])
def test_a_dense_record_marked_sparse_is_rejected_clearly(storage, kind):
    # sparse records are read (tests/test_sparse_io.py); a dense layout under a sparse
    # storage type is not one
    rejected(list_file(record((2,), data=bytes(8), storage=storage)), f'array 0 ({kind})')


def test_unknown_storage_dtype_and_device():
    rejected(list_file(record((1,), data=bytes(4), storage=7)), 'unknown storage type 7')
    rejected(list_file(record((1,), flag=99, data=bytes(4))), 'unknown dtype flag 99')
    rejected(list_file(record((1,), flag=8, data=bytes(4))), 'unknown dtype flag 8')
    rejected(list_file(record((1,), data=bytes(4), device=(9, 0))), 'unknown device type 9')


def test_impossible_shapes():
    rejected(header(1) + struct.pack('<IiI', 0xF993FAC9, 0, 33), 'ndim 33', 'offset 32')
    rejected(list_file(record((2, -3), data=bytes(8))), 'negative dimension')
    rejected(list_file(record((0, 2**62, 2**62))), 'impossible')


def test_huge_claimed_sizes_are_rejected_before_allocating():
    blob = list_file(record((2**20, 2**20), data=bytes(8)))
    assert len(blob) < 100
    rejected(blob, 'needs 4398046511104 bytes, 16 left')
    rejected(header(2**60), 'claims 1152921504606846976 arrays')
    one = record((1,), data=bytes(4))
    rejected(header(1) + one + struct.pack('<QQ', 1, 2**62), 'needs 4611686018427387904 bytes')
    # 256 MiB claimed, which NumPy could allocate: the reader must not.
    tracemalloc.start()
    try:
        rejected(list_file(record((2**26,), data=bytes(8))), 'needs 268435456 bytes')
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_names_that_do_not_fit_the_arrays():
    one = record((1,), data=bytes(4))
    rejected(list_file(one, one, names=['x']), '1 names for 2 arrays')
    rejected(list_file(one, one, names=['x', 'x']), "'x' appears more than once")
    bad_utf8 = header(1) + one + struct.pack('<QQ', 1, 1) + b'\xff'
    rejected(bad_utf8, 'not valid UTF-8')


def test_trailing_bytes_are_rejected():
    rejected(fixture_bytes('list.nd') + b'\x00', '1 unexpected bytes')


def test_nothing_from_the_file_is_executed():
    # A pickle opcode stream where the list magic belongs is just a wrong magic.
    import pickle
    rejected(pickle.dumps([1, 2, 3]) + bytes(32), 'not an MXNet NDArray list file')


# ----------------------------------------------------------------------------------------------
# NDArray level (mx.nd.save / mx.nd.load).

def ndarray_api():
    from ember.ndarray import NDArray, array
    return NDArray, array


def test_ndarray_save_and_load_round_trip(tmp_path):
    NDArray, array = ndarray_api()
    path = tmp_path / 'net.params'
    weights = {'w': array(np.arange(6, dtype=np.float32).reshape(2, 3)),
               'b': array(np.array([1, 2], np.int64), dtype=np.int64)}
    ndio.save(str(path), weights)
    loaded = ndio.load(str(path))
    assert list(loaded) == ['w', 'b'] and all(isinstance(v, NDArray) for v in loaded.values())
    np.testing.assert_array_equal(loaded['w'].asnumpy(), weights['w'].asnumpy())
    assert loaded['b'].dtype == np.int64
    ndio.save(str(path), weights['w'])
    assert len(ndio.load(str(path))) == 1


def test_ndarray_load_of_an_mxnet_fixture_goes_to_the_current_device():
    from ember.device import current_device
    NDArray, _ = ndarray_api()
    loaded = ndio.load_frombuffer(fixture_bytes('list.nd'))
    assert [value.dtype for value in loaded] == [np.float16, np.uint8]
    assert all(value.context == current_device() for value in loaded)
    assert ndio.load(FIXTURES / 'arrays.nd')['c'].asnumpy().tolist() == [[7]]


def test_ndarray_save_writes_mxnet_bytes():
    _, array = ndarray_api()
    original = fixture_bytes('arrays.nd')
    loaded = ndio.load_frombuffer(original)
    target = io.BytesIO()
    ndio.save(target, loaded)
    assert target.getvalue() == original


def test_ndarray_save_rejects_what_mxnet_rejects():
    _, array = ndarray_api()
    with pytest.raises(ValueError, match='NDArray'):
        ndio.save(io.BytesIO(), 3)
    with pytest.raises(TypeError, match='ndarray'):
        ndio.save(io.BytesIO(), [np.ones(2)])
    with pytest.raises(TypeError, match='int'):
        ndio.save(io.BytesIO(), {1: array(np.ones(2))})
