"""Requests per input of every command against real object-store protocols, counted by the servers.

    PYTHONPATH=$PWD python bench/objstore_requests.py                      # samples/shapes (204 images), s3 and gs
    PYTHONPATH=$PWD python bench/objstore_requests.py --store gs --source DIR

Starts moto's S3 server and gcp-storage-emulator on 127.0.0.1 (tests/support/objstores.py), uploads SOURCE
(class folders) to raw/shapes with the stores' own clients, then runs, each as a fresh `prep` process as a user
would: `convert raw -> out --num-shards 4 --split train=0.8,validation=0.2`, `verify`, `verify --deep`,
`inspect`, `report`, `leakage OUT OUT` (keys kept by the conversion) and `leakage` again after deleting
content_keys.jsonl (every shard read and hashed). Printed per command: wall time, the requests the server
logged while it ran, per input of SOURCE, and by kind (`objstores.kind`). A rename is a copy and a delete on
both stores; moto's log does not tell a copy from a write (both PUT), GCS's does (rewriteTo/copyTo).
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support import objstores  # noqa: E402  (bench/ scripts run as files)

KINDS = ("list", "stat", "read", "write", "copy", "delete", "batch", "bucket")


def _prep(store, *args) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, **store.env, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", "from prep.cli import run; run()", *args, "--", *store.beam_args],
        env=env,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started, done


def run(scheme: str, source: pathlib.Path) -> None:
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
        print(f"{'command':22} {'wall s':>7} {'requests':>8} {'/input':>7}  " + " ".join(f"{k:>6}" for k in KINDS))
        for name, args in steps:
            if args is None:  # the same leakage run, with the sidecar gone: every shard is read and hashed
                _delete_sidecar(store, out)
                args = ["leakage", out, out]
            before = len(store.request_lines())
            seconds, done = _prep(store, *args)
            lines = store.request_lines()[before:]
            if done.returncode not in (0, 1):
                print(f"{name}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
                continue
            kinds = collections.Counter(objstores.kind(line) for line in lines)
            print(
                f"{name:22} {seconds:7.1f} {len(lines):8d} {len(lines) / inputs:7.2f}  "
                + " ".join(f"{kinds.get(k, 0):6d}" for k in KINDS)
            )
    finally:
        store.stop()


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
    args = parser.parse_args()
    for scheme in ("s3", "gs") if args.store == "both" else (args.store,):
        run(scheme, args.source)


if __name__ == "__main__":
    main()
