"""Stratification of images with several labels: each image's stratum and its rank key in it.

The planner (prep/core/layout.py) is unchanged: inside a group (split from SOURCE, stratum)
examples are ranked by the key; with --split fractions the first ranks go to the first
split, and inside a split position p goes to shard p mod N. So the stratum label is
balanced exactly (±1 per shard), as single-label classes are, and the key decides where
the other labels go:

* The stratum of an image is its rarest label (fewest images in the input; ties by id);
  None for an image without labels.
* With `locate` (the layout's map from a stratum's rank to its (split, shard) cell, known
  once the strata's sizes are), the ranks deal each stratum's images to cells lacking
  their labels (`strata_cells`): splits and shards of any count are stratified.
* Without it, a dyadic greedy (`strata_dyadic`) balances the residues of the positions mod
  2^m: shards are stratified when their count is a power of two and the split is one.

The key is the rank, 8 bytes big-endian. Deterministic in `seed` (a seeded hash orders the
images the greedy visits and breaks its ties), whatever the order of `images`.

How the planner calls it: once per split given by SOURCE (its strata are that split's), with
the images it keeps; `strata_of` first, to size the groups and make the layout; then
`stratify(..., locate=lambda stratum, rank: layout.locate(group_of(stratum), rank))`.
Memory: every image's label ids and a few integers per image (36 MB peak for 100,000
COCO-like images, bench/stratify_bench.py); the cells' state between strata is only a
cells x labels table, so the strata could be dealt one at a time from staged groups.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence

from prep.core.annotations.strata_cells import cell_ranks
from prep.core.annotations.strata_dyadic import dyadic_ranks


def _hash(seed: int, path: str) -> bytes:
    # The same form as ordering.sort_key, with its own purpose, so this order is independent of the ranking's.
    return hashlib.sha256(f"{seed}\0stratify\0".encode() + path.encode("utf-8", "surrogateescape")).digest()


def strata_of(images: Sequence[tuple[str, tuple[int, ...]]], num_classes: int) -> list[int | None]:
    """Each image's stratum: its rarest label by image count, ties by the smaller id; None without labels.

    Raises:
        ValueError: a label id outside [0, num_classes).
    """
    counts = [0] * num_classes
    for path, labels in images:
        for label in set(labels):
            if not 0 <= label < num_classes:
                raise ValueError(f"{path}: label id {label} is outside [0, {num_classes})")
            counts[label] += 1
    return [min(set(labels), key=lambda c: (counts[c], c)) if labels else None for _, labels in images]


def stratify(
    images: Sequence[tuple[str, tuple[int, ...]]],
    num_classes: int,
    seed: int,
    locate: Callable[[int | None, int], Hashable] | None = None,
) -> list[tuple[int | None, bytes]]:
    """(stratum, sort key) of each (path, label ids present) image, in input order.

    Args:
        images: (path, label ids present) per image; ids in [0, num_classes).
        num_classes: the number of label ids.
        seed: the conversion's seed.
        locate: optional: (stratum, rank) -> the cell (e.g. (split, shard), or None when
            capped) that rank of that stratum reaches in the layout, for strata of the
            sizes `strata_of` gives. With it every split and shard count is stratified.

    Raises:
        ValueError: a label id outside [0, num_classes).
    """
    strata = strata_of(images, num_classes)
    coins = [_hash(seed, path) for path, _ in images]
    groups: dict[int | None, list[int]] = {}
    for i, stratum in enumerate(strata):
        groups.setdefault(stratum, []).append(i)
    # Each image's other labels: the stratum is in every member, and the slots balance it.
    labels = [tuple(sorted(set(images[i][1]) - {s})) if s is not None else () for i, s in enumerate(strata)]
    if locate is not None:
        rank = cell_ranks(groups, labels, num_classes, coins, locate)
    else:
        rank = dyadic_ranks(groups, labels, coins)
    return [(s, rank[i].to_bytes(8, "big")) for i, s in enumerate(strata)]
