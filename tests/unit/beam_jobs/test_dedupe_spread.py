"""`SpreadComponents` on the embedded runner: the same groups and refusals as the one union-find task
(`dedupe.components`), whether the rounds settle every part or the fallback task finishes them."""

from __future__ import annotations

import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that

from beam_jobs.dedupe import components
from beam_jobs.dedupe_components import SpreadComponents
from prep.core.run import dedupe_files
from prep.core.run.dedupe_types import BandPairs, GroupedItems, ScanStats


def band_parts(seed: int, parts: int) -> list[BandPairs]:
    """Pairs among ~1,500 images of 3 chunks, chains and copies among them, cut into 3 band parts' BandPairs."""
    rnd = random.Random(seed)
    ids = [dedupe_files.item_id(rnd.randrange(3), rnd.randrange(1024)) for _ in range(1500)]
    pairs = set()
    for _ in range(900):
        a, b = rnd.sample(ids, 2)
        if a != b:
            pairs.add((rnd.choice((0, 2, 4, 6)), min(a, b), max(a, b)))
    chain = sorted(rnd.sample(ids, 60))
    pairs |= {(1, a, b) for a, b in zip(chain, chain[1:]) if a != b}
    rows = sorted(pairs)
    rnd.shuffle(rows)
    cut = len(rows) // 3
    return [
        BandPairs(np.array(rows[:cut] + rows[:5], np.int64), 2, parts),  # met twice, counted once
        BandPairs(np.array(rows[cut : 2 * cut], np.int64), 0, parts),
        BandPairs(np.array(rows[2 * cut :], np.int64), 5, parts),
    ]


def summary(outputs) -> tuple[list, tuple[int, int], dict[int, set]]:
    """(sorted (item, group) rows, (refused, skipped), {batch: its group ids})."""
    rows, batches = [], {}
    refused = skipped = 0
    for out in outputs:
        if isinstance(out, GroupedItems):
            for item, group, batch in out.rows:
                rows.append((item, group))
                batches.setdefault(batch, set()).add(group)
        else:
            assert isinstance(out, ScanStats)
            refused, skipped = refused + out.refused, skipped + out.skipped
    return sorted(rows), (refused, skipped), batches


@pytest.mark.parametrize("seed, max_size, rounds", [(0, 1000, 6), (1, 5, 6), (2, 3, 0)])
def test_spread_components_give_the_one_task_s_groups(seed, max_size, rounds, monkeypatch):
    monkeypatch.setattr(dedupe_files, "GROUPS_PER_BATCH", 7)  # several batches a part
    found = band_parts(seed, parts=4)
    expected = summary(components((None, found), max_size))

    def check(outputs):  # runs in the pipeline (a copy of this test's objects): a failure fails the run
        rows, stats, batches = summary(outputs)
        assert (rows, stats) == expected[:2]
        assert stats[0] > 0 or max_size == 1000  # the size bound met
        assert all(len(groups) <= 7 for groups in batches.values())
        assert not set(batches) & set(expected[2])  # part batches after the one task's numbers

    with beam.Pipeline("DirectRunner") as p:
        out = p | beam.Create(found) | SpreadComponents(max_size, rounds)
        assert_that(out, check)
