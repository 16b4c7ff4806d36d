"""The graph compiler's persistent cache and controls: NEURON_CC_FLAGS, the cache root, keys,
cached failures, locks, LRU eviction, NEURON_NUM_RECENT_MODELS_TO_KEEP, counters,
NEURON_FRAMEWORK_DEBUG, NEURON_DUMP_HLO_SNAPSHOT (and replay), NEURON_EXTRACT_GRAPHS_ONLY and
``python -m ember cache``. Several processes at once: test_compile_stress.py."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import ember as mx
from ember import cli, config, profiler
from ember.compiler import counters, extract, store as stores
from ember.compiler.key import differences
from ember.executor import compile as compiling
from ember.op.nn.conv.state import STATE
from ember.passes.options import Options


@pytest.fixture
def cache(tmp_path):
    """A fresh disk cache for the test (and no graph loaded from an earlier test)."""
    compiling.LOADED.clear()
    root = tmp_path / 'cache'
    with config.override(NEURON_CC_FLAGS=f'--cache_dir={root}'):
        yield root
    compiling.LOADED.clear()


def fresh_process():
    """Forget what this process loaded, as a new process would start."""
    compiling.LOADED.clear()


def delta(before):
    after = counters()
    return {name: after[name] - before[name] for name in after}


def small_graph():
    x = mx.sym.var('x')
    return mx.sym.FullyConnected(mx.sym.relu(x * 2), num_hidden=3, name='fc').to_graph()


def options_of(graph, **extra):
    shapes = {'x': (2, 4), 'fc_weight': (3, 4), 'fc_bias': (3,)}
    return Options(shapes, {n: np.dtype('float32') for n in shapes}, **extra)


def conv_net(channels=16):
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(channels, 3, padding=1, in_channels=channels),
            mx.gluon.nn.BatchNorm(in_channels=channels), mx.gluon.nn.Activation('relu'),
            mx.gluon.nn.Conv2D(channels, 3, padding=1, in_channels=channels))
    net.initialize(mx.init.Xavier())
    return net


# ----------------------------------------------------------------------------------------------
# Flags and the cache root

def test_flags_in_any_order_spacing_or_with_repeated_defaults_key_alike():
    parse = lambda text: config.parse_value(config.lookup('NEURON_CC_FLAGS'), text)  # noqa
    texts = ['--auto-cast=matmult -O1', '-O1   --auto-cast matmult', '-O2 -O1 --auto-cast=matmult',
             '--auto-cast=matmult --auto-cast-type=bf16 -O1 --log_level=INFO --no_cache']
    assert len({parse(t).key_text() for t in texts}) == 1
    assert parse('-O1').key_text() != parse('-O2').key_text()
    graph = small_graph()
    keys = []
    for text in texts[:2] + ['-O2']:
        with config.override(NEURON_CC_FLAGS=text):
            keys.append(compiling.CacheKey.of(graph, {}).digest)
    assert keys[0] == keys[1] != keys[2]


@pytest.mark.parametrize('text, words', [
    ('--optimize', ["'--optimize' is not one of them", '-O0, -O1, -O2', '--cache_dir']),
    ('--auto-cast=half', ['--auto-cast', "'none', 'matmult' or 'all'", "'half'"]),
    ('--auto-cast-type bf8', ["'bf16', 'fp16' or 'tf32'", "did you mean 'bf16'?"]),
    ('--no_cache=1', ['--no_cache without a value']),
    ('--log_level', ["--log_level followed by 'DEBUG', 'INFO', 'WARNING' or 'ERROR'"]),
    ('--cache_size_limit=lots', ['a size such as 500M']),
])
def test_a_bad_flag_names_the_variable_the_value_and_what_is_accepted(text, words):
    with pytest.raises(config.ConfigError) as info:
        config.override(NEURON_CC_FLAGS=text)
    message = str(info.value)
    assert message.startswith(f'NEURON_CC_FLAGS={text!r}: expected ')
    for word in words:
        assert word in message


def test_cache_root_is_cache_dir_else_the_url_variable_else_under_mxnet_home(tmp_path):
    with config.override(MXNET_HOME=str(tmp_path / 'home'), NEURON_COMPILE_CACHE_URL=None,
                         NEURON_CC_FLAGS=None):
        assert compiling.cache_root() == str(tmp_path / 'home' / 'neuron-compile-cache')
        with config.override(NEURON_COMPILE_CACHE_URL=f'file://{tmp_path}/url'):
            assert compiling.cache_root() == f'{tmp_path}/url'
            with config.override(NEURON_CC_FLAGS=f'--cache_dir={tmp_path}/flag'):
                assert compiling.cache_root() == f'{tmp_path}/flag'
    with pytest.raises(config.ConfigError, match='a local directory or a file:// URL'):
        config.override(NEURON_COMPILE_CACHE_URL='s3://bucket/cache')


def test_a_cache_folder_that_cannot_be_made_is_warned_about_and_done_without(tmp_path,
                                                                             caplog):
    blocker = tmp_path / 'file'
    blocker.write_text('not a folder')
    with config.override(NEURON_CC_FLAGS=f'--cache_dir={blocker}/cache'):
        result = compiling.compile_graph(small_graph(), options_of(None), 'fc')
    assert result.graph is not None and 'cannot use' in caplog.text


def test_no_cache_writes_nothing(tmp_path):
    with config.override(NEURON_CC_FLAGS=f'--no_cache --cache_dir={tmp_path}'):
        compiling.compile_graph(small_graph(), options_of(None), 'fc')
    assert not (tmp_path / 'entries').exists()


# ----------------------------------------------------------------------------------------------
# Compile once, load after

def test_a_later_process_loads_the_graph_and_runs_it_alike(cache):
    x, w = mx.nd.array(np.arange(8).reshape(2, 4)), mx.nd.ones((3, 4))
    net = mx.sym.FullyConnected(mx.sym.relu(mx.sym.var('x') * 2), num_hidden=3, name='fc')
    first = net.bind(mx.cpu(), {'x': x, 'fc_weight': w, 'fc_bias': mx.nd.zeros(3)})
    expected = first.forward()[0].asnumpy()
    fresh_process()
    before = counters()
    again = net.bind(mx.cpu(), {'x': x, 'fc_weight': w, 'fc_bias': mx.nd.zeros(3)})
    np.testing.assert_array_equal(again.forward()[0].asnumpy(), expected)
    assert delta(before)['compiles'] == 0 and delta(before)['loads'] == 1
    # in one process a second executor of the same graph neither compiles nor loads
    before = counters()
    net.bind(mx.cpu(), {'x': x, 'fc_weight': w, 'fc_bias': mx.nd.zeros(3)}).forward()
    assert delta(before)['hits'] == 1 and delta(before)['loads'] == 0


def test_a_warm_start_measures_nothing(cache, monkeypatch):
    measured = []
    from ember.op.nn.conv import algorithms
    real = algorithms.measure
    monkeypatch.setattr(algorithms, 'measure',
                        lambda *a, **k: measured.append(a[0]) or real(*a, **k))
    net = conv_net()
    x = mx.nd.array(np.random.default_rng(0).standard_normal((2, 16, 16, 16)))
    net.hybridize(static_alloc=True)
    expected = net(x).asnumpy()
    assert measured, 'the compilation measured the convolutions'
    fresh_process()
    STATE.choices.clear()
    measured.clear()
    net.hybridize(active=False)
    net.hybridize(static_alloc=True)         # a new executor: compiles again, or loads
    before = counters()
    np.testing.assert_allclose(net(x).asnumpy(), expected, rtol=1e-5, atol=1e-5)
    assert measured == [] and delta(before)['loads'] == 1
    assert len(STATE.choices) > 0            # the artefact's choices


def test_entries_are_keyed_by_flags_config_and_signature(cache):
    graph = small_graph()
    digests = set()
    for flags, shape in (('', (2, 4)), ('-O1', (2, 4)), ('', (5, 4))):
        options = Options({**options_of(graph).shapes, 'x': shape},
                          options_of(graph).dtypes)
        with config.override(NEURON_CC_FLAGS=f'--cache_dir={cache} {flags}'):
            digests.add(compiling.compile_graph(graph, options, 'fc').key.digest)
    with config.override(MXNET_USE_FUSION=False):
        digests.add(compiling.compile_graph(graph, options_of(graph), 'fc').key.digest)
    assert len(digests) == 4
    assert len(stores.Store(cache).entries()) == 4


def test_an_entry_made_under_another_key_is_not_used(cache, caplog):
    graph = small_graph()
    result = compiling.compile_graph(graph, options_of(graph), 'fc')
    meta_path = cache / 'entries' / result.key.digest / 'meta.json'
    meta = json.loads(meta_path.read_text())
    meta['key']['machine'] = {**meta['key']['machine'], 'cpu': 'another machine'}
    meta_path.write_text(json.dumps(meta))
    fresh_process()
    before = counters()
    compiling.compile_graph(graph, options_of(graph), 'fc')
    assert delta(before)['compiles'] == 1 and delta(before)['loads'] == 0
    assert 'machine' in caplog.text


# ----------------------------------------------------------------------------------------------
# Failures

def test_a_deterministic_failure_is_cached_and_replayed_until_retried(cache):
    graph = small_graph()
    shapes = {'x': (2, 4), 'fc_weight': (3, 5), 'fc_bias': (3,)}     # 4 units in, 5 expected
    broken = Options(shapes, {n: np.dtype('float32') for n in shapes})
    with pytest.raises(mx.MXNetError, match='input units'):
        compiling.compile_graph(graph, broken, 'fc')
    fresh_process()
    before = counters()
    with pytest.raises(compiling.CompileError, match='failed in an earlier process') as info:
        compiling.compile_graph(graph, broken, 'fc')
    assert 'input units' in str(info.value) and '--retry_failed_compilation' in str(info.value)
    assert delta(before)['compiles'] == 0 and delta(before)['failures replayed'] == 1
    with config.override(NEURON_CC_FLAGS=f'--cache_dir={cache} --retry_failed_compilation'):
        with pytest.raises(mx.MXNetError, match='input units'):
            compiling.compile_graph(graph, broken, 'fc')


@pytest.mark.parametrize('error', [MemoryError('out of memory'), TimeoutError('too slow'),
                                   KeyboardInterrupt()])
def test_failures_of_memory_time_or_signals_are_not_cached(cache, monkeypatch, error):
    def fail(*args, **kwargs):
        raise error
    monkeypatch.setattr(compiling.pipeline, 'compile_graph', fail)
    graph = small_graph()
    with pytest.raises(type(error)):
        compiling.compile_graph(graph, options_of(graph), 'fc')
    assert stores.Store(cache).entries() == []
    monkeypatch.undo()
    compiling.compile_graph(graph, options_of(graph), 'fc')       # the lock was released


# ----------------------------------------------------------------------------------------------
# The store: publication, locks, eviction

def test_an_entry_without_its_marker_or_with_a_wrong_payload_is_not_trusted(tmp_path):
    store = stores.Store(tmp_path)
    store.publish('a', 'artefact', b'payload', {})
    (store.folder('a') / 'READY').unlink()
    store.publish('b', 'artefact', b'payload', {})
    (store.folder('b') / 'payload').write_bytes(b'payloaX')
    assert store.lookup('a') is None and store.lookup('b') is None
    assert {i.digest: i.kind for i in store.entries()} == {'a': None, 'b': None}
    store.publish('a', 'artefact', b'again', {})          # the next compiler replaces it
    assert store.lookup('a').payload == b'again'


def test_a_lock_of_a_dead_process_is_reclaimed_and_a_live_one_waited_for(tmp_path):
    store = stores.Store(tmp_path)
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    path = store.lock_path('k')
    path.write_text(json.dumps({'pid': dead.pid, 'host': os.uname().nodename, 'start': 'x',
                                'nonce': 'n', 'since': time.time()}))
    lock = store.acquire('k')
    assert stores.read_holder(path).pid == os.getpid()
    lock.release()
    assert not path.exists()
    live = os.getppid()
    path.write_text(json.dumps({'pid': live, 'host': os.uname().nodename,
                                'start': stores._start_time(live), 'nonce': 'n',
                                'since': time.time()}))
    polls = []
    assert store.acquire('k', ready=lambda: 'published' if len(polls) > 2 else polls.append(1)
                         ) == 'published'
    assert stores.read_holder(path).pid == live        # left alone


def test_the_size_cap_evicts_the_least_recently_used_entries(tmp_path):
    store = stores.Store(tmp_path, size_limit=None)
    for name in 'abc':
        store.publish(name, 'artefact', bytes(1000), {})
        time.sleep(0.01)
    store.record_hit('a')                          # used last now
    capped = stores.Store(tmp_path, size_limit=2 * store.entries()[0].size + 10)
    capped.publish('d', 'artefact', bytes(1000), {})
    assert sorted(i.digest for i in capped.entries()) == ['a', 'd']


def test_the_size_cap_flag_applies_to_compilations(cache):
    graph = small_graph()
    with config.override(NEURON_CC_FLAGS=f'--cache_dir={cache} --cache_size_limit=1'):
        for rows in (1, 2, 3):
            options = Options({**options_of(graph).shapes, 'x': (rows, 4)},
                              options_of(graph).dtypes)
            compiling.compile_graph(graph, options, 'fc')
    assert len(stores.Store(cache).entries()) == 1


# ----------------------------------------------------------------------------------------------
# Levels and casting

def test_opt_levels(cache):
    net = conv_net()
    x = mx.nd.ones((2, 16, 16, 16))
    expected = net(x).asnumpy()
    ops = {}
    for level in ('-O0', '-O1', '-O2'):
        fresh_process()
        STATE.choices.clear()
        net.hybridize(active=False)
        with config.override(NEURON_CC_FLAGS=f'--cache_dir={cache} {level}'):
            net.hybridize(static_alloc=True)
            np.testing.assert_allclose(net(x).asnumpy(), expected, rtol=1e-4, atol=1e-4)
            graph = _last_executor(net)._last.graph
        ops[level] = {n.op.name for n in graph.nodes if n.op}
        tunes = {n.attrs.get('cudnn_tune') for n in graph.nodes if 'cudnn_tune' in n.attrs}
        assert (tunes == {'off'}) == (level != '-O2'), level
        assert (len(STATE.choices) > 0) == (level == '-O2'), level
    assert 'Convolution' in ops['-O0'] and '_sg_conv' not in ops['-O0']
    assert '_sg_conv' in ops['-O1'] and '_sg_conv' in ops['-O2']


def _last_executor(block):
    bound = next(iter(block._cached_op._pool.values()))[0]
    return bound.executor


def rounded_bf16(values):
    bits = np.asarray(values, np.float32).view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.view(np.float32)


def test_auto_cast_rounds_the_operands_of_products(cache):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((3, 4))
    w = w.astype(np.float32)
    net = mx.sym.FullyConnected(mx.sym.var('x'), num_hidden=3, no_bias=True, name='fc')

    def run(flags):
        fresh_process()
        with config.override(NEURON_CC_FLAGS=f'--cache_dir={cache} {flags}'):
            exe = net.bind(mx.cpu(), {'x': mx.nd.array(x), 'fc_weight': mx.nd.array(w)})
            return exe.forward()[0].asnumpy()
    np.testing.assert_allclose(run(''), x @ w.T, rtol=1e-6)
    np.testing.assert_allclose(run('--auto-cast=matmult'), rounded_bf16(x) @ rounded_bf16(w).T,
                               rtol=1e-6)
    assert not np.allclose(run(''), run('--auto-cast=matmult'), rtol=1e-6, atol=0)
    big = mx.sym.relu(mx.sym.var('x') * 1000.0)
    for flags, top in (('--auto-cast=all --auto-cast-type=fp16', np.inf),
                       ('--auto-cast=all --auto-cast-type=fp16 --enable-saturate-infinity',
                        65504.0)):
        fresh_process()
        with config.override(NEURON_CC_FLAGS=f'--cache_dir={cache} {flags}'):
            out = big.bind(mx.cpu(), {'x': mx.nd.array([100.0, 1.0])}).forward()[0]
        assert out.asnumpy().tolist() == [top, 1000.0]


# ----------------------------------------------------------------------------------------------
# Loaded graphs, counters

def test_recent_models_past_the_limit_are_unloaded_and_loaded_again_not_recompiled(cache):
    blocks = [mx.gluon.nn.Dense(units, in_units=4) for units in (2, 3)]
    for block in blocks:
        block.initialize()
        block.hybridize()
    x = mx.nd.ones((1, 4))
    expected = [b(x).asnumpy() for b in blocks]
    before = counters()
    with config.override(NEURON_NUM_RECENT_MODELS_TO_KEEP=1):
        for _ in range(2):
            for block, want in zip(blocks, expected):
                np.testing.assert_array_equal(block(x).asnumpy(), want)
        assert len(compiling.LOADED.digests()) == 1
    change = delta(before)
    assert change['compiles'] == 0 and change['graphs unloaded'] >= 3 and change['loads'] >= 3


def test_counters_show_in_the_profilers_aggregate_table(cache):
    graph = small_graph()
    compiling.compile_graph(graph, options_of(graph), 'fc')
    table = profiler.dumps()
    block = table[table.index('graph compiler'):].splitlines()
    names = {line.split('  ')[0].strip() for line in block[3:10] if line.strip()}
    assert {'compiles', 'hits', 'misses', 'loads', 'compile seconds'} <= names
    assert json.loads(profiler.dumps(format='json'))['Totals']['graph compiler']['compiles'] \
        >= 1


# ----------------------------------------------------------------------------------------------
# Debugging: dumps and snapshots

def test_framework_debug_writes_the_graph_plan_algorithms_and_flags(cache, tmp_path,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    net = conv_net()
    net.hybridize()
    with config.override(NEURON_FRAMEWORK_DEBUG=True,
                         NEURON_CC_FLAGS=f'--cache_dir={cache} --auto-cast matmult'):
        net(mx.nd.ones((2, 16, 16, 16))).wait_to_read()
    files = sorted(p.name for p in tmp_path.glob('ember_*'))
    suffixes = {name.split('_')[-1].partition('.')[2] for name in files}
    assert suffixes == {'json', 'txt', 'memory.txt', 'algorithms.json', 'flags.json'}
    by_suffix = {name.split('_')[-1].partition('.')[2]: tmp_path / name for name in files}
    assert mx.sym.load(str(by_suffix['json'])).list_outputs()
    assert '_round_to_precision' in by_suffix['txt'].read_text()
    assert by_suffix['memory.txt'].read_text().startswith('arena ')
    assert json.loads(by_suffix['algorithms.json'].read_text())[0]['algorithm']
    flags = json.loads(by_suffix['flags.json'].read_text())
    assert flags['canonical'] == '-O2 --auto-cast=matmult --auto-cast-type=bf16'


def _snapshots(folder):
    return sorted(folder.glob('ember_snapshot_*.npz'))


def test_snapshot_of_every_execution_replays(cache, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    net = mx.sym.exp(mx.sym.FullyConnected(mx.sym.var('x'), num_hidden=2, name='fc'))
    args = {'x': mx.nd.ones((1, 3)), 'fc_weight': mx.nd.ones((2, 3)) * 0.1,
            'fc_bias': mx.nd.zeros(2)}
    grads = {'fc_weight': mx.nd.zeros((2, 3))}
    with config.override(NEURON_DUMP_HLO_SNAPSHOT='1'):
        exe = net.bind(mx.cpu(), args, args_grad=grads, grad_req={'fc_weight': 'write'})
        exe.forward(is_train=True)
        exe.backward()
    shots = _snapshots(tmp_path)
    assert [p.name.rsplit('_', 1)[1] for p in shots] == ['forward.npz', 'backward.npz']
    for shot in shots:
        assert cli.main(['replay', str(shot)]) == 0
        assert 'the replay matches the snapshot' in capsys.readouterr().out


@pytest.mark.parametrize('mode, kept', [('ON_NRT_ERROR', 'device'), ('ON_NRT_ERROR_CPU', 'host'),
                                        ('ON_NRT_ERROR_HYBRID', 'both')])
def test_snapshots_on_error_only_when_an_execution_gives_nan(cache, tmp_path, monkeypatch,
                                                            mode, kept):
    monkeypatch.chdir(tmp_path)
    exe = mx.sym.log(mx.sym.var('x')).bind(mx.cpu(), {'x': mx.nd.array([1.0, 2.0])})
    with config.override(NEURON_DUMP_HLO_SNAPSHOT=mode):
        exe.forward()
        assert _snapshots(tmp_path) == []
        exe.forward(x=mx.nd.array([-1.0, 2.0]))
    from ember.compiler import snapshot
    shot = snapshot.read(_snapshots(tmp_path)[0])
    assert shot.inputs['x'].tolist() == [-1.0, 2.0]
    assert np.isnan(shot.outputs[next(iter(shot.outputs))][0])
    assert bool(shot.device_inputs) == (kept == 'both')


def test_nc0_only_snapshots_device_zero(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    net = mx.sym.relu(mx.sym.var('x'))
    with config.override(NEURON_DUMP_HLO_SNAPSHOT='1', NEURON_NC0_ONLY_SNAPSHOT=True):
        net.bind(mx.cpu(1), {'x': mx.nd.ones(2, ctx=mx.cpu(1))}).forward()
        assert _snapshots(tmp_path) == []
        net.bind(mx.cpu(0), {'x': mx.nd.ones(2)}).forward()
    assert len(_snapshots(tmp_path)) == 1


@pytest.mark.skipif(config.cpu_count() < 2, reason='needs a second core')
def test_nc0_only_leaves_out_a_process_without_core_zero(tmp_path):
    # as `ember launch` gives rank 1 of two its own core
    code = ('import ember as mx; exe = mx.sym.relu(mx.sym.var("x")).bind(mx.cpu(), '
            '{"x": mx.nd.ones(2)}); exe.forward()[0].wait_to_read()')
    env = config.child_environ(NEURON_DUMP_HLO_SNAPSHOT='1', NEURON_NC0_ONLY_SNAPSHOT=1,
                               NEURON_RT_VISIBLE_CORES=config.process_cores()[1],
                               MXNET_CORE_LOCK_DIR=str(tmp_path / 'locks'),
                               PYTHONPATH=os.getcwd())
    child = subprocess.run([sys.executable, '-c', code], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert _snapshots(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# Extraction and the cache command

def test_extract_graphs_only_records_and_returns_zeros(cache, capsys):
    block = mx.gluon.nn.Dense(3, in_units=4)
    block.initialize()
    block.hybridize()
    before = counters()
    with config.override(NEURON_EXTRACT_GRAPHS_ONLY=True):
        out = block(mx.nd.ones((2, 4)))
        assert out.shape == (2, 3) and out.dtype == np.float32
        assert not out.asnumpy().any()
    assert 'extracted graph' in capsys.readouterr().out
    assert delta(before)['compiles'] == 0 and delta(before)['graphs extracted'] == 1
    pending = stores.Store(cache).pending()
    record = extract.read(pending[0].read_bytes())
    assert record.signature['shapes']['data'] == [2, 4]


def test_cache_command_lists_prunes_explains_and_clears(cache, capsys):
    graph = small_graph()
    compiled = compiling.compile_graph(graph, options_of(graph), 'fc')
    assert cli.main(['cache', '--cache-dir', str(cache), 'ls']) == 0
    listing = capsys.readouterr().out
    assert compiled.key.digest[:12] in listing and ' fc' in listing
    with config.override(NEURON_CC_FLAGS=f'--cache_dir={cache} -O1'):
        other = compiling.CacheKey.of(graph, compiled.key.info['signature'], 'fc')
    record = extract.read(extract.record(graph, other))
    entries = [i for i in stores.Store(cache).entries() if i.kind == 'artefact']
    from ember.cli.cache import explain_record
    lines = explain_record(record, entries)
    assert compiled.key.digest[:12] in lines[0]
    assert lines[1:] == ["  flags: '-O1 --auto-cast=none' here, '-O2 --auto-cast=none' there"]
    assert differences(record.parts, compiled.key.parts) == ['flags']
    assert cli.main(['cache', '--cache-dir', str(cache), 'prune', '--size', '0']) == 0
    assert stores.Store(cache).entries() == []
    compiling.compile_graph(graph, options_of(graph, grad_req={'fc_weight': 'write'}), 'fc')
    assert cli.main(['cache', '--cache-dir', str(cache), 'clear']) == 0
    assert 'removed 1 entries' in capsys.readouterr().out


def test_cache_explain_runs_a_script_and_names_the_differing_part(cache, tmp_path):
    script = tmp_path / 'script.py'
    script.write_text('import ember as mx\n'
                      'net = mx.gluon.nn.Dense(3, in_units=4, prefix="d_")\n'
                      'net.initialize(); net.hybridize()\n'
                      'import sys; net(mx.nd.ones((int(sys.argv[1]), 4))).wait_to_read()\n')
    env = config.child_environ(NEURON_CC_FLAGS=f'--cache_dir={cache}',
                               PYTHONPATH=os.getcwd())
    subprocess.run([sys.executable, str(script), '2'], env=env, check=True, timeout=120)
    child = subprocess.run([sys.executable, '-m', 'ember', 'cache', 'explain', '--', sys.executable,
                            str(script), '5'], env=env, capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr
    assert 'signature: shapes (data: [5, 4] here, [2, 4] there)' in child.stdout
    assert stores.Store(cache).pending() == []


def test_the_trial_run_of_a_compilation_leaves_the_random_streams_as_they_were(cache):
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(16, 3, padding=1, in_channels=16), mx.gluon.nn.Dropout(0.5))
    net.initialize()
    x = mx.nd.ones((2, 16, 16, 16))

    def first_masks():
        mx.random.seed(3)
        net.hybridize(active=False)
        net.hybridize()
        with mx.autograd.record():
            out = net(x)
        return (out.asnumpy() == 0).mean(), mx.nd.random.uniform(shape=4).asnumpy()
    compiled = first_masks()            # compiles (and runs the trial, dropout included)
    fresh_process()
    loaded = first_masks()              # loads
    assert counters()['loads'] >= 1
    assert compiled[0] == loaded[0] and np.array_equal(compiled[1], loaded[1])


def test_log_level_shows_the_compilers_messages(cache, caplog):
    import logging
    logger = logging.getLogger('ember.compiler')
    level, handlers = logger.level, list(logger.handlers)
    graph = small_graph()
    try:
        compiling.compile_graph(graph, options_of(graph), 'fc')
        assert 'compiling graph fc' not in caplog.text          # WARNING by default
        fresh_process()
        with config.override(NEURON_CC_FLAGS=f'--cache_dir={cache} --log_level=INFO'):
            compiling.compile_graph(graph, options_of(graph), 'fc')
        assert 'compile cache: loaded fc' in caplog.text
    finally:
        logger.setLevel(level)
        logger.handlers[:] = handlers
