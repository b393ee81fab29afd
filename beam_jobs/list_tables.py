"""Listing Parquet and Arrow files on workers: a listing task per file, staging what the driver's listing would,
with the images of the rows listed copied in each chunk's order.

The driver reads only the files' schemas (`prep.core.sources.parquet.plan_tables`: which column is which,
the ClassLabel names, the splits; O(files)), then:

    tasks   = Create | Reshuffle              a TableTask each
    listed  = ParDo(ListTable)                ShardGroup | TaskDone: the file's rows, a group (split, label) at
                                              a time in rank order, in one work file, their images in another
                                              (members_data(task, 0)), read a row group at a time; its rejects
    groups  = by group | GroupByKey | ParDo(sort_group)   GroupListed and TableData: a group's rows from every
                                              file in rank order (list_source.write_group), their images merged
                                              in that order, one streamed read per piece
    planned = one key | ParDo(plan)            as list_source.plan; integer labels index --classes as the
                                              driver's listing does (`parquet.list_tables`)
    then the chunk, reject and summary steps of list_source; a chunk's writer also records where its rows'
    images are (prep/core/sources/table_held.py), for the prepare step to read a batch at a time.

The chunk and reject files are those `prep.core.run.start.ready_output` stages from the driver's listing
(tests/e2e/test_list_tables.py compares the bytes). A listing task holds one row group's image column and
one file's labels, a group task one group's rows, the plan step one count per bucket; no row travels as an
element. On the embedded runner the same steps run in the driver's process (`list_here`). Integer labels
written two ways (`1`, `01`) that --classes would name alike make the summary say `fallback`: the driver
then lists the files itself.

Each image is copied twice (the task's copy, the group's merge) and spilled once more by the prepare step,
against a row group decoded per image when kept rows are read by (file, row) in the listing's seeded
order: docs/benchmarks.md, Parquet.
"""

from __future__ import annotations

import array
import collections
import itertools
import json
import tempfile
import typing

import apache_beam as beam

from beam_jobs import list_source
from beam_jobs.list_shards import ShardGroup, _pieces, _Readers
from beam_jobs.list_source import ChunkJob, ChunkWritten, GroupListed, PlanInfo, TaskDone, UnknownGroup
from prep.core import storage
from prep.core.accounting import sort_rejects
from prep.core.inputs import FolderSource
from prep.core.listing import InputRef
from prep.core.ordering import group_order, sort_key
from prep.core.run import checkpoints
from prep.core.run_record import refs_sum
from prep.core.sources import parquet, table_held
from prep.core.sources.parquet import TableSource, TableTask
from prep.core.workdir import WorkDir

_INT8 = 8  # bytes of a length in a lengths file


class GroupRows(typing.NamedTuple):
    """A group's images in its rank order: file `data`, whose bytes `offsets[b]` on are bucket b's (as
    GroupListed.offsets are of its refs file `path`), and each row's length in file `lengths`, bucket b's
    from row `firsts[b]` on."""

    path: str
    data: str
    lengths: str
    offsets: tuple[int, ...]
    firsts: tuple[int, ...]


class RowsRange(typing.NamedTuple):
    """A piece of a chunk: its images' bytes [start, end) of `data`, their lengths rows [first, last) of
    `lengths`."""

    data: str
    start: int
    end: int
    lengths: str
    first: int
    last: int


class TableChunk(typing.NamedTuple):
    """A chunk to write, the class name of the rows of each group file whose label indexes --classes, and
    where its rows' images are, by piece."""

    job: ChunkJob
    labels: tuple[tuple[str, str], ...]  # (group file, class name)
    rows: tuple[RowsRange, ...] = ()


class ListTable(beam.DoFn):
    """TableTask -> a ShardGroup per (split, label) among its rows, then its TaskDone. The images of the rows
    listed are copied as the file is read, a row group at a time (`parquet.list_file`), each group's in rank
    order; a piece's lines carry each row's image length after its fields."""

    def __init__(self, source: TableSource, seed: int, work: WorkDir):
        self._source, self._seed, self._work = source, seed, work

    def process(self, task: TableTask):
        with tempfile.TemporaryFile() as copy:
            listed = parquet.list_file(self._source, task, copy)
            by_group: dict[tuple, list[tuple[InputRef, int, int]]] = collections.defaultdict(list)
            at = 0
            for ref, n in zip(listed.refs, listed.lengths):
                by_group[group_order((ref.split, ref.label))].append((ref, at, n))
                at += max(n, 0)
            path, lines, size, groups = self._work.listed_group(task.task, 0), [], 0, []
            where: list[tuple[int, int]] = []  # (offset, length) in the copy of each image, in the file's order
            held = 0  # bytes of the images' file so far
            for index, key in enumerate(sorted(by_group)):
                rows = sorted(by_group[key], key=lambda r: (sort_key(self._seed, r[0].path), r[0].path))
                start, data_start = size, held
                for ref, offset, n in rows:
                    line = (json.dumps([*ref.fields(), n]) + "\n").encode()
                    lines.append(line)
                    size += len(line)
                    if n >= 0:
                        where.append((offset, n))
                        held += n
                first = rows[0][0]
                data = (data_start, held)
                groups.append(ShardGroup(first.split, first.label, task.task, index + 1, path, start, size, *data))
            if lines:
                storage.write_streamed(path, lines)
                storage.write_streamed(self._work.members_data(task.task, 0), _pieces(copy, where))
        yield from groups
        rejects_path = self._work.listed_rejects(task.task)
        storage.write_atomic(rejects_path, checkpoints.rejects_bytes(sort_rejects(listed.rejects)))
        yield TaskDone(task.task, rejects_path, (), "classes", None)


def _piece_rows(piece: ShardGroup) -> list[tuple[InputRef, int]]:
    with storage.open_read(piece.path) as f:
        f.seek(piece.start)
        data = storage.read_exact(f, piece.end - piece.start)
    return [(InputRef(*fields[:-1]), fields[-1]) for fields in map(json.loads, data.splitlines())]


def sort_group(element, seed: int, work: WorkDir):
    """(group, [ShardGroup]) -> the group's GroupListed (its file in rank order, named after its first task's
    piece) and its GroupRows: the pieces' images merged in that order, one streamed read each."""
    _, pieces = element
    pieces = sorted(pieces, key=lambda g: g.task)
    tagged = sorted((sort_key(seed, r.path), r.path, i, r, n) for i, g in enumerate(pieces) for r, n in _piece_rows(g))
    first = pieces[0]
    listed = list_source.write_group(work.listed_group(first.task, first.place), [t[3] for t in tagged], seed)
    yield listed
    data, lengths = work.members_data(first.task, first.place), work.members_lengths(first.task, first.place)
    readers = _Readers(work, pieces)
    try:
        storage.write_streamed(data, (readers.read(i, n) for _, _, i, _, n in tagged if n >= 0))
    finally:
        readers.close()
    sizes = [t[4] for t in tagged]
    storage.write_atomic(lengths, array.array("q", sizes).tobytes())
    offsets, firsts, at, row = [0], [0], 0, 0
    for count in listed.counts:
        at += sum(max(n, 0) for n in sizes[row : row + count])
        row += count
        offsets.append(at)
        firsts.append(row)
    yield GroupRows(listed.path, data, lengths, tuple(offsets), tuple(firsts))


def plan(element, source: TableSource, classes: tuple[str, ...] | None):
    """(None, [GroupListed | GroupRows | TaskDone]) -> as `list_source.plan`, each ChunkJob a TableChunk.

    Raises:
        SourceError: no row has a usable label (naming the rejects' reasons), or as `list_source.plan`.
    """
    _, items = element
    groups = [g for g in items if isinstance(g, GroupListed)]
    done = [d for d in items if isinstance(d, TaskDone)]
    rows = {d.path: d for d in items if isinstance(d, GroupRows)}
    refs_offsets = {g.path: g.offsets for g in groups}

    def no_rows(more: int = 0) -> Exception:
        rejects = (r for d in done if d.rejects for r in checkpoints.read_rejects_file(d.rejects))
        reasons = collections.Counter(r.reason for r in rejects)
        reasons["unknown_label"] += more
        return parquet.no_rows(source.source, len(source.tasks), +reasons)

    if not groups:
        raise no_rows()
    found = {g.label for g in groups}
    labels: dict[str, str] = {}
    if source.names is None and classes is not None and all(parquet.INT.fullmatch(n) for n in found):
        past = [g for g in groups if not 0 <= int(g.label) < len(classes)]
        groups = [g._replace(label=classes[int(g.label)]) for g in groups if 0 <= int(g.label) < len(classes)]
        if any(n > 1 for n in collections.Counter((g.split, g.label) for g in groups).values()):
            yield PlanInfo("integer labels written two ways name one class of --classes")
            return
        if not groups:
            raise no_rows(sum(sum(g.counts) for g in past))
        for g in past:
            yield UnknownGroup(g.path, g.label, parquet.past_end(g.label, classes))
        labels = {g.path: g.label for g in groups}
    folders = FolderSource(source.source, "classes", parquet.found_names(source.names, found), ())
    for item in list_source.plan((None, [*groups, *done]), folders, classes):
        if isinstance(item, ChunkJob):
            held: tuple[RowsRange, ...] = ()
            if all(p in rows for p, _, _ in item.pieces):
                held = tuple(_rows_range(rows[p], refs_offsets[p], s, e) for p, s, e in item.pieces)
            yield TableChunk(item, tuple((p, labels[p]) for p, _, _ in item.pieces if p in labels), held)
        else:
            yield item


def _rows_range(group: GroupRows, offsets: list[int], start: int, end: int) -> RowsRange:
    """The images and lengths of a group's rows in bytes [start, end) of its refs file: bucket boundaries map
    one to the other (an empty bucket starts where the one after does, in all three)."""
    b, e = offsets.index(start), offsets.index(end)
    return RowsRange(group.data, group.offsets[b], group.offsets[e], group.lengths, group.firsts[b], group.firsts[e])


class WriteChunk(beam.DoFn):
    """TableChunk -> its chunk file (`checkpoints.write_listing`) and where its rows' images are
    (`table_held.write_chunk_rows`), and a ChunkWritten."""

    def __init__(self, work: WorkDir):
        self._work = work

    def process(self, item: TableChunk):
        labels = dict(item.labels)
        refs = []
        for path, start, end in item.job.pieces:
            got = list_source.read_refs(path, start, end)
            refs += [r._replace(label=labels[path]) for r in got] if path in labels else got
        checkpoints.write_listing(self._work, item.job.chunk, refs)
        if item.rows:
            lengths = array.array("q")
            for r in item.rows:
                with storage.open_read(r.lengths) as f:
                    f.seek(r.first * _INT8)
                    lengths.frombytes(storage.read_exact(f, (r.last - r.first) * _INT8))
            ranges = [(r.data, r.start, r.end) for r in item.rows]
            table_held.write_chunk_rows(self._work, item.job.chunk, ranges, lengths.tolist())
        yield ChunkWritten(item.job.chunk, len(refs), refs_sum(refs))


def build_listing(p: beam.Pipeline, source: TableSource, seed: int, classes: tuple[str, ...] | None, output: str):
    """Adds the listing steps to pipeline `p` (see the module docstring)."""
    work = WorkDir(output)
    one_key = lambda item: (None, item)  # noqa: E731
    listed = (
        p
        | "ListTasks" >> beam.Create(list(source.tasks))
        | "SpreadTasks" >> beam.Reshuffle()
        | "ListTables" >> beam.ParDo(ListTable(source, seed, work))
    )
    grouped = (
        listed
        | "Pieces" >> beam.FlatMap(list_source.of_kind(ShardGroup))
        | "ByGroup" >> beam.Map(lambda g: (group_order((g.split, g.label)), g))
        | "GatherGroups" >> beam.GroupByKey()
        | "SortGroups" >> beam.FlatMap(sort_group, seed, work)
    )
    done = listed | "Done" >> beam.FlatMap(list_source.of_kind(TaskDone))
    planned = (
        (grouped, done)
        | "PlanParts" >> beam.Flatten()
        | "PlanOneKey" >> beam.Map(one_key)
        | "GatherListed" >> beam.GroupByKey()
        | "PlanChunks" >> beam.FlatMap(plan, source, classes)
    )
    list_source.stage_planned(planned, TableChunk, WriteChunk(work), (done,), work)


def list_here(source: TableSource, seed: int, classes: tuple[str, ...] | None, output: str) -> None:
    """The steps of `build_listing`, one after another in this process (for the embedded runner), holding
    what the pipeline's elements would: O(files x groups + buckets + chunks)."""
    work = WorkDir(output)
    lister, writer = ListTable(source, seed, work), WriteChunk(work)
    listed = [item for task in source.tasks for item in lister.process(task)]
    pieces = sorted((g for g in listed if isinstance(g, ShardGroup)), key=lambda g: group_order((g.split, g.label)))
    done = [d for d in listed if isinstance(d, TaskDone)]
    groups = [
        item
        for key, run in itertools.groupby(pieces, key=lambda g: group_order((g.split, g.label)))
        for item in sort_group((key, list(run)), seed, work)
    ]
    planned = list(plan((None, [*groups, *done]), source, classes))
    written = [w for job in planned if isinstance(job, TableChunk) for w in writer.process(job)]
    unknown = [i for i in planned if isinstance(i, UnknownGroup)]
    rejected = list(list_source.write_rejects((None, [*done, *unknown]), work))
    info = [i for i in planned if isinstance(i, PlanInfo)]
    for _ in list_source.write_summary((None, [*info, *written, *rejected]), work):
        pass
