"""`loaders.grain.dataset`: a Grain dataset over a split written by `prep convert`, for JAX loops
and Keras 3 `fit`, as numpy batches.

    import loaders.grain
    ds = loaders.grain.dataset("out/shapes", "train", batch_size=32, image_size=(64, 64), num_epochs=5)
    it = iter(ds)
    images, labels = next(it)
    state = it.get_state()  # save it with your checkpoint; it.set_state(state) resumes exactly

The batches are those of `loaders.load` (the same parse, random-resized crop or centre crop,
flip, resize and normalisation: `loaders.dataset.batch_decoder`, run by TensorFlow on each
batch), with two differences that random access allows: each training epoch reads a seeded
permutation of the whole split (a global shuffle, not a buffer), and the iterator's state is the
index of the next batch, so a restored iterator yields exactly what an uninterrupted one would
(`loaders.grain_plan`). Evaluation (``training=False``) reads in manifest order and gives the
very batches `loaders.load` gives. Each process passes its ``pipeline=(index, count)``: every
one reads the same number of examples an epoch (`loaders.epoch`'s balance rule).

ArrayRecord shards (``prep convert --file-format array_record``) are read by position; TFRecord
shards too, through an offset table built when a shard is first opened. Grain and TensorFlow are
imported when `dataset` is called.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from loaders.epoch import epoch_size, pipeline_ranges
from loaders.grain_plan import EpochPlan, SplitRecords
from loaders.load_options import LoadOptions
from loaders.source import SplitSource, open_split
from prep.core.errors import LoaderError

# `loaders.load` options that a Grain pipeline does differently or not at all, with what to do instead.
_NOT_HERE = {
    "remainder": ("drop", "remainder='pad' is for tf.distribute's equal steps; Grain drops the remainder"),
    "rebalance": (False, "rebalance is a tf.data stage; weight the loss (loaders.class_weights) instead"),
    "aspect_buckets": (None, "aspect_buckets is a tf.data stage"),
    "cache": (False, "cache is a tf.data stage; ArrayRecord shards are read by position anyway"),
    "repeat": (False, "repeat: pass num_epochs"),
    "on_corrupt": ("error", "on_corrupt='skip' reads TFRecord shards only; run `prep verify`"),
    "output": ("tuple", "output='features' or 'ragged' gives strings or ragged arrays, not numpy batches"),
}


def _batch_seed(seed: int, pipeline: int, epoch: int, batch: int) -> int:
    """A 63-bit seed for one batch's crops and flips, from its place only (as `derive_seed`)."""
    digest = hashlib.sha256(repr((seed, "grain", pipeline, epoch, batch)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class _Batches:
    """Batch k of the pipeline: its records read by position and decoded by TensorFlow into numpy.

    Picklable for Grain's worker processes: the TensorFlow function and the open shards are
    made again in each process that uses them.
    """

    def __init__(self, plan: EpochPlan, records: SplitRecords, opts: LoadOptions, source: SplitSource):
        self._plan, self._records, self._opts, self._source = plan, records, opts, source
        self._with_seed = bool(opts.training or opts.flip)
        self._run: Any = None
        self._order: tuple[int, Any] = (-1, None)  # the last epoch's order, reused by its batches

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_run": None, "_order": (-1, None)}

    def _function(self):
        import tensorflow as tf

        from loaders.dataset import batch_decoder

        decode, finish = batch_decoder(self._opts, self._source)
        records = tf.TensorSpec([None], tf.string)  # one trace, whatever the batch's length
        if self._with_seed:
            seed = tf.TensorSpec([], tf.int64)
            return tf.function(lambda r, s: finish(decode(r, s)), input_signature=[records, seed])
        return tf.function(lambda r: finish(decode(r)), input_signature=[records])

    def __call__(self, k: int):
        import numpy as np
        import tensorflow as tf

        epoch = k // self._plan.batches
        cached = self._order  # one read: Grain's threads call this concurrently
        if cached[0] != epoch:
            cached = self._order = (epoch, self._plan.order(epoch))
        _, positions = self._plan.positions(k, cached[1])
        records = tf.constant(self._records.read(positions), tf.string)
        if self._run is None:
            self._run = self._function()
        if self._with_seed:
            seed = _batch_seed(self._plan.seed, self._plan.pipeline, epoch, k % self._plan.batches)
            out = self._run(records, tf.constant(seed, tf.int64))
        else:
            out = self._run(records)
        return tf.nest.map_structure(np.asarray, out)  # no copy, unlike Tensor.numpy() (~36 ms a batch)


def dataset(
    path,
    split: str = "train",
    batch_size: int = 32,
    image_size=(224, 224),
    training: bool = True,
    *,
    pipeline: tuple[int, int] = (0, 1),
    num_epochs: int = 1,
    workers: int = 0,
    **options,
):
    """A `grain.IterDataset` of numpy batches, as `loaders.load` gives them, over `num_epochs` epochs.

    Args:
        path: the dataset folder (holds manifest.json).
        split: a split the manifest lists.
        batch_size: examples per batch.
        image_size: output (height, width).
        training: a new seeded permutation of the split each epoch, random-resized crop and flip,
            full batches only. False: `loaders.load`'s order, centre crop (or resize), the last batch
            may be partial: the batches of ``loaders.load(..., training=False)``.
        pipeline: (index, count) of this process among those that share the split.
        num_epochs: epochs to yield; `epoch_batches` gives the batches of one.
        workers: Grain worker processes that read and decode, each with one TensorFlow thread
            (0: this process, TensorFlow on every core).
        **options: the fields of `LoadOptions` that apply (seed, flip, area_range, normalize,
            augment, eval_crop, ...).

    Raises:
        ManifestError, LoaderError: as for `loaders.load`; an option Grain cannot honour.
    """
    import grain

    if not isinstance(num_epochs, int) or num_epochs < 1:
        raise LoaderError(f"num_epochs must be a positive int, got {num_epochs!r}")
    plan, batches = _plan(path, split, batch_size, image_size, training, pipeline, options)
    # One batch at a time per process: TensorFlow already spreads a batch's images over the cores.
    read = grain.ReadOptions(num_threads=1, prefetch_buffer_size=2)
    ds = grain.MapDataset.range(num_epochs * plan.batches).map(batches).to_iter_dataset(read)
    if workers:
        _absl_flags_ready()
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers), worker_init_fn=_one_core_each)
    return ds


def _absl_flags_ready() -> None:
    """Grain's worker processes read an absl flag (its profiler's), which raises UnparsedFlagAccessError
    in a program that never parsed absl's flags (any program not started by `absl.app`) once a framework
    it profiles, such as JAX, is installed. Their defaults are what such a program means."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def _one_core_each(worker: int, workers: int) -> None:
    """In each Grain worker process, before TensorFlow starts: one thread for each kind of op,
    as the workers already share the cores between them."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def epoch_batches(path, split: str = "train", batch_size: int = 32, training: bool = True, **kwargs) -> int:
    """Batches `dataset` yields an epoch (its ``pipeline`` and options as given to it)."""
    image_size = kwargs.pop("image_size", (224, 224))
    pipeline = kwargs.pop("pipeline", (0, 1))
    for name in ("num_epochs", "workers"):
        kwargs.pop(name, None)
    return _plan(path, split, batch_size, image_size, training, pipeline, kwargs)[0].batches


def _read_order(source: SplitSource, opts: LoadOptions, pipeline: int, count: int):
    """The positions `loaders.load` reads in evaluation, in its order: its ranges interleaved
    (`loaders.dataset._records`), computed by the same tf.data interleave over positions."""
    import numpy as np
    import tensorflow as tf

    starts = [0, *itertools.accumulate(source.counts)]
    ranges = pipeline_ranges(source.counts, pipeline, count, "drop")
    first = tf.constant([starts[r.shard] + r.skip for r in ranges], tf.int64)
    take = tf.constant([r.take for r in ranges], tf.int64)
    positions = tf.data.Dataset.from_tensor_slices((first, take)).interleave(
        lambda s, t: tf.data.Dataset.range(s, s + t), cycle_length=opts.cycle_length, block_length=1
    )
    return np.fromiter(positions.as_numpy_iterator(), np.int64)


def _plan(path, split, batch_size, image_size, training, pipeline, options) -> tuple[EpochPlan, _Batches]:
    for name, (default, why) in _NOT_HERE.items():
        if name in options and options[name] != default:
            raise LoaderError(f"loaders.grain: {why}")
    opts = LoadOptions(image_size=image_size, training=training, **options)
    index, count = (int(v) for v in pipeline)
    if not 0 <= index < count:
        raise LoaderError(f"pipeline must be (index, count) with 0 <= index < count, got {pipeline!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise LoaderError(f"batch_size must be a positive int, got {batch_size!r}")
    source = open_split(str(path), split)
    opts.check_task(source.task)
    opts = opts.resolved(source.task)
    assert opts.drop_remainder is not None  # resolved() chose it
    size = epoch_size(source.records, batch_size, count, 1, opts.drop_remainder)
    fixed = None if training else _read_order(source, opts, index, count)
    plan = EpochPlan(source.records, size.per_pipeline, batch_size, size.batches_per_pipeline, index, opts.seed, fixed)
    return plan, _Batches(plan, SplitRecords(source), opts, source)
