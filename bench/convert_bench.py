"""Convert speed and memory: `prep convert` at 1 and 2 workers, pass-through and --resize 256.

    python bench/convert_bench.py                      # 2,000 generated JPEGs, 3 repeats
    python bench/convert_bench.py --count 20000 --repeats 1
    python bench/convert_bench.py --count 20000 --mode pass-through

Each configuration runs as a fresh `prep convert` process; configurations are
interleaved within each repeat so that machine noise hits them alike, and the
table gives medians. "wall" is the whole command (imports, listing, pipeline);
"pipeline" is the manifest's run.seconds (the Beam pipeline alone). Ratios
are against --workers 1 in the same run. Peak RSS is the process's max RSS.
Results also go to bench/results/convert-<count>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data, prep_command  # noqa: E402  (bench/ scripts run as files)

MODES = ("pass-through", "resize 256")


def run_once(source: pathlib.Path, out: pathlib.Path, workers: int, extra: list[str]) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # the previous run's writes are on disk, not written back during this run
    cmd = [prep_command(), "convert", str(source), str(out), "--workers", str(workers), "--no-progress", *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    return {
        "wall": wall,
        "pipeline": manifest["run"]["seconds"],
        "rss_mb": usage.ru_maxrss / 1024,
        "examples": manifest["inputs"]["written"],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="/tmp/prep-bench-out")
    parser.add_argument("--mode", choices=MODES, action="append", help="only this mode (repeatable; default: both)")
    args = parser.parse_args(argv)
    source = ensure_data(args.count)
    configs = [(mode, workers) for mode in (args.mode or MODES) for workers in (1, 2)]
    runs: dict[tuple, list[dict]] = {c: [] for c in configs}
    for _ in range(args.repeats):
        for mode, workers in configs:
            extra = ["--resize", "256"] if mode == "resize 256" else []
            runs[(mode, workers)].append(run_once(source, pathlib.Path(args.out), workers, extra))
    rows = []
    for mode, workers in configs:
        med = {k: statistics.median(r[k] for r in runs[(mode, workers)]) for k in ("wall", "pipeline", "rss_mb")}
        base = {k: statistics.median(r[k] for r in runs[(mode, 1)]) for k in ("wall", "pipeline")}
        rows.append(
            {
                "mode": mode,
                "workers": workers,
                "images": args.count,
                **med,
                "images_per_s": args.count / med["wall"],
                "speedup_wall": base["wall"] / med["wall"],
                "speedup_pipeline": base["pipeline"] / med["pipeline"],
            }
        )
    header = (
        f"{'mode':<13}{'workers':>8}{'images':>8}{'wall s':>9}{'img/s':>9}{'x wall':>8}"
        f"{'pipeline s':>12}{'x pipe':>8}{'peak RSS MB':>13}"
    )
    print(f"prep convert, {args.count} JPEGs ~500x375 q90, {os.cpu_count()} cores, median of {args.repeats}")
    print(header)
    for r in rows:
        print(
            f"{r['mode']:<13}{r['workers']:>8}{r['images']:>8}{r['wall']:>9.2f}{r['images_per_s']:>9.0f}"
            f"{r['speedup_wall']:>8.2f}{r['pipeline']:>12.2f}{r['speedup_pipeline']:>8.2f}{r['rss_mb']:>13.0f}"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    suffix = "" if args.mode is None or set(args.mode) == set(MODES) else "-" + args.mode[0].split()[0]
    (results / f"convert-{args.count}{suffix}.json").write_text(
        json.dumps({"rows": rows, "runs": {f"{m}/{w}": v for (m, w), v in runs.items()}}, indent=2)
    )


if __name__ == "__main__":
    main()
