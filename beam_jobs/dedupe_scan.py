"""The dedupe stage's scan: near pairs of every crop scale, from the chunks' packed key files (dedupe.py).

A task holds every crop scale's hashes of every image (48 bytes an image: id and hashes), read once
from the chunk key files (dedupe_files.read_scales); its scales' bands are sorted and probed on a thread
pool (prep.core.near_bands), all inside process(), as every runner needs. One task rather than one a
scale: the pool's threads are then the only ones scanning, so the sorted copies and candidate blocks
held at once are one band's per thread, not one per thread of every bundle the runner runs at once.
"""

from __future__ import annotations

import math
import typing

import numpy as np

from beam_jobs.pooled import PooledDoFn
from prep.core import near_bands
from prep.core.run import dedupe_files
from prep.core.run.dedupe_types import BandPairs, KeyFile
from prep.core.run.heap import release_free_memory
from prep.core.workdir import WorkDir


class ScanTask(typing.NamedTuple):
    """The crop scales' hashes of every image, grouped by each band in turn (and, for large sets, a prefix of
    the band's bits): the hashes are read once for all the scales and bands."""

    scales: tuple[int, ...]
    bands: tuple[int, ...]
    sub: int  # the band bits' top `sub_bits` bits this task takes
    sub_bits: int
    chunks: tuple[int, ...]  # the chunks whose key files to read


def scan_tasks(element: tuple[None, typing.Iterable[KeyFile]], part_target: int):
    """(None, [KeyFile]) -> (task number, ScanTask) per part of the bands' bits: parts of about
    `part_target` images a band (each probes into its own and the parts one bit away)."""
    _, files = element
    files = list(files)
    total = sum(f.items for f in files)
    chunks = tuple(sorted(f.chunk for f in files if f.items))
    bits = min(near_bands.WIDTH, math.ceil(math.log2(total / part_target))) if total > part_target else 0
    tasks = (
        ScanTask(tuple(range(dedupe_files.NUM_HASHES)), tuple(range(near_bands.BANDS)), sub, bits, chunks)
        for sub in range(1 << bits)
    )
    yield from enumerate(tasks)


class Scan(PooledDoFn):
    """(n, ScanTask) -> `BandPairs` per scale and band with near pairs or with an oversized run's uncompared
    pairs (prep.core.near_bands). The bands run on the pool's threads
    (numpy's sorts and comparisons release the GIL), all of them inside process()."""

    def __init__(self, work: WorkDir, cap: int, workers: int | None):
        super().__init__(workers)
        self._work, self._cap = work, cap

    def process(self, element):
        _, task = element
        items, hashes = dedupe_files.read_scales(self._work, task.chunks, task.scales)
        hashes = np.asfortranarray(near_bands.spread_bits(hashes))  # every task alike: see spread_bits

        def one(job):
            column, band = job  # hashes' column `column` holds crop scale task.scales[column]
            return near_bands.scan_band(items, hashes[:, column], band, self._cap, sub=task.sub, sub_bits=task.sub_bits)

        jobs = [(column, band) for column in range(len(task.scales)) for band in task.bands]
        for pairs, skipped in self._pool.map(one, jobs):
            if pairs or skipped:  # one element a band, not one a pair: Beam's cost per element is paid on one thread
                yield BandPairs(np.array(pairs, np.int64).reshape(-1, 3), skipped)
        release_free_memory()  # the bands' sorted copies and candidate blocks, freed on the pool's threads
