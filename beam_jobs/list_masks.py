"""Listing a segmentation SOURCE (`--masks`) on workers: a first pipeline that stages the listing as the driver
would, SOURCE's files joined to the masks by a shuffle keyed on the mask path.

The driver only stats SOURCE and --masks (`prep.core.inputs.segmentation_source`); then
(`prep.core.segmentation_inputs` holds the pure parts):

    tops   = Create(top of SOURCE, top of --masks) | Reshuffle | FlatMap(list_top)
                                                    Seen (a file directly in the folder) | ListTask (a folder)
    trees  = tops' ListTasks | Reshuffle | FlatMap(list_tree)       Seen: a task a top folder, walked whole
    found  = Seen | key by mask path | GroupByKey | FlatMap(join_mask)      Found (a file of SOURCE)
    staged = Found | one key | GroupByKey | ParDo(StageSegmentation)

`StageSegmentation` makes the listing from every Found in path order with the driver's own code
(`task_inputs.segmentation_listing`) and stages it as `prep.core.run.start.ready_output` would
(`list_annotations.stage_listed`): so the staged files are the driver's, byte for byte
(tests/unit/beam_jobs/test_list_masks.py). It holds a (path, has mask) pair per file of SOURCE, on one
worker: an image's image/source_id is its rank among all the images. The driver holds nothing per input.
"""

from __future__ import annotations

import apache_beam as beam

from beam_jobs.list_annotations import stage_listed
from prep.core.segmentation_inputs import Found, ListTask, Seen, SegmentationSource, join_mask, list_top, list_tree
from prep.core.task_inputs import segmentation_listing


def _kinds(kind: type):
    return lambda item: [item] if isinstance(item, kind) else []


def stage(src: SegmentationSource, seed: int, output: str, found) -> int:
    """Lists and stages the SOURCE from the join's Founds (any order); returns the number of chunks.

    Raises:
        SourceError: as the driver's listing would (no image has a mask).
    """
    files = sorted((f.path, f.has_mask) for f in found)
    listing = segmentation_listing(src.source, src.masks, src.classes, src.layout, files)
    return stage_listed(listing, seed, output)


class StageSegmentation(beam.DoFn):
    """(None, [Found, and one None]) -> the staged listing and its summary; yields the number of chunks."""

    def __init__(self, src: SegmentationSource, seed: int, output: str):
        self._src, self._seed, self._output = src, seed, output

    def process(self, element):
        _, items = element
        yield stage(self._src, self._seed, self._output, (f for f in items if f is not None))


def build_listing(p: beam.Pipeline, src: SegmentationSource, seed: int, classes: tuple[str, ...] | None, output: str):
    """Adds the listing steps to pipeline `p` (see the module docstring); `classes` are `src`'s."""
    tops = (
        p
        | "ListTops" >> beam.Create(list(src.tasks))
        | "SpreadTops" >> beam.Reshuffle()
        | "ListTop" >> beam.FlatMap(list_top)
    )
    trees = (
        tops
        | "Folders" >> beam.FlatMap(_kinds(ListTask))
        | "SpreadFolders" >> beam.Reshuffle()
        | "ListTrees" >> beam.FlatMap(list_tree)
    )
    found = (
        (tops | "TopFiles" >> beam.FlatMap(_kinds(Seen)), trees)
        | "AllSeen" >> beam.Flatten()
        | "ByMask" >> beam.Map(lambda s: (s.key, s))
        | "GatherMasks" >> beam.GroupByKey()
        | "JoinMasks" >> beam.FlatMap(lambda kv: join_mask(kv[1]))
    )
    # the marker makes the staging task run when nothing is found, to raise the driver's error
    (
        (found, p | "StageMarker" >> beam.Create([None]))
        | "StageParts" >> beam.Flatten()
        | "StageOneKey" >> beam.Map(lambda f: (None, f))
        | "GatherStage" >> beam.GroupByKey()
        | "StageListing" >> beam.ParDo(StageSegmentation(src, seed, output))
    )


def list_here(src: SegmentationSource, seed: int, classes: tuple[str, ...] | None, output: str) -> None:
    """The steps of `build_listing`, one after another in this process (tests; the embedded runner lists a
    segmentation SOURCE on the driver, `prep.core.inputs.list_inputs`, which holds the same and is faster)."""
    seen: list[Seen] = []
    for task in src.tasks:
        for item in list_top(task):
            seen += list_tree(item) if isinstance(item, ListTask) else [item]
    by_mask: dict[bytes, list[Seen]] = {}
    for s in seen:
        by_mask.setdefault(s.key, []).append(s)
    found: list[Found] = [f for group in by_mask.values() for f in join_mask(group)]
    stage(src, seed, output, found)
