"""Read speed: `loaders.grain` (Grain, numpy batches) against `loaders.load` (tf.data), and the latency of
reading one record by position in each file format.

    python bench/grain_bench.py                        # 1,000 generated JPEGs, 4 shards
    python bench/grain_bench.py --count 2000 --repeats 5

The same images are converted twice with `prep convert` (--file-format tfrecord and array_record) into
--out. Every pipeline does the same work per image: random-resized crop to --size, random flip, scale to
[0, 1], batches of --batch; in each of --repeats rounds every pipeline in turn is made, read for a
warm-up epoch, then timed over one epoch, then closed; the table gives the median (images/s) and its
ratio to tf.data's.

* tf.data: ``loaders.load(tfrecord, training=True)`` (its threads: all cores).
* grain N workers: ``loaders.grain.dataset(array_record, workers=N)``: N worker processes, each
  reading its batches by position and decoding them with the same TensorFlow function.
* random access: mean time to read one record at a random position (`ShardFormat.open`), warm page
  cache: ArrayRecord (group_size:1, a chunk per record) and TFRecord (an offset table, then a pread).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def convert(source: pathlib.Path, out: pathlib.Path, shards: int, file_format: str) -> pathlib.Path:
    manifest = out / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        if m["splits"]["train"]["num_shards"] == shards and m["options"].get("file_format", "tfrecord") == file_format:
            return out
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "prep.cli", "convert", str(source), str(out), "--num-shards", str(shards)]
    args += ["--file-format", file_format, "--overwrite", "--no-progress"]
    subprocess.run(args, check=True, env=env, stdout=subprocess.DEVNULL)
    return out


def epoch_rate(it, steps: int, batch: int) -> float:
    """Images/s of the next `steps` batches of iterator `it`."""
    start = time.perf_counter()
    n = sum(len(next(it)[1]) for _ in range(steps))
    assert n == steps * batch, (n, steps * batch)
    return n / (time.perf_counter() - start)


def random_access(path: pathlib.Path, file_format: str, reads: int) -> float:
    """Mean microseconds to read one record at a random position of `path`'s train split."""
    from prep.core import formats

    owner = formats.get(file_format)
    sources = [owner.open(str(p)) for p in sorted(path.glob("train-*" + owner.suffix))]
    rng = random.Random(0)
    picks = [(s, rng.randrange(len(s))) for s in rng.choices(sources, k=reads)]
    for s, i in picks[:100]:
        s[i]
    start = time.perf_counter()
    for s, i in picks:
        s[i]
    elapsed = time.perf_counter() - start
    for s in sources:
        s.close()
    return elapsed / reads * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--source", type=pathlib.Path, default=None)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--reads", type=int, default=5000)
    args = parser.parse_args()
    source = args.source or HERE / "data" / f"grain-src-{args.count}"
    if not source.exists():
        make = [sys.executable, str(HERE / "make_data.py"), "--count", str(args.count), "--out", str(source)]
        subprocess.run(make, check=True)
    out = args.out or HERE / "data" / f"grain-{source.name}"
    tf_out = convert(source, out / "tfrecord", args.shards, "tfrecord")
    ar_out = convert(source, out / "array_record", args.shards, "array_record")

    import loaders
    import loaders.grain

    size = (args.size, args.size)
    steps = loaders.steps_per_epoch(str(tf_out), "train", args.batch)
    images = steps * args.batch
    configs = {"tf.data (loaders.load)": lambda: loaders.load(str(tf_out), "train", args.batch, size, repeat=True)}
    for n in args.workers:
        configs[f"grain, {n} workers (loaders.grain)"] = lambda n=n: loaders.grain.dataset(
            str(ar_out), "train", args.batch, size, workers=n, num_epochs=2
        )
    rates: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(args.repeats):  # the pipelines in turn, so that other load on the machine hits all alike
        for name, make in configs.items():
            # Alone: a Grain pipeline's workers keep reading ahead while an iterator lives, which
            # would both slow the others and bank batches for its own next epoch.
            it = iter(make())
            epoch_rate(it, steps, args.batch)  # warm-up: starts Grain's workers, traces the decoding
            rates[name].append(epoch_rate(it, steps, args.batch))
            del it
            gc.collect()
    base = statistics.median(rates["tf.data (loaders.load)"])
    print(
        f"{images} images a epoch ({args.count} JPEGs, {args.shards} shards), batch {args.batch}, {size}, "
        f"{os.cpu_count()} cores, median of {args.repeats}"
    )
    print(f"{'pipeline':40} {'images/s':>9} {'vs tf.data':>10}")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:40} {median:9.0f} {median / base:10.2f}")
    print(f"\n{'random access, one record':40} {'µs':>9}")
    for file_format, out in (("array_record", ar_out), ("tfrecord", tf_out)):
        print(f"{file_format:40} {random_access(out, file_format, args.reads):9.1f}")


if __name__ == "__main__":
    main()
