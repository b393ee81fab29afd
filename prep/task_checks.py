"""`prep verify`'s checks of multi-label, detection and segmentation datasets. No TensorFlow.

Per record (`record_issues`, and `mask_issues` for --deep), what the contract
(`prep.core.schema`) promises: boxes within [0, 1] with xmin <= xmax and ymin <= ymax,
class ids naming the manifest's labels (detection from 1, multi-label from 0) with the
label's name as text, 0/1 crowd and difficult flags, a decimal `image/source_id`
(detection and segmentation), detection's yxyx box list (tfds') equal to its four box lists
(Model Garden's); with --deep, every mask a single-channel PNG of the image's
size whose values are 0/1 (instance: `area` is its pixel count, its pixels lie in the object's box
within a pixel) or class values and the ignore value (semantic).

Per shard (`Tally`): images containing each class, objects per class, the largest object
count and the images without labels, recomputed from the records for comparison with the
manifest. Per manifest (`manifest_issues`): the task fields agree with themselves.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import math

from prep.core.manifest import NO_STRATUM, Manifest
from prep.core.manifest_checks import STRATIFIED
from prep.core.schema import IGNORE_VALUE, OBJECT_BBOX
from prep.core.task_record import TaskRecord


@dataclasses.dataclass
class Tally:
    """What one shard's records hold, as read (class names as in the manifest's labels)."""

    images: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # images containing each
    boxes: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # objects per class
    max_boxes: int = 0
    unlabelled: int = 0  # records without labels or objects (the NO_STRATUM images)
    classes_read: bool = True  # False: segmentation without --deep (class maps not decoded)

    def add(self, record: TaskRecord, labels, present: list[int] | None) -> None:
        """Counts a record; `present` is the segmentation classes found in its mask (None: not decoded)."""
        if record.task == "multilabel":
            names = {_name(labels, i) for i in record.labels}
        elif record.task == "detection":
            names = {_name(labels, o.label - 1) for o in record.objects}
            self.boxes.update(_name(labels, o.label - 1) for o in record.objects)
            self.max_boxes = max(self.max_boxes, len(record.objects))
        elif present is None:
            self.classes_read = False
            return
        else:
            names = {_name(labels, v) for v in present}
        self.images.update(names)
        self.unlabelled += not names


def _name(labels, index: int) -> str:
    return labels[index] if 0 <= index < len(labels) else f"<label id {index + 1}>"


def record_issues(record: TaskRecord, labels) -> list[str]:
    """What is wrong with a parsed task record's fields, without decoding any image or mask."""
    issues = []
    if record.task == "multilabel":
        for i, (label, text) in enumerate(zip(record.labels, record.texts)):
            if not 0 <= label < len(labels):
                issues.append(f"image/class/label[{i}] is {label}, not an id in 0..{len(labels) - 1}")
            elif labels[label] != text:
                issues.append(f"image/class/text[{i}] is {text!r} but label {label} is {labels[label]!r}")
        if len(set(record.labels)) != len(record.labels):
            issues.append(f"image/class/label repeats an id: {list(record.labels)}")
    elif record.task == "detection":
        for i, o in enumerate(record.objects):
            issues += [f"object {i}: {message}" for message in _object_issues(o, labels)]
        issues += _bbox_issues(record)
    return issues


_YXYX = ("ymin", "xmin", "ymax", "xmax")


def _bbox_issues(record: TaskRecord) -> list[str]:
    """tfds reads the boxes from image/object/bbox/yxyx, Model Garden from the four lists: they must agree, or
    the two readers train on other boxes (and without the key tfds reads no boxes at all, silently)."""
    if record.bbox is None:  # (harmless where the record has no objects: tfds reads none either way)
        return (
            [f"{OBJECT_BBOX} is missing: tensorflow-datasets would read this record as having no boxes"]
            if record.objects
            else []
        )
    want = record.yxyx()
    if len(record.bbox) != len(want):
        return [f"{OBJECT_BBOX} holds {len(record.bbox)} values, not 4 per object ({len(want)})"]
    differ = [
        i
        for i, (got, expected) in enumerate(zip(record.bbox, want))
        if got != expected and not (math.isnan(got) and math.isnan(expected))
    ]
    if not differ:
        return []
    i = differ[0]
    more = f" (and {len(differ) - 1} more values)" if len(differ) > 1 else ""
    return [
        f"{OBJECT_BBOX}[{i}] is {record.bbox[i]!r} but object {i // 4}'s {_YXYX[i % 4]} is {want[i]!r}{more}: "
        "tensorflow-datasets would read other boxes than Model Garden"
    ]


def _object_issues(o, labels) -> list[str]:
    issues = []
    coords = {"xmin": o.xmin, "ymin": o.ymin, "xmax": o.xmax, "ymax": o.ymax}
    outside = [f"{k} {v!r}" for k, v in coords.items() if not (math.isfinite(v) and 0.0 <= v <= 1.0)]
    if outside:
        issues.append(f"box outside [0, 1]: {', '.join(outside)}")
    if o.xmin > o.xmax:
        issues.append(f"box has xmin {o.xmin!r} > xmax {o.xmax!r}")
    if o.ymin > o.ymax:
        issues.append(f"box has ymin {o.ymin!r} > ymax {o.ymax!r}")
    if not 1 <= o.label <= len(labels):
        issues.append(f"image/object/class/label {o.label} is not an id in 1..{len(labels)} (0 is background)")
    elif labels[o.label - 1] != o.text:
        issues.append(f"image/object/class/text is {o.text!r} but id {o.label} is {labels[o.label - 1]!r}")
    if not (math.isfinite(o.area) and o.area >= 0):
        issues.append(f"image/object/area is {o.area!r}")
    for key, value in (("is_crowd", o.crowd), ("difficult", o.difficult)):
        if value not in (0, 1):
            issues.append(f"image/object/{key} is {value}, not 0 or 1")
    return issues


def source_id_ok(record: TaskRecord) -> bool:
    """Detection and segmentation records carry a decimal image/source_id (multi-label needs none)."""
    if record.task == "multilabel":
        return True
    sid = record.source_id
    return sid is not None and sid.isascii() and sid.isdigit()


def _single_channel_png(data: bytes, what: str, size: tuple[int, int]):
    """(the histogram and bounding box of non-zero pixels of a single-channel 8-bit PNG of `size` (w, h),
    None), or (None, message)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.format != "PNG":
                return None, f"{what} is {img.format or 'not an image'}, not PNG"
            if img.mode != "L":
                return None, f"{what} has mode {img.mode}, not single-channel 8-bit (L)"
            if img.size != size:
                return None, f"{what} is {img.size[0]}x{img.size[1]}, the image is {size[0]}x{size[1]}"
            return (img.histogram(), img.getbbox()), None  # in C: cheaper than a numpy array of every pixel
    except Exception as exc:  # Pillow raises many types on damaged data
        return None, f"{what} does not decode: {type(exc).__name__}: {exc}"


def _instance_mask_issues(i: int, o, size: tuple[int, int]) -> list[str]:
    """An instance mask is 0/1, its pixels are the object's area, and they lie in its box (within a pixel)."""
    facts, problem = _single_channel_png(o.mask, f"object {i}: image/object/mask", size)
    if problem:
        return [problem]
    histogram, bbox = facts
    found = [v for v, n in enumerate(histogram) if n]
    if any(v > 1 for v in found):
        return [f"object {i}: image/object/mask holds values {_values(found)}, an instance mask holds 0 and 1"]
    issues = []
    if abs(histogram[1] - o.area) > 0.5:
        issues.append(f"object {i}: image/object/area is {o.area!r}, its mask covers {histogram[1]} pixels")
    if bbox is not None:
        w, h = size
        box = (o.xmin * w, o.ymin * h, o.xmax * w, o.ymax * h)
        outside = max(box[0] - bbox[0], box[1] - bbox[1], bbox[2] - box[2], bbox[3] - box[3])
        if outside > 1:
            issues.append(
                f"object {i}: image/object/mask reaches {outside:.1f} px outside its box (mask pixels "
                f"x {bbox[0]}..{bbox[2] - 1}, y {bbox[1]}..{bbox[3] - 1})"
            )
    return issues


def mask_issues(record: TaskRecord, num_classes: int, ignore_value: int | None) -> tuple[list[str], list[int] | None]:
    """Decodes every mask of a record (for --deep): issues, and for segmentation the class values present."""
    size = (record.width, record.height)
    if record.task == "detection" and record.masks:
        return [m for i, o in enumerate(record.objects) for m in _instance_mask_issues(i, o, size)], None
    if record.task == "segmentation":
        ignore = IGNORE_VALUE if ignore_value is None else ignore_value
        facts, problem = _single_channel_png(record.segmentation or b"", "image/segmentation/class/encoded", size)
        if problem:
            return [problem], None
        found = [v for v, n in enumerate(facts[0]) if n]
        bad = [v for v in found if v >= num_classes and v != ignore]
        issues = []
        if bad:
            issues.append(
                f"image/segmentation/class/encoded holds values {_values(bad)}, not class values "
                f"0..{num_classes - 1} or the ignore value {ignore}"
            )
        return issues, [v for v in found if v < num_classes]
    return [], None


def _values(values) -> str:
    values = [int(v) for v in values]
    return ", ".join(map(str, values[:8])) + (" ..." if len(values) > 8 else "")


def manifest_issues(manifest: Manifest) -> list[str]:
    """Where the task fields of a well-shaped manifest contradict themselves or the task."""
    task, labels = manifest.task, list(manifest.labels)
    messages = []
    if task == "detection":
        if manifest.categories is None:
            messages.append("task is detection but the manifest has no categories")
        else:
            got = [(c.id, c.name) for c in manifest.categories]
            want = list(enumerate(labels, 1))
            if got != want:
                messages.append(
                    f"categories must be the labels with ids 1..{len(labels)} in order, "
                    f"got {[f'{i}={n}' for i, n in got]}"
                )
    if task == "segmentation" and manifest.ignore_value not in (None, IGNORE_VALUE):
        messages.append(
            f"ignore_value is {manifest.ignore_value}, records of this version mark ignored pixels with {IGNORE_VALUE}"
        )
    rank = {name: i for i, name in enumerate(labels)}  # looked up per shard: never a scan of the labels
    exact = exact_strata(manifest)
    for split, info in manifest.splits.items():
        for shard in info.shards:
            messages += _shard_fields(task, rank, shard, exact)
        if task == "detection":
            summed: collections.Counter[str] = collections.Counter()
            for shard in info.shards:
                summed.update(shard.box_counts or {})
            if info.box_counts is None:
                messages.append(f"split {split}: detection split without box_counts")
            elif {k: v for k, v in info.box_counts.items() if v} != {k: v for k, v in summed.items() if v}:
                messages.append(
                    f"split {split}: box_counts {info.box_counts} are not the sum of its shards' {dict(summed)}"
                )
            if info.max_boxes is None:
                messages.append(f"split {split}: detection split without max_boxes")
    boxes = manifest.inputs.boxes
    if task == "detection":
        if boxes is None:
            messages.append("task is detection but inputs.boxes is missing")
        else:
            if not boxes.reconciles:
                messages.append(
                    f"inputs.boxes: read {boxes.read} is not written {boxes.written} + dropped {boxes.dropped}"
                )
            if sum(boxes.dropped_by_reason.values()) != boxes.dropped:
                messages.append(
                    f"inputs.boxes: dropped_by_reason sums to {sum(boxes.dropped_by_reason.values())}, "
                    f"dropped is {boxes.dropped}"
                )
            held = sum(sum((s.box_counts or {}).values()) for _, s in manifest.shards())
            if held != boxes.written:
                messages.append(f"inputs.boxes.written is {boxes.written} but the shards' box_counts sum to {held}")
    return messages


def exact_strata(manifest: Manifest) -> bool:
    """Whether each image's stratum is one of the classes its record holds (NO_STRATUM: none): true for
    multi-label, and for detection when no box was dropped (strata are taken before boxes are judged)."""
    if manifest.task == "multilabel":
        return True
    boxes = manifest.inputs.boxes
    return manifest.task == "detection" and boxes is not None and boxes.dropped == 0


def _shard_fields(task: str, labels: dict[str, int], shard, exact_strata: bool) -> list[str]:
    """What a shard's task fields break; `labels` gives each label's id. Only the classes and strata the
    shard names are looked at (one it does not name holds 0), so the work grows with what it holds."""
    messages = []
    where = shard.file
    if task in STRATIFIED:
        strata = shard.stratum_counts
        if strata is None:
            return [f"{where}: a {task} shard without stratum_counts"]
        # (that they sum to examples is manifest_checks.contradictions')
        unknown = sorted(name for name in strata if name not in labels and name != NO_STRATUM)
        if unknown:
            messages.append(f"{where}: stratum_counts name strata that are not labels: {', '.join(map(repr, unknown))}")
        # An image's stratum comes from its annotations before boxes are dropped (box_outside, crowd, ...), so
        # only where none was dropped (and always for multi-label) does an image of stratum c contain c.
        if exact_strata:
            over = [
                name for name, n in sorted(strata.items()) if name in labels and n > shard.class_counts.get(name, 0)
            ]
            if over:
                messages.append(
                    f"{where}: stratum_counts exceed class_counts for {', '.join(map(repr, over))}: "
                    "every image of a class's stratum contains the class"
                )
    if task == "detection":
        if shard.box_counts is None:
            messages.append(f"{where}: a detection shard without box_counts")
        else:
            fewer = sorted(
                (
                    name
                    for name, n in shard.class_counts.items()
                    if name in labels and shard.box_counts.get(name, 0) < n
                ),
                key=labels.__getitem__,
            )
            if fewer:
                messages.append(
                    f"{where}: box_counts below class_counts for {', '.join(map(repr, fewer))}: "
                    "each image containing a class holds at least one of its boxes"
                )
    return messages
