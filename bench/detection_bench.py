"""Detection against classification on the same images, side by side in one run.

    python bench/detection_bench.py                     # 2,000 images, 1-20 boxes each, 3 repeats
    python bench/detection_bench.py --count 500 --repeats 1
    python bench/detection_bench.py --other /work/main  # this checkout and another, interleaved

Makes (once) 2,000 drawn-shape JPEGs of 320x240 with 1 to 20 objects each, a COCO
instances JSON for them and a label file naming one class per image (its first
object's). Then, interleaved per repeat, converts the same SOURCE as classification
(`--labels`) and as detection (`--annotations`), each as it is (pass-through) and with
`--resize 128`, each a fresh `prep convert` process (the console script's entry,
`prep.cli.run`) timed from start to exit, running this checkout's code (and, with
`--other`, the other checkout's, in alternating order). Prints, per checkout and mode,
the median images/s by wall time and by CPU time (user + system of the process and its
children, which a machine shared with other work disturbs less), boxes/s, and the ratio
detection/classification of each, from the same runs; writes
bench/results/detection-<count>.json.

Compiled bytecode is kept in bench/results/pycache (PYTHONPYCACHEPREFIX) whatever
PYTHONDONTWRITEBYTECODE says, as an installed package has its bytecode: otherwise every
run would also compile the modules it imports, more of them for detection.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import time

from PIL import Image, ImageDraw

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
CLASSES = ("circle", "square", "triangle", "star", "cross")
COLS, ROWS = 5, 4  # 20 cells: at most 20 objects, none overlapping


def make_set(root: pathlib.Path, count: int, seed: int = 0) -> int:
    """Writes root/images/*.jpg, root/instances.json and root/labels.csv; returns the number of boxes."""
    marker = root / "instances.json"
    if marker.exists():
        return len(json.loads(marker.read_text())["annotations"])
    rng = random.Random(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    doc = {"images": [], "annotations": [], "categories": [{"id": i + 1, "name": n} for i, n in enumerate(CLASSES)]}
    rows = ["path,label"]
    width, height = 320, 240
    cw, ch = width // COLS, height // ROWS
    for i in range(count):
        img = Image.new("RGB", (width, height), tuple(rng.randint(180, 255) for _ in range(3)))
        pen = ImageDraw.Draw(img)
        cells = rng.sample(range(COLS * ROWS), rng.randint(1, 20))
        name = f"{i:05d}.jpg"
        for cell in cells:
            label = rng.randrange(len(CLASSES))
            bw, bh = rng.randint(cw // 3, cw - 6), rng.randint(ch // 3, ch - 6)
            x0, y0 = (cell % COLS) * cw + rng.randint(3, cw - bw - 3), (cell // COLS) * ch + rng.randint(3, ch - bh - 3)
            pen.rectangle((x0, y0, x0 + bw - 1, y0 + bh - 1), fill=tuple(rng.randint(0, 150) for _ in range(3)))
            doc["annotations"].append(
                {
                    "id": len(doc["annotations"]) + 1,
                    "image_id": i + 1,
                    "category_id": label + 1,
                    "bbox": [x0, y0, bw, bh],
                    "area": bw * bh,
                    "iscrowd": 0,
                }
            )
        rows.append(f"{name},{CLASSES[doc['annotations'][-1]['category_id'] - 1]}")
        img.save(root / "images" / name, "JPEG", quality=90)
        doc["images"].append({"id": i + 1, "file_name": name, "width": width, "height": height})
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    marker.write_text(json.dumps(doc))
    return len(doc["annotations"])


def measure(
    root: pathlib.Path, out: pathlib.Path, task: str, extra: list[str], code: pathlib.Path = ROOT
) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh `prep convert` process running checkout `code`'s code."""
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    what = (
        ["--annotations", str(root / "instances.json")]
        if task == "detection"
        else ["--labels", str(root / "labels.csv")]
    )
    cmd = [
        sys.executable,
        "-c",
        "from prep.cli import run; run()",
        "convert",
        str(root / "images"),
        str(out),
        "--num-shards",
        "4",
        "--no-progress",
        *what,
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=str(code), PYTHONPYCACHEPREFIX=str(HERE / "results" / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    # Not from a checkout's root: `-c` puts the working directory first on sys.path, before PYTHONPATH.
    proc = subprocess.Popen(cmd, env=env, cwd=out.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)  # this child's usage, its own children included
    seconds = time.perf_counter() - start
    assert proc.stderr is not None
    error = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{error[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime


def run(root: pathlib.Path, out: pathlib.Path, task: str, extra: list[str]) -> float:
    """Wall seconds of one fresh `prep convert` process (this checkout's code)."""
    return measure(root, out, task, extra)[0]


MODES = {"pass-through": [], "--resize 128": ["--resize", "128"]}
TASKS = ("classification", "detection")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default=str(HERE / "data"))
    parser.add_argument("--other", type=pathlib.Path, help="another checkout's root, run interleaved with this one")
    parser.add_argument(
        "--convert-args",
        default="",
        help="more prep convert options for every run, e.g. "
        "'--duplicates off' to time the task paths without the dedupe stage",
    )
    args = parser.parse_args(argv)
    root = pathlib.Path(args.data) / f"detection-{args.count}"
    boxes = make_set(root, args.count)
    out = pathlib.Path("/tmp/prep-detection-bench")
    codes = {"this": ROOT} | ({"other": args.other.resolve()} if args.other else {})
    # (checkout, mode, task) -> [(wall s, CPU s)], one a repeat
    times: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for code in codes:  # unmeasured: the first runs compile the bytecode (see the module docstring)
        for task in TASKS:
            measure(root, out / code, task, args.convert_args.split(), codes[code])
    for repeat in range(args.repeats):
        # Each mode's runs back to back, the order reversed every other repeat, so that the load of a shared
        # machine falls alike on both tasks (and both checkouts).
        for mode, extra in MODES.items():
            runs = [(code, task) for code in codes for task in TASKS]
            for code, task in runs if repeat % 2 == 0 else runs[::-1]:
                got = measure(root, out / code, task, [*extra, *args.convert_args.split()], codes[code])
                times.setdefault((code, mode, task), []).append(got)
    shutil.rmtree(out, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{args.count} images, {boxes} boxes ({boxes / args.count:.1f} per image), median of {args.repeats}, "
        f"{os.cpu_count()} cores, load {load}" + (f", {args.convert_args}" if args.convert_args else "")
    )
    print(
        f"{'code':<6} {'mode':<14} {'clf img/s':>10} {'det img/s':>10} {'ratio':>6}   "
        f"{'clf CPU s':>9} {'det CPU s':>9} {'CPU ratio':>9}  CPU ratio per run, then wall ratio per run"
    )
    results: dict[str, dict] = {}
    for code in codes:
        for mode in MODES:
            clf, det = times[(code, mode, "classification")], times[(code, mode, "detection")]
            c, d = (args.count / statistics.median(t[0] for t in runs) for runs in (clf, det))
            cc, dc = (statistics.median(t[1] for t in runs) for runs in (clf, det))
            per_run = [a[1] / b[1] for a, b in zip(clf, det)]  # classification's CPU / detection's, same repeat
            wall_runs = [a[0] / b[0] for a, b in zip(clf, det)]  # the same by wall: the goal's ratio, run by run
            results.setdefault(code, {})[mode] = {
                "classification_images_per_s": round(c, 1),
                "detection_images_per_s": round(d, 1),
                "detection_boxes_per_s": round(d * boxes / args.count, 1),
                "ratio": round(d / c, 3),
                "classification_cpu_s": round(cc, 3),
                "detection_cpu_s": round(dc, 3),
                "cpu_ratio": round(cc / dc, 3),
                "cpu_ratio_runs": [round(r, 3) for r in per_run],
                "ratio_runs": [round(r, 3) for r in wall_runs],
            }
            print(
                f"{code:<6} {mode:<14} {c:>10.1f} {d:>10.1f} {d / c:>6.2f}   {cc:>9.2f} {dc:>9.2f} {cc / dc:>9.3f}  "
                + " ".join(f"{r:.3f}" for r in per_run)
                + "   wall: "
                + " ".join(f"{r:.2f}" for r in wall_runs)
            )
    print("ratio: detection's images/s / classification's (by CPU: classification's CPU s / detection's)")
    (HERE / "results").mkdir(exist_ok=True)
    suffix = "-" + "_".join(args.convert_args.replace("-", "").split()) if args.convert_args else ""
    (HERE / "results" / f"detection-{args.count}{suffix}.json").write_text(
        json.dumps(
            {
                "count": args.count,
                "convert_args": args.convert_args,
                "boxes": boxes,
                "repeats": args.repeats,
                "cores": os.cpu_count(),
                "load": os.getloadavg(),
                "codes": {k: str(v) for k, v in codes.items()},
                "results": results,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
