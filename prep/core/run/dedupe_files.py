"""The dedupe stage's work files, and what the planner and publish read of them. No Beam.

Their paths are `WorkDir`'s (prep/core/workdir.py). Binary files (the keys, where JSON would cost) are .npy
arrays one after another, the first FILE_VERSION: rows and keys files are written while preparing and read
back by --resume, which refuses another version (`read_arrays`). The others are JSON, every record an
object read back by name; a run writes them before it reads them, so they need no version:

    rows-NNNNNN.npy       the content keys of every good input chunk NNNNNN prepared, by PrepareChunk (key_rows.py)
    keys-NNNNNN.npy       a chunk's item ids and hashes (KEY_DTYPE), for the scan (`write_chunk_keys`)
    members-NNNNNN.jsonl  a chunk's grouped images, a `Slice` of lines per group batch: {"group", *Member}
                          (dedupe.member_info), read by that batch's decide step
    decided-BBBBBB.jsonl  a group batch's decisions, a Slice per chunk: {*Decision} (dedupe_decide.decide_batch),
                          read by that chunk's regroup step
    lines-BBBBBB.jsonl    a group batch's lines of duplicates.jsonl, sorted by first path, each with "_movable";
                          write_report merges them
    rejects-BBBBBB.jsonl  a group batch's policy rejects ({*Reject}), in rejects.jsonl's order; publish merges them
    units.json, <kind>_pins.json   merged user groups ({user group: unit}), the splits chosen ({unit: split})
    chunk-NNNNNN.json     what becomes of a chunk's grouped inputs: [{"spill", "offset", "pin"}], pin null when a
                          group policy rejected it (dedupe_decide.regroup; the planner reads it: `placer`)
    keys/<shard>.part-NNNNN.npy, <shard>.parts.json   where each shard's records came from (publish_keys.py)

An input is known by (spill, offset), which stays its own when --resume restages chunks in another order;
its id for the union-find is `item_id` (dense: the chunk whose index holds it now, and its place there). A
group batch is GROUPS_PER_BATCH groups in order of group id (`batch_of`), so a decide step holds at most
that many. Each file is written whole under a temporary name and renamed (`storage.write_atomic`), its
bytes fixed by its chunk's or batch's contents: a retried bundle or a --resume rewrites it the same.

The keys are those of the *stored* image (the prepared bytes, what the shard holds): its sha256 is the
record's image/key/sha256, and `prep leakage` computes the same keys from the shards. Hashing the prepared
image also never decodes an input outside the sandbox that --isolate sent it to.
"""

from __future__ import annotations

import heapq
import io
import json
import math
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any, BinaryIO, Protocol

import numpy as np

from prep.core import content_keys, storage
from prep.core.accounting import sort_rejects
from prep.core.errors import ResumeError
from prep.core.groups import Decision, DedupeOptions, Member, user_group
from prep.core.listing import Reject
from prep.core.ordering import MAX_CHUNK
from prep.core.run import checkpoints
from prep.core.workdir import WorkDir, parse_scan_keys_name

DUPLICATES_FILE = "duplicates.jsonl"  # in OUTPUT: the duplicate groups found, when there are any (dedupe.py)
FILE_VERSION = 1  # of the binary files: the first array of each
GROUPS_PER_BATCH = 512  # groups decided by one step (at most `max_size` images each)
NUM_HASHES = 1 + len(content_keys.CROP_SCALES)
KEY_DTYPE = np.dtype([("item", "<i8"), ("hashes", "<u8", (NUM_HASHES,))])
_PLACE = np.dtype([("spill", "<u8"), ("offset", "<u8")])
_VERSION = np.dtype("<u4")


class GroupNotes(typing.NamedTuple):
    """Counts for the manifest's `groups` (prep.core.manifest_parts.GroupCounts), added up by publish, and the
    group batches whose policy rejects publish reads (`read_rejects`)."""

    counts: tuple[tuple[str, int], ...]  # ((GroupCounts field, n), ...)
    reject_batches: tuple[int, ...] = ()


class Place(Protocol):  # where a prepared record waits (a PreparedRef, a plan Entry): spill file, offset there
    @property
    def spill(self) -> int: ...
    @property
    def offset(self) -> int: ...


def report_notes(header: dict[str, Any], batches: Iterable[int] = ()) -> GroupNotes:
    """The manifest's counts of duplicates.jsonl's header (`groups.summarize`), and its group batches."""
    names = {"groups": "duplicate_groups", "images": "duplicate_images"}
    return GroupNotes(
        tuple((names.get(k, k), v) for k, v in sorted(header.items()) if k not in ("format", "version")), tuple(batches)
    )


class Slice(typing.NamedTuple):
    """Where one step's records for another are: the `length` bytes at `offset` of file `path`."""

    path: str
    offset: int
    length: int


def item_id(chunk: int, position: int) -> int:
    """A dense id for the good input at `position` of chunk `chunk`'s index: chunk * MAX_CHUNK + position."""
    return chunk * MAX_CHUNK + position


def item_chunk(item: int) -> int:
    """The chunk whose index holds item `item`."""
    return item // MAX_CHUNK


def batch_of(rank: int) -> int:
    """The group batch of the group that is `rank`-th in order of group id."""
    return rank // GROUPS_PER_BATCH


def write_arrays(path: str, *arrays: np.ndarray) -> None:
    """Writes FILE_VERSION then `arrays`, as .npy arrays one after another (`np.load` reads them in turn
    from one open file, with allow_pickle=False: they are plain numbers)."""
    out = io.BytesIO()
    for array in (np.array(FILE_VERSION, _VERSION), *arrays):
        np.lib.format.write_array(out, array, allow_pickle=False)
    storage.write_atomic(path, out.getvalue())


def read_arrays(f: BinaryIO, path: str, *dtypes: np.dtype[Any], read: bool = True) -> list[Any]:
    """The arrays `write_arrays` wrote, from open file `f`, each of its dtype; without `read`, only the last
    one's length (its bytes are not read).

    Raises:
        ResumeError: the file is of another version or layout (an interrupted run of another tfrecord-prep).
    """
    out: list[Any] = []  # the arrays, or the last one's length
    for n, dtype in enumerate((_VERSION, *dtypes)):
        try:
            major, _ = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, _, found = read_header(f)
        except ValueError:
            found, shape = None, ()
        if found != dtype:
            raise ResumeError(
                f"{path} was written by another version of tfrecord-prep; run with --overwrite to start over"
            )
        count = math.prod(shape)
        if n == len(dtypes) and not read:
            return [*out, count]
        array = np.frombuffer(storage.read_exact(f, count * dtype.itemsize), dtype).reshape(shape)
        if n == 0 and int(array) != FILE_VERSION:
            raise ResumeError(
                f"{path} was written by another version of tfrecord-prep (file version {int(array)}); "
                "run with --overwrite to start over"
            )
        if n:
            out.append(array)
    return out


def write_chunk_keys(work: WorkDir, chunk: int, items: np.ndarray, hashes: np.ndarray) -> int:
    """Records a chunk's items and their hashes ((n, NUM_HASHES) uint64) packed (KEY_DTYPE, 48 bytes an
    item) for the scan tasks, and returns how many: an item whose keys are not `content_keys.comparable`
    is left out (it would pair with every flat picture)."""
    packed = np.zeros(len(items), KEY_DTYPE)
    packed["item"] = items
    packed["hashes"] = hashes
    packed = packed[content_keys.comparable_rows(packed["hashes"])]
    write_arrays(work.scan_keys(chunk), packed)
    return len(packed)


def chunk_keys_count(work: WorkDir, chunk: int) -> int | None:
    """How many items `write_chunk_keys` recorded for the chunk, or None if it has no key file."""
    path = work.scan_keys(chunk)
    if not storage.exists(path):
        return None
    with storage.open_read(path) as f:
        count: int = read_arrays(f, path, KEY_DTYPE, read=False)[0]
    return count


def forget_chunk_keys(work: WorkDir) -> None:
    """Deletes every chunk's key file: their item ids name chunks of a listing about to be staged again."""
    for name in storage.list_names(work.groups_folder):
        if parse_scan_keys_name(name) is not None:
            storage.delete(storage.join(work.groups_folder, name))


def read_scales(work: WorkDir, chunks: Iterable[int], scales: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(item ids, hashes of crop scales `scales`, a contiguous column each) of the chunks' items, one chunk
    file at a time."""
    items: list[np.ndarray] = []
    hashes: list[np.ndarray] = []
    for chunk in chunks:
        path = work.scan_keys(chunk)
        with storage.open_read(path) as f:
            (rows,) = read_arrays(f, path, KEY_DTYPE)
        items.append(rows["item"].copy())
        hashes.append(rows["hashes"][:, list(scales)])
    if not items:
        return np.zeros(0, np.int64), np.zeros((0, len(scales)), np.uint64)
    return np.concatenate(items), np.asfortranarray(np.concatenate(hashes))


def write_part_order(work: WorkDir, filename: str, part: int, entries: Iterable[Place]) -> None:
    """Records where a shard part's records came from, in the order written: (spill, offset) each. The
    sidecar is made from these and the spills' key rows at the end (`publish_keys`), so no part reads
    every spill's keys."""
    write_arrays(work.part_order(filename, part), np.array([(e.spill, e.offset) for e in entries], dtype=_PLACE))


def write_shard_parts(work: WorkDir, filename: str, parts: list[int]) -> None:
    storage.write_atomic(work.shard_parts(filename), json.dumps({"parts": parts}).encode())


def read_shard_order(work: WorkDir, filename: str) -> np.ndarray:
    """Where a shard's records came from ((spill, offset) each), in record order: its parts' in part order."""
    orders = []
    for part in json.loads(storage.read_bytes(work.shard_parts(filename)))["parts"]:
        path = work.part_order(filename, part)
        with storage.open_read(path) as f:
            orders += read_arrays(f, path, _PLACE)
    return np.concatenate(orders) if orders else np.zeros(0, _PLACE)


def write_units(work: WorkDir, units: dict[str, str]) -> None:
    """Records the user groups that duplicates merged: {user group: the unit pinning it}, merged ones only."""
    storage.write_atomic(work.units, json.dumps({k: u for k, u in sorted(units.items()) if k != u}).encode())


def read_units(work: WorkDir) -> dict[str, str]:
    units: dict[str, str] = json.loads(storage.read_bytes(work.units))
    return units


def write_choices(work: WorkDir, kind: str, pins: dict[str, str]) -> None:
    """Records the split `groups.balance_pins` chose per group: kind "duplicates" (keyed by a duplicate
    group's first path, groups no user group pins) or "users" (keyed by user group, merged ones by unit)."""
    storage.write_atomic(work.pins(kind), json.dumps(pins, sort_keys=True).encode())


def read_choices(work: WorkDir, kind: str) -> dict[str, str]:
    pins: dict[str, str] = json.loads(storage.read_bytes(work.pins(kind)))
    return pins


def write_groups(work: WorkDir, chunk: int, placed: dict[tuple[int, int], str | None]) -> None:
    """Records what becomes of a chunk's grouped inputs: {(spill, offset): pin, or None if rejected}."""
    rows = [{"spill": spill, "offset": offset, "pin": pin} for (spill, offset), pin in sorted(placed.items())]
    storage.write_atomic(work.placements(chunk), json.dumps(rows).encode())


def placer(work: WorkDir, chunk: int, grouped: bool) -> Callable[[Place], str | None]:
    """ref -> None (rejected by a group policy), the split it is pinned to, or "" (the planner's own).

    The placements that rank its refs (plan.rank_task) are the ones that counted them
    (prepare.chunk_counts in dedupe_decide.regroup), read back, so the two agree. `grouped` False: no
    grouping in this run.
    """
    if not grouped:
        return lambda ref: ""
    rows = json.loads(storage.read_bytes(work.placements(chunk)))
    placed: dict[tuple[int, int], str | None] = {(r["spill"], r["offset"]): r["pin"] for r in rows}
    return lambda ref: placed.get((ref.spill, ref.offset), "")


def user_keys(work: WorkDir, chunk: int, options: DedupeOptions) -> Callable[[str], str | None]:
    """path -> the user group of that input of chunk `chunk`, or None: its --group-by value, which the staged
    listing chunk holds (the chunk index holds the same inputs), or its --group-pattern match."""
    if options.group_by is not None:
        return {r.path: r.group for r in checkpoints.read_listing(work, chunk) if r.group is not None}.get
    pattern = options.group_pattern
    return lambda path: user_group(path, pattern)


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=True) + "\n"


def _write_slices(path: str, parts: dict[int, list[dict[str, Any]]]) -> dict[int, Slice]:
    """Writes each key's records as JSON lines, keys in order; -> {key: the Slice of its lines}."""
    blobs: list[bytes] = []
    out: dict[int, Slice] = {}
    offset = 0
    for key in sorted(parts):
        blob = "".join(map(_line, parts[key])).encode()
        out[key] = Slice(path, offset, len(blob))
        blobs.append(blob)
        offset += len(blob)
    storage.write_atomic(path, b"".join(blobs))
    return out


def _read_slice(where: Slice) -> list[dict[str, Any]]:
    with storage.open_read(where.path) as f:
        f.seek(where.offset)
        return [json.loads(line) for line in storage.read_exact(f, where.length).splitlines()]


def write_members(work: WorkDir, chunk: int, by_batch: dict[int, list[tuple[int, Member]]]) -> dict[int, Slice]:
    """Records a chunk's grouped images by group batch: {batch: [(group, Member)]} -> {batch: Slice}."""
    return _write_slices(
        work.members(chunk), {b: [{"group": g, **m._asdict()} for g, m in rows] for b, rows in by_batch.items()}
    )


def read_members(where: Slice) -> list[tuple[int, Member]]:
    return [(record.pop("group"), Member(**record)) for record in _read_slice(where)]


def write_decisions(work: WorkDir, batch: int, by_chunk: dict[int, list[Decision]]) -> dict[int, Slice]:
    """Records a group batch's decisions by chunk: {chunk: [Decision]} -> {chunk: Slice}."""
    return _write_slices(
        work.decisions(batch),
        {c: [{**d._asdict(), "reject": d.reject and d.reject._asdict()} for d in ds] for c, ds in by_chunk.items()},
    )


def read_decisions(where: Slice) -> list[Decision]:
    return [Decision(**{**r, "reject": r["reject"] and Reject(**r["reject"])}) for r in _read_slice(where)]


def write_lines(work: WorkDir, batch: int, lines: list[dict[str, Any]]) -> None:
    """Records a group batch's lines of duplicates.jsonl, sorted as the report lists them."""
    storage.write_atomic(work.report_lines(batch), "".join(map(_line, sorted(lines, key=first_path))).encode())


def first_path(line: dict[str, Any]) -> str:
    path: str = line["members"][0]["path"]
    return path


def _read_lines(path: str) -> typing.Iterator[dict[str, Any]]:
    with storage.open_read(path) as f:
        for raw in f:
            yield json.loads(raw)


def merged_lines(work: WorkDir, batches: typing.Iterable[int]) -> typing.Iterator[dict[str, Any]]:
    """Every batch's lines in the report's order (by first path), one line of each batch held at a time."""
    return heapq.merge(*(_read_lines(work.report_lines(b)) for b in sorted(set(batches))), key=first_path)


def write_rejects(work: WorkDir, batch: int, rejects: list[Reject]) -> None:
    """Records a group batch's policy rejects, in rejects.jsonl's order (`accounting.reject_order`). They wait
    here for publish, not in an element: a run may reject a large share of its inputs."""
    text = "".join(_line(r._asdict()) for r in sort_rejects(rejects))
    storage.write_atomic(work.policy_rejects(batch), text.encode())


def read_rejects(work: WorkDir, batch: int) -> typing.Iterator[Reject]:
    """A group batch's policy rejects, in order, one line at a time."""
    return (Reject(**record) for record in _read_lines(work.policy_rejects(batch)))


_PART_STRIDE = 1 << 20  # group batches a component part may number (each GROUPS_PER_BATCH groups)


def part_batch(part: int, rank: int) -> int:
    """The group batch of the `rank`-th group (by group id) of component part `part` (dedupe_components.py),
    after every batch `batch_of` numbers: batches stay GROUPS_PER_BATCH groups, numbered without a count of
    every part's groups first."""
    return (part + 1) * _PART_STRIDE + batch_of(rank)
