"""A classic single-process threaded writer, in the style of tensorflow/models
`research/slim/datasets/build_imagenet_data.py`.

    python -m bench.baselines.classic_threaded SOURCE OUTPUT [--resize 256] [--threads N] [--shards N]

Files are split into contiguous ranges, one per thread; each thread decodes
every image with TensorFlow ops (`tf.io.decode_image`, as the original checks
images with `decode_jpeg`), resizes with `tf.image.resize` and re-encodes when
asked, builds a `tf.train.Example` and writes its own shards with
`tf.io.TFRecordWriter`. No balancing or manifest.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import threading


def _bytes(tf, value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(tf, value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def _process_range(tf, thread, ranges, shards_per_thread, files, source, output, resize, labels):
    start, end = ranges[thread]
    per_shard = max(1, -(-(end - start) // shards_per_thread))
    for s in range(shards_per_thread):
        shard = thread * shards_per_thread + s
        chunk = files[start + s * per_shard : min(end, start + (s + 1) * per_shard)]
        with tf.io.TFRecordWriter(os.path.join(output, f"train-{shard:05d}.tfrecord")) as writer:
            for rel in chunk:
                data = pathlib.Path(source, rel).read_bytes()
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
                height, width = int(image.shape[0]), int(image.shape[1])
                if resize and min(height, width) > resize:
                    scale = resize / min(height, width)
                    height, width = round(height * scale), round(width * scale)
                    image = tf.cast(tf.image.resize(image, (height, width), method="bicubic", antialias=True), tf.uint8)
                    data = tf.io.encode_jpeg(image, quality=95).numpy()
                label = rel.split("/")[0]
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "image/encoded": _bytes(tf, data),
                            "image/format": _bytes(tf, b"jpeg"),
                            "image/height": _int(tf, height),
                            "image/width": _int(tf, width),
                            "image/channels": _int(tf, 3),
                            "image/class/label": _int(tf, labels[label]),
                            "image/class/text": _bytes(tf, label.encode()),
                            "image/filename": _bytes(tf, rel.encode()),
                        }
                    )
                )
                writer.write(example.SerializeToString())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--resize", type=int)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    files = sorted(str(p.relative_to(args.source)) for p in pathlib.Path(args.source).rglob("*") if p.is_file())
    labels = {name: i for i, name in enumerate(sorted({f.split("/")[0] for f in files}))}
    os.makedirs(args.output, exist_ok=True)
    bounds = [round(i * len(files) / args.threads) for i in range(args.threads + 1)]
    ranges = list(zip(bounds[:-1], bounds[1:]))
    shards_per_thread = max(1, args.shards // args.threads)
    threads = [
        threading.Thread(
            target=_process_range,
            args=(tf, t, ranges, shards_per_thread, files, args.source, args.output, args.resize, labels),
        )
        for t in range(args.threads)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(len(files))


if __name__ == "__main__":
    main()
