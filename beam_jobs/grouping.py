"""The work directory's files of the dedupe stage, and what the planner reads of them. No Beam.

    .prep-tmp/groups/rows-NNNNNN.bin      the content keys of every good input chunk NNNNNN prepared (KEY_ROWS,
                                          then their paths), by PrepareChunk (`write_rows`)
    .prep-tmp/groups/chunk-NNNNNN.json    a chunk's inputs in a duplicate or user group: [[spill, offset, pin]],
                                          pin null when a group policy rejected it (beam_jobs/dedupe.py)
    .prep-tmp/groups/units.json           user groups merged by duplicates: {user group: unit} (groups.merge_units)
    .prep-tmp/groups/keys-NNNNNN.bin      a chunk's item ids and hashes, packed (KEY_DTYPE), for the scan tasks
    .prep-tmp/groups/members-*, decided-*, lines-*   the grouped images' members, decisions and report lines,
                                          by chunk and group batch (beam_jobs/group_batches.py)

An input is known by (spill, offset), which stays its own when --resume restages
chunks in another order; its id for the union-find is `item_id` (dense: the chunk
whose index holds it now, and its place there).

The keys are those of the *stored* image (the prepared bytes, what the shard
holds): its sha256 is the record's image/key/sha256, and `prep leakage` computes
the same keys from the shards. Hashing the prepared image also never decodes an
input outside the sandbox that --isolate sent it to.
"""

from __future__ import annotations

import json
import typing

import numpy as np

from beam_jobs import checkpoints
from prep.core import content_keys, storage
from prep.core.errors import ResumeError
from prep.core.groups import DedupeOptions, user_group
from prep.core.ordering import MAX_CHUNK
from prep.core.workdir import BATCHES_PER_CHUNK, WorkDir

DUPLICATES_FILE = "duplicates.jsonl"  # in OUTPUT: the duplicate groups found, when there are any (dedupe.py)


class GroupNotes(typing.NamedTuple):
    """Counts for the manifest's `groups` (prep.core.manifest_parts.GroupCounts), added up by publish, and the
    group batches whose policy rejects publish reads (group_batches.read_rejects)."""

    counts: tuple  # ((GroupCounts field, n), ...)
    reject_batches: tuple = ()


def report_notes(header: dict, batches=()) -> GroupNotes:
    """The manifest's counts of duplicates.jsonl's header (`groups.summarize`), and its group batches."""
    names = {"groups": "duplicate_groups", "images": "duplicate_images"}
    return GroupNotes(tuple((names.get(k, k), v) for k, v in sorted(header.items()) if k not in ("format", "version")),
                      tuple(batches))


def item_id(chunk: int, position: int) -> int:
    """A dense id for the good input at `position` of chunk `chunk`'s index: chunk * MAX_CHUNK + position."""
    return chunk * MAX_CHUNK + position


def item_chunk(item: int) -> int:
    """The chunk whose index holds item `item`."""
    return item // MAX_CHUNK


def groups_path(work: WorkDir, chunk: int) -> str:
    return storage.join(work.root, "groups", f"chunk-{chunk:06d}.json")


NUM_HASHES = 1 + len(content_keys.CROP_SCALES)
KEY_DTYPE = np.dtype([("item", "<i8"), ("hashes", "<u8", (NUM_HASHES,))])


def chunk_keys_path(work: WorkDir, chunk: int) -> str:
    return storage.join(work.root, "groups", f"keys-{chunk:06d}.bin")


def write_chunk_keys(work: WorkDir, chunk: int, items: np.ndarray, hashes: np.ndarray) -> int:
    """Records a chunk's items and their hashes ((n, NUM_HASHES) uint64) packed (KEY_DTYPE, 48 bytes an
    item) for the scan tasks, and returns how many: an item whose keys are not `content_keys.comparable`
    is left out (it would pair with every flat picture)."""
    packed = np.zeros(len(items), KEY_DTYPE)
    packed["item"] = items
    packed["hashes"] = hashes
    packed = packed[content_keys.comparable_rows(packed["hashes"])]
    storage.write_atomic(chunk_keys_path(work, chunk), packed.tobytes())
    return len(packed)


def chunk_keys_count(work: WorkDir, chunk: int) -> int | None:
    """How many items `write_chunk_keys` recorded for the chunk, or None if it has no key file."""
    size = storage.size(chunk_keys_path(work, chunk))
    return None if size is None else size // KEY_DTYPE.itemsize


def forget_chunk_keys(work: WorkDir) -> None:
    """Deletes every chunk's key file: their item ids name chunks of a listing about to be staged again."""
    folder = storage.join(work.root, "groups")
    for name in storage.list_names(folder):
        if name.startswith("keys-"):
            storage.delete(storage.join(folder, name))


def read_scales(work: WorkDir, chunks, scales) -> tuple[np.ndarray, np.ndarray]:
    """(item ids, hashes of crop scales `scales`, a contiguous column each) of the chunks' items, one chunk
    file at a time."""
    items, hashes = [], []
    for chunk in chunks:
        rows = np.frombuffer(storage.read_bytes(chunk_keys_path(work, chunk)), KEY_DTYPE)
        items.append(rows["item"].copy())
        hashes.append(rows["hashes"][:, list(scales)])
    if not items:
        return np.zeros(0, np.int64), np.zeros((0, len(scales)), np.uint64)
    return np.concatenate(items), np.asfortranarray(np.concatenate(hashes))


def units_path(work: WorkDir) -> str:
    return storage.join(work.root, "groups", "units.json")


def write_units(work: WorkDir, units: dict[str, str]) -> None:
    """Records the user groups that duplicates merged: {user group: the unit pinning it}, merged ones only."""
    storage.write_atomic(units_path(work), json.dumps({k: u for k, u in sorted(units.items()) if k != u}).encode())


def read_units(work: WorkDir) -> dict[str, str]:
    return json.loads(storage.read_bytes(units_path(work)))


def choices_path(work: WorkDir, kind: str) -> str:
    return storage.join(work.root, "groups", f"{kind}_pins.json")


def write_choices(work: WorkDir, kind: str, pins: dict[str, str]) -> None:
    """Records the split `groups.balance_pins` chose per group: kind "duplicates" (keyed by a duplicate
    group's first path, groups no user group pins) or "users" (keyed by user group, merged ones by unit)."""
    storage.write_atomic(choices_path(work, kind), json.dumps(pins, sort_keys=True).encode())


def read_choices(work: WorkDir, kind: str) -> dict[str, str]:
    return json.loads(storage.read_bytes(choices_path(work, kind)))


KEY_ROWS = np.dtype([("spill", "<u8"), ("offset", "<u8"), ("sha256", "u1", (32,)), ("hashes", "<u8", (NUM_HASHES,))])


def rows_path(work: WorkDir, chunk: int) -> str:
    return storage.join(work.root, "groups", f"rows-{chunk:06d}.bin")


def rows_chunk(spill: int) -> int:
    """The chunk whose key rows file holds the keys of spill `spill`'s images: the chunk that prepared it
    (a resume with another seed stages inputs in other chunks, never in other spills)."""
    return spill // BATCHES_PER_CHUNK


def write_rows(work: WorkDir, chunk: int, rows: np.ndarray, paths: list[str]) -> None:
    """Records the content keys of every good input a chunk prepared (KEY_ROWS: where its record waits,
    its sha256 and hashes), then their paths, NUL-separated (a path cannot hold NUL), after a count.
    PrepareChunk writes it before the chunk's index, so a chunk with an index has its rows."""
    block = (len(rows).to_bytes(4, "little") + rows.tobytes()
             + b"\0".join(path.encode("utf-8", "surrogateescape") for path in paths))
    storage.write_atomic(rows_path(work, chunk), block)


def read_rows(work: WorkDir, chunk: int) -> tuple[np.ndarray, bytes]:
    """A chunk's KEY_ROWS and their paths as written: UTF-8 (surrogateescape), NUL-separated, in one byte string.

    Raises:
        ResumeError: the chunk was prepared without keys (by a run with --duplicates off).
    """
    path = rows_path(work, chunk)
    if not storage.exists(path):
        raise ResumeError("the interrupted run read images without computing their content keys "
                          "(--duplicates off); resume with --duplicates off, or run with --overwrite")
    data = storage.read_bytes(path)
    n = int.from_bytes(data[:4], "little")
    stop = 4 + n * KEY_ROWS.itemsize
    return np.frombuffer(data[4:stop], KEY_ROWS), data[stop:]


def split_paths(block: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of each path in a NUL-separated block of them."""
    if not block:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cuts = np.flatnonzero(np.frombuffer(block, np.uint8) == 0)
    return np.concatenate([[0], cuts + 1]), np.concatenate([cuts, [len(block)]])


class RowTable:
    """The key row of any prepared input by (spill, offset), reading each chunk's rows file once."""

    def __init__(self, work: WorkDir):
        self._work = work
        self._chunks: dict[int, tuple[dict, np.ndarray]] = {}

    def get(self, spill: int, offset: int):
        """The input's KEY_ROWS row, or None if it has no keys (it did not decode again: not expected)."""
        chunk = rows_chunk(spill)
        if chunk not in self._chunks:
            rows, _ = read_rows(self._work, chunk)
            self._chunks[chunk] = (dict(zip(zip(rows["spill"].tolist(), rows["offset"].tolist()), range(len(rows)))),
                                   rows)
        where, rows = self._chunks[chunk]
        at = where.get((spill, offset))
        return None if at is None else rows[at]


def part_keys_path(work: WorkDir, filename: str, part: int) -> str:
    return storage.join(work.root, "keys", f"{filename}.part-{part:05d}.bin")


_PLACE = np.dtype([("spill", "<u8"), ("offset", "<u8")])


def write_part_order(work: WorkDir, filename: str, part: int, entries) -> None:
    """Records where a shard part's records came from, in the order written: (spill, offset) each. The
    sidecar is made from these and the spills' key rows at the end (`keys_join`), so no part reads
    every spill's keys."""
    rows = np.array([(e.spill, e.offset) for e in entries], dtype=_PLACE)
    storage.write_atomic(part_keys_path(work, filename, part), rows.tobytes())


def shard_parts_path(work: WorkDir, filename: str) -> str:
    return storage.join(work.root, "keys", f"{filename}.parts.json")


def write_shard_parts(work: WorkDir, filename: str, parts: list[int]) -> None:
    storage.write_atomic(shard_parts_path(work, filename), json.dumps(parts).encode())


def read_shard_order(work: WorkDir, filename: str) -> np.ndarray:
    """Where a shard's records came from ((spill, offset) each), in record order: its parts' in part order."""
    parts = json.loads(storage.read_bytes(shard_parts_path(work, filename)))
    return np.frombuffer(b"".join(storage.read_bytes(part_keys_path(work, filename, p)) for p in parts), _PLACE)


def write_groups(work: WorkDir, chunk: int, placed: dict[tuple[int, int], str | None]) -> None:
    """Records what becomes of a chunk's grouped inputs: {(spill, offset): pin, or None if rejected}."""
    rows = [[spill, offset, pin] for (spill, offset), pin in sorted(placed.items())]
    storage.write_atomic(groups_path(work, chunk), json.dumps(rows).encode())


def placer(work: WorkDir, chunk: int, grouped: bool):
    """ref -> None (rejected by a group policy), the split it is pinned to, or "" (the planner's own).

    The placements that rank its refs (plan_shards.rank_task) are the ones that counted them
    (prepare.chunk_counts in dedupe.regroup), read back, so the two agree. `grouped` False: no grouping
    in this run.
    """
    if not grouped:
        return lambda ref: ""
    rows = json.loads(storage.read_bytes(groups_path(work, chunk)))
    placed = {(spill, offset): pin for spill, offset, pin in rows}
    return lambda ref: placed.get((ref.spill, ref.offset), "")


def user_keys(work: WorkDir, chunk: int, options: DedupeOptions):
    """path -> the user group of that input of chunk `chunk`, or None: its --group-by value, which the staged
    listing chunk holds (the chunk index holds the same inputs), or its --group-pattern match."""
    if options.group_by is not None:
        return {r.path: r.group for r in checkpoints.read_listing(work, chunk) if r.group is not None}.get
    pattern = options.group_pattern
    return lambda path: user_group(path, pattern)
