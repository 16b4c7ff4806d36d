"""The compile cache on disk: entries published atomically, a lock per key, LRU eviction.

Layout under the root (``--cache_dir``, else NEURON_COMPILE_CACHE_URL, else
``neuron-compile-cache`` under MXNET_HOME)::

    entries/<digest>/payload     the artefact (or, for a cached failure, its error as JSON)
    entries/<digest>/meta.json   the key's parts and what helps a person read the entry
    entries/<digest>/READY       the marker: the payload's kind and SHA-256, written last
    entries/<digest>/hits        one byte per load; its modification time is the last use
    locks/<digest>.lock          who compiles the key now: pid, host, the pid's start time
    pending/<digest>.pkl         graphs recorded by NEURON_EXTRACT_GRAPHS_ONLY
    tmp/                         entries being written

Publishing writes the payload and meta into ``tmp/``, renames that folder into
``entries/`` and only then writes the marker (itself through a temporary name and a rename).
A reader trusts an entry whose marker is there and whose payload has the marker's digest, so a
process killed at any point of a write (``kill -9``) leaves nothing a later process loads: a
folder without its marker is removed by the next process that compiles the key.

A compiler takes ``locks/<digest>.lock`` (created exclusively) before compiling; the others
wait for the entry to appear or for the lock to go. A lock whose holder is dead (on this
host: no such pid, or a pid started at another time) is reclaimed; a lock of another host is
waited for.

>>> import tempfile
>>> store = Store(tempfile.mkdtemp())
>>> store.lookup('d1') is None
True
>>> store.publish('d1', 'artefact', b'compiled', {'key': {}})
>>> entry = store.lookup('d1')
>>> entry.kind, entry.payload
('artefact', b'compiled')
>>> [info.digest for info in store.entries()], store.total_bytes() > 0
(['d1'], True)
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ['Store', 'Entry', 'EntryInfo', 'LockHolder']

_log = logging.getLogger('ember.compiler')

KINDS = ('artefact', 'failure')
_MARKER, _PAYLOAD, _META, _HITS = 'READY', 'payload', 'meta.json', 'hits'
_PARTIAL_LOCK_SECONDS = 5.0     # a lock file left empty this long: its writer died
_POLL_FIRST, _POLL_MOST = 0.02, 0.5


@dataclass(frozen=True)
class Entry:
    """A trusted entry: `kind` ('artefact' or 'failure'), its `payload` and `meta`."""
    digest: str
    kind: str
    payload: bytes
    meta: dict


@dataclass(frozen=True)
class EntryInfo:
    """One folder of ``entries/`` as ``cache ls`` shows it."""
    digest: str
    kind: str | None        # None: not trusted (no marker, or a payload that does not match)
    size: int
    created: float
    last_used: float
    hits: int
    meta: dict


@dataclass(frozen=True)
class LockHolder:
    """Who holds a key's lock."""
    pid: int
    host: str
    start: str
    nonce: str
    since: float


class Store:
    """The cache under `root`; `size_limit` bytes (None: no limit) are kept by evicting the
    least recently used entries after each publication."""

    def __init__(self, root, size_limit=None):
        self.root = Path(root)
        self.size_limit = size_limit
        for part in ('entries', 'locks', 'pending', 'tmp'):
            (self.root / part).mkdir(parents=True, exist_ok=True)

    # -- reading ---------------------------------------------------------------------------------
    def folder(self, digest: str) -> Path:
        return self.root / 'entries' / digest

    def lookup(self, digest: str) -> Entry | None:
        """The trusted entry of `digest`, else None."""
        folder = self.folder(digest)
        try:
            marker = json.loads((folder / _MARKER).read_text())
            payload = (folder / _PAYLOAD).read_bytes()
            meta = json.loads((folder / _META).read_text())
        except (OSError, ValueError):
            return None
        if marker.get('kind') not in KINDS or marker.get('sha256') != _sha(payload):
            return None
        return Entry(digest, marker['kind'], payload, meta)

    def record_hit(self, digest: str) -> None:
        """Count a load of `digest` (and mark it used now, for LRU eviction)."""
        with contextlib.suppress(OSError):
            with open(self.folder(digest) / _HITS, 'ab') as hits:
                hits.write(b'.')

    def entries(self) -> list:
        """Every folder of ``entries/``, least recently used first."""
        found = []
        for folder in (self.root / 'entries').iterdir():
            info = self._info(folder)
            if info is not None:
                found.append(info)
        return sorted(found, key=lambda info: info.last_used)

    def _info(self, folder: Path) -> EntryInfo | None:
        entry = self.lookup(folder.name)
        try:
            stats = [p.stat() for p in folder.iterdir()]
            created = folder.stat().st_mtime
        except OSError:
            return None
        hits = folder / _HITS
        last_used = hits.stat().st_mtime if hits.exists() else created
        meta = entry.meta if entry is not None else _read_json(folder / _META)
        return EntryInfo(folder.name, None if entry is None else entry.kind,
                         sum(s.st_size for s in stats), created, last_used,
                         hits.stat().st_size if hits.exists() else 0, meta)

    def total_bytes(self) -> int:
        return sum(info.size for info in self.entries())

    # -- writing ---------------------------------------------------------------------------------
    def publish(self, digest: str, kind: str, payload: bytes, meta: dict) -> None:
        """Make `payload` the entry of `digest`: written aside, renamed into place, marked."""
        if kind not in KINDS:
            raise ValueError(f'entry kind {kind!r}: expected one of {", ".join(KINDS)}')
        self._sweep_tmp()
        staging = self.root / 'tmp' / f'{digest}.{os.getpid()}.{secrets.token_hex(4)}'
        staging.mkdir()
        (staging / _PAYLOAD).write_bytes(payload)
        (staging / _META).write_text(json.dumps(meta, sort_keys=True, default=str))
        folder = self.folder(digest)
        if folder.exists():
            self.remove(digest)           # untrusted leftovers, or a failure compiled again
        try:
            os.rename(staging, folder)
        except OSError:                   # another process published it meanwhile
            shutil.rmtree(staging, ignore_errors=True)
            return
        marker = folder / f'{_MARKER}.{os.getpid()}.tmp'
        marker.write_text(json.dumps({'kind': kind, 'sha256': _sha(payload)}))
        os.rename(marker, folder / _MARKER)
        if self.size_limit is not None:
            self.prune(self.size_limit, keep=digest)

    def remove(self, digest: str) -> None:
        """Remove an entry: renamed away first, so no reader sees half of it."""
        trash = self.root / 'tmp' / f'trash.{digest}.{os.getpid()}.{secrets.token_hex(4)}'
        try:
            os.rename(self.folder(digest), trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def prune(self, limit: int, keep: str | None = None) -> list:
        """Evict the least recently used entries (untrusted ones first) until the cache holds
        at most `limit` bytes; returns the digests removed."""
        infos = self.entries()
        infos.sort(key=lambda info: (info.kind is not None, info.last_used))
        total, removed = sum(info.size for info in infos), []
        for info in infos:
            if total <= limit:
                break
            if info.digest == keep:
                continue
            self.remove(info.digest)
            total -= info.size
            removed.append(info.digest)
        return removed

    def clear(self) -> int:
        """Remove every entry, pending graph and leftover; returns the entries removed."""
        count = 0
        for folder in list((self.root / 'entries').iterdir()):
            self.remove(folder.name)
            count += 1
        for part in ('pending', 'tmp'):
            for path in (self.root / part).iterdir():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        return count

    def _sweep_tmp(self) -> None:
        """Remove what writers of this host that died left in ``tmp/``."""
        for path in (self.root / 'tmp').iterdir():
            parts = path.name.split('.')
            pid = next((int(p) for p in parts[1:] if p.isdigit()), None)
            if pid is not None and pid != os.getpid() and not _alive(pid):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)

    # -- pending graphs --------------------------------------------------------------------------
    def add_pending(self, digest: str, record: bytes) -> Path:
        path = self.root / 'pending' / f'{digest}.pkl'
        staging = self.root / 'tmp' / f'pending.{digest}.{os.getpid()}.{secrets.token_hex(4)}'
        staging.write_bytes(record)
        os.rename(staging, path)
        return path

    def pending(self) -> list:
        """Paths of the recorded graphs, oldest first."""
        return sorted((self.root / 'pending').glob('*.pkl'), key=lambda p: p.stat().st_mtime)

    # -- locks -----------------------------------------------------------------------------------
    def lock_path(self, digest: str) -> Path:
        return self.root / 'locks' / f'{digest}.lock'

    def acquire(self, digest: str, ready=None, on_wait=None):
        """Take the lock of `digest`: returns a :class:`Lock` (release it when done), or,
        when `ready()` gives something while waiting (the entry another process published),
        that instead. `on_wait(holder)` is called once when the lock is held by another."""
        path, delay, told = self.lock_path(digest), _POLL_FIRST, False
        while True:
            lock = _try_create(path)
            if lock is not None:
                return lock
            found = ready() if ready is not None else None
            if found is not None:
                return found
            holder = read_holder(path)
            if _is_stale(path, holder):
                _reclaim(path, holder)
                continue
            if not told and on_wait is not None and holder is not None:
                on_wait(holder)
                told = True
            time.sleep(delay)
            delay = min(delay * 2, _POLL_MOST)


class Lock:
    """A lock file this process created; :meth:`release` removes it if it is still ours."""

    def __init__(self, path: Path, nonce: str):
        self.path, self.nonce = path, nonce

    def release(self) -> None:
        holder = read_holder(self.path)
        if holder is not None and holder.nonce == self.nonce:
            self.path.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


def _try_create(path: Path) -> Lock | None:
    nonce = secrets.token_hex(8)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return None
    with os.fdopen(fd, 'w') as out:
        json.dump({'pid': os.getpid(), 'host': _host(), 'start': _start_time(os.getpid()),
                   'nonce': nonce, 'since': time.time()}, out)
    return Lock(path, nonce)


def read_holder(path: Path) -> LockHolder | None:
    """Who holds the lock at `path` (None: no lock, or one still being written)."""
    try:
        raw = json.loads(path.read_text())
        return LockHolder(int(raw['pid']), str(raw['host']), str(raw['start']),
                          str(raw['nonce']), float(raw['since']))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _is_stale(path: Path, holder: LockHolder | None) -> bool:
    if holder is None:
        try:
            return time.time() - path.stat().st_mtime > _PARTIAL_LOCK_SECONDS
        except OSError:
            return False        # gone: the next try takes it
    if holder.host != _host():
        return False            # nothing tells whether a process of another host lives
    return not _alive(holder.pid) or _start_time(holder.pid) != holder.start


def _reclaim(path: Path, holder: LockHolder | None) -> None:
    """Remove a dead holder's lock; if it turns out to be a live newcomer's (taken between
    the check and the rename), put it back."""
    aside = path.with_name(f'{path.name}.stale.{os.getpid()}.{secrets.token_hex(4)}')
    try:
        os.rename(path, aside)
    except OSError:
        return                  # someone else reclaimed it
    moved = read_holder(aside)
    if holder is not None and moved is not None and moved.nonce != holder.nonce:
        with contextlib.suppress(OSError):
            os.link(aside, path)
    _log.info('compile cache: reclaimed the lock of a dead compiler (%s)',
              'pid %d on %s' % (holder.pid, holder.host) if holder else 'never written')
    aside.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_time(pid: int) -> str:
    """When `pid` started (clock ticks since boot), '' where /proc does not say."""
    try:
        stat = Path(f'/proc/{pid}/stat').read_text()
    except OSError:
        return ''
    return stat.rpartition(')')[2].split()[19]


def _host() -> str:
    return os.uname().nodename


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
