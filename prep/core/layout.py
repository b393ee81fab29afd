"""The shard layout: which split, shard and position each example of a group goes to. Pure.

Examples are grouped by (split given by SOURCE or None, label) and ranked inside
a group by `ordering.sort_key` (see `ordering` for the order's contract). From the
group sizes alone, `make_layout` decides:

1. Cap. `max_per_class` keeps the first N of each group in rank order (before a
   stratified split; within each given split when the source names splits).
2. Split. With fractions, each class is split in the same proportions by
   largest-remainder rounding; the first ranks go to the first split named, and so on.
3. Shards. Within a split, classes are laid end to end (label order, rank order
   inside a class) and position p goes to shard ``p mod N``. So every shard holds
   ⌊n/N⌋ or ⌈n/N⌉ examples and every class's count differs by at most one
   between any two shards.

Inside a shard, records are written in `sort_key(seed, path, "order")` order, so
reading one shard does not give one class at a time. `beam_jobs.plan`
applies the layout to ranked references; tests/support/reference_plan.py is the
whole plan in memory, the tests' oracle.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

from prep.core.errors import OptionsError, PlanError
from prep.core.naming import check_split_name

DEFAULT_SPLIT = "train"
DEFAULT_SHARD_SIZE = 128 * 1024 * 1024
# What becomes of a class left with no example (empty folder, or every input rejected):
# keep it and its label id, drop it (later classes' ids move down), or stop before any shard.
EMPTY_CLASSES = ("keep", "drop", "fail")


def parse_split_fractions(text: str) -> tuple[tuple[str, Fraction], ...]:
    """Parses ``train=0.8,validation=0.1,test=0.1`` into exact fractions summing to 1.

    Raises:
        OptionsError: on a malformed item, a repeated name, a fraction outside
            (0, 1], or a sum other than 1.
    """
    items: list[tuple[str, Fraction]] = []
    seen: set[str] = set()
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
        other = next((s for s in seen if s.lower() == name.lower()), None)
        if other is not None:
            raise OptionsError(
                f"--split names {other!r} and {name!r}, which differ only in case: their shard files "
                "would overwrite each other on a file system that ignores case (macOS, Windows)"
            )
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
    empty_classes: str = "keep"  # one of EMPTY_CLASSES

    def __post_init__(self) -> None:
        if self.num_shards is not None and self.num_shards < 1:
            raise OptionsError(f"--num-shards must be >= 1, got {self.num_shards}")
        if self.shard_size < 1:
            raise OptionsError(f"--shard-size must be >= 1 byte, got {self.shard_size}")
        if self.max_per_class is not None and self.max_per_class < 1:
            raise OptionsError(f"--max-per-class must be >= 1, got {self.max_per_class}")
        if self.empty_classes not in EMPTY_CLASSES:
            raise OptionsError(f"--empty-classes must be one of {', '.join(EMPTY_CLASSES)}, got {self.empty_classes!r}")


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


def shard_count(examples: int, mean_size: float, options: PlanOptions, split: str) -> int:
    """Shards for a split: `num_shards`, or enough for `shard_size` at the mean record
    size, never more than examples."""
    if options.num_shards is not None:
        if options.num_shards > examples:
            raise PlanError(
                f"split {split!r} has {examples} example(s), fewer than --num-shards {options.num_shards}; "
                f"use --num-shards {examples} or less"
            )
        return options.num_shards
    return max(1, min(examples, math.ceil(examples * mean_size / options.shard_size)))


# (split given by the source or None, label id), or a pinned group's (None, label id, split) (`make_layout`)
Group = tuple[str | None, int] | tuple[None, int, str]


@dataclasses.dataclass(frozen=True)
class Segment:
    """Ranks [start, end) of a group go to `split`, at positions position + (rank - start)."""

    split: str
    start: int
    end: int
    position: int


@dataclasses.dataclass(frozen=True)
class SplitLayout:
    name: str
    examples: int
    num_shards: int


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each rank of each group goes: computed from group sizes alone.

    `segments[group]` covers ranks [0, kept); ranks from `kept[group]` on are
    capped. Positions in a split are laid out class by class in label order.
    """

    segments: dict[Group, tuple[Segment, ...]]
    kept: dict[Group, int]
    splits: tuple[SplitLayout, ...]

    def locate(self, group: Group, rank: int) -> tuple[str, int] | None:
        """(split, shard index) of the example of rank `rank` in `group`, or None if capped."""
        for segment in self.segments[group]:
            if segment.start <= rank < segment.end:
                split = self.split(segment.split)
                return segment.split, (segment.position + rank - segment.start) % split.num_shards
        return None

    def split(self, name: str) -> SplitLayout:
        return next(s for s in self.splits if s.name == name)


def empty_labels(present: Iterable[int], num_classes: int) -> tuple[int, ...]:
    """Label ids in [0, num_classes) that are not in `present` (the ids of the examples kept)."""
    kept = set(present)
    return tuple(label for label in range(num_classes) if label not in kept)


def label_ids(num_classes: int, empty: Sequence[int], policy: str) -> tuple[int, ...]:
    """The label id each class's records are written with, by prepared id.

    Ids are stable (the identity) unless `policy` is "drop": then the classes that
    are left keep their order and are numbered 0, 1, ... without gaps, and an
    empty class maps to -1 (it has no record to write).
    """
    if policy != "drop" or not empty:
        return tuple(range(num_classes))
    dropped, ids, next_id = set(empty), [], 0
    for label in range(num_classes):
        if label in dropped:
            ids.append(-1)
        else:
            ids.append(next_id)
            next_id += 1
    return tuple(ids)


def names(labels: Sequence[str], ids: Sequence[int]) -> str:
    """Class names for a message: 'a', 'b' and 3 more."""
    shown = ", ".join(repr(labels[i]) for i in ids[:10])
    return shown + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def check_empty_classes(labels: Sequence[str], empty: Sequence[int], policy: str) -> None:
    """Raises PlanError when classes have no example and `policy` is "fail"."""
    if policy == "fail" and empty:
        many = len(empty) > 1
        raise PlanError(
            f"{'classes' if many else 'class'} {names(labels, empty)} {'have' if many else 'has'} no "
            "example (every input rejected, or none listed) and --empty-classes is fail"
        )


def check_split_source(options: PlanOptions, source_names_splits: bool) -> None:
    """Raises PlanError if --split is given for a SOURCE that already names splits."""
    if options.split_fractions is not None and source_names_splits:
        raise PlanError("--split cannot be used when SOURCE already names splits (split folders or a split column)")


def make_layout(group_sizes: dict[Group, int], num_classes: int, options: PlanOptions, mean_size: float) -> Layout:
    """The layout for groups of the given sizes ({(given split, label): examples}).

    With --split fractions, a group may also be pinned: (None, label, split) holds
    the images of that class whose duplicate or user group was sent to `split`
    (`prep.core.groups`). Each class's split counts are then taken by largest
    remainder over all its images, and its images in no group fill each split's
    count around the pinned ones (`_free_counts`); pinned ranks follow the free
    ones of their class in the split, so the balance rule still holds.

    Raises:
        PlanError: a split would be empty, has fewer examples than shards asked
            for, or a split is given by both the source and the options.
    """
    check_split_source(options, {g[0] for g in group_sizes} != {None})
    pinned = {g: n for g, n in group_sizes.items() if len(g) == 3}
    free = {g: n for g, n in group_sizes.items() if len(g) == 2}
    kept: dict[Group, int] = {
        g: n if options.max_per_class is None else min(n, options.max_per_class) for g, n in free.items()
    }
    kept.update(pinned.items())  # a pinned group is never capped: capping would split it by rank
    ranges: dict[tuple[str, int], list[tuple[Group, int, int]]] = {}  # (split, label) -> [(group, start, end)]
    group: Group
    if options.split_fractions is not None:
        split_order = [name for name, _ in options.split_fractions]
        fractions = [f for _, f in options.split_fractions]
        pinned_counts: dict[int, dict[str, int]] = {}
        for (_, label, pin), n in pinned.items():
            pinned_counts.setdefault(label, {})[pin] = n
        for group in free:
            if group not in kept:
                continue
            start = 0
            by_split = pinned_counts.pop(group[1], {})
            for name, count in zip(split_order, _free_counts(kept[group], fractions, split_order, by_split)):
                ranges.setdefault((name, group[1]), []).append((group, start, start + count))
                start += count
        for (_, label, pin), n in sorted(pinned.items(), key=lambda item: (item[0][1], item[0][2])):
            ranges.setdefault((pin, label), []).append(((None, label, pin), 0, n))
    else:
        split_order = sorted({group[0] or DEFAULT_SPLIT for group in kept})
        for group, n in kept.items():
            ranges[(group[0] or DEFAULT_SPLIT, group[1])] = [(group, 0, n)]
    segments: dict[Group, list[Segment]] = {g: [] for g in group_sizes}
    splits = []
    for name in split_order:
        position = 0
        for label in range(num_classes):
            for group, start, end in ranges.get((name, label), ()):
                if end > start:
                    segments[group].append(Segment(name, start, end, position))
                    position += end - start
        if position == 0:
            raise PlanError(f"split {name!r} gets no examples; use fewer splits or more data")
        splits.append(SplitLayout(name, position, shard_count(position, mean_size, options, name)))
    return Layout({g: tuple(s) for g, s in segments.items()}, kept, tuple(splits))


def _free_counts(free: int, fractions: Sequence[Fraction], names: Sequence[str], pinned: dict[str, int]) -> list[int]:
    """How many of a class's `free` images (in no group) go to each split, so that with its `pinned`
    images ({split: count}) each split gets its largest-remainder share of the whole class, or as
    close as the pinned ones allow (a split holding more pinned images than its share gets no free
    one, and the excess is taken from the other splits, last split first)."""
    if not pinned:
        return largest_remainder(free, fractions)
    targets = largest_remainder(free + sum(pinned.values()), fractions)
    counts = [max(0, t - pinned.get(name, 0)) for t, name in zip(targets, names)]
    excess = sum(counts) - free
    for i in reversed(range(len(counts))):
        take = min(excess, counts[i])
        counts[i] -= take
        excess -= take
    return counts
