"""Listing Parquet and Arrow files on workers: a listing task per file, staging what the driver's listing would,
with the images of the rows listed copied in each chunk's order.

The driver reads only the files' schemas (`prep.core.sources.parquet.plan_tables`: which column is which,
the ClassLabel names, the splits; O(files)), then:

    tasks   = Create | Reshuffle              a TableTask each
    listed  = ParDo(ListTable)                ShardGroup | TaskDone: the file's rows, a group (split, label) at
                                              a time in rank order, in one work file; the images of the rows
                                              listed, in row order, in another (members_data(task, 0)), read a
                                              row group at a time; its rejects
    groups  = by group | GroupByKey | ParDo(sort_group)   GroupListed and GroupRows: a group's rows from every
                                              file in rank order (list_source.write_group), and where each one's
                                              image is (members_rows)
    planned = one key | ParDo(plan)            as list_source.plan; integer labels index --classes as the
                                              driver's listing does (`parquet.list_tables`); rows with lists of labels
                                              as `list_pieces.plan_multilabel`
    then the chunk, reject and summary steps of list_source; a chunk's writer also records where its rows'
    images are (prep/core/sources/table_held.py), for the prepare step to read a batch at a time.

The chunk and reject files are those `prep.core.run.start.ready_output` stages from the driver's listing
(tests/e2e/test_list_tables.py compares the bytes). A listing task holds one row group's image column and
one file's labels, a group task one group's rows, the plan step one count per bucket; no row travels as an
element. On the embedded runner the same steps run in the driver's process (`list_here`). Integer labels
written two ways (`1`, `01`) that --classes would name alike make the summary say `fallback`: the driver
then lists the files itself.

Each image is copied once, in row order, and spilled once more by the prepare step, which reads a batch's
images by range from the copies (a range a row, adjacent ones joined): against a row group decoded per
image when kept rows are read by (file, row) in the listing's seeded order, and against merging each
group's images in rank order (one more copy) for fewer ranges: docs/benchmarks.md, Parquet. From an
object store as work directory that is a ranged read per image in the prepare step.
"""

from __future__ import annotations

import array
import collections
import functools
import json
import typing

import apache_beam as beam

from beam_jobs import list_pieces, list_source
from beam_jobs.list_shards import ShardGroup
from beam_jobs.list_source import ChunkJob, ChunkWritten, GroupListed, PlanInfo, TaskDone, UnknownGroup
from prep.core import storage
from prep.core.accounting import sort_rejects
from prep.core.inputs import FolderSource
from prep.core.listing import InputRef
from prep.core.ordering import group_order, sort_key
from prep.core.run import checkpoints
from prep.core.run_record import refs_sum
from prep.core.sources import multilabel, parquet, table_held
from prep.core.sources.held import Range
from prep.core.sources.parquet import TableSource, TableTask
from prep.core.workdir import WorkDir

_ROW = 24  # bytes of a row in a members_rows file: (task, offset, length), int64


class GroupRows(typing.NamedTuple):
    """Where a group's images are, in its rank order: file `rows` (members_rows), bucket b's from row
    `firsts[b]` on (as GroupListed.offsets are its refs file `path`'s bytes)."""

    path: str
    rows: str
    firsts: tuple[int, ...]


class RowsRange(typing.NamedTuple):
    """A piece of a chunk: its rows [first, last) of a group's `rows` file."""

    rows: str
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
    listed are copied as the file is read, a row group at a time (`parquet.list_file`); a piece's lines
    carry each row's image offset in the copy and length after its fields."""

    def __init__(self, source: TableSource, seed: int, work: WorkDir):
        self._source, self._seed, self._work = source, seed, work

    def process(self, task: TableTask):
        data = self._work.members_data(task.task, 0)
        tmp = storage.temp_path(data)
        try:
            with storage.open_write(tmp) as copy:
                listed = parquet.list_file(self._source, task, copy)
            storage.rename(tmp, data)
        except BaseException:
            storage.delete(tmp)
            raise
        by_group: dict[tuple, list[tuple[InputRef, int, int]]] = collections.defaultdict(list)
        at = 0
        for ref, n in zip(listed.refs, listed.lengths):
            by_group[group_order((ref.split, list_pieces.group_label(ref.label)))].append((ref, at, n))
            at += max(n, 0)
        path, lines, size, groups = self._work.listed_group(task.task, 0), [], 0, []
        for index, key in enumerate(sorted(by_group)):
            rows = sorted(by_group[key], key=lambda r: (sort_key(self._seed, r[0].path), r[0].path))
            start = size
            for ref, offset, n in rows:
                line = (json.dumps([*ref.fields(), offset, n]) + "\n").encode()
                lines.append(line)
                size += len(line)
            first = rows[0][0]
            label = list_pieces.group_label(first.label)
            groups.append(ShardGroup(first.split, label, task.task, index + 1, path, start, size))
        if lines:
            storage.write_streamed(path, lines)
        yield from groups
        rejects_path = self._work.listed_rejects(task.task)
        storage.write_atomic(rejects_path, checkpoints.rejects_bytes(sort_rejects(listed.rejects)))
        yield TaskDone(task.task, rejects_path, (), "classes", None)


def _piece_rows(piece: ShardGroup) -> list[tuple[InputRef, int, int]]:
    with storage.open_read(piece.path) as f:
        f.seek(piece.start)
        data = storage.read_exact(f, piece.end - piece.start)
    return [(InputRef(*fields[:-2]), fields[-2], fields[-1]) for fields in map(json.loads, data.splitlines())]


def sort_group(element, seed: int, work: WorkDir):
    """(group, [ShardGroup]) -> the group's GroupListed (its file in rank order, named after its first task's
    piece) and its GroupRows: where each row's image is, in that order."""
    _, pieces = element
    pieces = sorted(pieces, key=lambda g: g.task)
    tagged = sorted(
        (sort_key(seed, r.path), r.path, g.task, offset, n) + (r,) for g in pieces for r, offset, n in _piece_rows(g)
    )
    first = pieces[0]
    listed = list_source.write_group(work.listed_group(first.task, first.place), [t[5] for t in tagged], seed)
    yield listed
    rows = work.members_rows(first.task, first.place)
    storage.write_atomic(rows, array.array("q", [v for t in tagged for v in t[2:5]]).tobytes())
    firsts = [0]
    for count in listed.counts:
        firsts.append(firsts[-1] + count)
    yield GroupRows(listed.path, rows, tuple(firsts))


def plan(element, source: TableSource, classes: tuple[str, ...] | None, work: WorkDir):
    """(None, [GroupListed | GroupRows | TaskDone]) -> as `list_source.plan`, each ChunkJob a TableChunk; rows
    with lists of labels as `list_pieces.plan_multilabel`, each chunk's held images recorded here.

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
    if any(multilabel.is_multi(g.label) for g in groups):
        assert source.plan is not None  # table_source gives it
        none = functools.partial(parquet.no_rows, source.source, len(source.tasks))
        multi = list_pieces.MultiSource(source.source, len(source.tasks), source.plan, none)
        names = classes if classes is not None else source.names
        places = _row_places(groups, rows, work)
        for item in list_pieces.plan_multilabel(groups, done, multi, names, work):
            if isinstance(item, ChunkJob):
                ((path, start, end),) = item.pieces
                refs = list_source.read_refs(path, start, end)
                if all(r.path in places for r in refs):
                    table_held.write_chunk_rows(work, item.chunk, [places[r.path] for r in refs])
                yield TableChunk(item, ())
            else:
                yield item
        return
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


def _row_places(groups: list[GroupListed], rows: dict[str, GroupRows], work: WorkDir) -> dict[str, Range]:
    """{row path: (its image's copy, offset, length)} of the rows of `groups` (a multi-label source's: its
    chunks' rows are dealt in strata, so each chunk's places are written by the plan step)."""
    places: dict[str, Range] = {}
    for g in groups:
        if g.path in rows:
            where = array.array("q", storage.read_bytes(rows[g.path].rows))
            refs = list_source.read_refs(g.path, 0, g.offsets[-1])
            for ref, (task, offset, n) in zip(refs, zip(*(iter(where),) * 3)):
                places[ref.path] = (work.members_data(task, 0), offset, n)
    return places


def _rows_range(group: GroupRows, offsets: list[int], start: int, end: int) -> RowsRange:
    """Where the images of a group's rows in bytes [start, end) of its refs file are: bucket boundaries map
    one to the other (an empty bucket starts where the one after does, in both)."""
    return RowsRange(group.rows, group.firsts[offsets.index(start)], group.firsts[offsets.index(end)])


class WriteChunk(beam.DoFn):
    """TableChunk -> its chunk file (`checkpoints.write_listing`) and where its rows' images are
    (`table_held.write_chunk_rows`), and a ChunkWritten."""

    def __init__(self, work: WorkDir):
        self._work = work

    def process(self, item: TableChunk):
        refs = list_pieces.chunk_refs(item.job.pieces, dict(item.labels))
        checkpoints.write_listing(self._work, item.job.chunk, refs)
        if item.rows:
            where = array.array("q")
            for r in item.rows:
                with storage.open_read(r.rows) as f:
                    f.seek(r.first * _ROW)
                    where.frombytes(storage.read_exact(f, (r.last - r.first) * _ROW))
            places = [(self._work.members_data(t, 0), o, n) for t, o, n in zip(*(iter(where),) * 3)]
            table_held.write_chunk_rows(self._work, item.job.chunk, places)
        yield ChunkWritten(item.job.chunk, len(refs), refs_sum(refs))


def _steps(source: TableSource, seed: int, work: WorkDir) -> list_pieces.PieceSteps:
    return list_pieces.PieceSteps(
        "ListTables", ListTable(source, seed, work), ShardGroup, sort_group, plan, TableChunk, WriteChunk(work)
    )


def build_listing(p: beam.Pipeline, source: TableSource, seed: int, classes: tuple[str, ...] | None, output: str):
    """Adds the listing steps to pipeline `p` (see the module docstring)."""
    work = WorkDir(output)
    list_pieces.build(p, list(source.tasks), source, _steps(source, seed, work), seed, classes, work)


def list_here(source: TableSource, seed: int, classes: tuple[str, ...] | None, output: str) -> None:
    """The steps of `build_listing`, one after another in this process (for the embedded runner)."""
    work = WorkDir(output)
    list_pieces.run_here(list(source.tasks), source, _steps(source, seed, work), seed, classes, work)
