"""What finding duplicates adds to a conversion, stage by stage, and the least it could add: the default
`prep convert` against `--duplicates off` and against the default with its grouping taken out.

    python bench/dedupe_convert_cost.py --count 20000 --repeats 3
    python bench/dedupe_convert_cost.py --count 2000 --repeats 5 --other /work/main

Each repeat runs, as fresh processes and in turn (the order reversed every other repeat):
- "off": `--duplicates off`;
- "keys only": the default options with the Dedupe transform replaced by nothing (an experiment: the
  content keys are computed, recorded and published in content_keys.jsonl as by the default, but no
  duplicate is looked for, grouped or decided). Its time is the floor of the default's: what the keys
  cost with a grouping that cost nothing;
- "default": the default options (duplicates found);
- with `--other CHECKOUT`, "other": that checkout's code (PYTHONPATH) with the default options.

Times are from inside the process (as `bench/convert_stages.py` times them, whose child runs "other":
Beam's bundles timed, stages named as there); CPU is the process's, pool threads included. The table gives
each stage's median CPU and wall seconds, and each configuration's total CPU minus "off"'s. On a shared
machine the CPU figures are the ones to read. The outputs are deleted after each run.
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

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from convert_stages import NAMES, stage_name  # noqa: E402  (bench/ scripts run as files)
from make_data import ensure_data  # noqa: E402


def keys_only_child(argv: list[str]) -> None:
    """`convert_stages.child`, the Dedupe transform replaced by one that passes the counts on. The clock
    starts before Beam and the project are imported, as there."""
    started, cpu_started = time.perf_counter(), time.process_time()
    import apache_beam as beam

    import beam_jobs.graph
    from prep.core.run import dedupe_files

    def nothing_placed(counts, work):
        dedupe_files.write_groups(work, counts.chunk, {})  # as regroup records a chunk in no group
        return counts

    class NoGrouping(beam.PTransform):
        def __init__(self, work, *args):
            super().__init__()
            self._work = work

        def expand(self, counts):
            return counts | beam.Map(nothing_placed, self._work)

    beam_jobs.graph.Dedupe = NoGrouping  # type: ignore[misc,assignment]  (an experiment's patch, not shipped)
    child(argv, started, cpu_started)


def child(argv: list[str], started: float | None = None, cpu_started: float | None = None) -> None:
    """`convert_stages.child`'s timing (each fused stage's bundles, the rest "outside"), from `started`."""
    if started is None or cpu_started is None:
        started, cpu_started = time.perf_counter(), time.process_time()
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    execute = fn_runner.FnApiRunner._execute_bundle
    spent: dict[str, list[float]] = {}

    def timed(self, context, manager, bundle_input):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return execute(self, context, manager, bundle_input)
        finally:
            totals = spent.setdefault(stage_name(manager.stage.name), [0.0, 0.0])
            totals[0] += time.perf_counter() - wall
            totals[1] += time.process_time() - cpu

    fn_runner.FnApiRunner._execute_bundle = timed
    from prep.cli import CliHooks
    from prep.cli import main as prep_main

    prep_main(["convert", *argv], standalone_mode=False, obj=CliHooks(owns_process=True))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    spent["outside"] = [wall - sum(w for w, _ in spent.values()), cpu - sum(c for _, c in spent.values())]
    spent["total"] = [wall, cpu]
    print(json.dumps(spent))


def run_once(source: pathlib.Path, out: pathlib.Path, config: str, other: str | None) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    argv = [str(source), str(out), "--no-progress"]
    if config == "off":
        argv += ["--duplicates", "off"]
    if config == "other":  # that checkout's own stage timer, on its code
        assert other is not None
        code, command = other, [str(pathlib.Path(other, "bench", "convert_stages.py")), "--child"]
    else:
        code, command = str(HERE.parent), [__file__, "--keys-only-child" if config == "keys only" else "--child"]
    proc = subprocess.run(
        [sys.executable, *command, *argv], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=code)
    )
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{config}: prep convert failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    if argv[:1] == ["--keys-only-child"]:
        return keys_only_child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="/tmp/prep-bench-dedupe-cost")
    parser.add_argument("--other", help="another checkout's root: its default conversion runs in turn too")
    args = parser.parse_args(argv)
    source = ensure_data(args.count)
    configs = ["off", "keys only", "default", *(["other"] if args.other else [])]
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    for repeat in range(args.repeats):
        for config in configs if repeat % 2 == 0 else configs[::-1]:
            runs[config].append(run_once(source, pathlib.Path(args.out), config, args.other))
    print(f"prep convert, {args.count} JPEGs, {os.cpu_count()} cores, median of {args.repeats}; load {os.getloadavg()}")
    print(f"{'CPU s (wall s)':<14}" + "".join(f"{c:>20}" for c in configs))
    for name in NAMES:
        cells = "".join(f"{_cell(runs[c], name):>20}" for c in configs)
        print(f"{name:<14}{cells}")
    total = {c: statistics.median(r["total"][1] for r in runs[c]) for c in configs}
    print(f"{'CPU - off':<14}" + "".join(f"{total[c] - total['off']:>+20.2f}" for c in configs))


def _cell(runs: list[dict], name: str) -> str:
    cpu = statistics.median(r.get(name, [0, 0])[1] for r in runs)
    wall = statistics.median(r.get(name, [0, 0])[0] for r in runs)
    return f"{cpu:.2f} ({wall:.2f})"


if __name__ == "__main__":
    main()
