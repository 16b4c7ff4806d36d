"""Make an image list of a folder, or pack the images of a list into RecordIO (MXNet's im2rec).

``ember im2rec PREFIX ROOT --list [--recursive]`` writes ``PREFIX.lst`` (lines
``index<TAB>label...<TAB>path``; with ``--recursive`` each sub-folder is a class).
``ember im2rec PREFIX ROOT`` packs every ``PREFIX*.lst`` into ``.rec`` and ``.idx`` files beside
it: images re-encoded (``--encoding``, ``--quality``, optionally ``--resize`` of the short edge
and ``--center-crop``) or stored as they are (``--pass-through``), on ``--num-thread``
threads. The files are byte for byte what MXNet's ``tools/im2rec.py`` writes from the same list.
An image that cannot be read is reported by name and skipped, or stops the run with
``--on-error stop``.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

NAME = 'im2rec'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('prefix', help='prefix of the .lst files to read or write')
    parser.add_argument('root', help='the folder that holds the images')
    listing = parser.add_argument_group('making an image list')
    listing.add_argument('--list', action='store_true',
                         help='write PREFIX.lst from the images under ROOT')
    listing.add_argument('--exts', nargs='+', default=['.jpeg', '.jpg', '.png'],
                         help='image file extensions to list')
    listing.add_argument('--chunks', type=int, default=1, help='number of lists to write')
    listing.add_argument('--train-ratio', type=float, default=1.0,
                         help='share of the images in the _train list')
    listing.add_argument('--test-ratio', type=float, default=0,
                         help='share of the images in the _test list')
    listing.add_argument('--recursive', action='store_true',
                         help='walk sub-folders, one label per folder (else only ROOT, label 0)')
    listing.add_argument('--no-shuffle', dest='shuffle', action='store_false',
                         help='keep the images in file order (else shuffled with seed 100)')
    packing = parser.add_argument_group('packing a list into a .rec file')
    packing.add_argument('--pass-through', action='store_true',
                         help='store the image files as they are')
    packing.add_argument('--resize', type=int, default=0,
                         help='resize the shorter edge to this many pixels')
    packing.add_argument('--center-crop', action='store_true',
                         help='crop the centred square first')
    packing.add_argument('--quality', type=int, default=95,
                         help='JPEG quality 1-100, or PNG compression level 0-9')
    packing.add_argument('--num-thread', type=int, default=1,
                         help='threads that decode and encode (the order stays the list\'s)')
    packing.add_argument('--color', type=int, default=1, choices=[-1, 0, 1],
                         help='1 colour, 0 gray, -1 as stored (alpha kept)')
    packing.add_argument('--encoding', default='.jpg', choices=['.jpg', '.png'],
                         help='the format images are encoded in')
    packing.add_argument('--pack-label', action='store_true',
                         help='store every label of a line (else the first)')
    packing.add_argument('--on-error', choices=['skip', 'stop'], default='skip',
                         help='an unreadable image: report and skip it, or stop')
    packing.add_argument('--no-progress', dest='progress', action='store_false',
                         help='print no progress bar')


# ----------------------------------------------------------------------------------------------
# Lists

def list_images(root, recursive, exts):
    """(index, path relative to root, label) of every image, in MXNet's order."""
    index = 0
    if not recursive:
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isfile(path) and os.path.splitext(name)[1].lower() in exts:
                yield index, os.path.relpath(path, root), 0
                index += 1
        return
    classes = {}
    for folder, subfolders, files in os.walk(root, followlinks=True):
        subfolders.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and os.path.splitext(name)[1].lower() in exts:
                classes.setdefault(folder, len(classes))
                yield index, os.path.relpath(path, root), classes[folder]
                index += 1
    for folder, label in sorted(classes.items(), key=lambda item: item[1]):
        print(os.path.relpath(folder, root), label)


def write_list(path, items):
    with open(path, 'w') as out:
        for item in items:
            labels = ''.join(f'{label:f}\t' for label in item[2:])
            out.write(f'{item[0]:d}\t{labels}{item[1]}\n')


def make_lists(args):
    items = list(list_images(args.root, args.recursive, [e.lower() for e in args.exts]))
    if args.shuffle:
        random.seed(100)
        random.shuffle(items)
    chunk_size = (len(items) + args.chunks - 1) // args.chunks
    for chunk_index in range(args.chunks):
        chunk = items[chunk_index * chunk_size:(chunk_index + 1) * chunk_size]
        suffix = f'_{chunk_index}' if args.chunks > 1 else ''
        train = int(chunk_size * args.train_ratio)
        test = int(chunk_size * args.test_ratio)
        if args.train_ratio == 1.0:
            write_list(f'{args.prefix}{suffix}.lst', chunk)
            continue
        if args.test_ratio:
            write_list(f'{args.prefix}{suffix}_test.lst', chunk[:test])
        if args.train_ratio + args.test_ratio < 1.0:
            write_list(f'{args.prefix}{suffix}_val.lst', chunk[test + train:])
        write_list(f'{args.prefix}{suffix}_train.lst', chunk[test:test + train])
    return 0


def read_list(path):
    """[index, path, label, ...] of each well-formed line; a bad line is reported."""
    items = []
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            fields = [field.strip() for field in line.strip().split('\t')]
            try:
                if len(fields) < 3:
                    raise ValueError('a line needs an index, a label and a path')
                items.append([int(fields[0]), fields[-1]] + [float(f) for f in fields[1:-1]])
            except ValueError as exc:
                print(f'im2rec: {path} line {number}: {exc}; skipped', file=sys.stderr)
    return items


# ----------------------------------------------------------------------------------------------
# Records

class ImageError(Exception):
    """An image that cannot be read or encoded."""


def encode(args, item):
    """The record of one list item."""
    from ember.backend import imaging
    from ember.io import recordio
    label = item[2:] if len(item) > 3 and args.pack_label else item[2]
    header = recordio.IRHeader(0, label, item[0], 0)
    path = os.path.join(args.root, item[1])
    try:
        with open(path, 'rb') as file:
            raw = file.read()
        if args.pass_through:
            return recordio.pack(header, raw)
        image = imaging.decode(raw, args.color, to_rgb=False)
    except (OSError, imaging.ImageDecodeError) as exc:
        raise ImageError(f'{path}: {exc}') from None
    image = _resized(_cropped(image, args.center_crop), args.resize)
    return recordio.pack_img(header, image[:, :, 0] if image.shape[2] == 1 else image,
                             quality=args.quality, img_fmt=args.encoding)


def _cropped(image, center_crop):
    if not center_crop:
        return image
    rows, cols = image.shape[:2]
    if rows > cols:
        margin = (rows - cols) // 2
        return image[margin:margin + cols]
    margin = (cols - rows) // 2
    return image[:, margin:margin + rows]


def _resized(image, resize):
    from ember.backend import imaging
    if not resize:
        return image
    rows, cols = image.shape[:2]
    if rows > cols:
        width, height = resize, rows * resize // cols
    else:
        width, height = cols * resize // rows, resize
    return imaging.resize(image, width, height, 1)


def pack_list(args, list_path, working_dir):
    """Write the .rec and .idx of one list; returns the number of images that failed."""
    from ember.io import recordio
    items = read_list(list_path)
    stem = os.path.splitext(os.path.basename(list_path))[0]
    writer = recordio.MXIndexedRecordIO(os.path.join(working_dir, stem + '.idx'),
                                        os.path.join(working_dir, stem + '.rec'), 'w')
    progress = _Progress(len(items), stem, args.progress)
    failed = 0
    try:
        with ThreadPoolExecutor(max(1, args.num_thread)) as pool:
            for item, record in zip(items, pool.map(lambda it: _try_encode(args, it), items)):
                if isinstance(record, ImageError):
                    failed += 1
                    print(f'\nim2rec: cannot read image {record}', file=sys.stderr)
                    if args.on_error == 'stop':
                        raise record
                else:
                    writer.write_idx(item[0], record)
                progress.step()
    finally:
        writer.close()
        progress.finish()
    return failed


def _try_encode(args, item):
    try:
        return encode(args, item)
    except ImageError as exc:
        return exc


class _Progress:
    """A one-line bar on a terminal; a line every 1000 images elsewhere."""

    def __init__(self, total, name, enabled):
        self.total, self.name, self.done = total, name, 0
        self.enabled = enabled
        self.terminal = sys.stderr.isatty()
        self.start = self.shown = time.perf_counter()

    def step(self):
        self.done += 1
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.terminal and (now - self.shown > 0.1 or self.done == self.total):
            self.shown = now
            sys.stderr.write('\r' + self._line(now))
            sys.stderr.flush()
        elif not self.terminal and self.done % 1000 == 0:
            print(self._line(now), file=sys.stderr)

    def _line(self, now):
        share = self.done / max(self.total, 1)
        bar = '=' * int(30 * share)
        rate = self.done / max(now - self.start, 1e-9)
        return (f'im2rec {self.name}: [{bar:<30}] {self.done}/{self.total} images '
                f'({rate:.0f}/s)')

    def finish(self):
        if self.enabled and self.terminal:
            sys.stderr.write('\n')


def run(args: argparse.Namespace) -> int:
    args.prefix = os.path.abspath(args.prefix)
    args.root = os.path.abspath(args.root)
    if args.list:
        return make_lists(args)
    working_dir = args.prefix if os.path.isdir(args.prefix) else os.path.dirname(args.prefix)
    lists = sorted(os.path.join(working_dir, name) for name in os.listdir(working_dir)
                   if os.path.join(working_dir, name).startswith(args.prefix)
                   and name.endswith('.lst'))
    if not lists:
        print(f'im2rec: no list file {args.prefix}*.lst; make one with --list',
              file=sys.stderr)
        return 1
    failed = 0
    for list_path in lists:
        print(f'im2rec: packing {list_path}', file=sys.stderr)
        try:
            failed += pack_list(args, list_path, working_dir)
        except ImageError:
            print('im2rec: stopped (--on-error stop)', file=sys.stderr)
            return 1
    if failed:
        print(f'im2rec: skipped {failed} image(s) that could not be read', file=sys.stderr)
    return 0


def main(argv=None) -> int:
    """Run as a script (``python im2rec.py PREFIX ROOT ...``), as MXNet's tools/im2rec.py."""
    parser = argparse.ArgumentParser(prog='im2rec.py', description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == '__main__':
    sys.exit(main())
