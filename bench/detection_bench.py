"""Detection against classification on the same images, side by side in one run.

    python bench/detection_bench.py                     # 2,000 images, 1-20 boxes each, 2 repeats
    python bench/detection_bench.py --count 500 --repeats 1

Makes (once) 2,000 drawn-shape JPEGs of 320x240 with 1 to 20 objects each, a COCO
instances JSON for them and a label file naming one class per image (its first
object's). Then, interleaved per repeat, converts the same SOURCE as classification
(`--labels`) and as detection (`--annotations`), each as it is (pass-through) and with
`--resize 128`, each a fresh `prep convert` process timed from start to exit, running
this checkout's code. Prints the median images/s (and boxes/s for detection) and the
ratio detection/classification; writes bench/results/detection-<count>.json.
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


def run(root: pathlib.Path, out: pathlib.Path, task: str, extra: list[str]) -> float:
    """Seconds of one fresh `prep convert` process (this checkout's code)."""
    shutil.rmtree(out, ignore_errors=True)
    what = (
        ["--annotations", str(root / "instances.json")]
        if task == "detection"
        else ["--labels", str(root / "labels.csv")]
    )
    cmd = [
        sys.executable,
        "-c",
        "from prep.cli import main; main()",
        "convert",
        str(root / "images"),
        str(out),
        "--num-shards",
        "4",
        "--no-progress",
        *what,
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--data", default=str(HERE / "data"))
    parser.add_argument(
        "--convert-args",
        default="",
        help="more prep convert options for every run, e.g. "
        "'--duplicates off' to time the task paths without the dedupe stage",
    )
    args = parser.parse_args(argv)
    root = pathlib.Path(args.data) / f"detection-{args.count}"
    boxes = make_set(root, args.count)
    out = pathlib.Path(args.data) / "detection-out"
    modes = {"pass-through": [], "--resize 128": ["--resize", "128"]}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for mode, extra in modes.items():
            for task in ("classification", "detection"):
                times.setdefault((mode, task), []).append(run(root, out, task, [*extra, *args.convert_args.split()]))
    shutil.rmtree(out, ignore_errors=True)
    print(
        f"{args.count} images, {boxes} boxes ({boxes / args.count:.1f} per image), median of {args.repeats}, "
        f"{os.cpu_count()} cores" + (f", {args.convert_args}" if args.convert_args else "")
    )
    print(f"{'mode':<14} {'classification img/s':>21} {'detection img/s':>16} {'boxes/s':>9} {'ratio':>6}")
    results = {}
    for mode in modes:
        c = args.count / statistics.median(times[(mode, "classification")])
        d = args.count / statistics.median(times[(mode, "detection")])
        results[mode] = {
            "classification_images_per_s": round(c, 1),
            "detection_images_per_s": round(d, 1),
            "detection_boxes_per_s": round(d * boxes / args.count, 1),
            "ratio": round(d / c, 3),
        }
        print(f"{mode:<14} {c:>21.1f} {d:>16.1f} {d * boxes / args.count:>9.0f} {d / c:>6.2f}")
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
                "results": results,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
