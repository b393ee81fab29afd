"""Converting from Parquet (a Hugging Face export) vs the same photos one file each, and what reading a kept
row by (file, row) costs against reading it from a copy in chunk order.

    python bench/parquet_bench.py --count 20000 --repeats 2 [--reads] [--baseline /work/main]

Writes the photos of bench/make_data.py in a seeded order as Hugging Face Parquet (`Dataset.to_parquet`,
`Image()` and `ClassLabel`, row groups of --rows-per-group rows: `datasets` writes image datasets in groups
of 100; kept between runs of the same --count), then:
1. with --reads, reads every row once in a seeded random order (the order the prepare step met rows in
   before the listing copied them) by row group and offset (`table_files.read_row`), with this process's
   block cache and without it, against reading the same photos one file each, and against writing and
   reading back the photos' bytes once (what the listing's copies of the images cost, per copy);
2. converts both SOURCEs pass-through and with `--resize 256` (`prep` in a child process from a fresh, small
   process: wall seconds and peak RSS), files and Parquet interleaved --repeats times (the machine is
   shared: the ratio of each pair is the figure to read); with --baseline, Parquet also with the code of
   that checkout (PYTHONPATH), e.g. main before the listing copied images.
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
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--reads", action="store_true", help="step 1: reading rows one by one")
    parser.add_argument("--baseline", help="a checkout whose code converts Parquet too (PYTHONPATH)")
    parser.add_argument("--pass-through-only", action="store_true", help="no runs with --resize 256")
    parser.add_argument("--photos", help="class folders of photos to use instead of bench/make_data.py's --count")
    parser.add_argument("--scratch", default="/tmp/prep-parquet-bench")
    parser.add_argument("--convert-only", action="store_true", help="(internal) step 2 on the files written")
    args = parser.parse_args(argv)
    folder = pathlib.Path(args.photos) if args.photos else ensure_data(args.count)
    count = sum(1 for c in folder.iterdir() if c.is_dir() for _ in c.iterdir())
    scratch = pathlib.Path(args.scratch) / (str(args.count) if not args.photos else folder.name)
    if args.convert_only:
        return convert(folder, scratch, count, args.repeats, args.baseline, args.pass_through_only)
    hub = scratch / "hub"
    if not hub.exists():
        shutil.rmtree(scratch, ignore_errors=True)
        write_parquet(folder, scratch / "partial", args.per_file, args.rows_per_group)
        (scratch / "partial").rename(hub)
    photos = photo_order(folder)
    total = sum(p.stat().st_size for p in photos)
    print(
        f"{len(photos)} photos ({total / 1e6:.0f} MB), files of {args.per_file} rows, groups of {args.rows_per_group}"
    )
    if args.reads:
        reads(hub, photos, args.per_file, scratch)
    # A child's peak RSS starts at its parent's (Linux keeps it across fork and exec): the conversions are
    # timed from a fresh, small process, not this one, which has read the photos.
    cmd = [sys.executable, __file__, "--count", str(args.count), "--scratch", args.scratch, "--convert-only"]
    cmd += ["--photos", args.photos] if args.photos else []
    cmd += ["--pass-through-only"] if args.pass_through_only else []
    cmd += ["--repeats", str(args.repeats)] + (["--baseline", args.baseline] if args.baseline else [])
    subprocess.run(cmd, check=True)


def photo_order(folder: pathlib.Path) -> list[pathlib.Path]:
    """The photos in the Parquet files' row order (`write_parquet`'s)."""
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    photos = [p for c in classes for p in sorted((folder / c).iterdir())]
    random.Random(0).shuffle(photos)
    return photos


def reads(hub: pathlib.Path, photos: list[pathlib.Path], per_file: int, scratch: pathlib.Path) -> None:
    print(f"{'read every image once, random order':<44} {'seconds':>8} {'ms/image':>9} {'groups decoded':>15}")
    for name, cache in (("by row group + offset, block cache", True), ("by row group + offset, no cache", False)):
        seconds, decoded = read_rows(hub, photos, per_file, cache)
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
    (scratch / "spill").unlink()
    seconds = time.perf_counter() - start
    print(f"{'copied: written once and read back':<44} {seconds:8.2f} {1000 * seconds / len(photos):9.2f} {'-':>15}")


def timed(cmd: list[str], path: str | None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of `cmd` run with PYTHONPATH `path` (this
    checkout's by default). On a shared machine CPU seconds move less than wall seconds."""
    env = {**os.environ, "PYTHONPATH": path or str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def convert(
    folder: pathlib.Path, scratch: pathlib.Path, count: int, repeats: int, baseline: str | None, only: bool
) -> None:
    sources = [("files", folder, None), ("parquet", scratch / "hub", None)]
    if baseline:
        sources.append(("parquet, baseline", scratch / "hub", baseline))
    head = f"{'source':<18} {'options':<14} {'run':>4} {'seconds':>8} {'/ files':>8} {'CPU s':>7} {'/ files':>8}"
    print(f"\n{head} {'peak RSS MB':>12}")
    for run in range(repeats):
        for options in ([], ["--resize", "256"])[: 1 if only else 2]:
            files = None
            for name, source, path in sources:
                out = scratch / "out"
                cmd = [prep_command(), "convert", str(source), str(out), "--overwrite", "--no-progress", *options]
                seconds, cpu, rss = timed(cmd, path)
                files = (seconds, cpu) if files is None else files
                shown = " ".join(options) or "pass-through"
                print(
                    f"{name:<18} {shown:<14} {run + 1:>4} {seconds:8.1f} {seconds / files[0]:8.2f} {cpu:7.1f}"
                    f" {cpu / files[1]:8.2f} {rss:12.0f}",
                    flush=True,
                )
    shutil.rmtree(scratch / "out", ignore_errors=True)


if __name__ == "__main__":
    main()
