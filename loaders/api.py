"""The public entry points: `load`, `distribute`, `epoch_size`, `steps_per_epoch`, `class_weights`."""

from __future__ import annotations

import dataclasses
import os

import loaders.epoch as plan
from loaders.load_options import LoadOptions
from loaders.source import open_split
from loaders.weights import balanced_weights
from prep.core import storage
from prep.core.errors import LoaderError


def load(
    path,
    split: str = "train",
    batch_size: int = 32,
    image_size=(224, 224),
    training: bool = True,
    *,
    pipeline: tuple[int, int] = (0, 1),
    **options,
):
    """A `tf.data.Dataset` of ``(image, label)`` batches from a dataset written by `prep convert`.

    Args:
        path: the dataset folder (holds manifest.json).
        split: a split the manifest lists.
        batch_size: examples per batch.
        image_size: output (height, width).
        training: random-resized crop, flip, shuffling, full batches only. False: deterministic
            and unshuffled, centre crop (or resize), the last batch may be partial.
        pipeline: (index, count): read only this pipeline's balanced share of the split, for
            sharding by hand (e.g. one process per host without tf.distribute).
        **options: any other field of `LoadOptions` (seed, remainder, augment, cache, rebalance,
            aspect_buckets, output, ...).

    Returns:
        tf.data.Dataset: batches of float32 images [batch, height, width, 3] and int32 labels
            [batch] (multi-label: float32 multi-hot [batch, classes]; detection: a dict of boxes
            [batch, N, 4] as [ymin, xmin, ymax, xmax] normalised, classes [batch, N] padded with -1
            and num_boxes [batch]; segmentation: int32 masks [batch, height, width, 1], see
            docs/loaders.md); a third element, the sample weight, when ``remainder="pad"``; a dict with
            ``output="features"``. Its cardinality is known (`steps_per_epoch`), except with
            aspect buckets in evaluation.

    Raises:
        ManifestError: no manifest, or one of an unknown version.
        LoaderError: unknown split, a shard missing or altered, a batch larger than the data,
            or a bad option.
    """
    from loaders.dataset import build

    opts = LoadOptions(image_size=image_size, training=training, **options)
    index, count = _check_pipeline(pipeline)
    _check_buckets(opts, count)
    source = _open(path, split, opts)
    opts.check_task(source.task)
    return build(source, opts, _check_batch(batch_size, "batch_size"), index, count)


def distribute(
    strategy,
    path,
    split: str = "train",
    global_batch_size: int = 64,
    image_size=(224, 224),
    training: bool = True,
    **options,
):
    """A distributed dataset for `strategy`, built with `distribute_datasets_from_function`.

    Each input pipeline (one per worker under MultiWorkerMirroredStrategy, one per host under
    TPUStrategy, one feeding every local replica under MirroredStrategy) reads an equal share
    of the split, batched per replica (``global_batch_size / num_replicas_in_sync``); with the
    default ``training=True`` batches are full, so shapes are static and every replica gets
    exactly `steps_per_epoch` batches per epoch.

    Args:
        strategy: a `tf.distribute.Strategy`.
        path: as for `load`.
        split: as for `load`.
        global_batch_size: examples per step over all replicas; a multiple of the replica count.
        image_size: as for `load`.
        training: as for `load`.
        **options: as for `load`.

    Raises:
        ManifestError, LoaderError: as for `load`, raised here rather than when iterating.
    """
    import tensorflow as tf

    from loaders.dataset import build

    opts = LoadOptions(image_size=image_size, training=training, **options)
    replicas = strategy.num_replicas_in_sync
    global_batch_size = _check_batch(global_batch_size, "global_batch_size")
    if global_batch_size % replicas:
        raise LoaderError(f"global_batch_size {global_batch_size} is not a multiple of the {replicas} replicas in sync")
    source = _open(path, split, opts)
    opts.check_task(source.task)
    pipelines = num_input_pipelines(strategy)
    _check_buckets(opts, pipelines)
    # Check sizes now, so a batch too large fails here with our message, not in a worker thread.
    plan.epoch_size(
        source.records,
        global_batch_size // replicas,
        pipelines,
        replicas // pipelines,
        bool(opts.resolved().drop_remainder),
        opts.remainder,
    )  # resolved: a bool, not None

    def dataset_fn(context: tf.distribute.InputContext):
        per_replica = context.get_per_replica_batch_size(global_batch_size)
        per_pipeline = context.num_replicas_in_sync // context.num_input_pipelines
        return build(source, opts, per_replica, context.input_pipeline_id, context.num_input_pipelines, per_pipeline)

    return strategy.distribute_datasets_from_function(dataset_fn)


def _check_buckets(opts: LoadOptions, pipelines: int) -> None:
    if opts.aspect_buckets and pipelines > 1 and not opts.resolved().drop_remainder:
        raise LoaderError(
            "aspect_buckets with several input pipelines needs drop_remainder=True: "
            "otherwise pipelines could yield different numbers of batches"
        )


def _open(path, split: str, opts: LoadOptions):
    """The split's source; with on_corrupt="skip", damaged shards replaced by their good records."""
    if opts.on_corrupt != "skip":
        return open_split(os.fspath(path), split)
    from loaders.repair import skip_corrupt

    source = open_split(os.fspath(path), split, check_files=False)
    _check_files_exist(source)
    return skip_corrupt(source)[0]


def _check_files_exist(source) -> None:
    for file in source.files:
        if not storage.exists(file):  # a gs:// shard too, not only a local one
            raise LoaderError(f"shard {file} is missing (listed in the manifest)")


@dataclasses.dataclass(frozen=True)
class _EpochOptions:
    """The options of `load` and `distribute` that decide how an epoch divides, as `epoch_size` takes them
    (on_corrupt is checked up front, the others where they are used)."""

    training: bool = True
    remainder: str = "drop"
    drop_remainder: bool | None = None
    aspect_buckets: tuple[float, ...] | None = None
    on_corrupt: str = "error"


def epoch_size(
    path,
    split: str = "train",
    global_batch_size: int = 32,
    *,
    strategy=None,
    num_pipelines: int | None = None,
    num_replicas: int | None = None,
    **options,
) -> plan.EpochSize:
    """How an epoch divides: records per pipeline, steps, dropped and padded records.

    Reads only the manifest, unless ``on_corrupt="skip"``: then, as `load` does, every
    shard is scanned and only its readable records count. With `strategy`, the pipeline
    and replica counts are the strategy's (as `distribute` uses them); without,
    `num_pipelines` and `num_replicas` (default one each, as `load`).

    Args:
        **options: the same ``training=True``, ``remainder="drop"``, ``drop_remainder=None``,
            ``aspect_buckets=None`` and ``on_corrupt="error"`` as given to `load` or `distribute`
            (no other keyword).
    """
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(_EpochOptions)})
    if unknown:
        raise TypeError(f"epoch_size() got an unexpected keyword argument {unknown[0]!r}")
    opts = _EpochOptions(**options)
    LoadOptions(on_corrupt=opts.on_corrupt)  # checks the value
    source = open_split(os.fspath(path), split, check_files=False)
    if opts.on_corrupt == "skip":
        from loaders.repair import readable_counts

        _check_files_exist(source)
        source = readable_counts(source)
    if strategy is not None:
        replicas = strategy.num_replicas_in_sync
        pipelines = num_input_pipelines(strategy)
    else:
        replicas = num_replicas or 1
        pipelines = num_pipelines or 1
    global_batch_size = _check_batch(global_batch_size, "global_batch_size")
    if global_batch_size % replicas or replicas % pipelines:
        raise LoaderError(
            f"global_batch_size {global_batch_size} must be a multiple of the {replicas} "
            f"replicas, and the replicas a multiple of the {pipelines} input pipelines"
        )
    drop = opts.training if opts.drop_remainder is None else opts.drop_remainder
    batch, per_pipeline = global_batch_size // replicas, replicas // pipelines
    size = plan.epoch_size(source.records, batch, pipelines, per_pipeline, drop, opts.remainder)
    aspect_buckets = opts.aspect_buckets
    if aspect_buckets and not size.drop_remainder:
        raise LoaderError(
            "with aspect_buckets and partial batches (evaluation, or drop_remainder=False) the "
            "number of batches depends on how the images fall into buckets: iterate the dataset "
            "to its end instead"
        )
    if aspect_buckets:
        steps = plan.bucketed_steps(size.per_pipeline, batch, len(aspect_buckets), per_pipeline)
        size = dataclasses.replace(size, steps=steps, dropped=size.records - pipelines * steps * batch * per_pipeline)
    return size


def steps_per_epoch(path, split: str = "train", global_batch_size: int = 32, **kwargs) -> int:
    """Steps (batches per replica) in one epoch; see `epoch_size` for the arguments."""
    return epoch_size(path, split, global_batch_size, **kwargs).steps


def class_weights(path, split: str = "train") -> dict[int, float]:
    """``{label_id: weight}`` for ``fit(class_weight=...)``, "balanced": N / (K · n_class).

    See `loaders.weights.balanced_weights`; counts come from the manifest. Every label id of
    the manifest's `labels` is a key: a class with no record in the split, such as one kept
    with no example by `prep convert --empty-classes keep`, gets 0.0, which no record uses.
    """
    source = open_split(os.fspath(path), split, check_files=False)
    if source.task != "classification":  # its counts are images containing a class, and ids start elsewhere
        raise LoaderError(
            f"class_weights is for single-label classification; {path} is a {source.task} dataset "
            f"(weight its loss per class from the manifest's class_counts or box_counts instead)"
        )
    return balanced_weights(source.class_counts)


def num_input_pipelines(strategy) -> int:
    """Input pipelines `distribute_datasets_from_function` creates for `strategy`.

    One per worker (chief included) in a multi-worker cluster, one per host under
    TPUStrategy, else one.
    """
    extended = strategy.extended
    hosts = getattr(extended, "num_hosts", None)
    if isinstance(hosts, int) and hosts > 0:
        return hosts
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None:
        spec = resolver.cluster_spec().as_dict()
        workers = len(spec.get("chief", [])) + len(spec.get("worker", []))
        if workers:
            return workers
    return 1


def _check_batch(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LoaderError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_pipeline(pipeline) -> tuple[int, int]:
    try:
        index, count = (int(v) for v in pipeline)
        plan.check_pipeline(index, count)
    except (TypeError, ValueError) as exc:
        raise LoaderError(f"pipeline must be (index, count) with 0 <= index < count: {exc}") from None
    return index, count
