"""Reading and checking a `manifest.json` document, for `Manifest.from_json` and `Manifest.load`.

This module owns the checks of a document read: the format, the version and the shape (every key and type
that a reader relies on), each failure a `ManifestError` naming the bad field. `fields` gives the
`Manifest`'s fields; `prep.core.manifest` builds the type from them and stays the entry point.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from prep.core import formats, storage
from prep.core import shard_counts as sidecar
from prep.core.errors import ManifestError
from prep.core.manifest_parts import (
    BoxAccounting,
    Category,
    GroupCounts,
    IndexFile,
    Inputs,
    Run,
    ShardInfo,
    SplitInfo,
)
from prep.core.naming import check_split_name
from prep.core.schema import TASKS

FORMAT = "tfrecord-prep"
READABLE = (1, 2)  # the manifest versions this tool reads


def _kind_name(kind: type) -> str:
    return {int: "an integer >= 0", str: "a string", dict: "an object", list: "a list"}[kind]


class _Reader:
    """Type checks that name the field at fault (`where` is the manifest's path)."""

    def __init__(self, where: str):
        self.where = where

    def get(self, obj: Mapping[str, Any], key: str, kind: type, field: str) -> Any:
        return self.check(obj.get(key), kind, field)

    def check(self, value: Any, kind: type, field: str) -> Any:
        ok = isinstance(value, kind) and not isinstance(value, bool)
        if ok and kind is int:
            ok = value >= 0
        if not ok:
            raise ManifestError(f"{self.where} is malformed: {field} must be {_kind_name(kind)}, got {value!r}")
        return value

    def counts(self, counts: Mapping[str, Any], field: str) -> dict[str, int]:
        for name, n in counts.items():
            self.check(n, int, f"{field}[{name!r}]")
        return dict(counts)


def fields(data: bytes | str | dict[str, Any], where: str) -> dict[str, Any]:
    """The `Manifest` fields of a manifest (bytes, text, or the parsed JSON), checked (`Manifest.from_json`).

    Raises:
        ManifestError: not JSON, not ours, a version this tool does not know, or a
            field missing or of the wrong type (named).
    """
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"{where} is not a tfrecord-prep manifest")
    version = data.get("version")
    if version not in READABLE or isinstance(version, bool):
        raise ManifestError(
            f"{where} has version {version!r}; this tool reads versions {', '.join(map(str, READABLE))}"
        )
    for key in ("labels", "splits", "inputs", "options"):
        if key not in data:
            raise ManifestError(f"{where} lacks {key!r}")
    read = _Reader(where)
    labels = read.get(data, "labels", list, "labels")
    if not labels:
        raise ManifestError(f"{where} is malformed: labels is empty")
    for i, label in enumerate(labels):
        read.check(label, str, f"labels[{i}]")
    options = read.get(data, "options", dict, "options")
    if options.get("file_format", formats.DEFAULT) not in formats.NAMES:
        raise ManifestError(
            f"{where}: options.file_format is {options['file_format']!r}, not a format this version reads "
            f"({', '.join(formats.NAMES)})"
        )
    raw_inputs = read.get(data, "inputs", dict, "inputs")
    counts = {
        key: read.get(raw_inputs, key, int, f"inputs.{key}") for key in ("found", "written", "rejected", "capped")
    }
    empty = None
    if "empty_classes" in raw_inputs:  # only when a class was left with no example
        empty = tuple(
            read.check(name, str, f"inputs.empty_classes[{i}]")
            for i, name in enumerate(read.get(raw_inputs, "empty_classes", list, "inputs.empty_classes"))
        )
    boxes = None
    if "boxes" in raw_inputs:
        raw = read.get(raw_inputs, "boxes", dict, "inputs.boxes")
        boxes = BoxAccounting(
            **{k: read.get(raw, k, int, f"inputs.boxes.{k}") for k in ("read", "written", "dropped", "clipped")},
            dropped_by_reason=read.counts(
                read.get(raw, "dropped_by_reason", dict, "inputs.boxes.dropped_by_reason"),
                "inputs.boxes.dropped_by_reason",
            ),
        )
    inputs = Inputs(
        **counts,
        converted=raw_inputs.get("converted"),
        rejected_by_reason=raw_inputs.get("rejected_by_reason"),
        capped_by_class=raw_inputs.get("capped_by_class"),
        empty_classes=empty,
        boxes=boxes,
    )
    ref = None
    if version >= 2:
        raw = read.get(data, "shard_counts", dict, "shard_counts")
        ref = sidecar.SidecarRef(
            *(
                read.get(raw, key, kind, f"shard_counts.{key}")
                for key, kind in (("file", str), ("bytes", int), ("sha256", str))
            )
        )
        if not ref.file or ref.file != os.path.basename(ref.file) or ref.file.startswith(".") or "\\" in ref.file:
            raise ManifestError(
                f"{where} is malformed: shard_counts.file must be a file name beside it, got {ref.file!r}"
            )
    splits = {
        name: _split(read, name, info, version) for name, info in read.get(data, "splits", dict, "splits").items()
    }
    tool = data.get("tool")
    task = data.get("task", "classification")
    if task not in TASKS:
        raise ManifestError(f"{where} is malformed: task must be one of {', '.join(TASKS)}, got {task!r}")
    categories: tuple[Category, ...] | None = None
    if "categories" in data:
        found: list[Category] = []
        for i, c in enumerate(read.get(data, "categories", list, "categories")):
            read.check(c, dict, f"categories[{i}]")
            source_id = c.get("source_id")
            if source_id is not None and not isinstance(source_id, (int, str)):
                raise ManifestError(
                    f"{where} is malformed: categories[{i}].source_id must be an integer, "
                    f"a string or null, got {source_id!r}"
                )
            found.append(
                Category(
                    read.get(c, "id", int, f"categories[{i}].id"),
                    read.get(c, "name", str, f"categories[{i}].name"),
                    source_id,
                )
            )
        categories = tuple(found)
    ignore_value = read.get(data, "ignore_value", int, "ignore_value") if "ignore_value" in data else None
    groups = None
    if "groups" in data:
        raw = read.get(data, "groups", dict, "groups")
        groups = GroupCounts(
            **{f.name: read.get(raw, f.name, int, f"groups.{f.name}") for f in dataclasses.fields(GroupCounts)}
        )
    return dict(
        labels=tuple(labels),
        options=dict(options),
        splits=splits,
        inputs=inputs,
        tool=dict(tool) if isinstance(tool, dict) else {},
        run=Run.from_json(data.get("run")),
        task=task,
        categories=categories,
        ignore_value=ignore_value,
        groups=groups,
        version=version,
        shard_counts=ref,
    )


def read_file(path: str, missing: str) -> bytes:
    """The bytes of a file (local or remote) the manifest reader needs; missing or unreadable: a ManifestError."""
    try:
        return storage.read_bytes(path)
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist: {missing}") from None
    except OSError as exc:
        if storage.is_remote(path) and not storage.exists(path):  # stores raise their own types for "missing"
            raise ManifestError(f"{path} does not exist: {missing}") from None
        raise ManifestError(f"cannot read {path}: {exc.strerror or exc}") from None


def _split(read: _Reader, name: str, info: Any, version: int = 1) -> SplitInfo:
    try:
        check_split_name(name)
    except ValueError as exc:
        raise ManifestError(f"{read.where} is malformed: {exc}") from None
    field = f"splits.{name}"
    read.check(info, dict, field)
    totals = {key: read.get(info, key, int, f"{field}.{key}") for key in ("examples", "num_shards", "bytes")}
    class_counts = read.get(info, "class_counts", dict, f"{field}.class_counts")
    raw_shards = read.get(info, "shards", list, f"{field}.shards")
    class_counts = read.counts(class_counts, f"{field}.class_counts")
    shards = []
    for i, shard in enumerate(raw_shards):
        where = f"{field}.shards[{i}]"
        read.check(shard, dict, where)
        values = {
            key: read.get(shard, key, kind, f"{where}.{key}")
            for key, kind in (("file", str), ("index", int), ("examples", int), ("bytes", int), ("sha256", str))
        }
        counts = None  # version 2: in the sidecar
        if version == 1 or "class_counts" in shard:
            counts = read.counts(
                read.get(shard, "class_counts", dict, f"{where}.class_counts"), f"{where}.class_counts"
            )
        index_file = None
        if "index_file" in shard:  # written with --index
            raw = read.get(shard, "index_file", dict, f"{where}.index_file")
            index_file = IndexFile(
                *(
                    read.get(raw, key, kind, f"{where}.index_file.{key}")
                    for key, kind in (("file", str), ("bytes", int), ("sha256", str))
                )
            )
        extra = {
            key: read.counts(read.get(shard, key, dict, f"{where}.{key}"), f"{where}.{key}")
            for key in ("box_counts", "stratum_counts")
            if key in shard
        }
        shards.append(
            ShardInfo(
                values["file"],
                values["index"],
                values["examples"],
                values["bytes"],
                values["sha256"],
                class_counts=counts,
                index_file=index_file,
                box_counts=extra.get("box_counts"),
                stratum_counts=extra.get("stratum_counts"),
            )
        )
    box_counts = (
        read.counts(read.get(info, "box_counts", dict, f"{field}.box_counts"), f"{field}.box_counts")
        if "box_counts" in info
        else None
    )
    max_boxes = read.get(info, "max_boxes", int, f"{field}.max_boxes") if "max_boxes" in info else None
    max_deviation = None
    if "max_deviation" in info:
        max_deviation = info["max_deviation"]
        if isinstance(max_deviation, bool) or not isinstance(max_deviation, (int, float)) or max_deviation < 0:
            raise ManifestError(
                f"{read.where} is malformed: {field}.max_deviation must be a number >= 0, got {max_deviation!r}"
            )
    fraction_dev = None
    if "fraction_deviation" in info:
        fraction_dev = read.get(info, "fraction_deviation", dict, f"{field}.fraction_deviation")
        for label, value in fraction_dev.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ManifestError(
                    f"{read.where} is malformed: {field}.fraction_deviation[{label!r}] must be a number, got {value!r}"
                )
        fraction_dev = dict(fraction_dev)
    return SplitInfo(
        name,
        totals["examples"],
        totals["bytes"],
        totals["num_shards"],
        class_counts,
        tuple(shards),
        box_counts=box_counts,
        max_boxes=max_boxes,
        max_deviation=max_deviation,
        fraction_deviation=fraction_dev,
    )
