"""Whether a manifest agrees with itself, and the balance rule on what shards hold. Pure.

`contradictions` is what `prep verify` reports about a well-shaped manifest before it
reads a shard: names, indexes and counts, per-split sums, `labels` against
`class_counts`, the input accounting, the empty classes. `unbalanced` is the balance rule the planner
guarantees: every shard of a split holds ⌊n/N⌋ or ⌈n/N⌉ of its n records, and the
same for each class's records; for counts summing to n this is exactly "any two
shards differ by at most one". Multi-label and detection apply it to strata
(`strata_unbalanced`), segmentation to records only.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from prep.core import formats
from prep.core.manifest import Manifest
from prep.core.naming import ShardName

STRATIFIED = ("multilabel", "detection")  # tasks whose shards are balanced per stratum (stratum_counts)


def sum_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    total: collections.Counter[str] = collections.Counter()
    for c in counts:
        total.update(c)
    return dict(total)


def require_shard_counts(manifest: Manifest) -> None:
    """Refuses a version-2 manifest read without its sidecar, whose shards' counts are None rather than empty.

    Raises:
        ValueError: (an internal error) the counts were not read: `Manifest.load(..., shard_counts=True)`.
    """
    for _, shard in manifest.shards():
        shard.held  # noqa: B018  (raises, naming the shard, when its counts were not read)


def contradictions(manifest: Manifest) -> list[str]:
    """Where a well-shaped manifest contradicts itself, one message each."""
    require_shard_counts(manifest)
    labels = manifest.labels
    messages = []
    suffix = formats.get(manifest.file_format).suffix
    if len(set(labels)) != len(labels):
        messages.append("labels repeat a class name")
    for split, info in manifest.splits.items():
        shards = info.shards
        if info.num_shards != len(shards):
            messages.append(f"split {split}: num_shards is {info.num_shards} but {len(shards)} shards are listed")
        for i, shard in enumerate(shards):
            name = ShardName(split, i, len(shards), suffix).filename
            if (shard.file, shard.index) != (name, i):
                messages.append(
                    f"split {split}: shard {i} of {len(shards)} must be {name} with index {i}, "
                    f"not {shard.file} with index {shard.index}"
                )
            in_classes = sum(shard.held.values())
            # Only single-label records: multilabel, detection and segmentation count images containing a class.
            if manifest.task == "classification" and in_classes != shard.examples:
                messages.append(f"{shard.file}: examples is {shard.examples} but its class_counts sum to {in_classes}")
            if manifest.task in STRATIFIED:
                in_strata = sum((shard.stratum_counts or {}).values())
                if in_strata != shard.examples:
                    messages.append(
                        f"{shard.file}: examples is {shard.examples} but its stratum_counts sum to {in_strata}"
                    )
        for key in ("examples", "bytes"):
            summed = sum(getattr(s, key) for s in shards)
            if getattr(info, key) != summed:
                messages.append(f"split {split}: {key} is {getattr(info, key)} but its shards sum to {summed}")
        summed = sum_counts(s.class_counts or {} for s in shards)
        for name in sorted(set(summed) | set(info.class_counts)):
            claimed = info.class_counts.get(name, 0)
            if claimed != summed.get(name, 0):
                messages.append(
                    f"split {split}: class_counts[{name!r}] is {claimed} but its shards sum to {summed.get(name, 0)}"
                )
        unknown = sorted(set(info.class_counts) - set(labels))
        if unknown:
            messages.append(f"split {split}: class_counts name classes not in labels: {', '.join(map(repr, unknown))}")
    inputs = manifest.inputs
    if inputs.written != manifest.examples:
        messages.append(f"inputs.written is {inputs.written} but the splits hold {manifest.examples}")
    if not inputs.reconciles:
        messages.append("inputs.found is not written + rejected + capped")
    return messages + _empty_class_messages(manifest)


def _empty_class_messages(manifest: Manifest) -> list[str]:
    """Where `inputs.empty_classes` contradicts the rest: a class named there must hold no
    record, and be in `labels` unless `--empty-classes drop` took it out."""
    messages = []
    dropped = manifest.options.get("empty_classes") == "drop"
    labels = set(manifest.labels)
    for name in manifest.inputs.empty_classes or ():
        held = sum(info.class_counts.get(name, 0) for info in manifest.splits.values())
        if held:
            messages.append(f"inputs.empty_classes names {name!r}, which holds {held} record(s)")
        if dropped and name in labels:
            messages.append(
                f"inputs.empty_classes names {name!r} as dropped (--empty-classes drop), but it is in labels"
            )
        elif not dropped and name not in labels:
            messages.append(f"inputs.empty_classes names {name!r}, which is not in labels")
    return messages


def strata_unbalanced(manifest: Manifest) -> list[tuple[str, str]]:
    """The balance rule of multi-label and detection: every shard of a split holds ⌊n/N⌋ or ⌈n/N⌉
    of its n records and of each stratum's (`stratum_counts`: an image's rarest class, or
    NO_STRATUM); classes other than an image's stratum follow, with no exact rule. Segmentation:
    records only. (file, message) for each shard that breaks it."""
    if manifest.task == "classification":
        return []
    require_shard_counts(manifest)
    problems = []
    for split, info in manifest.splits.items():
        files = [s.file for s in info.shards]
        if manifest.task in STRATIFIED:
            found = unbalanced(split, files, [dict(s.stratum_counts or {}) for s in info.shards])
            problems += [(f, m.replace("of class ", "of stratum ")) for f, m in found]
        else:  # one group: the rule on its records is the rule on records
            found = unbalanced(split, files, [{"": s.examples} for s in info.shards])
            problems += [(f, m) for f, m in found if "of class" not in m]
    return problems


def unbalanced(split: str, files: list[str], counts: list[dict[str, int]]) -> list[tuple[str, str]]:
    """(file, message) for each shard of one split that breaks the balance rule, given what
    each holds per class (see the module docstring). A class a shard does not name holds 0 there.

    Sparse: each class is checked on the shards that hold it; the others hold 0, which breaks
    the rule only when ⌊n/N⌋ > 0. Work grows with the non-zero counts, not shards x classes.
    """
    problems = []
    shards = len(files)

    def message(value: int, what: str, n: int) -> str:
        low, high = n // shards, -(-n // shards)
        allowed = f"{low}" if low == high else f"{low} or {high}"
        return (
            f"unbalanced: holds {value} {what}; split {split} has {n} {what} in {shards} shards, "
            f"so each must hold {allowed}"
        )

    records = [sum(c.values()) for c in counts]
    n = sum(records)
    if shards:
        low, high = n // shards, -(-n // shards)
        problems += [(f, message(v, "records", n)) for f, v in zip(files, records) if v not in (low, high)]
    held: dict[str, list[tuple[int, int]]] = {}  # class -> [(shard position, count > 0)]
    for i, c in enumerate(counts):
        for name, v in c.items():
            if v:
                held.setdefault(name, []).append((i, v))
    for name in sorted(held):
        pairs = held[name]
        n = sum(v for _, v in pairs)
        low, high = n // shards, -(-n // shards)
        bad = [(i, v) for i, v in pairs if v not in (low, high)]
        if low > 0 and len(pairs) < shards:  # the shards that do not name the class hold 0 < low
            present = {i for i, _ in pairs}
            bad += [(i, 0) for i in range(shards) if i not in present]
        problems += [(files[i], message(v, f"of class {name!r}", n)) for i, v in sorted(bad)]
    return problems
