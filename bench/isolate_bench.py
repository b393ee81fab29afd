"""The cost of bounding every image (--isolate): none (in-thread, as before the sandbox), auto (the
default) and all, at 2 workers, pass-through and --resize 256; plus the hostile test corpus.

    python bench/isolate_bench.py                  # 2,000 generated JPEGs, 3 repeats
    python bench/isolate_bench.py --repeats 5 --corpus --before ../main   # also main's code, interleaved

Each run is a fresh `python -m prep.cli convert` process of this checkout; the variants are
interleaved within each repeat so that machine noise hits them alike, and the table gives
medians. "x none" is the variant's wall time over --isolate none's in the same mode (<= 1.05
is the goal for auto). Peak RSS is of the whole process tree (the command and its sandbox
workers), polled every 10 ms with psutil; "cpu s" its user + system time (less
sensitive than wall time to other load on a shared machine). With --corpus, tests/support/hostile_corpus.py's 359 odd
and damaged files in 25 formats are converted too. Results also go to bench/results/isolate-<count>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time

import psutil

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)

MODES = ("pass-through", "resize 256")
VARIANTS = ("none", "auto", "all")
BEFORE_LIMIT = 8 << 30  # address space for --before runs: the 260-gigapixel icon would take the machine


def tree_peak(pid: int, stop: threading.Event, out: list) -> None:
    root, peak = psutil.Process(pid), 0
    while not stop.is_set():
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            break
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        peak = max(peak, total)
        stop.wait(0.01)
    out.append(peak)


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (BEFORE_LIMIT, BEFORE_LIMIT))


def run_once(source: pathlib.Path, out: pathlib.Path, extra: list[str], code: pathlib.Path = ROOT) -> dict:
    """One conversion with the code of checkout `code`; a checkout other than this one runs
    under an address-space limit (the code before the sandbox has no bound of its own)."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # the previous run's writes are on disk, not written back during this run
    cmd = [
        sys.executable,
        "-m",
        "prep.cli",
        "convert",
        str(source),
        str(out),
        "--workers",
        "2",
        "--no-progress",
        "--num-shards",
        "4",
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=None if code == ROOT else _limit_address_space,
    )
    stop, peak = threading.Event(), []
    poller = threading.Thread(target=tree_peak, args=(proc.pid, stop, peak))
    poller.start()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)  # usage includes the sandbox workers it waited for
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    stop.set()
    poller.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err.decode()[-2000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    return {
        "wall": wall,
        "pipeline": manifest["run"]["seconds"],
        "cpu": usage.ru_utime + usage.ru_stime,
        "tree_rss_mb": peak[0] / 2**20,
        "written": manifest["inputs"]["written"],
        "rejected": manifest["inputs"]["rejected"],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="/tmp/prep-bench-isolate")
    parser.add_argument(
        "--corpus", action="store_true", help="also the hostile corpus of tests/support/hostile_corpus.py"
    )
    parser.add_argument(
        "--before",
        type=pathlib.Path,
        help="also this checkout's code (e.g. main before the "
        "sandbox), without --isolate, under an 8 GiB address-space limit",
    )
    parser.add_argument("--mode", action="append", help="only this mode (repeatable)")
    args = parser.parse_args(argv)
    sources = {mode: ensure_data(args.count) for mode in MODES}
    if args.corpus:
        sys.path.insert(0, str(ROOT))
        from tests.support.hostile_corpus import write_corpus

        corpus = pathlib.Path(args.out + "-corpus-src")
        shutil.rmtree(corpus, ignore_errors=True)
        write_corpus(corpus)
        sources["hostile corpus"] = corpus
    variants = (("before",) if args.before else ()) + VARIANTS
    configs = [(mode, variant) for mode in sources if not args.mode or mode in args.mode for variant in variants]
    runs: dict[tuple, list[dict]] = {c: [] for c in configs}
    for _ in range(args.repeats):
        for mode, variant in configs:
            extra = ["--resize", "256"] if mode == "resize 256" else []
            if variant == "before":
                runs[(mode, variant)].append(run_once(sources[mode], pathlib.Path(args.out), extra, args.before))
            else:
                runs[(mode, variant)].append(
                    run_once(sources[mode], pathlib.Path(args.out), ["--isolate", variant, *extra])
                )
    print(
        f"prep convert --workers 2, {args.count} JPEGs ~500x375 q90 (and the hostile corpus: "
        f"{'yes' if args.corpus else 'no'}), {os.cpu_count()} cores, median of {args.repeats}"
    )
    print(
        f"{'mode':<15}{'--isolate':>10}{'wall s':>9}{'x none':>8}{'pipeline s':>12}{'x none':>8}"
        f"{'cpu s':>8}{'x none':>8}{'tree RSS MB':>13}{'written':>9}{'rejected':>10}"
    )
    rows = []
    keys = ("wall", "pipeline", "cpu", "tree_rss_mb")
    for mode, variant in configs:
        med = {k: statistics.median(r[k] for r in runs[(mode, variant)]) for k in keys}
        base = {k: statistics.median(r[k] for r in runs[(mode, "none")]) for k in keys}
        last = runs[(mode, variant)][-1]
        row = {
            "mode": mode,
            "isolate": variant,
            **med,
            "x_wall": med["wall"] / base["wall"],
            "x_pipeline": med["pipeline"] / base["pipeline"],
            "x_cpu": med["cpu"] / base["cpu"],
            "written": last["written"],
            "rejected": last["rejected"],
        }
        rows.append(row)
        print(
            f"{mode:<15}{variant:>10}{row['wall']:>9.2f}{row['x_wall']:>8.3f}{row['pipeline']:>12.2f}"
            f"{row['x_pipeline']:>8.3f}{row['cpu']:>8.2f}{row['x_cpu']:>8.3f}{row['tree_rss_mb']:>13.0f}"
            f"{row['written']:>9}{row['rejected']:>10}"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / f"isolate-{args.count}.json").write_text(
        json.dumps({"rows": rows, "runs": {f"{m}/{v}": r for (m, v), r in runs.items()}}, indent=2)
    )


if __name__ == "__main__":
    main()
