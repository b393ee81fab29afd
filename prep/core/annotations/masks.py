"""Instance masks as pycocotools draws them, and semantic class maps, as 0/1 or class-value PNGs.

* `instance_mask` is pycocotools' `COCO.annToMask` for a segmentation in a w x h frame:
  polygons through `frPyObjects`, `merge` and `decode`, an uncompressed RLE (a list of
  run lengths) through `frPyObjects`, a compressed one (the string pycocotools writes)
  decoded as it is. COCO's own tools and the reference converters (Model Garden's
  create_coco_tf_record.py) draw masks so; a fill of our own differed from theirs in 2.3%
  of pixels (worst IoU 0.78 on small objects), so the library draws them, bit for bit.
* pycocotools trusts its input, so each shape is checked first: an RLE's runs must fill
  its size exactly (decode leaves the pixels of short runs uninitialised), and a polygon
  must be finite and within one frame side of the frame (its outline is walked pixel by
  pixel at 5x, so a coordinate of 1e12 would exhaust memory). Failing shapes raise
  `BadRle` / `BadPolygon`, which name their reason.
* `prepare_mask` checks and turns a semantic class map as its image is turned.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

from prep.core.annotations.model import Json
from prep.core.annotations.orient import displayed_size, swaps_sides, turn_image
from prep.core.image_rules import ImageRejected

IGNORE_VALUE = 255


class BadShape(ValueError):
    """A segmentation pycocotools cannot be trusted to draw; `reason` is its reject reason."""

    reason = "bad_segmentation"


class BadRle(BadShape):
    """An RLE whose counts do not describe its size."""

    reason = "bad_rle"


class BadPolygon(BadShape):
    """A polygon with a non-finite point, or one far outside its frame."""

    reason = "bad_polygon"


def rle_counts(counts: str | list[int]) -> list[int]:
    """Run lengths of an RLE's `counts`, reading pycocotools' compressed string form.

    Only to check the runs before pycocotools decodes them (see the module docstring).
    """
    if not isinstance(counts, str):
        return list(counts)
    out: list[int] = []
    data = counts.encode("ascii", "replace")
    p = 0
    while p < len(data):
        x, k, more = 0, 0, True
        while more:
            if p >= len(data):
                raise BadRle("compressed counts end inside a number")
            c = data[p] - 48
            if not 0 <= c < 64:
                raise BadRle(f"compressed counts hold {chr(data[p])!r}, not a character pycocotools writes")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)  # sign-extend: the number is negative
        if len(out) > 2:  # pycocotools stores each count after the first two as a difference
            x += out[-2]
        out.append(x)
    return out


def check_rle(rle: Json) -> None:
    """Raises BadRle unless the runs of `rle` are non-negative and add up to its height x width."""
    h, w = rle["size"]
    counts = rle_counts(rle["counts"])
    if any(c < 0 for c in counts):
        raise BadRle("a run length is negative")
    if sum(counts) != h * w:
        raise BadRle(f"runs add up to {sum(counts)} pixels, size {h}x{w} has {h * w}")


def check_polygons(polygons: Sequence[Sequence[float]], size: tuple[int, int]) -> None:
    """Raises BadPolygon if a polygon has fewer than 3 points, a non-finite one, or one more than
    a frame side outside the (w, h) frame."""
    w, h = size
    side = max(w, h)
    for k, poly in enumerate(polygons):
        xy = np.asarray(poly, dtype=np.float64).reshape(-1, 2) if len(poly) % 2 == 0 else np.empty((0, 2))
        if len(xy) < 3:
            raise BadPolygon(f"polygon {k} is not a list of at least 3 x, y pairs")
        if not np.isfinite(xy).all():
            raise BadPolygon(f"polygon {k} has a point that is not finite")
        far = (xy[:, 0] < -side) | (xy[:, 0] > w + side) | (xy[:, 1] < -side) | (xy[:, 1] > h + side)
        if far.any():
            x, y = xy[np.flatnonzero(far)[0]]
            raise BadPolygon(f"polygon {k} reaches ({x:.6g}, {y:.6g}), more than {side} px outside the {w}x{h} frame")


def instance_mask(
    polygons: Sequence[Sequence[float]], rle: Json | None, size: tuple[int, int]
) -> npt.NDArray[np.uint8]:
    """The (h, w) uint8 0/1 mask of an object in a (w, h) frame, as `COCO.annToMask` draws it.

    `rle` (of its own size) wins over `polygons`. Raises BadRle / BadPolygon (see the module docstring).
    """
    from pycocotools import mask as coco_mask  # lazily: only masks need the C extension

    w, h = size
    if rle is not None:
        check_rle(rle)
        rh, rw = rle["size"]
        if isinstance(rle["counts"], str):
            coded = {"size": [rh, rw], "counts": rle["counts"].encode("ascii")}
        else:
            coded = coco_mask.frPyObjects({"size": [rh, rw], "counts": list(rle["counts"])}, rh, rw)
    else:
        check_polygons(polygons, size)
        coded = coco_mask.merge(coco_mask.frPyObjects([list(map(float, p)) for p in polygons], h, w))
    return np.ascontiguousarray(coco_mask.decode(coded), dtype=np.uint8)


def to_png(array: np.ndarray) -> bytes:
    """A single-channel 8-bit PNG of `array`'s values."""
    buffer = io.BytesIO()
    Image.fromarray(array.astype(np.uint8), "L").save(buffer, format="PNG")
    return buffer.getvalue()


def prepare_mask(
    data: bytes, stored: tuple[int, int], orientation: int, final: tuple[int, int], num_classes: int
) -> bytes:
    """A semantic class map checked, turned and resized as its image (nearest neighbour).

    The map must be single-channel (grayscale, or a palette whose indices are the
    values), of the image's displayed size, or of its stored size when that differs
    (then it is turned with the pixels); its values are class ids below `num_classes`
    or 255 (ignore).

    Returns:
        PNG bytes of the map at `final` (w, h).

    Raises:
        ImageRejected: `bad_mask` (unreadable, not single-channel, a value out of
            range) or `mask_size_mismatch`.
    """
    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageRejected("bad_mask", f"the mask cannot be decoded: {exc}") from None
    if img.mode not in ("L", "P", "1", "I", "I;16", "I;16B", "I;16L"):
        raise ImageRejected(
            "bad_mask", f"the mask has mode {img.mode} ({len(img.getbands())} channels), not a single-channel class map"
        )
    shown = displayed_size(stored, orientation)
    if img.size == shown:
        turn = 1
    elif img.size == tuple(stored) and swaps_sides(orientation):
        turn = orientation
    else:
        raise ImageRejected(
            "mask_size_mismatch",
            f"the mask is {img.size[0]}x{img.size[1]}, the image {shown[0]}x{shown[1]} as displayed",
        )
    values = np.asarray(img).astype(np.int64)
    bad = values[(values >= num_classes) & (values != IGNORE_VALUE)]
    if bad.size or (values < 0).any():
        shown_value = int(bad.max()) if bad.size else int(values.min())
        raise ImageRejected(
            "bad_mask",
            f"the mask holds value {shown_value}: classes are 0..{num_classes - 1} and {IGNORE_VALUE} (ignore)",
        )
    out = turn_image(Image.fromarray(values.astype(np.uint8), "L"), turn)
    if out.size != tuple(final):
        out = out.resize((final[0], final[1]), Image.Resampling.NEAREST)
    return to_png(np.asarray(out))
