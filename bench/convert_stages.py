"""Where a conversion's time goes: each stage of the embedded runner, at 1 and 2 workers.

    python bench/convert_stages.py                         # 20,000 generated JPEGs, default options
    python bench/convert_stages.py --count 2000 --repeats 3 -- --resize 256
    python bench/convert_stages.py --count 20000 --repeats 3 --workers 2 --other /work/main -- --duplicates off
    python bench/convert_stages.py --source /tmp/one --repeats 5 --workers 2 --other /work/main   # fixed cost

Each run is a fresh process running `prep convert` with Beam's FnApiRunner
timed around every bundle it executes (one bundle per fused stage on the
embedded runner). Stages are named by their first step: "prepare" (read,
check, convert, spill), "dedupe" (grouping duplicates, the default's),
"plan" (the planner's groups), "write" (shards),
"finish" (rejects.jsonl, tfds files, manifest); "outside" is the rest of
the command (imports, listing, building the pipeline). CPU is this process's
(pool threads included), and "sys" the part of it spent in the kernel (`ru_stime`: system calls and
page faults; at 100,000 photos most of the write stage's). Configurations are interleaved within each repeat;
the table gives medians and the ratio of 1 worker's time to 2 workers'.
`prep convert` runs as the `prep` console script does (`CliHooks(owns_process=True)`: Beam
imported without the clients it never uses, beam_jobs/lean_import.py). With `--other CHECKOUT`,
each repeat also runs that checkout's code (PYTHONPATH), the two taking turns, and a second
table gives each stage's median for both and the ratio this / other.
Its last line gives the ceilings of that ratio set by the stages that do not
scale: what it would be if 2 workers took exactly half of 1 worker's time on
the image stage alone, or on every stage the runner executes. Times are from
inside the process: the interpreter's start and exit are not in them. Each run also gives the
collector's wall time and passes by stage (`gc.callbacks`) and its peak RSS, and its output is
removed once timed (4.9 GB at 100,000 photos). "process" is the child process as its parent sees it, from
its start to its exit (wall, and the user + system CPU of it and its threads): the interpreter's start and
exit, which "outside" leaves out, are the difference. `--source DIR` converts DIR instead of the generated
photos (a folder of one photo gives the fixed cost).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)

STAGES = (
    ("prepare", "PrepareImages"),
    ("dedupe", "Dedupe/"),
    ("write", "WriteShards"),
    ("write", "ConcatParts"),
    ("finish", "WriteManifest"),
)


def stage_name(fused: str) -> str:
    """Our name for a fused stage of the runner, from the steps its name lists."""
    for name, step in STAGES:
        if step in fused:
            return name
    return "plan"


def child(argv: list[str]) -> None:
    """Runs `prep convert ARGV` in this process, timing the runner's bundles; prints JSON."""
    started, cpu_started, sys_started = time.perf_counter(), time.process_time(), _system_cpu()
    from beam_jobs.lean_import import import_beam

    # as `prep convert` imports Beam (below, Beam is imported before `main` is called: without this, in full)
    import_beam()
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    execute = fn_runner.FnApiRunner._execute_bundle
    spent: dict[str, list[float]] = {}

    def timed(self, context, manager, bundle_input):
        wall, cpu, kernel = time.perf_counter(), time.process_time(), _system_cpu()
        collecting["stage"] = stage_name(manager.stage.name)
        try:
            return execute(self, context, manager, bundle_input)
        finally:
            collecting["stage"] = "outside"
            totals = spent.setdefault(stage_name(manager.stage.name), [0.0, 0.0, 0.0])
            totals[0] += time.perf_counter() - wall
            totals[1] += time.process_time() - cpu
            totals[2] += _system_cpu() - kernel

    fn_runner.FnApiRunner._execute_bundle = timed
    collecting: dict = {"since": 0.0, "stage": "outside"}
    collected: dict[str, list[float]] = {}  # stage -> [wall s, passes] of the collector while it ran

    def gc_timer(phase, info):  # every collection's wall time, all generations (the heap's frozen part is not walked)
        if phase == "start":
            collecting["since"] = time.perf_counter()
        else:
            totals = collected.setdefault(collecting["stage"], [0.0, 0])
            totals[0] += time.perf_counter() - collecting["since"]
            totals[1] += 1

    gc.callbacks.append(gc_timer)
    from prep.cli import CliHooks, main

    main(["convert", *argv], standalone_mode=False, obj=CliHooks(owns_process=True))
    wall, cpu, kernel = time.perf_counter() - started, time.process_time() - cpu_started, _system_cpu() - sys_started
    gc.callbacks.remove(gc_timer)
    inside = [sum(t[i] for t in spent.values()) for i in range(3)]
    spent["outside"] = [wall - inside[0], cpu - inside[1], kernel - inside[2]]
    spent["total"] = [wall, cpu, kernel]
    # not stages: the collector's wall time and passes, and peak RSS in MB (ru_maxrss is in KiB on Linux)
    spent["gc"] = [sum(w for w, _ in collected.values()), sum(n for _, n in collected.values())]
    spent.update({f"gc {stage}": totals for stage, totals in collected.items()})
    spent["rss"] = [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0]
    print(json.dumps(spent), flush=True)
    gc.freeze()  # as the console script does before its exit (prep.cli.run)


def _system_cpu() -> float:
    """This process's CPU seconds in the kernel (system calls, page faults), all its threads."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def run_once(source: pathlib.Path, out: pathlib.Path, workers: int, extra: list[str], code: str | None = None) -> dict:
    """One conversion's stage times; `code`: the checkout whose code runs (None: the one on sys.path)."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # the previous run's writes are on disk, not written back during this run
    argv = [str(source), str(out), "--workers", str(workers), "--no-progress", *extra]
    env = None if code is None else dict(os.environ, PYTHONPATH=code)
    wall, (cpu, kernel) = time.perf_counter(), _children_cpu()
    proc = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True, env=env)
    cpu_after, kernel_after = _children_cpu()
    process = [time.perf_counter() - wall, cpu_after - cpu, kernel_after - kernel]
    shutil.rmtree(out, ignore_errors=True)  # 4.9 GB at 100,000 photos: two outputs kept may fill the disk
    if proc.returncode != 0:
        raise SystemExit(f"prep convert {' '.join(argv)} failed: {proc.stderr[-2000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process": process}


def _children_cpu() -> tuple[float, float]:
    """(user + system, system) CPU seconds of every child waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=2)
    # one folder per run: two sessions' runs in one folder deleted each other's outputs mid-run
    parser.add_argument("--out", default=f"/tmp/prep-bench-stages-{os.getpid()}")
    parser.add_argument("--workers", default="1,2", help="worker counts, e.g. 2 (the last ratio needs 1,2)")
    parser.add_argument("--other", help="another checkout's root, run in turn with this one (see above)")
    parser.add_argument("--source", type=pathlib.Path, help="convert this folder instead of --count photos")
    parser.add_argument("convert_options", nargs="*", help="more `prep convert` options, after --")
    args = parser.parse_args(argv)
    source = args.source or ensure_data(args.count)
    counts = [int(w) for w in args.workers.split(",")]
    runs: dict[int, list[dict]] = {w: [] for w in counts}
    others: dict[int, list[dict]] = {w: [] for w in counts}
    for repeat in range(args.repeats):
        for workers in counts:
            # (runs, code): this checkout's, and `--other`'s; taking turns, neither always first
            sides = [(runs, None)] if args.other is None else [(runs, None), (others, args.other)]
            for kept, code in sides if repeat % 2 == 0 else sides[::-1]:
                out = pathlib.Path(args.out, "other" if code else "this")
                kept[workers].append(run_once(source, out, workers, args.convert_options, code))
    with contextlib.suppress(OSError):  # the runs' folders are gone; the default --out is left empty
        os.rmdir(args.out)
    median = _medians(runs)
    print(
        f"prep convert {' '.join(args.convert_options) or '(default options)'}, "
        f"{args.source or f'{args.count} JPEGs'}, {os.cpu_count()} cores, median of {args.repeats}"
    )
    (HERE / "results").mkdir(exist_ok=True)
    saved = {"median": median, "runs": runs, "other": args.other, "other_runs": others}
    name = args.source.name if args.source else args.count
    (HERE / "results" / f"stages-{name}.json").write_text(json.dumps(saved, indent=2))
    if args.other is not None:
        _compare(median, _medians(others), args.other)
    else:
        for w in counts:
            print(f"{w} worker(s)\n{'stage':<9}{'wall':>8}{'cpu':>8}{'sys':>8}{'gc s':>8}{'passes':>8}")
            for n in NAMES:
                (wall, cpu, kernel), (gc_wall, passes, _) = median[w][n], median[w][f"gc {n}"]
                print(f"{n:<9}{wall:>8.2f}{cpu:>8.2f}{kernel:>8.2f}{gc_wall:>8.2f}{passes:>8.0f}")
            _extras(median[w])
    if counts != [1, 2]:
        return
    print(f"{'stage':<9}{'wall 1':>9}{'cpu 1':>8}{'wall 2':>9}{'cpu 2':>8}{'x wall':>8}{'share 2':>9}")
    for n in NAMES:
        (w1, c1, _), (w2, c2, _) = median[1][n], median[2][n]
        share = w2 / median[2]["total"][0]  # of 2 workers' wall time
        print(f"{n:<9}{w1:>9.2f}{c1:>8.2f}{w2:>9.2f}{c2:>8.2f}{(w1 / w2 if w2 else 0):>8.2f}{share:>9.0%}")
    # What 2 workers could reach at best, from 1 worker's stage times: if the image
    # stage ran exactly twice as fast, and if every stage inside the runner did.
    total1, prepare1, outside1 = median[1]["total"][0], median[1]["prepare"][0], median[1]["outside"][0]
    print(
        f"ceiling of 'x wall' if prepare scaled 2x: {total1 / (total1 - prepare1 / 2):.2f}; "
        f"if every stage in the runner did: {total1 / (outside1 + (total1 - outside1) / 2):.2f}"
    )


NAMES = ["outside", "prepare", "dedupe", "plan", "write", "finish", "total", "process"]
EXTRA = ["gc", "rss"]  # the collector's [wall, passes] and peak RSS [MB, 0]: printed apart (and "gc STAGE")


def _medians(runs: dict[int, list[dict]]) -> dict[int, dict[str, list[float]]]:
    """Per worker count and stage, the median [wall, cpu] of the runs (gc: [wall, passes]; rss: [MB, 0])."""
    return {
        w: {
            n: [
                statistics.median(r.get(n, [0, 0, 0])[i] if i < len(r.get(n, [0, 0, 0])) else 0 for r in rs)
                for i in (0, 1, 2)
            ]
            for n in [*NAMES, *EXTRA, *(f"gc {n}" for n in NAMES)]
        }
        for w, rs in runs.items()
        if rs
    }


def _compare(mine: dict, theirs: dict, other: str) -> None:
    """This checkout's stage medians against `other`'s, each worker count."""
    for w in mine:
        print(f"{w} worker(s): this | {other}")
        print(f"{'stage':<9}{'wall':>8}{'cpu':>8}{'sys':>7} |{'wall':>8}{'cpu':>8}{'sys':>7}   wall ratio   cpu ratio")
        for n in NAMES:
            (w1, c1, k1), (w2, c2, k2) = mine[w][n], theirs[w][n]
            print(
                f"{n:<9}{w1:>8.2f}{c1:>8.2f}{k1:>7.2f} |{w2:>8.2f}{c2:>8.2f}{k2:>7.2f}{_ratio(w1, w2)}{_ratio(c1, c2)}"
            )
        _extras(mine[w], theirs[w])


def _extras(mine: dict, theirs: dict | None = None) -> None:
    """The collector's wall time and passes, and peak RSS, of this checkout (and `theirs`)."""
    for n, what in (("gc", "gc s, passes"), ("rss", "peak RSS MB")):
        shown = [f"{mine[n][0]:.2f} {mine[n][1]:.0f}" if n == "gc" else f"{mine[n][0]:.0f}"]
        if theirs is not None:
            shown.append(f"{theirs[n][0]:.2f} {theirs[n][1]:.0f}" if n == "gc" else f"{theirs[n][0]:.0f}")
        print(f"{what:<14}" + " | ".join(shown))


def _ratio(a: float, b: float) -> str:
    return f"{a / b:>12.3f}" if b else f"{'-':>12}"


if __name__ == "__main__":
    main()
