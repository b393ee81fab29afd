"""The manifest at ImageNet-21k's class count: 21,841 classes x 3 tiny JPEGs, converted into many shards.

    python bench/manifest_scale.py                          # --classes 21841 --shards 2000 50
    python bench/manifest_scale.py --classes 2000 --shards 200

Issue 37's goals at 21,841 classes and --num-shards 2000: manifest.json under 20 MB, conversion peak RSS
under 1 GB, `loaders.load` building its dataset in under 3 s, `prep verify` passing. For each shard count
this converts SOURCE (made once under --work, 8x8 JPEGs) with `--duplicates off` in a child process (its
peak RSS from wait4), then in fresh processes times `Manifest.load` (manifest.json alone), `loaders.load`
(building the dataset, no batch read; first call in the process, which includes TensorFlow's one-time
graph set-up, then a second call), `steps_per_epoch`, `class_weights` and `prep verify`, and prints one
table row per shard count.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

LOADERS = """
import json, sys, time
t = time.perf_counter(); import tensorflow as tf, loaders; imported = time.perf_counter() - t
from prep.core.manifest import Manifest
out = sys.argv[1]
t = time.perf_counter(); Manifest.load(out); parse = time.perf_counter() - t
t = time.perf_counter(); loaders.load(out, "train", batch_size=32); load = time.perf_counter() - t
t = time.perf_counter(); loaders.load(out, "train", batch_size=32); again = time.perf_counter() - t
t = time.perf_counter(); loaders.steps_per_epoch(out, "train", 32); steps = time.perf_counter() - t
t = time.perf_counter(); loaders.class_weights(out, "train"); weights = time.perf_counter() - t
print(json.dumps({"import": imported, "parse": parse, "load": load, "again": again, "steps": steps,
                  "weights": weights}))
"""


def make_source(root: pathlib.Path, classes: int) -> None:
    """`classes` folders n00000000, ... of 3 distinct 8x8 JPEGs each (skipped when already made)."""
    from PIL import Image

    done = root / ".complete"
    if done.exists() and done.read_text() == str(classes):
        return
    for c in range(classes):
        folder = root / f"n{c:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(3):
            Image.new("RGB", (8, 8), ((c * 7 + i) % 256, (c * 13) % 256, i * 80)).save(folder / f"{i}.jpg", "JPEG")
    done.write_text(str(classes))


def child(args: list[str]) -> tuple[int, float, int, str]:
    """Runs `python args` with the repository first on the path: (exit status, seconds, peak RSS KiB, stdout)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT, text=True
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - started, usage.ru_maxrss, out


def measure(source: pathlib.Path, out: pathlib.Path, shards: int) -> dict:
    status, seconds, rss, text = child(
        [
            "-m",
            "prep.cli",
            "convert",
            str(source),
            str(out),
            "--num-shards",
            str(shards),
            "--duplicates",
            "off",
            "--no-progress",
            "--overwrite",
        ]
    )
    if status:
        raise SystemExit(f"convert failed:\n{text}")
    row = {
        "shards": shards,
        "convert_s": seconds,
        "convert_rss_mb": rss / 1024,
        "manifest_bytes": (out / "manifest.json").stat().st_size,
        "sidecar_bytes": (out / "shard_counts.jsonl").stat().st_size if (out / "shard_counts.jsonl").exists() else 0,
    }
    status, _, _, text = child(["-c", LOADERS, str(out)])
    if status:
        raise SystemExit(f"loaders failed:\n{text}")
    row |= json.loads(text.strip().splitlines()[-1])
    status, seconds, rss, text = child(["-m", "prep.cli", "verify", str(out)])
    row |= {"verify_s": seconds, "verify_rss_mb": rss / 1024, "verdict": "OK" if status == 0 else "problems"}
    if status:
        print(text[-2000:], file=sys.stderr)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=21841)
    parser.add_argument("--shards", type=int, nargs="+", default=[2000, 50])
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/manifest-scale"))
    args = parser.parse_args()
    source = args.work / f"source-{args.classes}"
    started = time.perf_counter()
    make_source(source, args.classes)
    print(f"SOURCE: {args.classes} classes x 3 images ({time.perf_counter() - started:.0f} s)")
    print(
        "| shards | manifest.json | shard_counts.jsonl | convert | convert peak RSS | Manifest.load | "
        "loaders.load (1st, 2nd) | steps_per_epoch | class_weights | prep verify (peak RSS) | verdict |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for shards in args.shards:
        r = measure(source, args.work / f"out-{args.classes}-{shards}", shards)
        print(
            f"| {shards:,} | {r['manifest_bytes'] / 1e6:.3f} MB | {r['sidecar_bytes'] / 1e6:.3f} MB | "
            f"{r['convert_s']:.0f} s | {r['convert_rss_mb']:.0f} MB | {r['parse']:.3f} s | "
            f"{r['load']:.2f} s, {r['again']:.2f} s | {r['steps']:.2f} s | "
            f"{r['weights']:.2f} s | {r['verify_s']:.1f} s ({r['verify_rss_mb']:.0f} MB) | {r['verdict']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
