"""`shard_counts.jsonl`: the per-shard counts of a version-2 manifest, in a file beside it. Pure.

A version-1 manifest listed every shard's `class_counts` (and `box_counts`, `stratum_counts`) inline,
so its size grew with shards x classes. Version 2 keeps `manifest.json` one small document and moves
those counts here, one line per shard in manifest order (splits by name, shards by index):

    {"class_counts":{"cat":2},"file":"train-00000-of-00002.tfrecord","split":"train"}

keys sorted, compact, ASCII, only the non-zero entries (a class a line does not name holds 0 in that
shard); detection adds `box_counts`, multi-label and detection `stratum_counts`. manifest.json names
the file with its size and SHA-256 (`SidecarRef`), so a reader that needs the counts (verify,
inspect, report) checks it is the one written with the manifest; readers that do not (loaders,
tensorflow-datasets, leakage) never open it.

This module works on the JSON documents: `split_out` turns a version-1-form document (counts
inline) into version 2 and the sidecar's bytes, `inline` does the reverse, and `read` checks the
sidecar against the manifest's shards, naming the line at fault.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import json
from typing import Any

from prep.core.errors import ManifestError

FILENAME = "shard_counts.jsonl"
KEYS = ("class_counts", "box_counts", "stratum_counts")  # a shard's counts that live in the sidecar


@dataclasses.dataclass(frozen=True)
class SidecarRef:
    """manifest.json's `shard_counts`: the sidecar's file name (beside the manifest), size and SHA-256."""

    file: str
    bytes: int
    sha256: str

    @classmethod
    def of(cls, data: builtins.bytes) -> SidecarRef:
        return cls(FILENAME, len(data), hashlib.sha256(data).hexdigest())

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "bytes": self.bytes, "sha256": self.sha256}


def line(split: str, file: str | None, counts: dict[str, Any]) -> bytes:
    """One shard's line: its split, file and counts (zeros left out)."""
    entry = {
        key: ({k: v for k, v in value.items() if v} if isinstance(value, dict) else value)
        for key, value in counts.items()
    }
    return (
        json.dumps({"split": split, "file": file, **entry}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        + "\n"
    ).encode()


def split_out(document: dict[str, Any], ref: SidecarRef | None = None) -> tuple[dict[str, Any], bytes | None]:
    """A manifest document with the counts inline in its shards (version 1's form) as version 2: the
    document without them, naming the sidecar, and the sidecar's bytes.

    When no shard holds counts (a version-2 manifest read without its sidecar), the document names
    `ref` and no bytes are returned.
    """
    lines: list[bytes] = []
    found, splits = False, {}
    for name, info in document["splits"].items():
        shards = []
        for shard in info["shards"]:
            shard = dict(shard)
            counts = {key: shard.pop(key) for key in KEYS if key in shard}
            found = found or bool(counts)
            lines.append(line(name, shard.get("file"), counts))
            shards.append(shard)
        splits[name] = {**info, "shards": shards}
    data = b"".join(lines) if found else None
    if data is not None:
        ref = SidecarRef.of(data)
    elif ref is None:
        raise ValueError("internal error: a version-2 manifest without shard counts nor a sidecar to name")
    return {**document, "version": 2, "splits": splits, "shard_counts": ref.to_json()}, data


def inline(document: dict[str, Any], data: bytes) -> dict[str, Any]:
    """A version-2 document and its sidecar's bytes as one version-1-form document (counts in the
    shards, no `shard_counts`): what a tool that edits a whole manifest works on. Unchecked."""
    entries = iter(json.loads(text) for text in data.decode().splitlines())
    splits = {}
    for name, info in document["splits"].items():
        shards = []
        for shard in info["shards"]:
            entry = next(entries)
            shards.append({**shard, **{key: entry[key] for key in KEYS if key in entry}})
        splits[name] = {**info, "shards": shards}
    out = {**document, "version": 1, "splits": splits}
    out.pop("shard_counts", None)
    return out


def read(data: bytes, ref: SidecarRef, shards: list[tuple[str, str]], where: str) -> list[dict[str, dict[str, int]]]:
    """The counts of each shard ((split, file), in manifest order), read from the sidecar's `data`.

    Raises:
        ManifestError: the bytes are not those manifest.json names (size, SHA-256), or a line is not
            the shard's in that place, not JSON, or holds a count that is not an integer >= 0 (named).
    """
    if len(data) != ref.bytes:
        raise ManifestError(f"{where} is {len(data)} bytes, manifest.json says {ref.bytes}")
    sha = hashlib.sha256(data).hexdigest()
    if sha != ref.sha256:
        raise ManifestError(f"{where} has sha256 {sha}, manifest.json says {ref.sha256}")
    texts = data.split(b"\n")
    if texts[-1] != b"" or len(texts) - 1 != len(shards):
        raise ManifestError(f"{where} has {len(texts) - 1} line(s) for the manifest's {len(shards)} shard(s)")
    out = []
    for number, (text, (split, file)) in enumerate(zip(texts, shards), 1):
        at = f"{where} line {number}"
        try:
            entry = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{at} is not valid JSON: {exc}") from None
        if not isinstance(entry, dict) or (entry.get("split"), entry.get("file")) != (split, file):
            named = (entry.get("split"), entry.get("file")) if isinstance(entry, dict) else entry
            raise ManifestError(f"{at} must be the counts of {split}/{file} (manifest order), got {named!r}")
        if "class_counts" not in entry:
            raise ManifestError(f"{at} lacks 'class_counts'")
        out.append({key: _counts(entry[key], f"{at}: {key}") for key in KEYS if key in entry})
    return out


def _counts(value: object, field: str) -> dict[str, int]:
    if not isinstance(value, dict):
        raise ManifestError(f"{field} must be an object, got {value!r}")
    for name, n in value.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ManifestError(f"{field}[{name!r}] must be an integer >= 0, got {n!r}")
    return value
