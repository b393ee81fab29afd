"""Sums the per-test CPU log of a test run (PREP_TEST_CPU=PREFIX, tests/conftest.py) by file, side by side
for one or more runs, then the costliest tests of the first:

    PREP_TEST_CPU=/tmp/a python -m pytest ...   # in one checkout
    PREP_TEST_CPU=/tmp/b python -m pytest ...   # in another
    python -m tests.support.suite_cpu /tmp/a /tmp/b [--top 40]

CPU seconds count each xdist worker's threads and the children it reaped (TensorFlow workers, DirectRunner
processes), not processes that outlive the test, such as the session's Dask cluster."""

from __future__ import annotations

import argparse
import collections
import glob
import json


def load(prefix: str) -> dict[str, tuple[float, float]]:
    """{test id: (cpu s, wall s)} from PREFIX.*.jsonl."""
    tests = {}
    for path in sorted(glob.glob(f"{glob.escape(prefix)}.*.jsonl")):
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                tests[record["id"]] = (record["cpu"], record["wall"])
    if not tests:
        raise SystemExit(f"no {prefix}.*.jsonl: run pytest with PREP_TEST_CPU={prefix}")
    return tests


def by_file(tests: dict[str, tuple[float, float]]) -> dict[str, list[float]]:
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for test, (cpu, wall) in tests.items():
        totals = files[test.split("::")[0]]
        totals[0] += cpu
        totals[1] += wall
        totals[2] += 1
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="+")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    runs = [load(p) for p in args.prefixes]
    files = [by_file(r) for r in runs]
    names = sorted(set().union(*files), key=lambda name: -max(f.get(name, [0.0])[0] for f in files))
    print(f"{'file':58s}" + "".join(f"{'cpu s':>9s}{'wall s':>9s}{'tests':>6s}" for _ in runs))
    rows = [*names[: args.top], "TOTAL"]
    for name in rows:
        cells = []
        for f, run in zip(files, runs):
            cpu, wall, n = f[name] if name in f else (0.0, 0.0, 0)
            if name == "TOTAL":
                cpu, wall, n = sum(c for c, _ in run.values()), sum(w for _, w in run.values()), len(run)
            cells.append(f"{cpu:9.1f}{wall:9.1f}{int(n):6d}")
        print(f"{name:58s}" + "".join(cells))
    print(f"\nthe {args.top} costliest tests of {args.prefixes[0]} (cpu s, wall s)")
    for test, (cpu, wall) in sorted(runs[0].items(), key=lambda t: -t[1][0])[: args.top]:
        print(f"{cpu:9.1f}{wall:9.1f}  {test}")


if __name__ == "__main__":
    main()
