"""The conversion's Beam graph, `build`: listed inputs -> checked records -> plan -> shards -> manifest.

What each PCollection holds (the types say it; see each step's module):

    chunks   = Create | Reshuffle           chunk id; its listing waits in the work directory (spread.py:
                                            no Reshuffle on the embedded runner)
    outcomes = ParDo(PrepareChunk)          ChunkCounts | RejectedInputs | ReusedChunk       prepare.py
    ranked   = PlanShards                   PartEntries | Capped                          plan.py
    parts    = GroupByKey                   (write task, [(PartKey, Section)])
    written  = ParDo(WriteParts)            WrittenShard | WrittenPart                          write.py
    joined   = GroupByKey | ParDo(ConcatParts)   WrittenShard, for shards cut into parts
    summary  = Flatten | GroupByKey(one key)     every WrittenShard, RejectedInputs, Capped, ReusedChunk, BoxNotes,
                                                 GroupNotes (dedupe.py)
    done     = FlatMap(publish)             rejects.jsonl, tfds metadata, then manifest.json    publish.py

The chunks are staged before this graph runs: by the driver, or by a first pipeline
that lists class folders on workers (list_source.py). Invariants. References never
travel as elements in bulk (a chunk's wait in its index, a rank task's in its entry
file; only a small section carries its entries, plan.INLINE_MAX) and image bytes never
pass through a shuffle (they wait in spill files, or in the source for images kept as
they are). No task holds more than about `plan.GROUP_TARGET` references, a write task
`MAX_WRITE_WIDTH` times that; only the final summary group grows with the shard count.
Every file appears under its final name only once complete: by a rename, or on an
object store by one upload (`storage.uploads_whole`), and manifest.json last
(checkpoints.py says what a resumed run reuses). Only Create, ParDo, GroupByKey, Flatten and composites of
them are used, with no side inputs or tagged outputs: the DaskRunner translates nothing
else; only on the embedded runner does PrepareChunk emit from finish_bundle (`lookahead`).
Parallelism inside a worker comes from thread pools (pooled.py); docs/design.md says why.
"""

from __future__ import annotations

import dataclasses
import os

import apache_beam as beam

from beam_jobs import prepare, write
from beam_jobs.dedupe import Dedupe
from beam_jobs.plan import GROUP_TARGET, Capped, PartEntries, PlanShards
from beam_jobs.publish import PublishInputs, publish
from beam_jobs.spread import create, spread
from prep.core.config import ConvertConfig
from prep.core.ordering import MAX_CHUNK
from prep.core.run.checkpoints import StepHook
from prep.core.run.dedupe_files import GroupNotes
from prep.core.run.dedupe_types import DedupeSettings
from prep.core.run.spill import PrepareOptions
from prep.core.run.start import Staged
from prep.core.run.task_build import TaskSpec
from prep.core.run_record import tool_info
from prep.core.workdir import WorkDir

# A write task holds this many parts at most, so that it holds at most about
# MAX_WRITE_WIDTH * GROUP_TARGET entries.
MAX_WRITE_WIDTH = 4


def write_width(workers: int | None) -> int:
    """Parts written at once by one write task: one per worker thread, at most MAX_WRITE_WIDTH."""
    return max(1, min(MAX_WRITE_WIDTH, workers or os.cpu_count() or 1))


def grouping_stage(config: ConvertConfig) -> bool:
    """Whether the run has the dedupe stage: content keys, or user groups for splits it makes."""
    return config.dedupe.keys or (config.dedupe.user_groups and config.plan.split_fractions is not None)


def _of(kind):
    """A FlatMap function keeping the elements of type `kind`."""
    return lambda item: [item] if isinstance(item, kind) else []


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How this run of a conversion goes, besides its ConvertConfig (_execute.py decides them)."""

    num_chunks: int  # of the staged listing
    info: dict  # the manifest's `run`: runner, workers, source, start time, and `resumed` after --resume
    group_target: int = GROUP_TARGET  # references per rank task and part (plan.py); tests lower it
    lookahead: bool = False  # PrepareChunk may emit from finish_bundle: the runner keeps what it emits
    suspects: frozenset = frozenset()  # after --resume: the inputs the killed run was reading, for the sandbox


def build(
    p: beam.Pipeline, config: ConvertConfig, listing: Staged, run: RunSettings, on_step: StepHook | None = None
) -> None:
    """Adds the conversion steps to pipeline `p` (the listing must be staged).

    With `config.resume`, complete chunks and shards of the interrupted run are reused, and
    `run.suspects`, the inputs it was reading when it was killed, are prepared in a sandbox.
    `on_step` is the test hook of checkpoints.py.
    """
    work = WorkDir(config.output)
    labels = listing.classes
    groups = listing.groups or labels  # what the planner balances: classes, or strata (task_inputs)
    task = None
    if listing.task != "classification":
        t = config.tasks
        task = TaskSpec(listing.task, labels, t.bad_boxes, t.crowd, t.skip_empty, listing.masks, t.masks)
    reuse = config.resume
    chunks = spread(create(p, "ListChunks", list(range(run.num_chunks))), "SpreadChunks")
    outcomes = chunks | "PrepareImages" >> beam.ParDo(
        prepare.PrepareChunk(
            work,
            groups,
            PrepareOptions.from_config(config, task, run.suspects),
            config.workers,
            reuse,
            lookahead=run.lookahead,
            on_step=on_step,
        )
    )
    counts = outcomes | "Prepared" >> beam.FlatMap(_of(prepare.ChunkCounts))
    rejects = outcomes | "Rejected" >> beam.FlatMap(_of(prepare.RejectedInputs))
    grouped = grouping_stage(config)
    if grouped:  # duplicate and user groups (dedupe.py): counts by planner group, policy rejects
        settings = DedupeSettings(
            groups,
            config.dedupe,
            config.plan.seed,
            config.plan.split_fractions,
            listing.task == "classification",
            workers=config.workers,
            images=run.num_chunks * MAX_CHUNK,
        )
        regrouped = counts | "Dedupe" >> Dedupe(work, config.output, settings)
        counts = regrouped | "Regrouped" >> beam.FlatMap(_of(prepare.ChunkCounts))
    notes = []
    if grouped:
        notes = [regrouped | "GroupNotes" >> beam.FlatMap(_of(GroupNotes))]
    reused = outcomes | "ReusedChunks" >> beam.FlatMap(_of(prepare.ReusedChunk))
    boxes = outcomes | "Boxes" >> beam.FlatMap(_of(prepare.BoxNotes))
    ranked = counts | "PlanShards" >> PlanShards(len(groups), config.plan, work, run.group_target, groups, grouped)
    width = write_width(config.workers)
    writing = write.WriteOptions(
        config.output,
        config.source,
        labels,
        task=listing.task,
        groups=groups,
        reuse=reuse,
        index=config.index,
        keys=config.dedupe.keys,
        file_format=config.file_format,
        format_options=config.format_options,
    )
    written = (
        ranked
        | "Entries"
        >> beam.FlatMap(
            lambda r: [(write.write_task(r.key, width), (r.key, r.section))] if isinstance(r, PartEntries) else []
        )
        | "GroupParts" >> beam.GroupByKey()
        | "WriteShards" >> beam.ParDo(write.WriteParts(work, writing, config.workers, width, on_step=on_step))
    )
    whole = written | "WholeShards" >> beam.FlatMap(_of(write.WrittenShard))
    joined = (
        written
        | "Parts" >> beam.FlatMap(lambda w: [(w.shard, w)] if isinstance(w, write.WrittenPart) else [])
        | "GroupShardParts" >> beam.GroupByKey()
        | "ConcatParts" >> beam.ParDo(write.ConcatParts(work, writing, on_step=on_step))
    )
    capped = (
        ranked
        | "Capped" >> beam.FlatMap(lambda r: [(r.label, r.count)] if isinstance(r, Capped) else [])
        | "CountCapped" >> beam.CombinePerKey(sum)
        | "TagCapped" >> beam.MapTuple(Capped)
    )
    (
        (whole, joined, rejects, capped, reused, boxes, *notes)
        | "Summary" >> beam.Flatten()
        | "OneKey" >> beam.Map(lambda item: (None, item))
        | "GatherSummary" >> beam.GroupByKey()
        | "WriteManifest"
        >> beam.FlatMap(
            publish,
            PublishInputs(
                config.output,
                labels,
                config.manifest_options(),
                found=listing.found,
                tool=tool_info(),
                run=run.info,
                splits=listing.splits,
                task=listing.task,
                categories=listing.categories,
                keys=config.dedupe.keys,
            ),
            work,
            on_step,
        )
    )
