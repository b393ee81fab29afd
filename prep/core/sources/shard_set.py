"""A set of WebDataset shards as one SOURCE: which shard gives which split, and what the labels are named.

Both listings use these rules, so that they stage the same bytes: the driver's (`webdataset.list_webdataset`,
for `--resume` and tests) and the workers' (`beam_jobs/list_shards.py`, a listing task per shard, the driver
holding only the shard names, `ShardSource`). A shard under a split folder (`train/`, `validation/`, ...)
gives that split. Integer labels without `--classes` are class names in numeric order; with `--classes`
that names none of them, they index it (`ClassNames.relabel`), and one past its end is `unknown_label`.
"""

from __future__ import annotations

import collections
import re
import typing
from collections.abc import Iterable

from prep.core.errors import SourceError
from prep.core.listing import KNOWN_SPLITS

_INT = re.compile(r"-?\d+")


class ShardTask(typing.NamedTuple):
    """One listing task: a shard (relative to SOURCE) and the split its folder names."""

    task: int
    shard: str
    split: str | None


class ShardSource(typing.NamedTuple):
    """WebDataset shards to be listed on workers, a task each: all the driver holds is their names."""

    source: str
    tasks: tuple[ShardTask, ...]
    label_key: str | None


class ClassNames(typing.NamedTuple):
    """The class names of the labels found, and how labels become them."""

    names: tuple[str, ...]  # the found classes (after relabel), in class order
    relabel: dict[str, str] | None  # integer label -> its --classes name, when the labels index --classes
    past_end: frozenset[str]  # integer labels past the end of --classes (with relabel)

    def past_end_detail(self, label: str, classes: tuple[str, ...]) -> str:
        return f"label {int(label)} is past the {len(classes)} names of --classes"


def visible(name: str) -> bool:
    return not any(p.startswith(".") for p in name.split("/"))


def shard_tasks(shards: Iterable[str], layout: str) -> tuple[ShardTask, ...]:
    """The visible shards in name order, each with its split (`layout` auto: when every top folder is a
    known split name)."""
    shards = sorted(s for s in shards if visible(s))
    tops = {s.split("/")[0] for s in shards if "/" in s}
    by_split = layout == "splits" or (layout == "auto" and bool(tops) and tops <= KNOWN_SPLITS)
    return tuple(ShardTask(i, s, s.split("/")[0] if by_split and "/" in s else None) for i, s in enumerate(shards))


def class_names(found: Iterable[str], classes: tuple[str, ...] | None) -> ClassNames:
    """The names of the labels `found` (every label of a listed sample) under `--classes`."""
    found = set(found)
    relabel, past_end = None, frozenset[str]()
    ints = bool(found) and all(_INT.fullmatch(n) for n in found)
    if classes is not None and ints and not found & set(classes):
        relabel = {n: classes[int(n)] for n in found if 0 <= int(n) < len(classes)}
        past_end = frozenset(found - set(relabel))
        found = set(relabel.values())
        ints = bool(found) and all(_INT.fullmatch(n) for n in found)
    names = tuple(sorted(found, key=int)) if ints else tuple(sorted(found))
    return ClassNames(names, relabel, past_end)


def no_samples(source: str, shards: int, reasons: collections.Counter[str]) -> SourceError:
    """The error when no sample of any shard has an image and a label."""
    return SourceError(
        f"no sample of the {shards} shard(s) under {source} has an image and a label ("
        + (", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) or "no samples")
        + "); see --label-key"
    )
