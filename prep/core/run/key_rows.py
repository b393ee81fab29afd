"""The key rows files: the content keys of every good input a chunk prepared, for the dedupe stage
(`RowTable`) and publish (publish_keys.py). No Beam.

rows-NNNNNN.npy holds KEY_ROWS (where each record waits, its sha256 and hashes), then the inputs' paths
NUL-separated, as versioned .npy arrays (`dedupe_files.write_arrays`): PrepareChunk writes it, a --resume
reads it back (`read_rows`).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

from prep.core import storage
from prep.core.errors import ResumeError
from prep.core.run.dedupe_files import NUM_HASHES, read_arrays, write_arrays
from prep.core.workdir import BATCHES_PER_CHUNK, WorkDir

KEY_ROWS = np.dtype([("spill", "<u8"), ("offset", "<u8"), ("sha256", "u1", (32,)), ("hashes", "<u8", (NUM_HASHES,))])
_Spills = TypeVar("_Spills", int, npt.NDArray[np.uint64])  # a spill id, or an array of them


def rows_chunk(spill: _Spills) -> _Spills:
    """The chunk whose key rows file holds the keys of spill `spill`'s images: the chunk that prepared it
    (a resume with another seed stages inputs in other chunks, never in other spills)."""
    return spill // BATCHES_PER_CHUNK


def write_rows(work: WorkDir, chunk: int, rows: np.ndarray, paths: list[str]) -> None:
    """Records the content keys of every good input a chunk prepared (KEY_ROWS: where its record waits,
    its sha256 and hashes), then their paths, NUL-separated (a path cannot hold NUL).
    PrepareChunk writes it before the chunk's index, so a chunk with an index has its rows."""
    block = b"\0".join(path.encode("utf-8", "surrogateescape") for path in paths)
    write_arrays(work.key_rows(chunk), rows, np.frombuffer(block, np.uint8))


def read_rows(work: WorkDir, chunk: int) -> tuple[np.ndarray, bytes]:
    """A chunk's KEY_ROWS and their paths as written: UTF-8 (surrogateescape), NUL-separated, in one byte string.

    Raises:
        ResumeError: the chunk was prepared without keys (by a run with --duplicates off), or by another version.
    """
    path = work.key_rows(chunk)
    if not storage.exists(path):
        raise ResumeError(
            "the interrupted run read images without computing their content keys "
            "(--duplicates off); resume with --duplicates off, or run with --overwrite"
        )
    with storage.open_read(path) as f:
        rows, block = read_arrays(f, path, KEY_ROWS, np.dtype(np.uint8))
    return rows, block.tobytes()


def split_paths(block: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of each path in a NUL-separated block of them."""
    if not block:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cuts = np.flatnonzero(np.frombuffer(block, np.uint8) == 0)
    return np.concatenate([[0], cuts + 1]), np.concatenate([cuts, [len(block)]])


class RowTable:
    """The key row of any prepared input by (spill, offset), reading each chunk's rows file once."""

    def __init__(self, work: WorkDir) -> None:
        self._work = work
        self._chunks: dict[int, tuple[dict[tuple[int, int], int], np.ndarray]] = {}

    def get(self, spill: int, offset: int) -> np.void | None:
        """The input's KEY_ROWS row, or None if it has no keys (it did not decode again: not expected)."""
        chunk = rows_chunk(spill)
        if chunk not in self._chunks:
            rows, _ = read_rows(self._work, chunk)
            self._chunks[chunk] = (
                dict(zip(zip(rows["spill"].tolist(), rows["offset"].tolist()), range(len(rows)))),
                rows,
            )
        where, rows = self._chunks[chunk]
        at = where.get((spill, offset))
        return None if at is None else rows[at]
