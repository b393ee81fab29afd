"""A chunk's one spill file and its in-flight record: written by PrepareChunk's batches, read back in bulk.

Every batch of a chunk (prep/core/run/spill.py, `prepare_batch`) hands its spilled bytes to the chunk's
`ChunkSpill`, which appends them in batch order as they come, so that a chunk makes one upload, not one
per batch of `workdir.BATCH` inputs: on an object store each file costs requests (docs/benchmarks.md).
A batch's references hold offsets from the start of its own bytes; `ChunkSpill.close` gives each batch's
start in the file, and PrepareChunk records offsets from the file's start.

A kept image's spilled bytes (its framed record around the image, `spill.read_and_prepare`) are small;
the planner reads a chunk's at once (`read_rests`) and carries them with the planned entries, so the
shard writer reads no spill file for them.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import BinaryIO, Protocol

from prep.core import storage
from prep.core.workdir import WorkDir, spill_id

# A kept image's spilled bytes go with its planned entry up to this size; a larger one (a detection
# record of many objects, a segmentation mask) is read from the spill file by the shard writer.
INLINE_LIMIT = 4096
# Ranges of one spill file closer than this are read in one request, the bytes between them discarded.
_GAP = 256 * 1024


class ChunkSpill:
    """The spill file of chunk `chunk`, written by its `batches` batches' tasks in batch order.

    `put` may be called from any thread, in any order; bytes wait only until the batches before
    them are in, so memory holds at most what the pool prepared out of order. The file is written
    under a temporary name of its own and renamed by `close`, on an object store too (two requests a
    chunk): an upload given up after an error may still appear whole, and under the final name that
    of a failed attempt could replace another attempt's complete file.
    """

    def __init__(self, work: WorkDir, chunk: int, batches: int):
        self.path = work.spill(spill_id(chunk, 0))
        self._target = storage.temp_path(self.path)
        self._batches = batches
        self._lock = threading.Lock()
        self._waiting: dict[int, bytes] = {}
        self._next = 0
        self._starts: list[int] = []
        self._size = 0
        self._out: BinaryIO | None = None
        self._aborted = False

    def put(self, batch: int, data: bytes) -> None:
        """Batch `batch`'s spilled bytes; written once every batch before it is."""
        with self._lock:
            if self._aborted:
                return  # a batch still running when another failed: its chunk will be prepared again
            self._waiting[batch] = data
            while self._next in self._waiting:
                piece = self._waiting.pop(self._next)
                if self._out is None:
                    self._out = storage.open_write(self._target)
                self._out.write(piece)
                self._starts.append(self._size)
                self._size += len(piece)
                self._next += 1

    def close(self) -> tuple[list[int], int]:
        """Completes the file once every batch is in; returns (each batch's start in it, its size)."""
        with self._lock:
            if self._next != self._batches:
                raise RuntimeError(f"internal error: {self._next} of {self._batches} batches spilled to {self.path}")
            out = self._out if self._out is not None else storage.open_write(self._target)
            self._out = None
        out.close()
        storage.rename(self._target, self.path)
        return self._starts, self._size

    def abort(self) -> None:
        """Gives the file up (a batch failed): its temporary file is deleted."""
        with self._lock:
            out, self._out, self._aborted = self._out, None, True
        if out is not None:
            out.close()
        storage.delete_file(self._target)


def mark_in_flight(work: WorkDir, chunk: int, paths: list[str]) -> None:
    """Records the chunk's inputs as being read (`WorkDir.in_flight`), until `unmark_in_flight`."""
    path, data = work.in_flight(chunk), json.dumps(paths).encode()
    if storage.is_remote(path):
        storage.write_atomic(path, data)
        return
    # Locally with bare system calls: storage's general path costs several times more (docs/design.md).
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.part"  # a runner may run two attempts at once
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def unmark_in_flight(work: WorkDir, chunk: int) -> None:
    """Deletes the chunk's in-flight record (another attempt at the chunk may have done so first)."""
    storage.delete_file(work.in_flight(chunk))


class Spilled(Protocol):
    """Where a prepared record waits (a PreparedRef): `length - image` bytes at `offset` of spill `spill`."""

    @property
    def spill(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def image(self) -> int: ...


def read_rests(work: WorkDir, refs: Sequence[Spilled]) -> list[bytes]:
    """The spilled bytes of each kept image of `refs` (image > 0) up to `INLINE_LIMIT`, else b"".

    Ranges of a spill file closer than `_GAP` are read in one request: a chunk of kept images
    alone is one ranged read however many records it holds.
    """
    out = [b""] * len(refs)
    wanted: dict[str, list[tuple[int, int, int]]] = {}  # path -> [(offset, length, ref)]
    paths: dict[int, str] = {}  # by spill id: a path built once a batch, not once a reference
    for i, r in enumerate(refs):
        size = r.length - r.image
        if r.image and size <= INLINE_LIMIT:
            if r.spill not in paths:
                paths[r.spill] = work.spill(r.spill)
            path = paths[r.spill]
            wanted.setdefault(path, []).append((r.offset, size, i))
    for path, ranges in wanted.items():
        ranges.sort()
        with storage.open_read(path) as f:
            start = 0
            while start < len(ranges):
                end, stop = start, ranges[start][0] + ranges[start][1]
                while end + 1 < len(ranges) and ranges[end + 1][0] - stop <= _GAP:
                    end += 1
                    stop = max(stop, ranges[end][0] + ranges[end][1])
                base = ranges[start][0]
                f.seek(base)
                data = storage.read_exact(f, stop - base)
                if len(data) != stop - base:
                    raise OSError(f"spill file {path} is shorter than its chunk's index says")
                for offset, size, i in ranges[start : end + 1]:
                    out[i] = data[offset - base : offset - base + size]
                start = end + 1
    return out
