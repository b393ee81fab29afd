"""`prep convert` of the same input by two checkouts of this project, interleaved, side by side.

    PYTHONPATH=$PWD python bench/code_compare.py --count 2000 --other /work/main --repeats 5
    PYTHONPATH=$PWD python bench/code_compare.py --count 20000 --other /work/main --repeats 3
    PYTHONPATH=$PWD python bench/code_compare.py --count 20 --other /work/main --repeats 7 -- --resize 64

Each run is a fresh `python -m prep.cli convert SRC OUT --num-shards 8 --no-progress [ARGS after --]` process
(the embedded runner), timed from start to exit, with `PYTHONPATH` set to one checkout, this one and `--other`
taking turns so that a machine shared with other work slows both alike. The input is bench/data/jpeg<count>
(bench/make_data.py). Prints the median wall time and CPU time (user + system of the process and its
children, which a loaded machine disturbs less than wall time) of each and their ratios, and checks that
both wrote the same shard bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # of every child waited for so far
    return usage.ru_utime + usage.ru_stime


def run(code: pathlib.Path, src: pathlib.Path, out: pathlib.Path, extra: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one conversion by checkout `code`."""
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(code))
    cmd = [sys.executable, "-m", "prep.cli", "convert", str(src), str(out), "--num-shards", "8", "--no-progress"]
    start, cpu = time.perf_counter(), _children_cpu()
    # Not from a checkout's root: `python -m` puts the working directory first on sys.path, before PYTHONPATH.
    subprocess.run([*cmd, *extra], env=env, check=True, capture_output=True, cwd=out.parent)
    return time.perf_counter() - start, _children_cpu() - cpu


def shards_digest(out: pathlib.Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(out.glob("*.tfrecord")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--other", type=pathlib.Path, required=True, help="the other checkout's root")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/prep-code-compare"))
    parser.add_argument("extra", nargs="*", help="after --: more `prep convert` options, for both")
    args = parser.parse_args()
    src = ensure_data(args.count)
    codes = {"this": ROOT, "other": args.other.resolve()}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in codes}
    digests = {}
    for repeat in range(args.repeats):
        # alternating which goes first, so that neither always follows the other's exit
        for name in sorted(codes, reverse=repeat % 2 == 1):
            out = args.out / name
            times[name].append(run(codes[name], src, out, args.extra))
            digests[name] = shards_digest(out)
    shutil.rmtree(args.out, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"prep convert {' '.join(args.extra)}, {args.count:,} images, median of {args.repeats}; load {load}")
    print(f"{'':5} {'this s':>7} {'other s':>8} {'this/other':>10}  runs (this | other)")
    for i, what in enumerate(("wall", "CPU")):
        this = statistics.median(t[i] for t in times["this"])
        other = statistics.median(t[i] for t in times["other"])
        runs = " ".join(f"{t[i]:.2f}" for t in times["this"]) + " | " + " ".join(f"{t[i]:.2f}" for t in times["other"])
        print(f"{what:5} {this:>7.2f} {other:>8.2f} {this / other:>10.3f}  {runs}")
    print("same shard bytes" if digests["this"] == digests["other"] else "SHARD BYTES DIFFER")


if __name__ == "__main__":
    main()
