"""The dedupe stage's per-image work files, so that only small elements travel between its steps. No Beam.

    .prep-tmp/groups/members-NNNNNN.pkl   a chunk's grouped images, one pickled slice per group batch:
                                          [(group, *Member)] (member_info), read by that batch's decide step
    .prep-tmp/groups/decided-NNNNNN.pkl   a group batch's decisions, one pickled slice per chunk: [Decision]
                                          (decide_batch), read by that chunk's regroup step
    .prep-tmp/groups/lines-NNNNNN.jsonl   a group batch's lines of duplicates.jsonl, sorted by first path, each
                                          with "_movable" (decide_batch); write_report merges them
    .prep-tmp/groups/rejects-NNNNNN.jsonl a group batch's policy rejects, [path, reason, detail] a line in
                                          rejects.jsonl's order (decide_batch); publish merges them

The steps pass a `Slice` (file, offset, length) instead of the images it holds. A
group batch is GROUPS_PER_BATCH groups in order of group id (`batch_of`), so a
decide step holds at most that many groups. Each file is written whole under a
temporary name and renamed (`storage.write_atomic`), its name and bytes fixed by
its chunk's or batch's contents: a retried bundle or a --resume rewrites it the same.
"""

from __future__ import annotations

import heapq
import json
import pickle
import typing

from prep.core import storage
from prep.core.accounting import sort_rejects
from prep.core.groups import Decision, Member
from prep.core.listing import Reject
from prep.core.workdir import WorkDir

GROUPS_PER_BATCH = 512  # groups decided by one step (at most `max_size` images each)
_PROTOCOL = 5


class Slice(typing.NamedTuple):
    """Where one step's records for another are: `length` bytes at `offset` of file `path`."""

    path: str
    offset: int
    length: int


def batch_of(rank: int) -> int:
    """The group batch of the group that is `rank`-th in order of group id."""
    return rank // GROUPS_PER_BATCH


def members_path(work: WorkDir, chunk: int) -> str:
    return storage.join(work.root, "groups", f"members-{chunk:06d}.pkl")


def decided_path(work: WorkDir, batch: int) -> str:
    return storage.join(work.root, "groups", f"decided-{batch:06d}.pkl")


def lines_path(work: WorkDir, batch: int) -> str:
    return storage.join(work.root, "groups", f"lines-{batch:06d}.jsonl")


def write_slices(path: str, parts: dict[int, list]) -> dict[int, Slice]:
    """Writes each key's records as one pickled slice, in key order; -> {key: its Slice}."""
    blobs, out, offset = [], {}, 0
    for key in sorted(parts):
        blob = pickle.dumps(parts[key], protocol=_PROTOCOL)
        out[key] = Slice(path, offset, len(blob))
        blobs.append(blob)
        offset += len(blob)
    storage.write_atomic(path, b"".join(blobs))
    return out


def read_slice(where: Slice) -> list:
    with storage.open_read(where.path) as f:
        f.seek(where.offset)
        return pickle.loads(storage.read_exact(f, where.length))


def write_members(work: WorkDir, chunk: int, by_batch: dict[int, list[tuple[int, Member]]]) -> dict[int, Slice]:
    """Records a chunk's grouped images by group batch: {batch: [(group, Member)]} -> {batch: Slice}."""
    return write_slices(members_path(work, chunk), {b: [(g, *m) for g, m in rows] for b, rows in by_batch.items()})


def read_members(where: Slice) -> list[tuple[int, Member]]:
    return [(row[0], Member(*row[1:])) for row in read_slice(where)]


def write_decisions(work: WorkDir, batch: int, by_chunk: dict[int, list[Decision]]) -> dict[int, Slice]:
    """Records a group batch's decisions by chunk: {chunk: [Decision]} -> {chunk: Slice}."""
    plain = {c: [(d.item, None if d.reject is None else tuple(d.reject), d.pin, d.movable) for d in ds]
             for c, ds in by_chunk.items()}
    return write_slices(decided_path(work, batch), plain)


def read_decisions(where: Slice) -> list[Decision]:
    return [Decision(item, None if reject is None else Reject(*reject), pin, movable)
            for item, reject, pin, movable in read_slice(where)]


def write_lines(work: WorkDir, batch: int, lines: list[dict]) -> None:
    """Records a group batch's lines of duplicates.jsonl, sorted as the report lists them."""
    lines = sorted(lines, key=first_path)
    text = "".join(json.dumps(x, sort_keys=True, ensure_ascii=True) + "\n" for x in lines)
    storage.write_atomic(lines_path(work, batch), text.encode())


def first_path(line: dict) -> str:
    return line["members"][0]["path"]


def rejects_path(work: WorkDir, batch: int) -> str:
    return storage.join(work.root, "groups", f"rejects-{batch:06d}.jsonl")


def write_rejects(work: WorkDir, batch: int, rejects: list[Reject]) -> None:
    """Records a group batch's policy rejects, in rejects.jsonl's order (`accounting.reject_order`). They wait
    here for publish, not in an element: a run may reject a large share of its inputs."""
    text = "".join(json.dumps(list(r), ensure_ascii=True) + "\n" for r in sort_rejects(rejects))
    storage.write_atomic(rejects_path(work, batch), text.encode())


def read_rejects(work: WorkDir, batch: int) -> typing.Iterator[Reject]:
    """A group batch's policy rejects, in order, one line at a time."""
    with storage.open_read(rejects_path(work, batch)) as f:
        for raw in f:
            yield Reject(*json.loads(raw))


def _read_lines(path: str) -> typing.Iterator[dict]:
    with storage.open_read(path) as f:
        for raw in f:
            yield json.loads(raw)


def merged_lines(work: WorkDir, batches: typing.Iterable[int]) -> typing.Iterator[dict]:
    """Every batch's lines in the report's order (by first path), one line of each batch held at a time."""
    return heapq.merge(*(_read_lines(lines_path(work, b)) for b in sorted(set(batches))), key=first_path)
