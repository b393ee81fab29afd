"""`PlanShards`: the planner of `prep.plan`, computed from counts, with bounded groups.

The reference planner sorts each class whole. Here no key and no task ever
holds more than about `GROUP_TARGET` references, even for one class of 5
million, and references never pass through a shuffle: they wait on disk in
.prep-tmp, and only counts and file sections travel.

The driver stages the listing in chunks in `start.listing_order`: sorted by
(split, class, sort key, path). So each (split, class) group's inputs come in
rank order, chunk after chunk, and a chunk's good inputs of a group hold
consecutive ranks. Once a chunk is prepared, its references (PreparedRef) wait
in its index (checkpoints.py) and only its counts travel:

    counts  # (chunk, [(split, label, refs, bytes)]): a prepared chunk's good inputs per group
    tasks   = Map | GroupByKey(one key) | FlatMap(layout_tasks)
            # (task, RankTask): consecutive chunks holding about `group_target` references,
            # with each of their groups' first rank in the chunk and the layout trimmed to those
            # groups; the one group holds one short count list per chunk, no reference
    ranked  = Reshuffle | FlatMap(rank_task)
            # (ENTRY, part key, Section) per part the task sends entries to, the entries waiting
            # in the task's entry file .prep-tmp/entries/task-NNNNNN.bin; (CAPPED, label, count)

A rank task reads its chunks' indexes, in chunk order. A reference's rank in
its group is the group's first rank in the chunk plus the references of the
group before it in the chunk: exact, as `make_plan`'s. `Layout.locate` then
gives split and shard exactly as `make_plan` does. A shard's entries are
further cut into `num_parts` parts by a prefix of the order key, so that no
writer holds more than about `GROUP_TARGET` entries either; parts concatenated
in order are the shard in order-key order. A part key is (split, shard,
num_shards, part, num_parts); a Section is (task, offset, length) of the
part's entries in the task's entry file.

What grows with the dataset is counted in chunks (one count list each) and
sections (one per task and part it sends entries to), never in references:
20,000 inputs make one task and one section per shard part.

Only Create, ParDo, GroupByKey and Flatten (and composites of them) are used:
no side inputs, no tagged outputs, nothing emitted from finish_bundle, so the
DaskRunner, which translates only those four, runs it too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import typing

import apache_beam as beam

from beam_jobs import storage
from beam_jobs.prepare import PreparedRef, read_prepared
from prep.errors import PlanError
from prep.plan import Layout, PlanOptions, check_empty_classes, empty_labels, label_ids, make_layout, sort_key
from prep.resume import REPLAN_HINT

GROUP_TARGET = 20_000
ENTRY, CAPPED = "entry", "capped"


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


_ENTRY = struct.Struct(">32sQQQI?QQiI")  # an Entry's fields, `source` last as its length, then its bytes


def pack_entry(e: Entry) -> bytes:
    return _ENTRY.pack(e.order, e.spill, e.offset, e.length, e.label, e.converted, e.cut, e.image, e.relabel,
                       len(e.source)) + e.source


def unpack_entries(data: bytes) -> list[Entry]:
    entries, pos, size = [], 0, _ENTRY.size
    while pos < len(data):
        order, spill, offset, length, label, converted, cut, image, relabel, n = _ENTRY.unpack_from(data, pos)
        pos += size
        entries.append(Entry(order, spill, offset, length, label, converted, data[pos:pos + n], cut, image, relabel))
        pos += n
    return entries


def entries_path(tmp_dir: str, task: int) -> str:
    return storage.join(tmp_dir, "entries", f"task-{task:06d}.bin")


def read_section(tmp_dir: str, section: tuple) -> list[Entry]:
    """The entries of one Section (task, offset, length) of a task's entry file."""
    task, offset, length = section
    path = entries_path(tmp_dir, task)
    with storage.open_read(path) as f:
        f.seek(offset)
        data = storage.read_exact(f, length)
    if len(data) != length:
        raise OSError(f"entry file {path} is shorter than planned")
    return unpack_entries(data)


@dataclasses.dataclass(frozen=True)
class RankTask:
    chunks: tuple  # ((chunk, ((split, label, first rank), ...)), ...) in chunk order
    layout: Layout  # trimmed to the task's groups
    part_bits: dict  # split -> bits of order-key prefix for parts
    ids: tuple = ()  # the label id each class is written with, by prepared id (`prep.plan.label_ids`)


def layout_tasks(element, num_classes: int, options: PlanOptions, tmp_dir: str, group_target: int,
                 labels: tuple[str, ...] | None = None):
    """(None, [(chunk, counts)]) -> (task, RankTask) for runs of consecutive chunks of about `group_target` refs.

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
        for split, label, refs, size in counts:
            groups[(split or None, label)] = groups.get((split or None, label), 0) + refs
            total_refs += refs
            total_bytes += size
    names = labels if labels is not None else tuple(str(i) for i in range(num_classes))
    empty = empty_labels({label for (_, label), n in groups.items() if n}, num_classes)
    try:
        check_empty_classes(names, empty, options.empty_classes)
    except PlanError as exc:
        raise PlanError(f"{exc}; the images read so far are kept: to write the dataset, run the same command "
                        "again with --empty-classes keep (or drop) and --resume") from None
    try:
        layout = make_layout(groups, num_classes, options, total_bytes / max(1, total_refs))
    except PlanError as exc:
        raise PlanError(f"{exc}; {REPLAN_HINT}") from None
    ids = label_ids(num_classes, empty, options.empty_classes)
    storage.write_atomic(storage.join(tmp_dir, "plan.json"),
                         json.dumps({"shards": sum(s.num_shards for s in layout.splits)}).encode())
    part_bits = {s.name: prefix_bits(math.ceil(s.examples / s.num_shards), group_target) for s in layout.splits}
    starts: dict[tuple, int] = {}
    members, held, task = [], 0, 0
    for position, (chunk, counts) in enumerate(chunks):
        firsts = []
        for split, label, refs, _ in counts:
            group = (split or None, label)
            firsts.append((split, label, starts.get(group, 0)))
            starts[group] = starts.get(group, 0) + refs
            held += refs
        members.append((chunk, tuple(firsts)))
        if held >= group_target or position == len(chunks) - 1:
            used = {(split or None, label) for _, firsts in members for split, label, _ in firsts}
            trimmed = Layout({g: layout.segments[g] for g in used}, {g: layout.kept[g] for g in used}, layout.splits)
            yield task, RankTask(tuple(members), trimmed, part_bits, ids)
            members, held, task = [], 0, task + 1


def rank_task(element, tmp_dir: str, seed: int):
    """(task, RankTask) -> (ENTRY, part key, Section) per part it sends entries to, and (CAPPED, label, count).

    Writes the task's entries to its entry file, grouped by part. They are held
    packed (about 100 bytes each), one chunk's index parsed at a time.
    """
    task, info = element
    parts: dict[tuple, bytearray] = {}  # part key -> its packed entries
    capped: dict[int, int] = {}
    last: dict[tuple, tuple] = {}
    for chunk, firsts in info.chunks:
        next_rank = {(split or None, label): first for split, label, first in firsts}
        for r in map(PreparedRef._make, read_prepared(tmp_dir, chunk)):
            group = (r.split or None, r.label)
            key = (sort_key(seed, r.path), r.path)
            if group in last and key <= last[group]:
                raise RuntimeError(f"internal error: chunk {chunk} is not staged in rank order")
            last[group] = key
            rank = next_rank[group]
            next_rank[group] = rank + 1
            where = info.layout.locate(group, rank)
            if where is None:
                capped[r.label] = capped.get(r.label, 0) + 1
                continue
            split_name, shard = where
            bits = info.part_bits[split_name]
            order = sort_key(seed, r.path, "order")
            part = (split_name, shard, info.layout.split(split_name).num_shards, prefix(order, bits), 1 << bits)
            relabel = info.ids[r.label] if info.ids and info.ids[r.label] != r.label else -1
            parts.setdefault(part, bytearray()).extend(pack_entry(Entry(
                order, r.spill, r.offset, r.length, r.label, r.converted, r.path if r.image else b"", r.cut, r.image,
                relabel)))
    sections, offset = [], 0
    path = entries_path(tmp_dir, task)
    tmp = storage.temp_path(path)
    with storage.open_write(tmp) as out:  # a part at a time: no copy of the whole file in memory
        for part in sorted(parts):
            packed = parts.pop(part)
            out.write(packed)
            sections.append((ENTRY, part, (task, offset, len(packed))))
            offset += len(packed)
    storage.rename(tmp, path)
    yield from sections
    for label, count in sorted(capped.items()):
        yield CAPPED, label, count


class PlanShards(beam.PTransform):
    """(chunk, counts) of prepared chunks -> (ENTRY, part key, Section) and (CAPPED, label, count), exactly
    as `prep.plan.make_plan` decides for the chunks' good inputs."""

    def __init__(self, num_classes: int, options: PlanOptions, tmp_dir: str, group_target: int = GROUP_TARGET,
                 labels: tuple[str, ...] | None = None):
        super().__init__()
        self._num_classes = num_classes
        self._labels = labels
        self._options = options
        self._tmp_dir = tmp_dir
        self._group_target = group_target

    def expand(self, counts):
        return (
            counts
            | "OneKey" >> beam.Map(lambda c: (None, c))
            | "GatherCounts" >> beam.GroupByKey()
            | "Layout" >> beam.FlatMap(layout_tasks, self._num_classes, self._options, self._tmp_dir,
                                         self._group_target, self._labels)
            | "SpreadTasks" >> beam.Reshuffle()
            | "Rank" >> beam.FlatMap(rank_task, self._tmp_dir, self._options.seed)
        )
