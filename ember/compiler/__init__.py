"""The graph compiler's persistent side: cache keys, the disk cache, artefacts, counters, debug
dumps, snapshots and extracted graphs (PyTorch Neuron's controls, NEURON_* variables).

What a compilation is lives in :mod:`ember.executor.compile` (the layer above, which runs the
passes and programs); this package knows how its results are named, stored, found, shown and
counted:

``key``       :class:`CacheKey`: the parts a compiled graph is keyed by, and their differences
``artefact``  the compiled graph and its measured choices, pickled without parameter values
``store``     the disk cache: atomic publication, a lock per key, cached failures, LRU eviction
``loaded``    the graphs loaded in this process (NEURON_NUM_RECENT_MODELS_TO_KEEP)
``counters``  compiles, hits, misses, loads, compile seconds (the profiler's table shows them)
``debug``     NEURON_FRAMEWORK_DEBUG's files
``snapshot``  NEURON_DUMP_HLO_SNAPSHOT's files
``extract``   NEURON_EXTRACT_GRAPHS_ONLY's records, compiled by ``python -m ember
              parallel-compile``

>>> from ember import compiler
>>> sorted(compiler.counters())[:3]
['compile seconds', 'compiles', 'failures replayed']
"""
from ember.compiler.counting import counters
from ember.compiler.key import CacheKey
from ember.compiler.store import Store

__all__ = ['counters', 'CacheKey', 'Store']
