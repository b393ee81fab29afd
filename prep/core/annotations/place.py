"""Placing an image's objects on its stored output: frame, EXIF turn, resize, box policy, masks.

The frame (docs: the issue-18 contract). Annotations are taken in the displayed
(upright, after EXIF) frame. When the annotation declares the stored, un-turned size
and that differs from the displayed one, its boxes and masks are turned with the
pixels. Any other declared size rejects the image `size_mismatch`. YOLO's normalised
boxes are in the displayed frame. Then everything is scaled to the final size, as the
pixels are resized.

The box policy, judged in displayed pixels (before the resize), per object in order:

1. a crowd under `crowd` "drop" is dropped (`crowd`); "reject-image" rejects;
2. a NaN or infinite coordinate: `box_nan`, dropped (or the image rejected);
3. xmax <= xmin or ymax <= ymin as written: `box_degenerate`, dropped (or rejected);
4. a box reaching outside the image is clipped to it. Within `tolerance` pixels that
   is silent. Beyond it, "clip" keeps the clipped box and counts it `box_outside` in
   `clipped`; "drop" drops it; "reject-image" rejects. A box wholly outside is left
   with no area: dropped `box_outside` under every policy but "reject-image".

Counts reconcile: every object given is either in `objects` or in `dropped`
(`clipped` boxes are in `objects` too).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from PIL import Image

from prep.core.annotations.masks import BadRle, BadShape, instance_mask, to_png
from prep.core.annotations.model import Box, ImageAnnotation, Json, Obj, Problem
from prep.core.annotations.orient import displayed_size, swaps_sides, turn_box, turn_image
from prep.core.errors import OptionsError
from prep.core.image_rules import ImageRejected

BAD_BOXES = ("clip", "drop", "reject-image")
Rect = tuple[float, float, float, float]  # (xmin, ymin, xmax, ymax) in displayed pixels
CROWDS = ("keep", "drop", "reject-image")


@dataclasses.dataclass(frozen=True)
class BoxPolicy:
    """What becomes of bad boxes and crowds (`--bad-boxes`, `--crowd`, `--box-tolerance`)."""

    bad_boxes: str = "clip"
    crowd: str = "keep"
    tolerance: float = 1.0  # pixels of the displayed image a box may reach outside it unnoticed

    def __post_init__(self) -> None:
        if self.bad_boxes not in BAD_BOXES:
            raise OptionsError(f"--bad-boxes must be one of {', '.join(BAD_BOXES)}, got {self.bad_boxes!r}")
        if self.crowd not in CROWDS:
            raise OptionsError(f"--crowd must be one of {', '.join(CROWDS)}, got {self.crowd!r}")
        if (
            isinstance(self.tolerance, bool)
            or not isinstance(self.tolerance, (int, float))
            or not 0 <= self.tolerance <= 1e6
        ):
            raise OptionsError(f"--box-tolerance must be a number of pixels in [0, 1e6], got {self.tolerance!r}")


class PlacedObject(NamedTuple):
    """An object as written: box normalised to the stored output, area in its pixels."""

    label: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    crowd: bool
    difficult: bool
    area: float
    mask_png: bytes | None


class Placed(NamedTuple):
    objects: tuple[PlacedObject, ...]
    dropped: tuple[Problem, ...]
    clipped: tuple[Problem, ...]


class PlainBoxes(NamedTuple):
    """`place_plain`'s objects as columns: what `place_objects` gives them, one list per field."""

    labels: list[str]
    xmin: list[float]
    ymin: list[float]
    xmax: list[float]
    ymax: list[float]
    area: list[float]
    crowd: list[int]  # 0 or 1
    difficult: list[int]  # 0 or 1


def place_plain(
    ann: Json, stored: tuple[int, int], orientation: int, final: tuple[int, int], policy: BoxPolicy
) -> PlainBoxes | None:
    """`place_objects` of an annotation in `ImageAnnotation.to_json`'s form whose every box is plain (in its
    image, finite, not degenerate, no crowd the policy drops; boxes in the displayed frame, not normalised),
    without masks, as columns; None when one is not (then `place_objects` judges them all). Per image of every
    detection conversion: no object made per box, the same values as `place_objects`' usual-box branch.

    Raises:
        ImageRejected: `size_mismatch`, as `place_objects` does.
    """
    if ann.get("n"):
        return None
    w, h = displayed_size(stored, orientation)
    declared = (ann.get("w"), ann.get("h"))
    # `_frame` gives 1 without a declared size or when it is the displayed one (the usual image): not asked then
    if (
        declared != (w, h)
        and None not in declared
        and _frame(ImageAnnotation(ann["p"], *declared, False, ()), stored, orientation) != 1
    ):
        return None
    sx, sy = final[0] / w, final[1] / h
    keep_crowds = policy.crowd == "keep"
    if "c" in ann:
        return _plain_columns(ann["c"], (w, h), (sx, sy), keep_crowds)
    out = PlainBoxes([], [], [], [], [], [], [], [])
    labels, xmin, ymin, xmax, ymax, area, crowd, difficult = out
    try:
        for item in ann["o"]:
            x0, y0, x1, y1 = item["b"]
            flags = item.get("f", 0)
            if not (0.0 <= x0 < x1 <= w and 0.0 <= y0 < y1 <= h) or (flags & 1 and not keep_crowds):
                return None
            labels.append(item["l"])
            xmin.append(x0 / w)
            ymin.append(y0 / h)
            xmax.append(x1 / w)
            ymax.append(y1 / h)
            area.append((x1 - x0) * sx * (y1 - y0) * sy)  # in `place_objects`' order: the same float
            crowd.append(flags & 1)
            difficult.append(flags >> 1 & 1)
    except (TypeError, ValueError):  # a coordinate written as text ("nan"), or not four: `place_objects` says
        return None
    return out


def _plain_columns(c: Json, shown: tuple[int, int], scale: tuple[float, float], keep_crowds: bool) -> PlainBoxes | None:
    """`place_plain` of objects held as columns (`rows.objects_text`): the same values, a list at a time."""
    w, h = shown
    sx, sy = scale
    b = c["b"]
    x0s, y0s, x1s, y1s = b[0::4], b[1::4], b[2::4], b[3::4]
    flags = c.get("f")
    try:
        for x0, y0, x1, y1 in zip(x0s, y0s, x1s, y1s):
            if not (0.0 <= x0 < x1 <= w and 0.0 <= y0 < y1 <= h):
                return None
    except TypeError:  # a coordinate written as text ("nan"): `place_objects` says
        return None
    if flags and not keep_crowds and any(f & 1 for f in flags):
        return None
    return PlainBoxes(
        c["l"],
        [x / w for x in x0s],
        [y / h for y in y0s],
        [x / w for x in x1s],
        [y / h for y in y1s],
        [(x1 - x0) * sx * (y1 - y0) * sy for x0, y0, x1, y1 in zip(x0s, y0s, x1s, y1s)],  # as `place_plain`'s
        [f & 1 for f in flags] if flags else [0] * len(x0s),  # no "f": no crowd, none difficult
        [f >> 1 & 1 for f in flags] if flags else [0] * len(x0s),
    )


def _frame(ann: ImageAnnotation, stored: tuple[int, int], orientation: int) -> int:
    """The turn to apply to the annotation: `orientation` in the stored frame, else 1.

    Raises:
        ImageRejected: `size_mismatch`.
    """
    shown = displayed_size(stored, orientation)
    if ann.normalized or ann.width is None or ann.height is None:
        return 1
    declared = (ann.width, ann.height)
    if declared == shown:
        return 1
    if declared == tuple(stored) and swaps_sides(orientation):
        return orientation
    raise ImageRejected(
        "size_mismatch",
        f"the annotation is for a {declared[0]}x{declared[1]} image, the image is "
        f"{shown[0]}x{shown[1]} as displayed ({stored[0]}x{stored[1]} stored, EXIF orientation "
        f"{orientation})",
    )


def _judge(
    obj: Obj, turn_to_shown: Callable[[Box], Box], shown: tuple[int, int], policy: BoxPolicy, path: str
) -> Problem | tuple[Rect, Problem | None]:
    """The problem if the box is dropped, else (box in displayed pixels clipped to the image, the problem
    if it was clipped). Judged as written first (a NaN, xmax <= xmin), then in the displayed frame."""
    w, h = shown

    def bad(reason: str, detail: str) -> Problem:
        if policy.bad_boxes == "reject-image":
            raise ImageRejected(reason, f"box {obj.index} ({obj.label!r}): {detail}")
        return Problem(path, reason, detail, obj.index)

    if not all(math.isfinite(v) for v in obj.box):
        return bad("box_nan", f"box {_fmt(obj.box)} is not finite")
    if obj.box[2] <= obj.box[0] or obj.box[3] <= obj.box[1]:
        return bad("box_degenerate", f"box {_fmt(obj.box)} has no area (xmax <= xmin or ymax <= ymin)")
    x0, y0, x1, y1 = turn_to_shown(obj.box)
    outside = max(-x0, -y0, x1 - w, y1 - h, 0.0)
    clipped = (min(max(x0, 0.0), w), min(max(y0, 0.0), h), min(max(x1, 0.0), w), min(max(y1, 0.0), h))
    if clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
        return bad("box_outside", f"box {_fmt(obj.box)} lies wholly outside the {w}x{h} image")
    if outside <= policy.tolerance:
        return clipped, None
    detail = f"box {_fmt(obj.box)} reaches {outside:.6g} px outside the {w}x{h} image"
    if policy.bad_boxes == "clip":
        return clipped, Problem(path, "box_outside", detail + "; clipped", obj.index)
    return bad("box_outside", detail)


def _fmt(box: Box) -> str:
    return "(" + ", ".join(f"{v:.6g}" for v in box) + ")"


def place_objects(
    ann: ImageAnnotation,
    stored: tuple[int, int],
    orientation: int,
    final: tuple[int, int],
    policy: BoxPolicy,
    masks: bool,
) -> Placed:
    """The objects of `ann` on the stored output image, under `policy`.

    Args:
        ann: the image's annotation.
        stored: (w, h) of the file's pixels before the EXIF turn.
        orientation: EXIF orientation 1..8 (1 if none).
        final: (w, h) of the output image (after the EXIF turn and the resize).
        policy: what becomes of bad boxes and crowds.
        masks: rasterise polygons and RLE into one 0/1 PNG per object at `final`
            (an object with neither gets its box filled, so that masks align with boxes).

    Returns:
        Placed objects (boxes normalised to [0, 1], area in final pixels: the mask's
        pixel count with `masks`, else the box's), dropped and clipped problems.

    Raises:
        ImageRejected: `size_mismatch`, or a reject-image policy met a bad box or crowd.
    """
    turn = _frame(ann, stored, orientation)
    shown = displayed_size(stored, orientation)
    w, h = shown
    fw, fh = final
    sx, sy = fw / w, fh / h

    def to_shown(box: Box) -> Box:
        if ann.normalized:
            return box[0] * w, box[1] * h, box[2] * w, box[3] * h
        return turn_box(box, stored, turn) if turn != 1 else box

    placed: list[PlacedObject] = []
    dropped: list[Problem] = []
    clipped: list[Problem] = []
    plain = not masks and not ann.normalized and turn == 1
    for obj in ann.objects:
        x0, y0, x1, y1 = obj.box
        if plain and 0.0 <= x0 < x1 <= w and 0.0 <= y0 < y1 <= h and not (obj.crowd and policy.crowd != "keep"):
            # The usual box, inside the image: what `_judge` gives it (finite, not degenerate, nothing to clip;
            # its comparisons fail for NaN), in fewer calls, for every box of every image converted.
            area = (x1 - x0) * sx * (y1 - y0) * sy
            placed.append(PlacedObject(obj.label, x0 / w, y0 / h, x1 / w, y1 / h, obj.crowd, obj.difficult, area, None))
            continue
        if obj.crowd and policy.crowd != "keep":
            if policy.crowd == "reject-image":
                raise ImageRejected("crowd", f"box {obj.index} ({obj.label!r}) is a crowd and --crowd is reject-image")
            dropped.append(Problem(ann.path, "crowd", "a crowd, and --crowd is drop", obj.index))
            continue
        judged = _judge(obj, to_shown, shown, policy, ann.path)
        if isinstance(judged, Problem):
            dropped.append(judged)
            continue
        box, clip = judged
        mask_png, area = None, (box[2] - box[0]) * sx * (box[3] - box[1]) * sy
        if masks:
            try:
                mask = _mask(obj, ann, box, stored, turn, shown, final)
            except BadShape as exc:
                if policy.bad_boxes == "reject-image":
                    raise ImageRejected(exc.reason, f"box {obj.index} ({obj.label!r}): {exc}") from None
                dropped.append(Problem(ann.path, exc.reason, str(exc), obj.index))
                continue
            mask_png, area = to_png(mask), float(mask.sum())
        if clip is not None:
            clipped.append(clip)
        placed.append(
            PlacedObject(
                obj.label, box[0] / w, box[1] / h, box[2] / w, box[3] / h, obj.crowd, obj.difficult, area, mask_png
            )
        )
    return Placed(tuple(placed), tuple(dropped), tuple(clipped))


def _mask(
    obj: Obj,
    ann: ImageAnnotation,
    box: Rect,
    stored: tuple[int, int],
    turn: int,
    shown: tuple[int, int],
    final: tuple[int, int],
) -> npt.NDArray[np.uint8]:
    """The object's 0/1 mask at `final`: its RLE, its polygons, or its box (already displayed-frame).

    Drawn by pycocotools in the annotation's own frame (what `annToMask` gives for it), then
    turned and resized as the pixels are, so that every mask is the reference mask moved
    with its image. A normalised (YOLO) polygon is drawn in the displayed frame.
    """
    frame = tuple(stored) if turn != 1 else tuple(shown)
    if obj.rle is not None:
        rh, rw = obj.rle["size"]
        if (rw, rh) != frame:
            raise BadRle(f"RLE size {rw}x{rh} is not the annotation's frame {frame[0]}x{frame[1]}")
        mask = instance_mask((), obj.rle, (rw, rh))
    elif obj.polygons and ann.normalized:
        w, h = shown
        scaled = [[v * (w if i % 2 == 0 else h) for i, v in enumerate(p)] for p in obj.polygons]
        mask, turn = instance_mask(scaled, None, shown), 1
    elif obj.polygons:
        mask = instance_mask(obj.polygons, None, (frame[0], frame[1]))
    else:
        x0, y0, x1, y1 = box
        mask, turn = instance_mask([[x0, y0, x1, y0, x1, y1, x0, y1]], None, shown), 1
    img = turn_image(Image.fromarray(mask * 255, "L"), turn)
    if img.size != tuple(final):
        img = img.resize((final[0], final[1]), Image.Resampling.NEAREST)
    return (np.asarray(img) > 127).astype(np.uint8)
