"""Listing a classification label file on workers: a first pipeline that stages the listing as the driver would.

The driver only stats the file (`prep.core.label_ranges.label_source`); the rows are read in byte ranges,
as Beam's text sources read theirs (`prep.core.label_ranges`: which rows a range holds, their line numbers):

    counts  = Create(ranges) | Reshuffle | Map(count_range)     RangeCount: lines starting in a range, quoting
    jobs    = one key | ParDo(place)                              RangeJob: its first line's number and state
    read    = Reshuffle | ParDo(ReadRange)                        Candidate | RangeDone (its rejects' file)
    decided = key by path | GroupByKey | FlatMap(decide)          Candidate (the first line) | Reject (duplicate)
    groups  = key by (split, class) | GroupByKey | ParDo(WriteGroup)   LabelGroup: a group file in rank order
    planned = one key | FlatMap(plan)                             list_source's ChunkJob | UnknownGroup | PlanInfo

and then list_source's steps: the chunk files, the early rejects (with the duplicates), the summary. So the
staged files are those of the driver's `list_label_file` and `ready_output` (tests/e2e/test_list_labels.py).
Duplicates are decided by a shuffle keyed on the path: the row on the lowest line keeps it, as on the driver. A
task holds one range's rejects, one path's rows, or one group's inputs (to sort them, as a class folder's
listing task does). A file of multi-label rows makes the summary say `fallback`: the driver lists it, since
`task_inputs.multilabel_listing` stratifies whole groups of rows by their label sets.
"""

from __future__ import annotations

import hashlib
import json
import typing

import apache_beam as beam

from beam_jobs.list_source import (
    ChunkJob,
    GroupListed,
    PlanInfo,
    RejectsWritten,
    UnknownGroup,
    WriteChunk,
    of_kind,
    plan_groups,
    read_refs,
    stage_planned,
    write_group,
    write_summary,
)
from prep.core import storage
from prep.core.accounting import sort_rejects
from prep.core.errors import SourceError
from prep.core.label_file import Candidate, duplicate, judge_row
from prep.core.label_ranges import BadText, LabelSource, RangeJob, count_range, place, read_range
from prep.core.listing import InputRef, Reject
from prep.core.run import checkpoints
from prep.core.workdir import WorkDir


class RangeDone(typing.NamedTuple):
    part: int
    rejects: str | None  # the range's rejects file; None when its text is bad
    rows: int  # rows read, bad ones too
    multi: bool  # a row is multi-label
    error: str | None  # why its text is bad (label_ranges.BadText)


class LabelGroup(typing.NamedTuple):
    listed: GroupListed
    line: int  # the line its first input is listed on


class ReadRange(beam.DoFn):
    """RangeJob -> a Candidate per row that may become an input, then the range's RangeDone."""

    def __init__(self, src: LabelSource, work: WorkDir):
        self._src, self._work = src, work

    def process(self, job: RangeJob):
        rejects: list[Reject] = []
        rows, multi = 0, False
        try:
            for number, row, problem in read_range(self._src, job):
                rows += 1
                outcome, is_multi = judge_row(self._src.rules, number, row, problem)
                multi = multi or is_multi
                if isinstance(outcome, Reject):
                    rejects.append(outcome)
                else:
                    yield outcome
        except BadText as exc:
            yield RangeDone(job.part, None, rows, multi, str(exc))
            return
        path = self._work.listed_rejects(job.part)
        storage.write_atomic(path, checkpoints.rejects_bytes(sort_rejects(rejects)))
        yield RangeDone(job.part, path, rows, multi, None)


# What the shuffles carry: plain tuples of text, numbers and bytes, which Beam's coders write compactly (a
# NamedTuple is pickled whole), and paths as bytes (a key's coder writes text as strict UTF-8, and a file name
# may not be UTF-8).
def _bytes(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def _text(path: bytes) -> str:
    return path.decode("utf-8", "surrogateescape")


def by_path(c: Candidate) -> tuple[bytes, tuple[int, str, str | None, str | None]]:
    return _bytes(c.ref.path), (c.line, c.ref.label, c.ref.split, c.ref.group)


def by_group(c: Candidate) -> tuple[tuple[str | None, str], tuple[int, bytes, str | None]]:
    return (c.ref.split, c.ref.label), (c.line, _bytes(c.ref.path), c.ref.group)


def decide(element):
    """(path, [by_path's rows]) -> the candidate on the lowest line, and a duplicate Reject for each other."""
    key, rows = element
    path = _text(key)
    rows = sorted(rows, key=lambda row: row[0])
    first, *later = (Candidate(line, InputRef(path, label, split, group=group)) for line, label, split, group in rows)
    yield first
    for c in later:
        yield duplicate(c, first.line)


class WriteGroup(beam.DoFn):
    """((split, class), [by_group's rows]) -> its group file (`list_source.write_group`) as a LabelGroup."""

    def __init__(self, seed: int, work: WorkDir):
        self._seed, self._work = seed, work

    def process(self, element):
        (split, label), rows = element
        candidates = [Candidate(line, InputRef(_text(path), label, split, group=group)) for line, path, group in rows]
        # Named by a hash of the group: no task knows the others' groups. 96 bits: no two groups meet.
        digest = hashlib.sha256(json.dumps([split, label]).encode()).digest()
        path = self._work.listed_group(int.from_bytes(digest[:6], "big"), int.from_bytes(digest[6:12], "big"))
        first = min(candidates, key=lambda c: c.line)
        listed = write_group(path, [c.ref for c in candidates], self._seed)
        yield LabelGroup(listed._replace(first=first.ref.path), first.line)


def plan(element, src: LabelSource, classes: tuple[str, ...] | None):
    """(None, [LabelGroup | RangeDone]) -> list_source's ChunkJob per chunk, UnknownGroup per group of a class
    not in --classes, and the PlanInfo, after the checks the driver's `list_label_file` makes, in its order.

    Raises:
        SourceError: the text is bad (the earliest range's error), the file has no rows or no usable ones,
            it gives a split for some rows only, or as `listing.finish_listing`.
    """
    _, items = element
    done = sorted((d for d in items if isinstance(d, RangeDone)), key=lambda d: d.part)
    labelled = [g for g in items if isinstance(g, LabelGroup)]
    error = next((d.error for d in done if d.error is not None), None)
    if error is not None:
        raise SourceError(error)
    path = src.path
    if not any(d.rows for d in done):
        raise SourceError(f"label file {path} has no rows")
    if len({g.listed.split is None for g in labelled}) > 1:
        raise SourceError(f"label file {path} gives a split for some rows but not for others")
    if any(d.multi for d in done):
        yield PlanInfo("multi-label rows")
        return
    if not labelled:
        raise SourceError(f"label file {path} has no usable rows")
    names = classes if classes is not None else tuple(sorted({g.listed.label for g in labelled}))
    firsts: dict[str, tuple[int, str]] = {}  # split -> (line, path) of its first input listed, as the driver's
    for g in labelled:
        split = g.listed.split
        if split is not None and g.listed.label in names:
            firsts[split] = min(firsts.get(split, (g.line, g.listed.first)), (g.line, g.listed.first))
    groups = sorted((g.listed for g in labelled), key=lambda g: (g.split or "", g.label))
    yield from plan_groups(groups, names, path, {split: first for split, (_, first) in firsts.items()})


def write_rejects(element, work: WorkDir):
    """(None, [RangeDone | Reject | UnknownGroup]) -> the early rejects file, in `reject_order`, and a
    RejectsWritten."""
    _, items = element
    rejects: list[Reject] = []
    for item in items:
        if isinstance(item, RangeDone):
            if item.rejects is None or item.multi:  # an error, or the driver lists the file
                yield RejectsWritten(0, "")
                return
            rejects += checkpoints.read_rejects_file(item.rejects)
        elif isinstance(item, Reject):
            rejects.append(item)
        else:
            detail = f"label {item.label!r} is not in --classes"
            size = storage.size(item.path) or 0
            rejects += [Reject(r.path, "unknown_label", detail) for r in read_refs(item.path, 0, size)]
    data = checkpoints.rejects_bytes(sort_rejects(rejects))
    storage.write_atomic(work.listing_rejects, data)
    yield RejectsWritten(len(rejects), hashlib.sha256(data).hexdigest())


def build_listing(p: beam.Pipeline, src: LabelSource, seed: int, classes: tuple[str, ...] | None, output: str):
    """Adds the listing steps to pipeline `p` (see the module docstring)."""
    work = WorkDir(output)
    one_key = lambda item: (None, item)  # noqa: E731
    counts = (
        p
        | "LabelRanges" >> beam.Create(list(range(src.ranges)))
        | "SpreadRanges" >> beam.Reshuffle()
        | "CountLines" >> beam.Map(lambda part: count_range(src, part))
    )
    read = (
        counts
        | "CountsOneKey" >> beam.Map(one_key)
        | "GatherCounts" >> beam.GroupByKey()
        | "PlaceRanges" >> beam.FlatMap(lambda item: place(list(item[1])))
        | "SpreadJobs" >> beam.Reshuffle()
        | "ReadRanges" >> beam.ParDo(ReadRange(src, work))
    )
    decided = (
        read
        | "Candidates" >> beam.FlatMap(of_kind(Candidate))
        | "ByPath" >> beam.Map(by_path)
        | "GatherPaths" >> beam.GroupByKey()
        | "Duplicates" >> beam.FlatMap(decide)
    )
    groups = (
        decided
        | "Kept" >> beam.FlatMap(of_kind(Candidate))
        | "ByGroup" >> beam.Map(by_group)
        | "GatherGroups" >> beam.GroupByKey()
        | "WriteGroups" >> beam.ParDo(WriteGroup(seed, work))
    )
    done = read | "Done" >> beam.FlatMap(of_kind(RangeDone))
    planned = (
        (groups, done)
        | "PlanParts" >> beam.Flatten()
        | "PlanOneKey" >> beam.Map(one_key)
        | "GatherListed" >> beam.GroupByKey()
        | "PlanChunks" >> beam.FlatMap(plan, src, classes)
    )
    rejected = (done, decided | "DuplicateRows" >> beam.FlatMap(of_kind(Reject)))
    stage_planned(planned, ChunkJob, WriteChunk(work), rejected, work, write_rejects)


def list_here(src: LabelSource, seed: int, classes: tuple[str, ...] | None, output: str) -> None:
    """The steps of `build_listing`, one after another in this process (tests; the embedded runner lists a
    label file on the driver, `prep.core.inputs.list_inputs`, which holds the same per row and is faster)."""
    work = WorkDir(output)
    jobs = place([count_range(src, part) for part in range(src.ranges)])
    reader = ReadRange(src, work)
    read = [item for job in jobs for item in reader.process(job)]
    paths: dict[bytes, list] = {}
    for key, entry in map(by_path, _only(read, Candidate)):
        paths.setdefault(key, []).append(entry)
    decided = [item for entry in paths.items() for item in decide(entry)]
    groups_rows: dict[tuple[str | None, str], list] = {}
    for group, member in map(by_group, _only(decided, Candidate)):
        groups_rows.setdefault(group, []).append(member)
    grouper = WriteGroup(seed, work)
    groups = [g for entry in groups_rows.items() for g in grouper.process(entry)]
    done = _only(read, RangeDone)
    planned = list(plan((None, [*groups, *done]), src, classes))
    writer = WriteChunk(work)
    written = [w for job in _only(planned, ChunkJob) for w in writer.process(job)]
    rejected = list(write_rejects((None, [*done, *_only(decided, Reject), *_only(planned, UnknownGroup)]), work))
    for _ in write_summary((None, [*_only(planned, PlanInfo), *written, *rejected]), work):
        pass


def _only(items: list, kind: type) -> list:
    return [i for i in items if isinstance(i, kind)]
