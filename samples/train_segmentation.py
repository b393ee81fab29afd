"""Trains a tiny segmentation net on drawn shapes and reports the validation mean IoU.

    python samples/train_segmentation.py              # draws and converts out/segmentation-shapes if needed
    python samples/train_segmentation.py --epochs 20 --data out/my-segmentation-set

Proof that masks survive the whole path (image files and PNG class maps -> `prep convert --masks`
-> records -> `loaders.load` with random-resized crops and flips applied to image and mask alike
-> a model -> IoU): a mask one pixel out of step with its image costs IoU at every edge. The model
is a small encoder-decoder (stride 8, skip connections); the loss is cross-entropy over the pixels
that are not the manifest's `ignore_value` (the shapes' outlines). Runs on CPU in a few minutes
(docs/training.md).

The data, when --data has no manifest: drawn shapes (tests/support/task_records.py: rectangles and
ellipses of three colours on a dark background, 64-112 px JPEGs) written as image files with a
single-channel PNG class map each (0 background, 1-3 the colours, 255 the ellipses' outlines) and
converted with `prep convert IMAGES OUT --masks MASKS --classes classes.txt --split ...`.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from samples.quiet_tf import import_tensorflow  # noqa: E402


def ensure_dataset(data: pathlib.Path, images: int) -> None:
    if (data / "manifest.json").exists():
        return
    import os
    import random
    import subprocess

    from PIL import Image

    from tests.support.task_records import NAMES, draw, encode

    source = data.parent / (data.name + "-source")
    print(f"drawing {images} images and their class maps in {source}", flush=True)
    for sub in ("images", "masks"):
        (source / sub).mkdir(parents=True, exist_ok=True)
    rng = random.Random(2)
    for i in range(images):
        drawn = None
        while drawn is None or not drawn.shapes:  # blank images are near duplicates of each other
            drawn = draw(rng, rng.randint(64, 112), rng.randint(64, 112), kinds=("rect", "ellipse"))
        (source / "images" / f"img{i:05d}.jpg").write_bytes(encode(drawn.pixels, "jpeg"))
        Image.fromarray(drawn.class_map).save(source / "masks" / f"img{i:05d}.png")
    (source / "classes.txt").write_text("\n".join(("background",) + NAMES) + "\n")  # value v names line v
    cmd = [
        sys.executable,
        "-m",
        "prep.cli",
        "convert",
        str(source / "images"),
        str(data),
        "--masks",
        str(source / "masks"),
        "--classes",
        str(source / "classes.txt"),
        "--split",
        "train=0.8,validation=0.2",
        "--num-shards",
        "4",
        "--overwrite",
        "--no-progress",
    ]
    print("converting:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)


def build_model(keras, size: int, classes: int, width: int = 16):
    layers = keras.layers

    def conv(x, filters, strides=1):
        x = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False)(x)
        return layers.ReLU()(layers.BatchNormalization()(x))

    w = width
    inputs = keras.Input((size, size, 3))
    x1 = conv(inputs, w)  # 1/1
    x2 = conv(conv(x1, 2 * w, 2), 2 * w)  # 1/2
    x4 = conv(conv(x2, 3 * w, 2), 3 * w)  # 1/4
    x8 = conv(conv(x4, 4 * w, 2), 4 * w)  # 1/8
    y = conv(layers.Concatenate()([layers.UpSampling2D(2)(x8), x4]), 3 * w)
    y = conv(layers.Concatenate()([layers.UpSampling2D(2)(y), x2]), 2 * w)
    y = conv(layers.Concatenate()([layers.UpSampling2D(2)(y), x1]), w)
    return keras.Model(inputs, layers.Conv2D(classes, 1)(y))


def mean_iou(tf, model, evaluation, classes: int, ignore: int) -> tuple[float, list[float]]:
    """Mean over classes of intersection / union, over every non-ignored pixel of an evaluation epoch."""
    confusion = tf.zeros([classes, classes], tf.int64)
    for images, masks in evaluation:
        predicted = tf.argmax(model(images, training=False), axis=-1)
        truth = masks[..., 0]
        keep = truth != ignore
        confusion += tf.math.confusion_matrix(
            tf.boolean_mask(truth, keep), tf.boolean_mask(predicted, keep), classes, dtype=tf.int64
        )
    c = confusion.numpy().astype(float)
    inter = c.diagonal()
    union = c.sum(0) + c.sum(1) - inter
    ious = [float(i / u) if u else float("nan") for i, u in zip(inter, union)]
    present = [v for v in ious if v == v]
    return sum(present) / len(present), ious


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default=str(ROOT / "out" / "segmentation-shapes"), help="dataset (written if missing)"
    )
    parser.add_argument("--images", type=int, default=750, help="images to draw (80%% train, 20%% validation)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--width", type=int, default=12, help="channels of the first layer")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    data = pathlib.Path(args.data)
    ensure_dataset(data, args.images)

    tf = import_tensorflow()
    import keras

    import loaders
    from loaders.source import read_manifest

    keras.utils.set_random_seed(args.seed)
    manifest = read_manifest(str(data))
    classes, ignore = len(manifest.labels), manifest.ignore_value
    size = (args.size, args.size)
    train = loaders.load(data, "train", args.batch, size, seed=args.seed, area_range=(0.25, 1.0))
    validation = loaders.load(data, "validation", args.batch, size, training=False)
    model = build_model(keras, args.size, classes, args.width)
    steps = loaders.steps_per_epoch(data, "train", args.batch)
    optimizer = keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(3e-3, args.epochs * steps, alpha=0.05))

    @tf.function
    def step(images, masks):
        truth = masks[..., 0]
        keep = tf.cast(truth != ignore, tf.float32)
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_pixel = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.where(truth == ignore, 0, truth), logits)
            loss = tf.reduce_sum(per_pixel * keep) / tf.maximum(tf.reduce_sum(keep), 1.0)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    print(
        f"{manifest.splits['train'].examples} training images ({steps} steps of {args.batch}), "
        f"{manifest.splits['validation'].examples} validation; classes {', '.join(manifest.labels)}; "
        f"{args.size}x{args.size}, ignore value {ignore}",
        flush=True,
    )
    start = time.time()
    for epoch in range(args.epochs):
        losses = [float(step(images, masks)) for images, masks in train]
        print(f"epoch {epoch + 1}: loss {sum(losses) / len(losses):.3f} ({time.time() - start:.0f} s)", flush=True)
    trained = time.time() - start
    miou, ious = mean_iou(tf, model, validation, classes, ignore)
    print(
        f"trained {args.epochs} epochs in {trained:.0f} s; validation mean IoU {miou:.3f} (goal >= 0.8); per class "
        + ", ".join(f"{n} {v:.3f}" for n, v in zip(manifest.labels, ious))
    )


if __name__ == "__main__":
    main()
