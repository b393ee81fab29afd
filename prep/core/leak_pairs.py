"""Which records of dataset A are duplicates of records of dataset B (`prep leakage`). Pure.

An exact pair has equal sha256 of the encoded image; a near pair has hashes at
most `NEAR_DISTANCE` bits apart at some crop scale (`prep.core.content_keys`)
and different bytes. Pairs inside one dataset are not listed. Every pair is
listed: three copies in A of an image that B holds twice are six pairs.
`self_pairs` is the same for one dataset against itself (`prep leakage A A`):
every pair of two different records, each once.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from prep.core.content_keys import NEAR_DISTANCE, ContentKeys, comparable
from prep.core.keys_sidecar import RecordKeys
from prep.core.near_pairs import DEFAULT_CAP, near_pairs

EXACT = "exact"
NEAR = "near"


@dataclasses.dataclass(frozen=True, order=True)
class LeakPair:
    """A record of A and a record of B that show the same picture."""

    a: str  # image/filename in A
    b: str  # image/filename in B
    split_a: str
    split_b: str
    kind: str  # EXACT or NEAR
    distance: int  # 0 for EXACT

    def __post_init__(self) -> None:
        if self.kind not in (EXACT, NEAR):
            raise ValueError(f"kind must be {EXACT!r} or {NEAR!r}, got {self.kind!r}")
        if not 0 <= self.distance <= 64:
            raise ValueError(f"distance must be in [0, 64], got {self.distance}")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class LeakPairs:
    pairs: tuple[LeakPair, ...]
    skipped: int  # comparisons left out in oversized band buckets (prep.core.near_pairs)


def leak_pairs(
    a: list[RecordKeys], b: list[RecordKeys], cap: int = DEFAULT_CAP, max_distance: int = NEAR_DISTANCE
) -> LeakPairs:
    """Every exact and near pair between the records of `a` and those of `b`, sorted."""
    records = a + b

    def pair(i: int, j: int, kind: str, d: int) -> LeakPair:
        x, y = records[i], records[j]
        return LeakPair(x.filename, y.filename, x.split, y.split, kind, d)

    by_digest: dict[str, list[int]] = collections.defaultdict(list)
    for i, r in enumerate(records):
        by_digest[r.sha256].append(i)
    out: list[LeakPair] = []
    for members in by_digest.values():
        in_a = [i for i in members if i < len(a)]
        out.extend(pair(i, j, EXACT, 0) for i in in_a for j in members if j >= len(a))
    near, skipped = near_pairs(_comparable(records), cap, max_distance)
    out.extend(
        pair(p.a, p.b, NEAR, p.distance)
        for p in near
        if p.a < len(a) <= p.b and records[p.a].sha256 != records[p.b].sha256
    )
    return LeakPairs(tuple(sorted(out)), skipped)


def self_pairs(records: list[RecordKeys], cap: int = DEFAULT_CAP, max_distance: int = NEAR_DISTANCE) -> LeakPairs:
    """Every exact and near pair of two different records of one dataset, each once, sorted."""

    def pair(i: int, j: int, kind: str, d: int) -> LeakPair:
        x, y = sorted((records[i], records[j]), key=lambda r: (r.filename, r.split))
        return LeakPair(x.filename, y.filename, x.split, y.split, kind, d)

    by_digest: dict[str, list[int]] = collections.defaultdict(list)
    for i, r in enumerate(records):
        by_digest[r.sha256].append(i)
    out = [
        pair(i, j, EXACT, 0) for members in by_digest.values() for k, i in enumerate(members) for j in members[k + 1 :]
    ]
    near, skipped = near_pairs(_comparable(records), cap, max_distance)
    out.extend(pair(p.a, p.b, NEAR, p.distance) for p in near if records[p.a].sha256 != records[p.b].sha256)
    return LeakPairs(tuple(sorted(out)), skipped)


def _comparable(records: list[RecordKeys]) -> dict[int, ContentKeys]:
    """{index: keys} of the records the near-duplicate search takes (content_keys.comparable), as convert's."""
    return {i: keys for i, r in enumerate(records) if (keys := r.keys) is not None and comparable(keys)}
