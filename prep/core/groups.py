"""Grouping decisions: which split a duplicate or user group goes to, and what its policies reject. Pure.

Groups come from two places:
- duplicate groups: connected components of exact (same sha256) and near
  (`content_keys.distance` <= NEAR_DISTANCE) pairs, from the bounded union-find
  (beam_jobs/dedupe.py finds them during the conversion);
- user groups, `--group-pattern REGEX`: images whose paths give the same match
  (the regex's first group, or the whole match) belong together, e.g. a patient
  or video id; or `--group-by COLUMN`: rows of the label file with the same value
  in that column. Those need no comparison: the key alone decides.

When the conversion makes the splits (`--split` fractions), a group is *pinned*
to one split: `pin_split` maps the group's unit (its user key, or the first
member's path) through a seeded hash onto the cumulative fractions, and the
planner fills each class's split counts with the images in no group around the
pinned ones (`prep.core.layout.make_layout`), so splits keep their fractions per
class as closely as the groups allow. When SOURCE names the splits, a duplicate
group across them is leakage: reported, and removed from the evaluation splits
with `--cross-split remove`.

Policies on a duplicate group (`decide`), members taken in path order:
- `--conflicts reject-exact` (default): a member whose exact duplicates (same
  stored sha256) carry another label (single-label classification) is rejected
  `label_conflict`, naming those duplicates; a conflict only near matches make is
  reported (the line's `conflict`, no member rejected for it), not rejected: false
  near pairs grow as n^2 (docs/leakage.md), false exact pairs need a sha256 collision;
- `--conflicts reject`: members with different labels are all rejected
  `label_conflict`, each naming the others, whether exact or near duplicates;
- `--conflicts keep`: labels that differ are only reported;
- `--duplicates drop`: the first member not rejected above is kept, the others
  rejected `duplicate_of` with its path;
- `--cross-split remove`: members not rejected above outside their first split
  (train first, then by name) rejected `cross_split_duplicate`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import typing
from fractions import Fraction
from typing import Any

from prep.core.errors import OptionsError
from prep.core.listing import Reject

DUPLICATES = ("keep", "drop", "off")
CONFLICTS = ("reject-exact", "reject", "keep")
CONFLICTS_DEFAULT = CONFLICTS[0]
CROSS_SPLIT = ("report", "remove")
NEAR = ("on", "off")  # --near: look for near duplicates too, or exact ones only
TRAIN = "train"
NAMED = 10  # members named in one reject's detail at most


@dataclasses.dataclass(frozen=True)
class DedupeOptions:
    """How duplicates and user groups are found and treated (see the module docstring)."""

    duplicates: str = "keep"  # off: no content keys, no duplicate groups (user groups still hold)
    near: str = "on"  # off: exact duplicates only (same stored bytes), no near scan: O(n) (docs/leakage.md)
    conflicts: str = CONFLICTS_DEFAULT
    cross_split: str = "report"
    group_pattern: str | None = None
    group_by: str | None = None  # a column of the label file (ConvertConfig checks there is one)

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("duplicates", self.duplicates, DUPLICATES),
            ("conflicts", self.conflicts, CONFLICTS),
            ("cross-split", self.cross_split, CROSS_SPLIT),
            ("near", self.near, NEAR),
        ):
            if value not in allowed:
                raise OptionsError(f"--{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.group_pattern is not None:
            try:
                re.compile(self.group_pattern)
            except re.error as exc:
                raise OptionsError(
                    f"--group-pattern {self.group_pattern!r} is not a regular expression: {exc}"
                ) from None
        if self.group_by is not None and not self.group_by.strip():
            raise OptionsError("--group-by is empty; leave the option out instead")
        if self.group_by is not None and self.group_pattern is not None:
            raise OptionsError(
                "--group-by (a label-file column) and --group-pattern (a path pattern) both name the "
                "user groups: pass one of them"
            )
        if self.duplicates == "off":
            changed = [
                f"--{n}"
                for n, v, d in (
                    ("conflicts", self.conflicts, CONFLICTS_DEFAULT),
                    ("cross-split", self.cross_split, "report"),
                    ("near", self.near, "on"),
                )
                if v != d
            ]
            if changed:
                raise OptionsError(f"{changed[0]} acts on duplicate groups: it cannot be used with --duplicates off")

    @property
    def user_groups(self) -> bool:
        """Whether the user names groups (--group-pattern or --group-by)."""
        return self.group_pattern is not None or self.group_by is not None

    @property
    def keys(self) -> bool:
        """Whether content keys are computed (and duplicate groups made)."""
        return self.duplicates != "off"

    def manifest_options(self) -> dict[str, str]:
        """Only what differs from the defaults, so that earlier manifests stay as they were."""
        out: dict[str, str] = {}
        for name, value, default in (
            ("duplicates", self.duplicates, "keep"),
            ("conflicts", self.conflicts, CONFLICTS_DEFAULT),
            ("cross_split", self.cross_split, "report"),
            ("near", self.near, "on"),
            ("group_pattern", self.group_pattern, None),
            ("group_by", self.group_by, None),
        ):
            if value is not None and value != default:  # None is a default
                out[name] = value
        return out


def user_group(path: str, pattern: str | None) -> str | None:
    """The user group of `path`: the pattern's first group (or whole match), searched in the path; None if no
    match or no pattern."""
    if pattern is None:
        return None
    match = re.search(pattern, path)
    if match is None:
        return None
    return match.group(1) if match.re.groups else match.group(0)


def pin_split(seed: int, unit: str, fractions: tuple[tuple[str, Fraction], ...]) -> str:
    """The split a group goes to: a seeded hash of its unit against the cumulative fractions."""
    u = Fraction(
        int.from_bytes(hashlib.sha256(f"{seed}\0group\0{unit}".encode("utf-8", "surrogateescape")).digest()[:8], "big"),
        1 << 64,
    )
    total = Fraction(0)
    for name, f in fractions:
        total += f
        if u < total:
            return name
    return fractions[-1][0]


def split_order(split: str) -> tuple[bool, str]:
    """Which split of a group counts as first (kept by --cross-split remove): train, then by name."""
    return (split != TRAIN, split)


class Member(typing.NamedTuple):
    """One image of a duplicate group, as the decision needs it."""

    item: int  # its id in the union-find (beam_jobs/dedupe.item_id)
    path: str
    label: int
    label_name: str
    split: str  # given by SOURCE, "" if none
    sha256: str
    user: str  # its user group key, "" if none


class Decision(typing.NamedTuple):
    """What becomes of one member: rejected (a Reject) or kept, and the split its group is pinned to."""

    item: int
    reject: Reject | None
    pin: str  # "" when no split is made by the conversion
    movable: str = ""  # the group's first path when no user group pins it: `balance_pins` picks its split


def _named(members: list[Member], but: Member) -> str:
    """The first NAMED members but `but`, named, and how many more: only the first NAMED + 1 are looked
    at, so a group of m members costs O(m), not O(m^2) (groups reach union_find's 1,000)."""
    head = [m for m in members[: NAMED + 1] if m is not but][:NAMED]
    more = len(members) - 1 - len(head)
    text = ", ".join(f"{m.path} ({m.label_name})" for m in head)
    return text + (f" and {more} more" if more > 0 else "")


def merge_units(links: typing.Iterable[typing.Iterable[str]]) -> dict[str, str]:
    """{user group: the unit it is pinned by} when duplicate groups link user groups.

    Each link is the user groups of one duplicate group's members; user groups linked,
    directly or through others, form one unit named by its least key, so that all their
    images go to one split. Only user groups that are in some duplicate group appear.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for link in links:
        keys = sorted(set(link))
        for k in keys:
            parent.setdefault(k, k)
        for k in keys[1:]:
            a, b = find(keys[0]), find(k)
            if a != b:
                parent[max(a, b)] = min(a, b)  # the root is the least key of its set
    return {k: find(k) for k in parent}


def decide(
    members: typing.Iterable[Member],
    options: DedupeOptions,
    seed: int,
    fractions: tuple[tuple[str, Fraction], ...] | None,
    single_label: bool,
    unit: str | None = None,
    unit_split: str | None = None,
) -> tuple[list[Decision], dict[str, Any]]:
    """The decisions for one duplicate group, and its line of duplicates.jsonl.

    Args:
        members: the group (two or more images, any order).
        options: the policies.
        seed: the conversion's seed (pins).
        fractions: --split fractions, or None when the conversion makes no split.
        single_label: labels can conflict only in single-label classification (other tasks' images carry
            annotations of their own; their `label` is the planner's stratum).
        unit: what the group is pinned by, when its members are in user groups (`merge_units`); None: the
            first member's user group, else its path.
        unit_split: the split `balance_pins` chose for `unit`; None: a seeded hash of it picks.
    """
    members = sorted(members, key=lambda m: (m.path, m.item))
    first = members[0]
    rejects: dict[int, Reject] = {}
    conflict = single_label and len({m.label for m in members}) > 1
    splits = sorted({m.split for m in members}, key=split_order)
    if conflict and options.conflicts == "reject":
        for m in members:
            rejects[m.item] = Reject(
                m.path, "label_conflict", f"a duplicate of {_named(members, m)} with another label"
            )
    elif conflict and options.conflicts == "reject-exact":
        same: dict[str, list[Member]] = {}
        for m in members:
            same.setdefault(m.sha256, []).append(m)
        for copies in same.values():
            if len({m.label for m in copies}) > 1:
                for m in copies:
                    rejects[m.item] = Reject(
                        m.path, "label_conflict", f"a duplicate of {_named(copies, m)} with another label"
                    )
    rest = [m for m in members if m.item not in rejects]
    rest_splits = sorted({m.split for m in rest}, key=split_order)
    if rest and options.duplicates == "drop":
        for m in rest[1:]:
            rejects[m.item] = Reject(m.path, "duplicate_of", rest[0].path)
    elif options.cross_split == "remove" and len(rest_splits) > 1:
        kept = next(m for m in rest if m.split == rest_splits[0])
        for m in rest:
            if m.split != rest_splits[0]:
                rejects[m.item] = Reject(
                    m.path, "cross_split_duplicate", f"a duplicate of {kept.path} in split {rest_splits[0]!r}"
                )
    unit = unit or next((m.user for m in members if m.user), None)
    pin = (unit_split or pin_split(seed, unit or first.path, fractions)) if fractions else ""
    movable = first.path if fractions and unit is None else ""
    decisions = [Decision(m.item, rejects.get(m.item), pin, movable) for m in members]
    line = {
        "kind": "exact" if len({m.sha256 for m in members}) == 1 else "near",
        "conflict": conflict,
        "cross_split": len(splits) > 1,
        "members": [
            {
                "path": m.path,
                "label": m.label_name,
                "split": m.split or pin or None,
                "sha256": m.sha256,
                "rejected": rejects[m.item].reason if m.item in rejects else None,
            }
            for m in members
        ],
    }
    return decisions, line


def balance_pins(
    groups: typing.Iterable[tuple[str, dict[str, int]]], fractions: tuple[tuple[str, Fraction], ...]
) -> dict[str, str]:
    """The split of each group: {unit: split}, for duplicate groups no user group pins (by first path)
    and for user groups (by their unit, `merge_units`).

    A seeded hash alone sends a large group wherever it falls (a hundred blank frames to validation);
    here the largest groups go first, each to the split furthest below its fraction of the pinned
    images of the group's labels, so the pinned images of each label are split close to the fractions
    and the planner's free images can make up the rest exactly. Exact arithmetic and a fixed order:
    the same groups give the same splits on any runner.

    Args:
        groups: (unit, {label: members kept}) per group; groups with no member kept are skipped.
        fractions: the --split fractions.
    """
    names = [name for name, _ in fractions]
    total: dict[str, int] = {}
    pinned: dict[str, dict[str, int]] = {name: {} for name in names}
    out = {}
    for unit, labels in sorted(groups, key=lambda g: (-sum(g[1].values()), g[0])):
        if not sum(labels.values()):
            continue

        def lack(i: int, labels: dict[str, int] = labels) -> Fraction:  # this group's labels, bound now
            f, have = fractions[i][1], pinned[names[i]]
            return sum((n * (f * (total.get(lab, 0) + n) - have.get(lab, 0)) for lab, n in labels.items()), Fraction(0))

        best = max(range(len(names)), key=lambda i: (lack(i), -i))
        out[unit] = names[best]
        for lab, n in labels.items():
            total[lab] = total.get(lab, 0) + n
            pinned[names[best]][lab] = pinned[names[best]].get(lab, 0) + n
    return out


def summarize(lines: typing.Iterable[dict[str, Any]], refused: int = 0, skipped: int = 0) -> dict[str, int]:
    """The counts of duplicates.jsonl's header (and the CLI's warning) from its group lines."""
    out = {
        "groups": 0,
        "images": 0,
        "exact_groups": 0,
        "near_groups": 0,
        "conflict_groups": 0,
        "cross_split_groups": 0,
        "cross_split_images": 0,
        "rejected": 0,
        "refused_unions": refused,
        "skipped_comparisons": skipped,
    }
    for line in lines:
        members = line["members"]
        out["groups"] += 1
        out["images"] += len(members)
        out["exact_groups" if line["kind"] == "exact" else "near_groups"] += 1
        out["conflict_groups"] += bool(line["conflict"])
        if line["cross_split"]:
            out["cross_split_groups"] += 1
            first = min((m["split"] or "" for m in members), key=split_order)
            out["cross_split_images"] += sum((m["split"] or "") != first for m in members)
        out["rejected"] += sum(m["rejected"] is not None for m in members)
    return out
