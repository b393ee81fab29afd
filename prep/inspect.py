"""`prep inspect`: what a dataset holds, from its manifest; and sample records from its shards.

`summary` is a pure function of the manifest (the `--json` document, see
docs/verify.md); `samples` reads records from the shards for the contact sheet
(`prep.pictures`). Neither imports TensorFlow.
"""

from __future__ import annotations

import os
from typing import Iterator

from prep.core.manifest import Manifest
from prep.core.schema import ImageRecord
from prep.core.tfrecord import read_records

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
    splits = {}
    for name, info in manifest.splits.items():
        shards = info.shards
        classes = {}
        for label in labels:
            count = info.class_counts.get(label, 0)
            classes[label] = {"count": count, "share": _share(count, info.examples),
                              "per_shard": _spread([s.class_counts.get(label, 0) for s in shards])}
        splits[name] = {"examples": info.examples, "num_shards": info.num_shards, "bytes": info.bytes,
                        "share": _share(info.examples, total),
                        "per_shard": _spread([s.examples for s in shards]),
                        "shard_bytes": _spread([s.bytes for s in shards]),
                        "classes": classes}
    inputs = manifest.inputs.to_json()
    return {
        "version": JSON_VERSION,
        "output": output,
        "manifest_version": manifest.version,
        "tool": dict(manifest.tool),
        "created": manifest.run.created,
        "runner": manifest.run.runner,
        "labels": labels,
        "seed": manifest.options.get("seed"),
        "options": dict(manifest.options),
        "totals": {"examples": total, "shards": sum(s["num_shards"] for s in splits.values()),
                   "bytes": sum(s["bytes"] for s in splits.values()), "classes": len(labels),
                   "splits": len(splits)},
        "rejects": manifest.inputs.rejected,
        "inputs": inputs,
        "splits": splits,
    }


def shard_paths(manifest: Manifest, output: str, split: str | None = None) -> list[str]:
    """Shard files of `split` (or of every split, largest first) in index order."""
    names = [split] if split else sorted(manifest.splits, key=lambda s: -manifest.splits[s].examples)
    return [os.path.join(output, shard.file) for name in names for shard in manifest.splits[name].shards]


def _records(paths: list[str]) -> Iterator[ImageRecord]:
    for path in paths:
        with open(path, "rb") as f:
            for _, _, data in read_records(f, os.path.basename(path)):
                yield ImageRecord.from_bytes(data)


def samples(manifest: Manifest, output: str, per_class: int, split: str | None = None) -> dict[int, list[ImageRecord]]:
    """The first `per_class` records of each label, reading shards in order until every class has them.

    Records inside a shard are in a seeded shuffled order, so the first ones are
    a fair sample; the read stops as soon as every class is full, which on a
    balanced dataset is within the first shards.

    Raises:
        RecordError: a shard read on the way is corrupt (`prep verify` says more).
        OSError: a shard cannot be read.
    """
    wanted = {label: min(per_class, _available(manifest, label, split)) for label in range(len(manifest.labels))}
    picked: dict[int, list[ImageRecord]] = {label: [] for label in wanted}
    missing = sum(wanted.values())
    if missing:
        for record in _records(shard_paths(manifest, output, split)):
            bucket = picked.get(record.label)
            if bucket is not None and len(bucket) < wanted[record.label]:
                bucket.append(record)
                missing -= 1
                if not missing:
                    break
    return picked


def _available(manifest: Manifest, label: int, split: str | None) -> int:
    name = manifest.labels[label]
    splits = [split] if split else list(manifest.splits)
    return sum(manifest.splits[s].class_counts.get(name, 0) for s in splits)
