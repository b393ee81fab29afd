"""What the prepare stage adds to its pool task: the stage's parts by thread CPU, against `prepare_batch` alone.

    python bench/prepare_parts.py --count 20000 --repeats 3 -- --duplicates off
    python bench/prepare_parts.py --count 2000 --workers 2 --other /work/main

Each repeat runs, in turn and for each worker count, two fresh processes on the same first `--count`
photos of bench/data: `prep convert SRC OUT --workers W --no-progress [ARGS after --]` as
bench/convert_stages.py runs it (the "stage" row: the prepare stage's wall and process CPU), with
timers (`time.thread_time`, CPU of the calling thread) around the stage's parts, and
bench/prepare_cpu.py's loop of `spill.prepare_batch` alone on W threads, no Beam, records discarded
(the "alone" row); with `--beam`, also that loop after importing Beam and the pipeline's modules as
`prep convert` does (the "beam" row: what the process alone costs the loop). The parts:
`prepare_batch` (the pool's batch task, its `ChunkSpill.put` included),
`ChunkSpill.put`, `_finish` (a chunk's spill file closed, its index written: on the pool), `_submit`
(the runner's thread: a chunk's listing read, its in-flight record written, its tasks queued);
"idle" is the time a pool thread spent between its first task's start and the last task's end not in
a task: what the stage's scheduling costs the pool. CPU is given in us an image. With `--other`, the
same stage runs of another checkout take turns with this one's (PYTHONPATH). Medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)

PARTS = ("prepare_batch", "put", "_finish", "_submit")


def child(argv: list[str]) -> None:
    """Runs `prep convert ARGV` as convert_stages.py does, with the stage's parts timed; prints two JSON
    lines: convert_stages' stage times, then the parts' [thread CPU s, calls] and the pool's idle s."""
    import convert_stages

    import beam_jobs.prepare as prepare
    from prep.core.run import chunk_spill

    spent: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    tasks: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)  # pool thread -> its tasks
    lock = threading.Lock()

    def timed(name: str, fn, pooled: bool = False):
        def call(*args, **kwargs):
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                with lock:
                    spent[name][0] += time.thread_time() - cpu
                    spent[name][1] += 1
                    if pooled:
                        tasks[threading.get_ident()].append((wall, end))

        return call

    prepare.prepare_batch = timed("prepare_batch", prepare.prepare_batch, pooled=True)
    prepare.PrepareChunk._finish = timed("_finish", prepare.PrepareChunk._finish, pooled=True)
    prepare.PrepareChunk._submit = timed("_submit", prepare.PrepareChunk._submit)
    chunk_spill.ChunkSpill.put = timed("put", chunk_spill.ChunkSpill.put)
    convert_stages.child(argv)
    first = min(start for spans in tasks.values() for start, _ in spans)
    last = max(end for spans in tasks.values() for _, end in spans)
    idle = [last - first - sum(end - start for start, end in spans) for spans in tasks.values()]
    print(json.dumps({"parts": dict(spent), "idle": sum(idle)}), flush=True)


def run_stage(source: pathlib.Path, out: pathlib.Path, workers: int, extra: list[str], code: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    argv = [str(source), str(out), "--workers", str(workers), "--no-progress", *extra]
    env = dict(os.environ, PYTHONPATH=code)
    proc = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True, env=env)
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"prep convert {' '.join(argv)} failed: {proc.stderr[-2000:]}")
    stages, parts = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    return {"wall": stages["prepare"][0], "cpu": stages["prepare"][1], **parts}


def alone_after_beam(argv: list[str]) -> None:
    """prepare_cpu.py's child (SOURCE COUNT THREADS), after importing Beam and the pipeline as `prep convert` does."""
    from beam_jobs.lean_import import import_beam

    import_beam()
    import prepare_cpu

    import beam_jobs.convert  # noqa: F401  (the pipeline's modules, imported for their heap only)

    prepare_cpu.child(argv[0], int(argv[1]), int(argv[2]), None)


def run_alone(source: pathlib.Path, count: int, threads: int, code: str, beam: bool = False) -> dict:
    script, argv = HERE / "prepare_cpu.py", ["--child", str(source), str(count), str(threads), "0"]
    if beam:
        script, argv = pathlib.Path(__file__), ["--alone-beam", str(source), str(count), str(threads)]
    env = dict(os.environ, PYTHONPATH=code)
    proc = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def subset(count: int) -> pathlib.Path:
    """A folder of links to the first `count` photos of bench/data/jpeg20000 by path, as prepare_cpu.py takes."""
    source = ensure_data(20000)
    if count >= 20000:
        return source
    folder = pathlib.Path(f"/tmp/prep-bench-parts-{count}")
    names = sorted(p.relative_to(source) for p in source.glob("*/*"))[:count]
    if len(list(folder.glob("*/*"))) != len(names):
        shutil.rmtree(folder, ignore_errors=True)
        for name in names:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).symlink_to(source / name)
    return folder


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    if argv[:1] == ["--alone-beam"]:
        return alone_after_beam(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--other", help="another checkout whose stage runs take turns with this one's")
    parser.add_argument("--beam", action="store_true", help="also the loop alone after Beam's import")
    parser.add_argument("--out", default=f"/tmp/prep-bench-parts-out-{os.getpid()}")
    parser.add_argument("convert_options", nargs="*", help="more `prep convert` options, after --")
    args = parser.parse_args(argv)
    source = subset(args.count)
    counts = [int(w) for w in args.workers.split(",")]
    rows = (
        [("alone", str(ROOT))]
        + ([("beam", str(ROOT))] if args.beam else [])
        + [("stage", str(ROOT))]
        + ([("other", args.other)] if args.other else [])
    )
    runs: dict[tuple[str, int], list[dict]] = {(name, w): [] for name, _ in rows for w in counts}
    for repeat in range(args.repeats):
        for workers in counts:
            for name, code in rows if repeat % 2 == 0 else rows[::-1]:
                if name in ("alone", "beam"):
                    got = run_alone(source, args.count, workers, code, beam=name == "beam")
                else:
                    got = run_stage(source, pathlib.Path(args.out), workers, args.convert_options, code)
                runs[name, workers].append(got)
    shutil.rmtree(args.out, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"prepare stage, {args.count} photos, {' '.join(args.convert_options) or '(default options)'}")
    print(f"{os.cpu_count()} cores, load average after {load}, median of {args.repeats}; CPU in us an image")
    print(f"{'run':<7}{'W':>2}{'wall s':>8}{'cpu':>7}" + "".join(f"{p:>14}" for p in PARTS) + f"{'idle s':>8}")
    # each run's wall time too: on a shared machine, one slow run shows there
    for (name, workers), got in runs.items():
        med = {k: statistics.median(r[k] for r in got) for k in ("wall", "cpu")}
        line = f"{name:<7}{workers:>2}{med['wall']:>8.2f}{med['cpu'] / args.count * 1e6:>7.0f}"
        if name not in ("alone", "beam"):
            for part in PARTS:
                cpu = statistics.median(r["parts"].get(part, [0, 0])[0] for r in got)
                line += f"{cpu / args.count * 1e6:>14.1f}"
            line += f"{statistics.median(r['idle'] for r in got):>8.3f}"
        print(line + "   runs, wall: " + " ".join(f"{r['wall']:.2f}" for r in got))
    for name, _ in rows:
        if 1 in counts and 2 in counts:
            one, two = (statistics.median(r["wall"] for r in runs[name, w]) for w in (1, 2))
            print(f"{name}: 1 -> 2 workers, wall {one / two:.2f}x")


if __name__ == "__main__":
    main()
