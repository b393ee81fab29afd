"""`ExactGroups` (`--near off`): duplicate groups of identical stored images alone, by a shuffle on their
sha256, with no band scan: its work grows as n, and no task grows with n.

    counts  : ChunkCounts                  per prepared chunk
    runs    = Map | GroupByKey             (run, [chunk]): `chunks_per_task` consecutive chunks (~part_target
                                           images)
    shas    = FlatMap(sha_buckets)         (bucket, SHA_ROWS) of a run's good inputs, per bucket of the
                                           sha256's first 8 bytes (`buckets` of them: ~part_target images each)
    groups  = GroupByKey | bucket_groups   GroupedItems per chunk, ScanStats (unions refused)

A bucket task holds its images' sha256 and ids (40 bytes an image); equal sha256 are one bucket's. Each
run of equal hashes is a star to its least image, fed to the bounded union-find (union_find.pair_groups),
as the scan lists identical hashes: a group holds at most `max_size` images, the rest refused and counted.
Unlike the near scan, images whose perceptual hashes are not comparable (flat pictures,
content_keys.comparable) are grouped too: identical bytes are a copy whatever they show.
"""

from __future__ import annotations

import math

import apache_beam as beam
import numpy as np

from beam_jobs.dedupe_components import grouped_items
from beam_jobs.prepare import ChunkCounts, read_prepared
from prep.core.ordering import MAX_CHUNK
from prep.core.run import dedupe_files, key_rows
from prep.core.run.dedupe_types import DedupeSettings, ScanStats
from prep.core.union_find import pair_groups
from prep.core.workdir import WorkDir

SHA_ROWS = np.dtype([("sha", "u1", (32,)), ("item", "<i8")])


def sha_buckets(element: tuple[int, list[int]], work: WorkDir, buckets: int):
    """(run, [chunk]) -> (bucket, SHA_ROWS) per bucket with some of the run's chunks' good inputs."""
    _, chunks = element
    table = key_rows.RowTable(work)
    rows = []
    for chunk in sorted(chunks):
        for position, ref in enumerate(read_prepared(work, chunk)):
            row = table.get(*ref.place)
            if row is not None:
                rows.append((row["sha256"], dedupe_files.item_id(chunk, position)))
    packed = np.array(rows, SHA_ROWS)
    where = packed["sha"][:, :8].copy().view(">u8").ravel() % np.uint64(buckets) if len(packed) else np.zeros(0)
    for bucket in np.unique(where).tolist():
        yield int(bucket), packed[where == bucket]


def bucket_groups(element: tuple[int, list[np.ndarray]], max_size: int):
    """(bucket, [SHA_ROWS]) -> GroupedItems per chunk with an item in a group of equal sha256, ScanStats."""
    bucket, blocks = element
    rows = np.concatenate(list(blocks))
    rows = rows[np.lexsort((rows["item"], *rows["sha"].T[::-1]))]  # by sha256, then id
    sha = rows["sha"]
    first = np.r_[True, (sha[1:] != sha[:-1]).any(axis=1)] if len(rows) else np.zeros(0, bool)
    owner = np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))
    copies = np.flatnonzero(~first)
    pairs = np.c_[np.zeros(len(copies), np.int64), rows["item"][owner[copies]], rows["item"][copies]]
    items, groups, ranks, refused = pair_groups(pairs, max_size)
    yield from grouped_items(items, groups, [dedupe_files.part_batch(bucket, r) for r in ranks.tolist()])
    yield ScanStats(refused, 0)


def _run(counts: ChunkCounts, per_task: int) -> tuple[int, int]:
    return counts.chunk // per_task, counts.chunk


class ExactGroups(beam.PTransform):
    """ChunkCounts -> GroupedItems | ScanStats of the exact duplicates alone (the module docstring)."""

    def __init__(self, work: WorkDir, settings: DedupeSettings):
        super().__init__()
        self._work, self._settings = work, settings

    def expand(self, counts):
        s = self._settings
        per_task = max(1, s.part_target // MAX_CHUNK)
        buckets = max(1, math.ceil((s.images or s.part_target) / s.part_target))
        return (
            counts
            | "Runs" >> beam.Map(_run, per_task)
            | "GatherRuns" >> beam.GroupByKey()
            | "ShaBuckets" >> beam.FlatMap(sha_buckets, self._work, buckets)
            | "GatherBuckets" >> beam.GroupByKey()
            | "BucketGroups" >> beam.FlatMap(bucket_groups, s.max_size)
        )
