"""Listing a label file on workers: a first pipeline that stages the listing as the driver would.

The driver only stats the file (`prep.core.label_ranges.label_source`); the rows are read in byte ranges,
as Beam's text sources read theirs (`prep.core.label_ranges`: which rows a range holds, their line numbers):

    counts  = Create(ranges) | Reshuffle | Map(count_range)     RangeCount: lines starting in a range, quoting
    jobs    = one key | ParDo(place)                              RangeJob: its first line's number and state
    read    = Reshuffle | ParDo(ReadRange)                        Candidate | RangeDone (its rejects' file)
    multi   = RangeDone | CombineGlobally(any)                    whether a row is multi-label (a side input)
    decided = key by path | GroupByKey | FlatMap(decide)          Candidate (the first line) | Reject (duplicate)
    groups  = key by (split, class) | GroupByKey | ParDo(WriteGroup)   LabelGroup: a group file in rank order
                                                                  (single-label; multi-label rows and their
                                                                  duplicates go to the plan as they are)
    planned = one key | FlatMap(plan)                             list_source's ChunkJob | UnknownGroup | PlanInfo;
                                                                  or MultiStaged: a multi-label listing staged

and then list_source's steps: the chunk files, the early rejects (with the duplicates), the summary. So the
staged files are those of the driver's `list_label_file` and `ready_output` (tests/e2e/test_list_labels.py).
Duplicates are decided by a shuffle keyed on the path: the row on the lowest line keeps it, as on the driver. A
task holds one range's rejects, one path's rows, or one group's inputs (to sort them, as a class folder's
listing task does). A multi-label file is the exception: `task_inputs.multilabel_listing` deals the strata
over every image of a split together (each image's stratum is its rarest label in the whole file), so its
plan task holds the rows, as `list_annotations.StageDetection` holds a detection listing, and stages them
with the driver's own code (`stage_multilabel`); the driver still holds nothing per input.
"""

from __future__ import annotations

import hashlib
import json
import typing

import apache_beam as beam

from beam_jobs import list_source
from beam_jobs.list_annotations import stage_listed
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
    write_group,
)
from prep.core import storage
from prep.core.accounting import sort_rejects
from prep.core.errors import SourceError
from prep.core.label_file import Candidate, duplicate, finish_multilabel, judge_row
from prep.core.label_ranges import BadText, LabelSource, RangeJob, count_range, place, read_range
from prep.core.listing import InputRef, Reject
from prep.core.run import checkpoints
from prep.core.task_inputs import multilabel_listing
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


class MultiStaged(typing.NamedTuple):
    """A multi-label listing staged by its plan task (`stage_multilabel`): chunks, rejects and summary."""

    chunks: int


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


def _candidate(row: tuple[bytes, tuple[int, str, str | None, str | None]]) -> Candidate:
    key, (line, label, split, group) = row
    return Candidate(line, InputRef(_text(key), label, split, group=group))


def decide(element):
    """(path, [by_path's rows]) -> the candidate on the lowest line, and a duplicate Reject for each other."""
    key, rows = element
    rows = sorted(rows, key=lambda row: row[0])
    first, *later = (_candidate((key, row)) for row in rows)
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


def plan(element, src: LabelSource, classes: tuple[str, ...] | None, work: WorkDir):
    """(None, [LabelGroup | RangeDone | a multi-label file's by_path rows and duplicates]) -> list_source's
    ChunkJob per chunk, UnknownGroup per group of a class not in --classes, and the PlanInfo; or, for a
    multi-label file, its listing staged (MultiStaged). After the checks the driver's `list_label_file`
    makes, in its order.

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
    multi = any(d.multi for d in done)
    rows = [_candidate(i) for i in items if type(i) is tuple]  # by_path's rows (LabelGroup etc. are subclasses)
    if len({c.ref.split is None for c in rows} if multi else {g.listed.split is None for g in labelled}) > 1:
        raise SourceError(f"label file {path} gives a split for some rows but not for others")
    if multi:
        rejects = [r for d in done if d.rejects is not None for r in checkpoints.read_rejects_file(d.rejects)]
        yield stage_multilabel(src, classes, rows, rejects + [r for r in items if isinstance(r, Reject)], work)
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


def stage_multilabel(
    src: LabelSource, classes: tuple[str, ...] | None, rows: list[Candidate], rejects: list[Reject], work: WorkDir
) -> MultiStaged:
    """Stages a multi-label file's listing from its kept rows and its rejects (bad rows, duplicates) with the
    driver's code: `finish_multilabel` as `list_label_file` calls it, `multilabel_listing` as
    `inputs.list_inputs` does, and the files `start.ready_output` writes, with the summary the driver reads.

    Raises:
        SourceError: as `finish_multilabel` (no usable rows).
    """
    rows.sort(key=lambda c: c.line)  # the file's order, as the driver lists it
    listing = finish_multilabel([c.ref for c in rows], rejects, classes, src.path)
    listing = multilabel_listing(listing, src.plan.seed, src.plan, src.rules.root)
    return MultiStaged(stage_listed(listing, src.plan.seed, work.output))  # as COCO's and masks' listings


def write_rejects(element, work: WorkDir):
    """(None, [RangeDone | Reject | UnknownGroup]) -> the early rejects file, in `reject_order`, and a
    RejectsWritten; nothing for a multi-label file, whose plan task wrote it."""
    _, items = element
    rejects: list[Reject] = []
    for item in items:
        if isinstance(item, RangeDone):
            if item.rejects is None or item.multi:  # an error, or staged by the plan task
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


def write_summary(element, work: WorkDir):
    """(None, [PlanInfo | MultiStaged | ChunkWritten | RejectsWritten]) -> listed/summary.json
    (`list_source.write_summary`), which a multi-label file's plan task wrote already."""
    _, items = element
    staged = next((i for i in items if isinstance(i, MultiStaged)), None)
    if staged is None:
        yield from list_source.write_summary(element, work)
    else:
        yield staged.chunks


# Where the decided rows go, by whether the file is multi-label (a side input): two plain steps, as the other
# listings filter by kind (`of_kind`) rather than tag outputs.
def single_label(item: Candidate | Reject, multi: bool):
    """A single-label file's candidate -> keyed by its group, for WriteGroup."""
    return [by_group(item)] if not multi and isinstance(item, Candidate) else []


def multi_label(item: Candidate | Reject, multi: bool):
    """A multi-label file's candidate (as by_path's row) or duplicate -> as is, for its plan task."""
    if not multi:
        return []
    return [by_path(item) if isinstance(item, Candidate) else item]


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
    done = read | "Done" >> beam.FlatMap(of_kind(RangeDone))
    multi = beam.pvalue.AsSingleton(
        done | "MultiRows" >> beam.Map(lambda d: d.multi) | "AnyMulti" >> beam.CombineGlobally(any)
    )
    groups = (
        decided
        | "ByGroup" >> beam.FlatMap(single_label, multi)
        | "GatherGroups" >> beam.GroupByKey()
        | "WriteGroups" >> beam.ParDo(WriteGroup(seed, work))
    )
    planned = (
        (groups, done, decided | "MultiLabel" >> beam.FlatMap(multi_label, multi))
        | "PlanParts" >> beam.Flatten()
        | "PlanOneKey" >> beam.Map(one_key)
        | "GatherListed" >> beam.GroupByKey()
        | "PlanChunks" >> beam.FlatMap(plan, src, classes, work)
    )
    rejected = (done, decided | "DuplicateRows" >> beam.FlatMap(of_kind(Reject)))
    _stage(planned, rejected, work)


def _stage(planned, rejected: tuple, work: WorkDir) -> None:
    """`list_source.stage_planned`'s steps, the summary step told of a multi-label listing staged whole."""
    one_key = lambda item: (None, item)  # noqa: E731
    written = (
        planned
        | "ChunkJobs" >> beam.FlatMap(of_kind(ChunkJob))
        | "SpreadChunkJobs" >> beam.Reshuffle()
        | "WriteChunks" >> beam.ParDo(WriteChunk(work))
    )
    rejects = (
        (*rejected, planned | "Unknown" >> beam.FlatMap(of_kind(UnknownGroup)))
        | "RejectSources" >> beam.Flatten()
        | "RejectsOneKey" >> beam.Map(one_key)
        | "GatherRejects" >> beam.GroupByKey()
        | "WriteRejects" >> beam.FlatMap(write_rejects, work)
    )
    (
        (planned | "Info" >> beam.FlatMap(of_kind((PlanInfo, MultiStaged))), written, rejects)
        | "SummaryParts" >> beam.Flatten()
        | "SummaryOneKey" >> beam.Map(one_key)
        | "GatherSummary" >> beam.GroupByKey()
        | "WriteSummary" >> beam.FlatMap(write_summary, work)
    )


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
    done = _only(read, RangeDone)
    multi = any(d.multi for d in done)
    groups_rows: dict[tuple[str | None, str], list] = {}
    for group, member in (row for item in decided for row in single_label(item, multi)):
        groups_rows.setdefault(group, []).append(member)
    grouper = WriteGroup(seed, work)
    groups = [g for entry in groups_rows.items() for g in grouper.process(entry)]
    multi_rows = [row for item in decided for row in multi_label(item, multi)]
    planned = list(plan((None, [*groups, *done, *multi_rows]), src, classes, work))
    writer = WriteChunk(work)
    written = [w for job in _only(planned, ChunkJob) for w in writer.process(job)]
    rejected = list(write_rejects((None, [*done, *_only(decided, Reject), *_only(planned, UnknownGroup)]), work))
    info = _only(planned, (PlanInfo, MultiStaged))
    for _ in write_summary((None, [*info, *written, *rejected]), work):
        pass


def _only(items: list, kind: type | tuple[type, ...]) -> list:
    return [i for i in items if isinstance(i, kind)]
