"""`components`: the groups of the scan's pairs, from arrays (no object per pair), the same as a union-find
fed the sorted pairs one by one and asked for each item's root."""

from __future__ import annotations

import random

import numpy as np
import pytest

from beam_jobs.dedupe import components
from prep.core.run import dedupe_files
from prep.core.run.dedupe_types import BandPairs, GroupedItems, ScanStats
from prep.core.union_find import UnionFind


def expected(pairs: list[tuple[int, int, int]], max_size: int):
    """What components gives, the plain way: {chunk: rows}, refused."""
    pairs = sorted(set(pairs))
    items = sorted({x for _, a, b in pairs for x in (a, b)})
    index = {item: i for i, item in enumerate(items)}
    uf = UnionFind(len(items), max_size)
    for _, a, b in pairs:
        uf.union(index[a], index[b])
    members: dict[int, list[int]] = {}
    for item in items:
        members.setdefault(uf.find(index[item]), []).append(item)
    groups = sorted(m for m in members.values() if len(m) > 1)
    by_chunk: dict[int, list] = {}
    for item in items:
        for rank, m in enumerate(groups):
            if item in m:
                by_chunk.setdefault(dedupe_files.item_chunk(item), []).append((item, m[0], dedupe_files.batch_of(rank)))
    return by_chunk, uf.refused


@pytest.mark.parametrize("seed, max_size", [(0, 1000), (1, 4), (2, 2)])
def test_groups_and_refusals_are_those_of_the_plain_union_find(seed, max_size, monkeypatch):
    monkeypatch.setattr(dedupe_files, "GROUPS_PER_BATCH", 3)  # several batches
    rnd = random.Random(seed)
    ids = [dedupe_files.item_id(rnd.randrange(4), rnd.randrange(500)) for _ in range(300)]
    pairs = []
    for _ in range(400):
        a, b = rnd.sample(ids, 2)
        if a != b:
            pairs.append((rnd.choice((0, 2, 4, 6)), min(a, b), max(a, b)))
    cut = len(pairs) // 3
    found = [
        BandPairs(np.array(pairs[:cut] + pairs[:10], np.int64), 3),  # pairs met twice count once
        BandPairs(np.zeros((0, 3), np.int64), 0),
        BandPairs(np.array(pairs[cut:], np.int64), 4),
    ]
    out = list(components((None, found), max_size))
    assert out[-1] == ScanStats(expected(pairs, max_size)[1], 7)
    got = {g.chunk: list(g.rows) for g in out[:-1] if isinstance(g, GroupedItems)}
    assert [g.chunk for g in out[:-1]] == sorted(got)
    assert got == expected(pairs, max_size)[0]
    if max_size == 2:
        assert out[-1].refused > 0


def test_no_pairs_no_groups():
    assert list(components((None, [BandPairs(np.zeros((0, 3), np.int64), 0)]), 10)) == [ScanStats(0, 0)]


def test_roots_are_every_id_s_find():
    rnd = random.Random(5)
    uf = UnionFind(200, 7)
    for _ in range(300):
        uf.union(rnd.randrange(200), rnd.randrange(200))
    assert uf.roots().tolist() == [uf.find(x) for x in range(200)]
