"""EXIF orientation as it acts on continuous coordinates, matching `ImageOps.exif_transpose`.

A W x H stored image spans [0, W] x [0, H]. `ImageOps.exif_transpose` turns the pixels
with one `Image.transpose` method per orientation (below); `turn_point` moves a point
exactly as that method moves the pixel under it, so a box turned corner by corner
covers the same pixels after the turn. Orientations other than 2..8 (1, absent, or an
out-of-range value, which Pillow ignores too) leave everything as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

T = Image.Transpose
# Pillow's ImageOps.exif_transpose table.
METHODS = {
    2: T.FLIP_LEFT_RIGHT,
    3: T.ROTATE_180,
    4: T.FLIP_TOP_BOTTOM,
    5: T.TRANSPOSE,
    6: T.ROTATE_270,
    7: T.TRANSVERSE,
    8: T.ROTATE_90,
}


def swaps_sides(orientation: int) -> bool:
    """Whether the displayed image is the stored one on its side (width and height swapped)."""
    return orientation in (5, 6, 7, 8)


def displayed_size(stored: tuple[int, int], orientation: int) -> tuple[int, int]:
    """(w, h) after the EXIF turn."""
    w, h = stored
    return (h, w) if swaps_sides(orientation) else (w, h)


def turn_point(x: float, y: float, stored: tuple[int, int], orientation: int) -> tuple[float, float]:
    """Where the point (x, y) of the stored frame lands in the displayed frame."""
    w, h = stored
    if orientation == 2:  # mirror left-right
        return w - x, y
    if orientation == 3:  # rotate 180
        return w - x, h - y
    if orientation == 4:  # mirror top-bottom
        return x, h - y
    if orientation == 5:  # transpose: mirror along the main diagonal
        return y, x
    if orientation == 6:  # Image.ROTATE_270: a quarter turn clockwise
        return h - y, x
    if orientation == 7:  # transverse: mirror along the other diagonal
        return h - y, w - x
    if orientation == 8:  # Image.ROTATE_90: a quarter turn counter-clockwise
        return y, w - x
    return x, y


def turn_box(box: Sequence[float], stored: tuple[int, int], orientation: int) -> tuple[float, float, float, float]:
    """A stored-frame box (xmin, ymin, xmax, ymax) in the displayed frame."""
    x0, y0 = turn_point(box[0], box[1], stored, orientation)
    x1, y1 = turn_point(box[2], box[3], stored, orientation)
    return min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)


def turn_image(img: Image.Image, orientation: int) -> Image.Image:
    """The pixels turned as `ImageOps.exif_transpose` turns them (without reading any EXIF)."""
    method = METHODS.get(orientation)
    return img if method is None else img.transpose(method)
