"""prep.core.near_bands: the convert pipeline's near-pair scan finds what near_pairs finds, with the true distance."""

from __future__ import annotations

import random

import numpy as np
import pytest

from prep.core import near_bands
from prep.core.content_keys import ContentKeys, distance
from prep.core.near_bands import BANDS, band_fields, families, part_of, scan_band
from prep.core.near_pairs import near_pairs

SHA = "0" * 64
SCALES = 5


def components(pairs, n):
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    return {frozenset(i for i in range(n) if find(i) == r) for r in {find(i) for i in range(n)}}


def planted_keys(n: int, seed: int) -> dict[int, ContentKeys]:
    """Random 5-hash keys; a third get a copy (identical), a re-hash with up to 7 bits flipped at one scale, or a
    copy 8+ bits away at every scale (must not pair)."""
    rnd = random.Random(seed)
    keys = {}
    for i in range(n):
        keys[i] = ContentKeys(SHA, tuple(rnd.getrandbits(64) for _ in range(SCALES)))
    for i in range(0, n, 3):
        base = keys[i].hashes
        kind = rnd.choice(("copy", "near", "far"))
        if kind == "copy":
            hashes = base
        else:
            flips = rnd.randint(1, 7) if kind == "near" else rnd.randint(8, 12)
            scale = rnd.randrange(SCALES)
            hashes = tuple(
                h ^ sum(1 << b for b in rnd.sample(range(64), flips if s == scale or kind == "far" else 20))
                for s, h in enumerate(base)
            )
        keys[len(keys)] = ContentKeys(SHA, hashes)
    return keys


def scan_all(keys, cap=2048):
    items = np.array(sorted(keys), dtype=np.int64)
    found, skipped = {}, 0
    for scale in range(SCALES):
        hashes = np.array([keys[i].hashes[scale] for i in items.tolist()], dtype=np.uint64)
        for band in range(BANDS):
            pairs, s = scan_band(items, hashes, band, cap)
            skipped += s
            for d, a, b in pairs:
                assert a < b
                found[a, b] = min(d, found.get((a, b), 64))
    return found, skipped


def test_scan_finds_the_components_of_near_pairs_with_the_true_distances():
    for seed in range(3):
        keys = planted_keys(600, seed)
        found, skipped = scan_all(keys)
        expected, _ = near_pairs(keys)
        assert skipped == 0
        assert components(found, len(keys)) == components([(p.a, p.b) for p in expected], len(keys))
        for (a, b), d in found.items():
            assert d == distance(keys[a], keys[b]) <= 7


def test_identical_hashes_are_a_star_and_an_oversized_run_is_bounded():
    keys = {i: ContentKeys(SHA, (7,) * SCALES) for i in range(50)}  # fifty blank frames
    found, _ = scan_all(keys)
    assert set(found) == {(0, i) for i in range(1, 50)} and set(found.values()) == {0}
    rnd = random.Random(1)
    alike = {
        i: ContentKeys(SHA, tuple((0xFF << 56) | rnd.getrandbits(20) for _ in range(SCALES))) for i in range(60)
    }  # one band shared by all: a run over the cap
    found, skipped = scan_all(alike, cap=16)
    expected, _ = near_pairs(alike, cap=16)
    assert components(found, 60) == components([(p.a, p.b) for p in expected], 60)
    # a run cut to the cap may leave the closest scale of a pair uncompared: never closer than the truth
    assert all(distance(alike[a], alike[b]) <= d <= 7 for (a, b), d in found.items())


def test_seven_bits_spread_over_every_band_are_found_in_the_one_that_differs_by_one():
    rnd = random.Random(3)
    base = rnd.getrandbits(64)
    spread = sum(
        1 << (16 * band + bit) for band, bits in enumerate((2, 2, 2, 1)) for bit in rnd.sample(range(16), bits)
    )
    keys = {
        0: ContentKeys(SHA, (base,) * SCALES),
        1: ContentKeys(SHA, (base ^ spread,) * SCALES),
        2: ContentKeys(SHA, (base ^ spread ^ (1 << 63),) * SCALES),
    }  # 8 bits from 0: no pair
    found, skipped = scan_all(keys)
    assert skipped == 0 and found == {(0, 1): 7, (1, 2): 1}


@pytest.mark.parametrize("cap", [16_384, 3])
def test_parts_of_a_band_list_each_pair_once_and_all_of_them_together(cap):
    """A large set's scan is cut into 2**bits parts of each family of a band's bit positions
    (near_bands.families, part_of): each part probes its family's positions only, and family 0 the equal
    values, so the parts together list exactly the uncut scan's pairs, once each."""
    # 533 hashes: each (band, family) makes one scan_band call a part of 2+ hashes, and each call costs a
    # 65,536-value table; 1,600 hashes made 3 times the calls (30 s for the two caps) for no other case.
    keys = planted_keys(400, 4)
    for scale in (0, 3):
        items = np.array(sorted(keys), dtype=np.int64)
        hashes = np.array([keys[i].hashes[scale] for i in items.tolist()], dtype=np.uint64)
        if cap < 16:  # a band-0 value of 40 distinct hashes (some near each other): over the cap, cut apart
            rnd = random.Random(scale)
            crowd = [(0xBEEF << 48) | rnd.getrandbits(48) for _ in range(30)]
            crowd += [h ^ (1 << rnd.randrange(48)) ^ (1 << rnd.randrange(48)) for h in crowd[:10]]
            crowd += [h ^ (1 << (48 + rnd.randrange(16))) for h in crowd[:5]]  # one bit off: probe into it
            items = np.r_[items, np.arange(len(items), len(items) + len(crowd))]
            hashes = np.r_[hashes, np.array(crowd, np.uint64)]
        scans = [scan_band(items, hashes, band, cap) for band in range(BANDS)]
        whole, skipped = sorted(p for pairs, _ in scans for p in pairs), sum(s for _, s in scans)
        assert len(set(whole)) == len(whole) and any(d > 0 for d, _, _ in whole)  # near pairs, not only copies
        for bits in (2, 8, 12):
            cut, cut_skipped = [], 0
            for band in range(BANDS):
                fields = band_fields(hashes, band)
                for family, dims in enumerate(families(bits)):
                    parts = part_of(fields, dims, bits)
                    assert len(np.unique(parts)) <= 2**bits
                    for value in np.unique(parts).tolist():
                        part = parts == value
                        pairs, s = scan_band(items[part], hashes[part], band, cap, dims=dims, same=family == 0)
                        cut += pairs
                        cut_skipped += s
            assert (sorted(cut), cut_skipped) == (whole, skipped), (scale, bits)
        if cap < 16:
            assert skipped and any(a >= len(keys) for _, a, _ in whole)  # the oversized value was cut apart


def test_families_cut_a_band_into_runs_that_leave_the_bits_fixed():
    assert families(0) == (tuple(range(16)),)
    for bits in range(1, 13):
        runs = families(bits)
        assert [k for run in runs for k in run] == list(range(16))
        assert all(len(run) <= 16 - bits for run in runs) and len(runs) == -(-16 // (16 - bits))
    assert len(families(8)) == 2 and len(families(12)) == 4
    with pytest.raises(ValueError):
        families(16)


def test_probing_in_blocks_and_comparing_in_small_batches_lists_the_same_pairs(monkeypatch):
    """The probes go BLOCK hashes at a time and candidates LIMIT at a time, to bound memory: blocks and
    batches far smaller than the set (and oversized runs among them) give exactly the pairs of one pass."""
    keys = planted_keys(900, 5)
    rnd = random.Random(2)
    keys.update(
        {
            len(keys) + i: ContentKeys(SHA, tuple((0xFF << 56) | rnd.getrandbits(20) for _ in range(SCALES)))
            for i in range(60)
        }
    )  # one band shared by all: a run over the cap
    whole = scan_all(keys, cap=16)
    monkeypatch.setattr(near_bands, "BLOCK", 37)
    monkeypatch.setattr(near_bands, "LIMIT", 5)
    assert scan_all(keys, cap=16) == whole
    assert whole[1] > 0 and len(whole[0]) > 300


def test_spread_hashes_keep_their_distances_and_give_the_same_pairs_from_fewer_candidates():
    """The scan bands hashes with their bits spread over the 8x8 frequency grid (spread_bits): a fixed
    rearrangement, so distances and pairs are the ones of the hashes as made. Hashes that agree in their
    first 16 bits, as photos' low frequencies often do, share one contiguous band value; spread, they do not."""
    rnd = random.Random(3)
    common = rnd.getrandbits(16) << 48
    hashes = np.array([common | rnd.getrandbits(48) for _ in range(300)], np.uint64)
    hashes[1::10] = hashes[::10] ^ np.uint64(0b1010011 << 20)  # planted: 4 bits apart
    spread = near_bands.spread_bits(hashes)
    anything = np.array([rnd.getrandbits(64) for _ in range(300)], np.uint64)
    for made, spread_ in ((hashes, spread), (anything, near_bands.spread_bits(anything))):
        x, y = made[:, None] ^ made[None, :], spread_[:, None] ^ spread_[None, :]
        assert (np.bitwise_count(x) == np.bitwise_count(y)).all()
    items = np.arange(len(hashes), dtype=np.int64)
    as_made = sorted(p for band in range(BANDS) for p in scan_band(items, hashes, band)[0])
    assert sorted(p for band in range(BANDS) for p in scan_band(items, spread, band)[0]) == as_made
    assert {(a, b) for d, a, b in as_made if d == 4} >= {(i, i + 1) for i in range(0, 300, 10)}
    shared = [len(np.unique(near_bands.band_fields(h, 0))) for h in (hashes, spread)]
    assert shared[0] == 1 and shared[1] > 200
