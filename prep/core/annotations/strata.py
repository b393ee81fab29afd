"""Stratification of images with several labels: each image's stratum and its rank key in it.

The planner (prep/core/layout.py) is unchanged: inside a group (split from SOURCE, stratum)
examples are ranked by the key; with --split fractions the first ranks go to the first
split, and inside a split position p goes to shard p mod N. The stratum label is then
balanced exactly (±1 per shard), as single-label classes are. What the key adds is that
every other label follows, for any N and any split, without knowing either:

* The stratum of an image is its rarest label (fewest images in the input; ties by id).
* Inside a stratum the images are split in two halves, greedily, so that each label's
  count differs by as little as possible between the halves (an image goes to the half
  that lacks its labels most: the sign of the sum of the running differences, as in
  online vector balancing); each half is split again, and so on down to single images.
* The order interleaves the halves: ranks 0, 2, 4, ... are the first half (in its own
  interleaved order), ranks 1, 3, 5, ... the second. So the ranks r = j mod 2^m are one
  subset of the m-th split level, balanced in every label; an arithmetic progression
  of ranks (one shard's share, p mod N, whatever N) and a prefix (a split's share)
  draw evenly from those subsets.

The key is the rank, 8 bytes big-endian; the images without a label (stratum None) keep
the seeded hash order. Deterministic in `seed`: the greedy visits images in seeded-hash
order (rarest labels first), and equal choices are broken by that order too.
Memory: the images' label ids and an index per image; time O(n log n) label updates.
"""

from __future__ import annotations

import hashlib
from typing import Sequence


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


COUPLED_DEPTH = 12  # residues mod 2 .. 4096 of the position share their balance across strata


def _count(start: int, end: int, residue: int, modulus: int) -> int:
    """How many positions p in [start, end) have p = residue (mod modulus)."""
    def below(x):
        return max(0, (x - residue + modulus - 1) // modulus)
    return below(end) - below(start)


def _split(subset: list[int], caps: tuple[int, int], labels: list[tuple[int, ...]], diff: dict[int, int],
           coins: list[bytes], depth: int) -> tuple[list[int], list[int]]:
    """`subset` (in visiting order) into two sides of sizes `caps`, balancing `diff` (label -> count on
    side 0 minus count on side 1, over the same residues in the strata before)."""
    zero: list[int] = []
    one: list[int] = []
    for i in subset:
        own = labels[i]
        if len(zero) == caps[0]:
            to_zero = False
        elif len(one) == caps[1]:
            to_zero = True
        else:
            lean = 0
            for c in own:
                lean += diff.get(c, 0)
            # A tie is a coin (a byte of the image's hash per depth). Always side 0 on ties would
            # gather the images with fewer labels in the low ranks and the others in the high ones.
            to_zero = lean < 0 or (lean == 0 and coins[i][depth % 32] & 1 == 1)
        (zero if to_zero else one).append(i)
        step = 1 if to_zero else -1
        for c in own:
            diff[c] = diff.get(c, 0) + step
    return zero, one


def _place(members: list[int], start: int, labels: list[tuple[int, ...]], coins: list[bytes],
           shared: dict[tuple[int, int], dict[int, int]]) -> dict[int, int]:
    """Ranks of `members` (in visiting order), whose group holds positions [start, start + n).

    The positions of residue j mod 2^d are split into residues j and j + 2^d mod 2^(d+1), and
    the members there are split between them by `_split`, down to one member per position.
    """
    n = len(members)
    end = start + n
    rank: dict[int, int] = {}
    stack = [(members, 0, 0)]  # (subset, depth d, residue j mod 2^d)
    while stack:
        subset, depth, residue = stack.pop()
        if len(subset) == 1:
            modulus = 1 << depth
            first = start + (residue - start) % modulus  # the one position of that residue
            rank[subset[0]] = first - start
            continue
        modulus = 1 << (depth + 1)
        high = residue + (modulus >> 1)
        caps = (_count(start, end, residue, modulus), _count(start, end, high, modulus))
        diff = shared.setdefault((depth, residue), {}) if depth < COUPLED_DEPTH else {}
        zero, one = _split(subset, caps, labels, diff, coins, depth)
        if zero:
            stack.append((zero, depth + 1, residue))
        if one:
            stack.append((one, depth + 1, high))
    return rank


def stratify(images: Sequence[tuple[str, tuple[int, ...]]], num_classes: int,
             seed: int) -> list[tuple[int | None, bytes]]:
    """(stratum, sort key) of each (path, label ids present) image, in input order.

    Inside a stratum, sorting by the key gives the balanced order (module docstring).

    Raises:
        ValueError: a label id outside [0, num_classes).
    """
    strata = strata_of(images, num_classes)
    coins = [_hash(seed, path) for path, _ in images]
    groups: dict[int | None, list[int]] = {}
    for i, stratum in enumerate(strata):
        groups.setdefault(stratum, []).append(i)
    keys: list[bytes] = [b""] * len(images)
    labels: list[tuple[int, ...]] = [()] * len(images)
    shared: dict[tuple[int, int], dict[int, int]] = {}
    start = 0
    # Groups in the planner's order (label order, the unlabelled last), each at its positions.
    for stratum in sorted(groups, key=lambda s: (s is None, s or 0)):
        members = sorted(groups.pop(stratum), key=lambda i: coins[i])
        for i in members:
            # The stratum is in every member: the sides' sizes balance it, not the greedy.
            labels[i] = tuple(sorted(set(images[i][1]) - {stratum}))
        rank = _place(members, start, labels, coins, shared)
        for i in members:
            keys[i] = rank[i].to_bytes(8, "big")
            labels[i] = ()
        start += len(members)
    return [(s, k) for s, k in zip(strata, keys)]
