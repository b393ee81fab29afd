"""`PlanShards`: the shard layout of `prep.core.layout` applied to prepared chunks, with bounded groups.

No key and no task ever holds more than about `GROUP_TARGET` references, even for
one class of 5 million, and references do not pass through a shuffle in bulk: they wait
on disk in the work directory, and only counts and file sections travel, a section
carrying its entries only when it is a small one (`INLINE_MAX`: shards outnumber a
task's references).

The driver stages the listing in chunks in `prep.core.ordering.listing_order`, whose
contract makes a chunk's good inputs of a group hold consecutive ranks. Once a chunk
is prepared, its references (PreparedRef) wait in its index and only its counts travel:

    counts  : ChunkCounts                 a prepared chunk's good inputs per group
    tasks   = Map | GroupByKey(one key) | FlatMap(layout_tasks)
            : (task, RankTask)            consecutive chunks holding about `group_target`
                                          references, each group's first rank in each chunk,
                                          the layout trimmed to those groups
    ranked  = Reshuffle | FlatMap(rank_task)
            : PartEntries | Capped        a Section of the task's entry file per shard part
                                          it sends entries to (small ones carry them);
                                          capped counts per label

A reference's rank in its group is the group's first rank in the chunk plus the
references of the group before it in the chunk: exact. `Layout.locate` then gives
split and shard. A shard's entries are further cut into `num_parts` parts by a prefix
of the order key, so that no writer holds more than about `GROUP_TARGET` entries
either; parts concatenated in order are the shard in order-key order.

What grows with the dataset is counted in chunks (one count list each) and sections
(one per task and part it sends entries to), never in references. Only Create, ParDo,
GroupByKey and Flatten are used, nothing emitted from finish_bundle, so the DaskRunner
runs it too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import struct
import typing

import apache_beam as beam

from beam_jobs.prepare import plan_group, read_prepared
from beam_jobs.spread import spread
from prep.core import storage
from prep.core.errors import PlanError
from prep.core.layout import Layout, PlanOptions, check_empty_classes, empty_labels, label_ids, make_layout
from prep.core.ordering import key_prefix
from prep.core.run import dedupe_files
from prep.core.run.chunk_spill import read_rests
from prep.core.run_record import REPLAN_HINT
from prep.core.workdir import WorkDir

GROUP_TARGET = 20_000  # references per rank task and per shard part, about
# A section this small travels in the shuffle instead of waiting in the task's entry file. When
# shards outnumber a task's references (LAION-scale: ~51,000 shards a split, 20,000 references a
# task) nearly every section holds one or two entries, and a ranged read per section would make
# billions of tiny reads, each a request (latency, and a price per request), where shuffling
# a few hundred bytes costs far less (docs/design.md, "At internet scale"). A section this size
# holds about 30 entries, fewer with kept images' spilled bytes (`Entry.rest`); bigger ones, the
# rule on one machine, stay in files, so the runner's memory does not grow with the entries.
INLINE_MAX = 4096


class PartKey(typing.NamedTuple):
    """One part of a shard: the entries of shard `shard` of `split` whose order-key prefix is `part`."""

    split: str
    shard: int
    num_shards: int
    part: int
    num_parts: int


class Section(typing.NamedTuple):
    """Where a part's entries from one rank task wait: a byte range of the task's entry file,
    or, for a section of at most `INLINE_MAX` bytes, the packed entries themselves (`data`)."""

    task: int
    offset: int
    length: int
    data: bytes = b""


class PartEntries(typing.NamedTuple):
    """A rank task's entries for one part."""

    key: PartKey
    section: Section


class Capped(typing.NamedTuple):
    """Inputs of class `label` left out by --max-per-class."""

    label: int
    count: int  # type: ignore[assignment]  # shadows tuple.count, which NamedTuple permits


def prefix_bits(count: int, target: int = GROUP_TARGET) -> int:
    """Bits of hash prefix so that `count` items split into groups of about `target`."""
    return 0 if count <= target else math.ceil(math.log2(count / target))


def prefix(key: bytes, bits: int) -> int:
    return int.from_bytes(key[:8], "big") >> (64 - bits) if bits else 0


class Entry(typing.NamedTuple):
    """A record's place: its order key inside the shard and where its bytes are."""

    order: bytes
    spill: int  # spill file (prepare.spill_id), offset and length of its framed record
    offset: int
    length: int
    label: int
    converted: bool
    source: bytes  # the input's path when the image is read from it again (see PreparedRef), else b""
    cut: int
    image: int
    relabel: int = -1  # the label id to write instead of `label` (--empty-classes drop), or -1: write `label`
    tags: tuple = ()  # PreparedRef.tags: ((class id, objects), ...) of a multilabel, detection or segmentation record
    rest: bytes = b""  # a kept image's spilled bytes (chunk_spill.read_rests), or b"": read from the spill file


# an Entry's fields, `source`, `tags` and `rest` last as their lengths, then them
_ENTRY = struct.Struct(">32sQQQI?QQiIII")
_TAG = struct.Struct(">II")


def pack_entry(e: Entry) -> bytes:
    packed = bytearray()
    append_entry(packed, e)
    return bytes(packed)


def append_entry(packed: bytearray, e: tuple) -> None:
    """Appends entry `e` packed: an `Entry`, or a plain tuple of its fields in its order (the planner's, which
    makes no Entry a reference)."""
    order, spill, offset, length, label, converted, source, cut, image, relabel, tags, rest = e
    packed += _ENTRY.pack(
        order, spill, offset, length, label, converted, cut, image, relabel, len(source), len(tags), len(rest)
    )
    packed += source
    if tags:
        packed += b"".join(_TAG.pack(*t) for t in tags)
    packed += rest


def unpack_entries(data: bytes) -> list[Entry]:
    entries, pos, size = [], 0, _ENTRY.size
    while pos < len(data):
        order, spill, offset, length, label, converted, cut, image, relabel, n, t, r = _ENTRY.unpack_from(data, pos)
        pos += size
        source = data[pos : pos + n]
        pos += n
        tags = tuple(_TAG.unpack_from(data, pos + i * _TAG.size) for i in range(t)) if t else ()  # most have none
        pos += t * _TAG.size
        rest = data[pos : pos + r]
        pos += r
        entries.append(Entry(order, spill, offset, length, label, converted, source, cut, image, relabel, tags, rest))
    return entries


def read_section(work: WorkDir, section: Section) -> list[Entry]:
    """The entries of one Section: carried in it, or read from its task's entry file."""
    if section.data:
        return unpack_entries(section.data)
    path = work.entries(section.task)
    with storage.open_read(path) as f:
        f.seek(section.offset)
        data = storage.read_exact(f, section.length)
    if len(data) != section.length:
        raise OSError(f"entry file {path} is shorter than planned")
    return unpack_entries(data)


@dataclasses.dataclass(frozen=True)
class RankTask:
    """Consecutive prepared chunks ranked by one task."""

    chunks: tuple  # ((chunk, ((group, first rank), ...)), ...) in chunk order (group: `plan_group`)
    layout: Layout  # trimmed to the task's groups
    part_bits: dict  # split -> bits of order-key prefix for parts
    ids: tuple = ()  # the label id each class is written with, by prepared id (`prep.core.layout.label_ids`)


def layout_tasks(
    element,
    num_classes: int,
    options: PlanOptions,
    work: WorkDir,
    group_target: int,
    labels: tuple[str, ...] | None = None,
):
    """(None, [ChunkCounts]) -> (task, RankTask) for runs of consecutive chunks of about `group_target` refs.

    Every image is prepared by now, so this is where classes left with no example
    are known (`--empty-classes`), and where a plan that cannot be made fails:
    before any shard is written, with the prepared images kept for `--resume`.
    `labels` name the classes in messages.
    """
    _, chunks = element
    chunks = sorted(chunks)
    groups: dict[tuple, int] = {}
    total_refs = total_bytes = 0
    for _, counts in chunks:
        for count in counts:
            group = plan_group(count.split, count.label, count.pin)
            groups[group] = groups.get(group, 0) + count.refs
            refs, size = count.refs, count.bytes
            total_refs += refs
            total_bytes += size
    names = labels if labels is not None else tuple(str(i) for i in range(num_classes))
    empty = empty_labels({g[1] for g, n in groups.items() if n}, num_classes)
    try:
        check_empty_classes(names, empty, options.empty_classes)
    except PlanError as exc:
        raise PlanError(
            f"{exc}; the images read so far are kept: to write the dataset, run the same command "
            "again with --empty-classes keep (or drop) and --resume"
        ) from None
    try:
        layout = make_layout(groups, num_classes, options, total_bytes / max(1, total_refs))
    except PlanError as exc:
        raise PlanError(f"{exc}; {REPLAN_HINT}") from None
    ids = label_ids(num_classes, empty, options.empty_classes)
    storage.write_atomic(work.plan, json.dumps({"shards": sum(s.num_shards for s in layout.splits)}).encode())
    part_bits = {s.name: prefix_bits(math.ceil(s.examples / s.num_shards), group_target) for s in layout.splits}
    starts: dict[tuple, int] = {}
    members, held, task = [], 0, 0
    for position, (chunk, counts) in enumerate(chunks):
        firsts = []
        for count in counts:
            group = plan_group(count.split, count.label, count.pin)
            firsts.append((group, starts.get(group, 0)))
            starts[group] = starts.get(group, 0) + count.refs
            held += count.refs
        members.append((chunk, tuple(firsts)))
        if held >= group_target or position == len(chunks) - 1:
            used = {group for _, firsts in members for group, _ in firsts}
            trimmed = Layout({g: layout.segments[g] for g in used}, {g: layout.kept[g] for g in used}, layout.splits)
            yield task, RankTask(tuple(members), trimmed, part_bits, ids)
            members, held, task = [], 0, task + 1


def rank_task(element, work: WorkDir, seed: int, grouped: bool = False, inline_max: int = INLINE_MAX):
    """(task, RankTask) -> `PartEntries` per part it sends entries to, and `Capped` per label.

    Writes the task's entries to its entry file, grouped by part; a part's entries of at most
    `inline_max` bytes travel in its Section instead (no entry file when all do). They are held
    packed (about 100 bytes each, and a kept image's spilled bytes: a few hundred more), one chunk's
    index parsed at a time. `grouped`: the run
    has a dedupe stage, whose placements (prep/core/run/dedupe_files.py) pin or leave out refs.
    """
    task, info = element
    packed_by: dict[tuple, bytearray] = {}  # its packed entries, by (split, shard, order-key prefix)
    capped: dict[int, int] = {}
    last: dict[tuple, tuple] = {}
    num_shards = {s.name: s.num_shards for s in info.layout.splits}  # looked up per reference
    segments = info.layout.segments
    ids = info.ids
    # The two keys of a reference are `ordering.rank_key` and `sort_key(..., "order")`, their hashes' prefixes
    # made once: the loop below runs once a reference, serially after the prepare stage's barrier.
    rank_prefix, order_prefix, sha256 = key_prefix(seed), key_prefix(seed, "order"), hashlib.sha256
    part_bits = info.part_bits
    for chunk, firsts in info.chunks:
        next_rank = dict(firsts)
        place = dedupe_files.placer(work, chunk, grouped)  # duplicate and user groups: rejected, or pinned to a split
        refs = read_prepared(work, chunk)
        # Kept images' spilled bytes go with their entries: one read per chunk here, none per record in the writer
        for r, rest in zip(refs, read_rests(work, refs)):
            name, label, split, spill, offset, length, converted, cut, image, rank_hex, tags = r
            pin = place(r) if grouped else ""
            if pin is None:
                continue  # rejected by a group policy: RejectedInputs of beam_jobs/dedupe.py say why
            group = plan_group(split, label, pin)
            key = (bytes.fromhex(rank_hex) if rank_hex else sha256(rank_prefix + name).digest(), name)
            before = last.get(group)
            if before is not None and key <= before:
                raise RuntimeError(f"internal error: chunk {chunk} is not staged in rank order")
            last[group] = key
            rank = next_rank[group]
            next_rank[group] = rank + 1
            for segment in segments[group]:  # `Layout.locate`, without its scan of the splits a reference
                if segment.start <= rank < segment.end:
                    split_name = segment.split
                    shard = (segment.position + rank - segment.start) % num_shards[split_name]
                    break
            else:
                capped[label] = capped.get(label, 0) + 1
                continue
            order = sha256(order_prefix + name).digest()
            bits = part_bits[split_name]
            where = (split_name, shard, prefix(order, bits) if bits else 0)
            packed = packed_by.get(where)
            if packed is None:
                packed = packed_by[where] = bytearray()
            append_entry(
                packed,
                (
                    order,
                    spill,
                    offset,
                    length,
                    label,
                    converted,
                    name if image else b"",
                    cut,
                    image,
                    ids[label] if ids and ids[label] != label else -1,
                    tags,
                    rest,
                ),
            )
    parts = {
        PartKey(split, shard, num_shards[split], piece, 1 << info.part_bits[split]): packed
        for (split, shard, piece), packed in packed_by.items()
    }
    sections = []
    for part in sorted(parts):
        if len(parts[part]) <= inline_max:
            small = bytes(parts.pop(part))
            sections.append(PartEntries(part, Section(task, 0, len(small), small)))
    if parts:
        offset = 0
        path = work.entries(task)
        tmp = storage.temp_path(path)
        with storage.open_write(tmp) as out:  # a part at a time: no copy of the whole file in memory
            for part in sorted(parts):
                packed = parts.pop(part)
                out.write(packed)
                sections.append(PartEntries(part, Section(task, offset, len(packed))))
                offset += len(packed)
        storage.rename(tmp, path)
    yield from sections
    for label, count in sorted(capped.items()):
        yield Capped(label, count)


class PlanShards(beam.PTransform):
    """`ChunkCounts` of prepared chunks -> `PartEntries` and `Capped`, exactly as the layout
    decides for the chunks' good inputs ranked by `sort_key`."""

    def __init__(
        self,
        num_classes: int,
        options: PlanOptions,
        work: WorkDir,
        group_target: int = GROUP_TARGET,
        labels: tuple[str, ...] | None = None,
        grouped: bool = False,
        inline_max: int = INLINE_MAX,
    ):
        super().__init__()
        self._grouped = grouped
        self._inline_max = inline_max
        self._num_classes = num_classes
        self._labels = labels
        self._options = options
        self._work = work
        self._group_target = group_target

    def expand(self, counts):
        tasks = (
            counts
            | "OneKey" >> beam.Map(lambda c: (None, c))
            | "GatherCounts" >> beam.GroupByKey()
            | "Layout"
            >> beam.FlatMap(
                layout_tasks, self._num_classes, self._options, self._work, self._group_target, self._labels
            )
        )
        return spread(tasks, "SpreadTasks") | "Rank" >> beam.FlatMap(
            rank_task, self._work, self._options.seed, self._grouped, self._inline_max
        )
