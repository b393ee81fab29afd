"""The listing steps that shards (beam_jobs/list_shards.py) and tables (beam_jobs/list_tables.py) share: a task
a file emits its groups' pieces (`ShardGroup`) and its rejects (`TaskDone`); the pieces of a group are
gathered and sorted, planned in one place, and staged by `list_source.stage_planned`. What differs is
`PieceSteps`: how a file is listed, how a group's pieces are merged, the chunk job and its writer.

Samples with lists of labels make a multi-label dataset (`prep.core.sources.multilabel`): a listing task puts
them in one group per split, whatever their labels, and the plan step deals them in strata (`plan_multilabel`)
with the driver's own code, so that the staged files are the driver's listing's. That step holds a ref per
sample, on one worker, as a detection listing's staging step does (beam_jobs/list_annotations.py): the strata
are dealt over every sample of a split together. The driver holds nothing per sample.
"""

from __future__ import annotations

import collections
import itertools
import json
import typing
from collections.abc import Callable, Iterable, Iterator

import apache_beam as beam

from beam_jobs import list_source
from beam_jobs.list_source import ChunkJob, GroupListed, PlanInfo, TaskDone, UnknownGroup
from prep.core import storage, task_inputs
from prep.core.errors import SourceError
from prep.core.layout import PlanOptions
from prep.core.listing import InputRef, Listing
from prep.core.ordering import group_order, listing_chunks
from prep.core.run import checkpoints
from prep.core.sources import multilabel
from prep.core.workdir import WorkDir


class PieceSteps(typing.NamedTuple):
    name: str  # the listing step's name in the pipeline ("ListShards")
    lister: beam.DoFn  # a task -> its ShardGroup pieces and its TaskDone
    piece: type  # the lister's piece kind (ShardGroup)
    sort_group: Callable[..., Iterable]  # ((key, pieces), seed, work) -> a group's listed outcome
    plan: Callable[..., Iterable]  # ((None, listed), source, classes, work) -> chunk jobs, UnknownGroup, PlanInfo
    job: type  # the chunk job `writer` takes
    writer: beam.DoFn


class MultiSource(typing.NamedTuple):
    """What the plan of a multi-label source needs beside its listed groups."""

    source: str
    tasks: int  # the listing tasks; the plan's own work files are named after one more
    plan: PlanOptions
    none_kept: Callable[[collections.Counter[str]], SourceError]  # the error when no sample is kept


def group_label(label: str) -> str:
    """The group a listing task puts a sample of this label in: its class, or `MULTI` for every list."""
    return multilabel.MULTI if multilabel.is_multi(label) else label


def plan_multilabel(
    groups: list[GroupListed], done: list[TaskDone], src: MultiSource, classes: tuple[str, ...] | None, work: WorkDir
) -> Iterator[ChunkJob | UnknownGroup | PlanInfo]:
    """The plan of a multi-label source (see the module docstring): its chunks as byte ranges of one work file
    of refs in listing order, its unknown labels an UnknownGroup per detail, and its PlanInfo.

    Raises:
        SourceError: `src.none_kept`, when no sample has a label in --classes.
    """
    refs = [r for g in groups for r in list_source.read_refs(g.path, 0, g.offsets[-1])]
    got = multilabel.named(refs, classes)
    if not got.kept:
        rejects = [r for d in done if d.rejects for r in checkpoints.read_rejects_file(d.rejects)]
        raise src.none_kept(collections.Counter(r.reason for r in rejects + got.unknown))
    del refs
    listing = Listing(tuple(got.kept), (), got.classes, task="multilabel")
    listing = task_inputs.multilabel_listing(listing, src.plan.seed, src.plan, src.source)
    chunks = listing_chunks(listing, src.plan.seed)
    path, lines, offsets = work.listed_group(src.tasks, 0), [], [0]
    for chunk in chunks:
        written = [(json.dumps(r.fields()) + "\n").encode() for r in chunk]
        lines += written
        offsets.append(offsets[-1] + sum(map(len, written)))
    storage.write_streamed(path, lines)
    for i in range(len(chunks)):
        yield ChunkJob(i, [(path, offsets[i], offsets[i + 1])])
    by_detail: dict[str, list[str]] = collections.defaultdict(list)
    for r in got.unknown:
        by_detail[r.detail].append(r.path)
    for i, (detail, paths) in enumerate(sorted(by_detail.items())):
        unknown = work.listed_group(src.tasks, i + 1)
        storage.write_streamed(unknown, [(json.dumps([p, "", None]) + "\n").encode() for p in paths])
        yield UnknownGroup(unknown, "", detail)
    splits = tuple(sorted({r.split for r in listing.refs if r.split}))
    listed = tuple(sorted({r.label for r in listing.refs}))
    sizes = tuple(len(c) for c in chunks)
    yield PlanInfo(None, listing.classes, splits, listed, sizes, listing.task, listing.groups)


def _group_key(g) -> tuple[str, str]:
    return group_order((g.split, g.label))


def build(
    p: beam.Pipeline, tasks: list, source, steps: PieceSteps, seed: int, classes: tuple[str, ...] | None, work: WorkDir
):
    """Adds the listing steps to pipeline `p` (the module docstrings of list_shards and list_tables)."""
    one_key = lambda item: (None, item)  # noqa: E731
    listed = (
        p
        | "ListTasks" >> beam.Create(tasks)
        | "SpreadTasks" >> beam.Reshuffle()
        | steps.name >> beam.ParDo(steps.lister)
    )
    grouped = (
        listed
        | "Pieces" >> beam.FlatMap(list_source.of_kind(steps.piece))
        | "ByGroup" >> beam.Map(lambda g: (_group_key(g), g))
        | "GatherGroups" >> beam.GroupByKey()
        | "SortGroups" >> beam.FlatMap(steps.sort_group, seed, work)
    )
    done = listed | "Done" >> beam.FlatMap(list_source.of_kind(TaskDone))
    planned = (
        (grouped, done)
        | "PlanParts" >> beam.Flatten()
        | "PlanOneKey" >> beam.Map(one_key)
        | "GatherListed" >> beam.GroupByKey()
        | "PlanChunks" >> beam.FlatMap(steps.plan, source, classes, work)
    )
    list_source.stage_planned(planned, steps.job, steps.writer, (done,), work)


def run_here(tasks: list, source, steps: PieceSteps, seed: int, classes: tuple[str, ...] | None, work: WorkDir) -> None:
    """The steps of `build`, one after another in this process (for the embedded runner), holding what the
    pipeline's elements would: O(files x groups + buckets + chunks)."""
    listed = [item for task in tasks for item in steps.lister.process(task)]
    pieces = sorted((g for g in listed if isinstance(g, steps.piece)), key=_group_key)
    done = [d for d in listed if isinstance(d, TaskDone)]
    groups = [
        item
        for key, run in itertools.groupby(pieces, key=_group_key)
        for item in steps.sort_group((key, list(run)), seed, work)
    ]
    planned = list(steps.plan((None, [*groups, *done]), source, classes, work))
    written = [w for job in planned if isinstance(job, steps.job) for w in steps.writer.process(job)]
    unknown = [i for i in planned if isinstance(i, UnknownGroup)]
    rejected = list(list_source.write_rejects((None, [*done, *unknown]), work))
    info = [i for i in planned if isinstance(i, PlanInfo)]
    for _ in list_source.write_summary((None, [*info, *written, *rejected]), work):
        pass


def chunk_refs(pieces: Iterable[tuple[str, int, int]], labels: dict[str, str]) -> list[InputRef]:
    """A chunk's references read from its pieces of group files (`list_source.read_refs`), each piece of a
    group file named in `labels` given that class name (a group whose labels index --classes, named by the
    plan)."""
    refs: list[InputRef] = []
    for path, start, end in pieces:
        got = list_source.read_refs(path, start, end)
        refs += [r._replace(label=labels[path]) for r in got] if path in labels else got
    return refs
