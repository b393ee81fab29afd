"""`prep convert` against the machine's limit and against peers, side by side.

    python bench/convert_compare.py                       # 2,000 JPEGs, 3 repeats
    python bench/convert_compare.py --count 20000 --repeats 1

For pass-through and --resize 256, runs in one session, interleaved per
repeat: `prep convert` at 2 and 1 workers, the bare all-cores loop
(bench/baselines/bare_loop.py), the classic threaded writer
(bench/baselines/classic_threaded.py) and the naive Beam pipeline
(bench/baselines/naive_beam.py). Each is a fresh process timed from start to
exit; the table gives medians and ratios to `prep convert` from the same run.
Writes bench/results/compare-<count>.json.
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
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data, prep_command  # noqa: E402  (bench/ scripts run as files)

TOOLS = {
    "prep convert": lambda src, out, extra: [
        prep_command(),
        "convert",
        src,
        out,
        "--num-shards",
        "8",
        "--no-progress",
        "--workers",
        "2",
        *extra,
    ],
    "prep convert -w 1": lambda src, out, extra: [
        prep_command(),
        "convert",
        src,
        out,
        "--num-shards",
        "8",
        "--no-progress",
        "--workers",
        "1",
        *extra,
    ],
    "bare all-cores loop": lambda src, out, extra: [
        sys.executable,
        "-m",
        "bench.baselines.bare_loop",
        src,
        out,
        *extra,
    ],
    "classic threaded": lambda src, out, extra: [
        sys.executable,
        "-m",
        "bench.baselines.classic_threaded",
        src,
        out,
        *extra,
    ],
    "naive Beam": lambda src, out, extra: [sys.executable, "-m", "bench.baselines.naive_beam", src, out, *extra],
}


def warm_imports(cmd: list[str]) -> None:
    """Imports what `cmd` (a `prep` or `python -m MODULE` command) imports, once, untimed.

    This VM pages out file pages left untouched for a minute (a DAMON `pageout` scheme:
    /sys/kernel/mm/damon/admin), so a fresh process's imports may come from disk or from
    memory depending on what ran before it; prep imports far more than the bare loop does.
    Warming each side just before its timed run gives both the state of a machine without
    such reclaim: their code in the page cache.
    """
    beam = "from beam_jobs.lean_import import import_beam; import_beam()"
    if pathlib.Path(cmd[0]).name == "prep":
        code = f"{beam}; import prep.cli, beam_jobs.convert"
    elif cmd[1:2] == ["-m"]:
        code = f"import {cmd[2]}" + (f"; {beam}" if "--import-beam" in cmd else "")
    elif cmd[1:2] == ["-c"]:
        code = cmd[2]
    else:
        return
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)


def timed(cmd: list[str]) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="/tmp/prep-compare-out")
    args = parser.parse_args(argv)
    source = str(ensure_data(args.count))
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.repeats):
        for mode, extra in (("pass-through", []), ("resize 256", ["--resize", "256"])):
            for tool, cmd in TOOLS.items():
                out = pathlib.Path(args.out)
                shutil.rmtree(out, ignore_errors=True)
                results.setdefault((mode, tool), []).append(timed(cmd(source, str(out), extra)))
    rows = []
    for (mode, tool), runs in results.items():
        seconds = statistics.median(s for s, _ in runs)
        ours = statistics.median(s for s, _ in results[(mode, "prep convert")])
        rows.append(
            {
                "mode": mode,
                "tool": tool,
                "seconds": seconds,
                "images_per_s": args.count / seconds,
                "prep_speed_ratio": seconds / ours,
                "peak_rss_mb": max(r for _, r in runs),
            }
        )
    print(
        f"{args.count} JPEGs ~500x375 q90, {os.cpu_count()} cores, median of {args.repeats}; "
        "ratio = tool's time / prep convert's time (>1: prep is faster; <1: tool is faster)"
    )
    print(f"{'mode':<14}{'tool':<22}{'seconds':>9}{'img/s':>8}{'ratio':>8}{'prep as % of it':>17}{'RSS MB':>8}")
    for r in rows:
        print(
            f"{r['mode']:<14}{r['tool']:<22}{r['seconds']:>9.2f}{r['images_per_s']:>8.0f}"
            f"{r['prep_speed_ratio']:>8.2f}{100 * r['prep_speed_ratio']:>16.0f}%{r['peak_rss_mb']:>8.0f}"
        )
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"compare-{args.count}.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
