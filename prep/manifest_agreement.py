"""`prep verify`'s comparison of what it read with what the manifest records; reads only rejects.jsonl.

- Per shard (`compare_shard`): the scan's issues, size and sha256, records, and the
  counts per class, boxes per class and records without labels or objects.
- Per detection split (`max_boxes_issues`): `max_boxes` against the most objects a record holds.
- `rejects.jsonl` (`check_rejects`): its lines against the manifest's input accounting.

Each check returns issues ``(file, record index or None, message)``, as `prep.sidecars` does.
"""

from __future__ import annotations

import collections
import json

from prep.core import storage
from prep.core.manifest import FILENAME, NO_STRATUM, REJECTS, Manifest
from prep.core.manifest_parts import ShardInfo, SplitInfo
from prep.shard_checks import ShardScan
from prep.sidecars import Issue


def compare_shard(file: str, entry: ShardInfo, scan: ShardScan, exact: bool = True) -> list[Issue]:
    """A shard as read against its manifest entry. `exact`: the entry's count of records of no stratum must equal
    the records read without labels or objects (else: be at most that)."""
    issues: list[Issue] = [(file, index, message) for index, message in scan.issues]
    if scan.size != entry.bytes:
        issues.append((file, None, f"size is {scan.size} bytes, the manifest says {entry.bytes}"))
    if scan.sha256 != entry.sha256:
        issues.append((file, None, f"sha256 is {scan.sha256}, the manifest says {entry.sha256}"))
    if not scan.complete:
        return issues  # the counts of a shard read only in part say nothing more
    if scan.records != entry.examples:
        issues.append((file, None, f"holds {scan.records} records, the manifest says {entry.examples}"))
    tally = scan.tally
    if tally is None:
        issues += _count_issues(file, "records per class", scan.class_counts, entry.held)
        return issues
    if tally.classes_read:
        issues += _count_issues(file, "images containing each class", scan.class_counts, entry.held)
    if entry.box_counts is not None:
        issues += _count_issues(file, "boxes per class", dict(tally.boxes), entry.box_counts)
    strata = entry.stratum_counts
    none = 0 if strata is None else strata.get(NO_STRATUM, 0)
    # An image without labels is of no stratum; one whose boxes were all dropped keeps its class's stratum.
    if strata is not None and (none != tally.unlabelled if exact else none > tally.unlabelled):
        what = "objects" if entry.box_counts is not None else "labels"
        issues.append(
            (
                file,
                None,
                f"holds {tally.unlabelled} records without {what}, the manifest's "
                f"stratum_counts[{NO_STRATUM!r}] says {none}",
            )
        )
    return issues


def _count_issues(file: str, what: str, found: dict[str, int], claimed: dict[str, int]) -> list[Issue]:
    names = sorted(set(found) | set(claimed))
    diffs = [
        f"{name} {found.get(name, 0)} (manifest {claimed.get(name, 0)})"
        for name in names
        if found.get(name, 0) != claimed.get(name, 0)
    ]
    return [(file, None, f"{what} differ from the manifest: {', '.join(diffs)}")] if diffs else []


def max_boxes_issues(name: str, info: SplitInfo, read: list[ShardScan]) -> list[Issue]:
    """A detection split's max_boxes against the largest object count its records hold."""
    most = max(s.tally.max_boxes for s in read if s.tally is not None)  # a detection scan always has one
    if info.max_boxes is None or most == info.max_boxes:
        return []
    return [(FILENAME, None, f"split {name}: max_boxes is {info.max_boxes}, its records hold at most {most} objects")]


def check_rejects(output: str, manifest: Manifest) -> list[Issue]:
    """rejects.jsonl has a line per rejected input and, for detection, a box line (with a `box` key) per
    box dropped or clipped, except the boxes of rejected images (counted `image_rejected`, not listed)."""
    path = storage.join(output, REJECTS)
    if not storage.is_file(path):
        return []  # optional: it explains the accounting, the shards do not depend on it
    with storage.open_read(path) as f:
        lines = [line for line in f if line.strip()]
    boxes = manifest.inputs.boxes
    if boxes is None:  # no box lines: count lines without parsing them
        images, dropped, clipped = len(lines), 0, 0
    else:
        kinds: collections.Counter[str | None] = collections.Counter()
        for number, line in enumerate(lines, 1):
            try:
                entry = json.loads(line)
            except ValueError:
                return [(REJECTS, None, f"line {number} is not JSON")]
            kinds["image" if not isinstance(entry, dict) or "box" not in entry else entry.get("action")] += 1
        images, dropped, clipped = kinds["image"], kinds["dropped"], kinds["clipped"]
    issues: list[Issue] = []
    if images != manifest.inputs.rejected:
        what = "lines" if boxes is None else "image lines"
        issues.append((REJECTS, None, f"has {images} {what}, the manifest counts {manifest.inputs.rejected} rejects"))
    if boxes is not None:
        listed = boxes.dropped - boxes.dropped_by_reason.get("image_rejected", 0)
        if (dropped, clipped) != (listed, boxes.clipped):
            issues.append(
                (
                    REJECTS,
                    None,
                    f"has {dropped} dropped and {clipped} clipped box lines, the "
                    f"manifest counts {listed} dropped (besides the boxes of "
                    f"rejected images) and {boxes.clipped} clipped",
                )
            )
    return issues
