"""Listing a detection SOURCE on workers: a first pipeline that stages the listing as the driver would, its
COCO files joined to their images by a shuffle keyed on the image, its VOC and YOLO files read by many tasks.

The driver only stats SOURCE and the files (`prep.core.inputs.detection_source`); then
(`prep.core.annotations.coco_keyed` holds the pure parts):

    streamed = Create(files) | Reshuffle | FlatMap(stream_file)     ImageSeen | AnnotationSeen | FileProblem |
                                                                    ImageFault | FileRead: a task a file, streamed
    joined   = seen | key by (file, image id) | GroupByKey | FlatMap(join_image, categories)
                                                                    Joined | ImageProblem | FileProblem | ImageFault
    claimed  = images | key by (file, path) | GroupByKey | FlatMap(claimed_twice)    ImageFault
    staged   = all but the seen | one key | GroupByKey | ParDo(StageDetection)

`StageDetection` makes each file's RowSet from what the join gave (`coco_keyed.file_rows`, the same as the
driver's reader), lists SOURCE and finishes the listing with the driver's own code
(`detection_inputs.list_detection`), and stages it as `prep.core.run.start.ready_output` would: the chunk
files, the early rejects and box notes, and listed/summary.json with what the driver reads back (classes,
categories, splits, chunk sizes, the run record's listing digest). So the staged files are the driver's,
byte for byte (tests/unit/beam_jobs/test_list_annotations.py).

Pascal VOC and YOLO folders (a file per image) are read by many tasks (`prep.core.annotations.per_file`):

    planned = Create([None]) | Reshuffle | FlatMap(plan_reads)      Planned | ReadChunk: a folder's files by
                                                                    CHUNK, listed by one task
    parsed  = ReadChunks | Reshuffle | FlatMap(read_chunk)          Parsed: each file read and parsed
    staged  = Planned, Parsed | one key | GroupByKey | ParDo(StageDetection)

where `StageDetection` gives the Parsed, in the reader's order, to the driver's `read_voc` / `read_yolo`,
which match them to the images under SOURCE as on the driver. A box CSV or an Ultralytics data.yaml is read
whole by that task with the driver's readers.

What holds what: a streaming task, the file's categories and one item at a time (ijson); a join task, one
image's annotations; `StageDetection`, on one worker, what a detection listing holds on the driver today, an
image row each, their objects in a local file: the strata are dealt over every image of a split together
(`task_inputs.strata_refs`), so that step stays whole. The driver holds nothing per input.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import typing
from collections.abc import Callable, Iterator

import apache_beam as beam

from prep.core import storage
from prep.core.annotations.coco_keyed import (
    AnnotationSeen,
    FileParts,
    FileProblem,
    FileRead,
    ImageFault,
    ImageProblem,
    ImageSeen,
    Joined,
    claimed_twice,
    file_rows,
    join_image,
    keyed,
    path_key,
    stream_file,
)
from prep.core.annotations.model import AnnotationSet
from prep.core.annotations.per_file import Parsed, Planned, ReadChunk, in_order, plan_reads, read_chunk
from prep.core.annotations.rows import FileStore, ObjectStore, RowSet, rows_of
from prep.core.annotations.voc import read_voc
from prep.core.annotations.yolo import read_yolo
from prep.core.detection_inputs import DetectionSource, list_detection, read_rows
from prep.core.listing import Listing
from prep.core.ordering import listing_chunks
from prep.core.run.start import digest_listing, stage_listing, staged_of
from prep.core.split_annotations import ReadRows
from prep.core.workdir import WorkDir

Gathered = Joined | ImageProblem | FileProblem | ImageFault | FileRead


def _kinds(*kinds: type):
    return lambda item: [item] if isinstance(item, kinds) else []


class StageDetection(beam.DoFn):
    """(None, [Joined | ImageProblem | FileProblem | ImageFault | FileRead]) -> the staged listing and its
    summary (see the module docstring); yields the number of chunks."""

    def __init__(self, src: DetectionSource, output: str):
        self._src, self._output = src, output

    def process(self, element):
        _, items = element
        yield stage(self._src, self._output, items)


def stage(src: DetectionSource, output: str, items) -> int:
    """Lists and stages the detection SOURCE from the join's items (another format than COCO: the folders'
    Planned and Parsed, the other PATHs read whole with the driver's readers); returns the number of chunks.

    Raises:
        SourceError: as the driver's listing would.
    """
    args = (src.source, src.options, src.classes, src.layout, src.plan.seed, src.skip, src.plan)
    if not src.files:
        listing = list_detection(*args, _folders_read([i for i in items if i is not None]))
    else:
        with tempfile.TemporaryDirectory(prefix="prep-coco-joined-") as folder:
            spool = FileStore(os.path.join(folder, "spool.jsonl"))
            try:
                parts = _gather(items, len(src.files), spool)
                calls = iter(range(len(src.files)))

                def read(source, path, fmt, classes, work, store: ObjectStore) -> RowSet:
                    # list_detection reads the files in the order of src.files (split_annotations' order)
                    return file_rows(path, parts[next(calls)], classes, spool, store)

                listing = list_detection(*args, read)
            finally:
                spool.close()
    return stage_listed(listing, src.plan.seed, output)


def stage_listed(listing: Listing, seed: int, output: str) -> int:
    """Stages a task's listing as `prep.core.run.start.ready_output` would a driver's: the chunk files, the
    early rejects and box notes, and listed/summary.json with what the driver reads back; returns the number
    of chunks."""
    chunks = listing_chunks(listing, seed)
    work = WorkDir(output)
    stage_listing(work, chunks, listing.rejects, None if listing.boxes is None else (listing.box_notes, listing.boxes))
    digest = digest_listing(listing, chunks)
    staged = staged_of(listing)
    summary = {
        "fallback": None,
        "task": staged.task,
        "classes": list(staged.classes),
        "groups": None if staged.groups is None else list(staged.groups),
        "categories": [c.to_json() for c in staged.categories],
        "masks": staged.masks,
        "splits": list(staged.splits),
        "listed": sorted({r.label for r in listing.refs}),
        "sizes": [len(c) for c in chunks],
        "found": staged.found,
        "digest": digest.sha256,
        "inputs": digest.inputs,
        "rejected": digest.rejected,
    }
    storage.write_atomic(work.listed_summary, json.dumps(summary).encode())
    return len(chunks)


def _folders_read(items: list[Planned | Parsed]) -> ReadRows:
    """The reader `list_detection` calls for each annotation PATH in turn: a folder planned by `plan_reads`
    from the files its tasks parsed, any other with the driver's readers."""
    planned = {p.file: p.fmt for p in items if isinstance(p, Planned)}
    parsed: dict[int, list[Parsed]] = {i: [] for i in planned}
    for p in items:
        if isinstance(p, Parsed):
            parsed[p.file].append(p)
    calls = itertools.count()
    readers: dict[str, Callable[..., AnnotationSet]] = {"voc": read_voc, "yolo": read_yolo}

    def read(source, path, fmt, classes, work, store: ObjectStore) -> RowSet:
        i = next(calls)  # list_detection reads the paths in order (split_annotations' order)
        if i not in planned:
            return read_rows(source, path, fmt, classes, work, store)
        return rows_of(readers[planned[i]](source, path, classes, in_order(parsed[i])), store)

    return read


def _paths(src: DetectionSource) -> list[str]:
    """The annotation PATHs `list_detection` reads, in its order."""
    options = src.options
    return [path for _, path in options.split_annotations] or [typing.cast(str, options.annotations)]


def _gather(items, files: int, spool: ObjectStore) -> list[FileParts]:
    """The join's items by file, each row's objects put in `spool` as they come (one pass over `items`)."""
    reads: dict[int, FileRead] = {}
    parts = [FileParts(FileRead(i, None, None, None, ()), [], [], []) for i in range(files)]
    for item in items:
        if isinstance(item, Joined):
            parts[item.file].rows.append((item.order, item.row._replace(at=spool.put(item.text))))
        elif isinstance(item, (ImageProblem, FileProblem)):
            parts[item.file].problems.append(item)
        elif isinstance(item, ImageFault):
            parts[item.file].faults.append(item)
        else:
            reads[item.file] = item
    if sorted(reads) != list(range(files)):
        raise RuntimeError("internal error: a COCO file was not streamed")
    return [p._replace(read=reads[i]) for i, p in enumerate(parts)]


def _join(element, src: DetectionSource, names: dict[int, dict[int, str]]) -> Iterator:
    (file, _), items = element
    return join_image(src.files[file].file_name, items, names.get(file, {}))


def _claims(element) -> Iterator[ImageFault]:
    (_, rel), images = element
    return claimed_twice(rel.decode("utf-8", "surrogatepass"), images)


def build_listing(p: beam.Pipeline, src: DetectionSource, seed: int, classes: tuple[str, ...] | None, output: str):
    """Adds the listing steps to pipeline `p` (see the module docstring); `seed` and `classes` are `src`'s."""
    one_key = lambda item: (None, item)  # noqa: E731
    if not src.files:  # another format: VOC and YOLO files read by chunks, others whole by the staging task
        planned = (
            p
            | "ListingTask" >> beam.Create([None])
            | "SpreadTask" >> beam.Reshuffle()
            | "PlanReads" >> beam.FlatMap(lambda _: plan_reads(_paths(src), src.options.annotation_format))
        )
        parsed = (
            planned
            | "ReadChunks" >> beam.FlatMap(_kinds(ReadChunk))
            | "SpreadChunks" >> beam.Reshuffle()
            | "ReadFiles" >> beam.FlatMap(read_chunk)
        )
        # the marker makes the staging task run when no folder is planned
        (
            (planned | "Planned" >> beam.FlatMap(_kinds(Planned)), parsed, p | "StageMarker" >> beam.Create([None]))
            | "StageParts" >> beam.Flatten()
            | "StageOneKey" >> beam.Map(one_key)
            | "GatherStage" >> beam.GroupByKey()
            | "StageListing" >> beam.ParDo(StageDetection(src, output))
        )
        return
    streamed = (
        p
        | "AnnotationFiles" >> beam.Create(list(src.files))
        | "SpreadFiles" >> beam.Reshuffle()
        | "StreamFiles" >> beam.FlatMap(stream_file)
    )
    reads = streamed | "FileReads" >> beam.FlatMap(_kinds(FileRead))
    names = beam.pvalue.AsDict(reads | "Categories" >> beam.Map(lambda r: (r.file, dict(r.categories))))
    joined = (
        streamed
        | "Seen" >> beam.FlatMap(_kinds(ImageSeen, AnnotationSeen))
        | "ByImage" >> beam.Map(keyed)
        | "GatherImages" >> beam.GroupByKey()
        | "JoinImages" >> beam.FlatMap(_join, src, names)
    )
    claimed = (
        streamed
        | "Images" >> beam.FlatMap(lambda i: [i] if isinstance(i, ImageSeen) and i.entry[0] is not None else [])
        | "ByPath" >> beam.Map(lambda i: ((i.file, path_key(i.entry[0])), i))
        | "GatherPaths" >> beam.GroupByKey()
        | "PathsClaimed" >> beam.FlatMap(_claims)
    )
    (
        (streamed | "OfFiles" >> beam.FlatMap(_kinds(FileRead, FileProblem, ImageFault)), joined, claimed)
        | "StageParts" >> beam.Flatten()
        | "StageOneKey" >> beam.Map(one_key)
        | "GatherStage" >> beam.GroupByKey()
        | "StageListing" >> beam.ParDo(StageDetection(src, output))
    )


def list_here(src: DetectionSource, seed: int, classes: tuple[str, ...] | None, output: str) -> None:
    """The steps of `build_listing`, one after another in this process (tests; the embedded runner lists a
    detection SOURCE on the driver, `prep.core.inputs.list_inputs`, which holds the same and is faster)."""
    if not src.files:
        planned = list(plan_reads(_paths(src), src.options.annotation_format))
        parsed = [f for c in planned if isinstance(c, ReadChunk) for f in read_chunk(c)]
        stage(src, output, [p for p in planned if isinstance(p, Planned)] + parsed)
        return
    streamed = [item for f in src.files for item in stream_file(f)]
    names = {r.file: dict(r.categories) for r in streamed if isinstance(r, FileRead)}
    by_image: dict = {}
    for key, item in map(keyed, (i for i in streamed if isinstance(i, (ImageSeen, AnnotationSeen)))):
        by_image.setdefault(key, []).append(item)
    by_path: dict = {}
    for i in streamed:
        if isinstance(i, ImageSeen) and i.entry[0] is not None:
            by_path.setdefault((i.file, path_key(i.entry[0])), []).append(i)
    gathered: list[Gathered] = [i for i in streamed if isinstance(i, (FileRead, FileProblem, ImageFault))]
    gathered += [j for entry in by_image.items() for j in _join(entry, src, names)]
    gathered += [f for entry in by_path.items() for f in _claims(entry)]
    stage(src, output, gathered)
