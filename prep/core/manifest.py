"""`manifest.json`: what a finished dataset holds, as types. Schema in docs/manifest.md.

`Manifest.from_json` is the one reader: it checks the format, the version and the
shape (every key and type that a reader relies on), so a hand-edited manifest gives a
`ManifestError` naming the bad field, never a KeyError or TypeError later; those checks
are `prep.core.manifest_read`'s, this module the types and the writing.
`Manifest.to_json` gives back exactly the document read (`dumps`: sorted keys, indent 2,
ASCII), so the bytes of a manifest are the same as before it was typed.

Version 2 (written since issue 37) moves the per-shard counts to `shard_counts.jsonl` beside
the manifest (`prep.core.shard_counts`), so that manifest.json grows with shards + classes,
never shards x classes. `from_json` reads version 1 as it always did; a version-2 manifest's
shards then hold `class_counts` (`box_counts`, `stratum_counts`) None until `with_shard_counts`
(or `load(..., shard_counts=True)`) reads the sidecar. A reader that needs them must ask.

The manifest is written last, atomically; its presence means every shard it names was
complete when it was written. Everything except `run` is a function of the inputs and
options, so two runs on any runner compare equal once `run` is removed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from prep.core import formats, manifest_read, storage
from prep.core import shard_counts as sidecar
from prep.core.manifest_parts import (  # noqa: F401 (re-exported)
    BoxAccounting,
    Category,
    GroupCounts,
    IndexFile,
    InFlight,
    Inputs,
    Resumed,
    Run,
    ShardInfo,
    SplitInfo,
    deviation,
    fraction_deviation,
)
from prep.core.manifest_read import FORMAT
from prep.core.naming import ShardName
from prep.core.schema import IGNORE_VALUE

FILENAME = "manifest.json"
REJECTS = "rejects.jsonl"
LABEL_MAP_PBTXT = "label_map.pbtxt"  # detection: the Object Detection API's label map, beside the shards
LABEL_MAP_CSV = "label_map.csv"  # detection: id,name (Model Garden)
REPORT = "report.html"  # `prep report`'s page, written into OUTPUT by `prep convert --report`
NO_STRATUM = "(none)"  # the stratum of an image without labels or objects (stratum_counts)
VERSION = 2  # what this tool writes (it reads manifest_read.READABLE)
SHARD_COUNTS = sidecar.FILENAME


@dataclasses.dataclass(frozen=True)
class Extras:
    """What `Manifest.build` adds to a classification manifest: the task's parts, and duplicate groups'."""

    task: str = "classification"
    categories: tuple[Category, ...] | None = None  # detection
    max_boxes: dict[str, int] | None = None  # detection: {split: the most objects of one image}; absent: none
    groups: GroupCounts | None = None  # written when they say something
    fractions: Mapping[str, float | Fraction] | None = (
        None  # {split: --split fraction}, given when groups decided splits
    )


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A finished dataset: labels (a label id indexes them), options, splits, accounting, provenance."""

    labels: tuple[str, ...]
    options: dict[str, Any]  # the output-deciding options, as `ConvertConfig.manifest_options` records them
    splits: dict[str, SplitInfo]  # in the order the manifest lists them (sorted by name)
    inputs: Inputs
    tool: dict[str, Any]  # name, version (ours), pillow
    run: Run = Run()
    version: int = VERSION
    task: str = "classification"  # one of schema.TASKS; not written for classification (older manifests lack it)
    categories: tuple[Category, ...] | None = None  # detection
    ignore_value: int | None = None  # segmentation: the mask value that marks pixels to ignore
    groups: GroupCounts | None = None  # only when a duplicate group was found or a group decided a split
    shard_counts: sidecar.SidecarRef | None = None  # version 2 as read: the sidecar manifest.json names

    @property
    def file_format(self) -> str:
        """The name of its shards' file format (`prep.core.formats`); absent from a TFRecord dataset's options."""
        return str(self.options.get("file_format", formats.DEFAULT))

    @property
    def examples(self) -> int:
        return sum(s.examples for s in self.splits.values())

    def shards(self) -> Iterable[tuple[SplitInfo, ShardInfo]]:
        """Every (split, shard), in manifest order."""
        for split in self.splits.values():
            for shard in split.shards:
                yield split, shard

    @classmethod
    def build(
        cls,
        labels: Sequence[str],
        options: dict[str, Any],
        written: Iterable[tuple[ShardName, ShardInfo]],
        inputs: Inputs,
        tool: dict[str, Any],
        run: Run,
        extras: Extras = Extras(),
    ) -> Manifest:
        """Assembles the manifest from the shards written, each with its name (split and shard count).

        Detection (`extras.task`) adds `categories`, and per split the box counts of its shards and
        `max_boxes`; segmentation adds `ignore_value`. `extras.groups`, when they say something, are
        written; `extras.fractions` add each split's `fraction_deviation`.
        """
        task, max_boxes, fractions = extras.task, extras.max_boxes, extras.fractions
        splits: dict[str, dict[str, Any]] = {}
        for name, shard in sorted(written, key=lambda w: (w[0].split, w[0].index)):
            if name.split not in splits:  # not setdefault: its dense default would be built for every shard
                splits[name.split] = {
                    "examples": 0,
                    "bytes": 0,
                    "num_shards": name.count,
                    "shards": [],
                    "class_counts": {label: 0 for label in labels},
                    "box_counts": {label: 0 for label in labels},
                }
            split = splits[name.split]
            split["examples"] += shard.examples
            split["bytes"] += shard.bytes
            for label, n in (shard.class_counts or {}).items():  # the writer's shards always carry them
                split["class_counts"][label] += n
            for label, n in (shard.box_counts or {}).items():
                split["box_counts"][label] += n
            split["shards"].append(shard)
        detection, several = task == "detection", task in ("multilabel", "detection")
        totals = {label: sum(s["class_counts"][label] for s in splits.values()) for label in labels}
        return cls(
            labels=tuple(labels),
            options=dict(options),
            splits={
                n: SplitInfo(
                    n,
                    s["examples"],
                    s["bytes"],
                    s["num_shards"],
                    s["class_counts"],
                    tuple(s["shards"]),
                    box_counts=s["box_counts"] if detection else None,
                    max_boxes=(max_boxes or {}).get(n, 0) if detection else None,
                    max_deviation=deviation(s["class_counts"], s["examples"], s["shards"]) if several else None,
                    fraction_deviation=fraction_deviation(s["class_counts"], fractions[n], totals)
                    if fractions and n in fractions
                    else None,
                )
                for n, s in splits.items()
            },
            inputs=inputs,
            tool=dict(tool),
            run=run,
            task=task,
            categories=extras.categories,
            ignore_value=IGNORE_VALUE if task == "segmentation" else None,
            groups=extras.groups or None,
        )

    def to_json(self) -> dict[str, Any]:
        return self._documents()[0]

    def _documents(self) -> tuple[dict[str, Any], bytes | None]:
        """The manifest document and, version 2 with the shards' counts at hand, the sidecar's bytes."""
        out = {
            "format": FORMAT,
            "version": self.version,
            "tool": dict(self.tool),
            "labels": list(self.labels),
            "options": dict(self.options),
            "splits": {name: split.to_json() for name, split in self.splits.items()},
            "inputs": self.inputs.to_json(),
            "run": self.run.to_json(),
        }
        if self.task != "classification":
            out["task"] = self.task
        if self.categories is not None:
            out["categories"] = [c.to_json() for c in self.categories]
        if self.ignore_value is not None:
            out["ignore_value"] = self.ignore_value
        if self.groups is not None:
            out["groups"] = self.groups.to_json()
        if self.version >= 2:
            return sidecar.split_out(out, self.shard_counts)
        return out, None

    def dumps(self) -> bytes:
        return dumps(self.to_json())

    def documents(self) -> tuple[bytes, bytes | None]:
        """The bytes of manifest.json and, version 2, of the sidecar it names (`SHARD_COUNTS`), which
        is written first. None for version 1, or for a version-2 manifest read without its sidecar."""
        document, data = self._documents()
        return dumps(document), data

    def with_shard_counts(self, data: bytes, where: str = SHARD_COUNTS) -> Manifest:
        """This manifest with its shards' counts read from the sidecar's bytes (version 1: itself).

        Raises:
            ManifestError: the sidecar is not the one manifest.json names, or is malformed (the line named).
        """
        if self.shard_counts is None:
            return self
        placed = [(name, shard.file) for name, split in self.splits.items() for shard in split.shards]
        counts = iter(sidecar.read(data, self.shard_counts, placed, where))

        def counted(shard: ShardInfo) -> ShardInfo:
            found = next(counts)
            return dataclasses.replace(
                shard,
                class_counts=found["class_counts"],
                box_counts=found.get("box_counts"),
                stratum_counts=found.get("stratum_counts"),
            )

        splits = {
            name: dataclasses.replace(split, shards=tuple(counted(shard) for shard in split.shards))
            for name, split in self.splits.items()
        }
        return dataclasses.replace(self, splits=splits)

    @classmethod
    def from_json(cls, data: bytes | str | dict[str, Any], where: str = FILENAME) -> Manifest:
        """Parses and checks a manifest (bytes, text, or the parsed JSON).

        Raises:
            ManifestError: not JSON, not ours, a version this tool does not know, or a
                field missing or of the wrong type (named).
        """
        return cls(**manifest_read.fields(data, where))

    @classmethod
    def load(cls, output: str, shard_counts: bool = False) -> Manifest:
        """Reads and checks OUTPUT/manifest.json of a dataset (local or remote); with `shard_counts`, also the
        sidecar of a version-2 manifest, so that every shard's counts are at hand.

        Raises:
            ManifestError: missing, unreadable, not ours, an unknown version, or malformed (the sidecar too).
        """
        path = storage.join(output, FILENAME)
        manifest = cls.from_json(manifest_read.read_file(path, f"{output} is not a finished dataset"), path)
        return manifest.read_shard_counts(output) if shard_counts else manifest

    def read_shard_counts(self, output: str) -> Manifest:
        """This manifest, read from the dataset `output`, with its sidecar's counts (version 1: itself).

        Raises:
            ManifestError: the sidecar is missing, unreadable, not the one manifest.json names, or malformed.
        """
        if self.shard_counts is None:
            return self
        path = storage.join(output, self.shard_counts.file)
        return self.with_shard_counts(manifest_read.read_file(path, "manifest.json names it"), path)


def dumps(document: dict[str, Any]) -> bytes:
    """The bytes of a manifest document: sorted keys, indent 2, ASCII, a final newline."""
    return (json.dumps(document, sort_keys=True, indent=2, ensure_ascii=True) + "\n").encode()
