"""The dedupe stage's scan over the chunks' key files: one task holds every crop scale, and a set cut into
parts of the bands' bits (past `part_target` images: bucket tasks, then a task a part) gives exactly the pairs
of one task, no task holding more than its part."""

from __future__ import annotations

import random

import numpy as np
import pytest

from beam_jobs.dedupe_scan import BucketTask, Scan, ScanTask, bucket, scan_part, scan_tasks
from prep.core.content_keys import ContentKeys, distance
from prep.core.run import dedupe_files
from prep.core.run.dedupe_types import BandPairs, KeyFile
from prep.core.workdir import WorkDir

SCALES = dedupe_files.NUM_HASHES


def balanced(rnd: random.Random) -> int:
    """A 64-bit hash with 32 one bits (`content_keys.comparable`: others never reach the scan)."""
    return sum(1 << b for b in rnd.sample(range(64), 32))


def swapped(h: int, rnd: random.Random, pairs: int) -> int:
    """`h` with `pairs` one bits and as many zero bits exchanged: 2 * pairs bits away, still 32 ones."""
    ones = [b for b in range(64) if h >> b & 1]
    zeros = [b for b in range(64) if not h >> b & 1]
    for one, zero in zip(rnd.sample(ones, pairs), rnd.sample(zeros, pairs)):
        h ^= (1 << one) | (1 << zero)
    return h


@pytest.fixture
def work(tmp_path):
    """Three chunks' key files; a quarter of the images, from every chunk, have a copy in the next chunk, 2 to
    6 bits away at one crop scale (and 20 at the others), or identical."""
    rnd = random.Random(4)
    work = WorkDir(str(tmp_path))
    keys: dict[int, tuple[int, ...]] = {}
    for n in range(900):
        keys[dedupe_files.item_id(n % 3, n // 3)] = tuple(balanced(rnd) for _ in range(SCALES))
    originals = list(keys)
    for n, item in enumerate(originals[::4]):
        chunk = (dedupe_files.item_chunk(item) + 1) % 3
        scale = rnd.randrange(SCALES)
        copy = tuple(
            h if n % 4 == 0 else swapped(h, rnd, rnd.randint(1, 3) if s == scale else 10)
            for s, h in enumerate(keys[item])
        )
        keys[dedupe_files.item_id(chunk, 300 + n)] = copy
    by_chunk: dict[int, list] = {}
    for item, hashes in sorted(keys.items()):
        by_chunk.setdefault(dedupe_files.item_chunk(item), []).append((item, hashes))
    counts = []
    for chunk, rows in sorted(by_chunk.items()):
        n = dedupe_files.write_chunk_keys(
            work, chunk, np.array([i for i, _ in rows], np.int64), np.array([h for _, h in rows], np.uint64)
        )
        counts.append(KeyFile(chunk, n))
    return work, keys, counts


def scanned(work: WorkDir, counts, part_target: int):
    """(the tasks, every pair listed, the most images one scan task held), the parts gathered as a GroupByKey
    would."""
    tasks = list(scan_tasks((None, counts), part_target))
    scan = Scan(work, cap=16_384, workers=2)
    scan.setup()
    found: list[tuple[int, int, int]] = []
    held = 0
    parts: dict[tuple, list[np.ndarray]] = {}
    try:
        for task in tasks:
            if isinstance(task, ScanTask):
                bands = list(scan.process(task))
                held = max(held, sum(c.items for c in counts))
            else:
                for key, rows in bucket(task, work):
                    parts.setdefault(key, []).append(rows)
                bands = []
            for key, blocks in sorted(parts.items()) if task is tasks[-1] else ():
                bands += scan_part((key, blocks), cap=16_384)
                held = max(held, sum(map(len, blocks)))
            for band in bands:
                assert isinstance(band, BandPairs) and not band.skipped
                found.extend(map(tuple, band.pairs.tolist()))
    finally:
        scan.teardown()
    return tasks, found, held


def test_one_task_scans_every_scale_and_finds_every_planted_pair(work):
    work, keys, counts = work
    tasks, found, _ = scanned(work, counts, part_target=1_000_000)
    assert tasks == [ScanTask((0, 1, 2))]
    best = {}
    for d, a, b in found:
        best[a, b] = min(d, best.get((a, b), 64))
    assert len(best) == 225
    for (a, b), d in best.items():
        assert d == distance(ContentKeys("0" * 64, keys[a]), ContentKeys("0" * 64, keys[b])) <= 6


@pytest.mark.parametrize("part_target", [400, 100, 10])
def test_parts_of_the_bands_bits_list_the_same_pairs_as_one_task(work, part_target):
    work, _, counts = work
    _, whole, _ = scanned(work, counts, part_target=1_000_000)
    tasks, parts, held = scanned(work, counts, part_target=part_target)
    bits = {400: 2, 100: 4, 10: 7}[part_target]  # 1,125 images
    assert all(isinstance(t, BucketTask) and t.bits == bits for t in tasks)
    assert sorted(c for t in tasks for c in t.chunks) == [0, 1, 2]
    assert sorted(parts) == sorted(whole)  # as many times each (once a scale that finds it), none lost
    assert held <= 1.5 * 1125 / 2**bits + 12, held  # random hashes: about 1,125 / 2**bits a part
