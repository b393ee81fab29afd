"""The reference planner: the whole plan in memory, from the same `make_layout` and
`sort_key` as the pipeline. The tests' oracle for `beam_jobs.plan`; not product code."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from prep.core.layout import Group, PlanOptions, make_layout
from prep.core.naming import ShardName
from prep.core.ordering import sort_key


@dataclasses.dataclass(frozen=True, slots=True)
class Example:
    """What the planner needs to know of one checked example."""

    path: str  # relative to SOURCE, '/'-separated
    label: int
    split: str | None  # from split folders or a split column; None if not given
    size: int  # bytes of its serialized record


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


def make_plan(examples: Sequence[Example], num_classes: int, options: PlanOptions) -> Plan:
    """Plans splits and balanced shards for `examples` (see `prep.core.layout`).

    Raises:
        PlanError: as `make_layout`.
    """
    groups: dict[Group, list[int]] = {}
    keys = [sort_key(options.seed, e.path) for e in examples]
    for index in sorted(range(len(examples)), key=lambda i: (keys[i], examples[i].path)):
        groups.setdefault((examples[index].split, examples[index].label), []).append(index)
    mean_size = sum(e.size for e in examples) / max(1, len(examples))
    layout = make_layout({g: len(m) for g, m in groups.items()}, num_classes, options, mean_size)
    members: dict[tuple[str, int], list[int]] = {}
    capped = []
    for group, indices in groups.items():
        for rank, index in enumerate(indices):
            where = layout.locate(group, rank)
            if where is None:
                capped.append(index)
            else:
                members.setdefault(where, []).append(index)
    shards = []
    for split in layout.splits:
        for i in range(split.num_shards):
            ordered = sorted(
                members.get((split.name, i), []), key=lambda m: sort_key(options.seed, examples[m].path, "order")
            )
            shards.append(ShardPlan(ShardName(split.name, i, split.num_shards), tuple(ordered)))
    return Plan(tuple(shards), tuple(sorted(capped)))
