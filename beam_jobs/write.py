"""Writing shards from planned entries. Records are copied from spill files
(prep/core/run/shard_copy.py), with kept images read from the source again; image bytes
never pass through a shuffle, and entries do not either, but in small sections: they
wait in the rank tasks' entry files, and a part's sections of them are read here
(plan.py, `INLINE_MAX`).

A part is the group of entries of one shard with one order-key prefix. When a
shard has one part (the usual case: shards of up to about
`plan.GROUP_TARGET` records), the part is written straight to its shard.
Otherwise parts go to part files, and `ConcatParts` joins them in part order.
Every file appears under its final name only by a rename once complete, and
then gets a sidecar in .prep-tmp (see checkpoints.py). With `reuse` (a resumed
run), a shard or part whose file is complete and holds exactly the planned
entries is kept as it is.

With `index` (``--index``), each shard also gets its record index (DALI's
``offset size`` lines, `prep.core.tfrecord.record_index`). It comes from the planned
entries' framed lengths, which are exactly the bytes copied in order, so no
shard is read again; a multi-part shard's parts pass their lengths on to
`ConcatParts`, whose concatenated list shifts each part by the parts before
it. The index is written after its shard, and again for a reused shard, so a
kill between the two leaves nothing stale.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import itertools
import os
import typing

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_jobs.plan import PartKey, Section, read_section
from beam_jobs.pooled import PooledDoFn
from prep.core import formats, storage
from prep.core.manifest_parts import IndexFile, ShardInfo
from prep.core.naming import ShardName
from prep.core.run import checkpoints, dedupe_files
from prep.core.run.checkpoints import StepHook
from prep.core.run.shard_copy import copy_records, written_size
from prep.core.tfrecord import record_index
from prep.core.workdir import WorkDir


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """What writing shards needs of the conversion, made once for WriteParts and ConcatParts."""

    output: str
    source: str  # kept images are read from it again (spill.read_record)
    labels: tuple[str, ...]
    task: str = "classification"
    groups: tuple[str, ...] | None = None  # the planner's groups (strata), for a task's counts
    reuse: bool = False  # keep a complete shard or part of an interrupted run (see checkpoints.py)
    index: bool = False  # --index: write each shard's record index
    keys: bool = False  # record each part's content keys, for OUTPUT/content_keys.jsonl (dedupe_files.py)
    file_format: str = formats.DEFAULT  # the shards' container; parts are always TFRecord-framed
    format_options: str | None = None

    @property
    def shard_format(self) -> formats.ShardFormat:
        return formats.get(self.file_format)

    def shard_name(self, split: str, shard: int, num_shards: int) -> ShardName:
        return ShardName(split, shard, num_shards, self.shard_format.suffix)

    def open_shard(self, path: str) -> formats.ShardWriter:
        """A writer of a shard's container at `path`: it takes the framed records in order."""
        return self.shard_format.open_writer(path, self.format_options)


class WrittenShard(typing.NamedTuple):
    """A complete shard: its name, its manifest entry, and how it came to be."""

    name: ShardName
    info: ShardInfo
    converted: int  # records re-encoded rather than copied as the original bytes
    reused: bool  # kept from an interrupted run
    max_boxes: int = 0  # detection: the most objects one of its images holds


class WrittenPart(typing.NamedTuple):
    """A complete part file of a multi-part shard, for `ConcatParts`."""

    shard: str  # the shard's file name
    part: int
    path: str
    examples: int
    bytes: int
    class_counts: dict
    converted: int
    digest: str  # of its planned entries
    record_sizes: tuple[int, ...]  # framed records, in the order written
    counts: dict = {}  # the task's other counts (`task_counts`): box_counts, stratum_counts, max_boxes


class ShardCounts(typing.NamedTuple):
    """What the manifest counts of a shard's (or part's) records."""

    class_counts: dict
    extra: dict  # multilabel, detection: "stratum_counts"; detection: "box_counts" and "max_boxes"


def task_counts(entries, labels: tuple[str, ...], groups: tuple[str, ...] | None, task: str) -> ShardCounts:
    """The counts of `entries`: records per class (classification), else images containing each class
    (`Entry.tags`), with objects per class, images per stratum (the planner's group) and max objects.

    Only the classes and strata the entries hold are named (a missing one holds 0), so a shard's
    counts grow with what it holds, never with the number of classes.
    """
    if task == "classification":
        return ShardCounts(_named(collections.Counter(e.label for e in entries), labels), {})
    images = collections.Counter(i for e in entries for i, _ in e.tags)
    extra: dict = {}
    if task in ("multilabel", "detection"):
        extra["stratum_counts"] = _named(collections.Counter(e.label for e in entries), groups)
    if task == "detection":
        boxes: collections.Counter = collections.Counter()
        for e in entries:
            for i, n in e.tags:
                boxes[i] += n
        extra["box_counts"] = _named(boxes, labels)
        extra["max_boxes"] = max((sum(n for _, n in e.tags) for e in entries), default=0)
    return ShardCounts(_named(images, labels), extra)


def _named(counts: collections.Counter, names) -> dict[str, int]:
    """{name: n} of the non-zero counts by id, in id order."""
    return {names[i]: n for i, n in sorted(counts.items()) if n}


def add_counts(parts) -> dict:
    """The `extra` counts of several parts of one shard, added up (max_boxes: the largest); the
    names no part holds stay absent."""
    out: dict = {}
    for extra in parts:
        for key, value in extra.items():
            if key == "max_boxes":
                out[key] = max(out.get(key, 0), value)
            else:
                out.setdefault(key, collections.Counter()).update(value)
    return {key: value if key == "max_boxes" else _nonzero(value) for key, value in out.items()}


def _nonzero(counts) -> dict[str, int]:
    return {name: n for name, n in counts.items() if n}


def shard_info(
    file: str, index: int, examples: int, size: int, sha: str, class_counts: dict, index_file, extra: dict
) -> ShardInfo:
    return ShardInfo(
        file,
        index,
        examples,
        size,
        sha,
        class_counts,
        index_file,
        box_counts=extra.get("box_counts"),
        stratum_counts=extra.get("stratum_counts"),
    )


def write_index(output: str, work: WorkDir, name: ShardName, sizes) -> IndexFile:
    """Writes the shard's record index atomically next to it; returns its manifest entry."""
    data = record_index(sizes)
    tmp = work.shard_temp(name.index_filename)
    with storage.open_write(tmp) as out:
        out.write(data)
    storage.rename(tmp, storage.join(output, name.index_filename))
    return IndexFile(name.index_filename, len(data), hashlib.sha256(data).hexdigest())


def write_task(key: PartKey, width: int) -> tuple[str, int]:
    """The write task of part `key`: `width` consecutive parts of a split, written at once."""
    return key.split, (key.shard * key.num_parts + key.part) // width


class WriteParts(PooledDoFn):
    """(write task, [(PartKey, Section)]) -> per part, a `WrittenShard` or a `WrittenPart`.

    A part's entries wait in sections of entry files, one per rank task that sent
    some (see plan.py). A task holds up
    to `width` parts (`write_task`), written at once on as many threads: each
    part file is a stream of page-cache writes and a SHA-256 that one thread
    cannot overlap with another file's. A task of fewer parts than cores also
    reads each part's blocks ahead on the pool (`copy_records`).
    """

    def __init__(
        self, work: WorkDir, options: WriteOptions, workers: int | None, width: int = 1, on_step: StepHook | None = None
    ):
        super().__init__(workers)
        self._options = options
        self._work = work
        self._on_step = on_step
        self._width = width
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
        sections: dict[PartKey, list[Section]] = {}
        for key, section in items:
            sections.setdefault(key, []).append(section)
        keys = sorted(sections)
        # As many parts as cores keep them busy, each on its own thread; fewer read ahead on the pool too.
        ahead = self._pool if len(keys) < (self._workers or os.cpu_count() or 1) else None
        # Metrics count in this thread: Beam's metrics container is per thread.
        for output, written, size in self._parts.map(lambda key: self._write_part(key, sections[key], ahead), keys):
            if written:
                self._written.inc(written)
                self._bytes.inc(size)
            yield output

    def _write_part(self, key: PartKey, sections: list[Section], ahead: concurrent.futures.Executor | None) -> tuple:
        """Writes one part (or whole shard), its blocks read ahead on `ahead` if given (`copy_records`);
        returns (output, records written, bytes written)."""
        name = self._options.shard_name(key.split, key.shard, key.num_shards)
        entries = sorted(itertools.chain.from_iterable(read_section(self._work, s) for s in sorted(sections)))
        digest = checkpoints.entries_digest(entries)
        class_counts, extra = task_counts(entries, self._options.labels, self._options.groups, self._options.task)
        converted = sum(e.converted for e in entries)
        if key.num_parts == 1:
            path = storage.join(self._options.output, name.filename)
            tmp = self._work.shard_temp(name.filename)
            sidecar = self._work.shard_sidecar(name.filename)
        else:
            path = self._work.part(name.filename, key.part)
            tmp = storage.temp_path(path)
            sidecar = self._work.part_sidecar(name.filename, key.part)
        found = checkpoints.reusable(path, sidecar, digest) if self._options.reuse else None
        if found is not None:
            size, sha = found
        else:
            # A part is a piece of the framed stream that ConcatParts gives the shard's container.
            out = self._options.open_shard(tmp) if key.num_parts == 1 else formats.TFRECORD.open_writer(tmp)
            try:
                size, sha = out.finish(*copy_records(entries, out, self._work, self._options.source, ahead))
            except BaseException:
                out.abort()
                raise
            storage.rename(tmp, path)
            checkpoints.record_complete(sidecar, digest, size, sha)
        sizes = tuple(map(written_size, entries))  # framed records, in the order written
        if self._options.keys:
            dedupe_files.write_part_order(self._work, name.filename, key.part if key.num_parts > 1 else 0, entries)
            if key.num_parts == 1:
                dedupe_files.write_shard_parts(self._work, name.filename, [0])
        if key.num_parts > 1:
            return (
                WrittenPart(
                    name.filename, key.part, path, len(entries), size, class_counts, converted, digest, sizes, extra
                ),
                0,
                0,
            )
        index_file = write_index(self._options.output, self._work, name, sizes) if self._options.index else None
        info = shard_info(name.filename, name.index, len(entries), size, sha, class_counts, index_file, extra)
        result = WrittenShard(name, info, converted, reused=found is not None, max_boxes=extra.get("max_boxes", 0))
        if found is not None:
            return result, 0, 0
        if self._on_step is not None:
            self._on_step("shard")
        return result, len(entries), size


class ConcatParts(beam.DoFn):
    """(shard file, [WrittenPart]) -> `WrittenShard`: joins part files in part order."""

    def __init__(self, work: WorkDir, options: WriteOptions, on_step: StepHook | None = None):
        self._options = options
        self._work = work
        self._on_step = on_step

    def process(self, element):
        filename, parts = element
        name = ShardName.parse(filename)
        parts = sorted(parts)
        path = storage.join(self._options.output, filename)
        sidecar = self._work.shard_sidecar(filename)
        digest = hashlib.sha256("".join(p.digest for p in parts).encode()).hexdigest()
        found = checkpoints.reusable(path, sidecar, digest) if self._options.reuse else None
        if found is not None:
            size, sha = found
        else:
            hasher, size = hashlib.sha256(), 0
            tmp = self._work.shard_temp(filename)
            out = self._options.open_shard(tmp)
            try:
                for part in parts:
                    with storage.open_read(part.path) as f:
                        while block := f.read(8 << 20):
                            out.write(block)
                            hasher.update(block)
                            size += len(block)
                size, sha = out.finish(size, hasher.hexdigest())
            except BaseException:
                out.abort()
                raise
            storage.rename(tmp, path)
            checkpoints.record_complete(sidecar, digest, size, sha)
            if self._on_step is not None:
                self._on_step("shard")
        if self._options.keys:
            dedupe_files.write_shard_parts(self._work, filename, [p.part for p in parts])
        summed: collections.Counter = collections.Counter()
        for p in parts:
            summed.update(p.class_counts)
        class_counts = _nonzero(summed)  # held classes only, whatever the number of labels
        index_file = (
            write_index(self._options.output, self._work, name, [n for p in parts for n in p.record_sizes])
            if self._options.index
            else None
        )
        extra = add_counts(p.counts for p in parts)
        info = shard_info(
            filename, name.index, sum(p.examples for p in parts), size, sha, class_counts, index_file, extra
        )
        yield WrittenShard(
            name, info, sum(p.converted for p in parts), reused=found is not None, max_boxes=extra.get("max_boxes", 0)
        )
