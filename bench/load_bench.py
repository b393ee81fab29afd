"""Read speed: `loaders.load` (training config) against a hand-tuned and a seed-style tf.data pipeline.

    python bench/load_bench.py                                   # 2,000 generated JPEGs, 8 shards
    python bench/load_bench.py --source bench/data/jpeg2000 --repeats 5

All pipelines read the same shards (converted once with `prep convert` into
--out) and do the same work per image: random-resized crop to --size, random
flip, scale to [0, 1], batches of --batch.

* loaders: ``loaders.load(..., training=True)``.
* hand-tuned: the classic well-tuned tf.data reader: files shuffled, parallel
  interleave, shuffle buffer, per-record ``map`` (parse_single_example +
  decode_and_crop_jpeg + resize + flip) with AUTOTUNE, batch, prefetch(AUTOTUNE),
  the same tf.data.Options as loaders.
* seed-style: TFRecordDataset over the file list, ``parse_single_example`` per
  record, one unparallel ``map`` that decodes the whole JPEG then crops, batch,
  prefetch(1).
* raw records: TFRecordDataset with parallel reads, no parsing: the read ceiling.

Each measurement is --epochs-per-run full epochs (2) after one warm-up epoch; configurations are
interleaved within each repeat and the table gives medians (images/s) and ratios
from the same run, plus the process CPU time per image, which other load on a
shared machine disturbs less than wall-clock rates. Results also go to bench/results/load-<count>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def ensure_dataset(source: pathlib.Path, out: pathlib.Path, count: int, shards: int) -> pathlib.Path:
    if not source.exists():
        subprocess.run(
            [sys.executable, str(HERE / "make_data.py"), "--count", str(count), "--out", str(source)], check=True
        )
    manifest = out / "manifest.json"
    if manifest.exists() and json.loads(manifest.read_text())["splits"]["train"]["num_shards"] == shards:
        return out
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "prep.cli",
            "convert",
            str(source),
            str(out),
            "--num-shards",
            str(shards),
            "--overwrite",
            "--no-progress",
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    return out


def hand_tuned(files, batch, size, tf, options):
    from loaders.decode import tf_feature_spec

    spec = tf_feature_spec()
    box = tf.constant([[[0.0, 0.0, 1.0, 1.0]]])

    def parse_decode(record):
        f = tf.io.parse_single_example(record, spec)
        shape = tf.stack([tf.cast(f["image/height"], tf.int32), tf.cast(f["image/width"], tf.int32), 3])
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            shape,
            box,
            min_object_covered=0.1,
            aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0),
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
        image = tf.cond(
            tf.equal(f["image/format"], b"jpeg"),
            lambda: tf.image.decode_and_crop_jpeg(f["image/encoded"], window, channels=3),
            lambda: tf.slice(
                tf.io.decode_png(f["image/encoded"], channels=3),
                tf.stack([begin[0], begin[1], 0]),
                tf.stack([crop[0], crop[1], 3]),
            ),
        )
        image = tf.image.random_flip_left_right(image)  # on the uint8 crop: cheaper than after resizing
        image = tf.image.resize(image, size)
        return image * (1.0 / 255.0), tf.cast(f["image/class/label"], tf.int32)

    ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files))
    ds = ds.interleave(
        tf.data.TFRecordDataset, cycle_length=8, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False
    )
    ds = ds.shuffle(1024).map(parse_decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE).with_options(options)


def seed_style(files, batch, size, tf):
    from loaders.decode import tf_feature_spec

    spec = tf_feature_spec()

    def parse(record):
        return tf.io.parse_single_example(record, spec)

    def decode(f):
        image = tf.io.decode_image(f["image/encoded"], channels=3, expand_animations=False)
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(image),
            tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
            min_object_covered=0.1,
            aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0),
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        image = tf.slice(image, begin, crop)
        image = tf.image.random_flip_left_right(tf.image.resize(image, size))
        return image / 255.0, tf.cast(f["image/class/label"], tf.int32)

    ds = tf.data.TFRecordDataset(files).map(parse).map(decode).shuffle(1024)
    return ds.batch(batch, drop_remainder=True).prefetch(1)


def raw_records(files, tf):
    return tf.data.TFRecordDataset(files, num_parallel_reads=8).batch(256)


def epoch_rate(ds, images_of, epochs: int = 1) -> tuple[float, float]:
    """(images/s, process CPU ms per image) over `epochs` full epochs: a longer run averages out more of the
    other load on a shared machine."""
    cpu0, start, n = time.process_time(), time.perf_counter(), 0
    for _ in range(epochs):
        for element in ds:
            n += images_of(element)
    return n / (time.perf_counter() - start), (time.process_time() - cpu0) * 1e3 / n


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(HERE / "data" / "jpeg2000"), help="JPEG class folders")
    parser.add_argument("--count", type=int, default=2000, help="images to generate if --source is missing")
    parser.add_argument("--out", default="/tmp/prep-load-bench", help="converted dataset (made if missing)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs-per-run", type=int, default=2, help="epochs timed as one run")
    args = parser.parse_args(argv)
    out = ensure_dataset(pathlib.Path(args.source), pathlib.Path(args.out), args.count, args.shards)

    import tensorflow as tf

    import loaders
    from loaders.dataset import data_options
    from loaders.source import open_split

    source = open_split(str(out), "train")
    files = list(source.files)
    size = (args.size, args.size)
    opts = loaders.LoadOptions(image_size=size).resolved()
    pipelines = {
        "loaders.load": (lambda: loaders.load(out, "train", args.batch, size), lambda e: int(e[1].shape[0])),
        "hand-tuned": (
            lambda: hand_tuned(files, args.batch, size, tf, data_options(opts, False)),
            lambda e: int(e[1].shape[0]),
        ),
        "seed-style": (lambda: seed_style(files, args.batch, size, tf), lambda e: int(e[1].shape[0])),
        "raw records": (lambda: raw_records(files, tf), lambda e: int(e.shape[0])),
    }
    datasets = {name: make() for name, (make, _) in pipelines.items()}
    for name, ds in datasets.items():  # warm-up epoch: graph building, autotuning, page cache
        epoch_rate(ds, pipelines[name][1])
    rates: dict[str, list[float]] = {name: [] for name in pipelines}
    cpu: dict[str, list[float]] = {name: [] for name in pipelines}
    for _ in range(args.repeats):
        for name, ds in datasets.items():
            rate, ms = epoch_rate(ds, pipelines[name][1], args.epochs_per_run)
            rates[name].append(rate)
            cpu[name].append(ms)
    median = {name: statistics.median(r) for name, r in rates.items()}
    cpu_median = {name: statistics.median(r) for name, r in cpu.items()}
    base = median["loaders.load"]
    print(
        f"{source.records} records in {len(files)} shards, batch {args.batch}, {args.size}x{args.size}, "
        f"median of {args.repeats} epochs, {os.cpu_count()} cores"
    )
    print(f"{'pipeline':<14}{'images/s':>10}{'loaders / this':>16}{'CPU ms/image':>14}")
    for name, rate in median.items():
        print(f"{name:<14}{rate:>10.1f}{base / rate:>16.2f}{cpu_median[name]:>14.3f}")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    record = {
        "records": source.records,
        "shards": len(files),
        "batch": args.batch,
        "size": args.size,
        "repeats": args.repeats,
        "cores": os.cpu_count(),
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "images_per_s": rates,
        "median": median,
        "cpu_ms_per_image": cpu,
        "cpu_ms_median": cpu_median,
        "ratios": {name: base / rate for name, rate in median.items()},
    }
    path = results / f"load-{source.records}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
