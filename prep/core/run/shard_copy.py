"""Copying a shard's planned records from the spill files, for beam_jobs/write.py. No Beam.

Each record is a (spill, offset, length) range of a spill file, with a kept image read from the source
again (`spill.read_record`) and a renumbered label re-framed (`relabel_framed`). A kept image's spilled
bytes usually come with its planned entry (`PlannedEntry.rest`, chunk_spill.read_rests), so that the
writer reads no spill file for it: one request per record otherwise, as records of a shard come from
every chunk. Entries are read in
blocks (`blocks`) on the writer's pool while it writes and hashes the ones before (`copy_records`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
from collections.abc import Iterable, Sequence
from typing import BinaryIO, TypeVar

from prep.core import storage
from prep.core.formats import ShardWriter
from prep.core.run.checkpoints import PlannedEntry
from prep.core.run.spill import read_record
from prep.core.schema import relabel, relabelled_size
from prep.core.tfrecord import FOOTER, HEADER, frame
from prep.core.workdir import WorkDir

# Entries are read in blocks of about _BLOCK bytes (at least one record each).
# At most _AHEAD blocks wait to be written and _AHEAD more to be hashed, so a
# part in flight holds about (2 * _AHEAD + 1) * _BLOCK bytes (docs/design.md).
_BLOCK = 512 * 1024
_AHEAD = 2


_R = TypeVar("_R", bound=PlannedEntry)


class _SpillReader:
    """Reads (spill, offset, length) ranges from spill files, keeping a few open."""

    def __init__(self, work: WorkDir) -> None:
        self._work = work
        self._handles: collections.OrderedDict[str, BinaryIO] = collections.OrderedDict()

    def read_batch(self, entries: Iterable[PlannedEntry], source: str) -> list[bytes]:
        """The entries' framed records, in pieces to join; images left in the source are read
        from it (`spill.read_record`)."""
        out: list[bytes] = []
        for entry in entries:
            spilled = entry.rest or self._read(entry)
            pieces = read_record(source, entry.source, spilled, entry.cut, entry.image)
            if entry.relabel >= 0:
                pieces = [relabel_framed(b"".join(pieces), entry)]
            out.extend(pieces)
        return out

    def _read(self, entry: PlannedEntry) -> bytes:
        """The entry's spilled bytes from its spill file (those the planner did not carry: `Entry.rest`)."""
        path = self._work.spill(entry.spill)
        handle = self._handles.pop(path, None) or storage.open_read(path)
        self._handles[path] = handle
        if len(self._handles) > 8:
            self._handles.popitem(last=False)[1].close()
        handle.seek(entry.offset)
        spilled = storage.read_exact(handle, entry.length - entry.image)
        if len(spilled) != entry.length - entry.image:
            raise OSError(f"spill file {path} is shorter than planned")
        return spilled

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()


def written_size(entry: PlannedEntry) -> int:
    """Bytes of the entry's framed record as written: prepared, or renumbered (`Entry.relabel`)."""
    if entry.relabel < 0:
        return entry.length
    data = entry.length - HEADER - FOOTER
    return relabelled_size(data, entry.label, entry.relabel) + HEADER + FOOTER


def relabel_framed(framed: bytes, entry: PlannedEntry) -> bytes:
    """The framed record with the label id `entry.relabel` instead of the one it was prepared with.

    Its framing was checked when the image was read from the source again; a
    converted record's came from our own spill file.
    """
    record = frame(relabel(framed[HEADER : len(framed) - FOOTER], entry.relabel))
    if len(record) != written_size(entry):
        raise RuntimeError(
            f"internal error: a renumbered record has {len(record)} bytes, not the {written_size(entry)} planned"
        )
    return record


def copy_records(
    entries: Sequence[PlannedEntry], out: ShardWriter, work: WorkDir, source: str, pool: concurrent.futures.Executor
) -> tuple[int, str]:
    """Writes the entries' framed records to `out` (a format's writer, `prep.core.formats`) in order;
    returns the framed stream's (bytes, sha256), which a TFRecord shard's file is.

    Three things overlap, all outside the GIL for large buffers: batches are
    read ahead on `pool` threads, this thread writes them, and one hashing
    thread updates the SHA-256 in order. At most `_AHEAD` blocks wait on each
    side, so memory is bounded by a few blocks, not by the shard's size.
    """
    digest, size = hashlib.sha256(), 0
    batches = blocks(entries, _BLOCK)

    def read(batch: list[PlannedEntry]) -> bytes:
        reader = _SpillReader(work)
        try:
            return b"".join(reader.read_batch(batch, source))
        finally:
            reader.close()

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sha256") as hasher:
        reading: collections.deque[concurrent.futures.Future[bytes]] = collections.deque()
        hashing: collections.deque[concurrent.futures.Future[None]] = collections.deque()
        for i, batch in enumerate(batches):
            reading.append(pool.submit(read, batch))
            last = i == len(batches) - 1
            while reading and (len(reading) > _AHEAD or last):
                block = reading.popleft().result()
                out.write(block)
                hashing.append(hasher.submit(digest.update, block))
                size += len(block)
                while len(hashing) > _AHEAD:
                    hashing.popleft().result()
    return size, digest.hexdigest()


def blocks(entries: Iterable[_R], limit: int) -> list[list[_R]]:
    """`entries` cut in order into lists of at most `limit` framed bytes (at least one entry each)."""
    out: list[list[_R]] = []
    current: list[_R] = []
    size = 0
    for entry in entries:
        if current and size + entry.length > limit:
            out.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry.length
    if current:
        out.append(current)
    return out
