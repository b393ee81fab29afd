"""Listing WebDataset shards on workers: a listing task per shard, staging what the driver's listing would.

The driver lists only the shard names (`prep.core.inputs.shard_source`: O(shards)), then:

    tasks   = Create | Reshuffle              a ShardTask each (prep.core.sources.shard_set)
    listed  = ParDo(ListShard)                ShardGroup | TaskDone: the shard's samples, a group (split, label)
                                              at a time, in one work file; its rejects in another
    groups  = by group | GroupByKey | ParDo(SortGroup)    GroupListed: a group's inputs from every shard, in rank
                                              order, cut in buckets (list_source.write_group)
    planned = one key | ParDo(plan)            as list_source.plan, labels named as shard_set.class_names says
    then the chunk, reject and summary steps of list_source.

The chunk and reject files are those `prep.core.run.start.ready_output` stages from the driver's listing
(`webdataset.list_webdataset`): tests/e2e/test_webdataset_convert.py compares the bytes. A listing task
holds one shard's samples, a group task one group's (as a class folder's task does), the plan step one
count per bucket; no sample travels as an element. On the embedded runner the same steps run in the
driver's process (`list_here`). Samples whose json field is a list of labels make a multi-label dataset,
planned as `list_pieces` says (the strata of a multi-label file). Integer labels written two ways (`1`,
`01`) that --classes would name alike make the summary say `fallback`: the driver then lists the shards
itself.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import tempfile
import typing

import apache_beam as beam

from beam_jobs import list_pieces, list_source
from beam_jobs.list_source import ChunkJob, ChunkWritten, GroupListed, PlanInfo, TaskDone, UnknownGroup
from prep.core import storage
from prep.core.accounting import sort_rejects
from prep.core.inputs import FolderSource
from prep.core.listing import InputRef
from prep.core.ordering import group_order, sort_key
from prep.core.run import checkpoints
from prep.core.run_record import refs_sum
from prep.core.sources import held, multilabel, shard_set, webdataset
from prep.core.sources.shard_set import ShardSource, ShardTask
from prep.core.workdir import WorkDir


class ShardGroup(typing.NamedTuple):
    """A listing task's inputs of one group, in rank order: bytes [start, end) of its work file, and of its
    members' copy (`WorkDir.members_data(task, 0)`) [data_start, data_end), or -1s when none is held."""

    split: str | None
    label: str
    task: int
    place: int  # 1 + the group's place among the task's groups (0 names the task's file)
    path: str
    start: int
    end: int
    data_start: int = -1
    data_end: int = -1


class GroupData(typing.NamedTuple):
    """A group's members' bytes in its rank order: file `data`, whose bytes `offsets[b]` on are bucket b's
    (as GroupListed.offsets are of its refs file `path`)."""

    path: str
    data: str
    offsets: tuple[int, ...]


class Relabelled(typing.NamedTuple):
    """A chunk to write, the class name of the inputs of each group file whose label indexes --classes, and
    where its members' bytes are held, in its order (held.Range), if they are."""

    job: ChunkJob
    labels: tuple[tuple[str, str], ...]  # (group file, class name)
    data: tuple[held.Range, ...] = ()


class ListShard(beam.DoFn):
    """ShardTask -> a ShardGroup per (split, label) among its samples, then its TaskDone. A remote or compressed
    shard's members are copied as it is streamed (`list_shard`'s `copy`), each group's in rank order."""

    def __init__(self, source: ShardSource, seed: int, work: WorkDir):
        self._source, self._seed, self._work = source, seed, work

    def process(self, task: ShardTask):
        src = self._source
        # a remote shard's members, or a compressed one's, are copied as it streams: read again, each would
        # cost a request, or decompressing the shard up to it
        hold = storage.is_remote(src.source) or webdataset.compressed(task.shard)
        with tempfile.TemporaryFile() if hold else contextlib.nullcontext() as copy:
            refs, rejects = webdataset.list_shard(src.source, task.shard, task.split, src.label_key, copy)
            by_group: dict[tuple[str, str], list[InputRef]] = collections.defaultdict(list)
            for ref in refs:
                by_group[group_order((ref.split, list_pieces.group_label(ref.label)))].append(ref)
            path, lines, size, groups = self._work.listed_group(task.task, 0), [], 0, []
            where: list[tuple[int, int]] = []  # (offset, length) in the shard of each member, in the file's order
            held_size = 0  # bytes of the members' copy so far
            for index, key in enumerate(sorted(by_group)):
                members = sorted(by_group[key], key=lambda r: (sort_key(self._seed, r.path), r.path))
                start, data_start = size, held_size
                for ref in members:
                    line = (json.dumps(ref.fields()) + "\n").encode()
                    lines.append(line)
                    size += len(line)
                    where.append(_where(ref))
                    held_size += where[-1][1]
                data = (data_start, held_size) if hold else (-1, -1)
                label = list_pieces.group_label(members[0].label)
                groups.append(ShardGroup(members[0].split, label, task.task, index + 1, path, start, size, *data))
            if lines:
                storage.write_streamed(path, lines)
            if hold and where:
                storage.write_streamed(self._work.members_data(task.task, 0), _pieces(copy, where))
        yield from groups
        rejects_path = self._work.listed_rejects(task.task)
        storage.write_atomic(rejects_path, checkpoints.rejects_bytes(sort_rejects(rejects)))
        yield TaskDone(task.task, rejects_path, (), "classes", None)


def _where(ref: InputRef) -> tuple[int, int]:
    member = webdataset.parse_member(ref.path)
    assert member is not None  # list_shard's refs are member paths
    return member[1], member[2]


def _pieces(f, where: list[tuple[int, int]]):
    for offset, length in where:
        f.seek(offset)
        yield storage.read_exact(f, length)


def sort_group(element, seed: int, work: WorkDir):
    """(group, [ShardGroup]) -> the group's GroupListed: its file in rank order, named after its first task's
    piece; and its GroupData when its members are held, merged from the pieces' copies (one streamed read
    each, as each piece is in rank order)."""
    _, pieces = element
    pieces = sorted(pieces, key=lambda g: g.task)
    tagged = sorted(
        (sort_key(seed, r.path), r.path, i, r)
        for i, g in enumerate(pieces)
        for r in list_source.read_refs(g.path, g.start, g.end)
    )
    first = pieces[0]
    listed = list_source.write_group(work.listed_group(first.task, first.place), [t[3] for t in tagged], seed)
    yield listed
    if first.data_start < 0:
        return
    data = work.members_data(first.task, first.place)
    readers = _Readers(work, pieces)
    try:
        storage.write_streamed(data, (readers.read(i, _where(ref)[1]) for _, _, i, ref in tagged))
    finally:
        readers.close()
    offsets, at, n = [0], 0, 0
    lengths = [_where(t[3])[1] for t in tagged]
    for count in listed.counts:
        at += sum(lengths[n : n + count])
        n += count
        offsets.append(at)
    yield GroupData(listed.path, data, tuple(offsets))


def plan(element, source: ShardSource, classes: tuple[str, ...] | None, work: WorkDir):
    """(None, [GroupListed | TaskDone]) -> as `list_source.plan`, each ChunkJob Relabelled; samples with
    lists of labels as `list_pieces.plan_multilabel`, their members read again by range (as the driver's
    listing has them).

    Raises:
        SourceError: no sample has an image and a label (naming the rejects' reasons), or as
            `list_source.plan`.
    """
    _, items = element
    groups = [g for g in items if isinstance(g, GroupListed)]
    done = [d for d in items if isinstance(d, TaskDone)]
    held_data = {d.path: d for d in items if isinstance(d, GroupData)}
    refs_offsets = {g.path: g.offsets for g in groups}
    if not groups:
        rejects = (r for d in done if d.rejects for r in checkpoints.read_rejects_file(d.rejects))
        reasons = collections.Counter(r.reason for r in rejects)
        raise shard_set.no_samples(source.source, len(source.tasks), reasons)
    if any(multilabel.is_multi(g.label) for g in groups):
        assert source.plan is not None  # shard_source gives it
        n = len(source.tasks)
        none = functools.partial(shard_set.no_samples, source.source, n)
        multi = list_pieces.MultiSource(source.source, n, source.plan, none)
        for item in list_pieces.plan_multilabel(groups, done, multi, classes, work):
            yield Relabelled(item, ()) if isinstance(item, ChunkJob) else item
        return
    names = shard_set.class_names((g.label for g in groups), classes)
    labels: dict[str, str] = {}
    if names.relabel is not None:
        assert classes is not None  # class_names relabels for --classes only
        named = collections.Counter((g.split, names.relabel.get(g.label)) for g in groups)
        if any(n > 1 for (_, label), n in named.items() if label is not None):
            yield PlanInfo("integer labels written two ways name one class of --classes")
            return
        for g in [g for g in groups if g.label in names.past_end]:
            yield UnknownGroup(g.path, g.label, names.past_end_detail(g.label, classes))
        groups = [g._replace(label=names.relabel[g.label]) for g in groups if g.label not in names.past_end]
        labels = {g.path: g.label for g in groups}
    folders = FolderSource(source.source, "classes", names.names, ())
    for item in list_source.plan((None, [*groups, *done]), folders, classes):
        if isinstance(item, ChunkJob):
            data: tuple[held.Range, ...] = ()
            if all(p in held_data for p, _, _ in item.pieces):
                data = tuple(_data_range(held_data[p], refs_offsets[p], s, e) for p, s, e in item.pieces)
            yield Relabelled(item, tuple((p, labels[p]) for p, _, _ in item.pieces if p in labels), data)
        else:
            yield item


class _Readers:
    """Readers of the pieces' copies, each going on where it stopped: at most `OPEN` open at once (a remote
    reader reads ahead up to 16 MiB); one closed to make room is opened again where it stopped, one more
    request, so a group spread over more shards than that costs up to a request a member again."""

    OPEN = 64

    def __init__(self, work: WorkDir, pieces: list[ShardGroup]) -> None:
        self._work, self._pieces = work, pieces
        self._at = [g.data_start for g in pieces]
        self._open: collections.OrderedDict[int, typing.BinaryIO] = collections.OrderedDict()

    def read(self, i: int, n: int) -> bytes:
        f = self._open.pop(i, None)
        if f is None:
            if len(self._open) >= self.OPEN:
                self._open.popitem(last=False)[1].close()
            g = self._pieces[i]
            f = storage.open_read(self._work.members_data(g.task, 0))
            f.seek(self._at[i])
        self._open[i] = f
        data = storage.read_exact(f, n)
        if len(data) != n:
            raise OSError(f"members' copy {self._work.members_data(self._pieces[i].task, 0)} is cut short")
        self._at[i] += n
        return data

    def close(self) -> None:
        for f in self._open.values():
            f.close()


def _data_range(group: GroupData, offsets: list[int], start: int, end: int) -> held.Range:
    """The bytes of a group's members' copy that hold its refs in bytes [start, end) of its refs file: bucket
    boundaries map one to the other (an empty bucket starts where the one after does, in both)."""
    return group.data, group.offsets[offsets.index(start)], group.offsets[offsets.index(end)]


class WriteChunk(beam.DoFn):
    """Relabelled -> its chunk file (`checkpoints.write_listing`), and a ChunkWritten."""

    def __init__(self, work: WorkDir):
        self._work = work

    def process(self, item: Relabelled):
        refs = list_pieces.chunk_refs(item.job.pieces, dict(item.labels))
        checkpoints.write_listing(self._work, item.job.chunk, refs)
        if item.data:
            held.write_chunk_ranges(self._work, item.job.chunk, item.data)
        yield ChunkWritten(item.job.chunk, len(refs), refs_sum(refs))


def _steps(source: ShardSource, seed: int, work: WorkDir) -> list_pieces.PieceSteps:
    return list_pieces.PieceSteps(
        "ListShards",
        ListShard(source, seed, work),
        ShardGroup,
        sort_group,
        plan,
        Relabelled,
        WriteChunk(work),
    )


def build_listing(p: beam.Pipeline, source: ShardSource, seed: int, classes: tuple[str, ...] | None, output: str):
    """Adds the listing steps to pipeline `p` (see the module docstring)."""
    work = WorkDir(output)
    list_pieces.build(p, list(source.tasks), source, _steps(source, seed, work), seed, classes, work)


def list_here(source: ShardSource, seed: int, classes: tuple[str, ...] | None, output: str) -> None:
    """The steps of `build_listing`, one after another in this process (for the embedded runner)."""
    work = WorkDir(output)
    list_pieces.run_here(list(source.tasks), source, _steps(source, seed, work), seed, classes, work)
