"""The annotation types every reader returns and `place_objects` takes. Pure, picklable.

Conventions (docs: the issue-18 contract):

* Boxes are (xmin, ymin, xmax, ymax) floats in continuous coordinates of the frame
  the annotation declares: a W x H image spans [0, W] x [0, H]. Readers convert
  their format's convention (COCO xywh, VOC 1-based pixel indices, YOLO centres)
  into this one; a YOLO annotation keeps [0, 1] coordinates (`normalized`).
* A box is read as written, NaN included: judging boxes is `place_objects`' job,
  where the image's real size is known, so every box read is either placed or
  dropped with a reason there (read = written + dropped).
* `Obj.index` is the object's position among its image's annotations in the
  source, counting those a reader could not use, so a reject names the box a
  user can find in the file.
* Category ids run 1..K in the order the reader gives (0 is background).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

Box = tuple[float, ...]  # (xmin, ymin, xmax, ymax) floats
Json = dict[str, Any]  # a JSON object as json.loads gives it


class Category(NamedTuple):
    """A class: id from 1, its name, and the source's own id or index (None if it has none)."""

    id: int
    name: str
    source_id: int | str | None


class Problem(NamedTuple):
    """An annotation, row or box that cannot be used or was changed, with a reason code.

    `path` is the image's path relative to SOURCE (or the annotation file's name when
    no image can be named); `box` the object's index, None for an image-level problem,
    which counts in `boxes` the boxes it keeps from any record (read = written + dropped).
    """

    path: str
    reason: str
    detail: str
    box: int | None = None
    boxes: int = 0  # an image-level problem: the boxes the file gives that image, which no record holds


class Obj(NamedTuple):
    """One annotated object, in the annotation's frame."""

    index: int  # type: ignore[assignment]  # shadows tuple.index, which NamedTuple permits
    label: str
    box: Box
    crowd: bool = False
    difficult: bool = False
    truncated: bool = False
    area: float | None = None
    polygons: tuple[tuple[float, ...], ...] = ()
    rle: Json | None = None  # COCO run-length encoding: {"size": [h, w], "counts": ...}


class ImageAnnotation(NamedTuple):
    """The objects of one image and the frame they were drawn in."""

    path: str  # relative to SOURCE, '/'-separated
    width: int | None  # the frame the annotation declares; None when unknown
    height: int | None
    normalized: bool  # coordinates in [0, 1] of the displayed image (YOLO)
    objects: tuple[Obj, ...]
    source_id: int | None = None
    split: str | None = None

    def to_json(self) -> Json:
        """A compact JSON-able form (short keys; a NaN or infinite coordinate as a string)."""
        objects = []
        for o in self.objects:
            item: Json = {"i": o.index, "l": o.label, "b": [_num_out(v) for v in o.box]}
            flags = int(o.crowd) | int(o.difficult) << 1 | int(o.truncated) << 2
            if flags:
                item["f"] = flags
            if o.area is not None:
                item["a"] = _num_out(o.area)
            if o.polygons:
                item["p"] = [list(p) for p in o.polygons]
            if o.rle is not None:
                item["r"] = o.rle
            objects.append(item)
        out: Json = {"p": self.path, "o": objects}
        for key, value in (("w", self.width), ("h", self.height), ("s", self.source_id), ("t", self.split)):
            if value is not None:
                out[key] = value
        if self.normalized:
            out["n"] = 1
        return out

    @classmethod
    def from_json(cls, obj: Json) -> ImageAnnotation:
        """The inverse of `to_json`; its objects may also come as columns (`objects_json`)."""
        objects = []
        for item in objects_json(obj):  # per object of every image converted: positional, `map` (`_num_in` is float)
            flags = item.get("f", 0)
            area = item.get("a")
            polygons = item.get("p")
            objects.append(
                Obj(
                    item["i"],
                    item["l"],
                    tuple(map(_num_in, item["b"])),
                    bool(flags & 1),
                    bool(flags & 2),
                    bool(flags & 4),
                    None if area is None else _num_in(area),
                    tuple(map(tuple, polygons)) if polygons else (),
                    item.get("r"),
                )
            )
        return cls(
            path=obj["p"],
            width=obj.get("w"),
            height=obj.get("h"),
            normalized=bool(obj.get("n", 0)),
            objects=tuple(objects),
            source_id=obj.get("s"),
            split=obj.get("t"),
        )


class AnnotationSet(NamedTuple):
    """What a reader found: images sorted by path, categories in id order, and the problems."""

    images: tuple[ImageAnnotation, ...]
    categories: tuple[Category, ...]
    problems: tuple[Problem, ...]


def objects_json(obj: Json) -> list[Json]:
    """The objects of an annotation in `ImageAnnotation.to_json`'s form: its "o" list, or its "c" columns
    (a listing's form of an image without masks, `rows.objects_text`) as that list."""
    if "o" in obj:
        objects: list[Json] = obj["o"]
        return objects
    c = obj["c"]
    boxes, labels = c["b"], c["l"]
    indices, areas, flags = c.get("i") or range(len(labels)), c.get("a"), c.get("f")
    out = []
    for k, label in enumerate(labels):
        item: Json = {"i": indices[k], "l": label, "b": boxes[4 * k : 4 * k + 4]}
        if flags and flags[k]:
            item["f"] = flags[k]
        if areas and areas[k] is not None:
            item["a"] = areas[k]
        out.append(item)
    return out


def object_count(obj: Json) -> int:
    """How many objects an annotation in `to_json`'s form (or with columns, `objects_json`) holds."""
    return len(obj["o"]) if "o" in obj else len(obj["c"]["l"])


def _num_out(value: float) -> float | str:
    # Strict JSON has no NaN: such boxes must still reach place_objects to be counted.
    return value if math.isfinite(value) else repr(float(value))


def _num_in(value: float | str) -> float:
    return float(value)


def as_float(value: object) -> float | None:
    """A JSON or text value as a float (NaN and inf allowed), or None if it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def number_categories(names_by_source: Sequence[tuple[int | str | None, str]]) -> tuple[Category, ...]:
    """Categories with ids 1..K in the order given."""
    return tuple(Category(i, name, source) for i, (source, name) in enumerate(names_by_source, 1))


def finish(
    images: dict[str, ImageAnnotation],
    found: Sequence[tuple[int | str | None, str]],
    classes: tuple[str, ...] | None,
    problems: list[Problem],
) -> AnnotationSet:
    """The set a reader returns: categories from the (source id, name) pairs it found (or --classes,
    whose unknown labels become Problems), images sorted by path, problems in a stable order."""
    categories = choose_categories(found, classes)
    if classes is not None:
        known = {c.name for c in categories}
        images = {p: keep_known(a, known, problems, "--classes") for p, a in images.items()}
    ordered = tuple(images[p] for p in sorted(images))
    return AnnotationSet(
        ordered,
        tuple(categories),
        tuple(sorted(problems, key=lambda p: (p.path, -1 if p.box is None else p.box, p.reason))),
    )


def choose_categories(
    found: Sequence[tuple[int | str | None, str]], classes: tuple[str, ...] | None
) -> tuple[Category, ...]:
    """Categories from the (source id, name) pairs a reader found, in its order; with `classes`
    (--classes), exactly those names in that order, each keeping the source id it was found with."""
    if classes is None:
        return number_categories(found)
    source = {name: sid for sid, name in found}
    return number_categories([(source.get(name), name) for name in classes])


def keep_known(ann: ImageAnnotation, known: set[str], problems: list[Problem], where: str) -> ImageAnnotation:
    """`ann` without the objects whose label is not a category; each one left out is a Problem."""
    kept = []
    for o in ann.objects:
        if o.label in known:
            kept.append(o)
        else:
            problems.append(
                Problem(ann.path, "unknown_class", f"label {o.label!r} is not one of the classes ({where})", o.index)
            )
    return ann if len(kept) == len(ann.objects) else ann._replace(objects=tuple(kept))
