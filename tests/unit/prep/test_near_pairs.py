"""Band candidates and pairs (prep.core.near_pairs), groups (prep.core.union_find): invariants and exactness."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prep.core.content_keys import ContentKeys, distance
from prep.core.near_pairs import PARTS, BandEntry, band_entries, band_pairs, exact_pairs, near_pairs, split
from prep.core.union_find import UnionFind

SHA = "0" * 64
hashes64 = st.integers(0, (1 << 64) - 1)


@st.composite
def near_hash_pairs(draw):
    """A 64-bit hash and another at most 7 bits from it."""
    h = draw(hashes64)
    flips = draw(st.sets(st.integers(0, 63), max_size=PARTS - 1))
    return h, h ^ sum(1 << b for b in flips)


@given(near_hash_pairs(), st.integers(0, 4))
def test_any_two_hashes_within_7_bits_share_a_band_key(pair, scale):
    a, b = pair
    keys_a = {k for k, _ in band_entries(1, ContentKeys(SHA, (0,) * scale + (a,)))}
    keys_b = {k for k, _ in band_entries(2, ContentKeys(SHA, (0,) * scale + (b,)))}
    assert {k for k in keys_a if k[0] == scale} & {k for k in keys_b if k[0] == scale}


@given(hashes64, st.integers(PARTS, 64))
def test_split_cuts_into_fields_that_rebuild_the_value(value, nbits):
    value &= (1 << nbits) - 1
    parts = split(value, nbits)
    assert len(parts) == PARTS
    widths = [nbits - rest_bits for _, _, _, rest_bits in parts]
    assert sum(widths) == nbits and max(widths) - min(widths) <= 1
    rebuilt = 0
    for (_, field, _, _), width in zip(parts, widths):
        rebuilt = rebuilt << width | field
    assert rebuilt == value
    for (index, _field, rest, _rest_bits), width in zip(parts, widths):  # rest is the value minus that field
        low = nbits - sum(widths[: index + 1])
        assert rest == ((value >> (low + width)) << low) | (value & ((1 << low) - 1))


def _clustered_keys(rnd: random.Random, n: int, scales: int) -> dict[int, ContentKeys]:
    """Keys in small clusters (a centre and copies within 0-10 bits of it per hash), plus identical ones."""
    keys, item = {}, 0
    while item < n:
        centre = [rnd.getrandbits(64) for _ in range(scales)]
        for _ in range(rnd.randint(1, 4)):
            flipped = tuple(h ^ sum(1 << b for b in rnd.sample(range(64), rnd.randint(0, 5))) for h in centre)
            keys[item] = ContentKeys(SHA, flipped if rnd.random() < 0.8 else tuple(centre))
            item += 1
    return keys


def _brute(keys: dict[int, ContentKeys], most: int) -> set[tuple[int, int, int]]:
    return {
        (a, b, distance(keys[a], keys[b]))
        for a, b in itertools.combinations(sorted(keys), 2)
        if distance(keys[a], keys[b]) <= most
    }


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32), st.integers(2, 120), st.integers(1, 3), st.sampled_from([2, 4, 2048]))
def test_near_pairs_finds_exactly_the_brute_force_pairs(seed, n, scales, cap):
    """Whether buckets are compared whole or cut again into sub-bands: the cuts lose nothing. Only
    the last resort may, and then it says how many comparisons it left out."""
    keys = _clustered_keys(random.Random(seed), n, scales)
    pairs, skipped = near_pairs(keys, cap=cap)
    brute = _brute(keys, 7)
    assert {tuple(p) for p in pairs} <= brute
    if skipped == 0:
        assert {tuple(p) for p in pairs} == brute
    if cap == 2048:
        assert skipped == 0
    assert pairs == sorted(set(pairs))


def test_cut_buckets_lose_no_pair():
    """1,500 keys in clusters with cap 16: level-0 buckets (~50 entries) are all cut, none reaches the last resort."""
    keys = _clustered_keys(random.Random(5), 1500, 1)
    pairs, skipped = near_pairs(keys, cap=16)
    assert skipped == 0
    assert {tuple(p) for p in pairs} == _brute(keys, 7)


def test_a_bucket_cut_as_far_as_it_goes_joins_identical_hashes_and_counts_what_it_skips():
    # 30 images with the same hash, and 30 each 2 bits from it: the cuts never separate them.
    base = 0x0123456789ABCDEF
    keys = {i: ContentKeys(SHA, (base,)) for i in range(30)}
    keys |= {30 + i: ContentKeys(SHA, (base ^ (3 << (2 * i)),)) for i in range(30)}
    entries = [e for item in sorted(keys) for key, e in band_entries(item, keys[item]) if key == (0, 0, 0x01)]
    result = band_pairs(entries, cap=4)
    assert all(p.distance <= 4 for p in result.pairs)
    # the identical ones are joined to the first (a star), the 31 distinct hashes each to their next 4
    assert {(0, i) for i in range(1, 30)} <= {(p.a, p.b) for p in result.pairs}
    present = sorted({e.item for e in entries})  # those whose top byte is still 0x01
    brute = {(a, b) for a, b in itertools.combinations(present, 2) if distance(keys[a], keys[b]) <= 7}
    assert {(p.a, p.b) for p in result.pairs} < brute and result.skipped > 0
    unbounded = band_pairs(entries, cap=100)
    assert unbounded.skipped == 0 and {(p.a, p.b) for p in unbounded.pairs} == brute


def test_band_pairs_does_not_depend_on_entry_order():
    keys = _clustered_keys(random.Random(3), 60, 2)
    entries = [e for item in sorted(keys) for key, e in band_entries(item, keys[item]) if key[:2] == (0, 0)]
    shuffled = entries[:]
    random.Random(1).shuffle(shuffled)
    assert band_pairs(entries, cap=5) == band_pairs(shuffled, cap=5)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="cap must be >= 2, got 1"):
        band_pairs([BandEntry(0, ContentKeys(SHA, (0,)), 0, 56)], cap=1)
    with pytest.raises(ValueError, match="cannot cut 5 bits into 8 parts"):
        split(3, 5)


def test_exact_pairs_lists_every_pair_once():
    assert exact_pairs([5, 2, 9, 2]) == [(2, 5, 0), (2, 9, 0), (5, 9, 0)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.lists(st.tuples(st.integers(0, 39), st.integers(0, 39)), max_size=80), st.integers(1, 41))
def test_union_find_groups_are_components_no_larger_than_the_cap(n, edges, max_size):
    edges = [(a % n, b % n) for a, b in edges]
    uf = UnionFind(n, max_size)
    accepted = [(a, b) for a, b in edges if uf.union(a, b)]
    groups = uf.groups()
    members = [x for g in groups for x in g]
    assert len(members) == len(set(members)) and all(g == sorted(g) for g in groups)  # a partition
    assert all(2 <= len(g) <= max_size for g in groups)
    where = {x: i for i, g in enumerate(groups) for x in g}
    for a, b in edges:  # each edge is inside one group, or was refused
        assert (a == b) or (where.get(a) is not None and where.get(a) == where.get(b)) or (a, b) not in accepted
    for a, b in accepted:
        assert where[a] == where[b]
    # every group is connected by accepted edges alone: a spanning forest of n - components edges
    assert len(accepted) == sum(len(g) - 1 for g in groups)
    if max_size >= n:  # no cap in effect: exactly the connected components of all edges
        assert uf.refused == 0
        seen, components = set(), []
        adjacent = {x: set() for x in range(n)}
        for a, b in edges:
            adjacent[a].add(b)
            adjacent[b].add(a)
        for x in range(n):
            if x not in seen:
                stack, comp = [x], set()
                while stack:
                    y = stack.pop()
                    if y not in comp:
                        comp.add(y)
                        stack.extend(adjacent[y])
                seen |= comp
                if len(comp) > 1:
                    components.append(sorted(comp))
        assert groups == sorted(components)


def test_union_find_refuses_and_counts_a_union_past_the_cap():
    uf = UnionFind(5, max_size=2)
    assert uf.union(0, 1) and uf.union(2, 3)
    assert not uf.union(1, 2) and uf.refused == 1
    assert not uf.union(0, 1) and uf.refused == 1  # already one group: not a refusal
    assert uf.groups() == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="max_size must be >= 1, got 0"):
        UnionFind(3, 0)
