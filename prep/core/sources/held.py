"""WebDataset members' bytes held in the work directory, in a chunk's order, for the prepare step.

The listing on workers copies a remote shard's members, as it streams the shard to list it, into
files in each group's rank order (beam_jobs/list_shards.py), and records per chunk the byte ranges of those
files that hold its members, in the chunk's order (`WorkDir.chunk_members`). A batch of the prepare step then
reads its members with one ranged read (two where its members straddle two files), not one per member:
requests per image from tar shards far below one (docs/benchmarks.md). A member's length is in its path
(`webdataset.member_path`), so the ranges need no index of their own. A chunk without them (a local SOURCE,
a listing made on the driver) reads each member from its shard (`webdataset.read_member`).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Sequence

from prep.core import storage
from prep.core.listing import InputRef
from prep.core.sources import webdataset
from prep.core.workdir import WorkDir

Range = tuple[str, int, int]  # (file, start, end)


class Held(typing.NamedTuple):
    """Where a batch's members' bytes are: `ranges` joined, cut by `lengths` (one per input, in order)."""

    ranges: tuple[Range, ...]
    lengths: tuple[int, ...]


def write_chunk_ranges(work: WorkDir, chunk: int, ranges: Sequence[Range]) -> None:
    storage.write_atomic(work.chunk_members(chunk), json.dumps([list(r) for r in ranges]).encode())


def batches_held(work: WorkDir, chunk: int, refs: Sequence[InputRef], batch: int) -> list[Held | None]:
    """Per batch of `batch` refs of the chunk, where its members' bytes are held; all None when they are not."""
    none: list[Held | None] = [None] * -(-len(refs) // batch)
    lengths = [webdataset.parse_member(r.path) for r in refs]
    if not refs or any(w is None for w in lengths):
        return none
    try:
        ranges = [tuple(r) for r in json.loads(storage.read_bytes(work.chunk_members(chunk)))]
    except FileNotFoundError:
        return none
    sizes = [w[2] for w in lengths if w is not None]
    if sum(end - start for _, start, end in ranges) != sum(sizes):
        return none  # not this listing's (never expected): read from the shards
    out: list[Held | None] = []
    piece, offset = 0, 0  # where the batch starts: ranges[piece], `offset` bytes in
    for first in range(0, len(refs), batch):
        want = sizes[first : first + batch]
        need, got = sum(want), []
        while need:
            path, start, end = ranges[piece]
            take = min(need, end - start - offset)
            if take:
                got.append((path, start + offset, start + offset + take))
            need -= take
            offset += take
            if start + offset == end:
                piece, offset = piece + 1, 0
        out.append(Held(tuple(got), tuple(want)))
    return out


def read_held(held: Held) -> list[bytes] | None:
    """The batch's members' bytes, one ranged read a range; None if they cannot be read (then from the shards)."""
    try:
        data = b"".join(_read(path, start, end) for path, start, end in held.ranges)
    except Exception:  # each file system raises its own types; the shards are the fallback
        return None
    if len(data) != sum(held.lengths):
        return None
    out, at = [], 0
    for n in held.lengths:
        out.append(data[at : at + n])
        at += n
    return out


def _read(path: str, start: int, end: int) -> bytes:
    with storage.open_read(path) as f:
        f.seek(start)
        return storage.read_exact(f, end - start)
