"""Records of multi-label, detection and segmentation inputs, built around a prepared image.

`TaskSpec` is what PrepareChunk needs to know of the task; `build_record` turns an input
(its `InputRef.extra`, see prep.core.task_inputs) and its prepared image into a
`TaskRecord`, after the image rule: boxes and masks follow the image's EXIF orientation
and resize exactly as its pixels (`place_objects`, `prepare_mask`). Besides the record it
gives the input's `tags` (class id -> objects of it, for the shard's counts) and its box
notes and tally (for rejects.jsonl and inputs.boxes).
"""

from __future__ import annotations

import functools
import io
import json
import types
import typing
from collections.abc import Callable
from typing import Any

from prep.core import storage
from prep.core.image_rules import ImageRejected, PreparedImage
from prep.core.listing import InputRef, Reject
from prep.core.task_inputs import BOX_REJECTED_IMAGE, BoxNote, BoxTally, dropped_tally
from prep.core.task_record import BoxObject, ObjectColumns, TaskRecord

if typing.TYPE_CHECKING:
    from prep.core.annotations import BoxPolicy, PlainBoxes
    from prep.core.annotations.model import Problem

ReadInput = Callable[[str], bytes | tuple[str, str]]  # spill.read_input: a file's bytes or (reason, detail)


class TaskSpec(typing.NamedTuple):
    """The task of a conversion, as PrepareChunk needs it."""

    task: str  # multilabel, detection or segmentation
    classes: tuple[str, ...]
    bad_boxes: str = "clip"
    crowd: str = "keep"
    skip_empty: bool = False
    masks: bool = False  # detection: write image/object/mask (the source has polygons or RLE)
    mask_dir: str | None = None  # segmentation: --masks


class TaskInfo(typing.NamedTuple):
    """What one input adds to the counts: ((class id, objects), ...), box notes, box tally."""

    tags: tuple[tuple[int, int], ...] = ()
    notes: tuple[BoxNote, ...] = ()
    tally: BoxTally | None = None


def rejected_info(spec: TaskSpec, ref: InputRef) -> TaskInfo | None:
    """The counts of an input rejected before its record was built: its boxes are not written."""
    if spec.task != "detection" or ref.extra is None:
        return None
    from prep.core.annotations.model import object_count

    n = object_count(json.loads(ref.extra)["a"])
    return TaskInfo(tally=dropped_tally(n, [BOX_REJECTED_IMAGE] * n))


def build_record(
    spec: TaskSpec, ref: InputRef, image: PreparedImage, read_input: ReadInput
) -> tuple[TaskRecord | Reject, TaskInfo]:
    """The record of `ref` around `image`, or a Reject, and the input's counts.

    `read_input(path)` gives a file's bytes or (reason, detail) (segmentation reads masks with it).
    """
    assert ref.extra is not None  # task_inputs gives every input of a task its extra
    extra = json.loads(ref.extra)
    common: dict[str, Any] = dict(
        format=image.format,
        height=image.height,
        width=image.width,
        channels=image.channels,
        filename=ref.path,
        source_id=extra.get("s"),
    )
    if spec.task == "multilabel":
        ids = tuple(extra["l"])
        record = TaskRecord.build(
            "multilabel",
            image.encoded,
            **{**common, "source_id": None},
            labels=ids,
            texts=tuple(spec.classes[i] for i in ids),
        )
        return record, TaskInfo(tags=tuple((i, 0) for i in ids))
    if spec.task == "segmentation":
        return _segmentation(spec, ref, image, extra, common, read_input)
    return _detection(spec, ref, image, extra, common)


def _detection(
    spec: TaskSpec, ref: InputRef, image: PreparedImage, extra: dict[str, Any], common: dict[str, Any]
) -> tuple[TaskRecord | Reject, TaskInfo]:
    policy, final = _policy(spec.bad_boxes, spec.crowd), (image.width, image.height)
    try:  # every box plain (the usual image): columns, no object per box; else each box judged
        plain = None if spec.masks else _place().place_plain(extra["a"], image.stored, image.orientation, final, policy)
    except ImageRejected as exc:  # size_mismatch, which `place_objects` would raise alike
        from prep.core.annotations.model import object_count

        read = object_count(extra["a"])
        return Reject(ref.path, exc.reason, exc.detail), TaskInfo(
            tally=dropped_tally(read, [BOX_REJECTED_IMAGE] * read)
        )
    if plain is not None:
        return _plain_record(spec, ref, image, plain, common)
    from prep.core.annotations import ImageAnnotation, place_objects

    ann = ImageAnnotation.from_json(extra["a"])
    read = len(ann.objects)
    try:
        placed = place_objects(
            ann,
            image.stored,
            image.orientation,
            final,
            policy,
            spec.masks,
        )
    except ImageRejected as exc:
        return Reject(ref.path, exc.reason, exc.detail), TaskInfo(
            tally=dropped_tally(read, [BOX_REJECTED_IMAGE] * read)
        )
    notes = tuple(_note(ref.path, p) for p in placed.dropped) + tuple(
        _note(ref.path, p, clipped=True) for p in placed.clipped
    )
    dropped: dict[str, int] = {}
    for p in placed.dropped:
        dropped[p.reason] = dropped.get(p.reason, 0) + 1
    written = len(placed.objects)
    if written + len(placed.dropped) != read:
        raise RuntimeError(
            f"internal error: {ref.path}: {read} boxes read, {written} placed and {len(placed.dropped)} dropped"
        )
    ids = _class_ids(spec.classes)
    if not placed.objects and spec.skip_empty:
        tally = BoxTally(read, 0, 0, tuple(sorted(dropped.items())))
        return Reject(ref.path, "no_objects", "the image has no objects left (--skip-empty)"), TaskInfo(
            notes=tuple(n for n in notes if not n.clipped), tally=tally
        )
    masks = spec.masks
    objects = tuple(
        [
            BoxObject(
                ids[o.label] + 1,
                o.label,
                o.xmin,
                o.ymin,
                o.xmax,
                o.ymax,
                o.area,
                int(o.crowd),
                int(o.difficult),
                o.mask_png if masks else None,
            )
            for o in placed.objects
        ]
    )
    counts: dict[int, int] = {}
    for o in objects:
        counts[o.label - 1] = counts.get(o.label - 1, 0) + 1
    record = TaskRecord.build("detection", image.encoded, **common, objects=objects, masks=spec.masks)
    tally = BoxTally(read, written, len(placed.clipped), tuple(sorted(dropped.items())))
    return record, TaskInfo(tags=tuple(sorted(counts.items())), notes=notes, tally=tally)


def _plain_record(
    spec: TaskSpec, ref: InputRef, image: PreparedImage, plain: PlainBoxes, common: dict[str, Any]
) -> tuple[TaskRecord | Reject, TaskInfo]:
    """`_detection`'s record when every box is plain (`place_plain`): each one written, none clipped or dropped."""
    read = len(plain.labels)
    if not read and spec.skip_empty:
        tally = BoxTally(0, 0, 0, ())
        return Reject(ref.path, "no_objects", "the image has no objects left (--skip-empty)"), TaskInfo(tally=tally)
    ids = _class_ids(spec.classes)
    labels = [ids[name] + 1 for name in plain.labels]  # the record's class ids count from 1
    # each class's objects counted by `list.count`, in C: an image holds few classes
    tags = tuple(sorted([(label - 1, labels.count(label)) for label in set(labels)]))
    box = (plain.xmin, plain.ymin, plain.xmax, plain.ymax)
    objects = ObjectColumns(labels, plain.labels, box, plain.area, (plain.crowd, plain.difficult))
    record = TaskRecord.build("detection", image.encoded, **common, objects=objects, masks=False)
    return record, TaskInfo(tags=tags, tally=BoxTally(read, read, 0, ()))


@functools.lru_cache(maxsize=16)
def _class_ids(classes: tuple[str, ...]) -> dict[str, int]:
    """Class name -> id from 0; made once per conversion's classes, not once per image (the caller only reads it)."""
    return {name: i for i, name in enumerate(classes)}


@functools.cache
def _place() -> types.ModuleType:
    """prep.core.annotations, imported on a detection conversion's first record (not by every conversion's
    import of this module), then one call per record instead of an import statement's lookups."""
    from prep.core import annotations

    return annotations


@functools.lru_cache(maxsize=16)
def _policy(bad_boxes: str, crowd: str) -> BoxPolicy:
    """The conversion's BoxPolicy, checked once, not once per image."""
    from prep.core.annotations import BoxPolicy

    return BoxPolicy(bad_boxes=bad_boxes, crowd=crowd)


def _note(path: str, p: Problem, clipped: bool = False) -> BoxNote:
    assert p.box is not None  # place_objects' problems are each of one box
    return BoxNote(path, p.box, p.reason, p.detail, clipped)


def _segmentation(
    spec: TaskSpec,
    ref: InputRef,
    image: PreparedImage,
    extra: dict[str, Any],
    common: dict[str, Any],
    read_input: ReadInput,
) -> tuple[TaskRecord | Reject, TaskInfo]:
    import numpy as np
    from PIL import Image

    from prep.core.annotations import prepare_mask

    assert spec.mask_dir is not None  # segmentation's TaskSpec names --masks
    data = read_input(storage.join(spec.mask_dir, extra["m"]))
    if isinstance(data, tuple):
        return Reject(ref.path, "unreadable_mask", f"mask {extra['m']}: {data[1]}"), TaskInfo()
    try:
        png = prepare_mask(data, image.stored, image.orientation, (image.width, image.height), len(spec.classes))
    except ImageRejected as exc:
        return Reject(ref.path, exc.reason, exc.detail), TaskInfo()
    values = np.unique(np.asarray(Image.open(io.BytesIO(png))))
    tags = tuple((int(v), 0) for v in values if v < len(spec.classes))
    return TaskRecord.build("segmentation", image.encoded, **common, segmentation=png), TaskInfo(tags=tags)
