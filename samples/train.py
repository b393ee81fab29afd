"""Trains a small Keras CNN on the converted sample shapes with MirroredStrategy.

    python samples/train.py                      # converts samples/shapes to out/shapes if needed
    python samples/train.py --epochs 40 --replicas 2

Proof that images and labels survive the round trip raw files -> `prep convert`
-> TFRecord shards -> `loaders`: on 5 classes (chance 20%, majority class 29%)
it reaches the accuracy stated in docs/training.md. Runs on CPU: `--replicas N`
splits the CPU into N logical devices so MirroredStrategy has N replicas, as
it would with N GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from samples.quiet_tf import import_tensorflow, without_auto_shard  # noqa: E402


def ensure_converted(source: pathlib.Path, data: pathlib.Path) -> None:
    if (data / "manifest.json").exists():
        return
    cmd = [
        sys.executable,
        "-m",
        "prep.cli",
        "convert",
        str(source),
        str(data),
        "--split",
        "train=0.8,validation=0.1,test=0.1",
        "--num-shards",
        "2",
        "--overwrite",
        "--no-progress",
    ]
    print("converting:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def build_model(keras, size: int, classes: int):
    layers = keras.layers
    model = [keras.Input((size, size, 3))]
    for filters in (32, 64, 96, 128):
        model += [
            layers.Conv2D(filters, 3, padding="same", use_bias=False),
            layers.BatchNormalization(momentum=0.9),
            layers.ReLU(),
            layers.MaxPooling2D(),
        ]
    model += [layers.GlobalMaxPooling2D(), layers.Dropout(0.2), layers.Dense(classes)]
    return keras.Sequential(model)


def colour_jitter(tf):
    """An `augment=` hook: a random channel order per batch and random inversion per image.

    The shapes differ by geometry, not colour; with 163 training images a CNN
    otherwise memorises colours and backgrounds (train 99%, validation 38% here).
    """

    def augment(images, labels):  # float32 [batch, h, w, 3] in [0, 255]
        images = tf.gather(images, tf.random.shuffle(tf.range(3)), axis=-1)
        invert = tf.random.uniform([tf.shape(images)[0], 1, 1, 1]) < 0.5
        return tf.where(invert, 255.0 - images, images), labels

    return augment


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(ROOT / "samples" / "shapes"))
    parser.add_argument("--data", default=str(ROOT / "out" / "shapes"), help="converted dataset (made if missing)")
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--batch", type=int, default=32, help="global batch size")
    parser.add_argument("--size", type=int, default=64, help="image side")
    parser.add_argument("--replicas", type=int, default=2, help="logical CPU devices = MirroredStrategy replicas")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    data = pathlib.Path(args.data)
    ensure_converted(pathlib.Path(args.source), data)

    tf = import_tensorflow()  # without its start-up log lines

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
    import keras

    import loaders

    keras.utils.set_random_seed(args.seed)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.replicas)])
    size = (args.size, args.size)
    manifest = json.loads((data / "manifest.json").read_text())
    classes = len(manifest["labels"])
    # repeat=True: one endless stream of epochs; Keras reads steps_per_epoch batches per epoch.
    # A mild random-resized crop: the shapes sit off-centre and a small crop would cut them out.
    train = loaders.distribute(
        strategy,
        data,
        "train",
        args.batch,
        size,
        seed=args.seed,
        area_range=(0.85, 1.0),
        augment=colour_jitter(tf),
        repeat=True,
    )
    steps = loaders.steps_per_epoch(data, "train", args.batch, strategy=strategy)
    # remainder="pad": full batches (Keras splits them evenly over the replicas), padding weighted 0,
    # so the accuracy counts every validation and test image exactly once.
    validation = without_auto_shard(
        tf, loaders.load(data, "validation", args.batch, size, training=False, central_fraction=1.0, remainder="pad")
    )
    test = without_auto_shard(
        tf, loaders.load(data, "test", args.batch, size, training=False, central_fraction=1.0, remainder="pad")
    )
    with strategy.scope():
        model = build_model(keras, args.size, classes)
        model.compile(
            keras.optimizers.Adam(2e-3),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            weighted_metrics=["accuracy"],
        )
    print(
        f"{strategy.num_replicas_in_sync} replicas, {steps} steps per epoch of {args.batch}; "
        f"{manifest['splits']['validation']['examples']} validation and "
        f"{manifest['splits']['test']['examples']} test images",
        flush=True,
    )
    start = time.time()
    history = model.fit(train, epochs=args.epochs, steps_per_epoch=steps, validation_data=validation, verbose=2)
    _, val_accuracy = model.evaluate(validation, verbose=0)
    _, test_accuracy = model.evaluate(test, verbose=0)
    print(
        f"trained {args.epochs} epochs in {time.time() - start:.0f} s; train accuracy "
        f"{history.history['accuracy'][-1]:.3f}, validation accuracy {val_accuracy:.3f}, "
        f"test accuracy {test_accuracy:.3f} (chance 0.20)"
    )


if __name__ == "__main__":
    main()
