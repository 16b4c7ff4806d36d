"""Temporary workspaces and random streams: counts, round-robin, growth, seeding."""
import numpy as np
import pytest

from ember import backend, config, device, engine, resource
from ember.base import EmberError

CPU = device.cpu()


def settled(stream):
    """The stream once every operation pushed on it (a reseed included) has run."""
    engine.get().wait_for_var(stream.var)
    return stream


@pytest.mark.parametrize('copies', [1, 3])
def test_temp_spaces_are_the_configured_copies_in_turn(copies):
    with config.override(MXNET_CPU_TEMP_COPY=copies):
        handed = [resource.temp_space(CPU) for _ in range(3 * copies + 1)]
        distinct = list(dict.fromkeys(handed))
        assert len(distinct) == copies
        assert handed == (distinct * 4)[:len(handed)]
        assert len({id(space.var) for space in distinct}) == copies
        assert [space.index for space in distinct] == sorted(space.index for space in distinct)


@pytest.mark.parametrize('copies', [1, 4])
def test_random_streams_are_the_configured_copies_in_turn(copies):
    with config.override(MXNET_CPU_PARALLEL_RAND_COPY=copies):
        handed = [resource.random_stream(CPU) for _ in range(2 * copies + 1)]
        distinct = list(dict.fromkeys(handed))
        assert len(distinct) == copies
        assert handed == (distinct * 3)[:len(handed)]
        assert len({id(stream.var) for stream in distinct}) == copies
        assert all(isinstance(s.generator, np.random.Generator) for s in distinct)


def test_default_counts_and_per_device_copies():
    spaces, streams = resource.copies(CPU)
    assert (len(spaces), len(streams)) == (4, 1)  # MXNET_CPU_TEMP_COPY, _PARALLEL_RAND_COPY
    other_spaces, _ = resource.copies(device.cpu(1))
    assert not set(spaces) & set(other_spaces)


def test_temp_space_grows_and_keeps_its_buffer():
    space = resource.TempSpace(device.cpu(6), 0, engine.get().new_var())
    assert space.capacity == 0
    first = space.get((4, 8), 'float32')
    assert first.shape == (4, 8) and first.dtype == np.float32 and first.flags.c_contiguous
    assert space.capacity >= 128
    smaller = space.get(10, np.int64)
    assert smaller.shape == (10,) and np.shares_memory(first, smaller)
    larger = space.get((100, 100), 'float64')
    assert space.capacity >= 80000 and larger.ctypes.data % 64 == 0
    assert space.get((), 'float16').shape == ()


def test_a_kernel_s_scratch_is_carved_once_while_the_buffer_stays():
    from ember.op.nn._common import scratch
    from ember.op.registry import KernelContext
    space = resource.TempSpace(device.cpu(8), 0, engine.get().new_var())
    ctx = KernelContext(None, temp=space)
    specs = [((3, 5), np.float32), None, ((7,), np.int64)]
    first = scratch(ctx, np, *specs)
    assert [None if a is None else (a.shape, a.dtype) for a in first] == \
        [((3, 5), np.float32), None, ((7,), np.int64)]
    assert not np.shares_memory(first[0], first[2])
    again = scratch(ctx, np, *specs)
    assert all(a is b for a, b in zip(first, again))       # the same views, not new ones
    assert scratch(ctx, np, ((3, 5), np.float64))[0].dtype == np.float64   # other specs
    space.get((1 << 16,), 'float32')                       # the buffer grows: carved anew
    grown = scratch(ctx, np, *specs)
    assert grown[0] is not first[0] and np.shares_memory(grown[0], space.get(1, np.uint8))
    space.release()
    assert scratch(ctx, np, *specs)[0] is not grown[0]
    listed = scratch(ctx, np, ([2, 2], np.float32))          # an unhashable shape works too
    assert listed[0].shape == (2, 2) and list(space.carved) == [tuple(specs)]


def test_workspace_memory_comes_from_the_pool():
    pool_stats = lambda: resource.storage.manager(device.cpu(7)).stats()  # noqa: E731
    space = resource.TempSpace(device.cpu(7), 0, engine.get().new_var())
    space.get((1000,), 'float32')
    assert pool_stats()['in_use'] == space.capacity
    cached = pool_stats()['cached']
    space.get((2000,), 'float32')  # grows: the outgrown buffer is freed, not cached
    assert pool_stats()['in_use'] == space.capacity and pool_stats()['cached'] == cached


def test_same_seed_gives_the_same_draws():
    with config.override(MXNET_CPU_PARALLEL_RAND_COPY=2):
        first, second = resource.copies(CPU)[1]
        resource.seed(42)
        draws = [settled(s).generator.random(3) for s in (first, second)]
        assert not np.array_equal(draws[0], draws[1])  # copies draw independent numbers
        resource.seed(43)
        assert not np.array_equal(settled(first).generator.random(3), draws[0])
        resource.seed(42)
        assert np.array_equal(settled(first).generator.random(3), draws[0])
        assert np.array_equal(settled(second).generator.random(3), draws[1])


def test_seed_of_one_device_leaves_the_others():
    mine, theirs = resource.random_stream(device.cpu(1)), resource.random_stream(device.cpu(2))
    resource.seed(5)
    expected = settled(theirs).generator.random()
    resource.seed(5)
    settled(theirs)
    resource.seed(9, device=device.cpu(1))
    settled(mine)
    assert theirs.generator.random() == expected


def test_devices_built_after_a_seed_follow_it():
    resource.seed(11)
    with config.override(MXNET_CPU_PARALLEL_RAND_COPY=2):  # rebuilds every device's copies
        expected = resource.random_stream(CPU).generator.random(2)
    resource.seed(11)
    assert np.array_equal(settled(resource.random_stream(CPU)).generator.random(2), expected)


def test_reseed_is_ordered_after_pushed_draws():
    stream = resource.random_stream(CPU)
    resource.seed(1)
    expected_old = np.random.Generator(np.random.PCG64(
        np.random.SeedSequence(1, spawn_key=(CPU.device_typeid, 0, stream.index)))).random()
    drawn = []
    engine.get().push(lambda: drawn.append(stream.generator.random()), writes=[stream.var],
                      device=CPU)
    resource.seed(2)
    engine.get().wait_for_var(stream.var)
    assert drawn == [expected_old]
    assert stream.generator.random() != expected_old


def test_seed_must_be_an_integer():
    with pytest.raises(TypeError, match="seed 1.5: expected an integer"):
        resource.seed(1.5)


@pytest.mark.skipif(backend.num_gpus() > 0, reason='this machine has a GPU')
def test_gpu_resources_without_gpu_are_a_clear_error():
    with pytest.raises(EmberError, match=r'gpu\(0\): no GPU backend'):
        resource.temp_space(device.gpu(0))
