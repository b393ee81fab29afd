"""A chunk's one spill file: written in batch order whatever order its batches finish in, and its kept
images' spilled bytes read back in one request."""

import collections
import os
import threading
import typing

import pytest

from prep.core.run.chunk_spill import INLINE_LIMIT, ChunkSpill, read_rests
from prep.core.workdir import WorkDir, spill_id


def test_batches_are_written_in_batch_order_whatever_order_they_finish_in(tmp_path):
    work = WorkDir(str(tmp_path))
    sink = ChunkSpill(work, 5, 4)
    pieces = {0: b"a" * 3, 1: b"", 2: b"ccccc", 3: b"dd"}
    threads = [threading.Thread(target=sink.put, args=(b, pieces[b])) for b in (3, 1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not os.path.exists(sink.path)  # locally the file appears only by its rename, complete
    sink.put(0, pieces[0])
    assert sink.close() == ([0, 3, 3, 8], 10)
    assert open(work.spill(spill_id(5, 2)), "rb").read() == b"aaacccccdd"
    assert os.listdir(os.path.dirname(sink.path)) == [os.path.basename(sink.path)]


def test_a_chunk_with_a_batch_missing_is_not_completed_and_an_abort_leaves_nothing(tmp_path):
    work = WorkDir(str(tmp_path))
    sink = ChunkSpill(work, 0, 2)
    sink.put(0, b"spilled")
    with pytest.raises(RuntimeError, match="1 of 2 batches"):
        sink.close()
    sink.abort()
    sink.put(1, b"a batch that was still running")
    assert os.listdir(work.spill_folder) == []


class Ref(typing.NamedTuple):
    spill: int
    offset: int
    length: int
    image: int


def test_a_chunks_kept_images_spilled_bytes_come_in_one_read(tmp_path, monkeypatch):
    import beam_jobs  # noqa: F401  (installs Beam's FileSystems in prep.core.storage)
    from tests.support import simfs

    monkeypatch.setenv("SIMFS_STORE", str(tmp_path))
    simfs.start_counting(None)
    work = WorkDir("simfs://out/rests")
    big = INLINE_LIMIT + 1
    sink = ChunkSpill(work, 3, 2)
    sink.put(1, b"B1" + b"x" * big)
    sink.put(0, b"a0a1" + b"converted" + b"a2")
    starts, _ = sink.close()
    refs = [
        Ref(spill_id(3, 0), 0, 2 + 100, 100),  # a kept image: 2 bytes spilled, 100 left in the source
        Ref(spill_id(3, 0), 2, 2 + 7, 7),
        Ref(spill_id(3, 0), 4, 9, 0),  # converted: its whole record is in the spill file, read by the writer
        Ref(spill_id(3, 0), 13, 2 + 50, 50),
        Ref(spill_id(3, 1), starts[1], 2 + 10, 10),
        Ref(spill_id(3, 1), starts[1] + 2, big + 10, 10),  # past INLINE_LIMIT: left to the writer
    ]
    before, _ = simfs.local_counts()
    rests = read_rests(work, refs)
    after, _ = simfs.local_counts()
    assert rests == [b"a0", b"a1", b"", b"a2", b"B1", b""]
    reads = collections.Counter(kind for (kind, _, _) in (after - before).elements())
    assert reads == {"read": 1}  # a ranged read of the chunk's spill file, not one a record
