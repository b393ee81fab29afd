"""Segmentation (`--masks`) and VOC / YOLO folders listed on workers: the driver's part, and the embedded runner.

    python bench/listing_tasks.py                          # 10,000 and 100,000 inputs, masks, VOC and YOLO
    python bench/listing_tasks.py --counts 2000 20000 --old a78f96d   # the embedded runner, old code against new

Makes (once, under bench/data/listing-<kind>-<n>/) a SOURCE of n empty image files in 100 folders and their
masks, Pascal VOC XMLs or YOLO label files (a listing reads no pixels). Then, each in a fresh process:

* `workers`: the driver's part of a listing on workers (DirectRunner): wall and CPU time and peak RSS (ru_maxrss)
  from the call of `convert` to the start of the first worker task, where the process stops (its workers would
  be this process too): beam_jobs/list_masks.py's `list_top`, list_annotations.py's `plan_reads`.
* `driver` (with `--old COMMIT`): the driver's whole listing, as the embedded runner lists (`list_inputs`), with
  this checkout's code and with COMMIT's (extracted with `git archive`), and a digest of the listing: equal
  digests say both gave the same listing.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
KINDS = ("masks", "voc", "yolo")

MEASURE_WORKERS = r"""
import json, os, resource, sys, time
from beam_jobs import convert, list_annotations, list_masks
from prep.core.convert_options import build_config
source, output, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def first_task(*args):
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": time.perf_counter() - started, "cpu": cpu() - cpu_started, "peak_mb": peak_mb,
                      "digest": "-"}))
    sys.stdout.flush()
    os._exit(0)
list_masks.list_top = first_task
list_annotations.plan_reads = first_task
config = build_config(source, output, options)
started, cpu_started = time.perf_counter(), cpu()
convert.convert(config, runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"])
sys.exit("the listing did not run on workers")
"""

MEASURE_DRIVER = r"""
import hashlib, json, resource, sys, time
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
source, output, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
started, cpu_started = time.perf_counter(), cpu()
listing = list_inputs(build_config(source, output, options))
seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
digest = hashlib.sha256()
for item in (*listing.refs, *listing.rejects, *listing.box_notes):
    digest.update(json.dumps(list(item)).encode())
digest.update(repr(listing.boxes).encode())
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "cpu": cpu_seconds, "peak_mb": peak_mb, "digest": digest.hexdigest()[:16]}))
"""


def make_set(kind: str, n: int) -> tuple[pathlib.Path, dict]:
    """SOURCE and the conversion options of `kind` with n images (made once)."""
    root = HERE / "data" / f"listing-{kind}-{n}"
    src, ann = root / "images", root / "ann"
    (root / "classes.txt").parent.mkdir(parents=True, exist_ok=True)
    (root / "classes.txt").write_text("bg\ncat\ndog\n")
    options = {"classes": str(root / "classes.txt")}
    options.update({"masks": str(ann)} if kind == "masks" else {"annotations": str(ann)})
    done = root / "done"
    if done.exists():
        return src, options
    for i in range(n):
        folder = f"f{i % 100:03d}"
        name = f"{i:07d}"
        (src / folder).mkdir(parents=True, exist_ok=True)
        (ann / folder).mkdir(parents=True, exist_ok=True)
        (src / folder / f"{name}.jpg").write_bytes(b"")
        if kind == "masks":
            (ann / folder / f"{name}.png").write_bytes(b"")
        elif kind == "voc":
            box = f"<object><name>{'cat' if i % 2 else 'dog'}</name><bndbox><xmin>1</xmin><ymin>2</ymin>"
            box += "<xmax>30</xmax><ymax>40</ymax></bndbox></object>"
            xml = f"<annotation><filename>{name}.jpg</filename><size><width>64</width><height>48</height></size>"
            (ann / folder / f"{name}.xml").write_text(xml + box * 3 + "</annotation>")
        else:
            (ann / folder / f"{name}.txt").write_text(f"{i % 2} 0.5 0.5 0.2 0.3\n1 0.2 0.2 0.1 0.1\n")
    if kind == "yolo":
        (ann / "classes.txt").write_text("cat\ndog\n")
        options["classes"] = str(root / "yolo-classes.txt")
        (root / "yolo-classes.txt").write_text("cat\ndog\n")
    elif kind == "voc":
        (root / "voc-classes.txt").write_text("cat\ndog\n")
        options["classes"] = str(root / "voc-classes.txt")
    done.write_text("")
    return src, options


def run(code: str, tree: pathlib.Path, src: pathlib.Path, options: dict) -> dict:
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        args = [sys.executable, "-c", code, str(src), str(pathlib.Path(out) / "o"), json.dumps(options)]
        done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tree)
    if done.returncode:
        sys.exit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--old", help="also list on the driver with this commit's code and this checkout's")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print("| kind | inputs | measured | code | wall s | CPU s | peak RSS MB | digest |")
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as old_tree:
        if args.old:
            archive = subprocess.run(["git", "archive", args.old], capture_output=True, check=True, cwd=ROOT).stdout
            tarfile.open(fileobj=__import__("io").BytesIO(archive)).extractall(old_tree, filter="data")
        for kind in args.kinds:
            for n in args.counts:
                src, options = make_set(kind, n)
                runs = [("workers", "new", MEASURE_WORKERS, ROOT)]
                if args.old:
                    runs += [("driver", "old", MEASURE_DRIVER, pathlib.Path(old_tree))]
                    runs += [("driver", "new", MEASURE_DRIVER, ROOT)]
                for _ in range(args.repeats):
                    for measured, code_name, code, tree in runs:
                        r = run(code, tree, src, options)
                        print(
                            f"| {kind} | {n:,} | {measured} | {code_name} | {r['seconds']:.2f} | {r['cpu']:.2f} "
                            f"| {r['peak_mb']:.0f} | {r['digest']} |",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
