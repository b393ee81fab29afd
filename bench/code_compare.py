"""`prep convert` of the same input by two checkouts of this project, interleaved, side by side.

    PYTHONPATH=$PWD python bench/code_compare.py --count 2000 --other /work/main --repeats 5
    PYTHONPATH=$PWD python bench/code_compare.py --count 20000 --other /work/main --repeats 3

Each run is a fresh `python -m prep.cli convert SRC OUT --num-shards 8 --no-progress` process (the embedded
runner), timed from start to exit, with `PYTHONPATH` set to one checkout, this one and `--other` taking turns
so that a machine shared with other work slows both alike. The input is bench/data/jpeg<count>
(bench/make_data.py). Prints the median wall time of each and their ratio, and checks that both wrote the
same shard bytes.
"""

from __future__ import annotations

import argparse
import hashlib
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
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)


def run(code: pathlib.Path, src: pathlib.Path, out: pathlib.Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(code))
    cmd = [sys.executable, "-m", "prep.cli", "convert", str(src), str(out), "--num-shards", "8", "--no-progress"]
    start = time.perf_counter()
    # Not from a checkout's root: `python -m` puts the working directory first on sys.path, before PYTHONPATH.
    subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=out.parent)
    return time.perf_counter() - start


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
    args = parser.parse_args()
    src = ensure_data(args.count)
    codes = {"this": ROOT, "other": args.other.resolve()}
    times: dict[str, list[float]] = {name: [] for name in codes}
    digests = {}
    for _ in range(args.repeats):
        for name, code in codes.items():
            out = args.out / name
            times[name].append(run(code, src, out))
            digests[name] = shards_digest(out)
    shutil.rmtree(args.out, ignore_errors=True)
    this, other = statistics.median(times["this"]), statistics.median(times["other"])
    print(f"{'images':>7} {'this s':>7} {'other s':>8} {'this/other':>10}  runs (this | other)")
    runs = " ".join(f"{t:.1f}" for t in times["this"]) + " | " + " ".join(f"{t:.1f}" for t in times["other"])
    print(f"{args.count:>7,} {this:>7.2f} {other:>8.2f} {this / other:>10.3f}  {runs}")
    print("same shard bytes" if digests["this"] == digests["other"] else "SHARD BYTES DIFFER")


if __name__ == "__main__":
    main()
