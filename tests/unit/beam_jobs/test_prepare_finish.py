"""PrepareChunk finishes a chunk on its pool (`_finish`): the keys it records are every good input's, hashed
there; with `lookahead` a chunk's outputs come one chunk later, the last from finish_bundle; a failed batch
fails the chunk and leaves no spill file, index or in-flight record behind it."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from beam_jobs import prepare
from prep.core.content_keys import image_keys
from prep.core.listing import InputRef
from prep.core.run import checkpoints, key_rows
from prep.core.run.spill import PrepareOptions
from prep.core.workdir import BATCH, WorkDir, spill_id

LABELS = ("cat", "dog")


def _jpeg(seed: int, size: tuple[int, int]) -> bytes:
    img = Image.new("RGB", size)
    img.putdata(
        [((x * seed) % 256, (y * 7 + seed) % 256, (x ^ y) % 256) for y in range(size[1]) for x in range(size[0])]
    )
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


@pytest.fixture
def staged(tmp_path):
    """(source, work dir, {chunk: refs}): two chunks of class-folder JPEGs of a few sizes, one input corrupt."""
    source = tmp_path / "src"
    for label in LABELS:
        (source / label).mkdir(parents=True)
    work = WorkDir(str(tmp_path / "out"))
    chunks = {}
    for chunk, count in ((0, 2 * BATCH + 3), (1, BATCH - 5)):
        refs = []
        for i in range(count):
            label = LABELS[i % 2]
            path = f"{label}/{chunk}-{i}.jpg"
            data = b"not a picture" if (chunk, i) == (0, 5) else _jpeg(i + 31 * chunk, (40 + i % 3 * 9, 30 + i % 2 * 5))
            (source / path).write_bytes(data)
            refs.append(InputRef(path, label, None))
        checkpoints.write_listing(work, chunk, refs)
        chunks[chunk] = refs
    return str(source), work, chunks


def _run(source, work, chunks, workers=2, lookahead=False):
    dofn = prepare.PrepareChunk(work, LABELS, PrepareOptions(source, keys=True), workers, lookahead=lookahead)
    dofn.setup()
    try:
        dofn.start_bundle()
        per_chunk = [list(dofn.process(chunk)) for chunk in chunks]
        last = [value.value for value in dofn.finish_bundle() or ()]
    finally:
        dofn.teardown()
    return per_chunk, last


@pytest.mark.parametrize("workers", [1, 2])
def test_every_good_input_has_its_keys_hashed_on_the_pool(staged, workers):
    source, work, chunks = staged
    per_chunk, last = _run(source, work, chunks, workers)
    assert last == []
    counts = [o for outputs in per_chunk for o in outputs if isinstance(o, prepare.ChunkCounts)]
    assert [c.chunk for c in counts] == [0, 1]
    assert sum(g.refs for c in counts for g in c.counts) == sum(map(len, chunks.values())) - 1
    rejected = [r for outputs in per_chunk for o in outputs if isinstance(o, prepare.RejectedInputs) for r in o.rejects]
    assert [r.path for r in rejected] == ["dog/0-5.jpg"]
    for chunk, refs in chunks.items():
        rows, block = key_rows.read_rows(work, chunk)
        paths = block.decode().split("\0")
        assert paths == [r.path for r in refs if r.path != "dog/0-5.jpg"]
        for row, path in zip(rows, paths):
            want = image_keys(open(os.path.join(source, path), "rb").read())
            assert bytes(row["sha256"]).hex() == want.sha256
            # the same bits, or within the rounding imagehash's pixels differ by (content_keys docstring)
            assert all(bin(int(a) ^ b).count("1") <= 2 for a, b in zip(row["hashes"], want.hashes))
            assert any(row["hashes"])
        assert [p.path.decode() for p in prepare.read_prepared(work, chunk)] == paths
        assert not os.path.exists(work.in_flight(chunk))


def test_with_lookahead_a_chunk_is_emitted_with_the_next_and_the_last_from_finish_bundle(staged):
    source, work, chunks = staged
    per_chunk, last = _run(source, work, chunks, lookahead=True)
    assert per_chunk[0] == []
    assert [o.chunk for o in per_chunk[1] if isinstance(o, prepare.ChunkCounts)] == [0]
    assert [o.chunk for o in last if isinstance(o, prepare.ChunkCounts)] == [1]


def test_a_failed_batch_fails_its_chunk_and_leaves_no_index(staged, monkeypatch):
    source, work, chunks = staged
    real = prepare.prepare_batch

    def failing(options, sink, spill, refs, *rest):
        if spill % 1024 == 1:  # the chunk's second batch
            raise OSError("disk full")
        return real(options, sink, spill, refs, *rest)

    monkeypatch.setattr(prepare, "prepare_batch", failing)
    with pytest.raises(OSError, match="disk full"):
        _run(source, work, {0: chunks[0]})
    assert checkpoints.read_chunk_index(work, 0) is None
    spill = work.spill(spill_id(0, 0))
    assert not [name for name in os.listdir(os.path.dirname(spill)) if name.startswith(os.path.basename(spill))]
    assert os.path.exists(work.in_flight(0))  # its inputs stay marked, as a killed run's: a resume sandboxes them
