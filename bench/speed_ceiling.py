"""The ceilings of issue 36's ratio goals that a fixed cost sets: what `prep convert` could reach at best.

    python bench/speed_ceiling.py --sizes 2000,20000 --repeats 3

A ratio goal compares whole processes, start to exit: `bare loop / prep convert`. Both do the
same image work, which grows with the photos; each also pays a fixed cost (the interpreter,
imports, setting up). Were prep's image work no slower than the loop's, its best ratio at n
photos would be

    ceiling(n) = bare(n) / (bare(n) + fixed_prep - fixed_bare)

with the fixed costs measured as the same commands on a one-photo source. Two fixed costs are
given for prep: today's whole `prep convert` of one photo, and a floor no Beam conversion goes
under: a process that imports Beam as `prep convert` does (beam_jobs/lean_import.py). The same arithmetic bounds
`--workers 1 -> 2` (Amdahl): with the loop's one-core image work v(n) = bare(n, 1 process) -
fixed_bare, at best (fixed_prep + v) / (fixed_prep + v / 2).

That arithmetic leaves out what grows with the photos yet no balanced conversion can skip. A
shard's size depends on every input, so none is finished before all are read: the records wait
on disk, and after that barrier every byte is read again, hashed for the manifest and written
into its shard. `bare_loop --balanced --import-beam` does just that on top of the loop's work,
in Beam's process (see bench/baselines/bare_loop.py), and its time is the floor of a
conversion's: the last table gives each goal's ceiling as bare loop / that floor, measured.

Every measurement is a fresh process timed by wall clock (a conversion's ratio in
bench/speed_goals.py is too), each repeat running all of them back to back; medians are printed.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from convert_compare import timed, warm_imports  # noqa: E402  (bench/ scripts run as files)
from make_data import ensure_data, prep_command  # noqa: E402

OUT = pathlib.Path("/tmp/prep-speed-ceiling")

# A Beam conversion's floor: Beam imported as the console script imports it, nothing run. (With a
# two-step pipeline run on FnApiRunner added, it measured dearer than a whole one-photo
# `prep convert`, so that was no floor; why was not looked into.)
BEAM_FLOOR = "from beam_jobs.lean_import import import_beam; import_beam()"


FLOOR = ["--balanced", "--import-beam"]  # bare_loop's options for the balanced floor


def _floor_name(n: int, extra: list[str]) -> str:
    return " ".join(["floor: balanced in Beam", *extra]) + f", {n} photos"


def _seconds(cmd: list[str]) -> float:
    shutil.rmtree(OUT, ignore_errors=True)
    os.sync()
    warm_imports(cmd)
    return timed([str(OUT) if c == "OUT" else c for c in cmd])[0]


def one_photo(tmp: pathlib.Path) -> pathlib.Path:
    """A class-folder source of one photo, the first of the 2,000-photo set."""
    data = ensure_data(2000)
    first = sorted(data.glob("*/*"))[0]
    (tmp / "one" / first.parent.name).mkdir(parents=True)
    shutil.copy(first, tmp / "one" / first.parent.name / first.name)
    return tmp / "one"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))
    sizes = [int(s) for s in args.sizes.split(",")]
    bare = [sys.executable, "-m", "bench.baselines.bare_loop"]
    with tempfile.TemporaryDirectory() as tmp:
        one = str(one_photo(pathlib.Path(tmp)))
        convert = [prep_command(), "convert", one, "OUT", "--num-shards", "1", "--no-progress"]
        commands = {
            "fixed: bare loop, 1 photo": [*bare, one, "OUT"],
            "fixed: prep convert --duplicates off, 1 photo": [*convert, "--duplicates", "off"],
            "fixed: prep convert (default), 1 photo": convert,
            "floor: Beam imported as prep imports it": [sys.executable, "-c", BEAM_FLOOR],
        }
        for n in sizes:
            src = str(ensure_data(n))
            commands[f"bare loop, {n} photos"] = [*bare, src, "OUT"]
            commands[f"bare loop --keys, {n} photos"] = [*bare, src, "OUT", "--keys"]
            commands[f"bare loop, {n} photos, 1 process"] = [*bare, src, "OUT", "--processes", "1"]
            commands[f"bare loop --resize 256, {n} photos"] = [*bare, src, "OUT", "--resize", "256"]
            for extra in ([], ["--keys"], ["--resize", "256"], ["--keys", "--processes", "1"]):
                commands[_floor_name(n, extra)] = [*bare, src, "OUT", *FLOOR, *extra]
        load_before = tuple(round(x, 1) for x in os.getloadavg())
        started = time.perf_counter()
        runs: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, cmd in commands.items():
                runs[name].append(_seconds(cmd))
    med = {name: statistics.median(r) for name, r in runs.items()}
    load_after = tuple(round(x, 1) for x in os.getloadavg())
    print(f"{os.cpu_count()} cores; load average before {load_before}, after {load_after}; median of {args.repeats}")
    width = max(len(n) for n in med) + 2
    for name, seconds in med.items():
        print(f"{name:<{width}}{seconds:8.2f} s   runs {' '.join(f'{x:.2f}' for x in runs[name])}")
    fixed_bare = med["fixed: bare loop, 1 photo"]
    floor = med["floor: Beam imported as prep imports it"]
    sides = {  # goal: (reference's photos-to-seconds name, prep's fixed cost today)
        "pass (0.85)": ("bare loop, {} photos", med["fixed: prep convert --duplicates off, 1 photo"]),
        "keys (0.80)": ("bare loop --keys, {} photos", med["fixed: prep convert (default), 1 photo"]),
    }
    print("\nceiling of bare loop / prep convert: with prep's fixed cost today | with the Beam floor")
    print(f"{'photos':>8}  " + "  ".join(f"{k:>24}" for k in sides))
    for n in sizes:
        cells = []
        for name, today in sides.values():
            b = med[name.format(n)]
            cells.append(f"{b / (b + today - fixed_bare):.3f} | {b / (b + floor - fixed_bare):.3f}")
        print(f"{n:>8}  " + "  ".join(f"{c:>24}" for c in cells))
    print("\nceiling of --workers 1 -> 2 with the default options (goal 1.8)")
    default = med["fixed: prep convert (default), 1 photo"]
    print(f"{'photos':>8}  {'prep convert (default) today':>36}  {'Beam floor':>36}")
    for n in sizes:
        v = med[f"bare loop, {n} photos, 1 process"] - fixed_bare
        cells = [(f + v) / (f + v / 2) for f in (default, floor)]
        print(f"{n:>8}  " + "  ".join(f"{c:>36.3f}" for c in cells))
    print("\nceilings from the balanced floor (bare loop / floor; workers: floor, 1 process / 2)")
    resize, one = ["--resize", "256"], ["--keys", "--processes", "1"]
    goals = {
        "pass (0.85)": lambda n: med[f"bare loop, {n} photos"] / med[_floor_name(n, [])],
        "keys (0.80)": lambda n: med[f"bare loop --keys, {n} photos"] / med[_floor_name(n, ["--keys"])],
        "resize (0.90)": lambda n: med[f"bare loop --resize 256, {n} photos"] / med[_floor_name(n, resize)],
        "workers (1.8)": lambda n: med[_floor_name(n, one)] / med[_floor_name(n, ["--keys"])],
    }
    print(f"{'photos':>8}  " + "  ".join(f"{k:>14}" for k in goals))
    for n in sizes:
        print(f"{n:>8}  " + "  ".join(f"{ceiling(n):>14.3f}" for ceiling in goals.values()))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
