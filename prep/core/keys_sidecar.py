"""`content_keys.jsonl`: the content keys of every record of a converted dataset, beside its manifest. Pure.

`prep leakage` writes it after computing the keys from the shards, so a second
run does not decode again; the conversion will write the same file. JSON
lines, keys sorted:

- line 1, the header: `format` ("tfrecord-prep-content-keys"), `version` (2), and
  what decides the hashes: `crop_scales`, `grid`, `hash_side`, `draft`;
- then one line per record, in shard and record order: `shard` (file name),
  `shard_sha256` (the manifest's digest of that shard when the keys were made),
  `record` (its index in the shard), `split`, `filename` (image/filename),
  `sha256` (of image/encoded), and `hashes` (16 hex digits each, whole picture
  first, then the crops) or null with `error` when the image did not decode.

A reader keeps a shard's lines only if the header matches the hashing in use and
`shard_sha256` is the manifest's digest of that shard now: a reconverted or
edited dataset, or keys made another way, are computed again, never trusted.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii as _quote  # a str as json.dumps(ensure_ascii=True) writes it
from typing import Any

import numpy as np
import numpy.typing as npt

from prep.core import content_keys as ck

FILENAME = "content_keys.jsonl"
FORMAT = "tfrecord-prep-content-keys"
# 4: resize and DCT folded, no rounding between (3: colour JPEGs decoded straight to gray; 2: in their own
# mode, then made gray; 1: straight to gray, other scales)
VERSION = 4


def header() -> dict[str, Any]:
    """The first line: the format and everything that decides the hashes."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "crop_scales": list(ck.CROP_SCALES),
        "grid": ck.GRID,
        "hash_side": ck.HASH_SIDE,
        "draft": ck.DRAFT,
    }


@dataclasses.dataclass(frozen=True)
class RecordKeys:
    """The keys of one record: where it is, and its sha256 and hashes (None if the image did not decode)."""

    split: str
    shard: str
    shard_sha256: str
    record: int
    filename: str
    sha256: str
    hashes: tuple[int, ...] | None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.hashes is None) == (self.error is None):
            raise ValueError(f"record {self.shard}#{self.record}: exactly one of hashes and error must be set")
        if self.record < 0:
            raise ValueError(f"record index must be >= 0, got {self.record}")

    @property
    def keys(self) -> ck.ContentKeys | None:
        return None if self.hashes is None else ck.ContentKeys(self.sha256, self.hashes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "split": self.split,
            "shard": self.shard,
            "shard_sha256": self.shard_sha256,
            "record": self.record,
            "filename": self.filename,
            "sha256": self.sha256,
            "hashes": None if self.hashes is None else [f"{h:016x}" for h in self.hashes],
        }
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RecordKeys:
        hashes = obj["hashes"]
        return cls(
            obj["split"],
            obj["shard"],
            obj["shard_sha256"],
            obj["record"],
            obj["filename"],
            obj["sha256"],
            None if hashes is None else tuple(int(h, 16) for h in hashes),
            obj.get("error"),
        )


def dumps(records: list[RecordKeys]) -> bytes:
    return header_line() + record_lines(records)


def header_line() -> bytes:
    return (json.dumps(header(), sort_keys=True) + "\n").encode()


def record_lines(records: list[RecordKeys]) -> bytes:
    """The records' lines, each ending in a newline (a sidecar is `header_line` and these, joined)."""
    return "".join(
        record_line(r.split, r.shard, r.shard_sha256, r.record, r.filename, r.sha256, r.hashes, r.error)
        for r in records
    ).encode()


def shard_lines(
    split: str,
    shard: str,
    shard_sha256: str,
    records: list[int],
    filenames: list[str],
    sha256: str,
    hashes: npt.NDArray[np.uint64],
) -> str:
    """The lines of records of one shard that all have hashes, as `record_line` writes them: `sha256` holds
    their digests' 64 hex digits each, `hashes` their hashes (records, hashes) as uint64. The shard's fields
    are quoted once and the hashes formatted as one array: the converter writes a line per record."""
    tail = f'"shard": {_quote(shard)}, "shard_sha256": {_quote(shard_sha256)}, "split": {_quote(split)}}}\n'
    digits = np.frombuffer(hashes.astype(">u8").tobytes().hex().encode(), np.uint8).reshape(-1, 16)
    cells = np.empty((len(digits), 20), np.uint8)  # each hash as '"' + its 16 digits + '", '
    cells[:, 0], cells[:, 1:17], cells[:, 17:] = ord('"'), digits, np.frombuffer(b'", ', np.uint8)
    listed, width = cells.tobytes().decode(), 20 * hashes.shape[1]
    return "".join(
        f'{{"filename": {_quote(name)}, "hashes": [{listed[width * i : width * (i + 1) - 2]}], '
        f'"record": {int(record)}, "sha256": "{sha256[64 * i : 64 * i + 64]}", {tail}'
        for i, (record, name) in enumerate(zip(records, filenames))
    )


def record_line(
    split: str,
    shard: str,
    shard_sha256: str,
    record: int,
    filename: str,
    sha256: str,
    hashes: Iterable[int] | None,
    error: str | None = None,
) -> str:
    """One record's line, newline included: `json.dumps(RecordKeys(...).to_json(), sort_keys=True)`, written
    out field by field, so that the converter, which writes one per record, builds no dict to dump."""
    listed = "null" if hashes is None else "[" + ", ".join(f'"{h:016x}"' for h in hashes) + "]"
    failed = "" if error is None else f'"error": {_quote(error)}, '
    return (
        f'{{{failed}"filename": {_quote(filename)}, "hashes": {listed}, "record": {int(record)}, '
        f'"sha256": {_quote(sha256)}, "shard": {_quote(shard)}, "shard_sha256": {_quote(shard_sha256)}, '
        f'"split": {_quote(split)}}}\n'
    )


def loads(data: bytes, shard_digests: dict[str, str]) -> dict[str, list[RecordKeys]]:
    """The records still valid in a sidecar's bytes, by shard file name.

    Args:
        data: the file's bytes.
        shard_digests: {shard file name: its sha256 in the manifest now}.

    Returns:
        The records of each shard whose lines all carry its current digest; nothing
        if the header is not this hashing's, or the file is damaged (it is then
        simply made again).
    """
    try:
        lines = data.decode().splitlines()
        if not lines or json.loads(lines[0]) != header():
            return {}
        by_shard: dict[str, list[RecordKeys]] = {}
        for line in lines[1:]:
            record = RecordKeys.from_json(json.loads(line))
            by_shard.setdefault(record.shard, []).append(record)
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
    return {
        shard: records
        for shard, records in by_shard.items()
        if shard in shard_digests
        and all(r.shard_sha256 == shard_digests[shard] for r in records)
        and [r.record for r in records] == list(range(len(records)))
    }
