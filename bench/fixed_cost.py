"""A conversion's fixed cost in a process that has already converted once, as a test suite's
conversions or a notebook's pay it: this checkout against another, interleaved.

    PYTHONPATH=$PWD python bench/fixed_cost.py --other /work/main --count 20 --repeats 5

Each repeat starts one fresh process per checkout (`PYTHONPATH` set to it, the two taking turns
which goes first) that runs `prep convert SRC OUT --no-progress` in process once to import
everything, then `--runs` times more, and reports the CPU time (`time.process_time`, pool threads
included) of those. The input is bench/data/jpeg<count> (bench/make_data.py). Prints the median
CPU seconds per conversion of each checkout and their ratio. The whole command's cost, imports
included, is bench/code_compare.py's.
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

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)

_CHILD = """
import json, shutil, sys, time
from prep.cli import main
src, out, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def once():
    shutil.rmtree(out, ignore_errors=True)
    main(["convert", src, out, "--no-progress", *sys.argv[4:]], standalone_mode=False)
once()
spent = []
for _ in range(runs):
    started = time.process_time()
    once()
    spent.append(time.process_time() - started)
print(json.dumps(spent), file=sys.stderr)
"""


def child(code: pathlib.Path, src: pathlib.Path, out: pathlib.Path, runs: int, extra: list[str]) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(code))
    cmd = [sys.executable, "-c", _CHILD, str(src), str(out), str(runs), *extra]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=out.parent)
    return json.loads(done.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--other", type=pathlib.Path, required=True, help="the other checkout's root")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="conversions timed in each process")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/prep-fixed-cost"))
    parser.add_argument("extra", nargs="*", help="after --: more `prep convert` options, for both")
    args = parser.parse_args()
    src = ensure_data(args.count)
    codes = {"this": HERE.parent, "other": args.other.resolve()}
    spent: dict[str, list[float]] = {name: [] for name in codes}
    args.out.mkdir(parents=True, exist_ok=True)
    for repeat in range(args.repeats):
        for name in sorted(codes, reverse=repeat % 2 == 1):
            spent[name].extend(child(codes[name], src, args.out / name, args.runs, args.extra))
    shutil.rmtree(args.out, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    runs = args.repeats * args.runs
    print(f"prep convert {' '.join(args.extra)} in process, {args.count:,} images, median of {runs}; load {load}")
    this, other = statistics.median(spent["this"]), statistics.median(spent["other"])
    print(f"{'CPU s per conversion':<22} {'this':>6} {'other':>6} {'this/other':>10}")
    print(f"{'':<22} {this:>6.3f} {other:>6.3f} {this / other:>10.3f}")


if __name__ == "__main__":
    main()
