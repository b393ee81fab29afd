"""Small detection, segmentation and multi-label datasets in the contract's format, from drawn shapes.

Until `prep convert` writes these tasks, the loader tests, the bench and the training samples
read datasets written here: shards of `TaskRecord`s framed with `prep.core.tfrecord`, and a
`manifest.json` built from the `Manifest` types, with the balance rule's layout (each image's
stratum is its rarest class; inside a split, position p of the strata laid end to end goes to
shard p mod N, so shards and strata are balanced to ±1).

Every shape is drawn in its class's colour (`COLOURS`) on a dark background, so a test knows the
truth from the pixels: a detection box holds only its class's colour, and a segmentation mask
equals the colours. Detection shapes are axis-aligned rectangles that never touch; segmentation
shapes are rectangles and ellipses whose 1-pixel outline is marked `IGNORE_VALUE` in the mask.

    python -m tests.support.task_records detection OUT [--train 400 --validation 100]
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pathlib
import random

import numpy as np
from PIL import Image, ImageDraw

from prep.core import schema
from prep.core.manifest import NO_STRATUM, BoxAccounting, Category, Inputs, Manifest, ShardInfo, SplitInfo
from prep.core.naming import ShardName
from prep.core.task_record import BoxObject, TaskRecord
from prep.core.tfrecord import frame

NAMES = ("red", "green", "blue")  # class ids 1, 2, 3 (detection); 0, 1, 2 (multi-label)
COLOURS = {1: (230, 30, 30), 2: (30, 210, 30), 3: (40, 60, 240)}
BACKGROUND = (16, 16, 16)


@dataclasses.dataclass(frozen=True)
class Shape:
    label: int  # class id from 1
    box: tuple[int, int, int, int]  # xmin, ymin, xmax, ymax in pixels, continuous (xmax exclusive)
    kind: str = "rect"  # or "ellipse"


@dataclasses.dataclass(frozen=True)
class Drawn:
    pixels: np.ndarray  # uint8 [h, w, 3]
    shapes: tuple[Shape, ...]
    class_map: np.ndarray  # uint8 [h, w]: 0 background, class id, IGNORE_VALUE on outlines (ellipses)


def _free(box, placed, gap: int) -> bool:
    x0, y0, x1, y1 = box
    return all(x1 + gap <= a or a1 + gap <= x0 or y1 + gap <= b or b1 + gap <= y0 for a, b, a1, b1 in placed)


def draw(
    rng: random.Random, height: int, width: int, max_objects: int = 4, kinds=("rect",), min_side: int = 8
) -> Drawn:
    """An image of 0..max_objects shapes that do not touch (3 px apart), with its class map."""
    image = Image.new("RGB", (width, height), BACKGROUND)
    mask = Image.new("L", (width, height), 0)
    pen, mpen = ImageDraw.Draw(image), ImageDraw.Draw(mask)
    shapes: list[Shape] = []
    target = rng.randint(0, max_objects)  # some images have no object: "no objects" is explicit
    for _ in range(20 * target):  # attempts
        if len(shapes) == target:
            break
        w = rng.randint(min_side, max(min_side, width // 2))
        h = rng.randint(min_side, max(min_side, height // 2))
        x, y = rng.randint(0, width - w), rng.randint(0, height - h)
        box = (x, y, x + w, y + h)
        if not _free(box, [s.box for s in shapes], 3):
            continue
        shape = Shape(rng.randint(1, len(NAMES)), box, rng.choice(kinds))
        shapes.append(shape)
        inclusive = [x, y, x + w - 1, y + h - 1]  # PIL's coordinates include the last pixel
        if shape.kind == "rect":
            pen.rectangle(inclusive, fill=COLOURS[shape.label])
            mpen.rectangle(inclusive, fill=shape.label)
        else:
            pen.ellipse(inclusive, fill=COLOURS[shape.label])
            mpen.ellipse(inclusive, fill=shape.label, outline=schema.IGNORE_VALUE)
    return Drawn(np.asarray(image), tuple(shapes), np.asarray(mask))


def png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "PNG")
    return buf.getvalue()


def encode(pixels: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    if fmt == "jpeg":  # no chroma subsampling: colours stay true up to the shapes' edges
        Image.fromarray(pixels).save(buf, "JPEG", quality=95, subsampling=0)
    else:
        Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def record(task: str, drawn: Drawn, index: int, fmt: str, masks: bool = True) -> TaskRecord:
    h, w = drawn.pixels.shape[:2]
    common = dict(
        format=fmt, height=h, width=w, channels=3, filename=f"img{index:05d}.{fmt[:3]}", source_id=str(index + 1)
    )
    encoded = encode(drawn.pixels, fmt)
    if task == "detection":
        objects = []
        for s in drawn.shapes:
            x0, y0, x1, y1 = s.box
            m = np.zeros((h, w), np.uint8)
            m[y0:y1, x0:x1] = 1
            objects.append(
                BoxObject(
                    s.label,
                    NAMES[s.label - 1],
                    x0 / w,
                    y0 / h,
                    x1 / w,
                    y1 / h,
                    float((x1 - x0) * (y1 - y0)),
                    mask=png(m) if masks else None,
                )
            )
        return TaskRecord.build(task, encoded, **common, objects=tuple(objects), masks=masks)
    if task == "segmentation":
        return TaskRecord.build(task, encoded, **common, segmentation=png(drawn.class_map))
    if task == "multilabel":
        present = sorted({s.label for s in drawn.shapes})
        return TaskRecord.build(
            task, encoded, **common, labels=tuple(p - 1 for p in present), texts=tuple(NAMES[p - 1] for p in present)
        )
    raise ValueError(f"no synthetic {task} records")


def _labels(task: str) -> tuple[str, ...]:
    return ("background",) + NAMES if task == "segmentation" else NAMES


def _present(task: str, drawn: Drawn) -> list[str]:
    """Class names the image contains, as the manifest counts them."""
    ids = sorted({s.label for s in drawn.shapes})
    return [_labels(task)[i] if task == "segmentation" else NAMES[i - 1] for i in ids]


def layout(strata: list[str | None], num_shards: int) -> list[list[int]]:
    """The balance rule: strata laid end to end (sorted by name, "no stratum" last), position p to shard p mod N."""
    order = sorted(range(len(strata)), key=lambda i: (strata[i] is None, strata[i] or "", i))
    shards: list[list[int]] = [[] for _ in range(num_shards)]
    for p, i in enumerate(order):
        shards[p % num_shards].append(i)
    return shards


def write_dataset(
    out,
    task: str,
    splits: dict[str, int] | None = None,
    shards: dict[str, int] | None = None,
    seed: int = 0,
    fmt: str = "jpeg",
    size_range=(48, 96),
    max_objects: int = 4,
    masks: bool = True,
    kinds=None,
) -> pathlib.Path:
    """Writes a `task` dataset of drawn shapes into OUT and returns OUT.

    Args:
        splits: images per split (default train 40, validation 12).
        shards: shards per split (default 3 for train, 2 otherwise).
        fmt: "jpeg" or "png" for the images.
        size_range: image sides are drawn from this range (each side on its own).
        masks: detection: write one instance mask per object.
        kinds: shape kinds; default rectangles (detection) or rectangles and ellipses (segmentation).
    """
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    splits = splits or {"train": 40, "validation": 12}
    kinds = kinds or (("rect", "ellipse") if task == "segmentation" else ("rect",))
    labels = _labels(task)
    rng = random.Random(seed)
    infos, boxes_written, index = {}, 0, 0
    for split in sorted(splits):
        drawn = [
            draw(rng, rng.randint(*size_range), rng.randint(*size_range), max_objects, kinds)
            for _ in range(splits[split])
        ]
        frequency = {n: sum(n in _present(task, d) for d in drawn) for n in labels}
        strata = [min(_present(task, d), key=lambda n: (frequency[n], labels.index(n)), default=None) for d in drawn]
        count = (shards or {}).get(split, 3 if split == "train" else 2)
        shard_infos, max_boxes, split_boxes = [], 0, {n: 0 for n in labels}
        for number, members in enumerate(layout(strata, count)):
            blob, class_counts = b"", {n: 0 for n in labels}
            box_counts, stratum_counts = {n: 0 for n in labels}, {}
            for i in members:
                blob += frame(record(task, drawn[i], index + i, fmt, masks).to_bytes())
                for n in _present(task, drawn[i]):
                    class_counts[n] += 1
                for s in drawn[i].shapes:
                    box_counts[NAMES[s.label - 1]] += 1
                name = strata[i] or NO_STRATUM
                stratum_counts[name] = stratum_counts.get(name, 0) + 1
                max_boxes = max(max_boxes, len(drawn[i].shapes))
            file = ShardName(split, number, count).filename
            (out / file).write_bytes(blob)
            detection = task == "detection"
            shard_infos.append(
                ShardInfo(
                    file,
                    number,
                    len(members),
                    len(blob),
                    hashlib.sha256(blob).hexdigest(),
                    class_counts,
                    box_counts=box_counts if detection else None,
                    stratum_counts=stratum_counts if task != "segmentation" else None,
                )
            )
            for n in labels:
                split_boxes[n] += box_counts[n]
        boxes_written += sum(split_boxes.values())
        index += len(drawn)
        infos[split] = SplitInfo(
            split,
            len(drawn),
            sum(s.bytes for s in shard_infos),
            count,
            {n: sum(s.class_counts[n] for s in shard_infos) for n in labels},
            tuple(shard_infos),
            box_counts=split_boxes if task == "detection" else None,
            max_boxes=max_boxes if task == "detection" else None,
        )
    detection = task == "detection"
    inputs = Inputs(
        found=index,
        written=index,
        rejected=0,
        capped=0,
        boxes=BoxAccounting(boxes_written, boxes_written, 0, 0, {}) if detection else None,
    )
    manifest = Manifest(
        labels=labels,
        options={"synthetic": task, "seed": seed, "format": fmt},
        splits=infos,
        inputs=inputs,
        tool={"name": "tests.support.task_records"},
        task=task,
        categories=tuple(Category(i + 1, n, i + 1) for i, n in enumerate(NAMES)) if detection else None,
        ignore_value=schema.IGNORE_VALUE if task == "segmentation" else None,
    )
    (out / "manifest.json").write_bytes(manifest.dumps())
    return out


def read_split(out, split: str, task: str) -> list[TaskRecord]:
    """Every record of `split`, in manifest shard order (parsed with `TaskRecord`)."""
    from prep.core.tfrecord import read_records

    out = pathlib.Path(out)
    manifest = Manifest.load(str(out))
    result = []
    for shard in manifest.splits[split].shards:
        with open(out / shard.file, "rb") as f:
            result += [TaskRecord.from_bytes(data, task) for _, _, data in read_records(f, shard.file)]
    return result


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=["detection", "segmentation", "multilabel"])
    parser.add_argument("out")
    parser.add_argument("--train", type=int, default=400)
    parser.add_argument("--validation", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, nargs=2, default=(48, 96))
    parser.add_argument("--no-masks", action="store_true")
    a = parser.parse_args()
    write_dataset(
        a.out,
        a.task,
        {"train": a.train, "validation": a.validation},
        seed=a.seed,
        size_range=tuple(a.size),
        masks=not a.no_masks,
        shards={"train": 8, "validation": 2},
    )
    print(a.out)
