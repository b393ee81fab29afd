"""Pillow's LANCZOS resampling weights, as a matrix. Pure: numpy.

The perceptual hashes (content_keys.py) look at the lowest frequencies of five crops of every image
resized to 32x32. A resize and a DCT are both linear, so content_keys folds them into one small
projection per side, built from these weights. They are Pillow's (libImaging/Resample.c,
`precompute_coeffs`: Lanczos-3 over the output pixel's window, stretched when shrinking, normalised
to sum 1), kept in floating point: Pillow's own 22-bit fixed point and its rounding after each pass
would have to be undone between the passes, which a product of the two passes' matrices cannot do.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

SUPPORT = 3.0


def _sinc(x: float) -> float:
    if x == 0.0:
        return 1.0
    x *= math.pi
    return math.sin(x) / x


def _lanczos(x: float) -> float:
    return _sinc(x) * _sinc(x / 3) if -SUPPORT <= x < SUPPORT else 0.0


@functools.lru_cache(maxsize=1024)
def weights(in_size: int, out_size: int) -> npt.NDArray[np.float64]:
    """The (out_size, in_size) weights of one pass over a box 0..in_size, each row summing to 1.

    Built in Python (math.sin), not numpy, so that they are the same bits on every CPU. A pass whose
    size does not change is the identity, as Pillow skips it."""
    m = np.zeros((out_size, in_size))
    if in_size == out_size:
        np.fill_diagonal(m, 1.0)
        m.setflags(write=False)
        return m
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = SUPPORT * filterscale
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        count = min(int(center + support + 0.5), in_size) - xmin
        k = [_lanczos((x + xmin - center + 0.5) / filterscale) for x in range(count)]
        total = 0.0
        for w in k:  # summed in Pillow's order
            total += w
        for x, w in enumerate(k):
            m[xx, xmin + x] = w / total if total != 0.0 else w
    m.setflags(write=False)
    return m


def resize(gray: npt.NDArray[np.uint8], side: int) -> npt.NDArray[np.float64]:
    """The 8-bit gray picture resized to side x side with `weights`, unrounded (float64): Pillow's
    `resize((side, side), LANCZOS)` gives these values rounded and clipped after each pass."""
    h, w = gray.shape
    out: npt.NDArray[np.float64] = weights(h, side) @ gray.astype(np.float64) @ weights(w, side).T
    return out
