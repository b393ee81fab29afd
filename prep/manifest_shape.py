"""The shape of a version-1 manifest (docs/manifest.md), checked before anything reads its fields.

`prep.manifest.loads` checks the format and version; this checks the keys and
types that `verify` and `inspect` rely on, so a hand-edited manifest gives a
`ManifestError` naming the bad field rather than a KeyError or TypeError.
"""

from __future__ import annotations

import os

from prep import manifest as manifest_lib
from prep.errors import ManifestError
from prep.naming import check_split_name

_SPLIT_KEYS = {"examples": int, "num_shards": int, "bytes": int, "class_counts": dict, "shards": list}
_SHARD_KEYS = {"file": str, "index": int, "examples": int, "bytes": int, "sha256": str, "class_counts": dict}
_INDEX_KEYS = {"file": str, "bytes": int, "sha256": str}
_INPUT_KEYS = ("found", "written", "rejected", "capped")


def _type_name(kind: type) -> str:
    return {int: "an integer >= 0", str: "a string", dict: "an object", list: "a list"}[kind]


def _check(value, kind: type, where: str, field: str):
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if ok and kind is int:
        ok = value >= 0
    if not ok:
        raise ManifestError(f"{where} is malformed: {field} must be {_type_name(kind)}, got {value!r}")
    return value


def _check_counts(counts: dict, where: str, field: str) -> None:
    for name, n in counts.items():
        _check(n, int, where, f"{field}[{name!r}]")


def check_shape(manifest: dict, where: str = "manifest.json") -> None:
    """Checks the keys and types of a manifest that `prep.manifest.loads` accepted.

    Raises:
        ManifestError: naming the first field that is missing or of the wrong type.
    """
    labels = _check(manifest["labels"], list, where, "labels")
    if not labels:
        raise ManifestError(f"{where} is malformed: labels is empty")
    for i, label in enumerate(labels):
        _check(label, str, where, f"labels[{i}]")
    _check(manifest["options"], dict, where, "options")
    inputs = _check(manifest["inputs"], dict, where, "inputs")
    for key in _INPUT_KEYS:
        _check(inputs.get(key), int, where, f"inputs.{key}")
    if "empty_classes" in inputs:  # only when a class was left with no example
        for i, name in enumerate(_check(inputs["empty_classes"], list, where, "inputs.empty_classes")):
            _check(name, str, where, f"inputs.empty_classes[{i}]")
    for split, info in _check(manifest["splits"], dict, where, "splits").items():
        try:
            check_split_name(split)
        except ValueError as exc:
            raise ManifestError(f"{where} is malformed: {exc}") from None
        field = f"splits.{split}"
        _check(info, dict, where, field)
        for key, kind in _SPLIT_KEYS.items():
            _check(info.get(key), kind, where, f"{field}.{key}")
        _check_counts(info["class_counts"], where, f"{field}.class_counts")
        for i, shard in enumerate(info["shards"]):
            _check(shard, dict, where, f"{field}.shards[{i}]")
            for key, kind in _SHARD_KEYS.items():
                _check(shard.get(key), kind, where, f"{field}.shards[{i}].{key}")
            _check_counts(shard["class_counts"], where, f"{field}.shards[{i}].class_counts")
            if "index_file" in shard:  # written with --index
                index = _check(shard["index_file"], dict, where, f"{field}.shards[{i}].index_file")
                for key, kind in _INDEX_KEYS.items():
                    _check(index.get(key), kind, where, f"{field}.shards[{i}].index_file.{key}")


def load_checked(output: str) -> dict:
    """Reads OUTPUT/manifest.json (`prep.manifest.load`) and checks its shape.

    Raises:
        ManifestError: missing, unreadable, not ours, an unknown version, or malformed.
    """
    manifest = manifest_lib.load(output)
    check_shape(manifest, os.path.join(output, manifest_lib.FILENAME))
    return manifest
