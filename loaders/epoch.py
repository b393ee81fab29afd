"""Which records each input pipeline reads, and how many batches that makes. Pure functions.

The balance rule. A split of N records read by n input pipelines (one per
worker under MultiWorkerMirroredStrategy, one per host under TPUStrategy, one
under MirroredStrategy) gives every pipeline exactly the same number of records
per epoch:

* ``remainder="drop"`` (the default): ⌊N/n⌋ each; the N mod n ≤ n−1 records at
  the end of the epoch's shard order are not read that epoch.
* ``remainder="pad"``: nothing is dropped. Each pipeline reads ⌈N/n⌉ records
  rounded up to whole steps (a multiple of batch × replicas it feeds), so every
  batch is full and every replica gets the same number of them; the missing
  places (at most n−1 + n·(batch·replicas − 1)) are filled by reading again
  from the start of the epoch's shard order, and those records are flagged as
  padding (the loaders give them sample weight 0, so weighted losses and
  metrics count every real record exactly once).

How. The shards are laid end to end in the epoch's shard order (the manifest's
order, or a seeded permutation of it: the same on every worker, since it
depends only on the seed) and pipeline i takes positions [i·q, (i+1)·q), cut
at shard boundaries into `Range`s of (shard, skip, take). Contiguous ranges
make the counts exact with any number of shards, also fewer shards than
pipelines, where one shard is simply split between pipelines.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence

from prep.core.errors import LoaderError

REMAINDERS = ("drop", "pad")


@dataclasses.dataclass(frozen=True)
class Range:
    """Records ``[skip, skip + take)`` of shard number `shard` (an index into the split's shard list)."""

    shard: int
    skip: int
    take: int
    padding: bool = False

    def __post_init__(self):
        if self.shard < 0 or self.skip < 0 or self.take < 1:
            raise ValueError(f"bad range: shard {self.shard} >= 0, skip {self.skip} >= 0, take {self.take} >= 1")


def check_pipeline(index: int, count: int) -> None:
    """Raises ValueError unless 0 <= index < count."""
    if count < 1:
        raise ValueError(f"number of input pipelines must be >= 1, got {count}")
    if not 0 <= index < count:
        raise ValueError(f"input pipeline id must be in [0, {count}), got {index}")


def check_remainder(remainder: str) -> str:
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, got {remainder!r}")
    return remainder


def records_per_pipeline(total: int, num_pipelines: int, remainder: str = "drop", multiple: int = 1) -> int:
    """Records each of `num_pipelines` pipelines reads per epoch.

    ⌊total/n⌋ with "drop"; with "pad", ⌈total/n⌉ rounded up to a multiple of
    `multiple` (the records of one step of one pipeline).

    Raises:
        LoaderError: the split has fewer records than pipelines (and `remainder` is "drop"), or none.
    """
    check_remainder(remainder)
    if num_pipelines < 1:
        raise ValueError(f"number of input pipelines must be >= 1, got {num_pipelines}")
    if total < 1:
        raise LoaderError("the split has no records")
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    if remainder == "pad":
        per = -(-total // num_pipelines)
        return -(-per // multiple) * multiple
    if total < num_pipelines:
        raise LoaderError(
            f"the split has {total} record(s), fewer than the {num_pipelines} input pipelines; "
            f"use remainder='pad' or fewer workers"
        )
    return total // num_pipelines


def shard_order(num_shards: int, seed: int | None) -> tuple[int, ...]:
    """The epoch's shard order: manifest order if `seed` is None, else a permutation fixed by `seed`.

    `random.Random` seeded with an int is the same in every process and Python
    version 3.2+, so every worker computes the same order from the same seed.
    """
    order = list(range(num_shards))
    if seed is not None:
        random.Random(int(seed)).shuffle(order)
    return tuple(order)


def pipeline_ranges(
    counts: Sequence[int],
    pipeline: int,
    num_pipelines: int,
    remainder: str = "drop",
    order: Sequence[int] | None = None,
    multiple: int = 1,
) -> tuple[Range, ...]:
    """The ranges pipeline `pipeline` of `num_pipelines` reads in one epoch.

    Args:
        counts: records per shard, in the manifest's shard order.
        pipeline: this pipeline's id, 0-based.
        num_pipelines: how many pipelines share the split.
        remainder: "drop" or "pad" (see the module docstring).
        order: the epoch's shard order, a permutation of ``range(len(counts))``; default manifest order.
        multiple: with "pad", round each pipeline's count up to a multiple of this (one step's records).

    Returns:
        Ranges in reading order; their `take`s sum to `records_per_pipeline(sum(counts), ...)`.

    Raises:
        LoaderError: see `records_per_pipeline`.
    """
    check_pipeline(pipeline, num_pipelines)
    order = tuple(range(len(counts))) if order is None else tuple(order)
    if sorted(order) != list(range(len(counts))):
        raise ValueError(f"order must be a permutation of range({len(counts)}), got {order}")
    if any(c < 0 for c in counts):
        raise ValueError(f"shard record counts must be >= 0, got {list(counts)}")
    total = sum(counts)
    per = records_per_pipeline(total, num_pipelines, remainder, multiple)
    start, end = pipeline * per, (pipeline + 1) * per
    ranges: list[Range] = []
    base = 0  # position of the current pass over the shards
    while base < end:
        offset = base
        for shard in order:
            lo, hi = max(start, offset), min(end, offset + counts[shard])
            if lo < hi:
                ranges.append(Range(shard, lo - offset, hi - lo, padding=lo >= total))
            offset += counts[shard]
        base += total
    return tuple(ranges)


@dataclasses.dataclass(frozen=True)
class EpochSize:
    """How one epoch divides between pipelines, replicas and steps.

    Attributes:
        records: records in the split.
        num_pipelines: input pipelines sharing it.
        replicas_per_pipeline: replicas one pipeline feeds (all local devices under MirroredStrategy).
        batch_size: per-replica batch size.
        per_pipeline: records each pipeline reads per epoch, padding included.
        steps: global steps per epoch; every replica gets exactly this many batches (the
            last may be partial when `drop_remainder` is False).
        dropped: records of the split not seen this epoch (balance remainder plus batch remainder).
        padded: padding records read this epoch (remainder="pad").
        drop_remainder: whether partial batches are dropped.
    """

    records: int
    num_pipelines: int
    replicas_per_pipeline: int
    batch_size: int
    per_pipeline: int
    steps: int
    dropped: int
    padded: int
    drop_remainder: bool

    @property
    def batches_per_pipeline(self) -> int:
        """Batches one pipeline yields per epoch (its dataset's cardinality)."""
        if self.drop_remainder:
            return self.steps * self.replicas_per_pipeline
        return -(-self.per_pipeline // self.batch_size)

    @property
    def batches_per_replica(self) -> int:
        return self.steps

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.replicas_per_pipeline * self.num_pipelines


def epoch_size(
    records: int,
    batch_size: int,
    num_pipelines: int = 1,
    replicas_per_pipeline: int = 1,
    drop_remainder: bool = True,
    remainder: str = "drop",
) -> EpochSize:
    """Counts one epoch: records per pipeline, steps, and what is dropped or padded.

    With `drop_remainder`, each pipeline yields ``steps * replicas_per_pipeline``
    full batches, steps = ⌊per_pipeline / (batch_size · replicas_per_pipeline)⌋,
    so every replica gets the same number of full batches. Without it, the
    pipeline's last batch may be partial and, with several replicas per
    pipeline, the last step may leave some replicas without a batch. With
    ``remainder="pad"`` every batch is full and nothing is dropped, whatever
    `drop_remainder` says: the padding fills the last step.

    Raises:
        LoaderError: a step needs more records than a pipeline has (training), or the
            split is smaller than the number of pipelines (see `records_per_pipeline`).
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    if replicas_per_pipeline < 1:
        raise ValueError(f"replicas per pipeline must be >= 1, got {replicas_per_pipeline}")
    step_records = batch_size * replicas_per_pipeline
    pad = remainder == "pad"
    per = records_per_pipeline(records, num_pipelines, remainder, step_records if pad else 1)
    drop_remainder = drop_remainder or pad  # padded: every batch is full anyway
    if drop_remainder:
        steps = per // step_records
        if steps == 0:
            who = f"each of {num_pipelines} input pipelines" if num_pipelines > 1 else "the input pipeline"
            replicas = f" x {replicas_per_pipeline} replicas" if replicas_per_pipeline > 1 else ""
            raise LoaderError(
                f"a batch is larger than a replica's data: {who} reads {per} record(s) per "
                f"epoch, fewer than one step's {step_records} (batch {batch_size}{replicas}); "
                f"use a smaller batch size"
            )
        read = steps * step_records
    else:
        steps = math.ceil(-(-per // batch_size) / replicas_per_pipeline)
        read = per
    # Pipeline i reads positions [i*per, i*per + read) of the epoch order; positions >= records are padding.
    windows = [(i * per, i * per + read) for i in range(num_pipelines)]
    padded = sum(max(0, hi - max(lo, records)) for lo, hi in windows)
    seen = _covered([(lo % records, lo % records + (hi - lo)) for lo, hi in windows], records)
    return EpochSize(
        records=records,
        num_pipelines=num_pipelines,
        replicas_per_pipeline=replicas_per_pipeline,
        batch_size=batch_size,
        per_pipeline=per,
        steps=steps,
        dropped=records - seen,
        padded=padded,
        drop_remainder=drop_remainder,
    )


def _covered(windows: list[tuple[int, int]], modulus: int) -> int:
    """How many of positions 0..modulus-1 the half-open windows cover, wrapping at `modulus`."""
    pieces = []
    for lo, hi in windows:
        while hi > lo:
            cut = min(hi, (lo // modulus + 1) * modulus)
            pieces.append((lo % modulus, lo % modulus + cut - lo))
            lo = cut
    covered, reach = 0, 0
    for lo, hi in sorted(pieces):
        lo = max(lo, reach)
        if hi > lo:
            covered += hi - lo
            reach = hi
    return covered


def bucketed_steps(per_pipeline: int, batch_size: int, num_buckets: int, replicas_per_pipeline: int = 1) -> int:
    """Steps per epoch that aspect-ratio bucketing can always fill with full batches.

    However a pipeline's records fall into K buckets, the full batches number
    Σ⌊n_k/b⌋ ≥ ⌈(N − K(b−1)) / b⌉; taking that many (rounded down to a multiple
    of the replicas a pipeline feeds) keeps every pipeline's count equal and
    known up front, at the cost of up to K(b−1) + b·r records per epoch.

    Raises:
        LoaderError: not even one step can be guaranteed.
    """
    guaranteed = max(0, -(-(per_pipeline - num_buckets * (batch_size - 1)) // batch_size))
    steps = guaranteed // replicas_per_pipeline
    if steps == 0:
        raise LoaderError(
            f"aspect bucketing cannot guarantee one full step: a pipeline reads {per_pipeline} "
            f"record(s) into {num_buckets} bucket(s) of batch {batch_size} x "
            f"{replicas_per_pipeline} replica(s); use a smaller batch size or fewer buckets"
        )
    return steps
