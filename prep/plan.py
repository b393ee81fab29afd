"""Planning: which example goes to which split, shard and position. Pure functions.

Given the examples that passed the image check, `make_plan` decides:

1. Order. Each example gets a sort key ``sha256(seed, path)`` from its path
   relative to SOURCE, so the plan never depends on the order a file system
   lists files, and another seed gives another order.
2. Cap. `max_per_class` keeps the first N of each class in key order (before a
   stratified split; within each given split when the source names splits).
3. Split. With fractions, each class is split in the same proportions by
   largest-remainder rounding; the first examples in key order go to the first
   split named, and so on.
4. Shards. Within a split, classes are laid end to end (label order, key order
   inside a class) and position p goes to shard ``p mod N``. So every shard holds
   ⌊n/N⌋ or ⌈n/N⌉ examples and every class's count differs by at most one
   between any two shards.
5. Order in a shard: by a second seeded hash, so reading one shard does not
   give one class at a time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from fractions import Fraction
from typing import Sequence

from prep.errors import OptionsError, PlanError
from prep.naming import ShardName, check_split_name

DEFAULT_SPLIT = "train"
DEFAULT_SHARD_SIZE = 128 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Example:
    """What the planner needs to know of one checked example."""

    path: str  # relative to SOURCE, '/'-separated
    label: int
    split: str | None  # from split folders or a split column; None if not given
    size: int  # bytes of its serialized record


def parse_split_fractions(text: str) -> tuple[tuple[str, Fraction], ...]:
    """Parses ``train=0.8,validation=0.1,test=0.1`` into exact fractions summing to 1.

    Raises:
        OptionsError: on a malformed item, a repeated name, a fraction outside
            (0, 1], or a sum other than 1.
    """
    items, seen = [], set()
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        name = name.strip()
        if not sep or not name:
            raise OptionsError(f"--split item {part.strip()!r} is not NAME=FRACTION")
        try:
            check_split_name(name)
        except ValueError as exc:
            raise OptionsError(f"--split: {exc}") from None
        if name in seen:
            raise OptionsError(f"--split names {name!r} twice")
        try:
            fraction = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise OptionsError(f"--split fraction {value.strip()!r} for {name!r} is not a number") from None
        if not 0 < fraction <= 1:
            raise OptionsError(f"--split fraction for {name!r} must be in (0, 1], got {value.strip()}")
        seen.add(name)
        items.append((name, fraction))
    total = sum(f for _, f in items)
    if total != 1:
        raise OptionsError(f"--split fractions must sum to 1, got {float(total):g}")
    return tuple(items)


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """Options that shape the plan."""

    seed: int = 0
    num_shards: int | None = None  # per split; None: derive from shard_size
    shard_size: int = DEFAULT_SHARD_SIZE  # target bytes per shard
    split_fractions: tuple[tuple[str, Fraction], ...] | None = None
    max_per_class: int | None = None

    def __post_init__(self):
        if self.num_shards is not None and self.num_shards < 1:
            raise OptionsError(f"--num-shards must be >= 1, got {self.num_shards}")
        if self.shard_size < 1:
            raise OptionsError(f"--shard-size must be >= 1 byte, got {self.shard_size}")
        if self.max_per_class is not None and self.max_per_class < 1:
            raise OptionsError(f"--max-per-class must be >= 1, got {self.max_per_class}")


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """One shard: its name and its members (indices into the examples) in write order."""

    name: ShardName
    members: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Plan:
    """The whole plan: shards of every split, in (split, index) order, and what was capped."""

    shards: tuple[ShardPlan, ...]
    capped: tuple[int, ...]  # indices of examples left out by max_per_class

    def splits(self) -> list[str]:
        return list(dict.fromkeys(s.name.split for s in self.shards))


def sort_key(seed: int, path: str, purpose: str = "rank") -> bytes:
    """The seeded hash that orders examples; `purpose` separates independent orders."""
    return hashlib.sha256(f"{seed}\0{purpose}\0".encode() + path.encode("utf-8", "surrogateescape")).digest()


def largest_remainder(n: int, fractions: Sequence[Fraction]) -> list[int]:
    """Splits n into integer parts proportional to `fractions` (summing to 1).

    Each part is the floor of its quota; the leftover units go to the largest
    remainders, earlier parts first on ties.
    """
    quotas = [n * f for f in fractions]
    parts = [math.floor(q) for q in quotas]
    order = sorted(range(len(fractions)), key=lambda i: (-(quotas[i] - parts[i]), i))
    for i in order[: n - sum(parts)]:
        parts[i] += 1
    return parts


def shard_count(examples: int, total_bytes: int, options: PlanOptions, split: str) -> int:
    """Shards for a split: `num_shards`, or enough for `shard_size`, never more than examples."""
    if options.num_shards is not None:
        if options.num_shards > examples:
            raise PlanError(
                f"split {split!r} has {examples} example(s), fewer than --num-shards {options.num_shards}; "
                f"use --num-shards {examples} or less")
        return options.num_shards
    return max(1, min(examples, math.ceil(total_bytes / options.shard_size)))


def assign_shards(class_blocks: Sequence[Sequence[int]], num_shards: int) -> list[list[int]]:
    """Deals classes laid end to end round-robin over shards: position p to shard p mod N."""
    shards: list[list[int]] = [[] for _ in range(num_shards)]
    position = 0
    for block in class_blocks:
        for member in block:
            shards[position % num_shards].append(member)
            position += 1
    return shards


def make_plan(examples: Sequence[Example], num_classes: int, options: PlanOptions) -> Plan:
    """Plans splits and balanced shards for `examples`. See the module docstring.

    Raises:
        PlanError: a split would be empty, has fewer examples than shards asked
            for, or a split is given by both the source and the options.
    """
    given = {e.split for e in examples}
    if options.split_fractions is not None and given != {None}:
        raise PlanError("--split cannot be used when SOURCE already names splits (split folders or a split column)")
    keys = [sort_key(options.seed, e.path) for e in examples]

    # (split, label) -> member indices in key order
    groups: dict[tuple[str | None, int], list[int]] = {}
    for index in sorted(range(len(examples)), key=lambda i: (keys[i], examples[i].path)):
        groups.setdefault((examples[index].split, examples[index].label), []).append(index)

    capped: list[int] = []
    if options.max_per_class is not None:
        for members in groups.values():
            capped.extend(members[options.max_per_class:])
            del members[options.max_per_class:]

    if options.split_fractions is not None:
        names = [name for name, _ in options.split_fractions]
        fractions = [f for _, f in options.split_fractions]
        split_groups: dict[tuple[str, int], list[int]] = {}
        for (_, label), members in groups.items():
            start = 0
            for name, count in zip(names, largest_remainder(len(members), fractions)):
                split_groups[(name, label)] = members[start:start + count]
                start += count
        split_order = names
    else:
        split_groups = {(split or DEFAULT_SPLIT, label): m for (split, label), m in groups.items()}
        split_order = sorted({split for split, _ in split_groups})

    shards: list[ShardPlan] = []
    for split in split_order:
        blocks = [split_groups.get((split, label), []) for label in range(num_classes)]
        count = sum(len(b) for b in blocks)
        if count == 0:
            raise PlanError(f"split {split!r} gets no examples; use fewer splits or more data")
        total_bytes = sum(examples[m].size for b in blocks for m in b)
        num_shards = shard_count(count, total_bytes, options, split)
        for index, members in enumerate(assign_shards(blocks, num_shards)):
            members.sort(key=lambda m: sort_key(options.seed, examples[m].path, "order"))
            shards.append(ShardPlan(ShardName(split, index, num_shards), tuple(members)))
    return Plan(tuple(shards), tuple(sorted(capped)))
