"""Near pairs of one crop scale and one band, for arrays of hashes: the convert pipeline's form of near_pairs.
Pure: numpy, no Beam, no I/O.

Multi-index hashing with probes: each 64-bit hash is cut into `BANDS` (4) bands
of `WIDTH` (16) bits. Two hashes within 7 bits differ in at most one bit of at
least one band (4 bands, 2 bits each would be 8), so looking up, per band, the
hashes whose band bits equal an image's or differ from them in one bit (17
probes) finds every such pair. A task gets the hashes of *one* crop scale of
every image as two arrays (8 bytes an image, no objects per image), sorts them
by the band's bits, and looks each probe up in a table of where every one of
the 65,536 band values starts: an image meets about 17 * n / 65,536 others a
band, where 8 bands of 8 bits compared each image with n / 256 (all n² / 512
pairs of a band: the largest cost of the stage past a few hundred thousand
images). The distance of two images is the least over scales, so a pair within
`NEAR_DISTANCE` is found at the scale that gives it, with that distance
(`distance`'s value). A pair is listed only by the first band whose bits differ
in at most one place, and identical hashes only by band 0, as a star to the
first image holding them (the same components, fewer pairs).

Bounded: hashes probe `BLOCK` at a time, candidates are compared `LIMIT` at a time, and a band value shared by
more than `cap` distinct hashes (many pictures alike) is not probed into: its
own pairs go to `near_pairs.band_pairs`, which cuts them again and bounds its
work, and the comparisons it saves are counted as skipped.

For sets too large for one task, a band's 16 bit positions are cut into
`families` of `dims`, and each family's hashes into 2**bits parts by `bits` of
the positions outside its dims (`part_of`): a part holds whole subcubes (values
agreeing outside the dims), and its task probes only by flipping its family's
dims. A one-bit probe flips one position, which is in exactly one family, and
leaves the hash in its subcube: so each pair is met in exactly one task, and a
hash goes to one part a family (ceil(16 / (16 - bits)) copies, not one for
each part a probe reaches). Family 0 also lists the pairs of equal band values,
the identical hashes and the oversized values, which are each in one subcube.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from prep.core.content_keys import NEAR_DISTANCE, ContentKeys
from prep.core.near_pairs import BITS, DEFAULT_CAP, BandEntry, band_pairs

BANDS = 4
WIDTH = BITS // BANDS  # bits per band
SCAN_CAP = 16_384  # distinct hashes of one band value probed into; more go to band_pairs
LIMIT = 1 << 16  # candidate pairs compared at once (a few MB of temporaries)
BLOCK = 1 << 15  # hashes probing at once: what a band holds beyond its sorted arrays does not grow with n
_NO_SHA = "0" * 64
_MASK = np.uint64((1 << WIDTH) - 1)


# Where each pHash bit goes in the hashes a scan bands (`spread_bits`): the bits of frequencies (u, v) with
# u + v = k (mod 4) make band k. Photos' hashes agree more often in neighbouring low frequencies, so
# contiguous bands (u = 0-1, 2-3, ...) gather many pictures under a few band values; spread over the 8x8
# grid, the values are close to uniform and a band meets fewer candidates (docs/leakage.md).
_SPREAD = sorted(range(BITS), key=lambda i: ((i // 8 + i % 8) % BANDS, i))  # new bit j <- pHash bit _SPREAD[j]
_MOVES: dict[int, int] = {}  # shift (left, in LSB positions) -> mask of the source bits it moves
for _new, _old in enumerate(_SPREAD):
    _MOVES[_old - _new] = _MOVES.get(_old - _new, 0) | 1 << (BITS - 1 - _old)


def spread_bits(hashes: np.ndarray) -> np.ndarray:
    """The hashes with their bits rearranged for the bands (`_SPREAD`; bit 0 is the top bit). The same
    rearrangement of both hashes keeps their Hamming distance, so a scan of spread hashes finds the same
    pairs at the same distances: every hash of one scan must be spread, or none."""
    hashes = np.asarray(hashes, np.uint64)
    out = np.zeros_like(hashes)
    for shift, mask in sorted(_MOVES.items()):
        moved = hashes & np.uint64(mask)
        out |= moved << np.uint64(shift) if shift >= 0 else moved >> np.uint64(-shift)
    return out


def families(bits: int) -> tuple[tuple[int, ...], ...]:
    """A band's WIDTH bit positions (0: its lowest) cut into as few runs as leave `bits` fixed bits, at least,
    in each: its tasks then hold about 2**-bits of the hashes (even values). (range(WIDTH),) for 0."""
    if not 0 <= bits < WIDTH:
        raise ValueError(f"bits must be in [0, {WIDTH}), got {bits}")
    count = -(-WIDTH // (WIDTH - bits))
    bounds = [WIDTH * k // count for k in range(count + 1)]
    return tuple(tuple(range(lo, hi)) for lo, hi in zip(bounds, bounds[1:]))


def part_of(fields: np.ndarray, dims: Sequence[int], bits: int) -> np.ndarray:
    """The part of family `dims` each band value in `fields` goes to: its `bits` highest bits outside `dims`
    (the others left 0). A part holds whole subcubes of the family (the values that agree outside `dims`),
    so every probe's target is in the part of its hash, and 2**bits parts a family."""
    outside = [k for k in range(WIDTH) if k not in dims]
    return fields & np.uint64(sum(1 << k for k in outside[len(outside) - bits :]))


def _shift(band: int) -> np.uint64:
    return np.uint64(BITS - WIDTH * (band + 1))


def band_fields(hashes: np.ndarray, band: int) -> np.ndarray:
    """The bits of band `band` (0: the top WIDTH) of each 64-bit hash."""
    return (hashes >> _shift(band)) & _MASK


def _first_band_is(x: np.ndarray, band: int) -> np.ndarray:
    """For XORs of hash pairs: whether no band before `band` differs in at most one bit (so `band` lists them)."""
    keep = np.ones(len(x), bool)
    for k in range(band):
        keep &= np.bitwise_count(band_fields(x, k)) > 1
    return keep


def scan_band(
    items: np.ndarray,
    hashes: np.ndarray,
    band: int,
    cap: int = SCAN_CAP,
    max_distance: int = NEAR_DISTANCE,
    dims: Sequence[int] = range(WIDTH),
    same: bool = True,
) -> tuple[list[tuple[int, int, int]], int]:
    """The pairs of images whose hashes (of one crop scale) differ in at most one bit of band `band`, that
    band being the first such, and lie within `max_distance`.

    Args:
        items: image ids (int64), one per hash.
        hashes: 64-bit hashes (uint64) of one crop scale.
        band: which WIDTH bits to look up by (0..BANDS - 1).
        dims: the band's bit positions (0: its lowest) probed by flipping; a task of a `families` cut gets
            its family's, and hashes whose band bits agree outside them.
        same: whether this task lists the pairs of equal band values (identical hashes, oversized values
            included): one task of each cut, family 0's.

    Returns:
        ([(distance, a, b)] with a < b, in no particular order; comparisons skipped at oversized values).
    """
    if max_distance > 2 * BANDS - 1:
        raise ValueError(f"max_distance {max_distance} is past what {BANDS} bands probed at one bit find")
    if len(items) < 2:
        return [], 0
    out: list[tuple[int, int, int]] = []
    order = np.lexsort((items, hashes))  # identical hashes together, smallest id first
    items, hashes = items[order], hashes[order]
    fields = band_fields(hashes, band)
    first = np.r_[True, hashes[1:] != hashes[:-1]]
    if same and band == 0 and not first.all():  # identical hashes: a star to the first of each
        owner = np.maximum.accumulate(np.where(first, np.arange(len(items)), 0))
        copies = np.flatnonzero(~first)
        out.extend((0, a, b) for a, b in zip(items[owner[copies]].tolist(), items[copies].tolist()))
    order = np.argsort(fields[first].astype(np.uint16), kind="stable")  # 16-bit keys: a radix sort
    items, hashes = items[first][order], hashes[first][order]
    values = fields[first][order].astype(np.int32)
    del fields, first, order
    starts = np.searchsorted(values, np.arange((1 << WIDTH) + 1, dtype=np.int32))
    sizes = np.diff(starts)
    big = sizes > cap
    skipped = 0
    for value in np.flatnonzero(big).tolist() if same else ():
        pairs, s = _oversized(items, hashes, starts[value], starts[value + 1], band, cap, max_distance)
        out.extend(pairs)
        skipped += s
    any_big = bool(big.any())  # else the probes need no filtering by it
    for first_probe in range(0, len(items), BLOCK):  # the probes' arrays: BLOCK hashes' at a time
        pos = np.arange(first_probe, min(first_probe + BLOCK, len(items)))
        held = values[pos]
        if same:
            alike = pos[~big[held]] if any_big else pos  # the same band value: each later hash of it
            out.extend(
                _compare(items, hashes, alike, alike + 1, starts[values[alike] + 1] - alike - 1, band, max_distance)
            )
        for flip in (1 << k for k in dims):  # from the side whose bit is 0, so a pair is met once
            side = (held & flip) == 0
            q, target = pos[side], held[side] | flip
            if any_big:
                over = big[target]
                skipped += int(sizes[target[over]].sum())
                q, target = q[~over], target[~over]
            out.extend(_compare(items, hashes, q, starts[target], sizes[target], band, max_distance))
    return out, skipped


Index = npt.NDArray[np.intp]  # positions in the sorted arrays


def _compare(
    items: npt.NDArray[np.int64],
    hashes: npt.NDArray[np.uint64],
    q: Index,
    lo: Index,
    counts: Index,
    band: int,
    max_distance: int,
) -> Iterator[tuple[int, int, int]]:
    """(distance, a, b) for hash q[i] against hashes lo[i] .. lo[i] + counts[i] - 1, LIMIT pairs at a time."""
    keep = counts > 0
    q, lo, counts = q[keep], lo[keep], counts[keep]
    ends = np.cumsum(counts)
    # Candidate g (counted over every probe) of probe i is hash shift[i] + g; the probe's hash is repeated
    # rather than gathered per candidate, and which probe a candidate is looked up only for the near ones:
    # a few passes over the candidates fewer, where the scan spends its time past a few 100,000 images.
    shift = lo - (ends - counts)
    probes = hashes[q]
    start = 0
    while start < len(q):
        first = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, first + LIMIT, "right")))
        n = counts[start:stop]
        b = np.repeat(shift[start:stop], n) + np.arange(first, int(ends[stop - 1]))
        x = np.repeat(probes[start:stop], n) ^ hashes[b]
        d = np.bitwise_count(x)
        near = np.flatnonzero(d <= max_distance)
        near = near[_first_band_is(x[near], band)]
        rows = start + np.searchsorted(ends[start:stop] - first, near, "right")
        ia, ib = items[q[rows]], items[b[near]]
        yield from zip(d[near].tolist(), np.minimum(ia, ib).tolist(), np.maximum(ia, ib).tolist())
        start = stop


def _oversized(
    items: npt.NDArray[np.int64],
    hashes: npt.NDArray[np.uint64],
    lo: int,
    hi: int,
    band: int,
    cap: int,
    max_distance: int,
) -> tuple[list[tuple[int, int, int]], int]:
    """The pairs among one band value's distinct hashes, too many to compare all: near_pairs.band_pairs on
    the 48 bits outside the band (which cuts them again and bounds its work), first-band rule applied."""
    shift = int(_shift(band))
    low = (1 << shift) - 1
    entries = [
        BandEntry(
            int(i),
            ContentKeys(_NO_SHA, (int(h),)),
            ((int(h) >> (shift + WIDTH)) << shift) | (int(h) & low),
            BITS - WIDTH,
        )
        for i, h in zip(items[lo:hi], hashes[lo:hi])
    ]
    found = band_pairs(entries, min(cap, DEFAULT_CAP), max_distance)
    by_id = dict(zip(items[lo:hi].tolist(), hashes[lo:hi].tolist()))
    pairs = [(p.distance, p.a, p.b) for p in found.pairs]
    x = np.array([by_id[a] ^ by_id[b] for _, a, b in pairs], dtype=np.uint64)
    return [p for p, ok in zip(pairs, _first_band_is(x, band)) if ok], found.skipped
