"""Near pairs of one crop scale and one band, for arrays of hashes: the convert pipeline's form of near_pairs.
Pure: numpy, no Beam, no I/O.

`near_pairs` files one entry per (hash, band) and compares the entries of each
band key; that is one Beam element per image and band key (40 per image), which
cost the conversion more than the images did. Here a task gets the hashes of
*one* crop scale of every image as two arrays, sorts them by one band's bits,
and compares each run of equal bits at once with numpy (the hashes only: 8
bytes an image, no objects per image). The guarantee is the same: two hashes
within 7 bits agree on one of the 8 bands, so the 8 tasks of a scale find every
pair of that scale; and the distance of two images is the least over scales,
so a pair within `NEAR_DISTANCE` is found at the scale that gives it, with that
distance (`distance`'s value). A pair is listed only by the first band its two
hashes agree on, and identical hashes (every band agrees) only by band 0 as a
star to the first image holding them (the same components, fewer pairs).

A run is compared `BLOCK` rows at a time, so memory stays small; a run of more
than `cap` distinct hashes (many pictures alike) is handed to
`near_pairs.band_pairs`, which cuts it again and bounds its work, counting what
it leaves uncompared.
"""

from __future__ import annotations

import numpy as np

from prep.core.content_keys import NEAR_DISTANCE, ContentKeys
from prep.core.near_pairs import BITS, DEFAULT_CAP, PARTS, BandEntry, band_pairs, split

WIDTH = BITS // PARTS  # bits per band
SCAN_CAP = 16_384  # distinct hashes of one run compared all against all (in blocks); more go to band_pairs
BLOCK = 256  # rows of a run compared at once: BLOCK x run bytes of distances
_NO_SHA = "0" * 64


def _shift(band: int) -> np.uint64:
    return np.uint64(BITS - WIDTH * (band + 1))


def band_fields(hashes: np.ndarray, band: int) -> np.ndarray:
    """The bits of band `band` (0: the top 8) of each 64-bit hash."""
    return (hashes >> _shift(band)) & np.uint64((1 << WIDTH) - 1)


def _popcount(x: np.ndarray) -> np.ndarray:
    return np.bitwise_count(x)


def _close(items: np.ndarray, hashes: np.ndarray, max_distance: int) -> list[tuple[int, int, int]]:
    """(distance, a, b) of every two of `hashes` within `max_distance`, `BLOCK` rows at a time (a run of 3,000
    hashes compared at once would hold 72 MB of distances)."""
    out: list[tuple[int, int, int]] = []
    for start in range(0, len(hashes) - 1, BLOCK):
        rows = hashes[start:start + BLOCK]
        d = _popcount(rows[:, None] ^ hashes[None, start + 1:])  # row r against the hashes after it: j > r
        d = np.where(np.arange(len(hashes) - start - 1)[None, :] >= np.arange(len(rows))[:, None], d, 64)
        r, c = np.nonzero(d <= max_distance)
        out.extend(zip(d[r, c].tolist(), items[start + r].tolist(), items[start + 1 + c].tolist()))
    return out


def scan_band(items: np.ndarray, hashes: np.ndarray, band: int, cap: int = SCAN_CAP,
              max_distance: int = NEAR_DISTANCE) -> tuple[list[tuple[int, int, int]], int]:
    """The pairs of images whose hashes (of one crop scale) agree on band `band` and lie within `max_distance`.

    Args:
        items: image ids (int64), one per hash.
        hashes: 64-bit hashes (uint64) of one crop scale.
        band: which 8 bits to group by (0..7).

    Returns:
        ([(distance, a, b)] with a < b, in no particular order; comparisons skipped in oversized runs).
    """
    if len(items) < 2:
        return [], 0
    fields = band_fields(hashes, band)
    order = np.lexsort((items, hashes, fields))  # by band bits, then hash, then id
    items, hashes, fields = items[order], hashes[order], fields[order]
    starts = np.flatnonzero(np.r_[True, fields[1:] != fields[:-1]])
    ends = np.r_[starts[1:], len(fields)]
    out: list[tuple[int, int, int]] = []
    skipped = 0
    for start, end in zip(starts.tolist(), ends.tolist()):
        if end - start < 2:
            continue
        run_items, run_hashes = items[start:end], hashes[start:end]
        firsts = np.flatnonzero(np.r_[True, run_hashes[1:] != run_hashes[:-1]])
        if band == 0 and len(firsts) < len(run_hashes):  # identical hashes: a star to the first of each
            owner = np.repeat(firsts, np.diff(np.r_[firsts, len(run_hashes)]))
            same = np.flatnonzero(owner != np.arange(len(run_hashes)))
            out.extend((0, int(run_items[owner[i]]), int(run_items[i])) for i in same.tolist())
        if len(firsts) < 2:
            continue
        unique_items, unique = run_items[firsts], run_hashes[firsts]
        if len(unique) > cap:
            found = band_pairs([BandEntry(int(i), ContentKeys(_NO_SHA, (int(h),)), *split(int(h), BITS)[band][2:])
                                for i, h in zip(unique_items, unique)], min(cap, DEFAULT_CAP), max_distance)
            skipped += found.skipped
            pairs = [(p.distance, p.a, p.b) for p in found.pairs]
        else:
            pairs = _close(unique_items, unique, max_distance)
        by_id = dict(zip(unique_items.tolist(), unique.tolist()))
        for d, a, b in pairs:
            x = by_id[a] ^ by_id[b]
            if any((x >> (BITS - WIDTH * (k + 1))) & ((1 << WIDTH) - 1) == 0 for k in range(band)):
                continue  # an earlier band agrees too: listed there
            out.append((d, min(a, b), max(a, b)))
    return out, skipped
