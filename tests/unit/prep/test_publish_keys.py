"""content_keys.jsonl from the work files (prep/core/run/publish_keys.py): the same bytes as the in-memory table it
replaced, whatever the run size, multi-part shards and a shard with a record without keys included; no run
file left behind; object-store paths; a chunk prepared without keys is refused as before."""

from __future__ import annotations

import json
import os
import types

import numpy as np
import pytest

from prep.core import keys_sidecar, storage
from prep.core.errors import ResumeError
from prep.core.run import dedupe_files, key_rows, publish_keys
from prep.core.workdir import BATCH, BATCHES_PER_CHUNK, WorkDir

CHUNKS = 5


def _part_order(work: WorkDir, filename: str, part: int) -> np.ndarray:
    """A part's order file read by numpy alone (no pickle): the file's version, then the (spill, offset) rows."""
    with open(work.part_order(filename, part), "rb") as f:
        assert np.load(f) == dedupe_files.FILE_VERSION
        return np.load(f)


def reference_sidecar(output: str, work: WorkDir, shards) -> None:
    """grouping.write_sidecar as of 17e8979: every chunk's key rows in one table, then the lines."""
    orders = {}
    for _, filename, _ in shards:
        parts = json.loads(storage.read_bytes(work.shard_parts(filename)))["parts"]
        orders[filename] = [_part_order(work, filename, p) for p in parts]
    spills = np.unique(
        np.concatenate([o["spill"] for parts in orders.values() for o in parts] or [np.zeros(0, np.uint64)])
    )
    ids, shas, hashes = [], [], []
    paths, starts, ends = bytearray(), [], []
    for chunk in np.unique(spills // np.uint64(BATCHES_PER_CHUNK)).tolist():
        rows, block = key_rows.read_rows(work, chunk)
        ids.append((rows["spill"] << np.uint64(32)) | rows["offset"])
        shas.append(rows["sha256"])
        hashes.append(rows["hashes"])
        first, last = key_rows.split_paths(block)
        starts.append(len(paths) + first)
        ends.append(len(paths) + last)
        paths += block
    starts = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    ends = np.concatenate(ends) if ends else np.zeros(0, np.int64)
    table = np.concatenate(ids) if ids else np.zeros(0, np.uint64)
    shas = np.concatenate(shas) if shas else np.zeros((0, 32), np.uint8)
    hashes = np.concatenate(hashes) if hashes else np.zeros((0, dedupe_files.NUM_HASHES), np.uint64)
    order = np.argsort(table, kind="stable")
    table = table[order]

    def lines():
        yield keys_sidecar.header_line()
        for split, filename, digest in shards:
            wanted = np.concatenate(orders[filename]) if orders[filename] else np.zeros(0, dedupe_files._PLACE)
            key = (wanted["spill"] << np.uint64(32)) | wanted["offset"]
            at = np.minimum(np.searchsorted(table, key), max(len(table) - 1, 0))
            if len(key) and not (len(table) and np.array_equal(table[at], key)):
                continue
            rows = order[at]
            yield "".join(
                keys_sidecar.record_line(
                    split, filename, digest, i, paths[a:b].decode("utf-8", "surrogateescape"), sha.hex(), h
                )
                for i, (a, b, sha, h) in enumerate(
                    zip(starts[rows].tolist(), ends[rows].tolist(), map(bytes, shas[rows]), hashes[rows].tolist())
                )
            ).encode()

    storage.write_streamed(storage.join(output, keys_sidecar.FILENAME), lines())


def write_work(work: WorkDir, seed: int = 0) -> list[tuple[str, str, str]]:
    """A few thousand records over CHUNKS chunks, drawn into shards in a random order: some shards in parts
    (one part empty), one shard without records, one holding a record whose key row is missing, and rows
    no shard holds. Returns the shards as publish gives them."""
    rng = np.random.default_rng(seed)
    places = []
    for chunk in range(CHUNKS):
        n = int(rng.integers(500, 900))
        rows = np.zeros(n, key_rows.KEY_ROWS)
        rows["spill"] = chunk * BATCHES_PER_CHUNK + np.arange(n) // BATCH
        rows["offset"] = (np.arange(n) % BATCH) * 50_000 + rng.integers(0, 1000, n)
        rows["sha256"] = rng.integers(0, 256, (n, 32), dtype=np.uint8)
        rows["hashes"] = rng.integers(0, 2**64 - 1, (n, dedupe_files.NUM_HASHES), dtype=np.uint64)
        rows = rows[rng.permutation(n)]  # written in an order of their own
        names = [f"class{i % 7}/img_{chunk}_{i:05d}.jpg" for i in range(n)]
        names[:3] = ["ünïcode/é.png", "bad\udcffname.jpg", 'quote"and\\slash.jpg']
        key_rows.write_rows(work, chunk, rows, names)
        places.append(rows[["spill", "offset"]][: n - 20].copy())  # 20 rows a chunk in no shard
    places = np.concatenate(places)
    places = places[rng.permutation(len(places))]
    cuts = np.sort(rng.choice(np.arange(1, len(places)), 7, replace=False))
    pieces = np.split(places, cuts)
    pieces.insert(3, places[:0])  # a shard without records
    shards = []
    for s, piece in enumerate(pieces):
        filename = f"{'train' if s < 5 else 'test'}.tfrecord-{s:05d}-of-{len(pieces):05d}"
        entries = [types.SimpleNamespace(spill=a, offset=b) for a, b in piece.tolist()]
        if s == 6:  # a record whose key row is missing
            entries[len(entries) // 2] = types.SimpleNamespace(spill=entries[0].spill, offset=999_999_999)
        parts = [0, 0, len(entries) // 3, len(entries)] if s % 2 else [0, len(entries)]  # 3 parts, the first empty
        for p in range(len(parts) - 1):
            dedupe_files.write_part_order(work, filename, p, entries[parts[p] : parts[p + 1]])
        dedupe_files.write_shard_parts(work, filename, list(range(len(parts) - 1)))
        shards.append(("train" if s < 5 else "test", filename, f"{s:064x}"))
    return shards


@pytest.fixture
def generated(tmp_path):
    work = WorkDir(str(tmp_path / "out"))
    shards = write_work(work)
    reference_sidecar(str(tmp_path / "reference"), work, shards)
    return work, shards, (tmp_path / "reference" / keys_sidecar.FILENAME).read_bytes()


@pytest.mark.parametrize("run_bytes", [publish_keys.RUN_BYTES, 64 << 10, 1000])
def test_the_same_bytes_as_one_table_of_every_key(generated, tmp_path, run_bytes):
    work, shards, expected = generated
    publish_keys.write_sidecar(work.output, work, shards, run_bytes=run_bytes)
    got = (tmp_path / "out" / keys_sidecar.FILENAME).read_bytes()
    assert got == expected
    lines = got.decode().splitlines()
    records = keys_sidecar.loads(got, {f: d for _, f, d in shards})
    assert len(records) == 7 and shards[6][1] not in records  # the shard with a record without keys is left out
    assert len(lines) == 1 + sum(len(r) for r in records.values()) > 2500
    keys = tmp_path / "out" / ".prep-tmp" / "keys"
    assert not (keys / "join").exists()  # the runs are gone, the part orders stay
    assert all(name.startswith(tuple(f for _, f, _ in shards)) for name in os.listdir(keys))


def test_runs_left_by_a_killed_publish_are_replaced(generated, tmp_path):
    work, shards, expected = generated
    stale = tmp_path / "out" / ".prep-tmp" / "keys" / "join"
    stale.mkdir()
    (stale / "joined-00000.bin").write_bytes(b"\x07" * 100)
    publish_keys.write_sidecar(work.output, work, shards, run_bytes=4096)
    assert (tmp_path / "out" / keys_sidecar.FILENAME).read_bytes() == expected
    assert not stale.exists()


def test_object_store_paths(generated, tmp_path):
    import beam_jobs  # noqa: F401  (installs Beam's FileSystems as storage's remote back end, as a run does)
    from tests.support.testfs import to_url

    work, shards, expected = generated
    publish_keys.write_sidecar(to_url(work.output), WorkDir(to_url(work.output)), shards, run_bytes=8192)
    assert (tmp_path / "out" / keys_sidecar.FILENAME).read_bytes() == expected
    assert not (tmp_path / "out" / ".prep-tmp" / "keys" / "join").exists()


def test_a_chunk_prepared_without_keys_is_refused_and_nothing_written(generated, tmp_path):
    work, shards, _ = generated
    os.remove(work.key_rows(2))
    with pytest.raises(ResumeError, match="without computing their content keys"):
        publish_keys.write_sidecar(work.output, work, shards, run_bytes=4096)
    assert not (tmp_path / "out" / keys_sidecar.FILENAME).exists()
    assert not (tmp_path / "out" / ".prep-tmp" / "keys" / "join").exists()


def test_no_shards_and_empty_shards_give_the_header_alone(tmp_path):
    work = WorkDir(str(tmp_path))
    dedupe_files.write_shard_parts(work, "train.tfrecord-00000-of-00001", [0])
    dedupe_files.write_part_order(work, "train.tfrecord-00000-of-00001", 0, [])
    for shards in ([], [("train", "train.tfrecord-00000-of-00001", "0" * 64)]):
        publish_keys.write_sidecar(str(tmp_path), work, shards)
        assert (tmp_path / keys_sidecar.FILENAME).read_bytes() == keys_sidecar.header_line()
