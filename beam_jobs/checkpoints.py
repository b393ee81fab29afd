"""What a conversion leaves in OUTPUT/.prep-tmp so that `--resume` can finish it.

    .prep-tmp/run.json                   what decides the output (prep.resume.run_record);
                                         written once the listing is staged, and again by a
                                         resumed run with other planning options (replan.py)
    .prep-tmp/listing/chunk-NNNNNN.json  a chunk's inputs, in start.listing_order
    .prep-tmp/listing/rejects.json       inputs rejected while listing (finish.py)
    .prep-tmp/spill/chunk-NNNNNN-BBBB.bin  framed records of batch B of a chunk, kept images left out (spill.py)
    .prep-tmp/spill/chunk-NNNNNN.json    the chunk's index: its outcomes (PreparedRefs and
                                         Rejects), the size of each spill file, and a
                                         signature per input; the planner reads its PreparedRefs
    .prep-tmp/inflight/chunk-NNNNNN-BBBB.json  paths of the inputs of a batch being prepared, deleted
                                         once its spill file is complete (spill.in_flight_path):
                                         what a run killed meanwhile was reading
    .prep-tmp/plan.json                  the shard count, for progress bars
    .prep-tmp/entries/task-NNNNNN.bin    a rank task's planned entries, by shard part (planning.py);
                                         written again by every run, never reused
    .prep-tmp/done/<shard>.json          sidecar of a complete shard: digest of its planned
                                         entries (label id written included), size, SHA-256
    .prep-tmp/parts/<shard>/part-N.json  the same for a part of a multi-part shard

Every file is written under a temporary name and renamed, and each index or
sidecar only after the file it describes is complete, so whatever a kill
leaves is either complete or absent. A chunk is reused when its index and
all its spill files (of the recorded sizes) exist; a shard or part when its
file, renamed into place, still hashes to its sidecar's SHA-256 and the new
plan gives it the same entries.

`pause_for_tests` is the one test hook: the environment variable
`PREP_TEST_PAUSE`, e.g. `chunk=0.3,shard=1,manifest=60`, sleeps that many
seconds before preparing each chunk, once each batch is recorded in flight
(`batch`), after completing each shard, and between
writing the manifest's temporary file and renaming it, so tests can kill a conversion at
those points.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import typing

from beam_jobs import storage
from beam_jobs.spill import spill_path

RUN = "run.json"
PAUSE_ENV = "PREP_TEST_PAUSE"


class ChunkIndex(typing.NamedTuple):
    outcomes: list  # [(kind, fields)] as PrepareChunk emitted them
    inputs: list[str]  # storage.signature of each listed input, in listing order


def run_path(tmp_dir: str) -> str:
    return storage.join(tmp_dir, RUN)


def write_run(tmp_dir: str, record: dict) -> None:
    storage.write_atomic(run_path(tmp_dir), json.dumps(record, sort_keys=True, indent=1).encode())


def read_run(tmp_dir: str) -> dict | None:
    """The interrupted run's record, or None if it never got that far."""
    if not storage.exists(run_path(tmp_dir)):
        return None
    try:
        return json.loads(storage.read_bytes(run_path(tmp_dir)))
    except ValueError:
        return None


def delete_tmp(tmp_dir: str) -> None:
    """Deletes .prep-tmp with run.json last: a kill midway leaves the record that
    `--resume` checks a finished dataset against."""
    for name in storage.list_names(tmp_dir):
        if name != RUN:
            storage.delete(storage.join(tmp_dir, name))
    storage.delete(run_path(tmp_dir))
    storage.delete(tmp_dir)


def listing_path(tmp_dir: str, chunk: int) -> str:
    return storage.join(tmp_dir, "listing", f"chunk-{chunk:06d}.json")


def write_listing(tmp_dir: str, chunk: int, refs) -> None:
    storage.write_atomic(listing_path(tmp_dir, chunk), json.dumps([list(r) for r in refs]).encode())


def index_path(tmp_dir: str, chunk: int) -> str:
    return storage.join(tmp_dir, "spill", f"chunk-{chunk:06d}.json")


def write_chunk_index(tmp_dir: str, chunk: int, outcomes, spills: dict[int, int], inputs: list[str]) -> None:
    """Records a prepared chunk: outcomes, {spill id: bytes} of its spill files, input signatures."""
    data = {"spills": sorted(spills.items()), "outcomes": [[kind, list(value)] for kind, value in outcomes],
            "inputs": inputs}
    storage.write_atomic(index_path(tmp_dir, chunk), json.dumps(data).encode())


def read_chunk_index(tmp_dir: str, chunk: int) -> ChunkIndex | None:
    """The chunk's recorded outcomes if its index and all its spill files are complete, else None."""
    path = index_path(tmp_dir, chunk)
    try:
        if not storage.exists(path):
            return None
        data = json.loads(storage.read_bytes(path))
        for spill, size in data["spills"]:
            if storage.size(spill_path(tmp_dir, spill)) != size:
                return None
        return ChunkIndex([(kind, value) for kind, value in data["outcomes"]], data["inputs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_in_flight(tmp_dir: str) -> frozenset[str]:
    """Paths of the inputs that were being prepared when the run that wrote `tmp_dir` was killed.

    A record that cannot be read counts for nothing: it is written atomically, so only
    a damaged .prep-tmp holds one.
    """
    folder = storage.join(tmp_dir, "inflight")
    paths: set[str] = set()
    for name in storage.list_names(folder):
        if not name.endswith(".json"):
            continue  # a temporary file whose rename the kill prevented: its batch had not started
        try:
            paths.update(p for p in json.loads(storage.read_bytes(storage.join(folder, name))) if isinstance(p, str))
        except (OSError, ValueError, TypeError):
            continue
    return frozenset(paths)


def entries_digest(entries) -> str:
    """Digest of a shard's (or part's) planned entries, in write order."""
    digest = hashlib.sha256()
    for e in entries:
        digest.update(e.order)
        # `relabel` too: the same prepared record written with another label id is another record.
        digest.update(struct.pack(">QQQQ?QQq", e.spill, e.offset, e.length, e.label, e.converted, e.cut, e.image,
                                  e.relabel))
        digest.update(struct.pack(">Q", len(e.source)) + e.source)
    return digest.hexdigest()


def shard_sidecar(tmp_dir: str, filename: str) -> str:
    return storage.join(tmp_dir, "done", filename + ".json")


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


def pause_for_tests(point: str) -> None:
    """Sleeps as `PREP_TEST_PAUSE` asks at `point` (chunk, batch, shard or manifest); see the module docstring."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    for item in spec.split(","):
        name, _, seconds = item.partition("=")
        if name.strip() == point:
            time.sleep(float(seconds))
