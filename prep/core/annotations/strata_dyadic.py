"""Positions without the layout: a dyadic greedy, balanced for power-of-two shard counts.

Used by `strata.stratify` when the caller does not pass the layout. The positions a stratum
will hold (strata end to end in label order, the unlabelled last: the planner's layout for
one split) are split by residue mod 2, then each half by residue mod 4, and so on; at
each split an image goes to the residue lacking its labels most (the sign of the sum of
the running differences, as in online vector balancing), the differences shared by the
strata at the same residues. So residues mod 2^m (the shards, for N = 2^m) are balanced
in every label. Other shard counts, and a split's prefix, are about as random.
"""

from __future__ import annotations

from collections.abc import Sequence

COUPLED_DEPTH = 12  # residues mod 2 .. 4096 of the position share their balance across strata


def _count(start: int, end: int, residue: int, modulus: int) -> int:
    """How many positions p in [start, end) have p = residue (mod modulus)."""

    def below(x: int) -> int:
        return max(0, (x - residue + modulus - 1) // modulus)

    return below(end) - below(start)


def _split(
    subset: list[int],
    caps: tuple[int, int],
    labels: Sequence[tuple[int, ...]],
    diff: dict[int, int],
    coins: Sequence[bytes],
    depth: int,
) -> tuple[list[int], list[int]]:
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


def _place(
    members: list[int],
    start: int,
    labels: Sequence[tuple[int, ...]],
    coins: Sequence[bytes],
    shared: dict[tuple[int, int], dict[int, int]],
) -> dict[int, int]:
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


def dyadic_ranks(
    groups: dict[int | None, list[int]], labels: Sequence[tuple[int, ...]], coins: Sequence[bytes]
) -> dict[int, int]:
    """{image: rank} for the images of every group ({stratum: [image]})."""
    shared: dict[tuple[int, int], dict[int, int]] = {}
    rank: dict[int, int] = {}
    start = 0
    # Groups in the planner's order (label order, the unlabelled last), each at its positions.
    for stratum in sorted(groups, key=lambda s: (s is None, s or 0)):
        members = sorted(groups[stratum], key=lambda i: coins[i])
        rank.update(_place(members, start, labels, coins, shared))
        start += len(members)
    return rank
