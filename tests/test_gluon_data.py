"""gluon.data (datasets, samplers, DataLoader) and gluon.utils (splitting, clipping, files)."""
import hashlib
import multiprocessing as mp
import os

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.gluon import data as gdata
from ember.gluon import utils


# ---------------------------------------------------------------------------------------------
# Datasets

def test_array_dataset_zips_arrays():
    features = mx.nd.arange(12).reshape((6, 2))
    labels = mx.nd.arange(6)
    ds = gdata.ArrayDataset(features, labels)
    assert len(ds) == 6
    x, y = ds[4]
    assert x.asnumpy().tolist() == [8.0, 9.0] and y == 4.0
    assert isinstance(y, np.float32)  # 1-D NDArrays become NumPy scalars
    assert gdata.ArrayDataset([1, 2])[1] == 2


def test_array_dataset_rejects_unequal_lengths():
    with pytest.raises(ValueError, match='same length'):
        gdata.ArrayDataset([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match='at least one'):
        gdata.ArrayDataset()


def test_dataset_transforms_and_views():
    ds = gdata.ArrayDataset(list(range(10)), list('abcdefghij'))
    assert ds.transform(lambda x, y: (y, x))[3] == ('d', 3)
    assert ds.transform_first(lambda x: x * x, lazy=False)[3] == (9, 'd')
    assert isinstance(ds.transform(lambda x, y: x, lazy=False), gdata.SimpleDataset)
    assert [x for x, _ in ds.filter(lambda s: s[0] % 3 == 0)] == [0, 3, 6, 9]
    assert [len(ds.shard(3, i)) for i in range(3)] == [4, 3, 3]
    assert [x for x, _ in ds.shard(3, 1)] == [4, 5, 6]
    assert len(ds.take(4)) == 4 and len(ds.take(None)) == 10
    assert [x for x, _ in ds.sample(gdata.IntervalSampler(10, 5))] == [0, 5, 1, 6, 2, 7, 3, 8,
                                                                       4, 9]
    simple = gdata.SimpleDataset(np.arange(5))
    assert len(simple) == 5 and simple[2] == 2


# ---------------------------------------------------------------------------------------------
# Samplers

def test_samplers():
    assert list(gdata.SequentialSampler(4, start=2)) == [2, 3, 4, 5]
    np.random.seed(0)
    order = list(gdata.RandomSampler(20))
    assert sorted(order) == list(range(20)) and order != list(range(20))
    assert len(gdata.RandomSampler(20)) == 20


@pytest.mark.parametrize('last_batch,batches', [
    ('keep', [[0, 1, 2], [3, 4, 5], [6]]),
    ('discard', [[0, 1, 2], [3, 4, 5]]),
])
def test_batch_sampler_last_batch(last_batch, batches):
    sampler = gdata.BatchSampler(gdata.SequentialSampler(7), 3, last_batch)
    assert list(sampler) == batches and len(sampler) == len(batches)


def test_batch_sampler_rollover_carries_remainder():
    sampler = gdata.BatchSampler(gdata.SequentialSampler(7), 3, 'rollover')
    assert len(sampler) == 2 and list(sampler) == [[0, 1, 2], [3, 4, 5]]
    assert len(sampler) == 2  # (1 carried + 7) // 3
    assert list(sampler) == [[6, 0, 1], [2, 3, 4]]
    assert list(sampler) == [[5, 6, 0], [1, 2, 3], [4, 5, 6]]


def test_batch_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="last_batch='skip'"):
        gdata.BatchSampler(gdata.SequentialSampler(3), 2, 'skip')
    with pytest.raises(ValueError, match='batch_size=0'):
        gdata.BatchSampler(gdata.SequentialSampler(3), 0)


# ---------------------------------------------------------------------------------------------
# DataLoader

def make_dataset(n=10):
    features = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return gdata.ArrayDataset(mx.nd.array(features), np.arange(n, dtype=np.int32)), features


def test_dataloader_batches_in_order():
    ds, features = make_dataset()
    loader = gdata.DataLoader(ds, batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and len(batches) == 3
    x, y = batches[2]
    assert x.shape == (2, 3) and y.shape == (2,)
    assert y.dtype == np.int32 and y.asnumpy().tolist() == [8, 9]
    np.testing.assert_array_equal(np.concatenate([b[0].asnumpy() for b in batches]), features)


def test_dataloader_last_batch_modes():
    ds, _ = make_dataset()
    assert [b[1].shape[0] for b in gdata.DataLoader(ds, 4, last_batch='discard')] == [4, 4]
    rollover = gdata.DataLoader(ds, 4, last_batch='rollover')
    assert [b[1].asnumpy().tolist() for b in rollover] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [b[1].asnumpy().tolist() for b in rollover][0] == [8, 9, 0, 1]


def test_dataloader_shuffle_visits_every_sample_once():
    ds, _ = make_dataset(25)
    np.random.seed(3)
    labels = np.concatenate([y.asnumpy() for _, y in gdata.DataLoader(ds, 6, shuffle=True)])
    assert sorted(labels.tolist()) == list(range(25)) and labels.tolist() != list(range(25))


def test_dataloader_sampler_and_batch_sampler():
    ds, _ = make_dataset()
    sampler = gdata.IntervalSampler(10, 2)
    labels = [y.asnumpy().tolist() for _, y in gdata.DataLoader(ds, 5, sampler=sampler)]
    assert labels == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    batches = gdata.BatchSampler(gdata.SequentialSampler(3, start=7), 2)
    labels = [y.asnumpy().tolist() for _, y in gdata.DataLoader(ds, batch_sampler=batches)]
    assert labels == [[7, 8], [9]]


def test_dataloader_argument_conflicts():
    ds, _ = make_dataset()
    with pytest.raises(ValueError, match='batch_size must be specified'):
        gdata.DataLoader(ds)
    with pytest.raises(ValueError, match='shuffle'):
        gdata.DataLoader(ds, 2, shuffle=True, sampler=gdata.SequentialSampler(10))
    with pytest.raises(ValueError, match='batch_sampler'):
        gdata.DataLoader(ds, 2, batch_sampler=gdata.BatchSampler(gdata.SequentialSampler(2), 1))


def test_dataloader_custom_batchify_fn():
    ds, _ = make_dataset()
    loader = gdata.DataLoader(ds, 3, batchify_fn=lambda samples: [y for _, y in samples])
    assert next(iter(loader)) == [0, 1, 2]


def test_default_batchify_stacks_nested_samples():
    batch = gdata.default_batchify_fn([(mx.nd.ones((2,)), (1.5, 2)), (mx.nd.zeros((2,)),
                                                                        (2.5, 3))])
    assert batch[0].shape == (2, 2)
    assert batch[1][0].asnumpy().tolist() == [1.5, 2.5]
    assert batch[1][1].dtype == np.asarray([2, 3]).dtype


def test_dataloader_threads_give_same_batches_in_order():
    ds, _ = make_dataset(23)
    serial = [y.asnumpy().tolist() for _, y in gdata.DataLoader(ds, 4)]
    threaded = [y.asnumpy().tolist() for _, y in gdata.DataLoader(ds, 4, num_workers=3)]
    assert threaded == serial
    unbuffered = gdata.DataLoader(ds, 4, num_workers=2, prefetch=0)
    assert [y.asnumpy().tolist() for _, y in unbuffered] == serial


def test_dataloader_worker_errors_reach_the_caller():
    def broken(samples):
        raise RuntimeError('bad sample')
    ds, _ = make_dataset()
    with pytest.raises(RuntimeError, match='bad sample'):
        list(gdata.DataLoader(ds, 2, batchify_fn=broken, num_workers=2))


def test_dataloader_pin_memory():
    ds, _ = make_dataset(4)
    x, _ = next(iter(gdata.DataLoader(ds, 2, pin_memory=True)))
    assert x.context == mx.cpu_pinned(0)


# ---------------------------------------------------------------------------------------------
# utils: splitting and clipping

def test_split_data_even_and_uneven():
    data = mx.nd.arange(14).reshape((7, 2))
    parts = utils.split_data(data, 3, even_split=False)
    assert [p.shape[0] for p in parts] == [2, 2, 3]
    assert parts[2].asnumpy()[:, 0].tolist() == [8.0, 10.0, 12.0]
    with pytest.raises(ValueError, match='evenly split'):
        utils.split_data(data, 3)
    assert len(utils.split_data(mx.nd.ones((2, 1)), 4, even_split=False)) == 2


def test_split_data_on_other_axis():
    data = mx.nd.arange(12).reshape((2, 6))
    parts = utils.split_data(data, 3, batch_axis=1)
    assert [p.asnumpy().tolist() for p in parts][1] == [[2.0, 3.0], [8.0, 9.0]]


def test_split_and_load():
    devices = [mx.cpu(0), mx.cpu(1)]
    parts = utils.split_and_load(np.arange(8, dtype=np.float32).reshape(4, 2), devices)
    assert [p.context for p in parts] == devices
    assert parts[1].asnumpy().tolist() == [[4.0, 5.0], [6.0, 7.0]]
    single = utils.split_and_load(mx.nd.ones((3,)), [mx.cpu(1)])
    assert len(single) == 1 and single[0].context == mx.cpu(1)


def test_clip_global_norm_scales_in_place():
    arrays = [mx.nd.array([[3.0, 0.0]]), mx.nd.array([4.0, 12.0])]
    total = utils.clip_global_norm(arrays, 6.5)
    assert total == pytest.approx(13.0)
    np.testing.assert_allclose(arrays[0].asnumpy(), [[1.5, 0.0]], rtol=1e-5)
    np.testing.assert_allclose(arrays[1].asnumpy(), [2.0, 6.0], rtol=1e-5)


def test_clip_global_norm_leaves_small_arrays_and_warns_on_nan():
    arrays = [mx.nd.array([0.3, 0.4])]
    norm = utils.clip_global_norm(arrays, 1.0, check_isfinite=False)
    assert isinstance(norm, mx.nd.NDArray)
    np.testing.assert_allclose(norm.asnumpy(), [0.5], rtol=1e-6)
    np.testing.assert_allclose(arrays[0].asnumpy(), [0.3, 0.4], rtol=1e-6)
    with pytest.warns(UserWarning, match='nan or inf'):
        utils.clip_global_norm([mx.nd.array([np.nan, 1.0])], 1.0)
    with pytest.raises(ValueError, match='empty'):
        utils.clip_global_norm([], 1.0)


# ---------------------------------------------------------------------------------------------
# utils: files

def write(path, payload=b'weights'):
    path.write_bytes(payload)
    return str(path), hashlib.sha1(payload).hexdigest()


def test_check_sha1(tmp_path):
    path, digest = write(tmp_path / 'a.bin')
    assert utils.check_sha1(path, digest)
    assert not utils.check_sha1(path, '0' * 40)


def test_download_copies_local_paths_and_file_urls(tmp_path):
    source, digest = write(tmp_path / 'model.params')
    target_dir = tmp_path / 'cache'
    target_dir.mkdir()
    got = utils.download(source, path=str(target_dir), sha1_hash=digest)
    assert got == str(target_dir / 'model.params') and utils.check_sha1(got, digest)
    other = utils.download('file://' + source, path=str(tmp_path / 'copy.params'))
    assert open(other, 'rb').read() == b'weights'


def test_download_keeps_a_valid_existing_file_unless_overwrite(tmp_path):
    source, digest = write(tmp_path / 'src.bin', b'new')
    target, _ = write(tmp_path / 'dst.bin', b'old')
    assert open(utils.download(source, target), 'rb').read() == b'old'
    assert open(utils.download(source, target, overwrite=True), 'rb').read() == b'new'
    write(tmp_path / 'dst.bin', b'old')
    assert open(utils.download(source, target, sha1_hash=digest), 'rb').read() == b'new'


def test_download_errors_name_the_problem(tmp_path):
    with pytest.raises(mx.base.MXNetError, match=r"cannot fetch 'http://127.0.0.1:9/m.params' "
                                                 r'\(.*\) after 1 attempts'):
        utils.download('http://127.0.0.1:9/m.params', path=str(tmp_path), retries=1)
    with pytest.raises(mx.base.MXNetError, match='no such file'):
        utils.download(str(tmp_path / 'missing.bin'), path=str(tmp_path / 'out.bin'))
    source, _ = write(tmp_path / 'src.bin')
    with pytest.raises(mx.base.MXNetError, match='SHA-1'):
        utils.download(source, str(tmp_path / 'out.bin'), sha1_hash='0' * 40)


def test_gluon_repo_variable_points_downloads_at_a_local_mirror(tmp_path):
    models = tmp_path / 'mirror' / 'gluon' / 'models'
    models.mkdir(parents=True)
    write(models / 'net.zip', b'zip')
    with config.override(MXNET_GLUON_REPO=str(tmp_path / 'mirror')):
        url = utils._get_repo_file_url('gluon/models', 'net.zip')
        assert url == os.path.join(str(tmp_path / 'mirror'), 'gluon/models/net.zip')
        got = utils.download(url, path=str(tmp_path))
    assert open(got, 'rb').read() == b'zip'
    with config.override(MXNET_GLUON_REPO='https://mirror.example/repo'):
        assert utils._get_repo_url() == 'https://mirror.example/repo/'


def test_default_mp_batchify_stacks_into_shared_memory_like_the_default():
    samples = [(mx.nd.array([1.0, 2.0]), 3), (mx.nd.array([4.0, 5.0]), 6)]
    shared = gdata.dataloader.default_mp_batchify_fn(samples)
    plain = gdata.default_batchify_fn(samples)
    for got, want in zip(shared, plain):
        assert got.asnumpy().tolist() == want.asnumpy().tolist() and got.dtype == want.dtype


def test_ndarrays_pickle_through_shared_memory_for_the_v1_loader():
    from ember.gluon.data import dataloader
    rebuild, args = dataloader.reduce_ndarray(mx.nd.array([[1, 2], [3, 4]]))
    assert rebuild is dataloader.rebuild_ndarray and args[0] == os.getpid()
    assert dataloader.rebuild_ndarray(*args).asnumpy().tolist() == [[1, 2], [3, 4]]
    rebuild, args = dataloader.reduce_np_ndarray(mx.np.array([5.0, 6.0]))
    again = dataloader.rebuild_np_ndarray(*args)
    assert isinstance(again, mx.np.ndarray) and again.asnumpy().tolist() == [5, 6]
    reader, writer = (dataloader.ConnectionWrapper(end) for end in mp.Pipe(duplex=False))
    writer.send({'x': mx.nd.ones((2, 2))})
    assert reader.recv()['x'].asnumpy().tolist() == [[1, 1], [1, 1]]
    assert reader.poll() is False           # the wrapped connection's own methods
    queue = dataloader.SimpleQueue()
    child = mp.get_context('fork').Process(target=_send_batch, args=(queue,))
    child.start()
    index, batch = queue.get()
    child.join(timeout=30)
    assert index == 7 and batch.asnumpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    keys, data = dataloader.Queue(), dataloader.SimpleQueue()
    keys.put((0, [1, 2]))
    keys.put((None, None))
    dataloader.worker_loop_v1([10, 11, 12], keys, data, lambda s: mx.nd.array(s))
    data.put((None, None))
    found = {}
    dataloader.fetcher_loop_v1(data, found)
    assert list(found) == [0] and found[0].asnumpy().tolist() == [11, 12]


def _send_batch(queue):
    queue.put((7, mx.nd.arange(6).reshape((2, 3))))


def test_dataloader_v1_gives_the_batches_of_the_dataloader():
    ds, _ = make_dataset(11)
    want = [y.asnumpy().tolist() for _, y in gdata.DataLoader(ds, 4)]
    serial = gdata.dataloader.DataLoaderV1(ds, 4)
    assert len(serial) == 3 and [y.asnumpy().tolist() for _, y in serial] == want
    workers = gdata.dataloader.DataLoaderV1(ds, 4, num_workers=2)
    assert [y.asnumpy().tolist() for _, y in workers] == want
    with pytest.raises(ValueError, match='batch_size'):
        gdata.dataloader.DataLoaderV1(ds)
