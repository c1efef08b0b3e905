"""Run stores: where flushed tuples live, as sorted runs per relation and partition.

R_i^disk[j] is a sequence of **runs**: each flush batch is one run, each PSMJ merge writes
one run per side.  A run is immutable once committed, sorted on (key, ats), and read
front to back - exactly what a disk (or Redis) is good at.  Which runs pair up for
duplicate avoidance is the algorithm's business (:mod:`.disk`), not the store's.

Implementations: :class:`MemoryRunStore` (the simulator; runs are Python tuples, read
without copying) and :class:`PagedRunStore`, which encodes pages and keeps them in a
:class:`PageBackend` - :class:`FilePages` (one file per run, one JSON page per line,
:class:`FileRunStore`) or ``joinlib.adapters.progressive_redis.RedisPages`` (one Redis list
of pages per run).  All pass ``tests/conformance/test_run_store.py``.
"""
from __future__ import annotations

import abc
import operator
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import IO, Any, Optional, Protocol

import orjson

from joinlib.errors import JoinlibError
from joinlib.progressive.model import DiskTuple


class RunOrderError(ValueError):
    """A run's tuples are not strictly increasing in (key, ats) (or mix int and str keys)."""


class SpillError(JoinlibError):
    """The spill location cannot be used (bad URL, unwritable directory)."""


class RunWriter(Protocol):
    def add(self, tuples: Iterable[DiskTuple]) -> None: ...

    def commit(self) -> int: ...

    def abort(self) -> None: ...


class RunStore(Protocol):
    """Sorted runs per (relation, partition); run ids increase in creation order."""

    in_memory: bool
    """True when :meth:`load_run` costs nothing (runs already are Python sequences)."""

    def writer(self, rel: int, part: int) -> RunWriter: ...

    def write_run(self, rel: int, part: int, tuples: Iterable[DiskTuple]) -> int: ...

    def read_run(self, rel: int, part: int, run: int) -> Iterator[DiskTuple]: ...

    def load_run(self, rel: int, part: int, run: int) -> Sequence[DiskTuple]: ...

    def run_ids(self, rel: int, part: int) -> list[int]: ...

    def run_size(self, rel: int, part: int, run: int) -> int: ...

    def delete_run(self, rel: int, part: int, run: int) -> None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- shared pieces

def check_sorted(chunk: Sequence[DiskTuple], before: Optional[DiskTuple] = None) -> None:
    """Raise :class:`RunOrderError` unless (key, ats) strictly increases through ``before`` + chunk."""
    if not chunk:
        return
    keys = [(t[0], t[1]) for t in chunk]
    if before is not None:
        keys.insert(0, (before[0], before[1]))
    try:
        ok = all(map(operator.lt, keys, islice(keys, 1, None)))
    except TypeError:
        ok = False
    if not ok:
        raise RunOrderError("run tuples must strictly increase in (key, ats), with keys all int or all str")


def encode_page(tuples: Sequence[DiskTuple]) -> bytes:
    """One page as a JSON array of [key, ats, id, dts] (keys and ids keep int / str)."""
    return orjson.dumps([tuple(t) for t in tuples])  # orjson does not take NamedTuples


def decode_page(data: bytes | str) -> list[DiskTuple]:
    rows: list[list[Any]] = orjson.loads(data)
    return [DiskTuple(*r) for r in rows]


class PagedWriter(abc.ABC):
    """Checks the order, cuts pages of ``page_tuples`` tuples and hands them to ``_page``."""

    def __init__(self, page_tuples: int) -> None:
        self.page_tuples = page_tuples
        self.count = 0
        self._buf: list[DiskTuple] = []
        self._last: Optional[DiskTuple] = None
        self._done = False

    def add(self, tuples: Iterable[DiskTuple]) -> None:
        chunk = tuples if isinstance(tuples, (list, tuple)) else list(tuples)
        if self._done:
            raise RuntimeError("run already committed or aborted")
        check_sorted(chunk, self._last)
        if chunk:
            self._last = chunk[-1]
            self.count += len(chunk)
            self._buf.extend(chunk)
            while len(self._buf) >= self.page_tuples:
                self._page(self._buf[:self.page_tuples])
                del self._buf[:self.page_tuples]

    def commit(self) -> int:
        if self._done:
            raise RuntimeError("run already committed or aborted")
        if self._buf:
            self._page(self._buf)
            self._buf = []
        self._done = True
        return self._commit()

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._abort()

    @abc.abstractmethod
    def _page(self, page: list[DiskTuple]) -> None: ...

    @abc.abstractmethod
    def _commit(self) -> int: ...

    @abc.abstractmethod
    def _abort(self) -> None: ...


def write_all(store: RunStore, rel: int, part: int, tuples: Iterable[DiskTuple]) -> int:
    """``write_run`` for stores built on :meth:`RunStore.writer`: all or nothing."""
    w = store.writer(rel, part)
    try:
        w.add(tuples)
    except BaseException:
        w.abort()
        raise
    return w.commit()


# --------------------------------------------------------------------------- memory

class _MemoryWriter:
    def __init__(self, store: MemoryRunStore, rel: int, part: int) -> None:
        self._store, self._rel, self._part = store, rel, part
        self._tuples: list[DiskTuple] = []
        self._done = False

    def add(self, tuples: Iterable[DiskTuple]) -> None:
        chunk = tuples if isinstance(tuples, (list, tuple)) else list(tuples)
        if self._done:
            raise RuntimeError("run already committed or aborted")
        check_sorted(chunk, self._tuples[-1] if self._tuples else None)
        self._tuples.extend(chunk)

    def commit(self) -> int:
        if self._done:
            raise RuntimeError("run already committed or aborted")
        self._done = True
        return self._store._put(self._rel, self._part, tuple(self._tuples))

    def abort(self) -> None:
        self._done = True


class MemoryRunStore:
    """Runs as tuples in a dict: what the simulator uses (disk cost is charged, not paid)."""

    in_memory = True

    def __init__(self) -> None:
        self._runs: dict[tuple[int, int], dict[int, tuple[DiskTuple, ...]]] = {}
        self._next = 1

    def _put(self, rel: int, part: int, tuples: tuple[DiskTuple, ...]) -> int:
        run, self._next = self._next, self._next + 1
        self._runs.setdefault((rel, part), {})[run] = tuples
        return run

    def writer(self, rel: int, part: int) -> RunWriter:
        return _MemoryWriter(self, rel, part)

    def write_run(self, rel: int, part: int, tuples: Iterable[DiskTuple]) -> int:
        chunk = tuple(tuples)
        check_sorted(chunk)
        return self._put(rel, part, chunk)

    def _get(self, rel: int, part: int, run: int) -> tuple[DiskTuple, ...]:
        try:
            return self._runs[(rel, part)][run]
        except KeyError:
            raise KeyError(f"no run {run} in relation {rel} partition {part}") from None

    def read_run(self, rel: int, part: int, run: int) -> Iterator[DiskTuple]:
        return iter(self._get(rel, part, run))

    def load_run(self, rel: int, part: int, run: int) -> Sequence[DiskTuple]:
        return self._get(rel, part, run)

    def run_ids(self, rel: int, part: int) -> list[int]:
        return sorted(self._runs.get((rel, part), {}))

    def run_size(self, rel: int, part: int, run: int) -> int:
        return len(self._get(rel, part, run))

    def delete_run(self, rel: int, part: int, run: int) -> None:
        self._get(rel, part, run)
        del self._runs[(rel, part)][run]

    def clear(self) -> None:
        self._runs.clear()

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- paged stores

class PageBackend(Protocol):
    """What a spill medium provides: runs as sequences of opaque page blobs, no tuples.
    A run is created for (relation, partition), filled with pages, then committed (visible,
    with its tuple count) or discarded; ids increase in creation order."""

    def create(self, rel: int, part: int) -> int: ...

    def append(self, run: int, pages: list[bytes]) -> None: ...

    def commit(self, run: int, tuples: int) -> None: ...

    def discard(self, run: int) -> None: ...

    def pages(self, rel: int, part: int, run: int) -> Iterator[bytes]: ...

    def runs(self, rel: int, part: int) -> list[int]: ...

    def size(self, rel: int, part: int, run: int) -> int: ...

    def delete(self, rel: int, part: int, run: int) -> None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


class _PagedRunWriter(PagedWriter):
    BATCH = 64  # pages handed to the backend at once

    def __init__(self, backend: PageBackend, page_tuples: int, rel: int, part: int) -> None:
        super().__init__(page_tuples)
        self._backend = backend
        self._run = backend.create(rel, part)
        self._pending: list[bytes] = []

    def _page(self, page: list[DiskTuple]) -> None:
        self._pending.append(encode_page(page))
        if len(self._pending) >= self.BATCH:
            self._backend.append(self._run, self._pending)
            self._pending = []

    def _commit(self) -> int:
        if self._pending:
            self._backend.append(self._run, self._pending)
        self._backend.commit(self._run, self.count)
        return self._run

    def _abort(self) -> None:
        self._backend.discard(self._run)


class PagedRunStore:
    """A :class:`RunStore` over a :class:`PageBackend`: checks the order, cuts and encodes
    pages (JSON arrays of [key, ats, id, dts]), decodes them page by page when read."""

    in_memory = False

    def __init__(self, backend: PageBackend, page_tuples: int = 102) -> None:
        self.backend = backend
        self.page_tuples = page_tuples

    def writer(self, rel: int, part: int) -> RunWriter:
        return _PagedRunWriter(self.backend, self.page_tuples, rel, part)

    def write_run(self, rel: int, part: int, tuples: Iterable[DiskTuple]) -> int:
        return write_all(self, rel, part, tuples)

    def read_run(self, rel: int, part: int, run: int) -> Iterator[DiskTuple]:
        pages = self.backend.pages(rel, part, run)  # KeyError now, not at the first next()
        return (t for page in pages for t in decode_page(page))

    def load_run(self, rel: int, part: int, run: int) -> Sequence[DiskTuple]:
        return list(self.read_run(rel, part, run))

    def run_ids(self, rel: int, part: int) -> list[int]:
        return self.backend.runs(rel, part)

    def run_size(self, rel: int, part: int, run: int) -> int:
        return self.backend.size(rel, part, run)

    def delete_run(self, rel: int, part: int, run: int) -> None:
        self.backend.delete(rel, part, run)

    def clear(self) -> None:
        self.backend.clear()

    def close(self) -> None:
        self.backend.close()


# --------------------------------------------------------------------------- files

_RUN_FILE = re.compile(r"^(\d{10})-(\d+)\.run$")


class FilePages:
    """One file per run under ``root/r<rel>-p<part>/``: ``<id>-<tuples>.run``, one page per
    line, written to ``<id>.tmp`` and renamed on commit.  Re-opening the directory sees the runs."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / ".joinlib-probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise SpillError(f"spill directory {self.root}: not writable ({e.strerror or e})") from None
        self._index: dict[tuple[int, int, int], tuple[Path, int]] = {}
        self._open: dict[int, tuple[int, int, Path, IO[bytes]]] = {}
        self._next = 1
        self._scan()

    def _dir(self, rel: int, part: int) -> Path:
        return self.root / f"r{rel}-p{part}"

    def _scan(self) -> None:
        for d in self.root.glob("r*-p*"):
            m = re.fullmatch(r"r(\d+)-p(\d+)", d.name)
            if not m or not d.is_dir():
                continue
            for f in d.iterdir():
                fm = _RUN_FILE.match(f.name)
                if fm:
                    run = int(fm.group(1))
                    self._index[(int(m.group(1)), int(m.group(2)), run)] = (f, int(fm.group(2)))
                    self._next = max(self._next, run + 1)

    def _entry(self, rel: int, part: int, run: int) -> tuple[Path, int]:
        try:
            return self._index[(rel, part, run)]
        except KeyError:
            raise KeyError(f"no run {run} in relation {rel} partition {part}") from None

    def create(self, rel: int, part: int) -> int:
        run, self._next = self._next, self._next + 1
        d = self._dir(rel, part)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"{run:010d}.tmp"
        self._open[run] = (rel, part, tmp, open(tmp, "wb"))
        return run

    def append(self, run: int, pages: list[bytes]) -> None:
        self._open[run][3].write(b"".join(p + b"\n" for p in pages))

    def commit(self, run: int, tuples: int) -> None:
        rel, part, tmp, fh = self._open.pop(run)
        fh.close()
        final = tmp.with_name(f"{run:010d}-{tuples}.run")
        os.replace(tmp, final)
        self._index[(rel, part, run)] = (final, tuples)

    def discard(self, run: int) -> None:
        _, _, tmp, fh = self._open.pop(run)
        fh.close()
        tmp.unlink(missing_ok=True)

    def pages(self, rel: int, part: int, run: int) -> Iterator[bytes]:
        path, _ = self._entry(rel, part, run)

        def lines() -> Iterator[bytes]:
            with open(path, "rb") as fh:
                yield from fh
        return lines()

    def runs(self, rel: int, part: int) -> list[int]:
        return sorted(r for (i, j, r) in self._index if (i, j) == (rel, part))

    def size(self, rel: int, part: int, run: int) -> int:
        return self._entry(rel, part, run)[1]

    def delete(self, rel: int, part: int, run: int) -> None:
        path, _ = self._entry(rel, part, run)
        path.unlink(missing_ok=True)
        del self._index[(rel, part, run)]

    def clear(self) -> None:
        """Delete every run (and the partition directories, when empty); leaves ``root``."""
        for run in list(self._open):
            self.discard(run)
        for path, _ in self._index.values():
            path.unlink(missing_ok=True)
        self._index.clear()
        for d in self.root.glob("r*-p*"):
            for tmp in d.glob("*.tmp"):
                tmp.unlink(missing_ok=True)
            try:
                d.rmdir()
            except OSError:
                pass

    def close(self) -> None:
        for _, _, _, fh in self._open.values():
            fh.close()


class FileRunStore(PagedRunStore):
    """Runs in files under ``root`` (:class:`FilePages`)."""

    def __init__(self, root: Path | str, page_tuples: int = 102) -> None:
        super().__init__(FilePages(root), page_tuples)
        self.root = Path(root)
