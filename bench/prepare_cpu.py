"""CPU an image of the prepare stage's per-image work, on 1 and 2 threads, this checkout against another.

    python bench/prepare_cpu.py --other /work/main
    python bench/prepare_cpu.py --count 2000 --other /work/main -- --resize 256
    python bench/prepare_cpu.py --processes          # also 2 forked processes, as bench/baselines/bare_loop.py

Each run is a fresh process that reads, checks and frames `--count` photos of bench/data with
`spill.prepare_batch` (the pool task of the prepare stage: read_local, `--isolate auto`'s header check,
prepare_image, the record and its framing) in batches, on a pool of 1 or 2 threads, with no Beam around
it, and prints its CPU time (`time.process_time`) and wall time. A first pass over the photos, untimed,
puts them in the page cache. With `--other`, the same runs of another checkout (PYTHONPATH) take turns
with this one's, so a shared machine slows both alike. The table gives medians of `--repeats` runs: CPU
per image, and the 2-thread run's wall speed-up over 1 thread's (what the pool's threads gain over one).
On a machine busy with other work, wall figures mean little; CPU per image does. With `--processes`,
each checkout also runs the same batches in 2 forked processes (every 2nd batch each, a Sandbox each, CPU
summed over both): what the stage could gain were its pool made of processes, the records' transfer
between processes left out (so an upper bound).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)


def child(source: str, count: int, threads: int, resize: int | None, part: tuple[int, int] | None = None) -> None:
    """Prepares `count` photos of `source` on `threads` threads (a negative count: that many forked
    processes; below -100, that many started processes, -100 - n); prints JSON of CPU and wall seconds.
    `part` (first, step): as one of `step` started processes, prepares every step-th batch from `first`."""
    import concurrent.futures
    import multiprocessing

    from prep.core.image_rules import ImageOptions, quiet_pillow
    from prep.core.listing import InputRef
    from prep.core.run.sandbox import Sandbox
    from prep.core.run.spill import PrepareOptions, prepare_batch
    from prep.core.workdir import BATCH

    class Sink:  # ChunkSpill's put, without a file: the stage's spill writes are not what is measured
        def put(self, index: int, data: bytes) -> None:
            pass

    quiet_pillow()
    names = sorted(str(p.relative_to(source)) for p in pathlib.Path(source).glob("*/*"))[:count]
    refs = [InputRef(name, name.split("/")[0], None) for name in names]
    labels = {label: i for i, label in enumerate(sorted({r.label for r in refs}))}
    options = PrepareOptions(source, ImageOptions(resize=resize))
    batches = [refs[i : i + BATCH] for i in range(0, len(refs), BATCH)]

    def on_threads() -> None:  # the stage's pool: every batch a task, `threads` threads, one Sandbox
        sandbox = Sandbox(threads)
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            tasks = [
                pool.submit(prepare_batch, options, Sink(), b, batch, labels, sandbox)
                for b, batch in enumerate(batches)
            ]
            for task in tasks:
                task.result()
        sandbox.close()

    def share(first: int, step: int) -> float:  # in a forked process: its batches, its CPU seconds
        own, start = Sandbox(1), time.process_time()
        for b in range(first, len(batches), step):
            prepare_batch(options, Sink(), b, batches[b], labels, own)
        own.close()
        return time.process_time() - start

    def on_processes(count: int) -> float:  # forked: `share` and the batches need no pickling
        fork = multiprocessing.get_context("fork")
        ends = [fork.Pipe(duplex=False) for _ in range(count)]

        def send(first: int, end) -> None:
            end.send_bytes(json.dumps(share(first, count)).encode())

        procs = [fork.Process(target=send, args=(k, w)) for k, (_, w) in enumerate(ends)]
        for proc in procs:
            proc.start()
        spent = sum(json.loads(r.recv_bytes()) for r, _ in ends)
        for proc in procs:
            proc.join()
        return spent

    def on_started(count: int) -> float:  # fresh interpreters, as the stage's worker processes start
        argv = [sys.executable, __file__, "--child", source, str(len(names)), "1", str(resize or 0)]
        procs = [
            subprocess.Popen([*argv, str(k), str(count)], stdout=subprocess.PIPE, stdin=subprocess.PIPE)
            for k in range(count)
        ]
        for proc in procs:  # each says when it is ready (imports done), then waits for the go
            assert proc.stdout is not None
            proc.stdout.readline()
        start = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        spent = sum(json.loads(proc.stdout.read())["cpu"] for proc in procs if proc.stdout is not None)
        for proc in procs:
            proc.wait()
        return spent, time.perf_counter() - start

    if part is not None:
        print("ready", flush=True)
        sys.stdin.read()
        print(json.dumps({"cpu": share(*part)}))
        return
    for name in names:  # into the page cache
        pathlib.Path(source, name).read_bytes()
    cpu, wall = time.process_time(), time.perf_counter()
    if threads > 0:
        on_threads()
        cpu = time.process_time() - cpu
    elif threads < -100:
        cpu, wall = on_started(-100 - threads)
        print(json.dumps({"cpu": cpu, "wall": wall}))
        return
    else:
        cpu = on_processes(-threads)
    wall = time.perf_counter() - wall
    print(json.dumps({"cpu": cpu, "wall": wall}))


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        source, count, threads, resize = argv[1:5]
        part = (int(argv[5]), int(argv[6])) if len(argv) > 6 else None
        return child(source, int(count), int(threads), int(resize) or None, part)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--other", help="another checkout whose code runs in turn with this one's")
    parser.add_argument("--resize", type=int, default=0, help="--resize (0: pass-through)")
    parser.add_argument("--processes", action="store_true", help="also 2 forked processes (see above)")
    args = parser.parse_args(argv)
    source = ensure_data(20000)  # the first --count of its photos, by path
    trees = {"this": str(ROOT)} | ({"other": args.other} if args.other else {})
    pools = (1, 2, -2, -102) if args.processes else (1, 2)  # -2: 2 forked processes; -102: 2 started
    runs: dict[tuple[str, int], list[dict]] = {(tree, t): [] for tree in trees for t in pools}
    for repeat in range(args.repeats):
        order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
        for tree, threads in order:
            env = dict(os.environ, PYTHONPATH=trees[tree])
            argv_child = ["--child", str(source), str(args.count), str(threads), str(args.resize)]
            proc = subprocess.run(
                [sys.executable, __file__, *argv_child], capture_output=True, text=True, env=env, check=True
            )
            runs[tree, threads].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    what = f"--resize {args.resize}" if args.resize else "pass-through"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"prepare_batch, {args.count} photos of bench/data/jpeg20000, {what}, median of {args.repeats}")
    print(f"load average after: {load}")
    print(f"{'checkout':10s} {'pool':>9s} {'cpu us/img':>11s} {'wall us/img':>12s}   runs, cpu | wall (us/img)")
    for (tree, threads), got in runs.items():
        pool = f"{threads} thr" if threads > 0 else f"{-threads} fork" if threads > -100 else f"{-100 - threads} start"
        cpu = [r["cpu"] / args.count * 1e6 for r in got]
        wall = [r["wall"] / args.count * 1e6 for r in got]
        spread = " ".join(f"{c:.0f}" for c in cpu) + " | " + " ".join(f"{w:.0f}" for w in wall)
        print(f"{tree:10s} {pool:>9s} {statistics.median(cpu):11.1f} {statistics.median(wall):12.1f}   {spread}")
    for tree in trees:
        one = statistics.median(r["wall"] for r in runs[tree, 1])
        two = statistics.median(r["wall"] for r in runs[tree, 2])
        print(f"{tree}: 2 threads' wall speed-up over 1: {one / two:.2f}")
        if args.processes:
            procs = statistics.median(r["wall"] for r in runs[tree, -2])
            print(f"{tree}: 2 forked processes' wall speed-up over 1 thread: {one / procs:.2f}")
            started = statistics.median(r["wall"] for r in runs[tree, -102])
            print(f"{tree}: 2 started processes' wall speed-up over 1 thread: {one / started:.2f}")
    if args.other:
        for threads in (1, 2):
            this = statistics.median(r["cpu"] for r in runs["this", threads])
            other = statistics.median(r["cpu"] for r in runs["other", threads])
            print(f"CPU this / other, {threads} thread(s): {this / other:.3f}")


if __name__ == "__main__":
    main()
