"""What a conversion leaves in its work directory so that `--resume` can finish it, and when it may be reused.

Paths are `prep.core.workdir.WorkDir`'s. run.json is written once the listing is staged,
and again by a resumed run with other planning options (replan.py); a shard's sidecar
digests its planned entries, the label id written included. A batch being prepared is
recorded in flight (`WorkDir.in_flight`, a chunk at a time) until its spill file is complete: what a run
killed meanwhile was reading (`read_in_flight`). Every file is written under
a temporary name and renamed, or, on an object store, uploaded whole under its name
(`storage.uploads_whole`), and each index or sidecar only after the file it describes is
complete, so whatever a kill leaves is either complete or absent, or unnamed by any index. A chunk is
reused when its index and all its spill files (of the recorded sizes) exist; a
shard or part when its file, renamed into place, still hashes to its sidecar's
SHA-256 and the new plan gives it the same entries.

`StepHook`: the pipeline calls an injected ``on_step(point)``, if given, at the
points where a kill leaves distinct states: "chunk" before preparing each chunk,
"batch" as each batch starts (its chunk is recorded in flight by then), "shard" after completing each shard,
"manifest" between writing the manifest's temporary file and renaming it. Tests
inject one that sleeps, to kill there.
"""

from __future__ import annotations

import hashlib
import json
import struct
import typing
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from prep.core import storage
from prep.core.errors import ResumeError
from prep.core.listing import InputRef, Reject
from prep.core.run.chunk_spill import Spilled
from prep.core.task_inputs import BoxNote, BoxTally
from prep.core.workdir import WorkDir

StepHook = Callable[[str], None]  # called with "chunk", "shard" or "manifest"
# of a chunk's index; 2: each outcome recorded as an object of its fields, by name; 3: one spill file per chunk
INDEX_VERSION = 3


class ChunkIndex(typing.NamedTuple):
    # [(kind, {field: value})] as PrepareChunk recorded them (prepare._recorded reads them)
    outcomes: list[tuple[str, dict[str, Any]]]
    inputs: list[str]  # storage.signature of each listed input, in listing order


class PlannedEntry(Spilled, Protocol):
    """What the core reads of a planned entry (beam_jobs.plan.Entry, which the core may not import):
    `entries_digest` here, the shard writer's copy in `shard_copy`; where it waits, as `Spilled`."""

    @property
    def order(self) -> bytes: ...
    @property
    def label(self) -> int: ...
    @property
    def converted(self) -> bool: ...
    @property
    def source(self) -> bytes: ...
    @property
    def cut(self) -> int: ...
    @property
    def relabel(self) -> int: ...
    @property
    def rest(self) -> bytes: ...


def write_run(work: WorkDir, record: dict[str, Any]) -> None:
    storage.write_atomic(work.run_record, json.dumps(record, sort_keys=True, indent=1).encode())


def read_run(work: WorkDir) -> dict[str, Any] | None:
    """The interrupted run's record, or None if it never got that far."""
    if not storage.exists(work.run_record):
        return None
    try:
        record: dict[str, Any] = json.loads(storage.read_bytes(work.run_record))
    except ValueError:
        return None
    return record


def delete_work(work: WorkDir) -> None:
    """Deletes the work directory with run.json last: a kill midway leaves the record that
    `--resume` checks a finished dataset against."""
    for path in work.top_level():
        storage.delete(path)
    storage.delete(work.run_record)
    storage.delete(work.root)


def write_listing(work: WorkDir, chunk: int, refs: Iterable[InputRef]) -> None:
    storage.write_atomic(work.listing_chunk(chunk), json.dumps([r.fields() for r in refs]).encode())


def read_listing(work: WorkDir, chunk: int) -> list[InputRef]:
    return [InputRef(*r) for r in json.loads(storage.read_bytes(work.listing_chunk(chunk)))]


def rejects_bytes(rejects: Iterable[Reject]) -> bytes:
    return json.dumps([list(r) for r in rejects]).encode()


def write_listing_rejects(work: WorkDir, rejects: Iterable[Reject]) -> str:
    """Writes the early rejects (in `accounting.reject_order`); returns the SHA-256 of the file (hex)."""
    data = rejects_bytes(rejects)
    storage.write_atomic(work.listing_rejects, data)
    return hashlib.sha256(data).hexdigest()


def read_listing_rejects(work: WorkDir) -> list[Reject]:
    return read_rejects_file(work.listing_rejects)


def read_rejects_file(path: str) -> list[Reject]:
    """Rejects written as `rejects_bytes` writes them."""
    return [Reject(*r) for r in json.loads(storage.read_bytes(path))]


def write_listing_boxes(work: WorkDir, notes: Iterable[BoxNote], tally: BoxTally) -> None:
    storage.write_atomic(work.listing_boxes, json.dumps([[list(n) for n in notes], list(tally)]).encode())


def read_listing_boxes(work: WorkDir) -> tuple[list[BoxNote], BoxTally] | None:
    """The listing's box notes and tally, or None for a conversion without boxes."""
    if not storage.exists(work.listing_boxes):
        return None
    notes, tally = json.loads(storage.read_bytes(work.listing_boxes))
    return [BoxNote(*n) for n in notes], BoxTally(tally[0], tally[1], tally[2], tuple(map(tuple, tally[3])))


def write_chunk_index(
    work: WorkDir, chunk: int, outcomes: Iterable[tuple[str, object]], spills: dict[int, int], inputs: list[str]
) -> None:
    """Records a prepared chunk: outcomes ([(kind, NamedTuple)], or as an index holds them), {spill id: bytes}
    of its spill files, input signatures."""
    data = {
        "version": INDEX_VERSION,
        "spills": sorted(spills.items()),
        "outcomes": [[kind, _by_name(value)] for kind, value in outcomes],
        "inputs": inputs,
    }
    storage.write_atomic(work.chunk_index(chunk), json.dumps(data).encode())


_PLAIN = {str, int, bool, float, type(None)}  # as JSON holds them


def _by_name(value: object) -> object:
    """A recorded value as JSON: a NamedTuple as an object of its fields by name (nested ones too), bytes as
    text (UTF-8, undecodable bytes kept: surrogateescape); one read back from an index as it is."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: v if type(v) in _PLAIN else _by_name(v) for name, v in zip(value._fields, value)}
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, (tuple, list)):
        return [_by_name(v) for v in value]
    return value


def check_index_version(data: dict[str, Any], path: str) -> None:
    """Raises ResumeError unless `data`, a chunk index read from `path`, is of INDEX_VERSION."""
    if data.get("version") != INDEX_VERSION:
        raise ResumeError(f"{path} was written by another version of tfrecord-prep; run with --overwrite to start over")


def read_chunk_index(work: WorkDir, chunk: int) -> ChunkIndex | None:
    """The chunk's recorded outcomes if its index and all its spill files are complete, else None."""
    path = work.chunk_index(chunk)
    try:
        if not storage.exists(path):
            return None
        data = json.loads(storage.read_bytes(path))
        if data.get("version") != INDEX_VERSION:
            return None  # another version's: prepared again (run.json's version refuses such a resume first)
        for spill, size in data["spills"]:
            if storage.size(work.spill(spill)) != size:
                return None
        return ChunkIndex([(kind, value) for kind, value in data["outcomes"]], data["inputs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_in_flight(work: WorkDir) -> frozenset[str]:
    """Paths of the inputs that were being prepared when the run that used `work` was killed.

    A record that cannot be read counts for nothing: it is written atomically, so only
    a damaged work directory holds one.
    """
    folder = work.in_flight_folder
    paths: set[str] = set()
    for name in storage.list_names(folder):
        if not name.endswith(".json"):
            continue  # a temporary file whose rename the kill prevented: its batch had not started
        try:
            paths.update(p for p in json.loads(storage.read_bytes(storage.join(folder, name))) if isinstance(p, str))
        except (OSError, ValueError, TypeError):
            continue
    return frozenset(paths)


def entries_digest(entries: Iterable[PlannedEntry]) -> str:
    """Digest of a shard's (or part's) planned entries, in write order."""
    digest = hashlib.sha256()
    for e in entries:
        digest.update(e.order)
        # `relabel` too: the same prepared record written with another label id is another record.
        digest.update(
            struct.pack(">QQQQ?QQq", e.spill, e.offset, e.length, e.label, e.converted, e.cut, e.image, e.relabel)
        )
        digest.update(struct.pack(">Q", len(e.source)) + e.source)
    return digest.hexdigest()


def record_complete(sidecar: str, digest: str, size: int, sha256: str) -> None:
    """Records that the file described by `sidecar` is complete (call after its rename)."""
    storage.write_atomic(sidecar, json.dumps({"entries": digest, "bytes": size, "sha256": sha256}).encode())


def reusable(path: str, sidecar: str, digest: str) -> tuple[int, str] | None:
    """(bytes, sha256) of the complete file at `path` if it holds exactly the planned entries, else None.

    The file is hashed again: a shard damaged or replaced since it was written is rewritten.
    """
    try:
        if not storage.exists(sidecar) or not storage.exists(path):
            return None
        recorded = json.loads(storage.read_bytes(sidecar))
        if recorded.get("entries") != digest:
            return None
        size, sha = storage.sha256_file(path)
    except (OSError, ValueError, AttributeError):
        return None
    if (size, sha) != (recorded.get("bytes"), recorded.get("sha256")):
        return None
    return size, sha
