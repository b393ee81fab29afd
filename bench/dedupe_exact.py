"""`--near off`'s exact groups (beam_jobs/dedupe_exact.py) without Beam: the bucketing a run task does and
each bucket's `bucket_groups`, on `--count` random sha256 of which 1% are copies of another; CPU per image
of one thread and the largest bucket task's peak (docs/benchmarks.md, design.md "At internet scale").

    PYTHONPATH=$PWD python bench/dedupe_exact.py --count 1000000 --part-target 250000

The run tasks' reading of the chunks' key rows (one file a chunk) is not timed here.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time
import tracemalloc

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beam_jobs.dedupe_exact import SHA_ROWS, bucket_groups  # noqa: E402
from prep.core.run import dedupe_files  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--part-target", type=int, default=250_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rnd = np.random.default_rng(args.seed)
    rows = np.zeros(args.count, SHA_ROWS)
    rows["sha"] = rnd.integers(0, 256, (args.count, 32), dtype=np.uint8)
    copies = rnd.choice(args.count, args.count // 100, replace=False)
    rows["sha"][copies] = rows["sha"][rnd.choice(args.count, len(copies))]
    ids = np.arange(args.count, dtype=np.int64)
    rows["item"] = (ids // 1024) * dedupe_files.item_id(1, 0) + ids % 1024
    buckets = max(1, math.ceil(args.count / args.part_target))

    start = time.process_time()
    where = rows["sha"][:, :8].copy().view(">u8").ravel() % np.uint64(buckets)
    parts = {int(b): rows[where == b] for b in np.unique(where).tolist()}
    cut = time.process_time() - start
    start = time.process_time()
    grouped = 0
    for bucket, part in parts.items():
        for out in bucket_groups((bucket, [part]), 1000):
            grouped += len(getattr(out, "rows", ()))
    groups_cpu = time.process_time() - start
    largest = max(parts, key=lambda b: len(parts[b]))
    tracemalloc.start()
    list(bucket_groups((largest, [parts[largest]]), 1000))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"\n{args.count:,} sha256 (1% copies), {buckets} buckets; CPU of one thread\n")
    print("| step | CPU s | us an image | largest task, images | its peak, MB |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| bucket (run tasks) | {cut:.2f} | {cut / args.count * 1e6:.2f} | | |")
    print(
        f"| bucket_groups | {groups_cpu:.2f} | {groups_cpu / args.count * 1e6:.2f} | {len(parts[largest]):,} "
        f"| {peak / 1e6:.0f} |"
    )
    print(f"\ngrouped images: {grouped:,}; shuffled: {SHA_ROWS.itemsize} bytes an image")


if __name__ == "__main__":
    main()
