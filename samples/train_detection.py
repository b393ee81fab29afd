"""Trains a tiny CenterNet-style detector on drawn shapes and evaluates it with pycocotools' COCOeval.

    python samples/train_detection.py                 # converts samples/shapes_detection to out/shapes-detection
    python samples/train_detection.py --synthetic     # a larger generated set instead (out/detection-shapes)

Proof that boxes survive the whole path (annotations -> `prep convert` -> records ->
`loaders.load` with SSD-style crops and flips -> a model -> COCO mAP): a detector can only
learn where the boxes are if the boxes stay on their pixels. The model is a small CNN at
stride 4 with CenterNet's heads (Zhou et al. 2019, "Objects as Points"): a per-class heat map
of object centres (focal loss), the box size and the centre's sub-cell offset (L1 at the
centres). Decoding takes the heat map's 3x3 local maxima, top 20. Runs on CPU in about three
minutes (docs/training.md gives figures).

The default data is the repository's detection sample (samples/make_detection.py: circles,
squares and triangles of random colours, polygons, some EXIF-turned JPEGs), converted with
`prep convert --annotations` into a train/validation split. `--synthetic` writes instead a
drawn-shapes set in the same record format (tests/support/task_records.py: rectangles whose
colour is their class, 800 train and 200 validation images).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from samples.quiet_tf import import_tensorflow  # noqa: E402

STRIDE = 4


def ensure_converted(source: pathlib.Path, data: pathlib.Path) -> None:
    if (data / "manifest.json").exists():
        return
    import os
    import subprocess

    cmd = [
        sys.executable,
        "-m",
        "prep.cli",
        "convert",
        str(source / "images"),
        str(data),
        "--annotations",
        str(source / "instances.json"),
        "--split",
        "train=0.8,validation=0.2",
        "--overwrite",
        "--no-progress",
    ]
    print("converting:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)


def ensure_dataset(data: pathlib.Path, train: int, validation: int) -> None:
    if (data / "manifest.json").exists():
        return
    from tests.support.task_records import write_dataset

    print(f"writing a drawn-shapes detection set to {data}", flush=True)
    write_dataset(
        data,
        "detection",
        {"train": train, "validation": validation},
        {"train": 4, "validation": 2},
        fmt="jpeg",
        size_range=(64, 112),
        masks=False,
        seed=1,
    )


def build_model(keras, size: int, classes: int, width: int = 16):
    layers = keras.layers
    w = width

    def conv(x, filters, strides=1):
        x = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False)(x)
        return layers.ReLU()(layers.BatchNormalization()(x))

    inputs = keras.Input((size, size, 3))
    x = conv(inputs, w, 2)  # 1/2
    x4 = conv(conv(x, 2 * w, 2), 2 * w)  # 1/4: the output's stride
    x8 = conv(conv(x4, 3 * w, 2), 3 * w)  # 1/8: context for the larger shapes
    y = conv(conv(x8, 4 * w, 2), 4 * w)  # 1/16
    y = conv(layers.Concatenate()([layers.UpSampling2D(2)(y), x8]), 3 * w)
    x = conv(layers.Concatenate()([layers.UpSampling2D(2)(y), x4]), 3 * w)
    prior = -2.19  # sigmoid(-2.19) = 0.1: CenterNet's start, so the focal loss does not begin saturated
    heat = layers.Conv2D(classes, 1, bias_initializer=keras.initializers.Constant(prior))(conv(x, 2 * w))
    size_offset = layers.Conv2D(4, 1)(conv(x, 2 * w))
    return keras.Model(inputs, layers.Concatenate()([heat, size_offset]))


def targets(tf, boxes, classes, num, classes_n: int, grid: int):
    """Heat map [B, g, g, C], size and offset [B, g, g, 4], centre mask [B, g, g] from padded boxes."""
    valid = tf.cast(tf.range(tf.shape(classes)[1])[None] < num[:, None], tf.float32)  # [B, N]
    ymin, xmin, ymax, xmax = tf.unstack(boxes * grid, axis=-1)
    cy, cx = (ymin + ymax) / 2, (xmin + xmax) / 2
    iy = tf.clip_by_value(tf.floor(cy), 0, grid - 1)
    ix = tf.clip_by_value(tf.floor(cx), 0, grid - 1)
    sy, sx = tf.maximum((ymax - ymin) / 6, 0.5), tf.maximum((xmax - xmin) / 6, 0.5)
    cells = tf.range(grid, dtype=tf.float32)
    gy = tf.exp(-((cells[None, None] - iy[..., None]) ** 2) / (2 * sy[..., None] ** 2))  # [B, N, g]
    gx = tf.exp(-((cells[None, None] - ix[..., None]) ** 2) / (2 * sx[..., None] ** 2))
    gauss = gy[..., :, None] * gx[..., None, :] * valid[..., None, None]  # [B, N, g, g]
    onehot = tf.one_hot(classes - 1, classes_n) * valid[..., None]  # [B, N, C]; padding -1 -> -2: zeros
    heat = tf.reduce_max(gauss[..., None] * onehot[:, :, None, None, :], axis=1)
    centre = (
        tf.one_hot(tf.cast(iy, tf.int32), grid)[..., :, None]
        * tf.one_hot(tf.cast(ix, tf.int32), grid)[..., None, :]
        * valid[..., None, None]
    )  # [B, N, g, g]
    regress = tf.stack([ymax - ymin, xmax - xmin, cy - iy, cx - ix], axis=-1)  # [B, N, 4] in cells
    return heat, tf.einsum("bnyx,bnk->byxk", centre, regress), tf.reduce_max(centre, axis=1)


def loss_fn(tf, output, heat, regress, mask, classes_n: int):
    p = tf.clip_by_value(tf.sigmoid(output[..., :classes_n]), 1e-4, 1 - 1e-4)
    pos = tf.cast(heat >= 1.0 - 1e-6, tf.float32)
    focal = pos * (1 - p) ** 2 * tf.math.log(p) + (1 - pos) * (1 - heat) ** 4 * p**2 * tf.math.log(1 - p)
    n = tf.maximum(tf.reduce_sum(pos), 1.0)
    l1 = tf.reduce_sum(tf.abs(output[..., classes_n:] - regress) * mask[..., None]) / tf.maximum(
        tf.reduce_sum(mask), 1.0
    )
    return -tf.reduce_sum(focal) / n + 0.1 * l1


def decode(tf, output, classes_n: int, grid: int, k: int = 20):
    """(boxes [B, k, 4] normalised yxyx, scores [B, k], classes [B, k] from 1) from the heads."""
    heat = tf.sigmoid(output[..., :classes_n])
    peaks = heat * tf.cast(tf.equal(heat, tf.nn.max_pool2d(heat, 3, 1, "SAME")), tf.float32)
    b = tf.shape(heat)[0]
    scores, idx = tf.math.top_k(tf.reshape(peaks, [b, -1]), k)
    cell, klass = idx // classes_n, idx % classes_n
    iy, ix = cell // grid, cell % grid
    reg = tf.gather(tf.reshape(output[..., classes_n:], [b, -1, 4]), cell, batch_dims=1)
    cy = (tf.cast(iy, tf.float32) + reg[..., 2]) / grid
    cx = (tf.cast(ix, tf.float32) + reg[..., 3]) / grid
    h, w = reg[..., 0] / grid, reg[..., 1] / grid
    return tf.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], -1), scores, klass + 1


def coco_map(evaluation, predict, size: int, names) -> tuple[float, float]:
    """(AP@0.5, AP@0.5:0.95) of COCOeval over an evaluation epoch, boxes in output pixels."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images, annotations, results = [], [], []
    for images_batch, t in evaluation:
        boxes, scores, labels = (v.numpy() for v in predict(images_batch))
        for i in range(images_batch.shape[0]):
            image_id = len(images) + 1
            images.append({"id": image_id, "width": size, "height": size})
            for j in range(int(t["num_boxes"][i])):
                y0, x0, y1, x1 = (t["boxes"][i, j].numpy() * size).tolist()
                annotations.append(
                    {
                        "id": len(annotations) + 1,
                        "image_id": image_id,
                        "category_id": int(t["classes"][i, j]),
                        "bbox": [x0, y0, x1 - x0, y1 - y0],
                        "area": (x1 - x0) * (y1 - y0),
                        "iscrowd": 0,
                    }
                )
            for (y0, x0, y1, x1), s, c in zip(boxes[i] * size, scores[i], labels[i]):
                results.append(
                    {
                        "image_id": image_id,
                        "category_id": int(c),
                        "score": float(s),
                        "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                    }
                )
    gt = COCO()
    gt.dataset = {
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i + 1, "name": n} for i, n in enumerate(names)],
    }
    gt.createIndex()
    evaluator = COCOeval(gt, gt.loadRes(results), "bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return float(evaluator.stats[1]), float(evaluator.stats[0])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source", default=str(ROOT / "samples" / "shapes_detection"), help="images/ and instances.json"
    )
    parser.add_argument(
        "--data",
        help="converted dataset (made if missing; default out/shapes-detection, or "
        "out/detection-shapes with --synthetic)",
    )
    parser.add_argument("--synthetic", action="store_true", help="train on a generated set (task_build.py)")
    parser.add_argument("--train-images", type=int, default=800, help="--synthetic: training images")
    parser.add_argument("--validation-images", type=int, default=200, help="--synthetic: validation images")
    parser.add_argument("--epochs", type=int, help="default 150 (the sample's 96 training images), 40 (--synthetic)")
    parser.add_argument("--batch", type=int, help="default 16 (the sample), 32 (--synthetic)")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--width", type=int, default=16, help="channels of the first layer")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:  # checked up front: the evaluation needs it only after minutes of training
        import pycocotools.cocoeval  # noqa: F401
    except ImportError:
        sys.exit('this sample evaluates with pycocotools: pip install -e ".[samples]"')
    if args.synthetic:
        data = pathlib.Path(args.data or ROOT / "out" / "detection-shapes")
        ensure_dataset(data, args.train_images, args.validation_images)
    else:
        data = pathlib.Path(args.data or ROOT / "out" / "shapes-detection")
        ensure_converted(pathlib.Path(args.source), data)
    if args.epochs is None:
        args.epochs = 40 if args.synthetic else 150
    if args.batch is None:
        args.batch = 32 if args.synthetic else 16

    tf = import_tensorflow()
    import keras

    import loaders
    from loaders.source import read_manifest

    keras.utils.set_random_seed(args.seed)
    manifest = read_manifest(str(data))
    names = [c.name for c in manifest.categories] if manifest.categories else list(manifest.labels)
    classes_n, grid, size = len(names), args.size // STRIDE, (args.size, args.size)
    # SSD-style crops (min_object_covered 0.5 of some object) from 25% of the image up, and flips.
    train = loaders.load(data, "train", args.batch, size, seed=args.seed, area_range=(0.25, 1.0))
    validation = loaders.load(data, "validation", args.batch, size, training=False)
    model = build_model(keras, args.size, classes_n, args.width)
    steps = loaders.steps_per_epoch(data, "train", args.batch)
    schedule = keras.optimizers.schedules.CosineDecay(3e-3, args.epochs * steps, alpha=0.05)
    optimizer = keras.optimizers.Adam(schedule)

    @tf.function
    def step(images, t):
        heat, regress, mask = targets(tf, t["boxes"], t["classes"], t["num_boxes"], classes_n, grid)
        with tf.GradientTape() as tape:
            loss = loss_fn(tf, model(images, training=True), heat, regress, mask, classes_n)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function
    def predict(images):
        return decode(tf, model(images, training=False), classes_n, grid)

    print(
        f"{manifest.splits['train'].examples} training images ({steps} steps of {args.batch}), "
        f"{manifest.splits['validation'].examples} validation "
        f"({sum((manifest.splits['validation'].box_counts or {}).values())} boxes); "
        f"classes {', '.join(names)}; {args.size}x{args.size}",
        flush=True,
    )
    start = time.time()
    for epoch in range(args.epochs):
        losses = [float(step(images, t)) for images, t in train]
        print(f"epoch {epoch + 1}: loss {sum(losses) / len(losses):.3f} ({time.time() - start:.0f} s)", flush=True)
    trained = time.time() - start
    ap50, ap = coco_map(validation, predict, args.size, names)
    print(
        f"trained {args.epochs} epochs in {trained:.0f} s; validation COCO mAP@0.5 {ap50:.3f}, "
        f"mAP@0.5:0.95 {ap:.3f} (goal mAP@0.5 >= 0.5)"
    )


if __name__ == "__main__":
    main()
