"""The serial steps around the prepare stage, alone, for two checkouts side by side: the listing and the planner.

    PYTHONPATH=$PWD python bench/serial_steps.py --count 100000 --other /work/main --repeats 3

Each run is a fresh process with `PYTHONPATH` set to its checkout, the two checkouts taking turns:
- "listing": `_execute.list_on_workers` of bench/data/jpeg<count> as the embedded runner lists class
  folders (in process; Beam imported first, as `prep convert` has it by then), its CPU and the
  collector's CPU within it (`gc.callbacks`);
- "rank": `plan.rank_task` over every rank task of `--count` synthetic references staged as
  bench/plan_scale.py stages them (10 classes, half in one; 39 shards), timed after staging; its
  output's digest (sections and entry files) must be the same for both checkouts.
Prints the medians (CPU seconds, from inside the process) and the ratio this / other.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)


def listing(source: str) -> dict:
    from beam_jobs._execute import list_on_workers  # imports Beam
    from prep.core.config import ConvertConfig
    from prep.core.inputs import folder_source

    spent = {"gc": 0.0, "since": 0.0}

    def timer(phase, info):
        if phase == "start":
            spent["since"] = time.process_time()
        else:
            spent["gc"] += time.process_time() - spent["since"]

    with tempfile.TemporaryDirectory() as out:
        config = ConvertConfig(source=os.path.abspath(source), output=out)
        gc.callbacks.append(timer)
        cpu = time.process_time()
        list_on_workers(config, folder_source(config))
        cpu = time.process_time() - cpu
        gc.callbacks.remove(timer)
    return {"cpu": cpu, "gc": spent["gc"]}


def rank(count: int) -> dict:
    import plan_scale

    from beam_jobs import plan
    from beam_jobs.prepare import GroupCount
    from prep.core.layout import PlanOptions
    from prep.core.workdir import WorkDir

    with tempfile.TemporaryDirectory() as tmp:
        plan_scale.stage(tmp, plan_scale.class_counts(count, 10), 1, 0, f"{tmp}/elements.json")
        staged = json.loads(pathlib.Path(tmp, "elements.json").read_text())["elements"]
        elements = [(chunk, tuple(GroupCount(*g) for g in counts)) for chunk, counts in staged]
        work = WorkDir(tmp)
        options = PlanOptions(num_shards=39, seed=1)
        tasks = list(plan.layout_tasks((None, elements), 10, options, work, plan.GROUP_TARGET))
        cpu = time.process_time()
        out = [x for task in tasks for x in plan.rank_task(task, work, 1)]
        cpu = time.process_time() - cpu
        digest = hashlib.sha256(repr(out).encode())
        for task in range(len(tasks)):
            if os.path.exists(work.entries(task)):
                digest.update(pathlib.Path(work.entries(task)).read_bytes())
    return {"cpu": cpu, "digest": digest.hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--other", type=pathlib.Path, help="the other checkout's root (required)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, arg = args.child
        print(json.dumps(listing(arg) if step == "listing" else rank(int(arg))))
        return
    if args.other is None:
        parser.error("--other is required")
    source = str(ensure_data(args.count))
    codes = {"this": ROOT, "other": args.other.resolve()}
    runs: dict[tuple[str, str], list[dict]] = {}
    for repeat in range(args.repeats):
        for step, arg in (("listing", source), ("rank", str(args.count))):
            for name in sorted(codes, reverse=repeat % 2 == 1):  # neither always first
                env = dict(os.environ, PYTHONPATH=str(codes[name]))
                cmd = [sys.executable, __file__, "--child", step, arg]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
                if proc.returncode != 0:
                    raise SystemExit(f"{name} {step} failed: {proc.stderr[-2000:]}")
                runs.setdefault((step, name), []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"serial steps, {args.count:,} photos / references, CPU s, median of {args.repeats}; load {load}")
    print(f"{'step':<18}{'this':>8}{'other':>8}{'ratio':>8}  runs this | other")
    for step, what in (("listing", "cpu"), ("listing", "gc"), ("rank", "cpu")):
        this, other = ([r[what] for r in runs[step, n]] for n in ("this", "other"))
        each = " ".join(f"{x:.2f}" for x in this) + " | " + " ".join(f"{x:.2f}" for x in other)
        a, b = statistics.median(this), statistics.median(other)
        print(f"{step + ' ' + what:<18}{a:>8.2f}{b:>8.2f}{(a / b if b else 0):>8.2f}  {each}")
    digests = {r["digest"] for n in codes for r in runs["rank", n]}
    print("same planner output" if len(digests) == 1 else "PLANNER OUTPUT DIFFERS")


if __name__ == "__main__":
    main()
