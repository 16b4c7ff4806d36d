"""Data iterators of MXNet 1.x's ``mx.io``: batches of arrays for the Module API.

An iterator yields :class:`DataBatch` objects (lists of NDArrays for data and label) and
describes its inputs with :class:`DataDesc` (name, shape, dtype, layout) in ``provide_data``
and ``provide_label``.

>>> import numpy as np
>>> from ember.io import NDArrayIter
>>> it = NDArrayIter(np.arange(10).reshape(5, 2), np.arange(5), batch_size=2)
>>> [(b.data[0].shape, b.label[0].asnumpy().tolist(), b.pad) for b in it]
[((2, 2), [0.0, 1.0], 0), ((2, 2), [2.0, 3.0], 0), ((2, 2), [4.0, 0.0], 1)]
>>> it.provide_data
[DataDesc[data,(2, 2),<class 'numpy.float32'>,NCHW]]
"""
from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np

from ember import ndarray as nd
from ember.base import mx_real_t, py_str  # noqa: F401  (MXNet's io module has them)
from ember.ndarray import NDArray, concat, tile  # noqa: F401
from ember.ndarray.sparse import CSRNDArray  # noqa: F401
from ember.ndarray.utils import array  # noqa: F401

__all__ = ['DataDesc', 'DataBatch', 'DataIter', 'NDArrayIter', 'ResizeIter', 'PrefetchingIter',
           'NDArray', 'CSRNDArray', 'array', 'concat', 'tile', 'mx_real_t', 'py_str']

LAST_BATCH_HANDLES = ('pad', 'discard', 'roll_over')


class DataDesc(namedtuple('DataDesc', ['name', 'shape'])):
    """The name and shape of one input, with its dtype and layout as attributes.

    A (name, shape) tuple, as in MXNet, so ``dict(it.provide_data)`` maps names to shapes.

    >>> desc = DataDesc('data', (32, 3, 8, 8))
    >>> name, shape = desc
    >>> name, shape, desc.dtype, DataDesc.get_batch_axis(desc.layout)
    ('data', (32, 3, 8, 8), <class 'numpy.float32'>, 0)
    """

    def __new__(cls, name, shape, dtype=np.float32, layout='NCHW'):
        desc = super().__new__(cls, name, shape)
        desc.dtype = dtype
        desc.layout = layout
        return desc

    def __repr__(self):
        return f'DataDesc[{self.name},{self.shape},{self.dtype},{self.layout}]'

    def __getnewargs__(self):
        return (self.name, self.shape, self.dtype, self.layout)

    @staticmethod
    def get_batch_axis(layout):
        """The axis of the batch ('N') in `layout`; 0 when the layout is unknown (None).

        >>> DataDesc.get_batch_axis('TNC'), DataDesc.get_batch_axis(None)
        (1, 0)
        """
        return 0 if layout is None else layout.find('N')

    @staticmethod
    def get_list(shapes, types):
        """DataDescs from [(name, shape)] and [(name, dtype)] (or None for float32).

        >>> DataDesc.get_list([('x', (2, 3))], [('x', np.int32)])[0].dtype
        <class 'numpy.int32'>
        """
        if types is None:
            return [DataDesc(name, shape) for name, shape in shapes]
        dtypes = dict(types)
        return [DataDesc(name, shape, dtypes[name]) for name, shape in shapes]


class DataBatch:
    """One batch: lists of NDArrays for ``data`` and ``label``, and how many trailing
    examples of it are padding (``pad``).

    >>> import ember.ndarray as nd
    >>> print(DataBatch([nd.zeros((4, 3))], [nd.zeros((4,))], pad=1))
    DataBatch: data shapes: [(4, 3)] label shapes: [(4,)]
    """

    def __init__(self, data, label=None, pad=None, index=None, bucket_key=None,
                 provide_data=None, provide_label=None):
        _check_list('data', data)
        _check_list('label', label)
        self.data = data
        self.label = label
        self.pad = pad
        self.index = index
        self.bucket_key = bucket_key
        self.provide_data = provide_data
        self.provide_label = provide_label

    def __str__(self):
        data_shapes = [d.shape for d in self.data]
        label_shapes = [lbl.shape for lbl in self.label] if self.label else None
        return f'{type(self).__name__}: data shapes: {data_shapes} label shapes: {label_shapes}'


def _check_list(what, arrays):
    if arrays is not None and not isinstance(arrays, (list, tuple)):
        raise TypeError(f'DataBatch: {what} must be a list of NDArrays, '
                        f'got {type(arrays).__name__}')


class _Described:
    """``provide_data``/``provide_label`` of DataIter: set in ``__init__`` (as MXNet's
    iterators do) or overridden by a property in the subclass."""

    def __init__(self, name):
        self.name = name
        self.slot = '_' + name

    def __get__(self, it, owner):
        if it is None:
            return self
        if self.slot not in it.__dict__:
            raise NotImplementedError(f'{type(it).__name__} must define {self.name}')
        return it.__dict__[self.slot]

    def __set__(self, it, value):
        it.__dict__[self.slot] = value


class DataIter:
    """The iterator protocol of ``mx.io``: ``reset``, ``next`` (a DataBatch or
    StopIteration), ``iter_next`` with ``getdata``/``getlabel``/``getpad``/``getindex``,
    and ``provide_data``/``provide_label`` (lists of DataDesc).

    A subclass defines either ``next`` or ``iter_next`` and the ``get*`` methods.

    >>> class Count(DataIter):
    ...     def __init__(self):
    ...         super().__init__(batch_size=1)
    ...         self.n = 0
    ...     def iter_next(self):
    ...         self.n += 1
    ...         return self.n <= 2
    ...     def getdata(self):
    ...         return [self.n]
    ...     def getlabel(self):
    ...         return []
    ...     def getpad(self):
    ...         return 0
    >>> [b.data for b in Count()]
    [[1], [2]]
    """

    provide_data = _Described('provide_data')
    provide_label = _Described('provide_label')

    def __init__(self, batch_size=0):
        self.batch_size = batch_size

    def __iter__(self):
        return self

    def reset(self):
        """Go back to the start of the data (the base iterator has nothing to rewind)."""

    def next(self):
        """The next DataBatch; raises StopIteration at the end of the data."""
        if not self.iter_next():
            raise StopIteration
        return DataBatch(data=self.getdata(), label=self.getlabel(), pad=self.getpad(),
                         index=self.getindex())

    def __next__(self):
        return self.next()

    def iter_next(self):
        """Move to the next batch; False at the end of the data."""
        raise NotImplementedError(f'{type(self).__name__} must define iter_next or next')

    def getdata(self):
        """The data arrays of the current batch."""
        raise NotImplementedError(f'{type(self).__name__} must define getdata')

    def getlabel(self):
        """The label arrays of the current batch."""
        raise NotImplementedError(f'{type(self).__name__} must define getlabel')

    def getindex(self):
        """The indices of the current batch's examples (None when unknown)."""
        return None

    def getpad(self):
        """How many examples at the end of the current batch are padding."""
        raise NotImplementedError(f'{type(self).__name__} must define getpad')


# ----------------------------------------------------------------------------------------------
# NDArrayIter

def _named_arrays(data, allow_empty, default_name):
    """[(name, NDArray)] sorted by name, from an array, a list or a dict of arrays (MXNet's
    ``_init_data``): one array is called `default_name`, several ``_<i>_<default_name>``."""
    if data is None:
        if not allow_empty:
            raise ValueError('NDArrayIter: data must be given, got None')
        data = []
    if isinstance(data, (np.ndarray, NDArray)):
        data = [data]
    if isinstance(data, (list, tuple)):
        if not data and not allow_empty:
            raise ValueError('NDArrayIter: data must hold at least one array, got []')
        if len(data) == 1:
            data = {default_name: data[0]}
        else:
            data = {f'_{i}_{default_name}': d for i, d in enumerate(data)}
    if not isinstance(data, dict):
        raise TypeError(f'NDArrayIter: inputs must be an NDArray, a numpy.ndarray, a list of them '
                        f'or a dict of name -> array, got {type(data).__name__}')
    return [(name, _as_ndarray(name, data[name])) for name in sorted(data)]


def _as_ndarray(name, value):
    if isinstance(value, NDArray):
        return value
    try:
        return nd.array(value)
    except TypeError as exc:
        raise TypeError(f'NDArrayIter: input {name!r} must be array-like ({exc})') from None


def _check_lengths(sources, axis=0):
    lengths = {name: array.shape[_batch_axis(array, axis)] for name, array in sources}
    if len(set(lengths.values())) > 1:
        raise ValueError(f'NDArrayIter: every data and label array needs the same number of '
                         f'examples (along the layout\'s batch axis {axis}), got {lengths}')


def _permuted(sources, order, axis=0):
    return [(name, nd.array(np.take(array.asnumpy(), order, axis=_batch_axis(array, axis)),
                            ctx=array.context, dtype=array.dtype))
            for name, array in sources]


class NDArrayIter(DataIter):
    """Batches of in-memory arrays (NumPy or NDArray; one, a list, or a dict by name).

    ``last_batch_handle`` says what happens to a last batch that is not full: ``'pad'`` fills
    it from the start of the data and reports the count in ``pad``; ``'discard'`` drops it;
    ``'roll_over'`` keeps it for the next epoch, whose first batch starts with it.
    ``shuffle`` permutes the examples at every reset with NumPy's global generator (as
    MXNet does, so ``np.random.seed`` makes the order reproducible).

    >>> import numpy as np
    >>> it = NDArrayIter({'x': np.arange(5)}, batch_size=2, last_batch_handle='roll_over')
    >>> [b.data[0].asnumpy().tolist() for b in it]
    [[0.0, 1.0], [2.0, 3.0]]
    >>> it.reset()
    >>> [(b.data[0].asnumpy().tolist(), b.pad) for b in it]
    [([4.0, 0.0], 1), ([1.0, 2.0], 0), ([3.0, 4.0], 0)]
    """

    def __init__(self, data, label=None, batch_size=1, shuffle=False, last_batch_handle='pad',
                 data_name='data', label_name='softmax_label', layout='NCHW'):
        super().__init__(batch_size)
        if last_batch_handle not in LAST_BATCH_HANDLES:
            raise ValueError(f'NDArrayIter: last_batch_handle={last_batch_handle!r}: expected '
                             f"'pad', 'discard' or 'roll_over'")
        if int(batch_size) < 1:
            raise ValueError(f'NDArrayIter: batch_size={batch_size!r}: expected an integer >= 1')
        self.layout = layout
        self.axis = DataDesc.get_batch_axis(layout) if 'N' in (layout or 'N') else 0
        self.data = _named_arrays(data, False, data_name)
        self.label = _named_arrays(label, True, label_name)
        _check_lengths(self.data + self.label, self.axis)
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.last_batch_handle = last_batch_handle
        self.num_data = self.data[0][1].shape[_batch_axis(self.data[0][1], self.axis)]
        self.idx = np.arange(self.num_data)
        self.cursor = -self.batch_size
        # The incomplete last batch that 'roll_over' carries into the next epoch.
        self._cache_data = None
        self._cache_label = None
        self.reset()

    @property
    def provide_data(self):
        return [self._describe(name, array) for name, array in self.data]

    @property
    def provide_label(self):
        return [self._describe(name, array) for name, array in self.label]

    def _describe(self, name, array):
        shape = list(array.shape)
        shape[_batch_axis(array, self.axis)] = self.batch_size
        return DataDesc(name, tuple(shape), array.dtype, layout=self.layout)

    def hard_reset(self):
        """Go back to the start, dropping any batch kept by 'roll_over'."""
        if self.shuffle:
            self._shuffle_data()
        self.cursor = -self.batch_size
        self._cache_data = None
        self._cache_label = None

    def reset(self):
        if self.shuffle:
            self._shuffle_data()
        if self._rolling_over_last_batch():
            # cursor - num_data (< 0) is minus the number of examples kept for the first batch
            self.cursor = self.cursor - self.num_data - self.batch_size
        else:
            self.cursor = -self.batch_size

    def _rolling_over_last_batch(self):
        return (self.last_batch_handle == 'roll_over'
                and self.num_data - self.batch_size < self.cursor < self.num_data)

    def iter_next(self):
        self.cursor += self.batch_size
        return self.cursor < self.num_data

    def next(self):
        if not self.iter_next():
            raise StopIteration
        data = self.getdata()
        label = self.getlabel()
        if data[0].shape[_batch_axis(data[0], self.axis)] != self.batch_size:
            # an incomplete last batch ('discard', 'roll_over'): keep it for the next epoch
            self._cache_data = data
            self._cache_label = label
            raise StopIteration
        return DataBatch(data=data, label=label, pad=self.getpad(), index=None)

    def getdata(self):
        return self._batchify(self.data)

    def getlabel(self):
        return self._batchify(self.label)

    def getpad(self):
        if self._in_padded_batch():
            return self.cursor + self.batch_size - self.num_data
        if self._in_rolled_over_batch():
            return -self.cursor
        return 0

    def _in_padded_batch(self):
        return self.last_batch_handle == 'pad' and self.cursor + self.batch_size > self.num_data

    def _in_rolled_over_batch(self):
        return self.last_batch_handle == 'roll_over' and -self.batch_size < self.cursor < 0

    def _batchify(self, sources):
        if self.cursor >= self.num_data:
            raise StopIteration('NDArrayIter: past the end of the data; call reset()')
        if self._in_rolled_over_batch():
            return self._rolled_over_batch(sources)
        if self._in_padded_batch():
            return self._padded_batch(sources)
        end = min(self.cursor + self.batch_size, self.num_data)
        return _slices(sources, self.cursor, end, self.axis)

    def _rolled_over_batch(self, sources):
        if sources is self.data:
            kept, self._cache_data = self._cache_data, None
        else:
            kept, self._cache_label = self._cache_label, None
        if kept is None:
            raise RuntimeError('NDArrayIter: roll_over has no batch kept from the last epoch; '
                               'fetch data and label once per batch')
        return _concat(kept, _slices(sources, 0, self.cursor + self.batch_size, self.axis),
                       self.axis)

    def _padded_batch(self, sources):
        pad = self.cursor + self.batch_size - self.num_data
        axis = self.axis
        tail = _slices(sources, self.cursor, self.num_data, axis)
        # a pad longer than the data repeats the whole data, then a prefix of it
        whole, rest = divmod(pad, self.num_data)
        filler = _tile(_slices(sources, 0, self.num_data, axis), whole, axis) if whole else []
        if rest:
            filler = _concat(filler, _slices(sources, 0, rest, axis), axis)
        return _concat(tail, filler, axis)

    def _shuffle_data(self):
        np.random.shuffle(self.idx)
        self.data = _permuted(self.data, self.idx, self.axis)
        self.label = _permuted(self.label, self.idx, self.axis)


def _batch_axis(array, axis):
    """The layout's batch axis, or 0 for an array with fewer axes (a label of shape (N,))."""
    return axis if array.ndim > axis else 0


def _slices(sources, start, end, axis=0):
    if axis == 0:
        return [array[start:end] for _, array in sources]
    return [nd.slice_axis(array, axis=_batch_axis(array, axis), begin=start, end=end)
            for _, array in sources]


def _concat(first, second, axis=0):
    if not first or not second:
        return first or second
    return [nd.concat(a, b, dim=_batch_axis(a, axis)) for a, b in zip(first, second)]


def _tile(arrays, repeats, axis=0):
    return [nd.tile(a, reps=tuple(repeats if i == _batch_axis(a, axis) else 1
                                  for i in range(a.ndim))) for a in arrays]


# ----------------------------------------------------------------------------------------------
# Wrappers

class ResizeIter(DataIter):
    """An iterator of exactly `size` batches per epoch, restarting `data_iter` when it runs
    out (and resetting it at each reset when `reset_internal`).

    >>> import numpy as np
    >>> it = ResizeIter(NDArrayIter(np.arange(4), batch_size=2), size=3)
    >>> [b.data[0].asnumpy().tolist() for b in it]
    [[0.0, 1.0], [2.0, 3.0], [0.0, 1.0]]
    """

    def __init__(self, data_iter, size, reset_internal=True):
        super().__init__(data_iter.batch_size)
        self.data_iter = data_iter
        self.size = size
        self.reset_internal = reset_internal
        self.cur = 0
        self.current_batch = None
        self.provide_data = data_iter.provide_data
        self.provide_label = data_iter.provide_label
        if hasattr(data_iter, 'default_bucket_key'):
            self.default_bucket_key = data_iter.default_bucket_key

    def reset(self):
        self.cur = 0
        if self.reset_internal:
            self.data_iter.reset()

    def iter_next(self):
        if self.cur == self.size:
            return False
        try:
            self.current_batch = self.data_iter.next()
        except StopIteration:
            self.data_iter.reset()
            self.current_batch = self.data_iter.next()
        self.cur += 1
        return True

    def getdata(self):
        return self.current_batch.data

    def getlabel(self):
        return self.current_batch.label

    def getindex(self):
        return self.current_batch.index

    def getpad(self):
        return self.current_batch.pad


class _Prefetcher:
    """A thread that fetches one batch ahead from one iterator. It holds no reference to the
    PrefetchingIter, so dropping that closes the thread."""

    def __init__(self, data_iter, name):
        self.data_iter = data_iter
        self.batch = None
        self.error = None
        self.running = True
        self.ready = threading.Event()   # a batch (or the end, or an error) is waiting
        self.wanted = threading.Event()  # the consumer took the last one: fetch the next
        self.wanted.set()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            self.wanted.wait()
            self.wanted.clear()
            if not self.running:
                return
            try:
                self.batch = self.data_iter.next()
            except StopIteration:
                self.batch = None
            except Exception as exc:  # noqa: BLE001  (re-raised in the consumer's thread)
                self.batch, self.error = None, exc
            self.ready.set()

    def peek(self):
        """The fetched batch (None at the end); raises what the fetch raised."""
        self.ready.wait()
        error, self.error = self.error, None
        if error is not None:
            raise error
        return self.batch

    def fetch_next(self):
        self.ready.clear()
        self.wanted.set()

    def close(self):
        self.running = False
        self.wanted.set()
        if self.thread is not threading.current_thread():
            self.thread.join()


class PrefetchingIter(DataIter):
    """Joins one or more iterators and fetches their next batches in background threads
    while the current one is used. Batches combine the data and labels of every iterator;
    `rename_data`/`rename_label` (one dict per iterator) rename their ``provide_*`` entries.

    >>> import numpy as np
    >>> it = PrefetchingIter(NDArrayIter(np.arange(4), batch_size=2))
    >>> [b.data[0].asnumpy().tolist() for b in it]
    [[0.0, 1.0], [2.0, 3.0]]
    >>> it.close()
    """

    def __init__(self, iters, rename_data=None, rename_label=None):
        super().__init__()
        iters = list(iters) if isinstance(iters, (list, tuple)) else [iters]
        if not iters:
            raise ValueError('PrefetchingIter: iters must hold at least one iterator, got []')
        self.iters = iters
        self.n_iter = len(iters)
        self.rename_data = rename_data
        self.rename_label = rename_label
        self.batch_size = self.provide_data[0].shape[0]
        self.current_batch = None
        self._prefetchers = [_Prefetcher(it, f'ember-io-prefetch-{i}')
                             for i, it in enumerate(iters)]

    def __del__(self):
        self.close()

    def close(self):
        """Stop the prefetching threads (also done when the iterator is garbage-collected)."""
        for prefetcher in getattr(self, '_prefetchers', []):
            prefetcher.close()
        self._prefetchers = []

    @property
    def provide_data(self):
        return _renamed([it.provide_data for it in self.iters], self.rename_data)

    @property
    def provide_label(self):
        return _renamed([it.provide_label for it in self.iters], self.rename_label)

    def reset(self):
        for prefetcher in self._prefetchers:
            prefetcher.ready.wait()   # no fetch is running while the iterators rewind
        for it in self.iters:
            it.reset()
        for prefetcher in self._prefetchers:
            prefetcher.error = None
            prefetcher.fetch_next()

    def iter_next(self):
        if not self._prefetchers:
            raise RuntimeError('PrefetchingIter: the iterator is closed')
        batches = [prefetcher.peek() for prefetcher in self._prefetchers]
        if all(batch is None for batch in batches):
            return False
        if any(batch is None for batch in batches):
            raise ValueError(f'PrefetchingIter: the iterators hold different numbers of batches '
                             f'(ended: {[batch is None for batch in batches]})')
        self.current_batch = self._combine(batches)
        for prefetcher in self._prefetchers:
            prefetcher.fetch_next()
        return True

    def _combine(self, batches):
        if any(batch.pad != batches[0].pad for batch in batches):
            raise ValueError(f'PrefetchingIter: the iterators pad their batches differently: '
                             f'pads {[batch.pad for batch in batches]}')
        return DataBatch(sum([list(b.data) for b in batches], []),
                         sum([list(b.label or []) for b in batches], []),
                         batches[0].pad, batches[0].index,
                         provide_data=self.provide_data, provide_label=self.provide_label)

    def next(self):
        if not self.iter_next():
            raise StopIteration
        return self.current_batch

    def getdata(self):
        return self.current_batch.data

    def getlabel(self):
        return self.current_batch.label

    def getindex(self):
        return self.current_batch.index

    def getpad(self):
        return self.current_batch.pad


def _renamed(descs_per_iter, renames):
    if renames is None:
        return sum([list(descs) for descs in descs_per_iter], [])
    return [_renamed_desc(desc, rename)
            for descs, rename in zip(descs_per_iter, renames) for desc in descs]


def _renamed_desc(desc, rename):
    if not isinstance(desc, DataDesc):
        desc = DataDesc(*desc)
    return DataDesc(rename.get(desc.name, desc.name), desc.shape, desc.dtype, desc.layout)
