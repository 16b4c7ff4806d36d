"""Every environment variable Ember honours, declared once.

Each declaration says what a variable is (type, default, accepted values), what it does (one line
in our words), where it belongs, when it is read and who honours it. Only this module reads
``os.environ``; everything else asks :func:`get`.

>>> from ember import config
>>> config.get('MXNET_EXEC_NUM_TEMP')
1
>>> with config.override(MXNET_EXEC_NUM_TEMP=3):
...     config.get('MXNET_EXEC_NUM_TEMP')
3
"""
from __future__ import annotations

import difflib
import functools
import os
import re
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

PREFIXES = ('MXNET_', 'NNVM_', 'DMLC_', 'NEURON_', 'XLA_')
EFFECTIVE = 'effective'


class ConfigError(ValueError):
    """A configuration variable has a value Ember cannot accept."""


@dataclass(frozen=True)
class Var:
    name: str
    kind: str                       # int, float, bool, enum, str, path, cores, tuning
    parse: Callable[[str], Any]     # raw string -> value; raises ValueError with the accepted values
    default: Any                    # a value, or a callable taking get() for computed defaults
    doc: str
    section: str
    owner: str                      # the subsystem that honours the variable
    read: str = 'live'              # 'live' (read at each use) or 'startup' (read once by owner)
    cache_key: bool = False         # enters the compile-cache key
    status: str = EFFECTIVE         # or 'not yet effective: <why>'
    accepts: str = ''               # what values are accepted, for errors and docs
    default_doc: str = ''           # how a computed default is described
    aliases: tuple = ()
    extension: bool = False         # declared by Ember, not named in the spec
    choices: tuple = ()             # the accepted words of an enum

    @property
    def effective(self) -> bool:
        return self.status == EFFECTIVE


REGISTRY: dict[str, Var] = {}
ALIASES: dict[str, str] = {}


# ----------------------------------------------------------------------------------------------
# Parsers. Each raises ValueError(accepted-values text); get() turns that into a ConfigError.

def _int_parser(low=None, high=None):
    def parse(raw):
        if not re.fullmatch(r'[+-]?[0-9]+', raw):
            raise ValueError('an integer')
        value = int(raw)
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(_range_text('an integer', low, high))
        return value
    return parse


# Stricter than float(): no '1_0', 'nan' or 'inf'.
_NUMBER = re.compile(r'[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?')


def _float_parser(low=None, high=None):
    def parse(raw):
        if not _NUMBER.fullmatch(raw):
            raise ValueError('a number')
        value = float(raw)
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(_range_text('a number', low, high))
        return value
    return parse


def _range_text(what, low, high):
    if high is None:
        return f'{what} >= {low}'
    if low is None:
        return f'{what} <= {high}'
    return f'{what} in [{low}, {high}]'


_TRUE = ('1', 'true')
_FALSE = ('0', 'false')


def _parse_bool(raw):
    word = raw.lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError('0, 1, true or false (any case)')


def _enum_parser(choices, synonyms=None):
    synonyms = synonyms or {}

    def parse(raw):
        if raw in choices:
            return raw
        if raw.lower() in synonyms:
            return synonyms[raw.lower()]
        raise ValueError(_choices_text(choices) + _suggest(raw, choices))
    return parse


def _choices_text(choices):
    quoted = [repr(c) for c in choices]
    if len(quoted) == 1:
        return quoted[0]
    return ', '.join(quoted[:-1]) + ' or ' + quoted[-1]


def _suggest(raw, candidates):
    lowered = {c.lower(): c for c in candidates}
    if raw.lower() in lowered:
        return f"; did you mean {lowered[raw.lower()]!r}?"
    close = difflib.get_close_matches(raw, list(candidates), n=1, cutoff=0.5)
    if not close:
        prefixed = [c for c in candidates if c.lower().startswith(raw.lower())]
        close = prefixed[:1]
    return f'; did you mean {close[0]!r}?' if close else ''


def _parse_str(raw):
    return raw


def _parse_cores(raw):
    """'0-3' -> (0, 1, 2, 3); '0,2,5-6' -> (0, 2, 5, 6)."""
    accepted = "core ids and ranges such as '0-3' or '0,2,5-6'"
    cores = []
    for part in raw.split(','):
        match = re.fullmatch(r'\s*(\d+)\s*(?:-\s*(\d+)\s*)?', part)
        if not match:
            raise ValueError(accepted)
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(accepted + f' (range {first}-{last} runs backwards)')
        cores.extend(range(first, last + 1))
    if len(set(cores)) != len(cores):
        raise ValueError(accepted + ' without repeats')
    return tuple(cores)


# Collective groups of these sizes must start at a multiple of their size (Neuron's rule).
ALIGNED_GROUP_SIZES = (1, 2, 8, 32)


def _parse_visible_cores(raw):
    """A number, a range or a comma list of consecutive cores; groups of 2, 8 or 32 aligned.

    '4' -> (4,); '0-3' -> (0, 1, 2, 3); '2,3' -> (2, 3); '0,2' and '1-2' are refused.
    """
    accepted = "consecutive core ids: a number ('3'), a range ('0-3') or a comma list ('4,5')"
    try:
        cores = _parse_cores(raw)
    except ValueError as exc:
        detail = str(exc).partition(' (')[2]
        raise ValueError(accepted + (f' ({detail}' if detail else '')) from None
    for before, after in zip(cores, cores[1:]):
        if after != before + 1:
            raise ValueError(f'{accepted}; core {after} does not follow core {before}')
    count, first = len(cores), cores[0]
    if count in ALIGNED_GROUP_SIZES and first % count:
        start = first - first % count
        raise ValueError(f'{count} cores starting at a multiple of {count}, e.g. '
                         f"'{start}-{start + count - 1}' or '{start + count}-"
                         f"{start + 2 * count - 1}'")
    return cores


TUNING_DTYPES = ('float32', 'float64', 'float16', 'uint8', 'int8', 'int32', 'int64', 'bfloat16')


def _parse_tuning(raw):
    """'0' -> (), '1' -> all dtypes, 'float32,float16' -> those dtypes."""
    accepted = "0 (off), 1 (all types) or a comma-separated list of " + ', '.join(TUNING_DTYPES)
    if raw in _FALSE or raw.lower() in _FALSE:
        return ()
    if raw.lower() in _TRUE:
        return TUNING_DTYPES
    names = [n.strip() for n in raw.split(',') if n.strip()]
    for name in names:
        if name not in TUNING_DTYPES:
            raise ValueError(accepted + _suggest(name, TUNING_DTYPES))
    if not names:
        raise ValueError(accepted)
    return tuple(dict.fromkeys(names))


_KMP_WORDS = ('granularity=fine', 'granularity=core', 'granularity=thread', 'compact', 'scatter',
              'none', 'disabled', 'explicit', 'balanced', 'verbose', 'noverbose', 'warnings',
              'nowarnings', 'respect', 'norespect')


def _parse_kmp_affinity(raw):
    """Intel's affinity string: modifiers, a type, then optional permute and offset numbers."""
    accepted = ("a comma-separated affinity such as 'granularity=fine,compact,1,0': "
                "modifiers (granularity=..., verbose), a type (compact, scatter, balanced, "
                "none, disabled) and up to two integers")
    tokens = [t.strip() for t in raw.split(',') if t.strip()]
    numbers = [t for t in tokens if t.isdigit()]
    words = [t for t in tokens if not t.isdigit() and not t.startswith('proclist=')]
    if not tokens or len(numbers) > 2:
        raise ValueError(accepted)
    for word in words:
        if word not in _KMP_WORDS:
            raise ValueError(accepted + _suggest(word, _KMP_WORDS))
    kinds = [w for w in words if w in ('compact', 'scatter', 'none', 'disabled', 'balanced',
                                       'explicit')]
    if len(kinds) > 1:
        raise ValueError(accepted + f' (got types {", ".join(kinds)})')
    return {'type': kinds[0] if kinds else 'none',
            'permute': int(numbers[0]) if numbers else 0,
            'offset': int(numbers[1]) if len(numbers) > 1 else 0,
            'raw': raw}


@dataclass(frozen=True)
class CompilerFlags:
    """NEURON_CC_FLAGS parsed: what the graph compiler does (`opt_level`, `auto_cast`,
    `auto_cast_type`, `saturate_infinity`: these enter the compile-cache key, as
    :meth:`key_text`) and how its cache behaves (the wrapper options).

    >>> flags = _parse_cc_flags('--auto-cast matmult -O1 -O2')
    >>> flags.key_text() == _parse_cc_flags('-O2   --auto-cast=matmult').key_text()
    True
    >>> flags.key_text()
    '-O2 --auto-cast=matmult --auto-cast-type=bf16'
    """
    opt_level: int = 2                  # 0: no rewrites, no algorithm search; 1: no search
    auto_cast: str = 'none'             # none, matmult (operands of products) or all
    auto_cast_type: str = 'bf16'        # bf16, fp16 or tf32
    saturate_infinity: bool = False     # casts overflow to the largest finite value
    cache_dir: str | None = None
    no_cache: bool = False
    retry_failed: bool = False          # compile again where a failure was cached
    log_level: str | None = None       # of the 'ember.compiler' logger (None: left alone)
    cache_size_limit: int | None = None     # bytes of the disk cache (LRU eviction)
    words: tuple = ()                   # the flags as given

    def key_text(self) -> str:
        """The flags that change what is compiled, in one canonical spelling."""
        text = f'-O{self.opt_level} --auto-cast={self.auto_cast}'
        if self.auto_cast != 'none':
            text += f' --auto-cast-type={self.auto_cast_type}'
        return text + (' --enable-saturate-infinity' if self.saturate_infinity else '')


def parse_size(text):
    """Bytes from a size such as '500M', '2G' or '1024'.

    >>> parse_size('1.5K')
    1536
    """
    match = re.fullmatch(r'([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)B?', text.strip().upper())
    if not match:
        raise ValueError(f'a size such as 500M or 10G (got {text!r})')
    return int(float(match.group(1)) * 1024 ** ' KMGT'.index(match.group(2) or ' '))


def _words_of(*choices):
    def parse(text):
        lowered = {c.lower(): c for c in choices}
        if text.lower() not in lowered:
            raise ValueError(_choices_text(choices) + f' (got {text!r}' + _suggest(text, choices)
                             + ')')
        return lowered[text.lower()]
    parse.accepts = _choices_text(choices)
    return parse


def _directory(text):
    return os.path.expanduser(text)


_directory.accepts = 'a directory'

# flag -> (field of CompilerFlags, value it sets, or a parser of the flag's value)
_CC_FLAGS = {
    '-O0': ('opt_level', 0), '-O1': ('opt_level', 1), '-O2': ('opt_level', 2),
    '--optlevel': ('opt_level', _words_of('0', '1', '2')),
    '--auto-cast': ('auto_cast', _words_of('none', 'matmult', 'all')),
    '--auto-cast-type': ('auto_cast_type', _words_of('bf16', 'fp16', 'tf32')),
    '--enable-saturate-infinity': ('saturate_infinity', True),
    '--cache_dir': ('cache_dir', _directory),
    '--no_cache': ('no_cache', True),
    '--retry_failed_compilation': ('retry_failed', True),
    '--log_level': ('log_level', _words_of('DEBUG', 'INFO', 'WARNING', 'ERROR')),
    '--cache_size_limit': ('cache_size_limit', parse_size),
}


def _parse_cc_flags(raw):
    """Compiler flags, split like a shell command line; a flag's value follows '=' or is
    the next word; a repeated flag keeps its last value."""
    import shlex
    try:
        words = shlex.split(raw)
    except ValueError as exc:
        raise ValueError(f'compiler flags as a shell would split them ({exc})') from None
    values, position = {}, 0
    while position < len(words):
        flag, _, given = words[position].partition('=')
        if flag not in _CC_FLAGS:
            raise ValueError(f'flags among {", ".join(_CC_FLAGS)}; {words[position]!r} is not '
                             f'one of them' + _suggest(flag, list(_CC_FLAGS)))
        field_name, value = _CC_FLAGS[flag]
        if callable(value):
            if not given and position + 1 < len(words) and '=' not in words[position]:
                position += 1
                given = words[position]
            if not given:
                accepts = getattr(value, 'accepts', 'a value')
                raise ValueError(f'{flag} followed by {accepts}')
            try:
                value = value(given)
            except ValueError as exc:
                raise ValueError(f'{flag} {exc}') from None
        elif given:
            raise ValueError(f'{flag} without a value (got {words[position]!r})')
        values[field_name] = value
        position += 1
    if 'opt_level' in values:
        values['opt_level'] = int(values['opt_level'])
    return CompilerFlags(**values, words=tuple(words))


def _parse_cache_url(raw):
    """A local directory, or a file:// URL of one."""
    if raw.startswith('file://'):
        return os.path.expanduser(raw[len('file://'):])
    if re.match(r'[A-Za-z][A-Za-z0-9+.-]*://', raw):
        raise ValueError(f'a local directory or a file:// URL (got the remote {raw!r}; Ember '
                         f'keeps its compile cache on a local file system)')
    return os.path.expanduser(raw)


# ----------------------------------------------------------------------------------------------
# Declarations.

def _declare(name, kind, parse, default, doc, section, owner, **extra):
    var = Var(name, kind, parse, default, doc, section, owner, **extra)
    for taken in (name,) + var.aliases:
        if taken in REGISTRY or taken in ALIASES:
            raise RuntimeError(f'{taken} is declared twice')
    REGISTRY[name] = var
    for alias in var.aliases:
        ALIASES[alias] = name
    return var


def int_var(name, default, doc, section, owner, low=None, high=None, **extra):
    extra.setdefault('accepts', _range_text('an integer', low, high) if low is not None
                     or high is not None else 'an integer')
    return _declare(name, 'int', _int_parser(low, high), default, doc, section, owner, **extra)


def float_var(name, default, doc, section, owner, low=None, high=None, **extra):
    extra.setdefault('accepts', _range_text('a number', low, high) if low is not None
                     or high is not None else 'a number')
    return _declare(name, 'float', _float_parser(low, high), default, doc, section, owner,
                    **extra)


def bool_var(name, default, doc, section, owner, **extra):
    extra.setdefault('accepts', '0, 1, true or false')
    return _declare(name, 'bool', _parse_bool, default, doc, section, owner, **extra)


def enum_var(name, default, choices, doc, section, owner, synonyms=None, **extra):
    """`synonyms` maps further words (any case) to a choice, e.g. {'true': '1'}."""
    extra.setdefault('accepts', _choices_text(choices))
    parse = _enum_parser(tuple(choices), synonyms)
    return _declare(name, 'enum', parse, default, doc, section, owner, choices=tuple(choices),
                    **extra)


def str_var(name, default, doc, section, owner, kind='str', parse=_parse_str, **extra):
    extra.setdefault('accepts', 'any text')
    return _declare(name, kind, parse, default, doc, section, owner, **extra)


def _temp_dir():
    import tempfile
    return tempfile.gettempdir()


def _default_from(other):
    fn = lambda get: get(other)  # noqa: E731
    return fn, f'value of {other}'


NOT_YET = 'not yet effective: '
# Effective in code, each shown by a test against a simulated CUDA device (tests/fake_cuda.py),
# but no GPU has run them yet: benchmarks/gpu_check.sh is the check to run where one is lent.
SIMULATED_GPU_ONLY = frozenset((
    'MXNET_GPU_WORKER_NTHREADS', 'MXNET_GPU_COPY_NTHREADS', 'MXNET_GPU_WORKER_NSTREAMS',
    'MXNET_GPU_MEM_POOL_RESERVE', 'MXNET_GPU_MEM_POOL_TYPE',
    'MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF', 'MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE',
    'MXNET_CUDA_ALLOW_TENSOR_CORE', 'MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION',
    'MXNET_CUDA_LIB_CHECKING', 'MXNET_CUDNN_LIB_CHECKING', 'MXNET_GPU_TEMP_COPY',
    'MXNET_GPU_PARALLEL_RAND_COPY', 'MXNET_GPU_CUDNN_DROPOUT_STATE_COPY'))
OPS = NOT_YET + 'honoured by the neural-network operators (operators issue)'
KERNELS = NOT_YET + 'honoured by the fast CPU kernel providers (performance issue)'
P2P = NOT_YET + ('the peer-to-peer copy path is written and its choice unit-tested, but it '
                 'awaits a check on a machine with two GPUs')
COMPILER = NOT_YET + 'honoured by the graph compiler (compiler issue)'
GLUON = NOT_YET + 'honoured by Gluon (operators issue)'

_THREADS, _MEMORY, _ENGINE, _EXEC = 'threads', 'memory', 'engine', 'execution'
_KVSTORE, _MIRROR, _PROFILER, _API = 'kvstore', 'memonger', 'profiler', 'python interface'
_LOG, _OPS, _GPU, _TUNING = 'logging', 'operators', 'gpu', 'operator tuning'
_COMPILER, _BF16, _DIST = 'graph compiler', 'bf16 casting', 'distributed'

# Execution environment
str_var('MXNET_LIBRARY_PATH', None, 'Path of the native kernel library to load (a libdnnl.so) '
        'instead of the one found beside the installed wheel.', 'environment', 'backend',
        kind='path', read='startup', accepts='a path to a shared library')
str_var('MXNET_HOME', '~/.mxnet', 'Data directory for downloaded model weights and datasets.',
        'environment', 'gluon', kind='path', accepts='a directory path')
int_var('OMP_NUM_THREADS', None, 'Threads of the BLAS and oneDNN kernels inside one operator; '
        'unset means the cores this process may use, shared among the '
        'MXNET_CPU_WORKER_NTHREADS workers. A pthreads OpenBLAS that NumPy loaded before '
        'Ember keeps one thread: its threads spin after each GEMM on the cores the next '
        'kernels need.', _THREADS, 'engine', low=1,
        read='startup', default_doc='all available cores')
str_var('KMP_AFFINITY', None, 'Pin the engine worker threads, the kernel threads and the OpenMP '
        'threads that run the compiled kernels to cores, Intel-style '
        "(e.g. 'granularity=fine,compact,1,0').", _THREADS, 'engine', kind='affinity',
        parse=_parse_kmp_affinity, read='startup',
        accepts="an affinity such as 'granularity=fine,compact,1,0'")

ONEDNN_ISAS = ('SSE41', 'AVX', 'AVX2', 'AVX2_VNNI', 'AVX2_VNNI_2', 'AVX512_CORE',
               'AVX512_CORE_VNNI', 'AVX512_CORE_BF16', 'AVX512_CORE_FP16', 'AVX512_CORE_AMX',
               'AVX512_CORE_AMX_FP16', 'ALL')
enum_var('ONEDNN_MAX_CPU_ISA', 'ALL', ONEDNN_ISAS, 'Widest instruction set the CPU kernels may '
         "use: oneDNN reads it itself, and Ember's compiled kernels (ember._winograd, "
         'ember._sparse) take their widest build within it, so one machine can run the kernels '
         'of a narrower CPU '
         '(Ember extension).', 'environment', 'backend', read='startup', extension=True,
         default_doc='all the CPU has')

# Threads
int_var('MXNET_GPU_WORKER_NTHREADS', 2, 'Worker threads per GPU: how many operators run on one '
        'GPU at once, each thread queueing kernels on streams of its own.', _THREADS, 'engine',
        low=1, read='startup')
int_var('MXNET_GPU_COPY_NTHREADS', 2, 'Threads per GPU that copy memory between devices (to '
        'and from the host, between GPUs), each on a stream of its own.', _THREADS, 'engine',
        low=1, read='startup')
int_var('MXNET_CPU_WORKER_NTHREADS', 1, 'Worker threads on the CPU: how many operators run '
        'at once (each may use OMP_NUM_THREADS threads itself).', _THREADS, 'engine', low=1,
        read='startup')
int_var('MXNET_CPU_PRIORITY_NTHREADS', 4, 'Threads of the CPU pool that runs operators pushed '
        'with a priority, highest first.', _THREADS, 'engine', low=1, read='startup')
int_var('MXNET_CPU_NNPACK_NTHREADS', 4, 'Threads of the Winograd convolution kernel (at most '
        "the operator's kernel threads).", _THREADS, 'op', low=1)
int_var('MXNET_MP_WORKER_NTHREADS', 1, 'Engine worker threads in each DataLoader worker '
        'process (its kernels run on one thread, as OpenMP is off in workers).', _THREADS,
        'gluon', low=1)
int_var('MXNET_MP_OPENCV_NUM_THREADS', 0, "OpenCV's threads in each DataLoader worker "
        'process and any other forked child (below 1: single-threaded).', _THREADS, 'gluon')

# Memory
bool_var('MXNET_EXEC_ENABLE_INPLACE', True, 'Let a graph operator write its output over an input '
         'it is the last reader of.', _MEMORY, 'executor', cache_key=True)
int_var('NNVM_EXEC_MATCH_RANGE', 16, 'Memory planner: reuse a freed buffer up to this size '
        'ratio, trying powers of two up to it and keeping the smallest plan; 0 turns sharing '
        'off.', _MEMORY, 'executor', low=0, cache_key=True,
        aliases=('MXNET_EXEC_MATCH_RANGE',))
int_var('MXNET_EXEC_NUM_TEMP', 1, 'Colours of the memory plan: more allow more branches to run '
        'in parallel at the cost of memory.', _MEMORY, 'executor', low=1, cache_key=True)
int_var('MXNET_GPU_MEM_POOL_RESERVE', 5, 'Percent of GPU memory kept for cuDNN, cuBLAS and '
        'kernel temporaries: the pool releases its cache before an allocation would cut into '
        'it.', _MEMORY, 'storage', low=0, high=100, read='startup')
enum_var('MXNET_GPU_MEM_POOL_TYPE', 'Naive', ('Naive', 'Round', 'Unpooled'), 'How the GPU '
         'pool rounds and caches freed buffers (cudaMalloc underneath).', _MEMORY, 'storage',
         read='startup')
int_var('MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF', 24, 'Round pool: sizes below 2**N round up to '
        'a power of two, larger ones to a multiple of 2**N.', _MEMORY, 'storage', low=0,
        high=40, read='startup')
int_var('MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE', 2097152, 'Naive pool: requests above this many '
        'bytes round up to a multiple of it (1 disables).', _MEMORY, 'storage', low=1,
        read='startup')
enum_var('MXNET_CPU_MEM_POOL_TYPE', 'Naive', ('Naive', 'Round', 'Unpooled'), 'How the CPU pool '
         'rounds and caches freed buffers (Ember extension, the GPU variable for the CPU).',
         _MEMORY, 'storage', read='startup', extension=True)
int_var('MXNET_CPU_MEM_POOL_ROUND_LINEAR_CUTOFF', 24, 'Round pool on the CPU: sizes below 2**N '
        'round to a power of two, larger ones to a multiple of 2**N (Ember extension).',
        _MEMORY, 'storage', low=0, high=40, read='startup', extension=True)
int_var('MXNET_CPU_MEM_LARGE_ALLOC_ROUND_SIZE', 2097152, 'Naive pool on the CPU: requests above '
        'this many bytes round up to a multiple of it (Ember extension).', _MEMORY, 'storage',
        low=1, read='startup', extension=True)
int_var('MXNET_CPU_MEM_POOL_RESERVE', 5, 'Percent of system memory the CPU pool keeps free by '
        'releasing its cache first (Ember extension).', _MEMORY, 'storage', low=0, high=100,
        read='startup', extension=True)

# Engine
enum_var('MXNET_ENGINE_TYPE', 'ThreadedEnginePerDevice',
         ('NaiveEngine', 'ThreadedEngine', 'ThreadedEnginePerDevice'), 'Which dependency engine '
         'runs operators: synchronous on the caller, one shared pool, or pools per device.',
         _ENGINE, 'engine', read='startup')
int_var('MXNET_ENGINE_MAX_INFLIGHT', 1024, 'Operators pushed but not finished before a push '
        'waits: bounds the memory of a loop that never waits (Ember extension).', _ENGINE,
        'engine', low=1, read='startup', extension=True)

# Execution
bool_var('MXNET_EXEC_BULK_EXEC_INFERENCE', True, 'Run a whole inference graph as one engine '
         'operation.', _EXEC, 'executor', cache_key=True)
bool_var('MXNET_EXEC_BULK_EXEC_TRAIN', True, 'Run a training graph as segments of several '
         'operators, each one engine operation.', _EXEC, 'executor', cache_key=True,
         )
int_var('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN', 15, 'Most operators in one training bulk '
        'segment.', _EXEC, 'executor', low=0, cache_key=True)
int_var('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD', _default_from(
        'MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN')[0], 'Most operators in one forward bulk segment '
        'when training.', _EXEC, 'executor', low=0, cache_key=True,
        default_doc='value of MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN')
int_var('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD', _default_from(
        'MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN')[0], 'Most operators in one backward bulk segment '
        'when training.', _EXEC, 'executor', low=0, cache_key=True,
        default_doc='value of MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN')

# KVStore
int_var('MXNET_KVSTORE_REDUCTION_NTHREADS', 4, 'Threads that sum an array of at least '
        'MXNET_KVSTORE_BIGARRAY_BOUND elements across devices on the CPU (local stores and '
        'the device reduction inside each rank of dist_sync); smaller arrays sum on one.',
        _KVSTORE, 'kvstore', low=1)
int_var('MXNET_KVSTORE_BIGARRAY_BOUND', 1000000, 'Elements from which an array counts as big: '
        'its CPU reduction splits across MXNET_KVSTORE_REDUCTION_NTHREADS threads, and a '
        'distributed store slices it across all server ranks (smaller keys live whole on '
        'one rank).', _KVSTORE, 'kvstore', low=1)
bool_var('MXNET_KVSTORE_USETREE', False, "The 'device' store reduces and broadcasts along "
         'binary trees built from the link topology of the devices.', _KVSTORE, 'kvstore')
bool_var('MXNET_KVSTORE_LOGTREE', False, 'With MXNET_KVSTORE_USETREE, print the trees when '
         'they are built (to standard error).', _KVSTORE, 'kvstore')
int_var('MXNET_KVSTORE_TREE_ARRAY_BOUND', 10000000, 'Elements from which a tree reduction '
        'splits an array into one slice per device, each along the tree rooted there.',
        _KVSTORE, 'kvstore', low=1)
bool_var('MXNET_KVSTORE_TREE_BACKTRACK', False, 'Build reduction trees by backtracking '
         'search (every edge a link where such a tree exists) instead of Kernighan-Lin '
         'bisection.', _KVSTORE, 'kvstore')
float_var('MXNET_KVSTORE_TREE_LINK_USAGE_PENALTY', 0.7, 'Factor on the weight of a link each '
          'time a tree uses it, so that the next trees prefer other links.', _KVSTORE,
          'kvstore', low=0.0)
bool_var('MXNET_ENABLE_GPU_P2P', True, 'Copies between GPUs (the device store\'s among '
         'them) go directly, peer to peer, where the GPUs allow it, and the store\'s trees '
         'weigh links by the P2P matrix; off, copies go through host memory.', _KVSTORE,
         'kvstore', status=P2P)
bool_var('MXNET_UPDATE_ON_KVSTORE', True, 'Trainer and Module run the optimizer inside the '
         "KVStore (on the server ranks of a 'dist' store) where the store can; an explicit "
         'update_on_kvstore argument wins.', _KVSTORE, 'kvstore')
float_var('BUCKET_CAP_MB', 50.0, 'Megabytes of gradients that a distributed store all-reduces '
          'in one bucket, filled in reverse parameter order; a bigger gradient goes alone. '
          'Each bucket starts as soon as its gradients are written.', _DIST, 'kvstore',
          low=0.0)
enum_var('DMLC_ROLE', 'worker', ('worker', 'server', 'scheduler'), "This process's role in "
         'distributed training. Every MPI rank is a worker and serves a share of the keys, '
         "so only 'worker' runs (Ember extension; set by python -m ember launch).", _DIST,
         'kvstore', extension=True)
int_var('DMLC_NUM_WORKER', None, 'Workers the launcher started; a distributed store checks '
        'it against the MPI world size (Ember extension; set by python -m ember launch).',
        _DIST, 'kvstore', low=1, extension=True, default_doc='the MPI world size')
int_var('DMLC_NUM_SERVER', None, 'Server ranks; every rank serves, so it must equal '
        'DMLC_NUM_WORKER (Ember extension; set by python -m ember launch).', _DIST,
        'kvstore', low=1, extension=True, default_doc='the MPI world size')

# Memonger
bool_var('MXNET_BACKWARD_DO_MIRROR', False, 'Drop cheap forward results during training and '
         'recompute them in backward to save memory.', _MIRROR, 'executor', cache_key=True,
         )

# Profiler
bool_var('MXNET_PROFILER_AUTOSTART', False, 'Start the profiler at import and write profile.json '
         'in the working directory at exit.', _PROFILER, 'profiler', read='startup')
enum_var('MXNET_PROFILER_MODE', '0', ('0', '1'), 'What the profiler records: 0 symbolic '
         '(graph) operators only, 1 every operator.', _PROFILER, 'profiler',
         synonyms={'false': '0', 'true': '1'}, accepts="'0' or '1' (also false or true)")

# Python interface
bool_var('MXNET_ENABLE_CYTHON', True, 'Use the compiled accelerator module when it loads.',
         _API, 'ndarray', read='startup')
bool_var('MXNET_ENFORCE_CYTHON', False, 'Fail at import if the compiled accelerator module '
         'cannot load (only with MXNET_ENABLE_CYTHON).', _API, 'ndarray', read='startup')

# Logging
int_var('DMLC_LOG_STACK_TRACE_DEPTH', 0, 'Frames of the pushing code shown in an error raised '
        'at wait time.', _LOG, 'engine', low=0)
bool_var('MXNET_STORAGE_FALLBACK_LOG_VERBOSE', True, 'Log, once per operator and storage '
         'signature, when an operator has no sparse kernel for its inputs and runs on dense '
         'copies of them (the storage fallback).', _LOG, 'op')

# Operators and kernels
int_var('MXNET_GPU_WORKER_NSTREAMS', 1, 'CUDA streams per GPU worker thread: with 2, an '
        "operator may run independent work on the second (a convolution's weight gradient "
        'beside its data gradient, with a workspace of its own).', _GPU, 'engine', low=1,
        high=2, read='startup')
enum_var('MXNET_CUDNN_AUTOTUNE_DEFAULT', '1', ('0', '1', '2'), 'Convolution algorithm (on the '
         "CPU: oneDNN, im2col+GEMM, Winograd; on a GPU: cuDNN's algorithms, CuPy's GEMM), for "
         'the forward pass and for the data and weight gradients each: 0 by rule (on a GPU '
         "cuDNN's heuristic), 1 by measuring those whose scratch fits the workspace attribute "
         '(cached per layer shape), 2 by measuring all.', _OPS, 'op', cache_key=True)
bool_var('MXNET_CUDA_ALLOW_TENSOR_CORE', True, 'Allow Tensor Cores: half-precision GEMMs and '
         'convolutions use them; off, every cuBLAS product is pedantic and cuDNN uses FMA '
         'math. Read when the first GPU starts.', _GPU, 'backend', read='startup')
bool_var('MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION', False, 'Let float32 GEMMs and '
         'convolutions convert to float16 on Tensor Cores (cuBLAS 32F_FAST_16F, cuDNN '
         'TENSOR_OP_MATH_ALLOW_CONVERSION); off, float32 keeps float32 arithmetic (no TF32). '
         'Only with MXNET_CUDA_ALLOW_TENSOR_CORE; read when the first GPU starts.', _GPU,
         'backend', read='startup')
bool_var('MXNET_CUDA_LIB_CHECKING', True, 'Warn when the CUDA driver is older than the runtime '
         'CuPy uses, or the runtime older than 12.0 (checked when the first GPU starts).',
         _GPU, 'backend', read='startup')
bool_var('MXNET_CUDNN_LIB_CHECKING', True, 'Warn when the cuDNN found is older than 9.0, or was '
         'built for another CUDA major version than the runtime (checked when the first GPU '
         'starts).', _GPU, 'backend', read='startup')
str_var('MXNET_GLUON_REPO', 'https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/',
        'Where pretrained weights and datasets are fetched from (a URL or a local directory).',
        'environment', 'gluon', accepts='a URL or a directory path')
bool_var('MXNET_MKLDNN_ENABLED', True, 'Use the oneDNN kernels where the library is available.',
         _OPS, 'op', cache_key=True)
int_var('MXNET_MKLDNN_CACHE_NUM', -1, 'Most oneDNN primitives kept in the cache (-1 unbounded).',
        _OPS, 'op', low=-1)
bool_var('MXNET_ENFORCE_DETERMINISM', False, 'Only bit-reproducible algorithms (BLAS on one '
         'thread from engine start-up); fail where none exists.', _OPS, 'op', cache_key=True)
int_var('MXNET_CPU_PARALLEL_SIZE', 200000, 'Elements from which an element-wise kernel is split '
        'across the worker threads, for dtypes the operator tuner does not tune.', _OPS,
        'engine', low=1)
int_var('MXNET_OPTIMIZER_AGGREGATION_SIZE', 4, 'Weights updated by one optimizer operation '
        '(read when an optimizer is created).', _OPS, 'optimizer', low=1, high=60)
int_var('MXNET_CPU_TEMP_COPY', 4, 'Temporary workspaces on the CPU, handed out round-robin.',
        _OPS, 'resource', low=1, read='startup')
int_var('MXNET_GPU_TEMP_COPY', 1, 'Temporary workspaces per GPU (cuDNN workspaces among '
        'them), handed out round-robin.', _OPS, 'resource', low=1, read='startup')
int_var('MXNET_CPU_PARALLEL_RAND_COPY', 1, 'Independent random streams on the CPU.', _OPS,
        'resource', low=1, read='startup')
int_var('MXNET_GPU_PARALLEL_RAND_COPY', 4, 'Independent random streams per GPU (CuPy '
        'generators), handed out round-robin.', _OPS, 'resource', low=1, read='startup')
int_var('MXNET_GPU_CUDNN_DROPOUT_STATE_COPY', 4, 'Dropout states per GPU: the random streams '
        'Dropout draws its masks from there, apart from the other random operators (Ember '
        "draws them with CuPy's generators, not cuDNN's dropout descriptor).", _OPS,
        'resource', low=1, read='startup')
enum_var('MXNET_SUBGRAPH_BACKEND', 'MKLDNN', ('MKLDNN', 'NONE'), 'Graph rewrites for the CPU '
         'kernels: MKLDNN folds BatchNorm and fuses convolution with add and activation for '
         'inference, puts convolution regions channel-last (NHWC) in inference and training '
         'graphs, and joins BatchNorm with the relu after it in training graphs '
         '(BatchNormWithReLU); NONE turns them off.', _EXEC, 'executor', cache_key=True)
bool_var('MXNET_SAFE_ACCUMULATION', False, 'Reductions over float16 (float32) accumulate in '
         'float32 (float64).', _OPS, 'op', cache_key=True)
bool_var('MXNET_USE_FUSION', True, 'Fuse chains of element-wise operators into one kernel '
         '(on a GPU one generated CUDA kernel per group).',
         _EXEC, 'executor', cache_key=True)
bool_var('MXNET_FUSION_VERBOSE', False, 'Print the code generated for fused operators.', _EXEC,
         'executor')
bool_var('MXNET_ELIMINATE_COMMON_EXPR', True, 'Merge graph nodes that compute the same operator '
         'on the same inputs.', _EXEC, 'executor', cache_key=True)
bool_var('MXNET_USE_MKLDNN_RNN', True, 'Run the fused RNN operator with oneDNN on the CPU.',
         _OPS, 'op', cache_key=True)

# Operator tuning
str_var('MXNET_USE_OPERATOR_TUNING', (lambda get: get('MXNET_ENABLE_OPERATOR_TUNING')),
        'Which dtypes the operator tuner measures: 0 none, 1 all, or a list of dtypes.',
        _TUNING, 'op', kind='tuning', parse=_parse_tuning, read='startup',
        default_doc='value of MXNET_ENABLE_OPERATOR_TUNING',
        accepts='0, 1 or a comma-separated list of dtypes')
str_var('MXNET_ENABLE_OPERATOR_TUNING', TUNING_DTYPES, 'Measure per operator and dtype whether '
        'splitting across threads pays: 0 none, 1 all, or a list of dtypes.', _TUNING, 'op',
        kind='tuning', parse=_parse_tuning, read='startup',
        default_doc='1 (all dtypes)', accepts='0, 1 or a comma-separated list of dtypes')
int_var('MXNET_USE_NUM_CORES_OPERATOR_TUNING', None, 'Cores the operator tuner assumes (unset: '
        'all available).', _TUNING, 'op', low=1, read='startup',
        default_doc='the threads of one operator')

# Graph compiler (PyTorch Neuron's controls)
str_var('NEURON_CC_FLAGS', CompilerFlags(), 'Graph-compiler flags, split like a shell '
        'command line: -O0 (no graph rewrites, no algorithm search), -O1 (rewrites, '
        'algorithms by rule), -O2 (everything); --auto-cast none, matmult or all with '
        '--auto-cast-type bf16, fp16 or tf32 (operands rounded to that precision, products '
        'accumulated in float32); --enable-saturate-infinity; and for the compile cache '
        '--cache_dir=DIR, --no_cache, --retry_failed_compilation, --log_level=LEVEL and '
        '--cache_size_limit=SIZE (Ember extension: least recently used entries go).',
        _COMPILER, 'compiler', kind='flags', parse=_parse_cc_flags, cache_key=True,
        default_doc='-O2 --auto-cast=none, cache on',
        accepts='compiler flags, e.g. "-O1 --auto-cast=matmult --cache_dir=/tmp/cache"')
str_var('NEURON_COMPILE_CACHE_URL', (lambda get: os.path.join(os.path.expanduser(
        get('MXNET_HOME')), 'neuron-compile-cache')), 'Directory of the persistent compile '
        'cache, when NEURON_CC_FLAGS has no --cache_dir (Ember extension, named by the '
        'compiler issue: torch-neuronx reads it too).', _COMPILER, 'compiler', kind='url',
        parse=_parse_cache_url, extension=True,
        default_doc='neuron-compile-cache under MXNET_HOME',
        accepts='a directory path or a file:// URL')
bool_var('NEURON_FRAMEWORK_DEBUG', False, 'Write each graph the compiler compiles or loads '
         'into the working directory: the graph as JSON and as text, its memory plan, the '
         'chosen algorithms and the flags.', _COMPILER, 'compiler')
bool_var('NEURON_EXTRACT_GRAPHS_ONLY', False, 'Record each graph in the compile cache without '
         'compiling it (one line printed per graph); graphs return zeros of their shapes and '
         'dtypes. The trial run of ahead-of-time compilation (python -m ember '
         'parallel-compile).', _COMPILER, 'compiler')
int_var('NEURON_NUM_RECENT_MODELS_TO_KEEP', None, 'Compiled graphs kept loaded per process; '
        'the least recently used one is unloaded and loaded from the compile cache again '
        'when used (unset: all stay).', _COMPILER, 'compiler', low=1, default_doc='keep all')
int_var('NEURON_PARALLEL_COMPILE_MAX_RETRIES', 0, 'Extra attempts of parallel-compile for a '
        'graph whose compilation failed.', _COMPILER, 'compiler', low=0)
bool_var('NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE', False, 'parallel-compile compiles '
         'the graphs gathered before the training script failed, instead of stopping.',
         _COMPILER, 'compiler')
enum_var('NEURON_DUMP_HLO_SNAPSHOT', '0', ('0', '1', 'ON_NRT_ERROR', 'ON_NRT_ERROR_CPU',
         'ON_NRT_ERROR_HYBRID'), 'Snapshots (graph, inputs, outputs) of graph executions, '
         'replayed by python -m ember replay: 1 every execution (inputs copied to host '
         'memory); ON_NRT_ERROR only executions that fail or give NaN/Inf, inputs kept on '
         'the device; ON_NRT_ERROR_CPU the same with inputs kept in host memory; '
         'ON_NRT_ERROR_HYBRID both.', _COMPILER, 'compiler')
bool_var('NEURON_NC0_ONLY_SNAPSHOT', False, 'Snapshots only of executions on device 0.',
         _COMPILER, 'compiler')
bool_var('XLA_USE_BF16', False, 'Store float32 and float64 arrays as bfloat16 while they keep '
         'their dtype for the user; kernels compute in float32 (stochastic rounding on by '
         'default).', _BF16, 'precision', cache_key=True, read='startup')
bool_var('XLA_DOWNCAST_BF16', False, 'Store float32 arrays as bfloat16 and float64 as float32 '
         'while they keep their dtype for the user (stochastic rounding on by default; '
         'XLA_USE_BF16 wins when both are set).', _BF16, 'precision', cache_key=True,
         read='startup')
bool_var('NEURON_RT_STOCHASTIC_ROUNDING_EN', None, 'Casts from float32 to bfloat16, float16 '
         '(and tf32) round stochastically, seeded, instead of to nearest-even (unset: on when '
         'XLA_USE_BF16 or XLA_DOWNCAST_BF16 is set).', _BF16, 'rounding', cache_key=True,
         read='startup', default_doc='1 when XLA_USE_BF16 or XLA_DOWNCAST_BF16 is set, else 0')
int_var('NEURON_RT_STOCHASTIC_ROUNDING_SEED', 0, 'Seed of stochastic rounding: the same seed '
        'and program round alike, whatever the thread counts.', _BF16, 'rounding', low=0,
        read='startup')
str_var('NEURON_RT_VISIBLE_CORES', None, 'The cores this process may use: consecutive '
        "ids ('3', '0-3' or '4,5'), a group of 2, 8 or 32 starting at a multiple of its size. "
        'The process pins itself to them, sizes its thread pools to them and holds a lock '
        'on each for its lifetime; a second process asking for a held core gets an error '
        'naming the holder.', _DIST, 'cores', kind='cores', parse=_parse_visible_cores,
        read='startup', default_doc='all',
        accepts="consecutive core ids such as '0-3'")
str_var('MXNET_CORE_LOCK_DIR', (lambda get: os.path.join(_temp_dir(), 'ember-core-locks')),
        'Directory of the per-core lock files of NEURON_RT_VISIBLE_CORES (Ember extension).',
        _DIST, 'cores', kind='path', read='startup', extension=True,
        default_doc='ember-core-locks in the temporary directory', accepts='a directory path')


# ----------------------------------------------------------------------------------------------
# Reading values.

_lock = threading.RLock()
_overrides: list[dict[str, Any]] = []
_parsed: dict[tuple[str, str], Any] = {}
_reset_hooks: dict[str, list[Callable[[], None]]] = {}
_UNSET = object()   # an override value meaning "as if not set": the default applies


def lookup(name: str) -> Var:
    """The declaration of `name` (aliases resolve to the canonical variable).

    >>> lookup('MXNET_EXEC_MATCH_RANGE').name
    'NNVM_EXEC_MATCH_RANGE'
    """
    canonical = ALIASES.get(name, name)
    try:
        return REGISTRY[canonical]
    except KeyError:
        raise KeyError(f'{name} is not a declared configuration variable'
                       + _suggest(name, REGISTRY)) from None


def raw_value(name: str) -> tuple[str | None, str]:
    """(raw text, where it came from) for a canonical name: 'environment', 'environment (ALIAS)'
    or (None, 'default'). An empty or blank value counts as unset."""
    var = REGISTRY[name]
    for env_name in (name,) + var.aliases:
        raw = os.environ.get(env_name)
        if raw is not None and raw.strip():
            return raw, 'environment' if env_name == name else f'environment ({env_name})'
    return None, 'default'


# Live variables are read on hot paths (every engine push, every element-wise kernel), so a
# read without overrides compares the environment's raw bytes with the last parse by identity
# instead of decoding and parsing again.
_env_bytes = getattr(os.environ, '_data', None)
_env_key = getattr(os.environ, 'encodekey', None)
_fast: dict[str, tuple] = {}


def get(name: str) -> Any:
    """The value of a variable: an override, else the environment, else its default.

    >>> get('MXNET_ENGINE_TYPE') in ('NaiveEngine', 'ThreadedEngine', 'ThreadedEnginePerDevice')
    True
    """
    if not _overrides:
        hit = _fast.get(name)
        if hit is not None and _env_bytes.get(hit[0]) is hit[1]:
            return hit[2]
        value = _get(name)
        _remember(name, value)
        return value
    return _get(name)


def _remember(name, value):
    var = REGISTRY.get(name)
    if _env_bytes is None or var is None or var.aliases or _overrides:
        return
    key = _env_key(name)
    raw = _env_bytes.get(key)
    if raw is None and callable(var.default):
        return      # a computed default follows other variables: not cached
    _fast[name] = (key, raw, value)


def _get(name: str) -> Any:
    var = lookup(name)
    for frame in reversed(_overrides):
        if var.name in frame:
            value = frame[var.name]
            return default_value(var) if value is _UNSET else value
    raw, _ = raw_value(var.name)
    if raw is None:
        return default_value(var)
    key = (var.name, raw)
    try:
        return _parsed[key]
    except KeyError:
        pass
    value = parse_value(var, raw)
    _parsed[key] = value
    return value


def parse_value(var: Var, raw: str) -> Any:
    """Parse the text `raw` for `var`, or raise ConfigError naming variable, value and fix."""
    try:
        return var.parse(raw.strip() if var.kind not in ('str', 'path') else raw)
    except ValueError as exc:
        raise ConfigError(f'{var.name}={raw!r}: expected {exc}') from None


def default_value(var: Var) -> Any:
    if callable(var.default):
        return var.default(get)
    return var.default


def source(name: str) -> str:
    """Where the current value comes from: 'override', 'environment' or 'default'.

    >>> with override(MXNET_EXEC_NUM_TEMP=2):
    ...     source('MXNET_EXEC_NUM_TEMP')
    'override'
    """
    var = lookup(name)
    for frame in reversed(_overrides):
        if var.name in frame:
            return 'override'
    return 'default' if raw_value(var.name)[0] is None else 'environment'


def is_set(name: str) -> bool:
    """Whether the user chose a value (environment or override) rather than the default."""
    return source(name) != 'default'


# ----------------------------------------------------------------------------------------------
# Overrides for tests.

def register_reset(owner: str, hook: Callable[[], None]) -> None:
    """Let variables read once by `owner` be overridden: `hook()` rebuilds the subsystem from
    the current configuration. An owner may register several hooks; they run in order."""
    hooks = _reset_hooks.setdefault(owner, [])
    if hook not in hooks:
        hooks.append(hook)


def unregister_reset(owner: str, hook: Callable[[], None]) -> None:
    """Remove a hook added with :func:`register_reset`."""
    hooks = _reset_hooks.get(owner, [])
    if hook not in hooks:
        raise ValueError(f'{hook!r} is not a reset hook of {owner!r}')
    hooks.remove(hook)
    if not hooks:
        del _reset_hooks[owner]


_TEXT_CHECKED = ('int', 'float', 'bool', 'enum', 'tuning')


def _checked_value(var: Var, value: Any) -> Any:
    """An override value, validated like the environment's text would be."""
    if value is None:
        return _UNSET
    if isinstance(value, str):
        return _UNSET if not value.strip() else parse_value(var, value)
    if var.kind in _TEXT_CHECKED:
        text = ('1' if value else '0') if isinstance(value, bool) else str(value)
        return parse_value(var, text)
    return value


def _remove_frame(frame: dict) -> None:
    with _lock:
        for index in range(len(_overrides) - 1, -1, -1):
            if _overrides[index] is frame:
                del _overrides[index]
                return


class override:
    """Set variables for a block or a function; startup variables also reset their subsystem.

    Values are Python values or the text the environment would hold; ``None`` means unset
    (the default applies). A variable read once at start-up can be overridden only when its
    owner registered a reset hook (:func:`register_reset`).

    >>> with override(MXNET_CPU_PARALLEL_SIZE=1000):
    ...     get('MXNET_CPU_PARALLEL_SIZE')
    1000
    >>> @override(MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN='7')
    ... def forward_bulk():
    ...     return get('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD')
    >>> forward_bulk()
    7
    """

    def __init__(self, **values):
        self._values = {}
        for name, value in values.items():
            var = lookup(name)
            self._values[var.name] = _checked_value(var, value)
        self._owners = sorted({REGISTRY[n].owner for n in self._values
                               if REGISTRY[n].read == 'startup'})
        for owner in self._owners:
            if not _reset_hooks.get(owner):
                names = [n for n in self._values if REGISTRY[n].owner == owner]
                raise ConfigError(
                    f'{", ".join(names)} is read once at start-up by {owner}, which cannot be '
                    f'reset in this process; set it in the environment of a new process instead')
        self._frames: list[dict] = []

    def __enter__(self):
        frame = dict(self._values)
        with _lock:
            _overrides.append(frame)
        self._frames.append(frame)
        try:
            self._reset()
        except BaseException:
            _remove_frame(self._frames.pop())
            self._reset()
            raise
        return self

    def __exit__(self, *exc):
        _remove_frame(self._frames.pop())
        self._reset()
        return False

    def _reset(self):
        for owner in self._owners:
            for hook in list(_reset_hooks.get(owner, ())):
                hook()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # A fresh instance per call, so concurrent or recursive calls keep separate frames.
            with self._twin():
                return fn(*args, **kwargs)
        return wrapper

    def _twin(self) -> 'override':
        twin = object.__new__(override)
        twin._values, twin._owners, twin._frames = self._values, self._owners, []
        return twin


def snapshot() -> tuple:
    """A value to compare before and after a test, to catch leaked overrides."""
    return tuple(id(frame) for frame in _overrides)


# ----------------------------------------------------------------------------------------------
# Unknown names and child processes.

_warned: set[str] = set()


class UnknownVariableWarning(UserWarning):
    """An environment variable with an Ember prefix that no declaration matches."""


def closest_name(name: str) -> str | None:
    """The declared name (or alias) closest to `name`, if any is close.

    >>> closest_name('MXNET_CPU_WORKR_NTHREADS')
    'MXNET_CPU_WORKER_NTHREADS'
    """
    known = sorted(set(REGISTRY) | set(ALIASES))
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


def warn_unknown(environ=None) -> list[str]:
    """Warn once per unknown variable with a known prefix; return the names warned about.

    Runs over ``os.environ`` when this module is imported; a name warns once per process.
    """
    environ = os.environ if environ is None else environ
    known = set(REGISTRY) | set(ALIASES)
    warned = []
    for name in sorted(environ):
        if not name.startswith(PREFIXES) or name in known or name in _warned:
            continue
        _warned.add(name)
        warned.append(name)
        close = closest_name(name)
        hint = f'; did you mean {close}?' if close else ''
        # Attributed to the environment, not to a line of Ember's source.
        warnings.warn_explicit(f'{name} is not a variable Ember knows{hint}',
                               UnknownVariableWarning, 'environment', 0)
    return warned


def unknown_names(environ=None) -> list[str]:
    """Names in the environment with an Ember prefix that no declaration matches."""
    environ = os.environ if environ is None else environ
    known = set(REGISTRY) | set(ALIASES)
    return sorted(n for n in environ if n.startswith(PREFIXES) and n not in known)


def environ_snapshot() -> dict[str, str]:
    """The variables of the environment that have an Ember prefix or are declared (for logs)."""
    known = set(REGISTRY) | set(ALIASES)
    return {k: v for k, v in os.environ.items() if k in known or k.startswith(PREFIXES)}


def environ_value(name: str) -> str | None:
    """The raw text of environment variable `name`, or None (``mx.util.getenv``)."""
    return os.environ.get(name)


def set_environ_value(name: str, value: str | None) -> None:
    """Set (None: remove) environment variable `name` in this process (``mx.util.setenv``).
    A declared variable's value is validated first; variables read at start-up keep the value
    they were read with."""
    if value is None:
        os.environ.pop(name, None)
        return
    if not isinstance(value, str):
        raise TypeError(f'setenv({name!r}): the value must be a string or None, got '
                        f'{type(value).__name__}')
    if name in REGISTRY or name in ALIASES:
        parse_value(lookup(name), value)
    os.environ[name] = value


def child_environ(**values) -> dict[str, str]:
    """A copy of this process's environment for a child process, with `values` set
    (``None`` removes a variable). Declared variables are validated first.

    >>> child_environ(MXNET_ENGINE_TYPE='NaiveEngine')['MXNET_ENGINE_TYPE']
    'NaiveEngine'
    >>> 'MXNET_ENGINE_TYPE' in child_environ(MXNET_ENGINE_TYPE=None)
    False
    """
    environ = dict(os.environ)
    for name, value in values.items():
        if value is None:
            environ.pop(name, None)
            continue
        text = ('1' if value else '0') if isinstance(value, bool) else str(value)
        if name in REGISTRY or name in ALIASES:
            parse_value(lookup(name), text)
        environ[name] = text
    return environ


def cache_key_values() -> dict[str, Any]:
    """Values of the variables that change what the compiler produces."""
    return {name: get(name) for name, var in sorted(REGISTRY.items()) if var.cache_key}


def _read_cores() -> tuple:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return tuple(range(os.cpu_count() or 1))


# Read once, by the thread that imports Ember: Linux keeps an affinity per thread, and
# KMP_AFFINITY pins each engine worker to one core, where its own affinity would leave the
# kernels it runs one thread (and the kernel pool it starts pinned to that core).
_PROCESS_CORES = _read_cores()


def process_cores() -> tuple:
    """The cores this process may run on (the affinity it started with), in order."""
    return _PROCESS_CORES


def restrict_process_cores(cores) -> None:
    """Record that the process now runs on `cores` only (``ember.cores`` pins it at import,
    before any thread pool is sized)."""
    global _PROCESS_CORES
    _PROCESS_CORES = tuple(sorted(cores))


def cpu_count() -> int:
    """Cores this process may run on (:func:`process_cores`)."""
    return len(_PROCESS_CORES)


# ----------------------------------------------------------------------------------------------
# Variables of other libraries that Ember sets for itself.

@dataclass(frozen=True)
class NativeDefault:
    """A native library's variable that Ember sets when the user has not: `value` goes into
    the environment before `library` loads (it reads the variable once, then), unless the user
    set `name` or one of the variables in `yields_to`."""

    name: str
    value: str
    library: str
    why: str
    yields_to: tuple = ()


NATIVE_DEFAULTS = (
    NativeDefault('OPENBLAS_THREAD_TIMEOUT', '4', "NumPy's OpenBLAS (pthreads)",
                  'its threads sleep soon after a GEMM instead of spinning for ~0.1 s on the '
                  'cores that oneDNN and the kernel pool need next (up to 25x slower small '
                  'operators)'),
    NativeDefault('GOMP_SPINCOUNT', '10000', "libgomp, oneDNN's OpenMP runtime",
                  'its threads spin 10k iterations after a primitive instead of 300k, giving '
                  'the cores back to OpenBLAS and NumPy kernels between oneDNN calls',
                  yields_to=('OMP_WAIT_POLICY',)),
)
_NATIVE_DEFAULTS = {default.name: default for default in NATIVE_DEFAULTS}


def native_value(name: str) -> str | None:
    """The environment's value now of a variable in ``NATIVE_DEFAULTS`` (None when unset)."""
    if name not in _NATIVE_DEFAULTS:
        raise KeyError(f'{name} is not a native variable Ember sets; expected one of '
                       f'{", ".join(_NATIVE_DEFAULTS)}')
    return os.environ.get(name)


def set_native_default(name: str) -> bool:
    """Put Ember's value of the native library variable `name` (see ``NATIVE_DEFAULTS``) into
    this process's environment unless the user set it, or a variable it yields to; return
    whether it was set. Libraries read these once, when they load: call it before.

    >>> [default.name for default in NATIVE_DEFAULTS]
    ['OPENBLAS_THREAD_TIMEOUT', 'GOMP_SPINCOUNT']
    >>> set_native_default('OMP_NUM_THREADS')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    KeyError: 'OMP_NUM_THREADS is not a native variable Ember sets; expected one of ...'
    """
    default = _NATIVE_DEFAULTS.get(name)
    if default is None:
        raise KeyError(f'{name} is not a native variable Ember sets; expected one of '
                       f'{", ".join(_NATIVE_DEFAULTS)}')
    if any(os.environ.get(taken, '').strip() for taken in (name,) + default.yields_to):
        return False
    os.environ[name] = default.value
    return True


warn_unknown()
