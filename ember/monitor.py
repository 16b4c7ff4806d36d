"""MXNet's ``mx.monitor``: statistics of every operator's outputs (and with `monitor_all`,
inputs), weights and auxiliary states of executors, every `interval` batches.

>>> import numpy as np
>>> import ember as mx
>>> net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2, name='fc')
>>> exe = net.simple_bind(mx.cpu(), data=(1, 3), grad_req='null')
>>> monitor = Monitor(1, pattern='fc_.*')
>>> monitor.install(exe)
>>> exe.arg_dict['fc_weight'][:] = 1
>>> monitor.tic()
>>> _ = exe.forward(data=mx.nd.ones((1, 3)))
>>> [(step, name) for step, name, _ in monitor.toc()]
[(1, 'fc_output'), (1, 'fc_weight'), (1, 'fc_bias')]
"""
from __future__ import annotations

import logging
import re
from math import sqrt

from ember import ndarray
from ember.base import py_str  # noqa: F401  (a name of MXNet's mx.monitor)
from ember.ndarray import NDArray

__all__ = ['Monitor', 'NDArray', 'py_str']


def _root_mean_square(array):
    return ndarray.norm(array) / sqrt(array.size)


class Monitor:
    """Collect ``stat_func(array)`` (default: the root mean square, ``norm / sqrt(size)``) of
    the arrays whose names match `pattern`, in the batches between ``tic()`` and ``toc()``
    every `interval` batches. Install on executors with :meth:`install` (``Module.fit`` takes
    a monitor and installs it)."""

    def __init__(self, interval, stat_func=None, pattern='.*', sort=False, monitor_all=False):
        self.stat_func = stat_func or _root_mean_square
        self.interval = interval
        self.activated = False
        self.queue = []
        self.step = 0
        self.exes = []
        self.re_prog = re.compile(pattern)
        self.sort = sort
        self.monitor_all = monitor_all

    def stat_helper(self, name, array):
        """The executor's callback: record `array` of operator output `name`."""
        if self.activated and self.re_prog.match(name):
            if not isinstance(array, NDArray):
                array = ndarray.array(array)
            self.queue.append((self.step, name, self.stat_func(array)))

    def install(self, exe):
        """Watch executor `exe`."""
        exe.set_monitor_callback(self.stat_helper, self.monitor_all)
        self.exes.append(exe)

    def _wait(self):
        for exe in self.exes:
            for array in list(exe.arg_arrays) + list(exe.aux_arrays):
                array.wait_to_read()

    def tic(self):
        """Start a batch: collect during it when it is one of every `interval`."""
        if self.step % self.interval == 0:
            self._wait()
            self.queue = []
            self.activated = True
        self.step += 1

    def toc(self):
        """End the batch: the statistics collected, and those of the weights and auxiliary
        states, as (step, name, text) with each value written out."""
        if not self.activated:
            return []
        self._wait()
        for exe in self.exes:
            named = list(zip(exe._symbol.list_arguments(), exe.arg_arrays))
            named += list(zip(exe._symbol.list_auxiliary_states(), exe.aux_arrays))
            self.queue += [(self.step, name, self.stat_func(array)) for name, array in named
                           if self.re_prog.match(name)]
        self.activated = False
        if self.sort:
            self.queue.sort(key=lambda entry: entry[1])
        found = [(step, name, _text(values)) for step, name, values in self.queue]
        self.queue = []
        return found

    def toc_print(self):
        """End the batch and log the statistics at INFO level."""
        for step, name, text in self.toc():
            logging.info('Batch: %7d %-30s %s', step, name, text)


def _text(values):
    values = values if isinstance(values, list) else [values]
    parts = []
    for value in values:
        if not isinstance(value, NDArray):
            raise TypeError(f'Monitor: stat_func returned {type(value).__name__}; expected an '
                            'NDArray or a list of them')
        parts.append(str(value.asscalar()) if value.shape == (1,) else str(value.asnumpy()))
    return ''.join(part + '\t' for part in parts)
