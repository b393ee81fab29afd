"""Scoring a duplicate finder on a planted set (tests/support/photos.py): recall per kind, false pairs.

Shared by the unit tests and bench/dedupe_quality.py, so both measure the same thing.
"""

from __future__ import annotations

import collections
import dataclasses

from prep.core.content_keys import ContentKeys
from prep.core.near_pairs import exact_pairs, near_pairs


@dataclasses.dataclass(frozen=True)
class Quality:
    found: dict[str, int]  # planted pairs found, per kind
    planted: dict[str, int]  # planted pairs, per kind
    false_pairs: int  # pairs found between images of different originals
    unrelated_pairs: int  # pairs of images of different originals: what false pairs are out of
    skipped: int  # comparisons left out in oversized buckets

    def recall(self, kind: str) -> float:
        return self.found[kind] / self.planted[kind]

    @property
    def false_per_100k(self) -> float:
        return 1e5 * self.false_pairs / self.unrelated_pairs


def family(name: str) -> str:
    """photo_00012_crop_5.jpg and photo_00012.jpg are of one family: the original's name."""
    return "_".join(name.split(".")[0].split("_")[:2])


def score(keys: dict[str, ContentKeys], planted: list[tuple[str, str, str]]) -> Quality:
    """Finds every exact and near pair among `keys` ({image name: keys}) as the product does, then scores it."""
    names = sorted(keys)
    index = {name: i for i, name in enumerate(names)}
    pairs, skipped = near_pairs({index[n]: keys[n] for n in names})
    by_digest = collections.defaultdict(list)
    for n in names:
        by_digest[keys[n].sha256].append(index[n])
    found = {(p.a, p.b) for p in pairs}
    found |= {(p.a, p.b) for members in by_digest.values() for p in exact_pairs(members)}
    hits, counts = collections.Counter(), collections.Counter()
    for kind, original, copy in planted:
        counts[kind] += 1
        a, b = sorted((index[original], index[copy]))
        hits[kind] += (a, b) in found
    false = sum(family(names[a]) != family(names[b]) for a, b in found)
    sizes = collections.Counter(family(n) for n in names)
    total = len(names) * (len(names) - 1) // 2
    related = sum(k * (k - 1) // 2 for k in sizes.values())
    return Quality({k: hits[k] for k in counts}, dict(counts), false, total - related, skipped)
