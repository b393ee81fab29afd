"""Requests per input of every command against real object-store protocols, counted by the servers.

    PYTHONPATH=$PWD python bench/objstore_requests.py                      # samples/shapes (204 images), s3 and gs
    PYTHONPATH=$PWD python bench/objstore_requests.py --store gs --source DIR --only convert --by-name
    PYTHONPATH=$PWD python bench/objstore_requests.py --tiny 2000 --only convert   # 2,000 generated 16x12 JPEGs
    PYTHONPATH=$PWD python bench/objstore_requests.py --tiny 2000 --only convert --code /work/main  # its prep

Starts moto's S3 server and gcp-storage-emulator on 127.0.0.1 (tests/support/objstores.py), uploads SOURCE
(class folders) to raw/shapes with the stores' own clients, then runs, each as a fresh `prep` process as a user
would: `convert raw -> out --num-shards 4 --split train=0.8,validation=0.2`, `verify`, `verify --deep`,
`inspect`, `report`, `leakage OUT OUT` (keys kept by the conversion) and `leakage` again after deleting
content_keys.jsonl (every shard read and hashed). Printed per command: wall time, the requests the server
logged while it ran, per input of SOURCE (and per image the conversion kept), and by kind (`objstores.kind`);
`--by-name` adds, per command, its requests by kind and object name with the numbers taken out (which files
cost what). `--tiny N` converts N tiny generated JPEGs (4 classes of seeded noise, none alike) instead, so
that per-chunk files weigh as they do at scale. A rename is a copy and a delete on both stores; moto's log
does not tell a copy from a write (both PUT), GCS's does (rewriteTo/copyTo).
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support import objstores  # noqa: E402  (bench/ scripts run as files)

KINDS = ("list", "stat", "read", "write", "copy", "delete", "batch", "bucket")


def _prep(store, code: pathlib.Path, *args) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, **store.env, "PYTHONPATH": str(code)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", "from prep.cli import run; run()", *args, "--", *store.beam_args],
        env=env,
        cwd=code,  # `python -c` puts the working folder first on sys.path: there, the checkout measured
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started, done


def run(scheme: str, source: pathlib.Path, only: list[str], code: pathlib.Path, by_name: bool) -> None:
    inputs = sum(1 for p in source.rglob("*") if p.is_file())
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"objstore-{scheme}-"))
    store = objstores.start(scheme, work)
    try:
        store.make_bucket("raw")
        store.make_bucket("out")
        src = store.upload_tree(source, "raw", "shapes")
        out = store.url("out", "shapes")
        steps = [
            ("convert", ["convert", src, out, "--num-shards", "4", "--split", "train=0.8,validation=0.2"]),
            ("verify", ["verify", out]),
            ("verify --deep", ["verify", "--deep", out]),
            ("inspect", ["inspect", out]),
            ("report", ["report", out, "-o", str(work / "report.html")]),
            ("leakage (keys kept)", ["leakage", out, out]),
            ("leakage (hashing)", None),
        ]
        print(f"\n{scheme}://  {inputs} inputs from {source}  (server log: {store.log})")
        print(
            f"{'command':22} {'wall s':>7} {'requests':>8} {'/input':>7} {'/kept':>6}  "
            + " ".join(f"{k:>6}" for k in KINDS)
        )
        for name, args in steps:
            if only and name.split()[0] not in only:
                continue
            if args is None:  # the same leakage run, with the sidecar gone: every shard is read and hashed
                _delete_sidecar(store, out)
                args = ["leakage", out, out]
            before = len(store.request_lines())
            seconds, done = _prep(store, code, *args)
            lines = store.request_lines()[before:]
            if done.returncode not in (0, 1) or (name == "convert" and "written" not in done.stdout):
                print(f"{name}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
                continue
            kinds = collections.Counter(objstores.kind(line) for line in lines)
            written = re.search(r"written (\d+)", done.stdout) if name == "convert" else None
            kept = f"{len(lines) / int(written.group(1)):6.2f}" if written and int(written.group(1)) else f"{'':6}"
            print(
                f"{name:22} {seconds:7.1f} {len(lines):8d} {len(lines) / inputs:7.2f} {kept}  "
                + " ".join(f"{kinds.get(k, 0):6d}" for k in KINDS)
            )
            if by_name:
                _print_by_name(lines)
    finally:
        store.stop()


def _tiny_images(count: int, root: pathlib.Path) -> pathlib.Path:
    """`count` 16x12 JPEGs of seeded noise in 4 class folders: distinct, so the conversion keeps them all."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    for i in range(count):
        folder = root / f"class{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).save(folder / f"img{i:06d}.jpg", quality=90)
    return root


def _print_by_name(lines: list[str]) -> None:
    """Requests by kind and object name, numbers and temporary suffixes taken out, most first."""
    names: collections.Counter = collections.Counter()
    for line in lines:
        target = objstores.REQUEST_LINE.search(line).group(2).split("?")[0]  # type: ignore[union-attr]
        names[(objstores.kind(line), re.sub(r"\d+", "N", re.sub(r"\.[0-9a-f]{8}\.part", ".P", target)))] += 1
    for (kind, name), n in names.most_common(25):
        print(f"    {n:7d} {kind:7} {name}")


def _delete_sidecar(store, out: str) -> None:
    bucket, _, prefix = out.split("://", 1)[1].partition("/")
    key = f"{prefix}/content_keys.jsonl"
    if store.scheme == "s3":
        store._s3().delete_object(Bucket=bucket, Key=key)
    else:
        store._gcs().bucket(bucket).blob(key).delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", choices=["s3", "gs", "both"], default="both")
    parser.add_argument("--source", type=pathlib.Path, default=ROOT / "samples" / "shapes")
    parser.add_argument("--only", nargs="*", default=[], help="commands to run (convert, verify, ...); all if none")
    parser.add_argument("--code", type=pathlib.Path, default=ROOT, help="the checkout whose `prep` runs (before/after)")
    parser.add_argument("--by-name", action="store_true", help="requests by kind and object name too")
    parser.add_argument("--tiny", type=int, help="convert this many tiny generated JPEGs instead of --source")
    args = parser.parse_args()
    if args.tiny:
        args.source = _tiny_images(args.tiny, pathlib.Path(tempfile.mkdtemp(prefix="objstore-tiny-")))
    for scheme in ("s3", "gs") if args.store == "both" else (args.store,):
        run(scheme, args.source, args.only, args.code, args.by_name)


if __name__ == "__main__":
    main()
