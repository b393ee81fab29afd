"""`--resume` from a simulated object store, the driver's part only: its peak memory and time up to the pipeline.

    PYTHONPATH=$PWD python bench/resume_scale.py --count 100000
    PYTHONPATH=$PWD python bench/resume_scale.py --count 1000000 --classes 100

SOURCE is `simfs://src/<C>x<P>d100` (tests/support/simfs.py: generated images served from their names, no
disk); OUTPUT `simfs://out/resume`, objects kept in a scratch folder. First an interrupted run is made: SOURCE
listed and staged as on workers and its run record written (a kill before the first image was prepared).
Then, in a fresh process each, it is resumed up to the start of the conversion's pipeline two ways:

- `workers`: `--resume` as it is now (beam_jobs/convert.py `_relisted_on_workers`): SOURCE listed again into
  the work directory's `relisted/`, checked from the two run records and the staged chunks, one at a time;
  the listing's steps run in this process, as the embedded runner runs them (`list_source.list_here`), so
  the peak includes one listing task's (one class's inputs);
- `driver`: the path every `--resume` took before: SOURCE listed by the driver (`list_inputs`) and checked
  against that listing (`start.ready_output`).

Printed per way: the process's peak RSS (ru_maxrss) and its time to a readied run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support import simfs  # noqa: E402  (bench/ scripts run as files)

STEP = """import json, resource, sys, time
from tests.support import simfs
from beam_jobs import convert as conversion
from beam_jobs._execute import list_on_workers
from prep.core.config import RUNNERS_LOCAL
from prep.core.convert_options import build_config
from prep.core.inputs import folder_source, list_inputs
from prep.core.run.start import clear_output, ready_listed, ready_output
way, source, output = sys.argv[1:4]
options = {"split": "train=0.9,validation=0.1", "duplicates": "off"}
start = time.perf_counter()
if way == "stage":
    config = build_config(source, output, options)
    clear_output(config)
    ready = ready_listed(config, list_on_workers(config, folder_source(config), pipeline=False))
else:
    config = build_config(source, output, dict(options, resume=True))
    if way == "workers":
        ready = conversion._listed_on_workers(config, folder_source(config), RUNNERS_LOCAL, None)
    else:
        ready = ready_output(config, list_inputs(config))
assert ready is not None and ready.finished is None
print(json.dumps({"seconds": time.perf_counter() - start, "inputs": ready.staged.found,
                  "chunks": len(ready.chunk_sizes),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def step(way: str, source: str, scratch: pathlib.Path) -> dict:
    env = dict(os.environ, SIMFS_STORE=str(scratch / "store"), PYTHONPATH=str(ROOT))
    # cwd: not a checkout's root, which `python -c` would put on sys.path before PYTHONPATH.
    proc = subprocess.run(
        [sys.executable, "-c", STEP, way, source, "simfs://out/resume"], env=env, capture_output=True, cwd=scratch
    )
    if proc.returncode:
        sys.exit(f"{way} failed ({proc.returncode}):\n{proc.stderr.decode()[-4000:]}")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000, help="inputs in SOURCE")
    parser.add_argument("--classes", type=int, default=100)
    args = parser.parse_args()
    source = simfs.source_url(args.classes, args.count // args.classes, 100)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="resume-scale-"))
    try:
        staged = step("stage", source, scratch)
        work = scratch / "store" / "out" / "resume" / ".prep-tmp"
        print(f"{'inputs':>9} {'chunks':>6} {'way':>8} {'driver peak MB':>14} {'seconds':>8}")
        print(
            f"{staged['inputs']:>9,} {staged['chunks']:>6} {'staging':>8} {staged['peak_mb']:>14.0f} "
            f"{staged['seconds']:>8.1f}"
        )
        saved = scratch / "saved"
        shutil.copytree(work, saved)  # each way resumes the same interrupted run
        for way in ("workers", "driver"):
            shutil.rmtree(work)
            shutil.copytree(saved, work)
            r = step(way, source, scratch)
            assert (r["inputs"], r["chunks"]) == (staged["inputs"], staged["chunks"])
            print(f"{r['inputs']:>9,} {r['chunks']:>6} {way:>8} {r['peak_mb']:>14.0f} {r['seconds']:>8.1f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"wall {time.perf_counter() - start:.0f} s")
