"""Converting from Parquet (a Hugging Face export) vs the same photos one file each, and what reading a kept
row again would cost against spilling it (the choice in prep/core/run/spill.py).

    python bench/parquet_bench.py --count 2000

Writes the photos of bench/make_data.py in a seeded order as Hugging Face Parquet (`Dataset.to_parquet`,
`Image()` and `ClassLabel`, row groups of --rows-per-group rows: `datasets` writes image datasets in groups
of 100), then:
1. reads every row once in a seeded random order (the order the prepare and write steps meet rows in) by
   row group and offset (`table_files.read_row`), with this process's block cache and without it, against
   reading the same photos one file each, and against writing and reading back the photos' bytes once (what
   spilling a kept row costs);
2. converts both SOURCEs pass-through (`prep` in a child process: wall seconds and its peak RSS).
Figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.convert_compare import timed  # noqa: E402
from bench.make_data import ensure_data, prep_command  # noqa: E402


def write_parquet(folder: pathlib.Path, out: pathlib.Path, per_file: int, rows_per_group: int) -> list[pathlib.Path]:
    """The photos under `folder` (class folders) as Parquet files in `out`; returns the photos in row order."""
    import datasets

    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    photos = [(i, p) for i, c in enumerate(classes) for p in sorted((folder / c).iterdir())]
    random.Random(0).shuffle(photos)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    out.mkdir(parents=True, exist_ok=True)
    files = -(-len(photos) // per_file)
    for n in range(files):
        part = photos[n * per_file : (n + 1) * per_file]
        rows = {"image": [{"bytes": p.read_bytes(), "path": None} for _, p in part], "label": [i for i, _ in part]}
        dataset = datasets.Dataset.from_dict(rows, features=features)
        dataset.to_parquet(str(out / f"train-{n:05d}-of-{files:05d}.parquet"), batch_size=rows_per_group)
    return [p for _, p in photos]


def read_rows(out: pathlib.Path, photos: list[pathlib.Path], per_file: int, cache: bool) -> tuple[float, int]:
    """Seconds to read every row once in a seeded random order, and the row groups decoded."""
    from prep.core.sources import table_files

    files = -(-len(photos) // per_file)
    order = list(range(len(photos)))
    random.Random(1).shuffle(order)
    decoded = 0
    real = table_files.TableFile.block

    def counting(self, index, columns):
        nonlocal decoded
        decoded += 1
        return real(self, index, columns)

    table_files.TableFile.block = counting  # type: ignore[method-assign]
    saved = table_files._CACHE_BYTES
    table_files._CACHE_BYTES = saved if cache else 0
    table_files._CACHE = table_files._Cache()
    start = time.perf_counter()
    try:
        for i in order:
            name = out / f"train-{i // per_file:05d}-of-{files:05d}.parquet"
            data = table_files.read_row(f"{name}#row={i % per_file}", None)
            if not isinstance(data, bytes) or len(data) != photos[i].stat().st_size:
                raise SystemExit(f"row {i}: {data if isinstance(data, tuple) else 'other bytes'}")
    finally:
        table_files.TableFile.block = real  # type: ignore[method-assign]
        table_files._CACHE_BYTES = saved
    return time.perf_counter() - start, decoded


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--per-file", type=int, default=1000)
    parser.add_argument("--rows-per-group", type=int, default=100)
    parser.add_argument("--scratch", default="/tmp/prep-parquet-bench")
    parser.add_argument("--convert-only", action="store_true", help="(internal) step 2 on the files written")
    args = parser.parse_args(argv)
    folder = ensure_data(args.count)
    scratch = pathlib.Path(args.scratch)
    if args.convert_only:
        return convert(folder, scratch, args.count)
    shutil.rmtree(scratch, ignore_errors=True)
    photos = write_parquet(folder, scratch / "hub", args.per_file, args.rows_per_group)
    total = sum(p.stat().st_size for p in photos)
    print(
        f"{len(photos)} photos ({total / 1e6:.0f} MB), files of {args.per_file} rows, groups of {args.rows_per_group}"
    )
    print(f"{'read every image once, random order':<44} {'seconds':>8} {'ms/image':>9} {'groups decoded':>15}")
    for name, cache in (("by row group + offset, block cache", True), ("by row group + offset, no cache", False)):
        seconds, decoded = read_rows(scratch / "hub", photos, args.per_file, cache)
        print(f"{name:<44} {seconds:8.2f} {1000 * seconds / len(photos):9.2f} {decoded:15}", flush=True)
    order = photos[:]
    random.Random(1).shuffle(order)
    start = time.perf_counter()
    for p in order:
        p.read_bytes()
    seconds = time.perf_counter() - start
    print(f"{'one file each':<44} {seconds:8.2f} {1000 * seconds / len(photos):9.2f} {'-':>15}")
    start = time.perf_counter()
    with open(scratch / "spill", "wb") as f:
        for p in photos:
            f.write(p.read_bytes())
        f.flush()
        os.fsync(f.fileno())
    (scratch / "spill").read_bytes()
    seconds = time.perf_counter() - start
    print(f"{'spilled: written once and read back':<44} {seconds:8.2f} {1000 * seconds / len(photos):9.2f} {'-':>15}")
    # A child's peak RSS starts at its parent's (Linux keeps it across fork and exec): the conversions are
    # timed from a fresh, small process, not this one, which has read the photos.
    cmd = [sys.executable, __file__, "--count", str(args.count), "--scratch", str(scratch), "--convert-only"]
    subprocess.run(cmd, check=True)


def convert(folder: pathlib.Path, scratch: pathlib.Path, count: int) -> None:
    print(f"\n{'source':<12} {'options':<14} {'seconds':>8} {'images/s':>9} {'peak RSS MB':>12}")
    for name, source in (("files", folder), ("parquet", scratch / "hub")):
        out = scratch / "out"
        seconds, rss = timed([prep_command(), "convert", str(source), str(out), "--overwrite", "--no-progress"])
        print(f"{name:<12} {'pass-through':<14} {seconds:8.1f} {count / seconds:9.0f} {rss:12.0f}", flush=True)


if __name__ == "__main__":
    main()
