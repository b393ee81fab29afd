"""Small multi-label, detection and segmentation datasets written as the contract says `prep convert` writes them.

Until the converter writes these tasks, verify, inspect, tfds and Model Garden tests read
datasets made here: records built with `TaskRecord` (so byte-for-byte what the writer
writes), framed with `prep.core.tfrecord`, laid out as the planner does (strata end to end,
position p of a split to shard p mod N), and a manifest built from the typed parts with
every task field (class_counts as images containing each class, box_counts, max_boxes,
stratum_counts, categories, inputs.boxes, ignore_value) plus the tfds metadata.

Pictures are drawn so that what a record says can be checked against its pixels: each
object is a filled rectangle (or ellipse, with its mask) in its class's colour.
"""

from __future__ import annotations

import collections
import hashlib
import io
import pathlib

import numpy as np
from PIL import Image, ImageDraw

from prep.core import manifest as m
from prep.core import tfds_meta
from prep.core.naming import ShardName
from prep.core.schema import IGNORE_VALUE
from prep.core.task_record import BoxObject, TaskRecord
from prep.core.tfrecord import frame

COLOURS = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240))
BACKGROUND = (128, 128, 128)


def png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array.astype(np.uint8), "L").save(buf, "PNG")
    return buf.getvalue()


def jpeg(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=95)
    return buf.getvalue()


def detection_record(
    index: int,
    size: tuple[int, int],
    objects: list[tuple[int, tuple[int, int, int, int]]],
    labels: list[str],
    masks: bool = True,
    fmt: str = "jpeg",
) -> TaskRecord:
    """A JPEG of `size` (w, h) with each object (class id from 1, pixel box x0, y0, x1, y1 exclusive) drawn
    filled in its class colour; the mask of an object is its ellipse, 0/1."""
    w, h = size
    img = Image.new("RGB", size, BACKGROUND)
    draw = ImageDraw.Draw(img)
    boxes = []
    for label, (x0, y0, x1, y1) in objects:
        mask = Image.new("L", size, 0)
        ImageDraw.Draw(mask).ellipse((x0, y0, x1 - 1, y1 - 1), fill=1)
        draw.bitmap((0, 0), mask.point(lambda v: 255 * v), fill=COLOURS[(label - 1) % len(COLOURS)])
        area = float(np.asarray(mask).sum())
        boxes.append(
            BoxObject(
                label,
                labels[label - 1],
                x0 / w,
                y0 / h,
                x1 / w,
                y1 / h,
                area,
                crowd=int(index % 7 == 3),
                difficult=0,
                mask=png(np.asarray(mask)) if masks else None,
            )
        )
    if fmt == "png":
        buf = io.BytesIO()
        img.save(buf, "PNG")
        encoded = buf.getvalue()
    else:
        encoded = jpeg(img)
    return TaskRecord.build(
        "detection",
        encoded,
        format=fmt,
        height=h,
        width=w,
        channels=3,
        filename=f"img_{index:04d}.{'png' if fmt == 'png' else 'jpg'}",
        source_id=str(index + 1),
        objects=tuple(boxes),
        masks=masks,
    )


def segmentation_record(
    index: int, size: tuple[int, int], regions: list[tuple[int, tuple[int, int, int, int]]], ignore_border: bool = True
) -> TaskRecord:
    """A PNG image and its class map: value 0 (background) everywhere, each region (class value, box) filled,
    and with `ignore_border` a 1-pixel IGNORE_VALUE frame."""
    w, h = size
    cls = np.zeros((h, w), np.uint8)
    for value, (x0, y0, x1, y1) in regions:
        cls[y0:y1, x0:x1] = value
    if ignore_border:
        cls[0, :] = cls[-1, :] = cls[:, 0] = cls[:, -1] = IGNORE_VALUE
    rgb = np.zeros((h, w, 3), np.uint8)
    for value in range(len(COLOURS)):
        rgb[cls == value] = COLOURS[value]
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, "PNG")
    return TaskRecord.build(
        "segmentation",
        buf.getvalue(),
        format="png",
        height=h,
        width=w,
        channels=3,
        filename=f"seg_{index:04d}.png",
        source_id=str(index + 1),
        segmentation=png(cls),
    )


def multilabel_record(index: int, ids: tuple[int, ...], labels: list[str], size=(20, 16)) -> TaskRecord:
    img = Image.new("RGB", size, COLOURS[ids[0] % len(COLOURS)] if ids else BACKGROUND)
    return TaskRecord.build(
        "multilabel",
        jpeg(img),
        format="jpeg",
        height=size[1],
        width=size[0],
        channels=3,
        filename=f"ml_{index:04d}.jpg",
        labels=ids,
        texts=tuple(labels[i] for i in ids),
    )


def present(record: TaskRecord, labels: list[str]) -> list[str]:
    """The class names a record contains (images containing each class), in label order."""
    if record.task == "multilabel":
        return [labels[i] for i in sorted(set(record.labels)) if 0 <= i < len(labels)]
    if record.task == "detection":  # ids outside the labels are left out, as a damaged record's would be
        return [labels[i - 1] for i in sorted({o.label for o in record.objects}) if 1 <= i <= len(labels)]
    values = set(np.unique(np.asarray(Image.open(io.BytesIO(record.segmentation)))).tolist())
    return [labels[v] for v in sorted(values) if v < len(labels)]


def strata(records: list[TaskRecord], labels: list[str]) -> list[str]:
    """Each record's stratum: its rarest class by images containing it (ties by id), or NO_STRATUM."""
    frequency = collections.Counter(name for r in records for name in present(r, labels))
    order = {name: i for i, name in enumerate(labels)}
    return [
        min(names, key=lambda n: (frequency[n], order[n])) if names else m.NO_STRATUM
        for names in (present(r, labels) for r in records)
    ]


def write(
    out: pathlib.Path,
    task: str,
    labels: list[str],
    splits: dict[str, list[TaskRecord]],
    num_shards: int | dict[str, int] = 2,
    boxes_dropped: dict[str, int] | None = None,
) -> pathlib.Path:
    """Writes the dataset in OUT: shards laid out as the planner does, manifest.json, tfds metadata,
    and label_map files for detection. Returns OUT."""
    out.mkdir(parents=True, exist_ok=True)
    every = [r for records in splits.values() for r in records]
    stratum_of = dict(zip(map(id, every), strata(every, labels)))
    written = []
    for split, records in splits.items():
        n = num_shards if isinstance(num_shards, int) else num_shards[split]
        groups: dict[str, list[TaskRecord]] = collections.defaultdict(list)
        for r in records:
            groups[stratum_of[id(r)]].append(r)
        ordered = [r for key in sorted(groups) for r in groups[key]]  # groups end to end
        shards = [ordered[i::n] for i in range(n)]  # position p goes to shard p mod n
        for index, shard in enumerate(shards):
            name = ShardName(split, index, n)
            blob = b"".join(frame(r.to_bytes()) for r in shard)
            (out / name.filename).write_bytes(blob)
            written.append((name, _shard_info(name, shard, blob, labels, task, stratum_of)))
    max_boxes = {split: max((len(r.objects) for r in records), default=0) for split, records in splits.items()}
    manifest = build_manifest(task, labels, written, len(every), boxes_dropped or {}, max_boxes)
    for name, data in tfds_meta.files(manifest).items():
        (out / name).write_bytes(data)
    if task == "detection":
        (out / "label_map.pbtxt").write_text(
            "".join(f"item {{\n  id: {i}\n  name: '{n}'\n}}\n" for i, n in enumerate(labels, 1))
        )
        (out / "label_map.csv").write_text("id,name\n" + "".join(f"{i},{n}\n" for i, n in enumerate(labels, 1)))
    document, counts = manifest.documents()
    (out / m.SHARD_COUNTS).write_bytes(counts)
    (out / m.FILENAME).write_bytes(document)
    return out


def _shard_info(
    name: ShardName, shard: list[TaskRecord], blob: bytes, labels: list[str], task: str, stratum_of: dict
) -> m.ShardInfo:
    counts = collections.Counter(n for r in shard for n in present(r, labels))
    extra = {}
    if task in ("multilabel", "detection"):
        extra["stratum_counts"] = dict(sorted(collections.Counter(stratum_of[id(r)] for r in shard).items()))
    if task == "detection":
        boxes = collections.Counter(
            labels[o.label - 1] for r in shard for o in r.objects if 1 <= o.label <= len(labels)
        )
        extra["box_counts"] = {label: boxes[label] for label in labels}
    return m.ShardInfo(
        name.filename,
        name.index,
        len(shard),
        len(blob),
        hashlib.sha256(blob).hexdigest(),
        {label: counts[label] for label in labels},
        **extra,
    )


def build_manifest(
    task: str, labels: list[str], written, found: int, boxes_dropped: dict[str, int], max_boxes: dict[str, int]
) -> m.Manifest:
    """The manifest of the shards `written` ((ShardName, ShardInfo) pairs), with the task's fields."""
    base = m.Manifest.build(
        labels,
        {"seed": 0, "task": task},
        written,
        m.Inputs(found, found, 0, 0),
        {"name": "tfrecord-prep", "version": "test"},
        m.Run(),
    )
    splits = base.splits
    boxes = None
    if task == "detection":
        splits = {}
        for name, info in base.splits.items():
            box_counts = {label: sum(s.box_counts[label] for s in info.shards) for label in labels}
            splits[name] = m.SplitInfo(
                info.name,
                info.examples,
                info.bytes,
                info.num_shards,
                info.class_counts,
                info.shards,
                box_counts=box_counts,
                max_boxes=max_boxes[name],
            )
        kept = sum(sum(s.box_counts.values()) for s in splits.values())
        dropped = sum(boxes_dropped.values())
        boxes = m.BoxAccounting(kept + dropped, kept, dropped, 0, dict(boxes_dropped))
    inputs = m.Inputs(found, found, 0, 0, boxes=boxes)
    return m.Manifest(
        labels=tuple(labels),
        options=base.options,
        splits=splits,
        inputs=inputs,
        tool=base.tool,
        task=task,
        categories=tuple(m.Category(i, n, None) for i, n in enumerate(labels, 1)) if task == "detection" else None,
        ignore_value=IGNORE_VALUE if task == "segmentation" else None,
    )


# --- the standard small datasets ------------------------------------------------------

DETECTION_LABELS = ["cat", "dog", "owl"]
SEGMENTATION_LABELS = ["background", "road", "car", "person"]
MULTILABEL_LABELS = ["red", "green", "blue", "tall"]


def detection_records(n: int = 18, masks: bool = True, seed: int = 0, png_every: int = 0) -> list[TaskRecord]:
    """`n` drawn images of 40x30..56x38 with 0 to 3 objects each (every 6th has none)."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        w, h = 40 + 4 * (i % 5), 30 + 2 * (i % 5)
        objects = []
        for _ in range(0 if i % 6 == 5 else 1 + i % 3):
            x0, y0 = int(rng.integers(0, w - 12)), int(rng.integers(0, h - 10))
            x1, y1 = int(rng.integers(x0 + 6, min(w, x0 + 24) + 1)), int(rng.integers(y0 + 6, min(h, y0 + 20) + 1))
            objects.append((1 + int(rng.integers(0, 3)) if i % 4 else 3, (x0, y0, x1, y1)))
        fmt = "png" if png_every and i % png_every == png_every - 1 else "jpeg"
        records.append(detection_record(i, (w, h), objects, DETECTION_LABELS, masks, fmt))
    return records


def detection_dataset(out: pathlib.Path, masks: bool = True) -> pathlib.Path:
    records = detection_records(masks=masks)
    return write(
        out,
        "detection",
        DETECTION_LABELS,
        {"train": records[:12], "validation": records[12:]},
        {"train": 3, "validation": 2},
    )


def segmentation_records(n: int = 8) -> list[TaskRecord]:
    out = []
    for i in range(n):
        w, h = 32 + 2 * i, 24
        regions = (
            [(1, (0, 16, w, 24))]
            + ([(2, (4 + i, 6, 14 + i, 14))] if i % 2 == 0 else [])
            + ([(3, (20, 2, 26, 14))] if i % 3 == 0 else [])
        )
        out.append(segmentation_record(i, (w, h), regions))
    return out


def segmentation_dataset(out: pathlib.Path) -> pathlib.Path:
    return write(out, "segmentation", SEGMENTATION_LABELS, {"train": segmentation_records()}, 2)


def multilabel_dataset(out: pathlib.Path) -> pathlib.Path:
    ids = [(0,), (0, 1), (1, 3), (2,), (), (0, 2, 3), (1,), (0, 3), (2, 3), (0,), (1, 2), ()]
    records = [multilabel_record(i, t, MULTILABEL_LABELS) for i, t in enumerate(ids)]
    return write(out, "multilabel", MULTILABEL_LABELS, {"train": records}, 3)


# --- datasets converted by `prep convert` itself ---------------------------------------

SAMPLE = pathlib.Path(__file__).resolve().parents[2] / "samples" / "shapes_detection"


def _convert(*args) -> None:
    from click.testing import CliRunner

    from prep.cli import main

    result = CliRunner().invoke(main, ["convert", *map(str, args), "--no-progress"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def converted_detection(out: pathlib.Path) -> pathlib.Path:
    """samples/shapes_detection (drawn shapes with polygons, EXIF-turned JPEGs, images without objects)
    converted as COCO with masks."""
    _convert(
        SAMPLE / "images",
        out,
        "--annotations",
        SAMPLE / "instances.json",
        "--split",
        "train=0.8,validation=0.2",
        "--num-shards",
        2,
    )
    return out


def converted_segmentation(root: pathlib.Path) -> pathlib.Path:
    """Drawn shapes and their class maps (EXIF-turned too) converted with --masks; returns OUT."""
    from tests.support import drawn_shapes as ds

    classes = ("background", "cat", "dog", "bird")
    images = ds.make_images(10, classes[1:], seed=4, orientations=(1, 3, 6, 8), jpeg_every=0)
    ds.write_images(root / "images", images, classes)
    (root / "masks").mkdir()
    for img in images:
        ds.class_map(img, classes).save(root / "masks" / (img.path.rsplit(".", 1)[0] + ".png"))
    (root / "classes.txt").write_text("\n".join(classes) + "\n")
    _convert(
        root / "images", root / "out", "--masks", root / "masks", "--classes", root / "classes.txt", "--num-shards", 2
    )
    return root / "out"


def converted_multilabel(root: pathlib.Path) -> pathlib.Path:
    """24 small JPEGs with 0 to 3 of four labels each, from a label file with '|'-separated cells."""
    rng = np.random.default_rng(2)
    rows = []
    (root / "src").mkdir(parents=True)
    for i in range(24):
        Image.new("RGB", (16, 12), COLOURS[i % len(COLOURS)]).save(root / "src" / f"{i:03d}.jpg")
        names = [n for n in MULTILABEL_LABELS if rng.random() < 0.4]
        rows.append(f"{i:03d}.jpg,{'|'.join(names)}\n")
    (root / "labels.csv").write_text("path,label\n" + "".join(rows))
    _convert(root / "src", root / "out", "--labels", root / "labels.csv", "--num-shards", 3)
    return root / "out"
