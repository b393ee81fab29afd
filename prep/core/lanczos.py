"""Pillow's LANCZOS resize of an 8-bit gray image to GRID x GRID, as two matrix products. Pure: numpy.

The perceptual hashes (content_keys.py) resize five crops of every image to 32x32;
`Image.resize` costs ~70 us a call on a small image, most of it per-call overhead,
which made the keys cost more than the conversion they ride on. This computes the
same bytes: Pillow's resampling (libImaging/Resample.c) takes, per output pixel,
the Lanczos-3 weights of `precompute_coeffs` normalised to sum 1, turns them into
22-bit fixed point (`normalize_coeffs_8bpc`, rounding half away from zero), and
runs a horizontal then a vertical pass, each rounding (adding half, shifting) and
clipping to 0..255; a pass whose size does not change is skipped. Here the
weights are one dense integer matrix per (input size, output size), cached, and
each pass is a float64 product: exact, since the sums stay far below 2**53.
tests/unit/prep/test_content_keys.py checks the bytes against Pillow's.
"""

from __future__ import annotations

import functools
import math

import numpy as np

PRECISION_BITS = 22  # Pillow's for 8-bit images: 32 - 8 - 2
_HALF = float(1 << (PRECISION_BITS - 1))
_ONE = float(1 << PRECISION_BITS)
SUPPORT = 3.0


def _sinc(x: float) -> float:
    if x == 0.0:
        return 1.0
    x *= math.pi
    return math.sin(x) / x


def _lanczos(x: float) -> float:
    return _sinc(x) * _sinc(x / 3) if -SUPPORT <= x < SUPPORT else 0.0


@functools.lru_cache(maxsize=1024)
def weights(in_size: int, out_size: int) -> np.ndarray:
    """The (out_size, in_size) fixed-point weights of one pass, as Pillow computes them (box 0..in_size)."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = SUPPORT * filterscale
    m = np.zeros((out_size, in_size))
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        count = min(int(center + support + 0.5), in_size) - xmin
        k = [_lanczos((x + xmin - center + 0.5) / filterscale) for x in range(count)]
        total = 0.0
        for w in k:  # summed in Pillow's order
            total += w
        for x, w in enumerate(k):
            w = w / total if total != 0.0 else w
            m[xx, xmin + x] = int(w * _ONE - 0.5) if w < 0 else int(w * _ONE + 0.5)
    m.setflags(write=False)
    return m


def resize(gray: np.ndarray, side: int) -> np.ndarray:
    """`Image.fromarray(gray, "L").resize((side, side), Image.Resampling.LANCZOS)`'s pixels, as float64."""
    h, w = gray.shape
    x = gray.astype(np.float64)
    if w != side:
        x = np.clip(np.floor((x @ weights(w, side).T + _HALF) / _ONE), 0, 255)
    if h != side:
        x = np.clip(np.floor((weights(h, side) @ x + _HALF) / _ONE), 0, 255)
    return x


def _placed(size: int, spans, side: int) -> np.ndarray:
    """One pass's weights for several crops at once: (len(spans), side, size), crop i's weights over its
    span (start, length) and zero elsewhere. A span already `side` long gets ONE on the diagonal: Pillow
    skips that pass, and ONE * x rounds back to x exactly."""
    m = np.zeros((len(spans), side, size))
    for i, (start, length) in enumerate(spans):
        m[i, :, start:start + length] = weights(length, side) if length != side else np.eye(side) * _ONE
    return m


BAND = 8  # output columns (rows) of one crop per horizontal (vertical) product (see crop_weights)


def crop_weights(height: int, width: int, boxes: tuple, side: int) -> tuple[tuple, tuple]:
    """(horizontal bands, vertical bands) that resize each crop (left, top, crop width, crop height) of an
    image of this size to side x side.

    Each pass is cut into bands of `BAND` outputs of one crop, each (crop, first output, first input,
    weights) over only the inputs those outputs reach: an output's Lanczos window is a few inputs wide,
    so one dense product per crop spent most of its time multiplying zeros. Horizontal weights are
    (inputs, outputs), vertical ones (outputs, inputs)."""
    return (_bands(width, tuple((b[0], b[2]) for b in boxes), side, True),
            _bands(height, tuple((b[1], b[3]) for b in boxes), side, False))


@functools.lru_cache(maxsize=128)  # ~35 KB an entry for the 1/8 decode of a 640x480 JPEG, ~280 KB for 4032x3024
def _bands(size: int, spans: tuple, side: int, horizontal: bool) -> tuple:
    """One pass's bands (see crop_weights). Cached per side length, not per image size: in a set of
    pictures of many sizes, widths and heights recur far more often than their pairs (built anew, they
    cost more than hashing the image)."""
    out = []
    step = BAND if side % BAND == 0 else side  # bands of equal width
    for crop, dense in enumerate(_placed(size, spans, side)):  # (side, size) per crop
        for first in range(0, side, step):
            rows = dense[first:first + step]
            reached = np.flatnonzero(rows.any(axis=0))
            lo, hi = int(reached[0]), int(reached[-1]) + 1
            w = np.ascontiguousarray(rows[:, lo:hi].T if horizontal else rows[:, lo:hi])
            w.setflags(write=False)
            out.append((crop, first, lo, w))
    return tuple(out)


def crop_grids(grays: np.ndarray, boxes: tuple, side: int) -> np.ndarray:
    """`resize(gray[top:top + h, left:left + w], side)` for every box of every image of a stack
    (B, height, width) of same-sized gray images, laid out (len(boxes), side, B, side): row r of a
    crop holds row r of every image's grid, float64, the same values.

    Each pass runs over whole images, one product per band (crop_weights), and the rows are taken
    image-minor, so a crop's rows of every image are one matrix: each product writes its part of
    the output in place, and no pass copies the stack into another layout."""
    b, height, width = grays.shape
    n = len(boxes)
    horizontal, vertical = crop_weights(height, width, boxes, side)
    rows = grays.transpose(1, 0, 2).reshape(height * b, width)  # row h of every image, then row h + 1
    x = np.empty((n, height * b, side))
    step = max(1, _BLOCK // width)  # rows per product: a large image is not copied to float64 whole
    for start in range(0, height * b, step):
        block = rows[start:start + step].astype(np.float64)
        for crop, first, lo, w in horizontal:
            np.matmul(block[:, lo:lo + w.shape[0]], w, out=x[crop, start:start + step, first:first + w.shape[1]])
    x = _round(x).reshape(n, height, b * side)
    y = np.empty((n, side, b * side))
    for crop, first, lo, w in vertical:
        np.matmul(w, x[crop, lo:lo + w.shape[1]], out=y[crop, first:first + w.shape[0]])
    return _round(y).reshape(n, side, b, side)


def resize_crops(grays: np.ndarray, boxes: tuple, side: int) -> np.ndarray:
    """`crop_grids` as (B, len(boxes), side, side): image, crop, grid."""
    return crop_grids(grays, boxes, side).transpose(2, 0, 1, 3)


_BLOCK = 1 << 20  # input pixels per horizontal product


def _round(x: np.ndarray) -> np.ndarray:
    """A pass's fixed-point rounding and clipping, in place: floor((x + HALF) / ONE) into 0..255."""
    x += _HALF
    x *= 1.0 / _ONE  # exact: a power of two
    np.floor(x, out=x)
    np.maximum(x, 0.0, out=x)  # np.clip: the same, through more Python per call
    return np.minimum(x, 255.0, out=x)
