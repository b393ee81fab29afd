"""A synthetic large dataset for the report: a manifest of 1,000,000 examples in 1,000
classes, counted per shard as the balance rule lays them out, plus one real shard holding
a few records of every class (enough for the sample grid; the other shards are not written)
and a rejects.jsonl whose source is gone. Only `prep report` reads it: `prep verify` would
rightly find most shards missing."""

from __future__ import annotations

import json
import pathlib

import numpy as np

from prep.core.schema import ImageRecord
from prep.core.tfrecord import frame
from tests.support.imagegen import image_bytes

SPLITS = {"train": (0.8, 512), "validation": (0.1, 64), "test": (0.1, 64)}


def balanced(counts: np.ndarray, shards: int) -> np.ndarray:
    """counts per class -> class x shard matrix: examples in class order dealt round-robin,
    so every class and every shard holds floor or ceil of its share (the balance rule)."""
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    quotient, remainder = np.divmod(counts, shards)
    matrix = np.repeat(quotient[:, None], shards, axis=1)
    for c, (start, extra) in enumerate(zip(starts, remainder)):
        matrix[c, (start + np.arange(extra)) % shards] += 1
    return matrix


def write(
    out: pathlib.Path,
    examples: int = 1_000_000,
    classes: int = 1_000,
    per_class: int = 2,
    rejects: int = 5_000,
    splits: dict[str, tuple[float, int]] = SPLITS,
    labels: list[str] | None = None,
) -> pathlib.Path:
    """Writes the dataset folder `out`; `splits` maps a split to (fraction, shards), the last takes the rest."""
    split_plan = splits
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.5, 1.5, classes)
    counts = np.floor(weights / weights.sum() * examples).astype(np.int64)
    counts[: examples - counts.sum()] += 1
    labels = labels or [f"class_{i:04d}_{'long_name_' * (i % 3)}x" for i in range(classes)]
    out.mkdir(parents=True)
    splits, left = {}, counts.copy()
    for i, (name, (fraction, shards)) in enumerate(split_plan.items()):
        last = i == len(split_plan) - 1
        part = left if last else np.floor(counts * fraction).astype(np.int64)
        left = left if last else left - part
        matrix = balanced(part, shards)
        shard_list = []
        for s in range(shards):
            column = matrix[:, s]
            shard_list.append(
                {
                    "file": f"{name}-{s:05d}-of-{shards:05d}.tfrecord",
                    "index": s,
                    "examples": int(column.sum()),
                    "bytes": int(column.sum()) * 110_000,
                    "sha256": "0" * 64,
                    "class_counts": dict(zip(labels, map(int, column))),
                }
            )
        splits[name] = {
            "examples": int(part.sum()),
            "num_shards": shards,
            "bytes": int(part.sum()) * 110_000,
            "class_counts": dict(zip(labels, map(int, part))),
            "shards": shard_list,
        }
    reasons = ["undecodable", "too_large", "empty"]
    manifest = {
        "format": "tfrecord-prep",
        "version": 1,
        "labels": labels,
        "tool": {"name": "tfrecord-prep", "version": "0.1.0", "pillow": "12.3.0"},
        "options": {
            "seed": 0,
            "num_shards": None,
            "shard_size": 200_000_000,
            "split": "train=0.8,validation=0.1,test=0.1",
        },
        "splits": splits,
        "inputs": {
            "found": examples + rejects,
            "written": examples,
            "rejected": rejects,
            "capped": 0,
            "converted": 0,
            "rejected_by_reason": {
                r: n for r in reasons if (n := sum(1 for i in range(rejects) if reasons[i % 3] == r))
            },
            "capped_by_class": {},
        },
        "run": {
            "runner": "DataflowRunner",
            "workers": 64,
            "source": str(out.parent / "gone"),
            "started": 0,
            "created": "2026-11-24T00:00:00Z",
            "seconds": 3600.0,
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
    with open(out / "rejects.jsonl", "w") as f:
        for i in range(rejects):
            f.write(
                json.dumps(
                    {"path": f"{labels[i % classes]}/bad_{i:06d}.jpg", "reason": reasons[i % 3], "detail": "synthetic"}
                )
                + "\n"
            )
    with open(
        out / splits[next(iter(split_plan))]["shards"][0]["file"], "wb"
    ) as f:  # the one shard the sample grid reads
        for k in range(per_class):
            for label, name in enumerate(labels):
                encoded = image_bytes("JPEG", size=(160, 120), seed=label * per_class + k)  # noise: the worst case
                record = ImageRecord.build(encoded, "jpeg", 120, 160, 3, label, name, f"{name}/{k}.jpg")
                f.write(frame(record.to_bytes()))
    return out
