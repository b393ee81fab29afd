"""Listing class folders on workers: a first pipeline that stages the listing as the driver would, `build_listing`.

The driver lists only the top of SOURCE (`prep.core.inputs.folder_source`: O(classes)), then:

    tasks   = Create | Reshuffle            a FolderTask each: a class folder (local), or all of a remote SOURCE
    listed  = ParDo(ListFolders)            GroupListed | TaskDone: a group's (split, class) inputs go to
                                            a work file in rank order, cut in buckets (ordering.plan_chunks)
    planned = one key | ParDo(plan)          ChunkJob | UnknownGroup | PlanInfo: groups' buckets packed in chunks
    chunks  = ParDo(WriteChunk)             ChunkWritten: the chunk file, read from byte ranges of group files
    rejects = TaskDone, UnknownGroup | one key | ParDo(write_rejects)    RejectsWritten
    summary = PlanInfo, ChunkWritten, RejectsWritten | one key | ParDo(write_summary)

The chunk and reject files are those `prep.core.run.start.ready_output` stages from a driver's `Listing`
(the same bytes: tests/e2e/test_list_source.py), and listed/summary.json holds what the driver reads back:
classes, splits, chunk sizes, the run record's listing digest; O(classes + chunks). No input reference
travels as an element, so no runner holds the listing in memory; a listing task holds one group's
inputs (to sort them), the plan step one count per bucket. On the embedded runner the same steps run in
the driver's process without a pipeline (`list_here`). What a task cannot decide alone (a symlinked
folder inside a class folder, which may name a folder listed elsewhere; a remote listing not in name
order) makes the summary say `fallback`: the driver then lists SOURCE itself, as before.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import typing
from collections.abc import Iterable

import apache_beam as beam

from beam_jobs.list_remote import remote_names
from prep.core import storage
from prep.core.accounting import sort_rejects
from prep.core.inputs import FolderSource, FolderTask
from prep.core.listing import (
    InputRef,
    LinkedFolder,
    Reject,
    check_some_listed,
    check_splits,
    detect_layout,
    entry_of,
    fields_json,
    folder_classes,
    lines_sum,
    walk,
)
from prep.core.ordering import Group, bucket_of, buckets_for, group_order, plan_chunks, sort_key
from prep.core.run import checkpoints
from prep.core.sources import parquet, webdataset
from prep.core.workdir import WorkDir


class GroupListed(typing.NamedTuple):
    """A listing task's inputs of one group, in work file `path`: `counts` per bucket, and the byte offset
    where each bucket starts (and, last, the file's size)."""

    path: str
    split: str | None
    label: str
    first: str  # its first path by name: the input an error about its split names
    counts: list[int]
    offsets: list[int]


class TaskDone(typing.NamedTuple):
    task: int
    rejects: str | None  # the task's rejects file
    dirs: tuple[str, ...]  # remote: the folders one and two levels down, to find the classes
    layout: str
    fallback: str | None  # why the driver must list SOURCE itself


class ChunkJob(typing.NamedTuple):
    chunk: int
    pieces: list[tuple[str, int, int]]  # (group file, start, end): byte ranges, in listing order


class UnknownGroup(typing.NamedTuple):
    path: str  # its group file
    label: str
    detail: str | None = None  # the rejects' detail when not "not in --classes"


class PlanInfo(typing.NamedTuple):
    fallback: str | None
    classes: tuple[str, ...] = ()
    splits: tuple[str, ...] = ()
    listed: tuple[str, ...] = ()  # the classes that list an input
    sizes: tuple[int, ...] = ()
    task: str = "classification"  # multilabel: WebDataset or table samples with lists of labels (list_pieces)
    groups: tuple[str, ...] | None = None  # the planner's groups when not the classes (Listing.groups)


class ChunkWritten(typing.NamedTuple):
    chunk: int
    size: int
    refs_sum: int  # run_record.refs_sum of its inputs


class RejectsWritten(typing.NamedTuple):
    rejected: int
    sha256: str


def of_kind(kind):
    return lambda item: [item] if isinstance(item, kind) else []


class ListFolders(beam.DoFn):
    """FolderTask -> a GroupListed per group it lists, then its TaskDone."""

    def __init__(self, source: FolderSource, seed: int, work: WorkDir):
        self._source, self._seed, self._work = source, seed, work

    def process(self, task: FolderTask):
        src = self._source
        groups: list[GroupListed] = []
        rejects: list[Reject] = []
        layout, dirs = src.layout, ()
        try:
            with contextlib.ExitStack() as stack:
                if src.classes is None:  # remote: every object under SOURCE, by one task
                    names, dirs = remote_names(src.source, stack)
                    if webdataset.only_shards(names()) or parquet.only_tables(names()):
                        # shards: the driver names them, list_shards lists them; tables: listed on the driver
                        yield TaskDone(task.task, None, (), layout, "WebDataset shards or Parquet/Arrow tables")
                        return
                    layout = detect_layout(dirs) if layout == "auto" else layout
                    entries: Iterable[tuple[str, str | None]] = ((n, None) for n in names())
                else:
                    entries = walk(src.source, task.start, task.recursive, links=False)
                self._route(task.task, entries, layout, groups, rejects)
        except LinkedFolder as exc:
            yield TaskDone(task.task, None, (), layout, f"a symlinked folder, {exc.args[0]}")
            return
        except _OutOfOrder as exc:
            yield TaskDone(task.task, None, (), layout, f"objects listed out of name order ({exc.args[0]})")
            return
        yield from groups
        path = self._work.listed_rejects(task.task)
        storage.write_atomic(path, checkpoints.rejects_bytes(sort_rejects(rejects)))
        yield TaskDone(task.task, path, tuple(dirs), layout, None)

    def _route(self, task, entries, layout, groups: list[GroupListed], rejects: list[Reject]) -> None:
        """Sends inputs to their group's file, one group at a time (a class folder, or a run of an object
        store's listing, which comes in name order), and rejects to `rejects`."""
        current: list[InputRef] = []
        done: set[Group] = set()
        for rel, problem in entries:
            entry = entry_of(rel, problem, layout)
            if isinstance(entry, Reject):
                rejects.append(entry)
                continue
            if current and (current[0].split, current[0].label) != (entry.split, entry.label):
                groups.append(self._flush(task, len(groups), current))
                done.add((current[0].split, current[0].label))
                current = []
                if (entry.split, entry.label) in done:
                    raise _OutOfOrder(rel)
            current.append(entry)
        if current:
            groups.append(self._flush(task, len(groups), current))

    def _flush(self, task: int, index: int, refs: list[InputRef]) -> GroupListed:
        return write_group(self._work.listed_group(task, index), refs, self._seed)


def write_group(path: str, refs: list[InputRef], seed: int) -> GroupListed:
    """Writes a group's inputs to work file `path` in rank order (`listing_order`'s within a group), a JSON
    line each."""
    keyed = sorted((sort_key(seed, r.path), r.path, r) for r in refs)
    buckets = buckets_for(len(keyed))
    counts, offsets = [0] * buckets, [0] * (buckets + 1)
    lines, size = [], 0
    for key, _, ref in keyed:
        b = bucket_of(key, buckets)
        counts[b] += 1
        line = (fields_json(ref.fields()) + "\n").encode()
        lines.append(line)
        size += len(line)
        offsets[b + 1] = size
    for b in range(1, buckets + 1):  # an empty bucket starts and ends where the one before ended
        offsets[b] = max(offsets[b], offsets[b - 1])
    storage.write_streamed(path, lines)
    first = refs[0]
    return GroupListed(path, first.split, first.label, min(r.path for r in refs), counts, offsets)


class _OutOfOrder(Exception):
    pass


def plan(element, source: FolderSource, classes: tuple[str, ...] | None):
    """(None, [GroupListed | TaskDone]) -> a ChunkJob per chunk, an UnknownGroup per group of a class not in
    --classes, and the PlanInfo.

    Raises:
        SourceError: as `listing.finish_listing` would (no class has inputs, bad or clashing split names).
    """
    _, items = element
    groups = sorted((g for g in items if isinstance(g, GroupListed)), key=lambda g: group_order((g.split, g.label)))
    done = [d for d in items if isinstance(d, TaskDone)]
    fallback = next((d.fallback for d in done if d.fallback), None)
    if fallback is not None:
        yield PlanInfo(fallback)
        return
    found = source.classes
    if found is None:
        remote = done[0]
        found = folder_classes(source.source, remote.dirs, remote.layout)
    names = classes if classes is not None else found
    firsts: dict[str, str] = {}
    for g in groups:
        if g.split is not None and g.label in names:
            firsts[g.split] = min(firsts.get(g.split, g.first), g.first)
    yield from plan_groups(groups, names, source.source, firsts)


def plan_groups(groups: list[GroupListed], names: tuple[str, ...], where: str, firsts: dict[str, str]):
    """`plan`'s part once the classes are known (`names`): groups in `group_order`, `firsts` an input of each
    split, which an error about its name names; `where` is what SOURCE an error about empty classes names."""
    known = set(names)
    counts = dict.fromkeys(names, 0)
    kept = []
    for g in groups:
        if g.label in known:
            counts[g.label] += sum(g.counts)
            kept.append(g)
        else:
            yield UnknownGroup(g.path, g.label)
    check_some_listed(counts, where)
    check_splits(firsts)
    chunking = plan_chunks(((g.split, g.label), g.counts) for g in kept)
    pieces: dict[int, list[tuple[str, int, int]]] = collections.defaultdict(list)
    for g in kept:
        ids = chunking.chunks[g.split, g.label]
        for b, chunk in enumerate(ids):
            end = g.offsets[b + 1]
            if b and ids[b - 1] == chunk:
                path, start, _ = pieces[chunk][-1]
                pieces[chunk][-1] = (path, start, end)
            else:
                pieces[chunk].append((g.path, g.offsets[b], end))
    for chunk in range(len(chunking.sizes)):
        yield ChunkJob(chunk, pieces[chunk])
    splits = tuple(sorted({g.split for g in kept if g.split}))
    listed = tuple(name for name in names if counts[name])
    yield PlanInfo(None, tuple(names), splits, listed, tuple(chunking.sizes))


class WriteChunk(beam.DoFn):
    """ChunkJob -> its chunk file (`checkpoints.write_listing`), and a ChunkWritten."""

    def __init__(self, work: WorkDir):
        self._work = work

    def process(self, job: ChunkJob):
        # A group file's line is json.dumps of a reference's fields (`write_group`), which is what the chunk
        # file lists (`checkpoints.write_listing`: json.dumps of the list of them, ", " between items) and
        # what the listing digest hashes (`run_record.refs_sum`): the lines are staged and hashed as they
        # are, never parsed and encoded again (tests/unit/test_list_source_lines.py checks both agree).
        lines = [line for path, start, end in job.pieces for line in read_lines(path, start, end)]
        storage.write_atomic(self._work.listing_chunk(job.chunk), b"[" + b", ".join(lines) + b"]")
        yield ChunkWritten(job.chunk, len(lines), lines_sum(lines))


def read_lines(path: str, start: int, end: int) -> list[bytes]:
    """The lines of a group file's byte range `start:end`, without their newlines."""
    with storage.open_read(path) as f:
        f.seek(start)
        data = storage.read_exact(f, end - start)
    return data.splitlines()


def read_refs(path: str, start: int, end: int) -> list[InputRef]:
    return [InputRef(*json.loads(line)) for line in read_lines(path, start, end)]


def write_rejects(element, work: WorkDir):
    """(None, [TaskDone | UnknownGroup]) -> the early rejects file, in `reject_order`, and a RejectsWritten."""
    _, items = element
    rejects: list[Reject] = []
    for item in items:
        if isinstance(item, TaskDone):
            if item.rejects is None:  # a fallback: the driver lists SOURCE itself
                yield RejectsWritten(0, "")
                return
            rejects += checkpoints.read_rejects_file(item.rejects)
        else:
            detail = item.detail or f"label {item.label!r} is not in --classes"
            size = storage.size(item.path) or 0
            rejects += [Reject(r.path, "unknown_label", detail) for r in read_refs(item.path, 0, size)]
    data = checkpoints.rejects_bytes(sort_rejects(rejects))
    storage.write_atomic(work.listing_rejects, data)
    yield RejectsWritten(len(rejects), hashlib.sha256(data).hexdigest())


def write_summary(element, work: WorkDir):
    """(None, [PlanInfo | ChunkWritten | RejectsWritten]) -> listed/summary.json, what the driver reads."""
    _, items = element
    info = next(i for i in items if isinstance(i, PlanInfo))
    rejected = next(i for i in items if isinstance(i, RejectsWritten))
    chunks = sorted((c for c in items if isinstance(c, ChunkWritten)), key=lambda c: c.chunk)
    if info.fallback is None and [c.size for c in chunks] != list(info.sizes):
        raise RuntimeError("internal error: the chunks written are not those planned")
    summary = {
        "fallback": info.fallback,
        "task": info.task,
        "groups": None if info.groups is None else list(info.groups),
        "classes": list(info.classes),
        "splits": list(info.splits),
        "listed": list(info.listed),
        "sizes": list(info.sizes),
        "sum": f"{sum(c.refs_sum for c in chunks) % 2**256:064x}",
        "inputs": sum(c.size for c in chunks),
        "rejected": rejected.rejected,
        "rejects_sha256": rejected.sha256,
    }
    storage.write_atomic(work.listed_summary, json.dumps(summary).encode())
    yield len(chunks)


def build_listing(p: beam.Pipeline, source: FolderSource, seed: int, classes: tuple[str, ...] | None, output: str):
    """Adds the listing steps to pipeline `p` (see the module docstring)."""
    work = WorkDir(output)
    one_key = lambda item: (None, item)  # noqa: E731
    listed = (
        p
        | "ListTasks" >> beam.Create(list(source.tasks))
        | "SpreadTasks" >> beam.Reshuffle()
        | "ListFolders" >> beam.ParDo(ListFolders(source, seed, work))
    )
    planned = (
        listed
        | "PlanOneKey" >> beam.Map(one_key)
        | "GatherListed" >> beam.GroupByKey()
        | "PlanChunks" >> beam.FlatMap(plan, source, classes)
    )
    stage_planned(planned, ChunkJob, WriteChunk(work), (listed | "Done" >> beam.FlatMap(of_kind(TaskDone)),), work)


def stage_planned(planned, jobs: type, writer: beam.DoFn, rejected: tuple, work: WorkDir, write=None) -> None:
    """The listing's last steps, whatever listed the source: the plan's chunk jobs (of type `jobs`) written by
    `writer`, the rejects of `rejected` and of unknown groups by `write` (default `write_rejects`), and
    the summary."""
    one_key = lambda item: (None, item)  # noqa: E731
    written = (
        planned
        | "ChunkJobs" >> beam.FlatMap(of_kind(jobs))
        | "SpreadChunkJobs" >> beam.Reshuffle()
        | "WriteChunks" >> beam.ParDo(writer)
    )
    rejects = (
        (*rejected, planned | "Unknown" >> beam.FlatMap(of_kind(UnknownGroup)))
        | "RejectSources" >> beam.Flatten()
        | "RejectsOneKey" >> beam.Map(one_key)
        | "GatherRejects" >> beam.GroupByKey()
        | "WriteRejects" >> beam.FlatMap(write or write_rejects, work)
    )
    (
        (planned | "Info" >> beam.FlatMap(of_kind(PlanInfo)), written, rejects)
        | "SummaryParts" >> beam.Flatten()
        | "SummaryOneKey" >> beam.Map(one_key)
        | "GatherSummary" >> beam.GroupByKey()
        | "WriteSummary" >> beam.FlatMap(write_summary, work)
    )


def list_here(source: FolderSource, seed: int, classes: tuple[str, ...] | None, output: str) -> None:
    """The steps of `build_listing`, one after another in this process, holding what the pipeline's elements
    would (O(groups + buckets + chunks)): for the embedded runner, which would run them here too, after
    building and starting a pipeline of its own (~1.5 s at 2,000 images, bench/code_compare.py)."""
    work = WorkDir(output)
    lister, writer = ListFolders(source, seed, work), WriteChunk(work)
    listed = [item for task in source.tasks for item in lister.process(task)]
    planned = list(plan((None, listed), source, classes))
    written = [w for job in planned if isinstance(job, ChunkJob) for w in writer.process(job)]
    done = [i for i in listed if isinstance(i, TaskDone)] + [i for i in planned if isinstance(i, UnknownGroup)]
    rejected = list(write_rejects((None, done), work))
    info = [i for i in planned if isinstance(i, PlanInfo)]
    for _ in write_summary((None, [*info, *written, *rejected]), work):
        pass


def read_summary(output: str) -> dict:
    return json.loads(storage.read_bytes(WorkDir(output).listed_summary))


def delete_listed(output: str) -> None:
    """Deletes the listing tasks' work files once the listing is staged."""
    storage.delete(WorkDir(output).listed_folder)
