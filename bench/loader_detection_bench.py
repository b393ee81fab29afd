"""Detection read speed: `loaders.load` against a hand-tuned tf.data detection pipeline doing the same work.

    python bench/loader_detection_bench.py                      # 2,000 drawn-shape JPEGs, 8 shards
    python bench/loader_detection_bench.py --repeats 5 --size 320

Both read the same shards (written once into --out by tests/support/task_records.py, the
contract's detection records: JPEG images 160..320 px a side, 0..6 boxes each) and do the same
work per image: parse, SSD-style random crop (`sample_distorted_bounding_box` over the objects,
min_object_covered 0.5, area 0.08..1), `decode_and_crop_jpeg`, boxes moved into the crop,
clipped, those with under 30% of their area left dropped, random flip of image and boxes,
resize to --size, boxes padded to the split's max_boxes with classes -1, scale to [0, 1],
batches of --batch.

* loaders: ``loaders.load(..., training=True)``: batches serialized records, parses a batch
  at once, decodes each image as an element of a parallel map, batches again.
* hand-tuned: the classic reader: files shuffled, parallel interleave, shuffle buffer, a
  per-record ``map`` (parse_single_example, crop, decode, box transform, flip, resize, pad)
  with AUTOTUNE, batch, prefetch(AUTOTUNE), the same tf.data.Options as loaders.

Each measurement is --epochs-per-run full epochs (2) after a warm-up epoch; the two are interleaved within each
repeat, and the table gives medians and the process CPU time per image (less disturbed by
other load on a shared machine). Results also go to bench/results/detection-load-<count>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

MIN_COVERED, MIN_VISIBLE, AREA, ASPECT = 0.5, 0.3, (0.08, 1.0), (3 / 4, 4 / 3)


def ensure_dataset(out: pathlib.Path, count: int, shards: int) -> pathlib.Path:
    from tests.support.task_records import write_dataset

    manifest = out / "manifest.json"
    if manifest.exists():
        info = json.loads(manifest.read_text())["splits"]["train"]
        if info["examples"] == count and info["num_shards"] == shards:
            return out
    return write_dataset(
        out,
        "detection",
        {"train": count},
        {"train": shards},
        fmt="jpeg",
        size_range=(160, 320),
        max_objects=6,
        masks=False,
    )


def hand_tuned(files, batch, size, max_boxes, tf, options):
    from prep.core import schema as s

    spec = {
        s.ENCODED: tf.io.FixedLenFeature([], tf.string),
        s.HEIGHT: tf.io.FixedLenFeature([], tf.int64),
        s.WIDTH: tf.io.FixedLenFeature([], tf.int64),
        s.OBJECT_LABEL: tf.io.VarLenFeature(tf.int64),
    }
    keys = (s.OBJECT_YMIN, s.OBJECT_XMIN, s.OBJECT_YMAX, s.OBJECT_XMAX)
    spec.update({k: tf.io.VarLenFeature(tf.float32) for k in keys})

    def parse_decode(record):
        f = tf.io.parse_single_example(record, spec)
        boxes = tf.stack([tf.sparse.to_dense(f[k]) for k in keys], axis=1)
        classes = tf.cast(tf.sparse.to_dense(f[s.OBJECT_LABEL]), tf.int32)
        h, w = tf.cast(f[s.HEIGHT], tf.int32), tf.cast(f[s.WIDTH], tf.int32)
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            tf.stack([h, w, 3]),
            boxes[None],
            min_object_covered=MIN_COVERED,
            aspect_ratio_range=ASPECT,
            area_range=AREA,
            max_attempts=50,
            use_image_if_no_bounding_boxes=True,
        )
        image = tf.image.decode_and_crop_jpeg(
            f[s.ENCODED], tf.stack([begin[0], begin[1], crop[0], crop[1]]), channels=3
        )
        hw = tf.cast(tf.stack([h, w, h, w]), tf.float32)
        origin = tf.cast(tf.stack([begin[0], begin[1], begin[0], begin[1]]), tf.float32)
        extent = tf.cast(tf.stack([crop[0], crop[1], crop[0], crop[1]]), tf.float32)
        moved = (boxes * hw - origin) / extent
        clipped = tf.clip_by_value(moved, 0.0, 1.0)

        def area(b):
            return tf.maximum(b[:, 2] - b[:, 0], 0.0) * tf.maximum(b[:, 3] - b[:, 1], 0.0)

        visible = tf.math.divide_no_nan(area(clipped), area(moved))
        keep = (visible >= MIN_VISIBLE) & (visible > 0)
        boxes, classes = tf.boolean_mask(clipped, keep), tf.boolean_mask(classes, keep)
        flip = tf.random.uniform([]) < 0.5
        image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
        boxes = tf.cond(
            flip, lambda: tf.stack([boxes[:, 0], 1 - boxes[:, 3], boxes[:, 2], 1 - boxes[:, 1]], 1), lambda: boxes
        )
        image = tf.image.resize(image, size) * (1.0 / 255.0)
        n = tf.minimum(tf.shape(boxes)[0], max_boxes)
        boxes = tf.pad(boxes[:n], [[0, max_boxes - n], [0, 0]])
        classes = tf.pad(classes[:n], [[0, max_boxes - n]], constant_values=-1)
        boxes.set_shape([max_boxes, 4])
        classes.set_shape([max_boxes])
        return image, {"boxes": boxes, "classes": classes, "num_boxes": n}

    ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files))
    ds = ds.interleave(
        tf.data.TFRecordDataset, cycle_length=8, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False
    )
    ds = ds.shuffle(1024).map(parse_decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE).with_options(options)


def epoch_rate(ds, epochs: int = 1) -> tuple[float, float, int]:
    """(images/s, process CPU ms per image, boxes per epoch) over `epochs` full epochs."""
    cpu0, start, n, boxes = time.process_time(), time.perf_counter(), 0, 0
    for _ in range(epochs):
        for images, targets in ds:
            n += int(images.shape[0])
            boxes += int(targets["num_boxes"].numpy().sum())
    return n / (time.perf_counter() - start), (time.process_time() - cpu0) * 1e3 / n, boxes // epochs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--out", default="/tmp/prep-detection-bench", help="dataset (written if missing)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs-per-run", type=int, default=2, help="epochs timed as one run")
    args = parser.parse_args(argv)
    out = ensure_dataset(pathlib.Path(args.out), args.count, args.shards)

    import tensorflow as tf

    import loaders
    from loaders.dataset import data_options
    from loaders.source import open_split

    source = open_split(str(out), "train")
    size = (args.size, args.size)
    opts = loaders.LoadOptions(image_size=size).resolved("detection")
    datasets = {
        "loaders.load": loaders.load(
            out,
            "train",
            args.batch,
            size,
            min_object_covered=MIN_COVERED,
            min_box_visibility=MIN_VISIBLE,
            area_range=AREA,
            aspect_ratio_range=ASPECT,
        ),
        "hand-tuned": hand_tuned(list(source.files), args.batch, size, source.max_boxes, tf, data_options(opts, False)),
    }
    for ds in datasets.values():  # warm-up epoch: graph building, autotuning, page cache
        epoch_rate(ds)
    rates = {name: [] for name in datasets}
    cpu = {name: [] for name in datasets}
    boxes = {name: [] for name in datasets}
    for _ in range(args.repeats):
        for name, ds in datasets.items():
            rate, ms, b = epoch_rate(ds, args.epochs_per_run)
            rates[name].append(rate)
            cpu[name].append(ms)
            boxes[name].append(b)
    median = {name: statistics.median(r) for name, r in rates.items()}
    cpu_median = {name: statistics.median(r) for name, r in cpu.items()}
    ratio = median["loaders.load"] / median["hand-tuned"]
    print(
        f"{source.records} records in {len(source.files)} shards, batch {args.batch}, {args.size}x{args.size}, "
        f"max_boxes {source.max_boxes}, median of {args.repeats} epochs, {os.cpu_count()} cores"
    )
    print(f"{'pipeline':<14}{'images/s':>10}{'boxes/epoch':>13}{'CPU ms/image':>14}")
    for name, rate in median.items():
        print(f"{name:<14}{rate:>10.1f}{statistics.median(boxes[name]):>13.0f}{cpu_median[name]:>14.3f}")
    print(
        f"loaders.load / hand-tuned: {ratio:.3f} (goal >= 0.95); CPU per image, hand-tuned / loaders: "
        f"{cpu_median['hand-tuned'] / cpu_median['loaders.load']:.3f}"
    )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    record = {
        "records": source.records,
        "shards": len(source.files),
        "batch": args.batch,
        "size": args.size,
        "max_boxes": source.max_boxes,
        "repeats": args.repeats,
        "cores": os.cpu_count(),
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "images_per_s": rates,
        "median": median,
        "cpu_ms_per_image": cpu,
        "cpu_ms_median": cpu_median,
        "boxes": boxes,
        "ratio": ratio,
    }
    path = results / f"detection-load-{source.records}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
