"""Parquet and Arrow rows' images held in the work directory, for the prepare step to read a batch at a time.

A row cannot be read alone: its row group's image column is decoded whole (table_files.py), so reading kept
rows one by one in the listing's seeded order decodes a row group per image once the files outgrow the
block cache. The listing on workers (beam_jobs/list_tables.py) reads each row group's image column once and
copies the images of the rows it lists, in row order, one file per table file (`WorkDir.members_data`); a
chunk's file (`WorkDir.chunk_members`: a JSON object here, a list for WebDataset members, held.py) holds the
byte ranges of those copies that hold its rows' images in its order, a range per run of rows adjacent in a
copy, and each row's length (-1: not copied, a null image or a row group whose images did not read). A
batch of the prepare step reads its rows' images by those ranges (`held.read_held`); a batch with a row not
copied, or a chunk without the file (the driver's listing, `--resume`), reads each row from its row group
(`table_files.read_row`), which says why one cannot be read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from prep.core import storage
from prep.core.listing import InputRef
from prep.core.sources.held import Held
from prep.core.sources.table_files import parse_row
from prep.core.workdir import WorkDir


def write_chunk_rows(work: WorkDir, chunk: int, places: Sequence[tuple[str, int, int]]) -> None:
    """Records where a chunk's rows' images are: (file, offset, length) each, in its order (length -1: not
    copied); rows next to each other in one file make one range."""
    files: dict[str, int] = {}
    ranges: list[list[int]] = []
    for path, offset, n in places:
        if n < 0:
            continue
        index = files.setdefault(path, len(files))
        if ranges and ranges[-1][0] == index and ranges[-1][2] == offset:
            ranges[-1][2] += n
        else:
            ranges.append([index, offset, offset + n])
    data = {"files": list(files), "ranges": ranges, "lengths": [n for _, _, n in places]}
    storage.write_atomic(work.chunk_members(chunk), json.dumps(data).encode())


def batches_held(work: WorkDir, chunk: int, refs: Sequence[InputRef], batch: int) -> list[Held | None]:
    """Per batch of `batch` refs of the chunk, where its rows' images are held; None for a batch that has a
    row not copied, all None when the chunk's are not held (no file, or refs that are no table rows)."""
    none: list[Held | None] = [None] * -(-len(refs) // batch)
    if not refs or parse_row(refs[0].path) is None:
        return none
    try:
        found = json.loads(storage.read_bytes(work.chunk_members(chunk)))
    except FileNotFoundError:
        return none
    if not isinstance(found, dict):
        return none
    files = found["files"]
    ranges = [(files[i], start, end) for i, start, end in found["ranges"]]
    lengths = [int(n) for n in found["lengths"]]
    if len(lengths) != len(refs) or sum(end - start for _, start, end in ranges) != sum(max(n, 0) for n in lengths):
        return none  # not this listing's (never expected): read the rows from their files
    out: list[Held | None] = []
    piece, offset = 0, 0  # where the batch's bytes start: ranges[piece], `offset` bytes in
    for first in range(0, len(refs), batch):
        want = lengths[first : first + batch]
        need, got = sum(max(n, 0) for n in want), []
        while need:
            path, start, end = ranges[piece]
            take = min(need, end - start - offset)
            if take:
                got.append((path, start + offset, start + offset + take))
            need -= take
            offset += take
            if start + offset == end:
                piece, offset = piece + 1, 0
        out.append(Held(tuple(got), tuple(want)) if min(want) >= 0 else None)
    return out
