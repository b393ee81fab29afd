"""Listing a COCO-2017-train-shaped detection SOURCE: the driver's peak RSS and time, old reader against new.

    python bench/coco_stream.py                       # 118,287 images, 860,001 polygon annotations (~415 MB)
    python bench/coco_stream.py --scale 0.1           # a tenth of it
    python bench/coco_stream.py --order annotations   # annotations before images in the file
    python bench/coco_stream.py --old 4e0e696         # the commit whose reader is "old" (json.loads whole)
    python bench/coco_stream.py --skip-old --workers  # and the driver's part of the listing on workers
    python bench/coco_stream.py --scale 0.1 --skip-old --staged  # whole listings, staged files compared

Makes (once, under bench/data/coco-<scale>-<order>/) an instances JSON of COCO 2017 train's shape: the same
counts of images and annotations, 80 categories with COCO's sparse ids, ~1% crowd annotations as uncompressed
RLE, ~0.9% of the images without annotations, polygons drawn from a pool so that the file has COCO's size.
Every image is the same 1-pixel JPEG (the listing reads no pixels). Then, each in a fresh
process, lists that SOURCE as `prep convert --annotations` does (`prep.core.inputs.list_inputs`) with this
checkout's code and with the old commit's (extracted with `git archive`), and prints wall and CPU time, peak RSS
(ru_maxrss of the process) and a digest of the listing (refs, rejects, box notes and tally): equal digests
say both gave the same listing.

`--workers` adds the driver's part of a listing on workers (beam_jobs/list_annotations.py, DirectRunner): the
process's wall and CPU time and peak RSS from the call of `convert` to the start of the first worker task (the
file's streaming), where the measuring process stops (its workers would be this process too).

`--staged` instead stages the listing both ways, each in a fresh process: on the driver (`ready_output`, the
embedded runner's way) and on workers (the whole first pipeline on the DirectRunner, in memory: the driver
and its workers are one process, so its peak is theirs together); the digest is of the staged files.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import random
import subprocess
import sys
import tarfile
import tempfile

from PIL import Image

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
IMAGES, ANNOTATIONS = 118_287, 860_001  # COCO 2017 train
COCO_IDS = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]  # 80 sparse ids
OLD = "4e0e696"  # the last commit that read COCO with json.loads of the whole text

MEASURE = r"""
import hashlib, json, resource, sys, time
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
source, annotations, output = sys.argv[1:4]
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
started, cpu_started = time.perf_counter(), cpu()
listing = list_inputs(build_config(source, output, {"annotations": annotations}))
seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
digest = hashlib.sha256()
for ref in listing.refs:
    digest.update(json.dumps(list(ref)).encode())
for reject in listing.rejects:
    digest.update(json.dumps(list(reject)).encode())
for note in listing.box_notes:
    digest.update(json.dumps(list(note)).encode())
digest.update(repr(listing.boxes).encode())
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "cpu": cpu_seconds, "peak_mb": peak_mb,
                  "refs": len(listing.refs), "rejects": len(listing.rejects), "notes": len(listing.box_notes),
                  "digest": digest.hexdigest()[:16]}))
"""


# The driver's part of a conversion listed on workers: from convert() to the first worker task, stopped there.
MEASURE_WORKERS = r"""
import json, os, resource, sys, time
from beam_jobs import convert, list_annotations
from prep.core.convert_options import build_config
source, annotations, output = sys.argv[1:4]
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def first_task(coco_file):
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": time.perf_counter() - started, "cpu": cpu() - cpu_started, "peak_mb": peak_mb,
                      "refs": 0, "rejects": 0, "notes": 0, "digest": "-"}))
    sys.stdout.flush()
    os._exit(0)
list_annotations.stream_file = first_task
config = build_config(source, output, {"annotations": annotations})
started, cpu_started = time.perf_counter(), cpu()
convert.convert(config, runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"])
sys.exit("the listing did not run on workers")
"""


# A listing staged on the driver or on workers (DirectRunner); the digest of the staged files.
MEASURE_STAGED = r"""
import hashlib, json, pathlib, resource, sys, time
from beam_jobs import list_source
from beam_jobs._execute import list_on_workers
from prep.core.convert_options import build_config
from prep.core.inputs import detection_source, list_inputs
from prep.core.run.start import clear_output, ready_listed, ready_output
source, annotations, output, where = sys.argv[1:5]
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
config = build_config(source, output, {"annotations": annotations})
started, cpu_started = time.perf_counter(), cpu()
if where == "workers":
    clear_output(config)
    summary = list_on_workers(config, detection_source(config), "DirectRunner", ["--direct_running_mode=in_memory"])
    list_source.delete_listed(output)
    ready = ready_listed(config, summary)
else:
    ready = ready_output(config, list_inputs(config))
seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
digest = hashlib.sha256()
for path in sorted((pathlib.Path(output) / ".prep-tmp" / "listing").iterdir()):
    digest.update(path.name.encode() + path.read_bytes())
digest.update(json.dumps(json.loads((pathlib.Path(output) / ".prep-tmp" / "run.json").read_text())["listing"]).encode())
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "cpu": cpu_seconds, "peak_mb": peak_mb, "refs": sum(ready.chunk_sizes),
                  "rejects": ready.staged.found - sum(ready.chunk_sizes), "notes": 0,
                  "digest": digest.hexdigest()[:16]}))
"""


def _polygons(rng: random.Random, count: int) -> list[str]:
    """A pool of polygon lists as COCO writes them (2 decimals), 1-2 polygons of 6-32 points."""
    pool = []
    for _ in range(count):
        polys = []
        for _ in range(rng.choice((1, 1, 1, 1, 1, 2))):
            n = rng.randint(6, 32)
            polys.append("[" + ",".join(f"{rng.uniform(0, 640):.2f}" for _ in range(2 * n)) + "]")
        pool.append("[" + ",".join(polys) + "]")
    return pool


def _rle(rng: random.Random) -> str:
    counts = [rng.randint(0, 400) for _ in range(rng.randint(50, 400))]
    return json.dumps({"counts": counts, "size": [480, 640]}, separators=(",", ":"))


def make_set(root: pathlib.Path, scale: float, order: str, seed: int = 0) -> pathlib.Path:
    """Writes root/instances.json and root/train2017/*.jpg once; returns the JSON's path."""
    path = root / "instances.json"
    if path.exists():
        return path
    rng = random.Random(seed)
    images, annotations = round(IMAGES * scale), round(ANNOTATIONS * scale)
    ids = rng.sample(range(1, 600_000), images)
    folder = root / "train2017"
    folder.mkdir(parents=True, exist_ok=True)
    pixel = io.BytesIO()
    Image.new("RGB", (1, 1), (128, 128, 128)).save(pixel, "JPEG")
    image_lines = []
    for iid in ids:
        name = f"{iid:012d}.jpg"
        (folder / name).write_bytes(pixel.getvalue())
        image_lines.append(
            json.dumps(
                {
                    "license": 3,
                    "file_name": name,
                    "coco_url": f"http://images.cocodataset.org/train2017/{name}",
                    "height": 480,
                    "width": 640,
                    "date_captured": "2013-11-14 11:18:45",
                    "flickr_url": f"http://farm9.staticflickr.com/8186/{iid}_4e622c8349_z.jpg",
                    "id": iid,
                },
                separators=(",", ":"),
            )
        )
    pool = _polygons(rng, 20_000)
    annotated = ids[: len(ids) - len(ids) * 9 // 1000]  # ~0.9% of COCO's train images have no annotation
    tmp = path.with_suffix(".part")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write('{"info":{"description":"COCO 2017 Dataset (shape)","version":"1.0","year":2017},')
        out.write('"licenses":[{"url":"http://creativecommons.org/licenses/by-nc-sa/2.0/","id":1,"name":"x"}],')

        def write_images() -> None:
            out.write('"images":[' + ",".join(image_lines) + "],")

        def write_annotations() -> None:
            out.write('"annotations":[')
            for aid in range(1, annotations + 1):
                crowd = rng.random() < 0.01
                seg = _rle(rng) if crowd else rng.choice(pool)
                x, y, w, h = (round(rng.uniform(0, 500), 2) for _ in range(4))
                out.write(
                    f'{"," if aid > 1 else ""}{{"segmentation":{seg},"area":{w * h * 0.6:.4f},'
                    f'"iscrowd":{int(crowd)},"image_id":{rng.choice(annotated)},"bbox":[{x},{y},{w},{h}],'
                    f'"category_id":{rng.choice(COCO_IDS)},"id":{aid}}}'
                )
            out.write("],")

        for part in (write_images, write_annotations) if order == "images" else (write_annotations, write_images):
            part()
        cats = [{"supercategory": "thing", "id": cid, "name": f"class{cid}"} for cid in COCO_IDS]
        out.write('"categories":' + json.dumps(cats, separators=(",", ":")) + "}")
    tmp.rename(path)
    return path


def old_tree(rev: str, into: pathlib.Path) -> pathlib.Path:
    """This repository at `rev`, extracted (its `prep` package only) under `into`."""
    tree = into / f"tree-{rev}"
    if not (tree / "prep").exists():
        data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "prep"], check=True, capture_output=True).stdout
        tree.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tree, filter="data")
    return tree


def measure(tree: pathlib.Path, source: pathlib.Path, annotations: pathlib.Path, script: str = MEASURE, *more) -> dict:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, PYTHONPATH=str(tree))
        done = subprocess.run(
            [sys.executable, "-c", script, str(source), str(annotations), os.path.join(out, "out"), *more],
            env=env,
            capture_output=True,
            text=True,
            cwd=out,
        )
    if done.returncode:
        raise SystemExit(f"listing failed ({tree}):\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of COCO 2017 train's counts")
    parser.add_argument("--order", choices=("images", "annotations"), default="images", help="which array first")
    parser.add_argument("--old", default=OLD, help="the commit whose reader is measured as 'old'")
    parser.add_argument("--skip-old", action="store_true", help="measure this checkout only")
    parser.add_argument("--workers", action="store_true", help="also the driver's part of a listing on workers")
    parser.add_argument("--staged", action="store_true", help="only: the listing staged on the driver and on workers")
    args = parser.parse_args()
    root = HERE / "data" / f"coco-{args.scale:g}-{args.order}"
    annotations = make_set(root, args.scale, args.order)
    size = annotations.stat().st_size / 1e6
    print(
        f"{annotations}: {size:.0f} MB, {round(IMAGES * args.scale):,} images, "
        f"{round(ANNOTATIONS * args.scale):,} annotations ({args.order} first)"
    )
    rows = []
    if args.staged:
        for where in ("driver", "workers"):
            found = measure(ROOT, root / "train2017", annotations, MEASURE_STAGED, where)
            rows.append(
                (f"staged on the {where} ({'DirectRunner' if where == 'workers' else 'embedded runner'})", found)
            )
        _table(rows, "staged files")
        return
    if not args.skip_old:
        rows.append(
            (
                f"old ({args.old}, json.loads)",
                measure(old_tree(args.old, HERE / "data"), root / "train2017", annotations),
            )
        )
    rows.append(("new (this checkout, ijson stream)", measure(ROOT, root / "train2017", annotations)))
    if args.workers:
        driver = measure(ROOT, root / "train2017", annotations, MEASURE_WORKERS)
        rows.append(("on workers: the driver, to the first worker task", driver))
    _table(rows, "listing")


def _table(rows: list[tuple[str, dict]], digest: str) -> None:
    print(f"| reader | wall s | CPU s | peak RSS MB | refs | rejects | box notes | {digest} digest |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, r in rows:
        print(
            f"| {name} | {r['seconds']:.1f} | {r['cpu']:.1f} | {r['peak_mb']:.0f} | {r['refs']:,} | {r['rejects']:,} "
            f"| {r['notes']:,} | {r['digest']} |"
        )


if __name__ == "__main__":
    main()
