"""Compiling a bound graph through the compile cache: what an executor calls instead of
running the passes itself.

A compilation is keyed by :class:`~ember.compiler.key.CacheKey` (graph, signature, flags,
configuration, Ember, providers, machine). The answer comes from, in order: the graphs loaded
in this process, the disk cache (``ember.compiler.store``; a cached failure raises its error
again unless ``--retry_failed_compilation``), or a compilation: under the key's lock, the
passes of :mod:`ember.executor.pipeline` and, where the graph has convolutions whose algorithm
is measured, a trial run of the compiled program on zeros so that the choices are made now
and stored with it. A later process loads the artefact, its choices included, and measures
nothing. Without a disk cache (``--no_cache``) each executor compiles its own graph and
convolutions measure at their first run, as they would without a compiler.

Failures raised by the passes are cached with their message; out-of-memory, timeouts,
interrupts and failures to write the cache are not.

>>> import numpy as np, tempfile
>>> from ember import config, symbol as sym
>>> from ember.compiler import counters
>>> from ember.passes.options import Options
>>> graph = sym.relu(sym.var('x') * 3).to_graph()
>>> options = Options({'x': (2,)}, {'x': np.dtype('float32')})
>>> with config.override(NEURON_CC_FLAGS=f'--cache_dir={tempfile.mkdtemp()}'):
...     first = compile_graph(graph, options, 'demo')
...     LOADED.clear()                       # as a new process would start
...     before = counters()
...     again = compile_graph(graph, options, 'demo')
>>> counters()["loads"] - before['loads'], again.key.digest == first.key.digest
(1, True)
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass

from ember import config
from ember.base import EmberError
from ember.compiler import artefact as artefacts
from ember.compiler import counting, debug
from ember.compiler.key import CacheKey, differences, signature_parts
from ember.compiler.loaded import LOADED
from ember.compiler.store import Store
from ember.executor import pipeline
from ember.op.nn.conv import kept
from ember.op.nn.conv.state import STATE

__all__ = ['compile_graph', 'CompileResult', 'CompileError', 'cache_root', 'store', 'LOADED']

_log = logging.getLogger('ember.compiler')

# failures that say nothing about the graph: never cached
_TRANSIENT = (MemoryError, TimeoutError, OSError)


class CompileError(EmberError):
    """A graph's compilation failed (now, or in an earlier process: the cached error)."""


@dataclass(frozen=True)
class CompileResult:
    """`graph`: the compiled graph, its folded variables bound to the given parameters (None
    under NEURON_EXTRACT_GRAPHS_ONLY: the graph was recorded, not compiled); `key`."""
    graph: object
    key: CacheKey

    @property
    def extracted(self) -> bool:
        return self.graph is None


def cache_root(flags=None) -> str:
    """The compile cache's directory: ``--cache_dir`` of NEURON_CC_FLAGS, else
    NEURON_COMPILE_CACHE_URL (which defaults to a folder under MXNET_HOME)."""
    flags = flags or config.get('NEURON_CC_FLAGS')
    return flags.cache_dir or config.get('NEURON_COMPILE_CACHE_URL')


def store(flags=None) -> Store | None:
    """The disk cache of the configuration of now (None under ``--no_cache``, or where its
    folder cannot be made: then graphs compile without it, and a warning says why)."""
    flags = flags or config.get('NEURON_CC_FLAGS')
    if flags.no_cache:
        return None
    root = cache_root(flags)
    try:
        return Store(root, flags.cache_size_limit)
    except OSError as exc:
        _warn_once(f'compile cache: cannot use {root} ({exc}); compiling without it')
        return None


_warned: set = set()


def _warn_once(message):
    if message not in _warned:
        _warned.add(message)
        _log.warning(message)


def compile_graph(graph, options, name='', holder=None) -> CompileResult:
    """`graph` (traced, unoptimised) compiled for `options` (:class:`Options`: shapes,
    dtypes, gradients, mode, device, parameter values), through the cache. `holder` (an
    executor) is told when the graph is unloaded (NEURON_NUM_RECENT_MODELS_TO_KEEP)."""
    flags = config.get('NEURON_CC_FLAGS')
    if flags.log_level is not None:
        _log_at(flags.log_level)
    key = CacheKey.of(graph, signature_parts(options.shapes, options.dtypes, options.grad_req,
                                             options.is_train, options.device), name)
    if config.get('NEURON_EXTRACT_GRAPHS_ONLY'):
        _extract(graph, key, flags)
        return CompileResult(None, key)
    artefact = _artefact(graph, options, key, flags)
    if holder is not None:
        LOADED.attach(key.digest, holder)
    if config.get('NEURON_FRAMEWORK_DEBUG'):
        debug.dump(artefact.graph, key, artefact.choices, flags)
    return CompileResult(artefacts.bind_folded(artefact.graph, options.params), key)


def _log_at(level):
    """--log_level: the compiler's messages at `level` and above go to stderr."""
    _log.setLevel(level)
    if not _log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter('%(name)s: %(message)s'))
        _log.addHandler(handler)


def _artefact(graph, options, key, flags):
    disk = store(flags)
    if disk is None:
        if config.get('NEURON_NUM_RECENT_MODELS_TO_KEEP') is None:
            return _compile(graph, options, key, trial=config.get('NEURON_FRAMEWORK_DEBUG'))
        found = LOADED.kept_bytes(key.digest)
        if found is not None and LOADED.get(key.digest) is None:
            return _remember(key, _loaded(artefacts.loads(found)))   # unloaded, back again
        result = _compile(graph, options, key, trial=config.get('NEURON_FRAMEWORK_DEBUG'))
        # unloaded, it comes back from these bytes: there is no disk entry
        LOADED.keep_bytes(key.digest, artefacts.dumps(result))
        return _remember(key, result)
    loaded = LOADED.get(key.digest)
    if loaded is not None:
        counting.count('hits')
        return loaded
    found = _from_disk(disk, key, flags)
    if found is not None:
        return _remember(key, found)
    counting.count('misses')
    return _remember(key, _compile_locked(graph, options, key, flags, disk))


def _remember(key, artefact):
    LOADED.add(key.digest, artefact)
    return artefact


def _from_disk(disk, key, flags):
    """The entry of `key` as an artefact (counted a hit and a load); a cached failure raises
    its error (unless retried); None where there is no usable entry."""
    entry = disk.lookup(key.digest)
    if entry is None:
        return None
    if entry.kind == 'failure':
        if flags.retry_failed:
            return None
        counting.count('failures replayed')
        counting.count('hits')
        raise CompileError(_failure_message(entry, key))
    stored = entry.meta.get('key', {})
    if stored != key.parts:      # only a digest collision or a hand-edited entry gets here
        _log.warning('compile cache: entry %s was made for another key (%s differ); '
                     'compiling again', key.digest[:12], ', '.join(differences(stored,
                                                                                key.parts)))
        return None
    try:
        artefact = _loaded(artefacts.loads(entry.payload))
    except artefacts.CorruptArtefact as exc:
        _log.warning('compile cache: entry %s: %s; compiling again', key.digest[:12], exc)
        return None
    disk.record_hit(key.digest)
    counting.count('hits')
    _log.info('compile cache: loaded %s (%s)', key.info.get('name'), key.digest[:12])
    return artefact


def _loaded(artefact):
    """An artefact read from bytes, its measured choices remembered by this process."""
    counting.count('loads')
    STATE.choices.load(artefact.choices)
    kept.note_graph(artefact.largest_graph)
    return artefact


def _failure_message(entry, key):
    error = json.loads(entry.payload)
    return (f'compiling graph {key.info.get("name")!r} failed in an earlier process (cached '
            f'in {key.digest[:12]}): {error["type"]}: {error["message"]}; add '
            f'--retry_failed_compilation to NEURON_CC_FLAGS to compile it again')


def _compile_locked(graph, options, key, flags, disk):
    """Compile under the key's lock, or load what the process holding it published."""
    def published():
        return _from_disk(disk, key, flags)

    def waiting(holder):
        _log.info('compile cache: waiting for pid %d on %s, which compiles %s', holder.pid,
                  holder.host, key.info.get('name'))
    got = disk.acquire(key.digest, ready=published, on_wait=waiting)
    if isinstance(got, artefacts.Artefact):
        return got
    with got:
        found = published()          # published between our miss and our lock
        if found is not None:
            return found
        try:
            result = _compile(graph, options, key, trial=True)
        except _TRANSIENT:
            raise
        except Exception as exc:
            _publish_failure(disk, key, exc)
            raise
        try:
            disk.publish(key.digest, 'artefact', artefacts.dumps(result), _meta(key, result))
        except OSError as exc:    # a full or read-only disk: the compilation itself stands
            _warn_once(f'compile cache: cannot write to {disk.root} ({exc})')
        return result


def _publish_failure(disk, key, exc):
    payload = json.dumps({'type': type(exc).__name__, 'message': str(exc)}).encode()
    with contextlib.suppress(OSError):
        disk.publish(key.digest, 'failure', payload, _meta(key, None))


def _meta(key, result):
    meta = {'key': key.parts, 'info': key.info, 'created': time.time(), 'pid': os.getpid(),
            'argv': sys.argv[:4]}
    if result is not None:
        meta['compile_seconds'] = result.info.get('seconds')
        meta['choices'] = len(result.choices)
    return meta


def _compile(graph, options, key, trial):
    """The passes, then (with `trial`) the algorithm search on zeros."""
    _log.info('compiling graph %s (%d nodes, key %s)', key.info.get('name'), len(graph.nodes),
              key.digest[:12])
    started = time.perf_counter()
    compiled = pipeline.compile_graph(graph, options.shapes, options.dtypes, options.grad_req,
                                      options.is_train, options.device, options.params)
    choices, largest = [], 0
    if trial and _measures(compiled):
        choices, largest = _trial_run(compiled, options)
    seconds = time.perf_counter() - started
    counting.count('compiles')
    counting.add_seconds(seconds)
    return artefacts.Artefact.of(compiled, choices, largest, {'seconds': seconds})


def _measures(graph) -> bool:
    """Whether running `graph` may measure algorithms: a node with a ``cudnn_tune``
    attribute not 'off' (a convolution, fused or not, or its gradient) and tuning on. Then the
    trial run makes the choices part of the compilation."""
    if config.get('MXNET_CUDNN_AUTOTUNE_DEFAULT') == '0':
        return any(node.attrs.get('cudnn_tune') not in (None, 'off') for node in graph.nodes
                   if node.op is not None)
    return any(node.op is not None and 'cudnn_tune' in node.attrs
               and node.attrs['cudnn_tune'] != 'off' for node in graph.nodes)


def _trial_run(graph, options):
    """Run compiled `graph` once (forward, and backward where it has one) on zeros, for the
    choices its convolutions make; returns (those choices, the kept-weight budget's graph
    size). A failure of the trial leaves the choices to the first real run."""
    from ember.executor.trial import run_on_zeros
    with STATE.choices.recording() as used:
        try:
            run_on_zeros(graph, options)
        except Exception as exc:  # noqa: BLE001 - the compilation itself succeeded
            _log.info('compile: the trial run failed (%s: %s); the first run will choose',
                      type(exc).__name__, exc)
    return STATE.choices.export(used), STATE.largest_graph


# ----------------------------------------------------------------------------------------------
# NEURON_EXTRACT_GRAPHS_ONLY

def _extract(graph, key, flags):
    """Record `graph` for ahead-of-time compilation (unless the cache has it) and say so."""
    disk = store(flags)
    if disk is None:
        raise EmberError('NEURON_EXTRACT_GRAPHS_ONLY records graphs in the compile cache; '
                         'remove --no_cache from NEURON_CC_FLAGS')
    entry = disk.lookup(key.digest)
    if entry is not None and entry.kind == 'artefact':
        print(f'ember: graph {key.info.get("name")} ({key.digest[:12]}) is compiled already',
              flush=True)
        return
    from ember.compiler.extract import record
    path = disk.add_pending(key.digest, record(graph, key))
    counting.count('graphs extracted')
    print(f'ember: extracted graph {key.info.get("name")} ({key.info["nodes"]} nodes, '
          f'{key.digest[:12]}) -> {path}', flush=True)

