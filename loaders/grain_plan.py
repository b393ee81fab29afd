"""Which records batch k of a Grain pipeline holds, and reading them by position. Pure Python.

A training epoch is a permutation of the whole split, seeded by (seed, epoch) and the same in
every process; an evaluation reads in `loaders.load`'s order (`fixed`, from `loaders.grain`).
The balance rule is `loaders.epoch`'s: each of n processes takes a contiguous ⌊N/n⌋ positions
of the epoch's order (``remainder="drop"``), so every host reads the same number of examples
per epoch and together they read each record at most once. Batch k of the pipeline is batch
``k mod B`` of epoch ``k div B`` (B batches an epoch), a pure function of k: that is what makes
a Grain iterator's state a single index, and a restored iterator yield exactly the batches an
uninterrupted one would.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools

import numpy as np

from loaders.source import SplitSource
from prep.core import formats


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """Batch k's positions in the split (shards end to end in manifest order).

    Attributes:
        records: N, the split's records.
        per_pipeline: records this pipeline reads an epoch.
        batch_size: records a batch.
        batches: batches an epoch (the last one partial when not `drop_remainder`).
        pipeline: this pipeline's index (its slice of every epoch's order).
        seed: of the permutations.
        fixed: evaluation: this pipeline's positions in the order it reads them every epoch;
            None: training, a new permutation of the split each epoch.
    """

    records: int
    per_pipeline: int
    batch_size: int
    batches: int
    pipeline: int = 0
    seed: int = 0
    fixed: np.ndarray | None = None

    def order(self, epoch: int) -> np.ndarray:
        """This pipeline's positions in epoch `epoch`, in the order it reads them."""
        if self.fixed is not None:
            return self.fixed
        # numpy's PCG64 stream, seeded by both: the same permutation of the split in every process.
        every = np.random.default_rng([self.seed, epoch]).permutation(self.records)
        return every[self.pipeline * self.per_pipeline : (self.pipeline + 1) * self.per_pipeline]

    def positions(self, k: int, order: np.ndarray | None = None) -> tuple[int, np.ndarray]:
        """(epoch, positions of the records of batch `k`), `order` being that epoch's if given."""
        epoch, b = divmod(k, self.batches)
        order = self.order(epoch) if order is None else order
        return epoch, order[b * self.batch_size : min((b + 1) * self.batch_size, self.per_pipeline)]


class SplitRecords:
    """A split's serialized records by position over all its shards (Grain's `RandomAccessDataSource`).

    Each shard is opened by its format's owner (`prep.core.formats`) when first read, in the
    process that reads it: a pickled copy (a Grain worker's) opens its own.
    """

    def __init__(self, source: SplitSource) -> None:
        self._files = source.files
        self._format = source.file_format
        self._starts = [0, *itertools.accumulate(source.counts)]
        self._open: dict[int, formats.RecordSource] = {}

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, position: int) -> bytes:
        return self.read([position])[0]

    def read(self, positions) -> list[bytes]:
        """The records at `positions`, in that order."""
        out = []
        for position in positions:
            position = int(position)
            if not 0 <= position < len(self):
                raise IndexError(f"record {position} of {len(self)}")
            shard = bisect.bisect_right(self._starts, position) - 1
            source = self._open.get(shard)
            if source is None:
                source = self._open[shard] = formats.get(self._format).open(self._files[shard])
            out.append(source[position - self._starts[shard]])
        return out

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_open": {}}

    def close(self) -> None:
        for source in self._open.values():
            source.close()
        self._open.clear()
