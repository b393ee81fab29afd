"""The last step, `publish`: rejects.jsonl, the shard counts, the tfds metadata, then the manifest, written last
and atomically.

Order matters for crash safety: the manifest is written in full under a temporary
name (`storage.temp_path`), then renamed to manifest.json, and only then is the work
directory deleted. A kill before the rename leaves no manifest.json and a resumable
work directory; a kill after it leaves a finished dataset plus a leftover work
directory, which `--resume` (or `--overwrite`) removes.
"""

from __future__ import annotations

import collections
import dataclasses
import time

from beam_jobs.plan import Capped
from beam_jobs.prepare import BoxNotes, RejectedInputs, ReusedChunk
from beam_jobs.write import WrittenShard
from prep.core import accounting, storage, tfds_meta
from prep.core.layout import parse_split_fractions
from prep.core.manifest import FILENAME, LABEL_MAP_CSV, LABEL_MAP_PBTXT, REJECTS, SHARD_COUNTS, Extras, Manifest
from prep.core.manifest_parts import GroupCounts, InFlight, Resumed, Run
from prep.core.run import checkpoints, dedupe_files, publish_keys
from prep.core.run.checkpoints import StepHook
from prep.core.run.dedupe_files import GroupNotes
from prep.core.run.heap import release_free_memory
from prep.core.run.output_dir import delete_unplanned_shards
from prep.core.task_inputs import BoxTally
from prep.core.workdir import WorkDir


@dataclasses.dataclass(frozen=True)
class PublishInputs:
    """What the last step needs besides the pipeline's summary: the run's facts, gathered once in graph.py."""

    output: str
    labels: tuple[str, ...]
    options: dict  # ConvertConfig.manifest_options()
    found: int  # inputs listed
    tool: dict
    run: dict  # runner, workers, source, start time and, after --resume, {"chunks": n, "in_flight": [...]}
    splits: tuple[str, ...] = ()  # the splits SOURCE names (split folders or a split column)
    task: str = "classification"
    categories: tuple = ()  # detection: the Category of each class
    keys: bool = False  # write OUTPUT/content_keys.jsonl


def publish(element, facts: PublishInputs, work: WorkDir, on_step: StepHook | None = None):
    """(None, [WrittenShard | RejectedInputs | Capped | ReusedChunk | BoxNotes | GroupNotes]) -> the count of
    examples written.

    Writes rejects.jsonl and the files tensorflow-datasets reads (`tfds_meta`), publishes
    manifest.json, then removes the work directory. Each of `facts.splits` must keep an
    example. Detection also writes label_map.pbtxt and label_map.csv, and its boxes are counted.
    """
    output, labels, options, run, task = facts.output, facts.labels, facts.options, facts.run, facts.task
    _, items = element
    shards: list[WrittenShard] = []
    rejects = checkpoints.read_listing_rejects(work)
    listed_boxes = checkpoints.read_listing_boxes(work)
    notes, tally = listed_boxes if listed_boxes is not None else ([], BoxTally())
    capped_by_class = {name: 0 for name in labels}
    chunks_reused = 0
    groups = GroupCounts()
    reject_batches: list[int] = []
    for item in items:
        if isinstance(item, WrittenShard):
            shards.append(item)
        elif isinstance(item, RejectedInputs):
            rejects.extend(item.rejects)
        elif isinstance(item, ReusedChunk):
            chunks_reused += 1
        elif isinstance(item, Capped):
            capped_by_class[labels[item.label]] += item.count
        elif isinstance(item, BoxNotes):
            notes.extend(item.notes)
            tally = tally.plus(item.tally)
        elif isinstance(item, GroupNotes):
            groups = groups.plus(item.counts)
            reject_batches.extend(item.reject_batches)
        else:
            raise TypeError(f"internal error: publish got {item!r}")
    # what the killed run was reading: see sandbox.py
    in_flight = set(run["resumed"].get("in_flight", ())) if "resumed" in run else set()
    by_reason: collections.Counter[str] = collections.Counter()
    in_flight_reasons: collections.Counter[str] = collections.Counter()

    def counted(stream):
        for r in stream:
            by_reason[r.reason] += 1
            if r.path in in_flight:
                in_flight_reasons[r.reason] += 1
            yield r

    # The group policies' rejects are read from their batches' files as they are written out, never held.
    merged = accounting.merged_rejects(
        [accounting.sort_rejects(rejects), *(dedupe_files.read_rejects(work, b) for b in sorted(reject_batches))]
    )
    rejects_path = storage.join(output, REJECTS)
    storage.write_streamed(rejects_path, accounting.rejects_lines(accounting.with_box_notes(counted(merged), notes)))
    accounting.check_group_rejects(groups, by_reason)
    inputs = accounting.tally(
        facts.found,
        sum(s.info.examples for s in shards),
        sum(s.converted for s in shards),
        dict(by_reason),
        capped_by_class,
        tally if task == "detection" else None,
    )
    accounting.check_outcome(inputs, {s.name.split for s in shards}, facts.splits, rejects_path)
    labels, written, inputs = accounting.settle_empty_classes(
        labels, [(s.name, s.info) for s in shards], inputs, options.get("empty_classes", "keep")
    )
    resumed = None
    if "resumed" in run:
        resumed = Resumed(
            chunks=run["resumed"]["chunks"],
            chunks_reused=chunks_reused,
            shards=len(shards),
            shards_reused=sum(s.reused for s in shards),
            in_flight=InFlight(len(in_flight), dict(sorted(in_flight_reasons.items()))) if in_flight else None,
        )
    manifest = Manifest.build(
        labels,
        options,
        written,
        inputs,
        facts.tool,
        Run(
            runner=run["runner"],
            workers=run["workers"],
            source=run["source"],
            started=run["started"],
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            seconds=round(time.time() - run["started"], 3),
            resumed=resumed,
        ),
        Extras(
            task=task,
            categories=tuple(facts.categories) if task == "detection" else None,
            max_boxes=_max_boxes(shards) if task == "detection" else None,
            groups=groups,
            fractions=dict(parse_split_fractions(options["split"]))
            if groups.pinned_images and options.get("split")
            else None,
        ),
    )
    if resumed is not None:  # a plan made anew leaves none of the old plan's shards behind
        delete_unplanned_shards(output, manifest)
    if task == "detection":  # the label maps the Object Detection API and Model Garden read
        from prep.core.annotations import label_map_csv, label_map_pbtxt

        assert manifest.categories is not None  # Manifest.build gives a detection manifest its categories
        storage.write_atomic(storage.join(output, LABEL_MAP_PBTXT), label_map_pbtxt(manifest.categories).encode())
        storage.write_atomic(storage.join(output, LABEL_MAP_CSV), label_map_csv(manifest.categories).encode())
    if facts.keys:  # the content keys of every record, so that `prep leakage` need not decode the images again
        release_free_memory()  # what the write stage freed, before the sidecar's join
        publish_keys.write_sidecar(
            output, work, [(name, s.file, s.sha256) for name, split in manifest.splits.items() for s in split.shards]
        )
    document, counts = manifest.documents()
    # The shards' counts (shard_counts.jsonl, which manifest.json names by size and SHA-256), then the tfds
    # files, all before the manifest, so that a folder with manifest.json is complete for every reader.
    if counts is not None:
        storage.write_atomic(storage.join(output, SHARD_COUNTS), counts)
    for name, data in tfds_meta.files(manifest).items():
        storage.write_atomic(storage.join(output, name), data)
    staged = storage.temp_path(storage.join(output, FILENAME))
    with storage.open_write(staged) as f:
        f.write(document)
    if on_step is not None:
        on_step("manifest")
    storage.rename(staged, storage.join(output, FILENAME))
    checkpoints.delete_work(work)
    yield inputs.written


def _max_boxes(shards) -> dict[str, int]:
    """{split: the most objects one image of it holds}."""
    out: dict[str, int] = {}
    for s in shards:
        out[s.name.split] = max(out.get(s.name.split, 0), s.max_boxes)
    return out
