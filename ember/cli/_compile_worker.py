"""A worker of ``python -m ember parallel-compile``: compile one extracted graph into the cache.

    python -m ember.cli._compile_worker RECORD [--retry]

Reads the record (:mod:`ember.compiler.extract`), imports the modules of its Custom
operators, checks that this process keys the graph as the extracting one did, and compiles it
through the cache (parameters are zeros: a compilation keeps no values). ``--retry`` compiles
even where the cache holds a failure of this graph. Prints one JSON line and exits 0 when the
graph is compiled (or was already), 1 when its compilation fails, 3 when the keys differ.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='ember-compile-worker')
    parser.add_argument('record')
    parser.add_argument('--retry', action='store_true')
    args = parser.parse_args(argv)

    import numpy as np
    from ember import config, device
    from ember.compiler import counters, extract
    from ember.compiler.key import CacheKey, differences, signature_parts
    from ember.executor import compile as compiling
    from ember.ndarray.creation import zeros
    from ember.passes.options import Options

    with open(args.record, 'rb') as source:
        record = extract.read(source.read())
    extract.import_modules(record.modules)
    sig = record.signature
    shapes = {name: tuple(shape) for name, shape in sig['shapes'].items()}
    dtypes = {name: np.dtype(dtype) for name, dtype in sig['dtypes'].items()}
    where = device.Device(sig['device'], 0)
    options = Options(shapes, dtypes, sig['grad_req'], sig['is_train'], where,
                      {name: zeros(shapes[name], where, dtypes[name]) for name in shapes})
    key = CacheKey.of(record.graph, signature_parts(shapes, dtypes, sig['grad_req'],
                                                    sig['is_train'], where), record.name)
    if key.digest != record.digest:
        parts = ', '.join(differences(key.parts, record.parts))
        print(f'{record.name}: this process keys the graph differently ({parts} differ): run '
              f'parallel-compile with the environment of the training script', file=sys.stderr)
        return 3
    words = list(config.get('NEURON_CC_FLAGS').words)
    if args.retry:
        words.append('--retry_failed_compilation')
    started = time.perf_counter()
    with config.override(NEURON_CC_FLAGS=' '.join(_quoted(w) for w in words) or None):
        try:
            compiling.compile_graph(record.graph, options, record.name)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which retries
            print(f'{type(exc).__name__}: {exc}', file=sys.stderr)
            return 1
    status = 'compiled' if counters()['compiles'] else 'cached'
    print(json.dumps({'status': status, 'seconds': round(time.perf_counter() - started, 3)}))
    return 0


def _quoted(word):
    import shlex
    return shlex.quote(word)


if __name__ == '__main__':
    sys.exit(main())
