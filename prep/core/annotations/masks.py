"""Instance masks (COCO polygons and RLE) and semantic class maps, as 0/1 or class-value PNGs.

* `decode_rle` reads COCO RLE, uncompressed (a list of run lengths) or compressed (the
  string pycocotools writes), in numpy; runs are column-major and start with zeros.
* `fill_polygons` samples pixel centres (even-odd rule): the pixel (c, r) is inside when
  its centre (c + 0.5, r + 0.5) is, so a box [2, 12] x [3, 9] covers exactly 10 x 6
  pixels. (Pillow's ImageDraw.polygon also fills the pixels on the outline, one more
  column and row: 77 pixels for that box.) Several polygons of one object are united.
* `prepare_mask` checks and turns a semantic class map as its image is turned.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

from prep.core.annotations.model import Json
from prep.core.annotations.orient import displayed_size, swaps_sides, turn_image
from prep.core.image_rules import ImageRejected

IGNORE_VALUE = 255


class BadRle(ValueError):
    """An RLE whose counts do not describe its size."""


def rle_counts(counts: str | list[int]) -> list[int]:
    """Run lengths of an RLE's `counts`, decoding pycocotools' compressed string form."""
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


def decode_rle(rle: Json) -> npt.NDArray[np.uint8]:
    """The (height, width) uint8 0/1 mask of a COCO RLE.

    Raises:
        BadRle: negative runs, or runs that do not add up to height x width.
    """
    h, w = rle["size"]
    counts = np.asarray(rle_counts(rle["counts"]), dtype=np.int64)
    if counts.size and counts.min() < 0:
        raise BadRle("a run length is negative")
    if int(counts.sum()) != h * w:
        raise BadRle(f"runs add up to {int(counts.sum())} pixels, size {h}x{w} has {h * w}")
    flat = np.repeat((np.arange(counts.size) % 2).astype(np.uint8), counts)
    return flat.reshape((w, h)).T.copy()


def fill_polygons(polygons: Iterable[Sequence[float]], size: tuple[int, int]) -> npt.NDArray[np.uint8]:
    """The (h, w) uint8 0/1 union of polygons (flat x, y lists in continuous pixel coordinates)."""
    w, h = size
    out = np.zeros((h, w), dtype=bool)
    centres = np.arange(h) + 0.5
    for poly in polygons:
        xy = np.asarray(poly, dtype=np.float64).reshape(-1, 2)
        if len(xy) < 3 or not np.isfinite(xy).all():
            continue
        x1, y1 = xy[:, 0], xy[:, 1]
        x2, y2 = np.roll(x1, -1), np.roll(y1, -1)
        yc = centres[:, None]
        # Half-open in y so that a vertex on a scan line is counted once.
        crosses = ((y1 <= yc) & (yc < y2)) | ((y2 <= yc) & (yc < y1))
        with np.errstate(divide="ignore", invalid="ignore"):
            xs = np.where(crosses, x1 + (yc - y1) * (x2 - x1) / (y2 - y1), np.nan)
        if xs.shape[1] % 2:
            xs = np.concatenate([xs, np.full((h, 1), np.nan)], axis=1)
        xs.sort(axis=1)  # NaN last; crossings per row come in pairs
        starts, ends = xs[:, 0::2], xs[:, 1::2]
        rows = np.broadcast_to(np.arange(h)[:, None], starts.shape)
        valid = np.isfinite(starts) & np.isfinite(ends)
        if not valid.any():
            continue
        first = np.clip(np.ceil(starts[valid] - 0.5), 0, w).astype(np.int64)
        last = np.clip(np.ceil(ends[valid] - 0.5), 0, w).astype(np.int64)
        diff = np.zeros((h, w + 1), dtype=np.int32)
        np.add.at(diff, (rows[valid], first), 1)
        np.add.at(diff, (rows[valid], last), -1)
        out |= np.cumsum(diff[:, :w], axis=1) > 0
    return out.astype(np.uint8)


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
