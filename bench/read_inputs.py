"""Reading inputs for the prepare stage: `spill.read_local` against `open().read()` and a separate stat.

    python bench/read_inputs.py                    # 5,000 of bench/data/jpeg20000, 7 repeats
    python bench/read_inputs.py --count 2000 --files 2000 --repeats 9

The reference is what the prepare stage did before `read_local`: `storage.signature` (a stat), a stat,
`open(...)` (fstat, isatty, lseek), an fstat, `read()` to the end (fstat, lseek, two reads). Both read
every file of the set from the page cache, in 1 and in 2 threads (each thread its share), the two
taking turns in every repeat; the table gives the minimum and median of CPU and wall seconds.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import threading
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data  # noqa: E402  (bench/ scripts run as files)

from prep.core import storage  # noqa: E402
from prep.core.run.spill import read_local  # noqa: E402


def reference(paths: list[str]) -> None:
    for path in paths:
        storage.signature(path)
        os.stat(path)
        with open(path, "rb") as f:
            os.fstat(f.fileno())
            f.read()


def local(paths: list[str]) -> None:
    for path in paths:
        _, st = read_local(path)
        storage.signature_of(st)


def timed(fn, files: list[str], threads: int) -> tuple[float, float]:
    pool = [threading.Thread(target=fn, args=(files[i::threads],)) for i in range(threads)]
    wall, cpu = time.perf_counter(), time.process_time()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000, help="the bench/data set (bench/make_data.py)")
    parser.add_argument("--files", type=int, default=5000, help="files read per pass")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    source = ensure_data(args.count)
    files = sorted(str(p) for p in source.rglob("*") if p.is_file())[: args.files]
    ways = {"open/read + stat": reference, "read_local": local}
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {(w, n): [] for w in ways for n in (1, 2)}
    for repeat in range(args.repeats):
        for name in sorted(ways, reverse=repeat % 2 == 1):
            for threads in (1, 2):
                runs[name, threads].append(timed(ways[name], files, threads))
    print(f"{len(files)} files of {source}, {args.repeats} repeats; load {os.getloadavg()[0]:.1f}")
    print(f"{'way':<18}{'threads':>8}{'cpu min':>9}{'cpu med':>9}{'wall min':>10}{'wall med':>10}")
    for (name, threads), got in runs.items():
        cpu, wall = [c for _, c in got], [w for w, _ in got]
        print(
            f"{name:<18}{threads:>8}{min(cpu):>9.3f}{statistics.median(cpu):>9.3f}"
            f"{min(wall):>10.3f}{statistics.median(wall):>10.3f}"
        )


if __name__ == "__main__":
    main()
