"""RecordIO files (MXNet's ``mx.recordio``): sequences of binary records, optionally indexed.

Each record is stored as the magic word ``0xced7230a``, a word holding a continuation flag (top
3 bits) and a length (low 29 bits), the bytes, and zero padding to a multiple of 4, all words
little-endian (dmlc-core's format). A record containing the magic word at a 4-byte-aligned
offset is split there into parts (flag 1 first, 2 middle, 3 last) and the reader puts the
magic word back, so a reader can always find the start of a record.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), 'data.rec')
>>> writer = MXRecordIO(path, 'w')
>>> writer.write(b'first')
>>> writer.write(pack(IRHeader(0, 3.0, 7, 0), b'image bytes'))
>>> writer.close()
>>> reader = MXRecordIO(path, 'r')
>>> reader.read()
b'first'
>>> header, payload = unpack(reader.read())
>>> header.label, header.id, payload
(3.0, 7, b'image bytes')
>>> reader.read() is None
True
"""
from __future__ import annotations

import numbers
import os
import struct
from collections import namedtuple

import numpy as np

from ember.backend import imaging
from ember.base import EmberError

__all__ = ['MXRecordIO', 'MXIndexedRecordIO', 'IRHeader', 'pack', 'unpack', 'pack_img',
           'unpack_img', 'RecordFile', 'RecordIOError', 'read_index']


class RecordIOError(EmberError):
    """A RecordIO file or its index is missing, cut short or not in the format."""


class MissingFileError(RecordIOError, FileNotFoundError):
    """A RecordIO file or index that does not exist."""


def _open_file(path, mode, what):
    try:
        return open(path, mode)
    except FileNotFoundError:
        raise MissingFileError(f'{what}: no such file {path!r}') from None
    except IsADirectoryError:
        raise RecordIOError(f'{what}: {path!r} is a directory, not a file') from None

MAGIC = 0xced7230a
_MAGIC_BYTES = struct.pack('<I', MAGIC)
_LENGTH_BITS = 29
_MAX_LENGTH = (1 << _LENGTH_BITS) - 1
_WHOLE, _FIRST, _MIDDLE, _LAST = 0, 1, 2, 3


def _round_up_to_word(n):
    return (n + 3) & ~3


def _encode_parts(record):
    """The (flag, bytes) parts of `record`, split at each 4-byte-aligned magic word."""
    parts, start = [], 0
    aligned_end = len(record) & ~3
    found = record.find(_MAGIC_BYTES)
    while 0 <= found < aligned_end:
        if found % 4 == 0:
            parts.append((_FIRST if start == 0 else _MIDDLE, record[start:found]))
            start = found + 4
        found = record.find(_MAGIC_BYTES, found + 1)
    parts.append((_WHOLE if start == 0 else _LAST, record[start:]))
    return parts


class MXRecordIO:
    """Reads (``flag='r'``) or writes (``flag='w'``) a RecordIO file, one record at a time.

    A reader used in a forked process reopens the file there; a writer refuses (two processes
    would interleave their records). An unpickled copy reopens the file by name.
    """

    def __init__(self, uri, flag):
        if flag not in ('r', 'w'):
            raise ValueError(f"MXRecordIO: flag={flag!r}: expected 'r' (read) or 'w' (write)")
        self.uri = os.fspath(uri)
        self.flag = flag
        self.writable = flag == 'w'
        self.is_open = False
        self.pid = None
        self.handle = None
        self.open()

    def open(self):
        """Open the file: a writer truncates it, a reader starts at its first record."""
        self.handle = _open_file(self.uri, 'wb' if self.writable else 'rb', 'MXRecordIO')
        self.pid = os.getpid()
        self.is_open = True

    def close(self):
        """Close the file (again a no-op)."""
        if not self.is_open:
            return
        self.handle.close()
        self.is_open = False
        self.pid = None

    def reset(self):
        """Close and reopen: a reader goes back to the first record."""
        self.close()
        self.open()

    def __del__(self):
        if getattr(self, 'is_open', False):
            self.close()

    def __getstate__(self):
        # the copy reopens the file by name; the original keeps its handle and position
        return dict(self.__dict__, handle=None)

    def __setstate__(self, state):
        self.__dict__.update(state, is_open=False)
        if state['is_open']:
            self.open()

    def _check_pid(self, allow_reset):
        if self.pid == os.getpid():
            return
        if not allow_reset:
            raise EmberError(f'MXRecordIO: {self.uri!r} was opened for writing in another '
                             f'process; open a writer in the process that writes')
        self.reset()

    def _check_mode(self, writing):
        if not self.is_open:
            raise EmberError(f'MXRecordIO: {self.uri!r} is closed; call open() or reset()')
        if writing != self.writable:
            raise EmberError(f'MXRecordIO: {self.uri!r} was opened with flag={self.flag!r}; '
                             f"{'writing' if writing else 'reading'} needs "
                             f"flag={'w' if writing else 'r'!r}")

    def write(self, buf):
        """Append one record (bytes of fewer than 2**29)."""
        self._check_mode(writing=True)
        self._check_pid(allow_reset=False)
        record = bytes(buf)
        if len(record) > _MAX_LENGTH:
            raise ValueError(f'MXRecordIO.write: a record of {len(record)} bytes; RecordIO '
                             f'holds records of at most {_MAX_LENGTH} bytes')
        for flag, part in _encode_parts(record):
            word = (flag << _LENGTH_BITS) | len(part)
            self.handle.write(_MAGIC_BYTES + struct.pack('<I', word) + part)
        self.handle.write(b'\0' * (_round_up_to_word(len(record)) - len(record)))

    def read(self):
        """The next record as bytes, or None at the end of the file."""
        self._check_mode(writing=False)
        self._check_pid(allow_reset=True)
        pieces = []
        while True:
            flag, part = self._read_part(first=not pieces)
            if flag is None:
                return None
            pieces.append(part)
            if flag in (_WHOLE, _LAST):
                return _MAGIC_BYTES.join(pieces)

    def _read_part(self, first):
        offset = self.handle.tell()
        header = self.handle.read(8)
        if not header and first:
            return None, None
        if len(header) != 8:
            raise _cut_short(self.uri, offset)
        flag, length = _part_header(self.uri, header, offset)
        body = self.handle.read(_round_up_to_word(length))
        if len(body) != _round_up_to_word(length):
            raise _cut_short(self.uri, offset)
        return flag, body[:length]


def _cut_short(uri, offset):
    return RecordIOError(f'MXRecordIO: {uri!r} ends inside a record at byte {offset} (the '
                         f'file is truncated or the offset is not a record start)')


def _part_header(uri, header, offset):
    """(continuation flag, length) of a record part's 8-byte header at `offset`."""
    magic, word = struct.unpack('<II', header)
    if magic != MAGIC:
        raise RecordIOError(f'MXRecordIO: {uri!r} is not a RecordIO file: found '
                            f'0x{magic:08x} at byte {offset} where 0x{MAGIC:08x} belongs')
    return word >> _LENGTH_BITS, word & _MAX_LENGTH


class MXIndexedRecordIO(MXRecordIO):
    """A RecordIO file with an index file (lines ``key\\tbyte offset``) for random access.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> idx, rec = os.path.join(folder, 'd.idx'), os.path.join(folder, 'd.rec')
    >>> writer = MXIndexedRecordIO(idx, rec, 'w')
    >>> for key in (5, 9):
    ...     writer.write_idx(key, b'record %d' % key)
    >>> writer.close()
    >>> reader = MXIndexedRecordIO(idx, rec, 'r')
    >>> reader.keys, reader.read_idx(9), reader.read_idx(5)
    ([5, 9], b'record 9', b'record 5')
    """

    def __init__(self, idx_path, uri, flag, key_type=int):
        self.idx_path = os.fspath(idx_path)
        self.idx = {}
        self.keys = []
        self.key_type = key_type
        self.fidx = None
        super().__init__(uri, flag)

    def open(self):
        super().open()
        self.idx = {}
        self.keys = []
        self.fidx = _open_file(self.idx_path, self.flag, 'MXIndexedRecordIO')
        if not self.writable:
            for key, offset in read_index(self.idx_path, self.key_type, self.fidx):
                self.idx[key] = offset
                self.keys.append(key)

    def close(self):
        if not self.is_open:
            return
        super().close()
        self.fidx.close()

    def __getstate__(self):
        state = super().__getstate__()
        state['fidx'] = None
        return state

    def seek(self, idx):
        """Move the reader to the record of key `idx`."""
        self._check_mode(writing=False)
        self._check_pid(allow_reset=True)
        if idx not in self.idx:
            raise KeyError(f'MXIndexedRecordIO: no record with key {idx!r} in '
                           f'{self.idx_path!r}')
        self.handle.seek(self.idx[idx])

    def tell(self):
        """The writer's byte offset, where the next record starts."""
        self._check_mode(writing=True)
        return self.handle.tell()

    def read_idx(self, idx):
        """The record of key `idx`."""
        self.seek(idx)
        try:
            record = self.read()
        except RecordIOError as exc:
            raise RecordIOError(f'{exc}; reading the record of key {idx!r}, which '
                                f'{self.idx_path!r} puts at byte {self.idx[idx]}') from None
        if record is None:
            raise RecordIOError(f'MXIndexedRecordIO: {self.idx_path!r} puts the record of key '
                                f'{idx!r} at byte {self.idx[idx]}, past the end of '
                                f'{self.uri!r} ({os.path.getsize(self.uri)} bytes)')
        return record

    def write_idx(self, idx, buf):
        """Append a record under key `idx` and index it."""
        key = self.key_type(idx)
        position = self.tell()
        self.write(buf)
        self.fidx.write(f'{key}\t{position}\n')
        self.idx[key] = position
        self.keys.append(key)


def read_index(idx_path, key_type=int, lines=None):
    """[(key, byte offset)] of an index file (lines ``key<TAB>offset``), in its order."""
    entries = []
    if lines is None:
        with _open_file(idx_path, 'r', 'read_index') as file:
            return read_index(idx_path, key_type, file)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.strip().split('\t')
        try:
            entries.append((key_type(fields[0]), int(fields[1])))
            if len(fields) != 2 or entries[-1][1] < 0:
                raise ValueError
        except (ValueError, IndexError):
            raise RecordIOError(f'MXIndexedRecordIO: {idx_path!r} line {number}: expected '
                                f"'key<TAB>byte offset', got {line.rstrip()!r}") from None
    return entries


class RecordFile:
    """Random access to the records of a RecordIO file by byte offset, for any number of
    threads and forked processes at once (``os.pread``: no shared file position).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), 'r.rec')
    >>> writer = MXRecordIO(path, 'w')
    >>> for record in (b'one', b'two'):
    ...     writer.write(record)
    >>> writer.close()
    >>> records = RecordFile(path)
    >>> offsets = records.offsets()
    >>> offsets, records.read_at(offsets[1])
    ([0, 12], b'two')
    """

    def __init__(self, uri):
        self.uri = os.fspath(uri)
        self._fd = None
        self._open()

    def _open(self):
        try:
            self._fd = os.open(self.uri, os.O_RDONLY)
        except FileNotFoundError:
            raise MissingFileError(f'RecordIO: no such file {self.uri!r}') from None
        except IsADirectoryError:
            raise RecordIOError(f'RecordIO: {self.uri!r} is a directory, not a file') from None
        self.size = os.fstat(self._fd).st_size

    def __getstate__(self):
        return {'uri': self.uri}

    def __setstate__(self, state):
        self.uri = state['uri']
        self._open()

    def __del__(self):
        if getattr(self, '_fd', None) is not None:
            os.close(self._fd)
            self._fd = None

    def _read(self, offset, count):
        data = os.pread(self._fd, count, offset)
        if len(data) != count:
            raise _cut_short(self.uri, offset)
        return data

    def read_at(self, offset):
        """The record that starts at byte `offset`."""
        return self.read_with_end(offset)[0]

    def read_with_end(self, offset):
        """(the record at `offset`, the offset just past it)."""
        if offset >= self.size:
            raise RecordIOError(f'RecordIO: {self.uri!r} has {self.size} bytes; no record '
                                f'starts at byte {offset}')
        pieces = []
        while True:
            flag, length = _part_header(self.uri, self._read(offset, 8), offset)
            pieces.append(self._read(offset + 8, length))
            offset += 8 + _round_up_to_word(length)
            if flag in (_WHOLE, _LAST):
                return _MAGIC_BYTES.join(pieces), offset

    def offsets(self):
        """The byte offset of every record, in file order (reads each part's header)."""
        found, offset = [], 0
        while offset < self.size:
            start = offset
            while True:
                flag, length = _part_header(self.uri, self._read(offset, 8), offset)
                offset += 8 + _round_up_to_word(length)
                if offset > self.size:
                    raise _cut_short(self.uri, start)
                if flag in (_WHOLE, _LAST):
                    break
            found.append(start)
        return found


IRHeader = namedtuple('HEADER', ['flag', 'label', 'id', 'id2'])
IRHeader.__doc__ = """The header of an image record: ``flag`` (the number of float32 labels
stored after the header, 0 for one scalar label), ``label``, ``id`` and ``id2``."""

_IR_FORMAT = 'IfQQ'
_IR_SIZE = struct.calcsize(_IR_FORMAT)


def pack(header, s):
    """A record of `header` (an IRHeader or a 4-tuple) and the bytes `s`; a label that is an
    array is stored as float32 values after the header.

    >>> header, payload = unpack(pack(IRHeader(0, [1, 2], 3, 0), b'x'))
    >>> header.flag, header.label.tolist(), payload
    (2, [1.0, 2.0], b'x')
    """
    header = IRHeader(*header)
    if isinstance(header.label, numbers.Number):
        header = header._replace(flag=0)
    else:
        label = np.asarray(header.label, dtype=np.float32)
        header = header._replace(flag=label.size, label=0)
        s = label.tobytes() + s
    return struct.pack(_IR_FORMAT, *header) + s


def unpack(s):
    """``(IRHeader, payload)`` of a record made by :func:`pack`."""
    if len(s) < _IR_SIZE:
        raise EmberError(f'recordio.unpack: a record of {len(s)} bytes is shorter than its '
                         f'{_IR_SIZE}-byte header')
    header = IRHeader(*struct.unpack(_IR_FORMAT, s[:_IR_SIZE]))
    s = s[_IR_SIZE:]
    if header.flag > 0:
        header = header._replace(label=np.frombuffer(s, np.float32, header.flag))
        s = s[header.flag * 4:]
    return header, s


def pack_img(header, img, quality=95, img_fmt='.jpg'):
    """A record of `header` and the image `img` (OpenCV's BGR, or gray), encoded as `img_fmt`
    ('.jpg' with JPEG `quality` 1-100, or '.png' with compression level `quality` 0-9).

    >>> import numpy as np
    >>> image = np.full((4, 5, 3), 50, np.uint8)
    >>> header, decoded = unpack_img(pack_img(IRHeader(0, 1.0, 2, 0), image, 3, '.png'))
    >>> header.label, decoded.shape, int(decoded.max())
    (1.0, (4, 5, 3), 50)
    """
    return pack(header, imaging.encode(np.asarray(img), img_fmt, quality))


def unpack_img(s, iscolor=-1):
    """``(IRHeader, image)`` of a record made by :func:`pack_img`: the image as OpenCV reads
    it (BGR; 2-D when gray), `iscolor` as OpenCV's flag (-1 unchanged, 0 gray, 1 colour)."""
    header, payload = unpack(s)
    try:
        image = imaging.decode(payload, iscolor, to_rgb=False)
    except imaging.ImageDecodeError as exc:
        raise imaging.ImageDecodeError(f'unpack_img: the record of id {header.id}: {exc}') \
            from None
    return header, image[:, :, 0] if image.shape[2] == 1 else image
