"""Duplicate pairs without comparing everything with everything. Pure: no Beam, no I/O.

Near duplicates come from multi-index hashing. Each 64-bit hash is cut into
`PARTS` (8) bands of 8 bits; two hashes at most 7 bits apart agree exactly on at
least one band (8 bands, at most 7 of them touched). An image files one entry
per (hash, band) under the key (crop scale, band, its bits); only images
meeting under a key are compared, by their real distance
(`content_keys.distance`, the least over their hashes of the same scale), all
of a bucket at once with numpy. Exact duplicates are images with equal sha256.

A band key shared by very many images (flat or blank pictures all hash alike)
is not compared all against all. A bucket over `cap` entries is cut again the
same way: the 56 bits its entries do not yet agree on, in 8 sub-bands of 7, so
the guarantee holds (two hashes within 7 bits that agree on a band differ in at
most 7 of the other bits, so they agree on one sub-band); then 49 bits in 8 of
6 or 7. A bucket still over `cap` after `LEVELS` cuts holds near-identical
hashes: entries with an identical hash are joined to the first of them (a star:
the same components, fewer listed pairs), and the distinct hashes left are each
compared with the next `cap` in hash order only; `BandPairs.skipped` counts the
pairs of entries left uncompared, so 0 means every pair was looked at. So a bucket costs at most
`cap`² distances (one numpy
pass per crop scale: ~0.3 s and ~46 MB at the default cap), whatever the data.

The intended Beam shape, each step a call into this module (`near_pairs` runs
the same steps in one process):

    keys:   (item, ContentKeys)                     # from the prepare stage
    | GroupByKey on the hashes -> one representative per identical hash tuple
    | FlatMap(band_entries)    -> (band key, BandEntry)
    | GroupByKey               -> (band key, [BandEntry])   # bounded by `cap` in the work it makes
    | FlatMap(band_pairs(entries, cap).pairs) -> Pair; then Distinct (a pair meets in several bands)
    exact:  (sha256, item) | GroupByKey | FlatMap(exact_pairs, or a star for groups)
    then components from the pairs (`prep.core.union_find`).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from prep.core.content_keys import NEAR_DISTANCE, ContentKeys, distance

PARTS = 8  # bands per hash: any two hashes within PARTS - 1 bits share one
BITS = 64
LEVELS = 2  # times an oversized bucket is cut again before the last resort
DEFAULT_CAP = 2_048  # entries in a bucket compared all against all (numpy: ~46 MB, ~0.3 s)


class BandEntry(NamedTuple):
    """One image under one band key: its id, its keys, and the bits of that key's hash still to cut."""

    item: int
    keys: ContentKeys
    rest: int  # the hash's bits outside the bands it was filed under, packed
    rest_bits: int


class Pair(NamedTuple):
    """Two images (a < b) and their distance (0 for an exact duplicate)."""

    a: int
    b: int
    distance: int


@dataclasses.dataclass(frozen=True)
class BandPairs:
    """The verified pairs of one bucket, and how many comparisons an oversized bucket left out."""

    pairs: tuple[Pair, ...]
    skipped: int = 0


def split(value: int, nbits: int, parts: int = PARTS) -> list[tuple[int, int, int, int]]:
    """Cuts `value` (of `nbits` bits) into `parts` contiguous fields, widths as even as possible.

    Returns:
        (part index, field value, the other bits packed, their count) per part.
    """
    if nbits < parts:
        raise ValueError(f"cannot cut {nbits} bits into {parts} parts")
    out, start = [], 0
    for index in range(parts):
        width = nbits // parts + (1 if index < nbits % parts else 0)
        low = nbits - start - width  # fields run from the top bit down
        field = (value >> low) & ((1 << width) - 1)
        rest = ((value >> (low + width)) << low) | (value & ((1 << low) - 1))
        out.append((index, field, rest, nbits - width))
        start += width
    return out


BandKey = tuple[int, int, int]  # (crop scale index, band index, the band's bits)


def band_entries(item: int, keys: ContentKeys, scale: int | None = None) -> list[tuple[BandKey, BandEntry]]:
    """The (band key, entry) pairs one image files: one per hash and band (of one crop scale if given)."""
    return [
        ((s, index, field), BandEntry(item, keys, rest, rest_bits))
        for s, h in enumerate(keys.hashes)
        if scale is None or s == scale
        for index, field, rest, rest_bits in split(h, BITS)
    ]


def _close_pairs(entries: list[BandEntry], max_distance: int) -> dict[tuple[int, int], int]:
    """All pairs of distinct items among `entries` within `max_distance`, compared at once with numpy."""
    if len({len(e.keys.hashes) for e in entries}) != 1:
        raise ValueError("keys of different numbers of hashes cannot be compared")
    items = np.array([e.item for e in entries], dtype=np.int64)
    hashes = np.array([e.keys.hashes for e in entries], dtype=np.uint64)
    least: npt.NDArray[np.uint8] | None = None
    for col in hashes.T:
        d = np.bitwise_count(col[:, None] ^ col[None, :])
        least = d if least is None else np.minimum(least, d, out=least)
    assert least is not None  # every key has a hash, and there is a key (checked above)
    upper = np.triu(least <= max_distance, 1) & (items[:, None] != items[None, :])
    i, j = np.nonzero(upper)
    a, b = np.minimum(items[i], items[j]), np.maximum(items[i], items[j])
    found: dict[tuple[int, int], int] = {}
    for x, y, d in zip(a.tolist(), b.tolist(), least[i, j].tolist()):
        found.setdefault((x, y), d)
    return found


def band_pairs(
    entries: Iterable[BandEntry], cap: int = DEFAULT_CAP, max_distance: int = NEAR_DISTANCE, level: int = 0
) -> BandPairs:
    """The pairs of images in one bucket whose real distance is at most `max_distance`.

    Args:
        entries: the entries filed under one band key (any order; the result does not depend on it).
        cap: buckets larger than this are cut again (see the module docstring).
        max_distance: at most 7 keeps the band guarantee (every such pair meets in some bucket).
        level: how many times this bucket was cut already (callers leave it 0).

    Returns:
        The pairs sorted, each once, and the comparisons skipped.
    """
    if cap < 2:
        raise ValueError(f"cap must be >= 2, got {cap}")
    entries = sorted(entries, key=lambda e: (e.item, e.rest))
    found: dict[tuple[int, int], int] = {}
    skipped = 0

    def check(x: BandEntry, y: BandEntry) -> None:
        if x.item == y.item:
            return
        a, b = (x.item, y.item) if x.item < y.item else (y.item, x.item)
        if (a, b) not in found:
            d = distance(x.keys, y.keys)
            if d <= max_distance:
                found[a, b] = d

    if len(entries) <= cap:
        found = _close_pairs(entries, max_distance) if len(entries) > 1 else {}
    elif level < LEVELS and entries[0].rest_bits >= PARTS:
        buckets: dict[tuple[int, int], list[BandEntry]] = collections.defaultdict(list)
        for e in entries:
            for index, field, rest, rest_bits in split(e.rest, e.rest_bits):
                buckets[index, field].append(BandEntry(e.item, e.keys, rest, rest_bits))
        for key in sorted(buckets):
            sub = band_pairs(buckets[key], cap, max_distance, level + 1)
            skipped += sub.skipped
            for p in sub.pairs:
                found.setdefault((p.a, p.b), p.distance)
    else:
        # Last resort: identical remaining bits (so an identical hash) join the first such entry;
        # distinct ones are compared with the next `cap` in bit order only. Every pair of entries
        # not compared is counted, so `skipped == 0` still means every pair was looked at.
        by_rest: dict[int, list[BandEntry]] = collections.defaultdict(list)
        for e in entries:
            by_rest[e.rest].append(e)
        firsts, compared = [], 0
        for rest in sorted(by_rest):
            same = by_rest[rest]
            firsts.append(same[0])
            for other in same[1:]:
                check(same[0], other)
            compared += len(same) - 1
        for i, x in enumerate(firsts):
            for y in firsts[i + 1 : i + 1 + cap]:
                check(x, y)
                compared += 1
        skipped += len(entries) * (len(entries) - 1) // 2 - compared
    return BandPairs(tuple(Pair(a, b, d) for (a, b), d in sorted(found.items())), skipped)


def exact_pairs(items: Iterable[int]) -> list[Pair]:
    """Pairs joining the images of one sha256: every pair, as `prep leakage` lists them."""
    ordered = sorted(set(items))
    return [Pair(a, b, 0) for i, a in enumerate(ordered) for b in ordered[i + 1 :]]


def near_pairs(
    keys: dict[int, ContentKeys], cap: int = DEFAULT_CAP, max_distance: int = NEAR_DISTANCE
) -> tuple[list[Pair], int]:
    """Every pair of `keys` within `max_distance`, in memory: the Beam shape above run in one process.

    Images with identical hashes are banded once, through the first of them
    (in Beam: a GroupByKey on the hashes before banding), then their pairs are
    listed: otherwise a thousand blank frames meet in all 40 of their buckets.

    Returns:
        (the pairs sorted, each once; comparisons skipped in oversized buckets).
    """
    alike: dict[tuple[int, ...], list[int]] = collections.defaultdict(list)
    for item in sorted(keys):
        alike[keys[item].hashes].append(item)
    found: dict[tuple[int, int], int] = {}
    skipped = 0
    scales = {len(h) for h in alike}
    if len(scales) > 1:
        raise ValueError(f"keys of {' and '.join(map(str, sorted(scales)))} hashes cannot be compared")
    for scale in range(scales.pop() if scales else 0):  # one crop scale at a time: a fifth of the entries held
        buckets: dict[BandKey, list[BandEntry]] = collections.defaultdict(list)
        for members in alike.values():
            for key, entry in band_entries(members[0], keys[members[0]], scale):
                buckets[key].append(entry)
        for key in sorted(buckets):
            if len(buckets[key]) < 2:
                continue
            result = band_pairs(buckets[key], cap, max_distance)
            skipped += result.skipped
            for p in result.pairs:
                found.setdefault((p.a, p.b), p.distance)
        del buckets
    out = [p for members in alike.values() for p in exact_pairs(members)]  # identical hashes: distance 0
    for (a, b), d in found.items():
        out.extend(Pair(min(x, y), max(x, y), d) for x in alike[keys[a].hashes] for y in alike[keys[b].hashes])
    return sorted(out), skipped
