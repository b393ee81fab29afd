"""The shard writer copies planned records in order, holding a few blocks of them at a time."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import os
import random

from beam_jobs.plan import Entry
from prep.core.run import shard_copy
from prep.core.tfrecord import frame
from prep.core.workdir import WorkDir, spill_id


def _entry(spill: int, offset: int, length: int) -> Entry:
    return Entry(b"", spill, offset, length, 0, True, b"", 0, 0)


def test_blocks_keep_order_and_stay_under_the_limit():
    rng = random.Random(3)
    entries = [_entry(0, i, rng.randrange(1, 300)) for i in range(500)]
    cut = shard_copy.blocks(entries, 1000)
    assert [e for block in cut for e in block] == entries
    assert all(block for block in cut)
    assert all(sum(e.length for e in block) <= 1000 for block in cut)
    # Each block is as full as the next entry allows.
    for block, following in zip(cut, cut[1:]):
        assert sum(e.length for e in block) + following[0].length > 1000


def test_a_record_larger_than_a_block_gets_a_block_of_its_own():
    entries = [_entry(0, 0, 10), _entry(0, 10, 5000), _entry(0, 5010, 10)]
    assert shard_copy.blocks(entries, 1000) == [[entries[0]], [entries[1]], [entries[2]]]
    assert shard_copy.blocks([], 1000) == []


class _CountingPool:
    """A thread pool that records how many reads were submitted."""

    def __init__(self, pool):
        self._pool = pool
        self.submitted = 0

    def submit(self, fn, *args):
        self.submitted += 1
        return self._pool.submit(fn, *args)


class _Out(io.BytesIO):
    """Records, at each block written, how many blocks had been read or were being read."""

    def __init__(self, pool: _CountingPool):
        super().__init__()
        self._pool = pool
        self.ahead = []

    def write(self, data):
        self.ahead.append(self._pool.submitted - len(self.ahead))
        return super().write(data)


def test_copy_records_writes_every_record_in_order_reading_a_bounded_number_of_blocks_ahead(tmp_path, monkeypatch):
    monkeypatch.setattr(shard_copy, "_BLOCK", 4096)
    rng = random.Random(7)
    work = WorkDir(str(tmp_path))
    os.makedirs(work.spill_folder)
    entries, records = [], {}
    for chunk in range(3):
        offset, spill = 0, spill_id(chunk, chunk)  # each chunk's spill file, named by any of its batches
        with open(work.spill(spill), "wb") as f:
            for _ in range(100):
                record = frame(rng.randbytes(rng.randrange(10, 900)))
                f.write(record)
                entries.append(_entry(spill, offset, len(record)))
                records[(spill, offset)] = record
                offset += len(record)
    rng.shuffle(entries)  # a shard's records come from many spill files, in any order
    expected = b"".join(records[(e.spill, e.offset)] for e in entries)

    with concurrent.futures.ThreadPoolExecutor(2) as threads:
        pool = _CountingPool(threads)
        out = _Out(pool)
        size, sha = shard_copy.copy_records(entries, out, work, "/nonexistent-source", pool)

    assert out.getvalue() == expected
    assert (size, sha) == (len(expected), hashlib.sha256(expected).hexdigest())
    assert len(out.ahead) == len(shard_copy.blocks(entries, 4096)) > 20
    # Memory is bounded by blocks in flight, not by the shard's size.
    assert max(out.ahead) <= shard_copy._AHEAD + 1


def test_task_counts_name_only_the_classes_and_strata_held():
    import types

    from beam_jobs.write import add_counts, task_counts

    labels = tuple(f"c{i}" for i in range(1000))
    entries = [
        types.SimpleNamespace(label=7, tags=()),
        types.SimpleNamespace(label=3, tags=()),
        types.SimpleNamespace(label=7, tags=()),
    ]
    assert task_counts(entries, labels, None, "classification").class_counts == {"c3": 1, "c7": 2}
    boxes = [types.SimpleNamespace(label=1, tags=((5, 2), (9, 1))), types.SimpleNamespace(label=0, tags=((5, 1),))]
    counts = task_counts(boxes, labels, ("(none)", "c5", "c9"), "detection")
    assert counts.class_counts == {"c5": 2, "c9": 1}
    assert counts.extra == {"stratum_counts": {"(none)": 1, "c5": 1}, "box_counts": {"c5": 3, "c9": 1}, "max_boxes": 3}
    assert add_counts([counts.extra, {"stratum_counts": {"c9": 2}, "box_counts": {"c9": 4}, "max_boxes": 4}]) == {
        "stratum_counts": {"(none)": 1, "c5": 1, "c9": 2},
        "box_counts": {"c5": 3, "c9": 5},
        "max_boxes": 4,
    }
