"""`prep inspect`: what a dataset holds, from its manifest; and sample records from its shards.

`summary` is a pure function of the manifest (the `--json` document, see
docs/verify.md); `samples` reads records from the shards for the contact sheet
(`prep.pictures`). Neither imports TensorFlow.

For multi-label, detection and segmentation datasets a class's count is the images
containing it (the manifest's class_counts), and the contact sheet's row of a class shows
records containing it, so one record may appear in several rows.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any

from prep.core import formats, storage
from prep.core.manifest import Manifest
from prep.core.schema import ImageRecord
from prep.core.task_record import TaskRecord

JSON_VERSION = 1


def _spread(values: list[int]) -> dict[str, int]:
    return {"min": min(values, default=0), "max": max(values, default=0)}


def _share(part: int, whole: int) -> float:
    return round(part / whole, 6) if whole else 0.0


def summary(manifest: Manifest, output: str) -> dict:
    """What the dataset holds, as a JSON-ready dict: totals, options, accounting, per-split class tables.

    Args:
        manifest: the dataset's manifest.
        output: the dataset folder, reported as given.
    """
    labels = list(manifest.labels)
    total = manifest.examples
    splits: dict[str, dict[str, Any]] = {}
    for name, info in manifest.splits.items():
        shards = info.shards
        held: dict[str, list[int]] = {}  # class -> its non-zero counts, one per shard holding it
        for s in shards:
            for label, n in s.held.items():
                if n:
                    held.setdefault(label, []).append(n)
        classes = {}
        for label in labels:
            count = info.class_counts.get(label, 0)
            counts = held.get(label, [])
            # a shard that does not name a class holds none of it
            per_shard = {
                "min": min(counts) if len(counts) == len(shards) and counts else 0,
                "max": max(counts, default=0),
            }
            classes[label] = {"count": count, "share": _share(count, info.examples), "per_shard": per_shard}
            if info.box_counts is not None:  # detection
                classes[label]["boxes"] = info.box_counts.get(label, 0)
        extra = (
            {}
            if info.max_boxes is None
            else {"max_boxes": info.max_boxes, "boxes": sum((info.box_counts or {}).values())}
        )
        splits[name] = extra | {
            "examples": info.examples,
            "num_shards": info.num_shards,
            "bytes": info.bytes,
            "share": _share(info.examples, total),
            "per_shard": _spread([s.examples for s in shards]),
            "shard_bytes": _spread([s.bytes for s in shards]),
            "classes": classes,
        }
    inputs = manifest.inputs.to_json()
    task = {} if manifest.task == "classification" else {"task": manifest.task}  # classification's JSON as before
    return (
        task
        | {
            "version": JSON_VERSION,
            "output": output,
            "manifest_version": manifest.version,
            "tool": dict(manifest.tool),
            "created": manifest.run.created,
            "runner": manifest.run.runner,
            "labels": labels,
            "seed": manifest.options.get("seed"),
            "options": dict(manifest.options),
            "totals": {
                "examples": total,
                "shards": sum(s["num_shards"] for s in splits.values()),
                "bytes": sum(s["bytes"] for s in splits.values()),
                "classes": len(labels),
                "splits": len(splits),
            },
            "rejects": manifest.inputs.rejected,
            "inputs": inputs,
            "splits": splits,
        }
        | ({} if manifest.groups is None else {"groups": manifest.groups.to_json()})
    )


DUPLICATES = "duplicates.jsonl"  # prep/core/run/dedupe_files.DUPLICATES_FILE: the duplicate groups a conversion found
GROUPS_SHOWN = 10  # groups listed by inspect (the file, sorted by first path, has them all)
MEMBERS_SHOWN = 5  # members listed per group


def duplicate_groups(output: str, groups: int = GROUPS_SHOWN, members: int = MEMBERS_SHOWN) -> dict | None:
    """The head of OUTPUT/duplicates.jsonl: its counts and its first `groups` groups, each with its first
    `members` members (path, split, label, the reason it was rejected or None), read line by line; None when
    the conversion found no duplicates (or ran with --duplicates off)."""
    import io
    import json

    path = storage.join(output, DUPLICATES)
    if not storage.exists(path):
        return None
    shown: list[dict[str, Any]] = []
    total = 0
    with io.TextIOWrapper(storage.open_read(path), encoding="utf-8") as f:
        header = json.loads(f.readline())
        for line in f:
            total += 1
            if len(shown) < groups:
                g = json.loads(line)
                shown.append(
                    {
                        "kind": g["kind"],
                        "conflict": g["conflict"],
                        "cross_split": g["cross_split"],
                        "size": len(g["members"]),
                        "members": [
                            {k: m.get(k) for k in ("path", "split", "label", "rejected")}
                            for m in g["members"][:members]
                        ],
                    }
                )
    counts = {k: v for k, v in header.items() if k not in ("format", "version")}
    return {"counts": counts, "groups": shown, "more": total - len(shown)}


def shard_paths(manifest: Manifest, output: str, split: str | None = None) -> list[str]:
    """Shard files of `split` (or of every split, largest first) in index order."""
    names = [split] if split else sorted(manifest.splits, key=lambda s: -manifest.splits[s].examples)
    return [storage.join(output, shard.file) for name in names for shard in manifest.splits[name].shards]


def _records(paths: list[str], manifest: Manifest) -> Iterator[ImageRecord | TaskRecord]:
    task, shard_format = manifest.task, formats.get(manifest.file_format)
    for path in paths:
        for data in shard_format.records(path, posixpath.basename(path)):
            yield ImageRecord.from_bytes(data) if task == "classification" else TaskRecord.from_bytes(data, task)


def classes_of(record: ImageRecord | TaskRecord, num_classes: int) -> list[int]:
    """The label indexes (into the manifest's labels) a record contains, for the contact sheet's rows."""
    if isinstance(record, ImageRecord):
        return [record.label]
    if record.task == "multilabel":
        return sorted(set(record.labels))
    if record.task == "detection":
        return sorted({o.label - 1 for o in record.objects})
    import io

    import numpy as np
    from PIL import Image

    try:
        values = np.unique(np.asarray(Image.open(io.BytesIO(record.segmentation or b"")))).tolist()
    except Exception:  # a damaged class map: in no row (prep verify --deep names it)
        return []
    return [v for v in values if v < num_classes]


def samples(
    manifest: Manifest, output: str, per_class: int, split: str | None = None
) -> dict[int, list[ImageRecord | TaskRecord]]:
    """The first `per_class` records of each label (for the other tasks: records containing it), reading
    shards in order until every class has them.

    Records inside a shard are in a seeded shuffled order, so the first ones are
    a fair sample; the read stops as soon as every class is full, which on a
    balanced dataset is within the first shards.

    Raises:
        RecordError: a shard read on the way is corrupt (`prep verify` says more).
        OSError: a shard cannot be read.
    """
    n = len(manifest.labels)
    wanted = {label: min(per_class, _available(manifest, label, split)) for label in range(n)}
    picked: dict[int, list] = {label: [] for label in wanted}
    missing = sum(wanted.values())
    if missing:
        for record in _records(shard_paths(manifest, output, split), manifest):
            for label in classes_of(record, n):
                bucket = picked.get(label)
                if bucket is not None and len(bucket) < wanted[label]:
                    bucket.append(record)
                    missing -= 1
            if not missing:
                break
    return picked


def _available(manifest: Manifest, label: int, split: str | None) -> int:
    name = manifest.labels[label]
    splits = [split] if split else list(manifest.splits)
    return sum(manifest.splits[s].class_counts.get(name, 0) for s in splits)
