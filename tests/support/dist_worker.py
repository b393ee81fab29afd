"""One process of the distributed loader tests; the parent (tests/e2e/test_distributed.py) asserts on its JSON.

    python tests/support/dist_worker.py mirrored DATA OUT.json --devices 3
    python tests/support/dist_worker.py mwms DATA OUT.json --index 0 --ports 41001,41002
    python tests/support/dist_worker.py mirrored DATA OUT.json --devices 2 --detection DETECTION_DATA
    python tests/support/dist_worker.py mirrored DATA OUT.json --devices 3 --no-training

mirrored: MirroredStrategy over N logical CPU devices (set before TensorFlow
starts). mwms: one of the workers of a MultiWorkerMirroredStrategy cluster on
127.0.0.1 (TF_CONFIG set before TensorFlow is imported). Both record, per
replica, the batches and file names of a training epoch (twice) and of a padded
evaluation epoch, then train: Keras 3 `fit` and a custom loop (mirrored), or
a custom loop and tf-keras `fit` when tf-keras is installed (mwms); mwms also
records how Keras 3 `fit` fails there; `--no-training` leaves the training out (a third of a
process's CPU). With `--detection`, the same process then reads a detection split through the same strategy (tests/support/dist_detection.py): a TensorFlow process less per configuration.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

IMAGE = (16, 16)


def epoch(strategy, dataset, weights: bool = False) -> dict:
    """Per replica: number of batches, batch sizes, file names (and sample weights) read in one epoch."""
    replicas = strategy.num_replicas_in_sync
    local = len(strategy.extended.worker_devices)
    out = {
        "batches": [0] * local,
        "sizes": [[] for _ in range(local)],
        "files": [[] for _ in range(local)],
        "weights": [[] for _ in range(local)],
        "replicas": replicas,
    }
    for batch in dataset:
        names = strategy.experimental_local_results(batch["image/filename"])
        ws = strategy.experimental_local_results(batch["weight"]) if weights else [None] * len(names)
        images = strategy.experimental_local_results(batch["image"])
        for r, (n, w, im) in enumerate(zip(names, ws, images)):
            if n.shape[0] == 0:
                continue
            out["batches"][r] += 1
            out["sizes"][r].append(int(n.shape[0]))
            out["files"][r].extend(x.decode() for x in n.numpy())
            assert tuple(im.shape[1:]) == IMAGE + (3,), im.shape
            if w is not None:
                out["weights"][r].extend(float(v) for v in w.numpy())
    return out


def small_model(keras, classes: int):
    return keras.Sequential(
        [
            keras.Input(IMAGE + (3,)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(classes),
        ]
    )


def data_checks(strategy, loaders, data: str, global_batch: int) -> dict:
    result = {
        "steps": loaders.steps_per_epoch(data, "train", global_batch, strategy=strategy),
        "pipelines": loaders.num_input_pipelines(strategy),
    }
    train = loaders.distribute(strategy, data, "train", global_batch, IMAGE, output="features")
    result["train"] = [epoch(strategy, train), epoch(strategy, train)]
    evaluation = loaders.distribute(
        strategy, data, "train", global_batch, IMAGE, training=False, remainder="pad", output="features"
    )
    result["eval"] = epoch(strategy, evaluation, weights=True)
    return result


def mirrored(args) -> dict:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
    import keras

    import loaders

    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.devices)])
    global_batch = 2 * args.devices
    result = data_checks(strategy, loaders, args.data, global_batch)
    try:
        loaders.distribute(strategy, args.data, "train", args.devices + 1, IMAGE)
    except loaders.LoaderError as exc:
        result["uneven_batch_error"] = str(exc)
    if args.no_training:
        return with_detection(result, strategy, args)
    classes = len(json.load(open(os.path.join(args.data, "manifest.json")))["labels"])
    with strategy.scope():
        model = small_model(keras, classes)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = loaders.steps_per_epoch(args.data, "train", global_batch, strategy=strategy)
    dist = loaders.distribute(strategy, args.data, "train", global_batch, IMAGE, repeat=True)
    history = model.fit(dist, epochs=2, steps_per_epoch=steps, verbose=0)
    result["fit_distribute_losses"] = history.history["loss"]
    plain = loaders.load(args.data, "train", global_batch, IMAGE)
    history = model.fit(plain, epochs=1, verbose=0, class_weight=loaders.class_weights(args.data, "train"))
    result["fit_load_loss"] = history.history["loss"][-1]
    result["fit_load_steps"] = int(plain.cardinality())
    with strategy.scope():
        looped = small_model(keras, classes)
        optimizer = keras.optimizers.Adam()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    dist = loaders.distribute(strategy, args.data, "train", global_batch, IMAGE)
    result["loop_losses"] = loaders.train_loop(strategy, looped, optimizer, loss, dist, steps, global_batch)
    return with_detection(result, strategy, args)


def mwms(args) -> dict:
    ports = args.ports.split(",")
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": args.index}}
    )
    import keras
    import tensorflow as tf

    import loaders

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = 2 * strategy.num_replicas_in_sync
    result = data_checks(strategy, loaders, args.data, global_batch)
    classes = len(json.load(open(os.path.join(args.data, "manifest.json")))["labels"])
    steps = loaders.steps_per_epoch(args.data, "train", global_batch, strategy=strategy)
    with strategy.scope():
        model = small_model(keras, classes)
        optimizer = keras.optimizers.Adam()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    dist = loaders.distribute(strategy, args.data, "train", global_batch, IMAGE)
    result["loop_losses"] = loaders.train_loop(strategy, model, optimizer, loss, dist, steps, global_batch, epochs=2)
    with strategy.scope():
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        model.fit(dist, epochs=1, steps_per_epoch=steps, verbose=0)
        result["keras3_fit_error"] = None
    except Exception as exc:  # the known Keras 3 failure; recorded so the README can be kept honest
        result["keras3_fit_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    try:
        import tf_keras
    except ImportError:
        result["tf_keras_losses"] = None
    else:
        with strategy.scope():
            legacy = small_model(tf_keras, classes)
            legacy.compile("adam", tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        dist = loaders.distribute(strategy, args.data, "train", global_batch, IMAGE, repeat=True)
        history = legacy.fit(dist, epochs=2, steps_per_epoch=steps, verbose=0)
        result["tf_keras_losses"] = history.history["loss"]
    return with_detection(result, strategy, args)


def with_detection(result: dict, strategy, args) -> dict:
    if args.detection:
        from tests.support import dist_detection

        result["detection"] = dist_detection.checks(strategy, args.detection)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["mirrored", "mwms"])
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--ports", default="")
    parser.add_argument("--detection", default="", help="a detection dataset to read with the same strategy")
    parser.add_argument("--no-training", action="store_true", help="mirrored: the data checks alone")
    args = parser.parse_args()
    result = mirrored(args) if args.mode == "mirrored" else mwms(args)
    for key, value in result.items():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, float) and not math.isfinite(v):
                raise SystemExit(f"{key} is not finite: {value}")
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
