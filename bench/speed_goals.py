"""Issue 36's speed goals, each measured side by side in one command: one table, goal by goal.

    python bench/speed_goals.py                                 # every goal, 2,000 and 20,000 photos, 3 repeats
    python bench/speed_goals.py --goals pass,keys --sizes 2000,20000,100000 --repeats 5
    python bench/speed_goals.py --goals tfds --tfds-sizes 2000,8000,32000
    python bench/speed_goals.py --goals loaders --loader-repeats 5 [--loader-control]

Goals (a ratio >= its goal is met; "every" goals must hold in every run, the others by the median):

* pass: `prep convert --duplicates off` against the bare all-cores loop doing the same image work
  (bench/baselines/bare_loop.py): the loop's time / prep's, >= 0.85, at each of --sizes.
* keys: the default `prep convert` (duplicates found) against the bare loop that also computes the
  same content keys (`bare_loop --keys`, prep.core.content_keys), >= 0.80.
* resize: `prep convert --resize 256 --duplicates off` against `bare_loop --resize 256`, >= 0.90.
* workers: the default `prep convert` at --workers 1 against --workers 2: time 1 / time 2, >= 1.8.
* tfds: a plain tensorflow-datasets GeneratorBasedBuilder over the same class folders
  (bench/baselines/tfds_builder.py) against the default `prep convert`, which checks every image:
  tfds's time / prep's, >= 1 (ahead), at each of --tfds-sizes.
* detection: detection's images/s / classification's, same images (bench/detection_bench.py), >= 0.9,
  pass-through and --resize 128.
* loaders: `loaders.load` images/s / the hand-tuned tf.data pipeline's, classification
  (bench/load_bench.py) and detection (bench/loader_detection_bench.py), >= 0.95 in every run.

Conversions run as fresh processes timed from start to exit (this checkout's code); in each repeat
the two sides of a goal run back to back, in alternating order, so that the load of a shared machine
hits both alike; a run's ratio is from the same repeat. Loader runs (--loader-epochs epochs each, 2)
alternate within one process after a warm-up epoch each. The load average is printed before and after.
Results also go to bench/results/speed-goals.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import shutil
import statistics
import sys
import time
from collections.abc import Callable

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from convert_compare import timed, warm_imports  # noqa: E402  (bench/ scripts run as files)
from make_data import ensure_data, prep_command  # noqa: E402

OUT = pathlib.Path("/tmp/prep-speed-goals")


@dataclasses.dataclass
class Pair:
    """One goal at one size: `ours` and `reference` each give seconds (or a rate, `rates`) per run."""

    goal: str
    what: str
    threshold: float
    ours: Callable[[], float]
    reference: Callable[[], float]
    every_run: bool = False
    rates: bool = False  # the callables give rates (higher is faster), not seconds
    runs: list[float] = dataclasses.field(default_factory=list)
    cpu: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # loaders: CPU ms per image, each side

    def run_once(self, flip: bool) -> None:
        first, second = (self.reference, self.ours) if flip else (self.ours, self.reference)
        a = first()
        b = second()
        ours, ref = (b, a) if flip else (a, b)
        self.runs.append(ours / ref if self.rates else ref / ours)

    def row(self) -> dict:
        median = statistics.median(self.runs)
        met = (min(self.runs) if self.every_run else median) >= self.threshold
        cpu = {side: statistics.median(ms) for side, ms in self.cpu.items()}
        return {
            "cpu_ms_per_image": cpu,
            "goal": self.goal,
            "what": self.what,
            "runs": self.runs,
            "median": median,
            "threshold": self.threshold,
            "every_run": self.every_run,
            "met": met,
        }


def _seconds(cmd: list[str]) -> float:
    """Seconds of one fresh process running `cmd`, its output ("OUT") emptied first."""
    shutil.rmtree(OUT, ignore_errors=True)
    os.sync()  # the previous run's writes are on disk, not written back during this one
    warm_imports(cmd)
    return timed([str(OUT) if c == "OUT" else c for c in cmd])[0]


def _prep(source: pathlib.Path, *options: str) -> Callable[[], float]:
    cmd = [prep_command(), "convert", str(source), "OUT", "--num-shards", "8", "--no-progress", *options]
    return lambda: _seconds(cmd)


def _python(module: str, source: pathlib.Path, *options: str) -> Callable[[], float]:
    cmd = [sys.executable, "-m", module, str(source), "OUT", *options]
    return lambda: _seconds(cmd)


def conversion_pairs(goals: set[str], sizes: list[int], tfds_sizes: list[int]) -> list[Pair]:
    pairs = []
    for n in sizes:
        src = ensure_data(n)
        bare = "bench.baselines.bare_loop"
        if "pass" in goals:
            pairs.append(
                Pair(
                    "pass",
                    f"{n} photos, --duplicates off / bare loop",
                    0.85,
                    _prep(src, "--duplicates", "off"),
                    _python(bare, src),
                )
            )
        if "keys" in goals:
            pairs.append(
                Pair("keys", f"{n} photos, default / bare loop + keys", 0.80, _prep(src), _python(bare, src, "--keys"))
            )
        if "resize" in goals:
            pairs.append(
                Pair(
                    "resize",
                    f"{n} photos, --resize 256 --duplicates off / bare loop",
                    0.90,
                    _prep(src, "--resize", "256", "--duplicates", "off"),
                    _python(bare, src, "--resize", "256"),
                )
            )
        if "workers" in goals:
            pairs.append(
                Pair(
                    "workers",
                    f"{n} photos, default, 1 -> 2 workers",
                    1.8,
                    _prep(src, "--workers", "2"),
                    _prep(src, "--workers", "1"),
                )
            )
    if "tfds" in goals:
        for n in tfds_sizes:
            src = ensure_data(n)
            pairs.append(
                Pair(
                    "tfds",
                    f"{n} photos, default / tfds GeneratorBasedBuilder",
                    1.0,
                    _prep(src),
                    _python("bench.baselines.tfds_builder", src),
                )
            )
    if "detection" in goals:
        import detection_bench

        root = HERE / "data" / "detection-2000"
        boxes = detection_bench.make_set(root, 2000)
        for mode, extra in (("pass-through", []), ("--resize 128", ["--resize", "128"])):
            pairs.append(
                Pair(
                    "detection",
                    f"2000 images ({boxes} boxes), {mode}: detection / classification",
                    0.9,
                    lambda e=extra: detection_bench.run(root, OUT, "detection", e),
                    lambda e=extra: detection_bench.run(root, OUT, "classification", e),
                )
            )
    return pairs


def loader_pairs(repeats: int, epochs: int = 2, control: bool = False) -> list[Pair]:
    """Both loader goals, runs of `epochs` epochs alternating in this process, after one warm-up epoch of each
    pipeline (graph building, autotuning, page cache). TensorFlow is imported here only. With `control`, each
    goal also gets an A/A pair: a second hand-tuned pipeline against the first, the same code on both sides,
    which shows how far one run's ratio strays with no difference to find."""
    import load_bench
    import loader_detection_bench as det
    import tensorflow as tf

    import loaders
    from loaders.dataset import data_options
    from loaders.source import open_split

    pairs = []
    out = load_bench.ensure_dataset(HERE / "data" / "jpeg2000", OUT.with_name("prep-load-bench"), 2000, 8)
    size = (224, 224)
    options = data_options(loaders.LoadOptions(image_size=size).resolved(), False)
    files = list(open_split(str(out), "train").files)
    ours = loaders.load(out, "train", 64, size)
    hand = load_bench.hand_tuned(files, 64, size, tf, options)
    what = "2000 photos, classification 224x224, batch 64"
    pairs.append(_loader_pair(what, ours, hand, load_bench.epoch_rate, epochs))
    if control:
        again = load_bench.hand_tuned(files, 64, size, tf, options)
        pairs.append(_loader_pair(f"{what}, A/A", again, hand, load_bench.epoch_rate, epochs, "hand-tuned 2"))

    out = det.ensure_dataset(OUT.with_name("prep-detection-bench"), 2000, 8)
    source, size = open_split(str(out), "train"), (256, 256)
    options = data_options(loaders.LoadOptions(image_size=size).resolved("detection"), False)
    ours = loaders.load(
        out,
        "train",
        32,
        size,
        min_object_covered=det.MIN_COVERED,
        min_box_visibility=det.MIN_VISIBLE,
        area_range=det.AREA,
        aspect_ratio_range=det.ASPECT,
    )
    hand = det.hand_tuned(list(source.files), 32, size, source.max_boxes, tf, options)
    what = "2000 images, detection 256x256, batch 32"
    pairs.append(_loader_pair(what, ours, hand, lambda ds, _, n: det.epoch_rate(ds, n)[:2], epochs))
    if control:
        again = det.hand_tuned(list(source.files), 32, size, source.max_boxes, tf, options)
        rate = lambda ds, _, n: det.epoch_rate(ds, n)[:2]  # noqa: E731
        pairs.append(_loader_pair(f"{what}, A/A", again, hand, rate, epochs, "hand-tuned 2"))
    for pair in pairs:  # warm-up: one epoch of each side, not counted
        pair.ours(1)
        pair.reference(1)
        for ms in pair.cpu.values():
            ms.clear()
    for i in range(repeats):
        for pair in pairs:
            pair.run_once(flip=i % 2 == 1)
    return pairs


def _loader_pair(what: str, ours, hand, epoch_rate, epochs: int, ours_name: str = "loaders.load") -> Pair:
    """Images/s of each side's epochs; each side's process CPU ms per image is kept too (other load on a shared
    machine changes it less than it changes rates)."""
    cpu: dict[str, list[float]] = {ours_name: [], "hand-tuned": []}

    def rate(ds, side: str) -> Callable[[], float]:
        def run(n: int = epochs) -> float:
            images_per_s, ms = epoch_rate(ds, lambda e: int(e[1].shape[0]), n)
            cpu[side].append(ms)
            return images_per_s

        return run

    pair = Pair("loaders", what, 0.95, rate(ours, ours_name), rate(hand, "hand-tuned"), every_run=True, rates=True)
    pair.cpu = cpu
    return pair


def print_table(rows: list[dict], load: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    print(f"{os.cpu_count()} cores; load average (1, 5, 15 min) before {load[0]}, after {load[1]}")
    what = max(len(r["what"]) for r in rows) + 2
    runs = max(len(" ".join(f"{x:.2f}" for x in r["runs"])) for r in rows) + 2
    print(f"{'goal':<10}{'what':<{what}}{'runs':<{runs}}{'median':>7}{'goal':>7}  met")
    for r in rows:
        mark = ("every run: " if r["every_run"] else "") + ("yes" if r["met"] else "NO")
        each = " ".join(f"{x:.2f}" for x in r["runs"])
        print(f"{r['goal']:<10}{r['what']:<{what}}{each:<{runs}}{r['median']:>7.2f}{r['threshold']:>7.2f}  {mark}")
    for r in rows:
        if r["cpu_ms_per_image"]:
            sides = ", ".join(f"{side} {ms:.3f}" for side, ms in r["cpu_ms_per_image"].items())
            print(f"CPU ms per image (median), {r['what']}: {sides}")


def main(argv=None) -> None:
    goals_all = ("pass", "keys", "resize", "workers", "tfds", "detection", "loaders")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", default=",".join(goals_all), help=f"comma-separated, of {','.join(goals_all)}")
    parser.add_argument("--sizes", default="2000,20000", help="photos for pass, keys, resize and workers")
    parser.add_argument("--tfds-sizes", default="2000,8000", help="photos for the tfds goal (issue: 2000,8000,32000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each conversion goal")
    parser.add_argument("--loader-repeats", type=int, default=5, help="runs of each loader pipeline")
    parser.add_argument("--loader-epochs", type=int, default=2, help="epochs timed as one loader run")
    parser.add_argument(
        "--loader-control", action="store_true", help="add an A/A pair a loader goal: hand-tuned against itself"
    )
    args = parser.parse_args(argv)
    goals = set(args.goals.split(","))
    if goals - set(goals_all):
        parser.error(f"unknown goals: {sorted(goals - set(goals_all))}")
    # every process it starts runs this checkout's code, not the installed one's
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))
    load_before = tuple(round(x, 1) for x in os.getloadavg())
    started = time.perf_counter()
    pairs = conversion_pairs(
        goals, [int(s) for s in args.sizes.split(",")], [int(s) for s in args.tfds_sizes.split(",")]
    )
    for i in range(args.repeats):
        for pair in pairs:
            pair.run_once(flip=i % 2 == 1)
    if "loaders" in goals:
        pairs += loader_pairs(args.loader_repeats, args.loader_epochs, args.loader_control)
    rows = [p.row() for p in pairs]
    load = (load_before, tuple(round(x, 1) for x in os.getloadavg()))
    print_table(rows, load)
    print(f"({time.perf_counter() - started:.0f} s; ratios > 1 are prep's lead, see the module docstring)")
    (HERE / "results").mkdir(exist_ok=True)
    record = {
        "rows": rows,
        "load": load,
        "repeats": args.repeats,
        "loader_repeats": args.loader_repeats,
        "cores": os.cpu_count(),
    }
    (HERE / "results" / "speed-goals.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
