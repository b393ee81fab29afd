"""OUTPUT/content_keys.jsonl from the work directory's key files, in memory bounded by a chunk and a shard. No Beam.

A record's keys are in the rows file of the chunk that prepared it (`key_rows.write_rows`), and a shard's
records are (spill, offset) places in its part files (`dedupe_files.write_part_order`); a shard draws from every
chunk. An external join matches the two without holding either whole:

1. the shards' places, each with where it goes (shard, record), are bucketed by the chunk holding its keys;
2. chunk by chunk, its rows file is read once and joined with its bucket: each record's sha256, hashes and
   path, bucketed by shard;
3. shard by shard, its records are put in record order and its lines written.

Buckets travel through run files in `WorkDir.join_folder` (deleted before and after): what a step gathered,
up to `run_bytes`, written once as [bucket, size, payload] for each bucket in ascending order. The next step
reads all runs bucket by bucket, opening a run only to read its next bucket. So memory holds a few times
`run_bytes`, one chunk and one shard, whatever the number of records; the files made grow by one per
`run_bytes` of keys; at most two are open at once (one read, one written). A run is written whole, never
appended to: an object store cannot append.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from prep.core import keys_sidecar, storage
from prep.core.run import dedupe_files, key_rows
from prep.core.workdir import WorkDir

RUN_BYTES = 1 << 20  # what a step gathers before writing a run (it holds 2-3 times that while sorting)
LINES_AT_ONCE = 1024  # records of a shard formatted into one piece of the file (~400 KB)

_HEAD = np.dtype([("bucket", "<u8"), ("size", "<u8")])
_WANT = np.dtype([("key", "<u8"), ("shard", "<u4"), ("record", "<u4")])  # a record to find, and where it goes
_T = TypeVar("_T")
_U = TypeVar("_U")
ShardRef = tuple[str, str, str]  # (split, shard file name, the shard's sha256)
_JOINED = np.dtype(
    [
        ("shard", "<u4"),
        ("record", "<u4"),
        ("sha256", "u1", (32,)),
        ("hashes", "<u8", (dedupe_files.NUM_HASHES,)),
        ("path", "<u4"),
    ]
)  # path: its length in bytes


def write_sidecar(output: str, work: WorkDir, shards: Sequence[ShardRef], run_bytes: int = RUN_BYTES) -> None:
    """Writes OUTPUT/content_keys.jsonl (prep.core.keys_sidecar) for `shards`, in that order.

    A shard holding a record without keys is left out (`prep leakage` then hashes it itself).

    Args:
        output: the dataset's folder.
        work: its work directory, with the chunks' rows files and the shards' part orders.
        shards: [(split, shard file name, the shard's sha256)].
        run_bytes: what each step of the join gathers before writing a run file.
    """
    storage.delete(work.join_folder)  # the runs of a publish killed meanwhile
    try:
        places = _place_runs(work, shards, run_bytes)
        joined, unkeyed = _joined_runs(work, places, run_bytes)

        def lines() -> Iterator[bytes]:
            yield keys_sidecar.header_line()
            for shard, payloads in _merged(joined):  # a shard without records has no bucket, nor lines
                if shard not in unkeyed:
                    yield from _shard_lines(shards[shard], payloads)

        storage.write_streamed(storage.join(output, keys_sidecar.FILENAME), lines())
    finally:
        storage.delete(work.join_folder)


def _place_runs(work: WorkDir, shards: Sequence[ShardRef], run_bytes: int) -> list[str]:
    """Step 1: run files of every shard's records as _WANT rows, bucketed by the chunk holding their keys."""

    def wants() -> Iterator[np.ndarray]:
        for shard, (_, filename, _) in enumerate(shards):
            places = dedupe_files.read_shard_order(work, filename)
            want = np.zeros(len(places), _WANT)
            want["key"], want["shard"], want["record"] = _key(places), shard, np.arange(len(places))
            yield want

    return [
        _write_places(work.join_run("places", n), want)
        for n, want in enumerate(_batched(wants(), run_bytes, lambda w: w.nbytes, np.concatenate))
    ]


def _write_places(path: str, want: np.ndarray) -> str:
    """Writes a run of _WANT rows by chunk; returns its path."""
    order = np.argsort(want["key"], kind="stable")
    chunks = key_rows.rows_chunk(want["key"][order] >> np.uint64(32))
    return _write_run(path, ((chunk, want[order[a:b]].tobytes()) for chunk, a, b in _cuts(chunks)))


def _joined_runs(work: WorkDir, places: list[str], run_bytes: int) -> tuple[list[str], set[int]]:
    """Step 2: run files of the records joined with their key rows, bucketed by shard (`_pack`); and the
    shards that hold a record without a key row."""
    unkeyed: set[int] = set()

    def chunks() -> Iterator[tuple[np.ndarray, bytes]]:
        for chunk, payloads in _merged(places):
            want = np.frombuffer(b"".join(payloads), _WANT)
            found, joined, paths = _join(want, *key_rows.read_rows(work, chunk))
            unkeyed.update(want["shard"][~found].tolist())
            yield joined, paths

    def concat(held: list[tuple[np.ndarray, bytes]]) -> tuple[np.ndarray, bytes]:
        return np.concatenate([joined for joined, _ in held]), b"".join(paths for _, paths in held)

    runs = [
        _write_joined(work.join_run("joined", n), *held)
        for n, held in enumerate(_batched(chunks(), run_bytes, lambda h: h[0].nbytes + len(h[1]), concat))
    ]
    return runs, unkeyed


def _join(want: np.ndarray, rows: np.ndarray, block: bytes) -> tuple[np.ndarray, np.ndarray, bytes]:
    """(whether each wanted record has a key row, _JOINED rows of those that have, their paths end to end)."""
    ids = _key(rows)
    order = np.argsort(ids, kind="stable")  # a key found twice: its first row, as written
    at = np.searchsorted(ids[order], want["key"])
    found = at < len(ids)
    found[found] = ids[order[at[found]]] == want["key"][found]
    row = order[at[found]]
    joined = np.zeros(len(row), _JOINED)
    joined["shard"], joined["record"] = want["shard"][found], want["record"][found]
    joined["sha256"], joined["hashes"] = rows["sha256"][row], rows["hashes"][row]
    starts, ends = (a[row] for a in key_rows.split_paths(block))
    joined["path"] = ends - starts
    return found, joined, _gather(block, starts, ends)


def _write_joined(path: str, joined: np.ndarray, paths: bytes) -> str:
    """Writes a run of joined records (_JOINED rows, their paths end to end) by shard; returns its path."""
    ends = np.cumsum(joined["path"], dtype=np.int64)
    starts = ends - joined["path"]
    order = np.argsort(joined["shard"], kind="stable")
    return _write_run(
        path,
        (
            (shard, _pack(joined[at], _gather(paths, starts[at], ends[at])))
            for shard, at in ((s, order[a:b]) for s, a, b in _cuts(joined["shard"][order]))
        ),
    )


def _pack(joined: np.ndarray, paths: bytes) -> bytes:
    """A shard's bucket of joined records: their count, their _JOINED rows, then their paths end to end."""
    return len(joined).to_bytes(8, "little") + joined.tobytes() + paths


def _unpack(payloads: list[bytes]) -> tuple[np.ndarray, bytes]:
    """The _JOINED rows and paths of a shard's buckets, one after the other."""
    rows, paths = [], []
    for payload in payloads:
        stop = 8 + int.from_bytes(payload[:8], "little") * _JOINED.itemsize
        rows.append(np.frombuffer(payload[8:stop], _JOINED))
        paths.append(payload[stop:])
    return np.concatenate(rows), b"".join(paths)


def _shard_lines(shard: ShardRef, payloads: list[bytes]) -> typing.Iterator[bytes]:
    """Step 3: a shard's lines, in record order, LINES_AT_ONCE at a time."""
    split, filename, digest = shard
    joined, paths = _unpack(payloads)
    ends = np.cumsum(joined["path"], dtype=np.int64)
    starts = ends - joined["path"]
    order = np.argsort(joined["record"], kind="stable")
    for at in range(0, len(order), LINES_AT_ONCE):
        rows = order[at : at + LINES_AT_ONCE]
        names = [
            paths[a:b].decode("utf-8", "surrogateescape") for a, b in zip(starts[rows].tolist(), ends[rows].tolist())
        ]
        yield keys_sidecar.shard_lines(
            split,
            filename,
            digest,
            joined["record"][rows].tolist(),
            names,
            joined["sha256"][rows].tobytes().hex(),
            joined["hashes"][rows],
        ).encode()


def _key(places: np.ndarray) -> np.ndarray:
    """One uint64 per (spill, offset), ordered as they are."""
    key: np.ndarray = (places["spill"] << np.uint64(32)) | places["offset"]
    return key


def _gather(block: bytes, starts: np.ndarray, ends: np.ndarray) -> bytes:
    return b"".join(block[a:b] for a, b in zip(starts.tolist(), ends.tolist()))


def _batched(
    items: Iterable[_T], run_bytes: int, size: Callable[[_T], int], concat: Callable[[list[_T]], _U]
) -> Iterator[_U]:
    """`concat` of consecutive items whose `size` adds up to `run_bytes` (the last one less), the items
    let go before it is handed on."""
    held: list[_T] = []
    total = 0
    for item in items:
        held.append(item)
        total += size(item)
        if total >= run_bytes:
            batch, held, total = concat(held), [], 0
            yield batch
    if held:
        batch, held = concat(held), []
        yield batch


def _cuts(buckets: np.ndarray) -> typing.Iterator[tuple[int, int, int]]:
    """(bucket, start, stop) of each run of equal values in a sorted array."""
    values, starts = np.unique(buckets, return_index=True)
    return zip(values.tolist(), starts.tolist(), np.append(starts[1:], len(buckets)).tolist())


def _write_run(path: str, buckets: typing.Iterable[tuple[int, bytes]]) -> str:
    """Writes (bucket, payload) pairs, buckets ascending, as a run file; returns its path."""
    with storage.open_write(path) as f:
        for bucket, payload in buckets:
            f.write(np.array((bucket, len(payload)), _HEAD).tobytes())
            f.write(payload)
    return path


class _Run:
    """A run file read a bucket at a time, in order; `bucket` is the next one's, None past the last."""

    def __init__(self, path: str) -> None:
        self._path, self._at, self._size = path, 0, 0
        self.bucket: int | None = None
        self._head(self._read(_HEAD.itemsize))

    def take(self) -> bytes:
        """The payload of bucket `bucket`, reading the head of the next in the same visit."""
        data = self._read(self._size + _HEAD.itemsize)
        payload = data[: self._size]
        self._head(data[self._size :])
        return payload

    def _read(self, n: int) -> bytes:
        with storage.open_read(self._path) as f:
            f.seek(self._at)
            data = storage.read_exact(f, n)
        self._at += len(data)
        return data

    def _head(self, data: bytes) -> None:
        self.bucket, self._size = np.frombuffer(data, _HEAD)[0].tolist() if data else (None, 0)


def _merged(paths: list[str]) -> typing.Iterator[tuple[int, list[bytes]]]:
    """(bucket, its payloads from each run holding it) for every bucket of the runs, ascending."""
    runs = [_Run(path) for path in paths]
    while buckets := [r.bucket for r in runs if r.bucket is not None]:
        bucket = min(buckets)
        yield bucket, [r.take() for r in runs if r.bucket == bucket]
