"""Writing shards from planned entries. Records are copied from spill files,
with kept images read from the source again (spill.read_record); image bytes
never pass through a shuffle, and entries do not either: they wait in the
rank tasks' entry files, and a part's sections of them are read here
(planning.py).

A part is the group of entries of one shard with one order-key prefix. When a
shard has one part (the usual case: shards of up to about
`planning.GROUP_TARGET` records), the part is written straight to its shard.
Otherwise parts go to part files, and `ConcatParts` joins them in part order.
Every file appears under its final name only by a rename once complete, and
then gets a sidecar in .prep-tmp (see checkpoints.py). With `reuse` (a resumed
run), a shard or part whose file is complete and holds exactly the planned
entries is kept as it is.

With `index` (``--index``), each shard also gets its record index (DALI's
``offset size`` lines, `prep.tfrecord.record_index`). It comes from the planned
entries' framed lengths, which are exactly the bytes copied in order, so no
shard is read again; a multi-part shard's parts pass their lengths on to
`ConcatParts`, whose concatenated list shifts each part by the parts before
it. The index is written after its shard, and again for a reused shard, so a
kill between the two leaves nothing stale.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import itertools

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_jobs import checkpoints, storage
from beam_jobs.planning import read_section
from beam_jobs.pooled import PooledDoFn
from beam_jobs.spill import read_record, spill_path
from prep import manifest as manifest_lib
from prep.naming import ShardName
from prep.schema import relabel, relabelled_size
from prep.tfrecord import FOOTER, HEADER, frame, record_index

SHARD, PART = "shard", "part"
# Records are read in blocks of about _BLOCK bytes (at least one record each).
# At most _AHEAD blocks wait to be written and _AHEAD more to be hashed, so a
# part in flight holds about (2 * _AHEAD + 1) * _BLOCK bytes. The earlier blocks
# of 32 records with _AHEAD = 4 (~1.6 MB blocks of 50 KB JPEGs) wrote no faster
# and gave a higher peak RSS: 208-213 against 185-186 MB for 20,000 JPEGs at 2
# workers, 175-180 against 165-166 MB for 2,000.
_BLOCK = 512 * 1024
_AHEAD = 2


class _SpillReader:
    """Reads (spill, offset, length) ranges from spill files, keeping a few open."""

    def __init__(self, tmp_dir: str):
        self._tmp_dir = tmp_dir
        self._handles = collections.OrderedDict()

    def read_batch(self, entries, source: str) -> list[bytes]:
        """The entries' framed records, in pieces to join; images left in the source are read
        from it (`spill.read_record`)."""
        out = []
        for entry in entries:
            handle = self._handles.pop(entry.spill, None) or storage.open_read(spill_path(self._tmp_dir, entry.spill))
            self._handles[entry.spill] = handle
            if len(self._handles) > 8:
                self._handles.popitem(last=False)[1].close()
            handle.seek(entry.offset)
            spilled = storage.read_exact(handle, entry.length - entry.image)
            if len(spilled) != entry.length - entry.image:
                raise OSError(f"spill file {spill_path(self._tmp_dir, entry.spill)} is shorter than planned")
            pieces = read_record(source, entry.source, spilled, entry.cut, entry.image)
            if entry.relabel >= 0:
                pieces = [relabel_framed(b"".join(pieces), entry)]
            out.extend(pieces)
        return out

    def close(self):
        for handle in self._handles.values():
            handle.close()


def written_size(entry) -> int:
    """Bytes of the entry's framed record as written: prepared, or renumbered (`Entry.relabel`)."""
    if entry.relabel < 0:
        return entry.length
    data = entry.length - HEADER - FOOTER
    return relabelled_size(data, entry.label, entry.relabel) + HEADER + FOOTER


def relabel_framed(framed: bytes, entry) -> bytes:
    """The framed record with the label id `entry.relabel` instead of the one it was prepared with.

    Its framing was checked when the image was read from the source again; a
    converted record's came from our own spill file.
    """
    record = frame(relabel(framed[HEADER:len(framed) - FOOTER], entry.relabel))
    if len(record) != written_size(entry):
        raise RuntimeError(f"internal error: a renumbered record has {len(record)} bytes, "
                           f"not the {written_size(entry)} planned")
    return record


def _copy_records(entries, out, tmp_dir: str, source: str, pool) -> tuple[int, str]:
    """Writes the entries' records to `out` in order; returns (bytes, sha256).

    Three things overlap, all outside the GIL for large buffers: batches are
    read ahead on `pool` threads, this thread writes them, and one hashing
    thread updates the SHA-256 in order. At most `_AHEAD` blocks wait on each
    side, so memory is bounded by a few blocks, not by the shard's size.
    """
    digest, size = hashlib.sha256(), 0
    batches = blocks(entries, _BLOCK)

    def read(batch):
        reader = _SpillReader(tmp_dir)
        try:
            return b"".join(reader.read_batch(batch, source))
        finally:
            reader.close()

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sha256") as hasher:
        reading, hashing = collections.deque(), collections.deque()
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


def blocks(entries, limit: int) -> list[list]:
    """`entries` cut in order into lists of at most `limit` framed bytes (at least one entry each)."""
    out, current, size = [], [], 0
    for entry in entries:
        if current and size + entry.length > limit:
            out.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry.length
    if current:
        out.append(current)
    return out


def write_index(output: str, tmp_dir: str, name: ShardName, sizes) -> dict:
    """Writes the shard's record index atomically next to it; returns its manifest entry."""
    data = record_index(sizes)
    tmp = storage.temp_path(storage.join(tmp_dir, "shards", name.index_filename))
    with storage.open_write(tmp) as out:
        out.write(data)
    storage.rename(tmp, storage.join(output, name.index_filename))
    return {"file": name.index_filename, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_task(key: tuple, width: int) -> tuple:
    """The write task of part `key`: `width` consecutive parts of a split, written at once."""
    split, shard, _, part, num_parts = key
    return split, (shard * num_parts + part) // width


class WriteParts(PooledDoFn):
    """(write task, [(part key, Section)]) -> per part, (SHARD, result) or (PART, file, info).

    A part key is (split, shard, num_shards, part, num_parts); its entries wait
    in sections of entry files, one per rank task that sent some (see
    planning.py). A task holds up
    to `width` parts (`write_task`), written at once on as many threads: each
    part file is a stream of page-cache writes and a SHA-256 that one thread
    cannot overlap with another file's.
    """

    def __init__(self, output: str, source: str, tmp_dir: str, labels: tuple[str, ...], workers: int | None,
                 width: int = 1, reuse: bool = False, index: bool = False):
        super().__init__(workers)
        self._output = output
        self._source = source
        self._tmp_dir = tmp_dir
        self._labels = labels
        self._width = width
        self._reuse = reuse
        self._index = index
        self._parts = None
        self._written = Metrics.counter("prep", "examples_written")
        self._bytes = Metrics.counter("prep", "bytes_written")

    def setup(self):
        super().setup()
        self._parts = concurrent.futures.ThreadPoolExecutor(self._width, thread_name_prefix="WriteParts")

    def teardown(self):
        if self._parts is not None:
            self._parts.shutdown(cancel_futures=True)
            self._parts = None
        super().teardown()

    def process(self, element):
        _, items = element
        sections: dict[tuple, list] = {}
        for key, section in items:
            sections.setdefault(key, []).append(section)
        keys = sorted(sections)
        # Metrics count in this thread: Beam's metrics container is per thread.
        for output, written, size in self._parts.map(lambda key: self._write_part(key, sections[key]), keys):
            if written:
                self._written.inc(written)
                self._bytes.inc(size)
            yield output

    def _write_part(self, key: tuple, sections) -> tuple:
        """Writes one part (or whole shard); returns (output, records written, bytes written)."""
        split, index, count, part, parts = key
        name = ShardName(split, index, count)
        entries = sorted(itertools.chain.from_iterable(read_section(self._tmp_dir, s) for s in sorted(sections)))
        digest = checkpoints.entries_digest(entries)
        counts = collections.Counter(self._labels[e.label] for e in entries)
        class_counts = {label: counts.get(label, 0) for label in self._labels}
        converted = sum(e.converted for e in entries)
        if parts == 1:
            path = storage.join(self._output, name.filename)
            tmp = storage.temp_path(storage.join(self._tmp_dir, "shards", name.filename))
            sidecar = checkpoints.shard_sidecar(self._tmp_dir, name.filename)
        else:
            path = storage.join(self._tmp_dir, "parts", name.filename, f"part-{part:06d}")
            tmp = storage.temp_path(path)
            sidecar = path + ".json"
        found = checkpoints.reusable(path, sidecar, digest) if self._reuse else None
        if found is not None:
            size, sha = found
        else:
            with storage.open_write(tmp) as out:
                size, sha = _copy_records(entries, out, self._tmp_dir, self._source, self._pool)
            storage.rename(tmp, path)
            checkpoints.record_complete(sidecar, digest, size, sha)
        sizes = tuple(map(written_size, entries))  # framed records, in the order written
        if parts > 1:
            return (PART, name.filename, (part, path, len(entries), size, class_counts, converted, digest, sizes)), 0, 0
        result = dict(manifest_lib.shard_result(name, len(entries), size, sha, class_counts),
                      converted=converted, reused=found is not None)
        if self._index:
            result["index_file"] = write_index(self._output, self._tmp_dir, name, sizes)
        if found is not None:
            return (SHARD, result), 0, 0
        checkpoints.pause_for_tests("shard")
        return (SHARD, result), len(entries), size


class ConcatParts(beam.DoFn):
    """(shard file, [part info]) -> (SHARD, result): joins part files in part order."""

    def __init__(self, output: str, tmp_dir: str, labels: tuple[str, ...], reuse: bool = False,
                 index: bool = False):
        self._output = output
        self._tmp_dir = tmp_dir
        self._labels = labels
        self._reuse = reuse
        self._index = index

    def process(self, element):
        filename, parts = element
        name = ShardName.parse(filename)
        parts = sorted(parts)
        path = storage.join(self._output, filename)
        sidecar = checkpoints.shard_sidecar(self._tmp_dir, filename)
        digest = hashlib.sha256("".join(p[6] for p in parts).encode()).hexdigest()
        found = checkpoints.reusable(path, sidecar, digest) if self._reuse else None
        if found is not None:
            size, sha = found
        else:
            hasher, size = hashlib.sha256(), 0
            tmp = storage.temp_path(storage.join(self._tmp_dir, "shards", filename))
            with storage.open_write(tmp) as out:
                for part in parts:
                    with storage.open_read(part[1]) as f:
                        while block := f.read(8 << 20):
                            out.write(block)
                            hasher.update(block)
                            size += len(block)
            storage.rename(tmp, path)
            sha = hasher.hexdigest()
            checkpoints.record_complete(sidecar, digest, size, sha)
            checkpoints.pause_for_tests("shard")
        class_counts = {label: sum(p[4][label] for p in parts) for label in self._labels}
        result = dict(manifest_lib.shard_result(name, sum(p[2] for p in parts), size, sha, class_counts),
                      converted=sum(p[5] for p in parts), reused=found is not None)
        if self._index:
            result["index_file"] = write_index(self._output, self._tmp_dir, name, [n for p in parts for n in p[7]])
        yield SHARD, result
