"""Images per second of the performance guide's networks, scoring (score) and training (train).

``ember bench score`` is MXNet's ``benchmark_score.py`` on Gluon: each network comes from the
model zoo with random weights, is hybridized with static memory and shapes, and scores random
batches in prediction mode: warm-up batches first, then timed batches, each waited for. The
table has one row per batch size and one column per network, as in MXNet's performance guide.
``ember bench train`` times training steps on synthetic data (softmax cross-entropy, SGD with
momentum 0.9) and reports the peak memory of the process and of the storage pool.

    python -m ember bench score --network resnet-50 --batch-size 1,8,32
    python -m ember bench score --network all --json
    python -m ember bench score --network alexnet,vgg-16 --plot speed.png
    python -m ember bench train --network resnet-50 --batch-size 16 --batches 10

Networks: alexnet, vgg-16, inception-bn, inception-v3 (299x299 images), resnet-50 and
resnet-152, or their model-zoo names (alexnet, vgg16, inceptionbn, inceptionv3, resnet50_v1,
resnet152_v1). Images per second = batch size x timed batches / their seconds. Progress goes to
stderr (a bar on a terminal, else one line per cell); ``--json`` prints one JSON document on
stdout and nothing else. ``--plot`` needs matplotlib: ``pip install 'ember[plot]'``.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import gc
import importlib.util
import json
import sys
import textwrap
import time
from dataclasses import dataclass
from typing import Any, Callable

NAME = 'bench'
DTYPES = ('float32', 'float16', 'bfloat16')
DEVICES = ('cpu', 'gpu')
SGD_SETTINGS = {'learning_rate': 0.01, 'momentum': 0.9, 'wd': 1e-4}
SCORE_HELP = ('Inference: images per second of each network and batch size, as MXNet\'s '
              'benchmark_score.py measures them.')
TRAIN_HELP = ('Training: images per second of SGD steps with momentum on synthetic data, and '
              'the peak memory.')
PLOT_HINT = "install the plot extra: pip install 'ember[plot]'"


@dataclass(frozen=True)
class Network:
    """A network to measure: its name in the guide, its column title, the model-zoo network it
    is built from and the size of its square input images."""

    name: str
    title: str
    zoo_name: str
    image_size: int = 224
    classes: int = 1000
    factory: Callable[[int], Any] | None = None   # classes -> block; None: the model zoo

    def build(self):
        """A new, uninitialized block of this network."""
        if self.factory is not None:
            return self.factory(self.classes)
        from ember.gluon.model_zoo import vision
        return vision.get_model(self.zoo_name, classes=self.classes)


# The columns of the guide's tables, in its order; 'all' means every entry.
NETWORKS = {network.name: network for network in (
    Network('alexnet', 'Alexnet', 'alexnet'),
    Network('vgg-16', 'VGG 16', 'vgg16'),
    Network('inception-bn', 'Inception-BN', 'inceptionbn'),
    Network('inception-v3', 'Inception-v3', 'inceptionv3', image_size=299),
    Network('resnet-50', 'Resnet 50', 'resnet50_v1'),
    Network('resnet-152', 'Resnet 152', 'resnet152_v1'),
)}


@dataclass(frozen=True)
class Cell:
    """One measurement: `batches` timed batches of `batch_size` images took `seconds`."""

    network: str
    batch_size: int
    batches: int
    seconds: float

    @property
    def images_per_second(self) -> float:
        return self.batch_size * self.batches / self.seconds

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), 'images_per_second': self.images_per_second}


# ----------------------------------------------------------------------------------------------
# Reading the arguments.

def accepted_names() -> list[str]:
    """Every name ``--network`` accepts: the guide's names, then the model-zoo names."""
    guide = list(NETWORKS)
    return guide + [n.zoo_name for n in NETWORKS.values() if n.zoo_name not in guide]


def find_network(name: str) -> Network:
    """The network called `name` in the guide or in the model zoo.

    >>> find_network('resnet50_v1').name
    'resnet-50'
    >>> find_network('resnet-51')
    Traceback (most recent call last):
    ...
    ValueError: unknown network 'resnet-51'; did you mean 'resnet-50'? Accepted: all, ...
    """
    key = name.strip().lower()
    for network in NETWORKS.values():
        if key in (network.name, network.zoo_name):
            return network
    close = difflib.get_close_matches(key, accepted_names(), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ';'
    raise ValueError(f'unknown network {name!r}{hint} Accepted: all, '
                     + ', '.join(accepted_names()))


def parse_networks(text: str) -> tuple[Network, ...]:
    """Networks named in `text`, separated by commas; 'all' is every column of the guide.

    >>> [n.zoo_name for n in parse_networks('resnet-50,alexnet,resnet50_v1')]
    ['resnet50_v1', 'alexnet']
    """
    found: dict[str, Network] = {}
    for name in (part for part in text.split(',') if part.strip()):
        chosen = NETWORKS.values() if name.strip().lower() == 'all' else [find_network(name)]
        found.update((network.name, network) for network in chosen)
    if not found:
        raise ValueError(f'no network in {text!r}; accepted: all, ' + ', '.join(accepted_names()))
    return tuple(found.values())


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """Positive batch sizes separated by commas.

    >>> parse_batch_sizes('1,8,32')
    (1, 8, 32)
    >>> parse_batch_sizes('8,0')
    Traceback (most recent call last):
    ...
    ValueError: batch size '0' in '8,0': expected positive integers separated by commas, e.g. 1,8,32
    """
    sizes = []
    for part in text.split(','):
        value = part.strip()
        if not value.isdigit() or int(value) < 1:
            where = '' if value == text else f' in {text!r}'
            raise ValueError(f'batch size {value!r}{where}: expected positive integers '
                             'separated by commas, e.g. 1,8,32')
        sizes.append(int(value))
    return tuple(dict.fromkeys(sizes))


def parse_dtype(text: str) -> str:
    """One of DTYPES, with a suggestion for a near miss."""
    if text in DTYPES:
        return text
    close = difflib.get_close_matches(text, DTYPES, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ''
    raise ValueError(f'dtype {text!r}: expected {", ".join(DTYPES)}{hint}')


def parse_plot_path(text: str) -> str:
    """The picture's path; matplotlib must be importable, so that a long run does not end in
    an import error."""
    if importlib.util.find_spec('matplotlib') is None:
        raise ValueError(f'--plot {text}: matplotlib is not installed; {PLOT_HINT}')
    return text


def _count(low: int):
    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < low:
            raise ValueError(f'{text!r}: expected an integer >= {low}')
        return int(text)
    return parse


def _argument_type(parse):
    """`parse` for argparse: its ValueError becomes argparse's error (exit status 2)."""
    def convert(text):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = parse.__name__
    return convert


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest='action', metavar='ACTION', required=True)
    score = actions.add_parser('score', help=SCORE_HELP, description=SCORE_HELP)
    _add_common(score, network='all', batch_sizes='1,8,32')
    score.add_argument('--dtype', type=_argument_type(parse_dtype), default='float32',
                       help=f'precision of weights and data: {", ".join(DTYPES)} '
                            '(default float32)')
    train = actions.add_parser('train', help=TRAIN_HELP, description=TRAIN_HELP)
    _add_common(train, network='resnet-50', batch_sizes='16')


def _add_common(parser: argparse.ArgumentParser, network: str, batch_sizes: str) -> None:
    parser.add_argument('--network', type=_argument_type(parse_networks),
                        default=parse_networks(network), metavar='NAME[,NAME...]|all',
                        help=f'networks to measure (default {network}): all, '
                             + ', '.join(accepted_names()))
    parser.add_argument('--batch-size', type=_argument_type(parse_batch_sizes),
                        default=parse_batch_sizes(batch_sizes), metavar='N[,N...]',
                        help=f'batch sizes, the rows of the table (default {batch_sizes})')
    parser.add_argument('--batches', type=_argument_type(_count(1)), default=10,
                        help='timed batches per cell (default 10)')
    parser.add_argument('--warmup', type=_argument_type(_count(0)), default=2,
                        help='untimed batches before them (default 2)')
    parser.add_argument('--device', choices=DEVICES, default='cpu',
                        help='cpu, or gpu for mx.gpu(0) (default cpu)')
    parser.add_argument('--json', action='store_true',
                        help='print one JSON document on stdout instead of the table')
    parser.add_argument('--plot', type=_argument_type(parse_plot_path), metavar='PATH',
                        help='draw the table as a bar chart into PATH (needs matplotlib: '
                             "pip install 'ember[plot]')")


# ----------------------------------------------------------------------------------------------
# Measuring.

def prepare(network: Network, dtype: str = 'float32', device=None):
    """`network` with random weights, cast to `dtype`, hybridized with static memory."""
    import ember as mx
    net = network.build()
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=device)
    if dtype != 'float32':
        net.cast(dtype)
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def random_batch(network: Network, batch_size: int, dtype: str = 'float32', device=None):
    """Uniform random images in [-1, 1) of `network`'s input shape."""
    import ember as mx
    size = network.image_size
    data = mx.nd.random.uniform(-1, 1, shape=(batch_size, 3, size, size), ctx=device)
    return data if dtype == 'float32' else data.astype(dtype)


def time_batches(step: Callable[[], None], network: Network, batch_size: int, batches: int,
                 warmup: int, on_batch: Callable[[str], None] | None = None, *,
                 clock: Callable[[], float] = time.perf_counter) -> Cell:
    """Run `step` `warmup` times, then time `batches` runs of it; `on_batch` hears of each."""
    label = f'{network.name} batch {batch_size}'
    notify = on_batch or (lambda _label: None)
    for _ in range(warmup):
        step()
        notify(label + ' (warm-up)')
    start = clock()
    for _ in range(batches):
        step()
        notify(label)
    return Cell(network.name, batch_size, batches, clock() - start)


def score_cell(net, network: Network, batch_size: int, dtype: str = 'float32', batches: int = 10,
               warmup: int = 2, device=None, on_batch=None) -> Cell:
    """Inference speed of the prepared `net` on random batches of `batch_size`.

    >>> from ember.gluon import nn
    >>> tiny = Network('tiny', 'Tiny', 'tiny', image_size=8, classes=4,
    ...                factory=lambda classes: nn.Dense(classes))
    >>> cell = score_cell(prepare(tiny), tiny, batch_size=2, batches=3, warmup=1)
    >>> (cell.network, cell.batch_size, cell.batches, cell.images_per_second > 0)
    ('tiny', 2, 3, True)
    """
    from ember import autograd
    data = random_batch(network, batch_size, dtype, device)

    def step():
        with autograd.predict_mode():
            net(data).wait_to_read()
    return time_batches(step, network, batch_size, batches, warmup, on_batch)


def train_cell(net, network: Network, batch_size: int, batches: int = 10, warmup: int = 2,
               device=None, on_batch=None) -> Cell:
    """Training speed of the prepared `net`: forward, softmax cross-entropy, backward and an
    SGD step with momentum per batch of synthetic images and labels."""
    import numpy as np

    import ember as mx
    from ember import autograd, gluon
    data = random_batch(network, batch_size, 'float32', device)
    labels = np.random.default_rng(0).integers(0, network.classes, batch_size)
    label = mx.nd.array(labels, ctx=device)
    trainer = gluon.Trainer(net.collect_params(), 'sgd', dict(SGD_SETTINGS))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(batch_size)
        mx.nd.waitall()
    return time_batches(step, network, batch_size, batches, warmup, on_batch)


def peak_memory(device) -> dict:
    """Peak resident memory of the process and peak bytes in use in `device`'s storage pool,
    in MiB (None where the pool keeps no peak)."""
    import resource

    from ember import storage
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = rss if sys.platform == 'darwin' else rss * 1024
    pool_peak = storage.manager(device).stats().get('peak')
    return {'peak_rss_mb': round(rss_bytes / 2**20, 1),
            'pool_peak_mb': None if pool_peak is None else round(pool_peak / 2**20, 1)}


# ----------------------------------------------------------------------------------------------
# Progress on stderr.

class Progress:
    """A bar redrawn after every batch when `stream` is a terminal; one line per finished cell
    in any case."""

    WIDTH = 30

    def __init__(self, total_batches: int, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.total = max(1, total_batches)
        self.done = 0
        self.bar = self.stream.isatty()
        self.start = time.perf_counter()

    def batch(self, label: str) -> None:
        self.done += 1
        if self.bar:
            filled = self.WIDTH * min(self.done, self.total) // self.total
            elapsed = time.perf_counter() - self.start
            self.stream.write(f'\r[{"#" * filled}{"." * (self.WIDTH - filled)}] '
                              f'{self.done}/{self.total} batches {elapsed:6.0f} s  {label}\033[K')
            self.stream.flush()

    def cell(self, cell: Cell) -> None:
        self._clear()
        self.stream.write(f'{cell.network} batch {cell.batch_size}: '
                          f'{cell.images_per_second:.2f} img/s '
                          f'({cell.batches} batches in {cell.seconds:.2f} s)\n')
        self.stream.flush()

    def close(self) -> None:
        self._clear()
        self.stream.flush()

    def _clear(self) -> None:
        if self.bar:
            self.stream.write('\r\033[K')


# ----------------------------------------------------------------------------------------------
# Output.

def render_table(cells: list[Cell], networks, batch_sizes) -> str:
    """The guide's table: one row per batch size, one column per network ('-': not measured).

    >>> net = NETWORKS['resnet-50']
    >>> print(render_table([Cell('resnet-50', 8, 10, 4.0)], [net], [1, 8]))
    | Batch | Resnet 50 |
    |-------|-----------|
    | 1     | -         |
    | 8     | 20.00     |
    """
    speeds = {(c.network, c.batch_size): c.images_per_second for c in cells}
    columns = []
    for network in networks:
        texts = [_speed_text(speeds.get((network.name, batch))) for batch in batch_sizes]
        columns.append((network.title, texts, max(len(network.title), *map(len, texts))))
    lines = ['| Batch | ' + ' | '.join(f'{t:<{w}}' for t, _, w in columns) + ' |',
             '|-------|' + '|'.join('-' * (w + 2) for _, _, w in columns) + '|']
    for row, batch in enumerate(batch_sizes):
        lines.append(f'| {batch:<5} | ' + ' | '.join(f'{texts[row]:<{w}}'
                                                    for _, texts, w in columns) + ' |')
    return '\n'.join(lines)


def _speed_text(speed: float | None) -> str:
    return '-' if speed is None else f'{speed:.2f}'


def setting(device) -> dict:
    """What the numbers depend on: Ember's version, device, engine, kernels and threads."""
    import ember
    from ember import config, engine
    from ember.op.nn import onednn_provider
    return {'ember': ember.__version__, 'device': str(device),
            'engine': config.get('MXNET_ENGINE_TYPE'),
            'kernels': 'onednn' if onednn_provider.enabled() else 'numpy',
            'cores': config.cpu_count(), 'kernel_threads': engine.kernel_threads()}


def _setting_text(report: dict) -> str:
    return (f"Ember {report['ember']} on {report['device']}: {report['engine']}, "
            f"{report['kernels']} kernels, {report['kernel_threads']} kernel threads of "
            f"{report['cores']} cores, {report['dtype']}; {report['warmup']} warm-up and "
            f"{report['batches']} timed batches per cell")


def plot(cells: list[Cell], networks, batch_sizes, path: str, title: str) -> None:
    """A bar chart of the table in `path`: one group of bars per network, one bar per batch
    size."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise RuntimeError(f'--plot {path}: cannot import matplotlib ({exc}); {PLOT_HINT}') \
            from None
    speeds = {(c.network, c.batch_size): c.images_per_second for c in cells}
    figure = Figure(figsize=(max(6.0, 1.6 * len(networks)), 4.5), layout='constrained')
    axes = figure.subplots()
    width = 0.8 / len(batch_sizes)
    for i, batch in enumerate(batch_sizes):
        heights = [speeds.get((network.name, batch), 0.0) for network in networks]
        offsets = [n + (i - (len(batch_sizes) - 1) / 2) * width for n in range(len(networks))]
        bars = axes.bar(offsets, heights, width, label=f'batch {batch}')
        axes.bar_label(bars, fmt='%.1f', fontsize=7)
    axes.set_xticks(range(len(networks)), [network.title for network in networks])
    axes.set_ylabel('images / second')
    axes.set_title(title, fontsize=8)
    axes.margins(y=0.12)     # room for the values above the bars
    axes.legend()
    figure.savefig(path, dpi=120)


# ----------------------------------------------------------------------------------------------
# The commands.

def run(args: argparse.Namespace) -> int:
    device = _device(args.device)
    if device is None:
        print(f'ember bench {args.action}: --device gpu: no GPU is visible to Ember '
              '(CuPy and an NVIDIA GPU are needed); use --device cpu', file=sys.stderr)
        return 2
    dtype = getattr(args, 'dtype', 'float32')
    progress = Progress(len(args.network) * len(args.batch_size) * (args.warmup + args.batches))
    cells, status = _measure_all(args, dtype, device, progress)
    progress.close()
    if status == 1:
        return status
    report = {'command': args.action, **setting(device), 'dtype': dtype, 'warmup': args.warmup,
              'batches': args.batches, 'results': [cell.as_dict() for cell in cells],
              **peak_memory(device)}
    if args.action == 'train':
        report['optimizer'] = {'name': 'sgd', **SGD_SETTINGS}
    _print_report(report, cells, args)
    if args.plot and cells:
        title = f'{_title(args)}\n' + textwrap.fill(_setting_text(report), 90)
        plot(cells, args.network, args.batch_size, args.plot, title)
        print(f'wrote {args.plot}', file=sys.stderr)
    return status


def _device(kind: str):
    import ember as mx
    from ember import backend
    if kind == 'gpu':
        return mx.gpu(0) if backend.num_gpus() > 0 else None
    return mx.cpu()


def _measure_all(args, dtype: str, device, progress: Progress) -> tuple[list[Cell], int]:
    """Every cell, network by network; status 1 when a network fails in a reduced precision
    (an error then names it), 130 when interrupted (the cells so far are kept)."""
    cells: list[Cell] = []
    for network in args.network:
        try:
            _measure_network(args, network, dtype, device, progress, cells)
        except KeyboardInterrupt:
            return cells, 130
        except Exception as exc:  # noqa: BLE001 - a float32 failure is a bug: re-raised below
            if dtype == 'float32':
                raise
            progress.close()
            print(f'ember bench {args.action}: {network.name} did not run in {dtype}: {exc}\n'
                  f'Accepted dtypes are {", ".join(DTYPES)}; float32 runs every network.',
                  file=sys.stderr)
            return cells, 1
    return cells, 0


def _measure_network(args, network: Network, dtype: str, device, progress,
                     cells: list[Cell]) -> None:
    """Append a cell per batch size to `cells` (which keeps them when interrupted)."""
    net = prepare(network, dtype, device)
    for batch in args.batch_size:
        if args.action == 'score':
            cell = score_cell(net, network, batch, dtype, args.batches, args.warmup, device,
                              progress.batch)
        else:
            cell = train_cell(net, network, batch, args.batches, args.warmup, device,
                              progress.batch)
        progress.cell(cell)
        cells.append(cell)
    del net
    gc.collect()        # the next network should not find this one's memory still held
    device.empty_cache()


def _title(args) -> str:
    return ('Inference' if args.action == 'score' else 'Training') + ', images per second'


def _print_report(report: dict, cells: list[Cell], args) -> None:
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f'{_title(args)}. {_setting_text(report)}\n')
    print(render_table(cells, args.network, args.batch_size))
    pool = report['pool_peak_mb']
    pool_text = '' if pool is None else f", storage pool {pool:.1f} MB"
    print(f"\nPeak memory: process RSS {report['peak_rss_mb']:.1f} MB{pool_text}")
