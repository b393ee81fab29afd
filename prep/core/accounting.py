"""The accounting of a conversion: every input found is written, rejected or capped.

`tally` builds the manifest's `inputs` and holds the invariant
``found = written + rejected + capped``; `check_outcome` refuses a conversion that
wrote nothing, or emptied a split SOURCE names, with the reasons counted.
`settle_empty_classes` applies `--empty-classes` to the manifest's labels and counts.
`rejects_lines` streams rejects.jsonl, sorted by path: rejects come as sorted runs (`merged_rejects`),
some read from work files, so that a conversion rejecting many inputs never holds them all.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence

from prep.core.errors import PlanError
from prep.core.listing import Reject
from prep.core.manifest_parts import BoxAccounting, GroupCounts, Inputs, ShardInfo
from prep.core.naming import ShardName
from prep.core.task_inputs import BoxNote, BoxTally


def tally(
    found: int,
    written: int,
    converted: int,
    rejected_by_reason: dict[str, int],
    capped_by_class: dict[str, int],
    boxes: BoxTally | None = None,
) -> Inputs:
    """The manifest's `inputs` for the counts of a conversion (`check_outcome` checks them);
    `boxes`, detection's `task_inputs.BoxTally`, becomes inputs.boxes."""
    capped = sum(capped_by_class.values())
    box_accounting = None
    if boxes is not None:
        dropped = dict(boxes.dropped)
        box_accounting = BoxAccounting(
            read=boxes.read,
            written=boxes.written,
            dropped=sum(dropped.values()),
            clipped=boxes.clipped,
            dropped_by_reason=dict(sorted(dropped.items())),
        )
    return Inputs(
        found=found,
        written=written,
        rejected=sum(rejected_by_reason.values()),
        capped=capped,
        converted=converted,
        rejected_by_reason=dict(sorted(rejected_by_reason.items())),
        capped_by_class=dict(capped_by_class),
        boxes=box_accounting,
    )


def check_outcome(
    inputs: Inputs, written_splits: Iterable[str], source_splits: Iterable[str], rejects_path: str
) -> None:
    """Refuses a conversion that wrote no example, or none in a split that SOURCE names.

    Raises:
        PlanError: naming the reject reasons, or the splits left empty, and `rejects_path`.
        RuntimeError: the counts do not reconcile (a bug: an input went missing).
    """
    if not inputs.written:
        reasons = ", ".join(f"{k} {v}" for k, v in (inputs.rejected_by_reason or {}).items())
        raise PlanError(f"no input could be converted ({reasons}); see {rejects_path}")
    emptied = sorted(set(source_splits) - set(written_splits))
    if emptied:
        many = len(emptied) > 1
        raise PlanError(
            f"split{'s' if many else ''} {', '.join(map(repr, emptied))} "
            f"{'have' if many else 'has'} no example left: every input listed in "
            f"{'them' if many else 'it'} was rejected; see {rejects_path}"
        )
    if not inputs.reconciles or (inputs.boxes is not None and not inputs.boxes.reconciles):
        raise RuntimeError(f"internal error: counts do not reconcile: {inputs.to_json()}")


def check_group_rejects(groups: GroupCounts, rejected_by_reason: dict[str, int]) -> None:
    """The group policies' rejects (duplicates.jsonl's count) are those rejects.jsonl gives their reasons.

    Raises:
        RuntimeError: they differ (a bug: a decision was lost or counted twice).
    """
    listed = sum(rejected_by_reason.get(reason, 0) for reason in GroupCounts.REASONS)
    if listed != groups.rejected:
        raise RuntimeError(
            f"internal error: the duplicate groups reject {groups.rejected} inputs, rejects.jsonl lists {listed}"
        )


def reject_order(r: Reject) -> tuple[str, str, str]:
    """rejects.jsonl's order: by path, then reason (the detail only breaks ties, so any runner agrees)."""
    return r.path, r.reason, r.detail


def sort_rejects(rejects: Iterable[Reject]) -> list[Reject]:
    return sorted(rejects, key=reject_order)


def merged_rejects(runs: Iterable[Iterable[Reject]]) -> Iterator[Reject]:
    """The rejects of several runs, each in `reject_order`, as one run in that order, a line of each at a time."""
    return heapq.merge(*runs, key=reject_order)


def with_box_notes(rejects: Iterable[Reject], notes: Iterable[BoxNote]) -> Iterator[Reject | BoxNote]:
    """Image rejects (in `reject_order`) and box notes (lines with a "box" field) as one stream, by path, an
    image's line before its boxes, boxes by index."""
    keyed_notes = sorted((((n.path, n.box, n.reason), n) for n in notes), key=lambda item: item[0])
    merged: Iterator[tuple[tuple[str, int, str], Reject | BoxNote]] = heapq.merge(
        (((r.path, -1, r.reason), r) for r in rejects), keyed_notes, key=lambda item: item[0]
    )
    return (line for _, line in merged)


def rejects_lines(rejects: Iterable[Reject | BoxNote], per_piece: int = 4096) -> Iterator[bytes]:
    """rejects.jsonl in pieces: one sorted-key JSON object per reject, in the order given."""
    lines = (json.dumps(r.to_json(), sort_keys=True) + "\n" for r in rejects)
    while piece := "".join(itertools.islice(lines, per_piece)):
        yield piece.encode()


def settle_empty_classes(
    labels: Sequence[str], written: list[tuple[ShardName, ShardInfo]], inputs: Inputs, policy: str
) -> tuple[tuple[str, ...], list[tuple[ShardName, ShardInfo]], Inputs]:
    """The manifest's labels, shards and inputs once classes with no example written are settled.

    Such classes are named in `inputs.empty_classes` (only when there are some, so that the
    manifest of a dataset without them is as it always was). With `policy` "drop" they also
    leave `labels` and every class count: the records were written with the ids that follow
    from that (`layout.label_ids`).
    """
    totals: collections.Counter[str] = collections.Counter()
    for _, shard in written:
        totals.update(shard.class_counts)
    empty = tuple(name for name in labels if not totals[name])
    if not empty:
        return tuple(labels), written, inputs
    inputs = dataclasses.replace(inputs, empty_classes=empty)
    if policy != "drop":
        return tuple(labels), written, inputs
    gone = set(empty)
    written = [
        (name, dataclasses.replace(shard, class_counts={k: v for k, v in shard.held.items() if k not in gone}))
        for name, shard in written
    ]
    inputs = dataclasses.replace(
        inputs, capped_by_class={k: v for k, v in (inputs.capped_by_class or {}).items() if k not in gone}
    )
    return tuple(name for name in labels if name not in gone), written, inputs
