"""Copying a shard's planned records from the spill files, for beam_jobs/write.py. No Beam.

Each record is a (spill, offset, length) range of a spill file, with a kept image read from the source
again and a renumbered label re-framed (`relabel_framed`). Records are put straight into a block's buffer;
a kept image of a local file is read into its place there (`_Source.read_into`), checked by its record's
CRC as `spill.read_record`, which reads any other one, checks it. A kept image's spilled
bytes usually come with its planned entry (`PlannedEntry.rest`, chunk_spill.read_rests), so that the
writer reads no spill file for it. Other records (converted, or spilled whole: a remote or compressed
shard's member) come from every chunk in a random order, so a block's records of one spill file lie far
apart. From a remote work directory, a part's such records are therefore first copied to a local temporary
file, one streamed read per run of a spill file (`_stage`: local disk up to the part's size, the shard's
own size at most; requests per image from tar shards 0.886 -> 0.003, docs/benchmarks.md); from a local one,
each block joins the neighbouring reads it can (`runs`, reading through gaps up to a block's size: a block in
flight holds at most twice its bytes). Entries are read in blocks (`blocks`), written and hashed
(`copy_records`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import itertools
import os
import struct
import sys
import tempfile
from collections.abc import Iterable, Sequence
from typing import BinaryIO, TypeVar

from prep.core import storage
from prep.core.formats import ShardWriter
from prep.core.run.checkpoints import PlannedEntry
from prep.core.run.spill import changed, read_record
from prep.core.schema import relabel, relabelled_size
from prep.core.tfrecord import FOOTER, HEADER, frame, masked_crc32c
from prep.core.workdir import WorkDir

# Entries are read in blocks of about _BLOCK bytes (at least one record each).
# At most _AHEAD blocks wait to be written and _AHEAD more to be hashed, so a
# part in flight holds about (2 * _AHEAD + 1) * _BLOCK bytes (docs/design.md).
_BLOCK = 512 * 1024
_AHEAD = 2
# A part's remote spill reads read through gaps of up to this many times the bytes wanted (`_stage`):
# a shard's records in a chunk's spill file lie between the other shards' (every num_shards-th of a group)
_WASTE = 1


_R = TypeVar("_R", bound=PlannedEntry)
_LENGTH, _CRC = struct.Struct("<Q"), struct.Struct("<I")  # a framed record's length and data CRC


class _SpillReader:
    """Reads (spill, offset, length) ranges from spill files, keeping a few open."""

    def __init__(self, work: WorkDir) -> None:
        self._work = work
        self._handles: collections.OrderedDict[str, BinaryIO] = collections.OrderedDict()

    def fill(
        self, entries: Sequence[PlannedEntry], source: _Source, buffer: bytearray, staged: _Staged | None, first: int
    ) -> int:
        """Puts the entries' framed records in `buffer` from its start, in order; returns their bytes.
        `staged`: the part's spilled bytes, copied (`_stage`), the entries being the part's from `first` on.

        A kept image of a local file is read again straight into its place in `buffer`
        (`_Source.read_into`); any other record is made whole first (`spill.read_record`).
        """
        read = self._read_runs(entries) if staged is None else {}
        view = memoryview(buffer)
        pos = 0
        local, read_into = source.local, source.read_into  # looked up once a block: both threads run this loop
        for i, entry in enumerate(entries):
            spilled = entry.rest or (read[i] if staged is None else staged.read(first + i))
            if entry.image and entry.relabel < 0 and local(entry.source):
                pos = read_into(view, pos, entry, spilled)
                continue
            pieces = read_record(source.name, entry.source, spilled, entry.cut, entry.image)
            record = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if entry.relabel >= 0:
                record = relabel_framed(record, entry)
            view[pos : pos + len(record)] = record
            pos += len(record)
        return pos

    def _read_runs(self, entries: Sequence[PlannedEntry]) -> dict[int, bytes]:
        """The spilled bytes of the entries the planner did not carry them for (`Entry.rest`), by index:
        one ranged read per run of them in one spill file (`runs`), not one each."""
        wanted: dict[str, list[Range]] = {}  # spill file -> its ranges
        if all(entry.rest for entry in entries):
            return {}  # kept images only (pass-through): no spill file to read
        for i, entry in enumerate(entries):
            if not entry.rest:
                path = self._work.spill(entry.spill)
                wanted.setdefault(path, []).append((entry.offset, entry.length - entry.image, i))
        out: dict[int, bytes] = {}
        for path, cut in runs({path: sorted(r) for path, r in wanted.items()}, _BLOCK).items():
            handle = self._handles.pop(path, None) or storage.open_read(path)
            self._handles[path] = handle
            if len(self._handles) > 8:
                self._handles.popitem(last=False)[1].close()
            for run in cut:
                start, end = run[0][0], run[-1][0] + run[-1][1]
                handle.seek(start)
                data = storage.read_exact(handle, end - start)
                if len(data) != end - start:
                    raise OSError(f"spill file {path} is shorter than planned")
                for offset, size, i in run:
                    out[i] = data[offset - start : offset - start + size]
        return out

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
    entries: Sequence[PlannedEntry],
    out: ShardWriter,
    work: WorkDir,
    source: str,
    pool: concurrent.futures.Executor | None = None,
) -> tuple[int, str]:
    """Writes the entries' framed records to `out` (a format's writer, `prep.core.formats`) in order;
    returns the framed stream's (bytes, sha256), which a TFRecord shard's file is.

    Without `pool`, this thread reads, writes and hashes each block in turn: the writer gives a
    part to each of its threads when it has as many parts as cores (beam_jobs/write.py), and then
    a hand-off between threads costs CPU and overlaps nothing that the other parts' threads do not
    (docs/benchmarks.md, "The write stage"). With `pool` (fewer parts than cores), three things
    overlap, all outside the GIL for large buffers: blocks are read ahead on `pool` threads, this
    thread writes them, and one hashing thread updates the SHA-256 in order. At most `_AHEAD`
    blocks wait on each side, so memory is bounded by a few blocks, not by the shard's size.
    Either way a block is read into a buffer an earlier block left, written and hashed.
    """
    digest, size = hashlib.sha256(), 0
    batches = blocks(entries, _BLOCK)
    firsts = list(itertools.accumulate((len(b) for b in batches), initial=0))
    staged = _stage(entries, work) if storage.is_remote(work.root) else None
    reread = _Source(source)
    free: list[bytearray] = []  # buffers written and hashed (list.pop and append are atomic)

    def read(i: int, reader: _SpillReader) -> tuple[bytearray, int]:
        need = sum(map(written_size, batches[i]))
        try:
            buffer = free.pop()
        except IndexError:
            buffer = bytearray(max(need, _BLOCK))
        if len(buffer) < need:
            # Only a block of one record larger than _BLOCK: every other block fits a buffer of _BLOCK bytes, so
            # that buffers are reused rather than made anew for each block a few bytes larger than the last (new
            # memory costs a page fault a page on first touch, a host fault on this VM: docs/design.md).
            buffer = bytearray(need)
        return buffer, reader.fill(batches[i], reread, buffer, staged, firsts[i])

    def read_alone(i: int) -> tuple[bytearray, int]:
        reader = _SpillReader(work)  # its own open spill files: blocks are read at once
        try:
            return read(i, reader)
        finally:
            reader.close()

    with staged or _Staged():
        if pool is None:
            reader = _SpillReader(work)
            try:
                for i in range(len(batches)):
                    buffer, length = read(i, reader)
                    block = memoryview(buffer)[:length]
                    out.write(block)
                    digest.update(block)
                    size += length
                    free.append(buffer)
            finally:
                reader.close()
            return size, digest.hexdigest()
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sha256") as hasher:
            reading: collections.deque[concurrent.futures.Future[tuple[bytearray, int]]] = collections.deque()
            hashing: collections.deque[tuple[concurrent.futures.Future[None], bytearray]] = collections.deque()
            for i in range(len(batches)):
                reading.append(pool.submit(read_alone, i))
                last = i == len(batches) - 1
                while reading and (len(reading) > _AHEAD or last):
                    buffer, length = reading.popleft().result()
                    block = memoryview(buffer)[:length]
                    out.write(block)
                    hashing.append((hasher.submit(digest.update, block), buffer))
                    size += length
                    while len(hashing) > _AHEAD:
                        done, buffer = hashing.popleft()
                        done.result()
                        free.append(buffer)
    return size, digest.hexdigest()


class _Source:
    """SOURCE, for reading kept images again: straight into a block's buffer where an input is a local
    file (`read_into`), else through `spill.read_record`."""

    def __init__(self, name: str) -> None:
        self.name = name
        # Paths are joined as bytes: an entry's path is UTF-8 (surrogateescape), as the file system's is here.
        utf8 = sys.getfilesystemencoding() == "utf-8"
        self._prefix = os.fsencode(os.path.join(name, "")) if utf8 and not storage.is_remote(name) else None

    def local(self, path: bytes) -> bool:
        """Whether input `path` (`Entry.source`) is a local file, read by `read_into`: not a remote
        object nor, maybe, a WebDataset member (`webdataset.member_path`)."""
        return self._prefix is not None and b"://" not in path and b"#bytes=" not in path

    def read_into(self, view: memoryview, pos: int, entry: PlannedEntry, spilled: bytes) -> int:
        """Puts the entry's framed record at `pos` of `view`, its image read from the source file into its
        place; returns where the record ends. As `spill.read_record`, the record's data CRC, spilled with
        it, shows that the image is the one prepared.

        Raises:
            SourceError: the input changed (or went) since it was prepared.
        """
        cut, image, length, name = entry.cut, entry.image, entry.length, entry.source
        end = pos + length
        if len(spilled) != length - image:
            raise OSError(f"spilled bytes of {name!r}: {len(spilled)}, not {length - image}")
        start = pos + cut
        view[pos:start] = spilled[:cut]
        path = name if name[:1] == b"/" else self._prefix + name  # type: ignore[operator]
        # One byte more than the image, which its record's bytes after it are written over: a longer file shows.
        why = _read_file(path, view[start : start + image + 1], image)
        view[start + image : end] = spilled[cut:]
        # The CRC is summed in place (crc32c takes any buffer, and lets go of the GIL for an image's size): a copy
        # of the record would be one more pass over its bytes, holding the GIL.
        if why is None and (
            _LENGTH.unpack_from(view, pos)[0] != length - HEADER - FOOTER
            or _CRC.unpack_from(view, end - FOOTER)[0] != masked_crc32c(view[pos + HEADER : end - FOOTER])
        ):
            why = "its bytes differ"
        if why is not None:
            raise changed(name, why)
        return end


def _read_file(path: bytes, into: memoryview, size: int) -> str | None:
    """Reads the local file at `path` into `into`, which holds one byte more than the `size` it had;
    returns why it cannot be, or None. Opened without blocking: it may be a FIFO now."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return "file does not exist"
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        got = os.readv(fd, (into,))
        while 0 < got < size:  # a read may come short (a network file system): on to the end of the file
            more = os.readv(fd, (into[got:],))
            if not more:
                break
            got += more
    except OSError:
        return "its bytes differ"  # a folder, or a FIFO or device that has nothing to give
    finally:
        os.close(fd)
    return None if got == size else "its bytes differ"


Range = tuple[int, int, int]  # (offset, size, index) in a spill file


class _Staged:
    """A part's spilled bytes read from remote spill files, copied into a local temporary file (`_stage`):
    where each entry's are in it, by the entry's index in the part."""

    def __init__(self, f: BinaryIO | None = None, where: dict[int, tuple[int, int]] | None = None) -> None:
        self._f, self._where = f, where or {}

    def read(self, index: int) -> bytes:
        assert self._f is not None  # staged for every entry without Entry.rest
        offset, size = self._where[index]
        return os.pread(self._f.fileno(), size, offset)  # pool threads read at once: no shared position

    def __enter__(self) -> _Staged:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._f is not None:
            self._f.close()


def _stage(entries: Sequence[PlannedEntry], work: WorkDir) -> _Staged | None:
    """The part's records read from remote spill files (those without `Entry.rest`), copied into a local
    temporary file a spill file at a time, one streamed read a run (`runs`, reading through gaps up to
    `_WASTE` times the bytes wanted): a block's records of one chunk lie too far apart for a block's reads
    to join (a request per record), a part's lie close. The part's blocks then read them from local disk."""
    wanted: dict[str, list[Range]] = {}  # spill file -> its ranges
    for i, entry in enumerate(entries):
        if not entry.rest:
            wanted.setdefault(work.spill(entry.spill), []).append((entry.offset, entry.length - entry.image, i))
    if not wanted:
        return None
    need = sum(size for ranges in wanted.values() for _, size, _ in ranges)
    f = tempfile.TemporaryFile()
    where: dict[int, tuple[int, int]] = {}
    try:
        for path, cut in runs({path: sorted(r) for path, r in wanted.items()}, _WASTE * need).items():
            with storage.open_read(path) as h:
                for run in cut:
                    h.seek(run[0][0])
                    pos = run[0][0]
                    for offset, size, i in run:
                        while pos < offset:  # through the gap: a seek on an object store is a request
                            pos += len(h.read(min(offset - pos, 8 << 20)) or _short(path))
                        data = storage.read_exact(h, size)
                        if len(data) != size:
                            _short(path)
                        where[i] = (f.tell(), size)
                        f.write(data)
                        pos += size
        f.flush()
    except BaseException:
        f.close()
        raise
    return _Staged(f, where)


def _short(path: str) -> bytes:
    raise OSError(f"spill file {path} is shorter than planned")


def runs(wanted: dict[str, list[Range]], waste: int) -> dict[str, list[list[Range]]]:
    """Each spill file's sorted ranges cut into runs, each read with one ranged read: the smallest gaps
    between neighbours, over all the files, are read through up to `waste` bytes in all. (A block's
    records of one chunk lie apart: between them, the chunk's records of other shards and groups.)"""
    gaps = sorted(
        (b[0] - a[0] - a[1], spill, k)
        for spill, ranges in wanted.items()
        for k, (a, b) in enumerate(zip(ranges, ranges[1:]))
    )
    joined, spent = set(), 0
    for gap, spill, k in gaps:
        if spent + gap > waste:
            break
        joined.add((spill, k))
        spent += gap
    out: dict[str, list[list[Range]]] = {}
    for spill, ranges in wanted.items():
        cut = out[spill] = []
        for k, r in enumerate(ranges):
            if k and (spill, k - 1) in joined:
                cut[-1].append(r)
            else:
                cut.append([r])
    return out


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
