"""`prep verify`'s checks of the files beside the shards: record indexes and tfds metadata. Pure.

- A record index (``--index``; `prep.core.tfrecord.record_index`) must be where the
  manifest's `index_file` says, have the recorded size and sha256, and, for a
  shard read to its end, list exactly the shard's records: every offset at a
  record's start and every size its framed length, as read from the framing.
- ``*.tfrecord.idx`` files the manifest does not name are reported, as stray shards are.
- The tfds metadata (`prep.core.tfds_meta`) is optional (datasets written before it
  existed lack it), but when a file is present it must be exactly what the
  manifest gives: otherwise tfds would read other shard lengths or labels.

Each check returns issues ``(file, record index or None, message)``.
"""

from __future__ import annotations

import hashlib
import os

from prep.core import storage, tfds_meta
from prep.core.manifest import FILENAME, Manifest
from prep.core.manifest_parts import ShardInfo
from prep.core.naming import INDEX_SUFFIX, SUFFIX, ShardName
from prep.core.tfrecord import record_index

Issue = tuple[str, "int | None", str]


def check_index_names(manifest: Manifest) -> list[Issue]:
    """Index files the manifest names under another name than their shard's plus ``.idx``."""
    issues: list[Issue] = []
    for _, shard in manifest.shards():
        index = shard.index_file
        if index is not None and index.file != shard.file + INDEX_SUFFIX:
            issues.append(
                (FILENAME, None, f"{shard.file}: index_file is {index.file!r}, must be {shard.file + INDEX_SUFFIX!r}")
            )
    return issues


def unexpected_indexes(names: list[str], manifest: Manifest) -> list[Issue]:
    """Record index files in OUTPUT (`names`) that the manifest does not name."""
    named = {shard.index_file.file for _, shard in manifest.shards() if shard.index_file is not None}
    return [
        (name, None, "unexpected record index file: the manifest does not name it")
        for name in names
        if name.endswith(SUFFIX + INDEX_SUFFIX) and name not in named
    ]


def _first_difference(found: bytes, expected: bytes) -> str:
    have, want = found.decode("ascii", "replace").splitlines(), expected.decode("ascii").splitlines()
    for i, (a, b) in enumerate(zip(have, want)):
        if a != b:
            offset, size = b.split()
            return (
                f"line {i + 1} is {a!r}, but record {i} of the shard starts at byte {offset} and is {size} bytes long"
            )
    return f"lists {len(have)} records, the shard holds {len(want)}"


def check_index(output: str, shard: ShardInfo, record_sizes: tuple[int, ...] | None) -> list[Issue]:
    """The record index of one shard against the manifest and the shard's framing.

    Args:
        output: the dataset folder.
        shard: the shard's manifest entry.
        record_sizes: the framed size of each record, as the shard was read; None when the
            shard was not read to its end (its framing then says nothing about the index).
    """
    entry = shard.index_file
    if entry is None:
        return []
    file = entry.file
    path = storage.join(output, file)
    if os.path.basename(file) != file or not storage.is_file(path):
        return [(file, None, "missing: the manifest names it but OUTPUT has no such file")]
    data = storage.read_bytes(path)
    issues: list[Issue] = []
    if len(data) != entry.bytes:
        issues.append((file, None, f"size is {len(data)} bytes, the manifest says {entry.bytes}"))
    sha = hashlib.sha256(data).hexdigest()
    if sha != entry.sha256:
        issues.append((file, None, f"sha256 is {sha}, the manifest says {entry.sha256}"))
    if record_sizes is not None:
        expected = record_index(record_sizes)
        if data != expected:
            issues.append(
                (file, None, "does not match the records of " + shard.file + ": " + _first_difference(data, expected))
            )
    return issues


def check_tfds(output: str, manifest: Manifest) -> list[Issue]:
    """tfds metadata files that are present but differ from what the manifest gives."""
    issues: list[Issue] = []
    for name, expected in tfds_meta.files(manifest).items():
        path = storage.join(output, name)
        if not storage.is_file(path):
            continue
        if storage.read_bytes(path) != expected:
            issues.append(
                (
                    name,
                    None,
                    "differs from the tfds metadata of this manifest, so tensorflow-datasets "
                    "would read other splits, shard lengths or labels",
                )
            )
    return issues


def split_of(file: str) -> str | None:
    """The split a shard or record index file belongs to, if it is one."""
    name = ShardName.parse(file) or ShardName.parse_index(file)
    return name.split if name else None
