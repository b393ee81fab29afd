"""Verify speed: `prep verify` against `sha256sum` of the same shard files, cold and warm page cache.

    python bench/verify_bench.py                                  # 2,000 generated JPEGs, 5 repeats
    python bench/verify_bench.py --source bench/data/jpeg2000 --repeats 3

The source images (made by make_data.py when missing) are converted once into
a temporary folder; then each repeat runs, interleaved so machine noise hits
them alike: `sha256sum` of the shard files, `prep verify` as a command (wall
time, Python start-up included), `prep verify --deep`, and Python's own
read + hashlib.sha256 of the files (the floor of a one-pass verify). "cold"
runs first evict the shard files from the page cache (posix_fadvise
DONTNEED, these files only); "warm" runs read them from memory. MB/s is
shard bytes / wall seconds; "core MB/s" uses the time verify itself reports
(no start-up). Ratios are against sha256sum in the same cache state, same run.
Results also go to bench/results/verify-<count>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)

REPO = HERE.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's prep, whatever is installed


def prep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prep.cli", *args], cwd=REPO, env=ENV, capture_output=True, text=True)


def evict(files: list[pathlib.Path]) -> None:
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(files: list[pathlib.Path]) -> None:
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


def run_sha256sum(out: pathlib.Path, files: list[pathlib.Path]) -> dict:
    start = time.perf_counter()
    subprocess.run(["sha256sum", *map(str, files)], check=True, stdout=subprocess.DEVNULL)
    return {"wall": time.perf_counter() - start}


def run_hashlib(out: pathlib.Path, files: list[pathlib.Path]) -> dict:
    start = time.perf_counter()
    for path in files:
        digest = hashlib.sha256()
        with open(path, "rb", buffering=0) as f:
            while block := f.read(1 << 20):
                digest.update(block)
    return {"wall": time.perf_counter() - start}


def run_verify(out: pathlib.Path, files: list[pathlib.Path], *extra: str) -> dict:
    start = time.perf_counter()
    proc = prep("verify", str(out), "--json", "--no-progress", *extra)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"prep verify {' '.join(extra)} failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return {"wall": wall, "core": json.loads(proc.stdout)["seconds"]}


TOOLS = {
    "sha256sum": run_sha256sum,
    "prep verify": run_verify,
    "prep verify --deep": lambda out, files: run_verify(out, files, "--deep"),
    "hashlib read+sha256": run_hashlib,
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="generated images (when --source is not given)")
    parser.add_argument("--source", help="image folder to convert (default: bench/data/jpeg<count>)")
    parser.add_argument("--num-shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache", choices=["cold", "warm", "both"], default="both")
    args = parser.parse_args(argv)
    source = pathlib.Path(args.source) if args.source else ensure_data(args.count)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="prep-verify-bench-"))
    try:
        out = tmp / "out"
        proc = prep("convert", str(source), str(out), "--num-shards", str(args.num_shards), "--no-progress")
        if proc.returncode != 0:
            raise SystemExit(f"prep convert failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        files = sorted(out.glob("*.tfrecord"))
        size = sum(p.stat().st_size for p in files)
        images = json.loads((out / "manifest.json").read_text())["inputs"]["written"]
        caches = ["cold", "warm"] if args.cache == "both" else [args.cache]
        # --deep is CPU-bound: one (warm) row says how much slower it is.
        configs = [
            (tool, cache) for cache in caches for tool in TOOLS if not (tool.endswith("--deep") and cache == "cold")
        ]
        runs: dict[tuple, list[dict]] = {c: [] for c in configs}
        for _ in range(args.repeats):
            for tool, cache in configs:
                if cache == "cold":
                    evict(files)
                else:
                    warm(files)
                runs[(tool, cache)].append(TOOLS[tool](out, files))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = []
    for tool, cache in configs:
        wall = statistics.median(r["wall"] for r in runs[(tool, cache)])
        core = statistics.median(r["core"] for r in runs[(tool, cache)]) if "core" in runs[(tool, cache)][0] else None
        base = statistics.median(r["wall"] for r in runs[("sha256sum", cache)])
        rows.append(
            {
                "tool": tool,
                "cache": cache,
                "wall_s": wall,
                "mb_per_s": size / wall / 1e6,
                "ratio": base / wall,
                "core_s": core,
                "core_mb_per_s": size / core / 1e6 if core else None,
                "core_ratio": base / core if core else None,
            }
        )
    print(
        f"prep verify vs sha256sum: {len(files)} shards, {size / 1e6:.1f} MB, {images} JPEGs ~500x375 q90, "
        f"{os.cpu_count()} cores, median of {args.repeats}"
    )
    print(
        f"{'tool':<21}{'cache':<7}{'wall s':>8}{'MB/s':>8}{'x sha256sum':>13}{'core s':>8}{'core MB/s':>11}"
        f"{'x sha256sum':>13}"
    )
    for r in rows:
        core = (
            f"{r['core_s']:>8.3f}{r['core_mb_per_s']:>11.0f}{r['core_ratio']:>13.2f}"
            if r["core_s"] is not None
            else f"{'':>8}{'':>11}{'':>13}"
        )
        print(f"{r['tool']:<21}{r['cache']:<7}{r['wall_s']:>8.3f}{r['mb_per_s']:>8.0f}{r['ratio']:>13.2f}{core}")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / f"verify-{images}.json").write_text(
        json.dumps(
            {
                "shards": len(files),
                "bytes": size,
                "images": images,
                "repeats": args.repeats,
                "cores": os.cpu_count(),
                "rows": rows,
                "runs": {f"{t}/{c}": v for (t, c), v in runs.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
