"""Duplicate groups: connected components of the duplicate pairs, bounded in memory and in size. Pure.

Memory: two arrays of `n` 32-bit integers (parent, size): 8 bytes per image
whatever the number of pairs, which are streamed through `union` and never
kept. The pipeline runs it once over all pairs, on the images that are in
some pair only (beam_jobs/dedupe.py `components`).

Size: near-duplicate links chain (A looks like B, B like C, ...), so one
component could swallow a whole dataset of similar pictures. A union that
would make a group larger than `max_size` is refused and counted in
`refused`; which unions are refused depends only on the order of the pairs,
so callers feed them sorted (exact pairs first, then by distance, then ids).
"""

from __future__ import annotations

import numpy as np

DEFAULT_MAX_SIZE = 1_000


class UnionFind:
    """Disjoint sets over the ids 0..n-1, no set larger than `max_size`."""

    def __init__(self, n: int, max_size: int = DEFAULT_MAX_SIZE):
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        if n >= 1 << 31:
            raise ValueError(f"n must be < 2**31 (32-bit ids), got {n}")
        self.parent = np.arange(n, dtype=np.int32)
        self.size = np.ones(n, dtype=np.int32)
        self.max_size = max_size
        self.refused = 0

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent[root] != root:
            root = int(parent[root])
        while parent[x] != root:  # path compression: later finds are near O(1)
            parent[x], x = root, int(parent[x])
        return root

    def union(self, a: int, b: int) -> bool:
        """Joins the sets of `a` and `b`. False if already one set or if the joined set would be too large."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self.size[ra] + self.size[rb] > self.max_size:
            self.refused += 1
            return False
        if self.size[ra] < self.size[rb] or (self.size[ra] == self.size[rb] and rb < ra):
            ra, rb = rb, ra  # union by size; ties to the smaller id, so the result is order-independent per pair
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]
        return True

    def roots(self) -> np.ndarray:
        """Each id's root (int32), by pointer jumping over the whole array: a handful of numpy passes, as
        union by size keeps every tree shallow (depth at most log2 of its size)."""
        root = self.parent.copy()
        while True:
            up = root[root]
            if np.array_equal(up, root):
                return root
            root = up

    def groups(self) -> list[list[int]]:
        """The sets of two or more ids, each sorted, ordered by their smallest id."""
        members: dict[int, list[int]] = {}
        for x in range(len(self.parent)):
            members.setdefault(self.find(x), []).append(x)
        return sorted((m for m in members.values() if len(m) > 1), key=lambda m: m[0])


_UNION_BLOCK = 1 << 16  # pairs made Python ints at once


def pair_groups(pairs: np.ndarray, max_size: int = DEFAULT_MAX_SIZE) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Pair rows (distance, a, b), in any order, some met twice -> the groups a union-find fed them sorted
    makes: (the items in a group, ascending; each one's group id, its smallest item; each one's group's rank
    in order of group id; the unions refused).

    Pairs are fed exact first, then by distance and ids, so which unions a full group refuses depends on
    the data alone. Held: the pairs as arrays (24 bytes a pair, and a sort's copies: ~56 at the peak) and
    8 bytes an image in some pair, no object per pair.
    """
    pairs = np.asarray(pairs, np.int64).reshape(-1, 3)
    pairs = pairs[np.lexsort(pairs.T[::-1])]  # rows (distance, a, b) sorted; a pair met twice, twice
    ends = pairs[np.r_[True, (pairs[1:] != pairs[:-1]).any(axis=1)][: len(pairs)], 1:]  # each once: a and b
    del pairs
    items = np.unique(ends)  # ascending
    ends = np.searchsorted(items, ends).astype(np.int32)  # as indexes into items
    uf = UnionFind(len(items), max_size)
    for first in range(0, len(ends), _UNION_BLOCK):
        for a, b in ends[first : first + _UNION_BLOCK].tolist():
            uf.union(a, b)
    del ends
    roots = uf.roots()
    tops, firsts, sizes = np.unique(roots, return_index=True, return_counts=True)  # firsts: smallest items
    of = np.searchsorted(tops, roots)  # each item's set
    members = np.flatnonzero(sizes[of] > 1)  # ascending
    heads = firsts[of[members]]  # the index of each member's group id
    ranks = np.searchsorted(np.sort(firsts[sizes > 1]), heads)  # in order of group id
    return items[members], items[heads], ranks, uf.refused
