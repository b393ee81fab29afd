"""The listing steps that shards (beam_jobs/list_shards.py) and tables (beam_jobs/list_tables.py) share: a task
a file emits its groups' pieces (`ShardGroup`) and its rejects (`TaskDone`); the pieces of a group are
gathered and sorted, planned in one place, and staged by `list_source.stage_planned`. What differs is
`PieceSteps`: how a file is listed, how a group's pieces are merged, the chunk job and its writer.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable, Iterable

import apache_beam as beam

from beam_jobs import list_source
from beam_jobs.list_source import PlanInfo, TaskDone, UnknownGroup
from prep.core.ordering import group_order
from prep.core.workdir import WorkDir


class PieceSteps(typing.NamedTuple):
    name: str  # the listing step's name in the pipeline ("ListShards")
    lister: beam.DoFn  # a task -> its ShardGroup pieces and its TaskDone
    piece: type  # the lister's piece kind (ShardGroup)
    sort_group: Callable[..., Iterable]  # ((key, pieces), seed, work) -> a group's listed outcome
    plan: Callable[..., Iterable]  # ((None, listed), source, classes) -> chunk jobs, UnknownGroup, PlanInfo
    job: type  # the chunk job `writer` takes
    writer: beam.DoFn


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
        | "PlanChunks" >> beam.FlatMap(steps.plan, source, classes)
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
    planned = list(steps.plan((None, [*groups, *done]), source, classes))
    written = [w for job in planned if isinstance(job, steps.job) for w in steps.writer.process(job)]
    unknown = [i for i in planned if isinstance(i, UnknownGroup)]
    rejected = list(list_source.write_rejects((None, [*done, *unknown]), work))
    info = [i for i in planned if isinstance(i, PlanInfo)]
    for _ in list_source.write_summary((None, [*info, *written, *rejected]), work):
        pass
