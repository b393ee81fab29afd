"""Whose CPU a conversion spends: the main thread's (serial) and the pool threads' (image work), at 1 and 2 workers.

    python bench/thread_cpu.py --count 20000 --repeats 3
    python bench/thread_cpu.py --count 2000 --other /work/main -- --duplicates off

Each run is a fresh process running `prep convert SRC OUT --workers W --no-progress [ARGS after --]` (the
embedded runner, whose bundles run on the main thread) with every thread's CPU time (`time.thread_time`)
taken as it ends, and the main thread's split by stage as bench/convert_stages.py names them. The main
thread's CPU is what bounds the 1 -> 2 workers speedup: at 1 worker it runs beside the one pool thread on
the second core, at 2 workers it competes with two; the largest speedup 2 workers can give is about
(pool + main) / ((pool + main) / 2) only if the main thread's share is small (Amdahl). With `--other`, the
same runs of another checkout are interleaved with this one's (PYTHONPATH set to each), so that a shared
machine slows both alike. Prints medians of `--repeats` runs.
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
from convert_stages import stage_name  # noqa: E402  (bench/ scripts run as files)
from make_data import ensure_data  # noqa: E402


def child(argv: list[str]) -> None:
    """Runs `prep convert ARGV` in this process; prints JSON of CPU seconds by thread group and main-thread stage."""
    import threading

    started, main_started = time.perf_counter(), time.thread_time()
    ended: dict[str, float] = {}
    lock = threading.Lock()
    run = threading.Thread.run

    def timed_run(self):
        try:
            run(self)
        finally:
            group = self.name.rstrip("0123456789").rstrip("_-") or "thread"
            with lock:
                ended[group] = ended.get(group, 0.0) + time.thread_time()

    threading.Thread.run = timed_run  # type: ignore[method-assign]
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    execute = fn_runner.FnApiRunner._execute_bundle
    stages: dict[str, float] = {}

    def timed(self, context, manager, bundle_input):
        cpu = time.thread_time()
        try:
            return execute(self, context, manager, bundle_input)
        finally:
            name = stage_name(manager.stage.name)
            stages[name] = stages.get(name, 0.0) + time.thread_time() - cpu

    fn_runner.FnApiRunner._execute_bundle = timed
    from prep.cli import CliHooks, main

    main(["convert", *argv], standalone_mode=False, obj=CliHooks(owns_process=True))  # as the console script
    main_cpu = time.thread_time() - main_started
    stages["outside"] = main_cpu - sum(stages.values())
    print(
        json.dumps(
            {
                "wall": time.perf_counter() - started,
                "process": time.process_time(),
                "main": main_cpu,
                "stages": stages,
                "threads": ended,
            }
        )
    )


def run_once(code: pathlib.Path, source: pathlib.Path, out: pathlib.Path, workers: int, extra: list[str]) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    argv = [str(source), str(out), "--workers", str(workers), "--num-shards", "8", "--no-progress", *extra]
    env = dict(os.environ, PYTHONPATH=str(code))
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *argv], capture_output=True, text=True, env=env, cwd=out.parent
    )
    if proc.returncode != 0:
        raise SystemExit(f"prep convert {' '.join(argv)} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _row(runs: list[dict]) -> dict[str, float]:
    """Medians of one configuration's runs: wall, process CPU, main thread's CPU (all, in prepare, elsewhere),
    the prepare pool's threads' and every other thread's."""

    def med(get) -> float:
        return statistics.median(get(r) for r in runs)

    return {
        "wall": med(lambda r: r["wall"]),
        "process": med(lambda r: r["process"]),
        "main": med(lambda r: r["main"]),
        "main prepare": med(lambda r: r["stages"].get("prepare", 0.0)),
        "main dedupe+plan": med(lambda r: r["stages"].get("dedupe", 0.0) + r["stages"].get("plan", 0.0)),
        "pool prepare": med(lambda r: r["threads"].get("PrepareChunk", 0.0)),
        "other threads": med(lambda r: sum(v for k, v in r["threads"].items() if k != "PrepareChunk")),
    }


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--other", type=pathlib.Path, help="another checkout's root, run interleaved")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/prep-thread-cpu"))
    parser.add_argument("extra", nargs="*", help="after --: more `prep convert` options")
    args = parser.parse_args(argv)
    source = ensure_data(args.count)
    codes = {"this": ROOT} | ({"other": args.other.resolve()} if args.other else {})
    runs: dict[tuple[str, int], list[dict]] = {(c, w): [] for c in codes for w in (1, 2)}
    args.out.mkdir(parents=True, exist_ok=True)
    for repeat in range(args.repeats):
        for key in sorted(runs, reverse=repeat % 2 == 1):  # alternating order
            runs[key].append(run_once(codes[key[0]], source, args.out / "out", key[1], args.extra))
    shutil.rmtree(args.out, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"prep convert {' '.join(args.extra)}, {args.count:,} images, median of {args.repeats}; load {load}")
    rows = {key: _row(rs) for key, rs in runs.items()}
    names = list(next(iter(rows.values())))
    print(f"{'CPU s (wall: s)':<18}" + "".join(f"{f'{c} {w}w':>12}" for c, w in rows))
    for name in names:
        print(f"{name:<18}" + "".join(f"{row[name]:>12.2f}" for row in rows.values()))
    for code in codes:
        one, two = rows[(code, 1)], rows[(code, 2)]
        print(
            f"{code}: main thread {one['main'] / one['process']:.0%} of CPU at 1 worker, "
            f"{two['main'] / two['process']:.0%} at 2; wall 1 -> 2 workers {one['wall'] / two['wall']:.2f}x"
        )


if __name__ == "__main__":
    main()
