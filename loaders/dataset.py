"""One input pipeline as a `tf.data.Dataset` (TensorFlow).

Stages, in order:

1. Ranges: the (shard, skip, take) ranges `loaders.epoch` gives this pipeline.
   When training with `shuffle_files`, a new plan per epoch: an epoch seed
   drawn by ``Dataset.random(seed, rerandomize_each_iteration=True)`` (the
   same on every worker) is passed to `epoch.shard_order`, so the union over
   pipelines stays the split and every pipeline's count stays equal.
2. ``interleave(TFRecordDataset(file).skip(skip).take(take), cycle_length,
   num_parallel_calls=AUTOTUNE, deterministic=...)``.
3. Cache, training: the serialized records, so every epoch still shuffles,
   crops, flips and augments anew (the plan is then fixed: epoch 0's order).
4. Rebalance (option): repeat, keep a record of class c with probability
   min_n / n_c, take exactly this pipeline's count.
5. Shuffle buffer (training), then batch (or aspect buckets via
   `group_by_window`), take exactly the batches `epoch.epoch_size` promises.
6. Vectorized `tf.io.parse_example` of a batch, then each image decoded as its own
   element of a parallel map and the batch made again (`decode.image_map`; aspect
   buckets and ragged features: the batch at once, `decode.whole_batch`): random-resized
   crop through `decode_and_crop_jpeg` when training, centre crop or resize otherwise, flip.
7. Cache, evaluation: decoded, resized images, before normalisation.
8. The `augment` hook, normalisation, output structure, `assert_cardinality`,
   `repeat` (option), `prefetch(AUTOTUNE)`, and deliberate `tf.data.Options`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np
import tensorflow as tf

import loaders.decode as images
import loaders.epoch as plan
from loaders.load_options import LoadOptions
from loaders.records import range_dataset
from loaders.source import SplitSource, manifest_digest
from loaders.weights import acceptance_probabilities
from prep.core import schema

AUTOTUNE = tf.data.AUTOTUNE


def derive_seed(seed: int, *parts) -> int:
    """A 63-bit seed from `seed` and `parts`, the same in every process."""
    digest = hashlib.sha256(repr((seed,) + parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _ranges_dataset(source: SplitSource, opts: LoadOptions, pipeline: int, num_pipelines: int, multiple: int):
    counts = source.counts

    def arrays(order):
        ranges = plan.pipeline_ranges(counts, pipeline, num_pipelines, opts.remainder, order, multiple)
        return (
            np.array([r.shard for r in ranges], np.int64),
            np.array([r.skip for r in ranges], np.int64),
            np.array([r.take for r in ranges], np.int64),
            np.array([0.0 if r.padding else 1.0 for r in ranges], np.float32),
        )

    if not opts.shuffle_files:
        return tf.data.Dataset.from_tensor_slices(arrays(None))
    if opts.cache:
        return tf.data.Dataset.from_tensor_slices(arrays(plan.shard_order(len(counts), opts.seed)))

    def epoch_plan(epoch_seed):
        def py(s):
            return arrays(plan.shard_order(len(counts), int(s)))

        out = tf.numpy_function(py, [epoch_seed], (tf.int64, tf.int64, tf.int64, tf.float32), stateful=False)
        for t in out:
            t.set_shape([None])
        return tf.data.Dataset.from_tensor_slices(tuple(out))

    # Same seed on every worker, so every pipeline cuts its ranges from the same epoch order.
    epochs = tf.data.Dataset.random(seed=derive_seed(opts.seed, "files"), rerandomize_each_iteration=True)
    return epochs.take(1).flat_map(epoch_plan)


def _records(
    source: SplitSource, opts: LoadOptions, pipeline: int, num_pipelines: int, multiple: int, with_weight: bool
):
    """Serialized records; ``{"record", "weight"}`` dicts when padding needs the weight carried along."""
    files = tf.constant(source.files)

    def read(shard, skip, take, weight):
        file = tf.gather(files, shard)
        records = _named_errors(range_dataset(source.file_format, file, skip, take), file, skip, take)
        if with_weight:
            return records.map(lambda r: {"record": r, "weight": weight})
        return records

    return _ranges_dataset(source, opts, pipeline, num_pipelines, multiple).interleave(
        read,
        cycle_length=opts.cycle_length,
        block_length=1,
        num_parallel_calls=AUTOTUNE,
        deterministic=opts.deterministic,
    )


def _named_errors(records, file, skip, take):
    """TensorFlow's error for a bad record says only "corrupted record at <byte>". Read the
    range with `ignore_errors` (which ends it at a bad record) followed by a one-element
    dataset whose map fails with an error naming the shard and the range, and keep `take`
    elements: a complete range ends before that element is asked for, so reading it costs
    no function call per record (a `filter` per record cost ~7% of detection's CPU per
    image, docs/benchmarks.md); a short one fails. (`prep verify` names the exact record.)"""

    def fail(_):
        with tf.control_dependencies(
            [
                tf.debugging.Assert(
                    False,
                    [
                        "shard",
                        file,
                        "is corrupt: a record from index",
                        skip,
                        "to",
                        skip + take - 1,
                        "cannot be read (bad length or CRC); `prep verify` names it, and on_corrupt='skip' reads "
                        "the good records",
                    ],
                )
            ]
        ):
            return tf.constant(b"")

    return records.ignore_errors().concatenate(tf.data.Dataset.from_tensors(0).map(fail)).take(take)


def _record(x):
    return x["record"] if isinstance(x, dict) else x


def _rebalance(ds, source: SplitSource, opts: LoadOptions, pipeline: int, per_pipeline: int):
    probs = tf.constant(acceptance_probabilities(source.class_counts), tf.float32)
    spec = {schema.LABEL: tf.io.FixedLenFeature([], tf.int64)}
    draws = tf.data.Dataset.random(seed=derive_seed(opts.seed, "rebalance", pipeline), rerandomize_each_iteration=True)

    def keep(x, draw):
        label = tf.io.parse_single_example(_record(x), spec)[schema.LABEL]
        uniform = tf.random.stateless_uniform([], seed=tf.stack([draw, tf.constant(images.KEEP, tf.int64)]))
        return uniform < tf.gather(probs, label)

    return tf.data.Dataset.zip(ds.repeat(), draws).filter(keep).map(lambda x, _: x).take(per_pipeline)


def _bucket_key(opts: LoadOptions):
    boundaries = tf.constant(opts.bucket_boundaries() or [0.0], tf.float32)
    nb = len(opts.aspect_buckets or ())  # called only with buckets
    spec = {schema.HEIGHT: tf.io.FixedLenFeature([], tf.int64), schema.WIDTH: tf.io.FixedLenFeature([], tf.int64)}

    def key(x):
        hw = tf.io.parse_single_example(_record(x), spec)
        ratio = tf.cast(hw[schema.WIDTH], tf.float32) / tf.cast(hw[schema.HEIGHT], tf.float32)
        if nb == 1:
            return tf.constant(0, tf.int64)
        return tf.cast(tf.searchsorted(boundaries, ratio[None], side="right")[0], tf.int64)

    return key


def build(
    source: SplitSource,
    opts: LoadOptions,
    batch_size: int,
    pipeline: int = 0,
    num_pipelines: int = 1,
    replicas_per_pipeline: int = 1,
) -> tf.data.Dataset:
    """The dataset of input pipeline `pipeline` of `num_pipelines`, batched `batch_size` per replica.

    Raises:
        LoaderError: the batch (times the replicas this pipeline feeds) is larger than its records.
    """
    opts.check_task(source.task)
    opts = opts.resolved(source.task)
    plan.check_pipeline(pipeline, num_pipelines)
    training = opts.training
    assert opts.drop_remainder is not None  # resolved() chose it
    size = plan.epoch_size(
        source.records, batch_size, num_pipelines, replicas_per_pipeline, opts.drop_remainder, opts.remainder
    )
    batches = size.batches_per_pipeline
    drop = size.drop_remainder  # always with padding: the padding fills the last step
    buckets = opts.aspect_buckets
    if buckets and drop:
        steps = plan.bucketed_steps(size.per_pipeline, batch_size, len(buckets), replicas_per_pipeline)
        batches = steps * replicas_per_pipeline
    padded = opts.remainder == "pad"
    with_seed = training or opts.rebalance or opts.flip

    ds = _records(source, opts, pipeline, num_pipelines, batch_size * replicas_per_pipeline, with_weight=padded)
    if opts.cache and training:
        ds = ds.cache(_cache_name(opts, source, pipeline, num_pipelines, batch_size * replicas_per_pipeline, "records"))
    if opts.rebalance:
        ds = _rebalance(ds, source, opts, pipeline, size.per_pipeline)
    if opts.shuffle_buffer:
        ds = ds.shuffle(
            opts.shuffle_buffer, seed=derive_seed(opts.seed, "shuffle", pipeline), reshuffle_each_iteration=True
        )
    if buckets:
        key = _bucket_key(opts)
        ds = ds.map(
            lambda x: {**(x if isinstance(x, dict) else {"record": x}), "bucket": key(x)},
            num_parallel_calls=AUTOTUNE,
            deterministic=opts.deterministic,
        )
        ds = ds.group_by_window(lambda x: x["bucket"], lambda _, w: w.batch(batch_size), window_size=batch_size)
        if drop:
            ds = ds.filter(lambda x: tf.shape(x["record"])[0] == batch_size).take(batches)
    else:
        ds = ds.batch(batch_size, drop_remainder=drop)
        if drop:
            ds = ds.take(batches)
    if with_seed:  # one seed per batch, drawn anew each epoch; per-example seeds derive from it
        seeds = tf.data.Dataset.random(
            seed=derive_seed(opts.seed, "batches", pipeline), rerandomize_each_iteration=True
        )
        ds = tf.data.Dataset.zip(ds, seeds)

    d, finish = image_decoder(opts, source, padded)
    cache_decoded = opts.cache and not training
    then = (lambda x: x) if cache_decoded else finish
    if buckets:  # a batch's images share its bucket's size: decoded together
        decode = images.whole_batch(d)
        ds = ds.map(lambda *x: then(decode(*x)), num_parallel_calls=AUTOTUNE, deterministic=opts.deterministic)
    else:
        ds = images.image_map(ds, d, batch_size, drop, bool(opts.deterministic), then)
    if cache_decoded:
        ds = ds.cache(_cache_name(opts, source, pipeline, num_pipelines, batch_size * replicas_per_pipeline, "decoded"))
        ds = ds.map(finish, num_parallel_calls=AUTOTUNE, deterministic=opts.deterministic)
    if not buckets or drop:
        ds = ds.apply(tf.data.experimental.assert_cardinality(batches))
    if opts.repeat:  # each pass is one epoch: a new epoch seed, shard order, shuffle and augmentation
        ds = ds.repeat()
    ds = ds.prefetch(AUTOTUNE)
    return ds.with_options(data_options(opts, sharded=num_pipelines > 1))


def batch_decoder(opts: LoadOptions, source: SplitSource, padded: bool = False):
    """(decode, finish) of a batch of serialized records, for the task: ``decode(records,
    batch_seed=None)`` parses, crops, flips and resizes (`decode.whole_batch`); ``finish`` augments,
    normalises and shapes the output. `opts` resolved. For `loaders.grain`, which decodes a batch at
    a time; `build` decodes image by image (`image_decoder`)."""
    d, finish = image_decoder(opts, source, padded)
    return images.whole_batch(d), finish


def image_decoder(opts: LoadOptions, source: SplitSource, padded: bool = False):
    """(`decode.BatchDecode`, finish) for the task; `opts` resolved."""
    if source.task in ("detection", "segmentation"):
        import loaders.tasks as tasks

        return tasks.decoder(opts, source), tasks.finisher(opts, source, padded)
    return _decoder(opts, source), _finisher(opts, padded)


def _decoder(opts: LoadOptions, source: SplitSource) -> images.BatchDecode:
    spec = images.tf_feature_spec()
    multilabel = source.task == "multilabel"
    if multilabel:  # lists of ids (from 0) and names; the label becomes a multi-hot vector
        spec[schema.LABEL] = tf.io.RaggedFeature(tf.int64)
        spec[schema.TEXT] = tf.io.RaggedFeature(tf.string)
    keys = (
        schema.FORMAT,
        schema.HEIGHT,
        schema.WIDTH,
        schema.CHANNELS,
        schema.LABEL,
        schema.TEXT,
        schema.FILENAME,
        schema.SHA256,
    )
    buckets = opts.aspect_buckets
    shape = [None, None, 3] if buckets else [opts.image_size[0], opts.image_size[1], 3]

    def split(x, batch_seed=None):
        x = x if isinstance(x, dict) else {"record": x}
        features = tf.io.parse_example(x["record"], spec)
        bucket = x["bucket"] if buckets else tf.zeros(tf.shape(x["record"]), tf.int64)
        per_image = tuple(features[k] for k in (schema.ENCODED, schema.FORMAT, schema.HEIGHT, schema.WIDTH))
        per_image += (images.example_seeds(x["record"], batch_seed), bucket)
        if multilabel:
            hot = tf.one_hot(features[schema.LABEL].to_tensor(default_value=-1), len(source.labels))
            label = tf.minimum(tf.reduce_sum(hot, axis=1), 1.0)  # float32 [batch, classes]; -1 pads to zeros
        else:
            label = tf.cast(features[schema.LABEL], tf.int32)
        rest = {"label": label}
        if "weight" in x:
            rest["weight"] = x["weight"]
        if opts.output == "features":
            rest.update({k: features[k] for k in keys})
        return per_image, rest

    return images.BatchDecode(
        split,
        images.image_one(opts),
        lambda outs, rest: {"image": outs[0], **rest},
        (tf.TensorSpec(shape, tf.float32),),
    )


def _finisher(opts: LoadOptions, padded: bool):
    def finish(x):
        imgs, labels = x["image"], x["label"]
        if opts.augment is not None:
            imgs, labels = opts.augment(imgs, labels)
        imgs = images.normalize(tf.cast(imgs, tf.float32), opts.normalize)
        if opts.output == "features":
            return {**x, "image": imgs, "label": labels}
        if padded:
            return imgs, labels, x["weight"]
        return imgs, labels

    return finish


def _cache_name(opts: LoadOptions, source: SplitSource, pipeline: int, num_pipelines: int, step: int, what: str) -> str:
    """The cache file prefix: the user's, then split, kind, pipeline and a digest of
    everything the cached elements depend on, so that a cache written for another
    dataset, pipeline count or options is never read back."""
    if opts.cache is True:
        return ""  # memory
    assert opts.cache is not False  # called only when caching
    settings = {
        f.name: getattr(opts, f.name)
        for f in dataclasses.fields(opts)
        if f.name not in ("augment", "threads", "cache", "output", "repeat")
    }  # applied after the cache
    identity = {
        "dataset": manifest_digest(source.root),
        "split": source.split,
        "files": list(source.files),
        "counts": list(source.counts),
        "pipeline": [pipeline, num_pipelines, step],
        "settings": settings,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=repr).encode()).hexdigest()[:16]
    return f"{os.fspath(opts.cache)}-{source.split}-{what}-{pipeline}-{digest}"


def data_options(opts: LoadOptions, sharded: bool) -> tf.data.Options:
    """The `tf.data.Options` every loader sets, deliberately.

    Autotuning on (parallelism and prefetch buffers); determinism from the
    options (off when training: faster, order only); map parallelization; an
    optional private thread pool; and, when the pipeline is one of several,
    auto-sharding off, because `loaders.epoch` already gave it its exact share.
    Intra-op parallelism is turned on (0: the machine's default) on purpose:
    tf.data limits it to 1 unless told otherwise, but a batch decoded whole (aspect
    buckets) is one `map_fn` whose iterations run concurrently only with it (docs/design.md).
    """
    options = tf.data.Options()
    options.autotune.enabled = True
    options.deterministic = bool(opts.deterministic)
    options.threading.max_intra_op_parallelism = 0
    if opts.threads:
        options.threading.private_threadpool_size = opts.threads
    options.experimental_optimization.map_parallelization = True
    if sharded:
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options
