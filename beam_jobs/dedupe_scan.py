"""The dedupe stage's scan: near pairs of every crop scale, from the chunks' packed key files (dedupe.py).

Up to `part_target` images, one task (`ScanTask`) holds every crop scale's hashes of every image (48 bytes
an image: id and hashes), read once from the chunk key files (dedupe_files.read_scales); its scales' bands
are sorted and probed on a thread pool (prep.core.near_bands), all inside process(), as every runner needs.
One task rather than one a scale: the pool's threads are then the only ones scanning, so the sorted copies
and candidate blocks held at once are one band's per thread, not one per thread of every bundle the runner
runs at once; and nothing goes through a shuffle.

Past `part_target`, no task holds every image: `BucketTask`s of about `part_target` images each cut their
hashes, per crop scale, band and family of the band's bit positions (`near_bands.families`), into 2**bits
parts by bits outside the family's (`near_bands.part_of`); a GroupByKey on (scale, band, bits, family,
part) gathers each part's hashes (16 bytes an image) into one `scan_part` task: about n / 2**bits images,
at most `part_target` for even band values. Every image goes to one part of each family: ceil(16 / (16 -
bits)) tasks a band (2 up to bits 8, 4 at 12).
"""

from __future__ import annotations

import math
import typing
from concurrent.futures import Executor

import numpy as np

from beam_jobs.pooled import PooledDoFn
from prep.core import near_bands
from prep.core.run import dedupe_files
from prep.core.run.dedupe_types import BandPairs, KeyFile
from prep.core.run.heap import release_free_memory
from prep.core.workdir import WorkDir

MAX_BITS = near_bands.WIDTH - 4  # at most 4 families (copies of a hash) a band
PART_DTYPE = np.dtype([("item", "<i8"), ("hash", "<u8")])  # one image's id and hash of one crop scale


class ScanTask(typing.NamedTuple):
    """Every crop scale's hashes of every image (the chunks' key files), scanned band by band in one task."""

    chunks: tuple[int, ...]


class BucketTask(typing.NamedTuple):
    """Some chunks whose hashes are cut into the parts of `bits` fixed bits a band (`bucket`)."""

    chunks: tuple[int, ...]
    bits: int


PartKey = tuple[int, int, int, int, int]  # (crop scale, band, bits, family, part_of): one scan_part task


def scan_tasks(element: tuple[None, typing.Iterable[KeyFile]], part_target: int):
    """(None, [KeyFile]) -> one `ScanTask` for up to `part_target` images, else `BucketTask`s of about
    `part_target` images each (whole chunks), with the bits that cut a band into parts of about that many."""
    _, files = element
    files = sorted((f for f in files if f.items), key=lambda f: f.chunk)
    total = sum(f.items for f in files)
    if total <= part_target:
        yield ScanTask(tuple(f.chunk for f in files))
        return
    bits = min(MAX_BITS, math.ceil(math.log2(total / part_target)))
    group: list[int] = []
    held = 0
    for f in files:
        if group and held + f.items > part_target:
            yield BucketTask(tuple(group), bits)
            group, held = [], 0
        group.append(f.chunk)
        held += f.items
    if group:
        yield BucketTask(tuple(group), bits)


class Scan(PooledDoFn):
    """ScanTask -> `BandPairs` per scale and band with near pairs or with an oversized run's uncompared
    pairs (prep.core.near_bands). The bands run on the pool's threads
    (numpy's sorts and comparisons release the GIL), all of them inside process()."""

    def __init__(self, work: WorkDir, cap: int, workers: int | None):
        super().__init__(workers)
        self._work, self._cap = work, cap

    def process(self, task: ScanTask):
        assert self._pool is not None  # made in setup()
        yield from scan_bands(self._work, task, self._cap, self._pool)


def scan_bands(work: WorkDir, task: ScanTask, cap: int, pool: Executor) -> typing.Iterator[BandPairs]:
    """`Scan`'s work on a ScanTask, its bands on `pool`'s threads."""
    scales = range(dedupe_files.NUM_HASHES)
    items, hashes = dedupe_files.read_scales(work, task.chunks, scales)
    hashes = np.asfortranarray(near_bands.spread_bits(hashes))  # every task alike: see spread_bits

    def one(job):
        scale, band = job
        return near_bands.scan_band(items, hashes[:, scale], band, cap)

    jobs = [(scale, band) for scale in scales for band in range(near_bands.BANDS)]
    for pairs, skipped in pool.map(one, jobs):
        if pairs or skipped:  # one element a band, not one a pair: Beam's cost per element is paid on one thread
            yield BandPairs(np.array(pairs, np.int64).reshape(-1, 3), skipped)
    release_free_memory()  # the bands' sorted copies and candidate blocks, freed on the pool's threads


def bucket(task: BucketTask, work: WorkDir) -> typing.Iterator[tuple[PartKey, np.ndarray]]:
    """BucketTask -> (PartKey, its hashes among the task's images: PART_DTYPE rows) per part with some, for
    every crop scale, band and family (`near_bands.families(task.bits)`)."""
    items, hashes = dedupe_files.read_scales(work, task.chunks, range(dedupe_files.NUM_HASHES))
    hashes = near_bands.spread_bits(hashes)  # the same rearrangement as Scan's
    rows = np.empty(len(items), PART_DTYPE)
    rows["item"] = items
    for scale in range(hashes.shape[1]):
        rows["hash"] = hashes[:, scale]
        for band in range(near_bands.BANDS):
            fields = near_bands.band_fields(rows["hash"], band)
            for family, dims in enumerate(near_bands.families(task.bits)):
                part = near_bands.part_of(fields, dims, task.bits)
                order = np.argsort(part, kind="stable")
                keys = part[order]
                starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
                for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(keys)]):
                    yield (scale, band, task.bits, family, int(keys[lo])), rows[order[lo:hi]]


def scan_part(element: tuple[PartKey, typing.Iterable[np.ndarray]], cap: int):
    """(PartKey, [its rows from each BucketTask]) -> `BandPairs` of the part's pairs, if it has any or an
    oversized run left some uncompared: the pairs this part's family lists (near_bands.scan_band)."""
    (_, band, bits, family, _), blocks = element
    rows = np.concatenate(list(blocks))
    pairs, skipped = near_bands.scan_band(
        rows["item"], rows["hash"], band, cap, dims=near_bands.families(bits)[family], same=family == 0
    )
    if pairs or skipped:
        yield BandPairs(np.array(pairs, np.int64).reshape(-1, 3), skipped, 1 << bits)
