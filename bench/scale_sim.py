"""A whole conversion from and to a simulated object store: time, memory and requests per image.

    PYTHONPATH=$PWD python bench/scale_sim.py --count 2000                       # embedded, dedupe off then on
    PYTHONPATH=$PWD python bench/scale_sim.py --count 2000 --runner dask         # a LocalCluster of 2 workers
    PYTHONPATH=$PWD python bench/scale_sim.py --count 100000 --duplicates on --latency-ms 1
    PYTHONPATH=$PWD python bench/scale_sim.py --count 2000000 --listing-only [--code /work/main]  # the driver alone
    PYTHONPATH=$PWD python bench/scale_sim.py --count 2000000 --listing-only --label-file  # a CSV label file
    PYTHONPATH=$PWD python bench/scale_sim.py --count 2000000 --listing-only --label-file --multilabel
    PYTHONPATH=$PWD python bench/scale_sim.py --count 20000 --webdataset 1000 --duplicates off  # from tar shards
    PYTHONPATH=$PWD python bench/scale_sim.py --count 20000 --parquet 1000 --duplicates off     # from Parquet
    PYTHONPATH=$PWD python bench/scale_sim.py --count 1000000 --classes 1000 --duplicates off --json off.json &
    PYTHONPATH=$PWD python bench/scale_sim.py --count 1000000 --classes 1000 --duplicates on --json on.json
    PYTHONPATH=$PWD python bench/scale_sim.py --show off.json on.json  # the two, compared (table, CPU per stage)

SOURCE is `simfs://src/<C>x<P>d100` (tests/support/simfs.py): C classes of P generated 64x64 JPEGs of 2 KB,
every 100th an exact copy of the one before, served from their names with no disk; OUTPUT is `simfs://out/...`,
objects kept in a scratch folder. Each run is a fresh `prep convert` process (the driver) with
`--split train=0.9,validation=0.1`; with `--runner dask` it submits to a `dask.distributed.LocalCluster` of 2
single-threaded worker processes that this script starts first (they import simfs at start-up, `preload`).

Printed per run: wall time of the `prep convert` process; driver peak RSS (its own ru_maxrss, read at its
exit); worker peak RSS (Dask workers' ru_maxrss, or the largest child process of the driver on the embedded
runner); CPU seconds of the driver, its children and the Dask workers during the run; requests per kept image by kind as
the simulated store counted them in every process (a `rename` is a copy and a delete on GCS and S3: 2 in "all");
the dedupe stage's share: of requests, those made from its modules (DEDUPE_MODULES), and of CPU time,
1 - (CPU with --duplicates off) / (CPU with keep) when both ran (CPU rather than wall time: on a machine shared
with other work, wall time moves more than CPU time). Then the requests per kept image by calling function
(file:function), largest first, for the last run. On the embedded runner also the CPU of the driver's
process per fused stage (Beam's bundles timed, named by the shuffle each reads: SpreadChunks is preparing,
Dedupe/FindPairs/SpreadScans the near-pair scan), and duplicates.jsonl's counts.

With `--webdataset N`, the same images (jpg + cls, in seeded order) are first written as WebDataset shards of
N samples, `simfs://wds/NNNNN.tar` (stored objects, not virtual), and SOURCE is `simfs://wds`: issue 38
wants requests per image from tar shards far below one. With `--parquet N`, they are Parquet files of N rows
(`simfs://pq/NNNNN.parquet`: a binary `image` column and an integer `label`, row groups of 100 rows as
`datasets` writes image datasets), and SOURCE is `simfs://pq`.

Goal of issue #37: at most 3 requests per kept pass-through image all told, and a driver whose memory stays
flat in the number of inputs. Image sizes here are tiny, so bytes and CPU per image are not those of photos;
requests are.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support import simfs  # noqa: E402  (bench/ scripts run as files)

DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"
DEDUPE_MODULES = (
    "beam_jobs/dedupe",
    "beam_jobs/dedupe_decide",
    "beam_jobs/dedupe_scan",
    "prep/core/run/dedupe_files",
    "prep/core/run/dedupe_types",
    "prep/core/run/publish_keys",
)
SHOWN = ("list", "stat", "read", "write", "rename", "delete")
# The driver: prep's CLI in a process that registered simfs, leaving its peak RSS (KiB) in a file at exit.
# On the embedded runner, the CPU of this process (pool threads included) is also summed per fused stage, by
# the stage's first step (`stage_cpu`): which step grows faster than n.
DRIVER = """import atexit, json, os, resource, sys, time
from tests.support import simfs
stages = {}
def _rss():
    with open(os.environ["SCALE_SIM_RSS"], "w") as f:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        json.dump({"self": me.ru_maxrss, "children": kids.ru_maxrss, "stages": stages,
                   "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}, f)
atexit.register(_rss)
from apache_beam.runners.portability.fn_api_runner import fn_runner
_execute = fn_runner.FnApiRunner._execute_bundle
def _timed(self, context, manager, bundle_input):
    cpu = time.process_time()
    try:
        return _execute(self, context, manager, bundle_input)
    finally:
        name = manager.stage.name
        stages[name] = stages.get(name, 0.0) + time.process_time() - cpu
fn_runner.FnApiRunner._execute_bundle = _timed
from prep.cli import run
sys.argv = ["prep", *sys.argv[1:]]
run()
"""

# --listing-only: the driver's part up to the first worker task, then the listing staged (on workers where the
# code lists there, as a pipeline on the embedded runner or in-process; else, or with --on-driver, on the driver
# as before), with prep's code from --code; prints its timings as JSON.
LISTING = """import atexit, json, os, resource, sys, time
from tests.support import simfs
def _rss():
    with open(os.environ["SCALE_SIM_RSS"], "w") as f:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        json.dump({"self": me.ru_maxrss, "children": kids.ru_maxrss,
                   "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}, f)
atexit.register(_rss)
import apache_beam as beam
from beam_jobs import _execute, convert as conversion  # imported before timing: as a run has them
from prep.core.convert_options import build_config
first, hwm = [], []
def peak_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
_run = beam.Pipeline.run
def run(self, *a, **k):
    first.append(time.perf_counter())
    hwm.append(peak_mb())
    return _run(self, *a, **k)
beam.Pipeline.run = run
options = {"split": "train=0.9,validation=0.1", "duplicates": "off"}
if sys.argv[4]:
    options["labels"] = sys.argv[4]
config = build_config(sys.argv[1], sys.argv[2], options)
start = time.perf_counter()
try:
    from prep.core.inputs import folder_source
except ImportError:  # code that lists on the driver only
    folder_source = None
folders = folder_source(config) if folder_source and sys.argv[3] != "driver" else None
if folders is None and sys.argv[4] and sys.argv[3] != "driver":
    try:
        from prep.core.label_ranges import label_source
    except ImportError:  # code that reads label files on the driver only
        label_source = None
    folders = label_source(config) if label_source else None
if folders is not None:
    from beam_jobs._execute import list_on_workers
    from prep.core.run.start import clear_output, ready_listed
    clear_output(config)
    ready = ready_listed(config, list_on_workers(config, folders, pipeline=sys.argv[3] == "pipeline"))
else:
    from prep.core.inputs import list_inputs
    from prep.core.run.start import ready_output
    ready = ready_output(config, list_inputs(config))
    first.append(time.perf_counter())  # the conversion's first worker task starts now
    hwm.append(peak_mb())
first.append(time.perf_counter())  # listed in this process (no pipeline): the conversion's first task starts now
hwm.append(peak_mb())
print(json.dumps({"first_task": first[0] - start, "staged": time.perf_counter() - start,
                  "chunks": len(ready.chunk_sizes), "inputs": ready.staged.found, "first_mb": hwm[0]}))
"""


def listing_only(args, scratch: pathlib.Path) -> None:
    """Runs the driver up to a staged listing (`LISTING`) and prints its peak RSS and timings."""
    rss_file = scratch / "rss-listing.json"
    source = simfs.source_url(args.classes, args.count // args.classes, 100)
    code = str(args.code.resolve())
    labels = ""
    if args.label_file:  # a CSV of every input and its class, in the simulated store; SOURCE's names as paths
        labels = "simfs://out/labels.csv"
        (scratch / "store" / "out").mkdir(parents=True, exist_ok=True)
        classes = sorted({name.split("/")[0] for name in simfs.source_names(args.classes, 1)})
        with open(scratch / "store" / "out" / "labels.csv", "w") as f:
            f.write("path,label\n")
            for name in simfs.source_names(args.classes, args.count // args.classes):
                label = name.split("/")[0]
                if args.multilabel:  # and a second class, picked by a hash of the name: a multi-label file
                    label += "|" + classes[zlib.crc32(name.encode()) % len(classes)]
                f.write(f"{name},{label}\n")
    env = dict(
        os.environ,
        SCALE_SIM_RSS=str(rss_file),
        PYTHONPATH=os.pathsep.join([code, str(ROOT)]),  # prep from --code, tests.support from here
    )
    start = time.perf_counter()
    # cwd: not a checkout's root, which `python -c` would put on sys.path before PYTHONPATH.
    mode = "driver" if args.on_driver else "here" if args.in_process else "pipeline"
    cmd = [sys.executable, "-c", LISTING, source, "simfs://out/listing", mode, labels]
    proc = subprocess.run(cmd, env=env, capture_output=True, cwd=scratch)
    if proc.returncode:
        sys.exit(f"listing failed ({proc.returncode}):\n{proc.stderr.decode()[-4000:]}")
    wall = time.perf_counter() - start
    timing = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    rss = json.loads(rss_file.read_text())
    print(
        f"{'inputs':>9} {'code':>24} {'first task s':>12} {'staged s':>8} {'chunks':>6} {'MB at 1st task':>14} "
        f"{'driver MB':>9} {'wall s':>7}"
    )
    print(
        f"{timing['inputs']:>9,} {code[-24:]:>24} {timing['first_task']:>12.2f} {timing['staged']:>8.1f} "
        f"{timing['chunks']:>6} {timing.get('first_mb', 0):>14.0f} {rss['self'] / 1024:>9.0f} {wall:>7.1f}"
    )


def start_cluster(workers: int):
    from dask.distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, preload=["tests.support.simfs"]
    )
    return cluster, Client(cluster)


def worker_usage(client) -> tuple[float, float]:
    """(peak RSS of the largest worker in MB, CPU seconds of all workers so far); flushes their counts."""
    import resource

    client.run(simfs.flush)
    usage = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF)[:3])  # utime, stime, maxrss
    return max(u[2] for u in usage.values()) / 1024, sum(u[0] + u[1] for u in usage.values())


def write_webdataset(args) -> str:
    """The simulated source's images as WebDataset shards of `args.webdataset` samples in the store; their SOURCE."""
    import random

    import webdataset as wds

    from tests.support import simsource

    per_class = args.count // args.classes
    samples = [(c, n) for c in range(args.classes) for n in range(per_class)]
    random.Random(0).shuffle(samples)
    folder = pathlib.Path(os.environ["SIMFS_STORE"]) / "wds"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for start in range(0, len(samples), args.webdataset):
        with open(folder / f"{start // args.webdataset:05d}.tar", "wb") as f, wds.TarWriter(f) as sink:
            for c, n in samples[start : start + args.webdataset]:
                image = simsource.image_bytes(c, n - 1 if n % 100 == 99 else n)  # every 100th a copy, as simfs://src
                sink.write({"__key__": f"c{c:04d}-{n:07d}", "jpg": image, "cls": c})
    return "simfs://wds"


def write_parquet(args) -> str:
    """The simulated source's images as Parquet files of `args.parquet` rows in the store; their SOURCE."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.support import simsource

    per_class = args.count // args.classes
    samples = [(c, n) for c in range(args.classes) for n in range(per_class)]
    random.Random(0).shuffle(samples)
    folder = pathlib.Path(os.environ["SIMFS_STORE"]) / "pq"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for start in range(0, len(samples), args.parquet):
        rows = samples[start : start + args.parquet]
        images = [simsource.image_bytes(c, n - 1 if n % 100 == 99 else n) for c, n in rows]  # as simfs://src
        table = pa.table({"image": pa.array(images, pa.binary()), "label": [c for c, _ in rows]})
        pq.write_table(table, str(folder / f"{start // args.parquet:05d}.parquet"), row_group_size=100)
    return "simfs://pq"


def run_once(args, scratch: pathlib.Path, duplicates: str, client) -> dict:
    counts_dir, rss_file = scratch / f"counts-{duplicates}", scratch / f"rss-{duplicates}.json"
    shutil.rmtree(counts_dir, ignore_errors=True)
    per_class = args.count // args.classes
    source = args.source or simfs.source_url(args.classes, per_class, 100)
    out = f"simfs://out/run-{duplicates}"
    shutil.rmtree(pathlib.Path(os.environ["SIMFS_STORE"]) / "out" / f"run-{duplicates}", ignore_errors=True)
    cmd = [
        sys.executable,
        "-c",
        DRIVER,
        "convert",
        source,
        out,
        "--no-progress",
        "--split",
        "train=0.9,validation=0.1",
        "--duplicates",
        duplicates,
    ]
    if args.prep_workers:
        cmd += ["--workers", str(args.prep_workers)]
    if client is not None:
        cmd += ["--runner", DASK, "--", f"--dask_client_address={client.scheduler.address}"]
    env = dict(
        os.environ,
        SIMFS_COUNTS=str(counts_dir),
        SCALE_SIM_RSS=str(rss_file),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    worker_cpu = 0.0
    if client is not None:
        client.run(simfs.start_counting, str(counts_dir))  # the workers' counts start from zero, for this run
        worker_cpu = -worker_usage(client)[1]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"prep convert failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    worker_rss = None
    if client is not None:
        worker_rss, cpu_now = worker_usage(client)
        worker_cpu += cpu_now
    rss = json.loads(rss_file.read_text())
    manifest = json.loads(
        (pathlib.Path(os.environ["SIMFS_STORE"]) / "out" / f"run-{duplicates}" / "manifest.json").read_text()
    )
    counts, _ = simfs.load_counts(str(counts_dir))
    if client is None:
        worker_rss = rss["children"] / 1024 if rss["children"] else None
    return {
        "inputs": manifest["inputs"]["found"],
        "kept": manifest["inputs"]["written"],
        "duplicates": duplicates,
        "runner": args.runner,
        "wall": wall,
        "cpu": rss["cpu"] + worker_cpu,
        "driver_mb": rss["self"] / 1024,
        "worker_mb": worker_rss,
        "counts": counts,
        "stages": rss.get("stages", {}),
        "groups": _report_header(pathlib.Path(os.environ["SIMFS_STORE"]) / "out" / f"run-{duplicates}"),
    }


def _report_header(output: pathlib.Path) -> dict:
    """duplicates.jsonl's header (its counts) of a run's OUTPUT, or {} without one."""
    path = output / "duplicates.jsonl"
    if not path.exists():
        return {}
    with open(path) as f:
        return json.loads(f.readline())


def per_kept(counts: collections.Counter, kept: int) -> dict[str, float]:
    kinds: collections.Counter = collections.Counter()
    for (kind, _, _), n in counts.items():
        kinds[kind] += n
    row = {k: kinds[k] / kept for k in SHOWN}
    row["all"] = simfs.requests(counts) / kept
    dedupe = sum(
        n * (2 if kind == "rename" else 1)
        for (kind, _, caller), n in counts.items()
        if caller.split(":")[0] in DEDUPE_MODULES
    )
    row["dedupe_requests"] = dedupe / max(1, simfs.requests(counts))
    return row


def print_table(rows: list[dict]) -> None:
    cpus = {r["duplicates"]: r["cpu"] for r in rows}
    head = (
        f"{'inputs':>9} {'runner':>8} {'dups':>5} {'wall s':>7} {'CPU s':>7} {'driver MB':>9} {'worker MB':>9} "
        + " ".join(f"{k:>6}" for k in (*SHOWN, "all"))
        + f" {'dedupe req':>10} {'dedupe CPU':>10}"
    )
    print(head)
    for r in rows:
        p = per_kept(r["counts"], r["kept"]) if "counts" in r else r  # a --show row holds its figures
        share = ""
        if r["duplicates"] == "keep" and "off" in cpus:
            share = f"{1 - cpus['off'] / r['cpu']:.0%}"
        worker = "-" if r["worker_mb"] is None else f"{r['worker_mb']:.0f}"
        print(
            f"{r['inputs']:>9,} {r['runner']:>8} {('on' if r['duplicates'] == 'keep' else 'off'):>5} "
            f"{r['wall']:>7.1f} {r['cpu']:>7.1f} {r['driver_mb']:>9.0f} {worker:>9} "
            + " ".join(f"{p[k]:>6.2f}" for k in (*SHOWN, "all"))
            + f" {p['dedupe_requests']:>10.0%} {share:>10}"
        )
    print("(requests per kept image; all: a rename counted as a copy and a delete)")


def stage_label(fused: str) -> str:
    """A fused stage of the embedded runner named by the shuffle it reads (its first step's input), else its
    first step: "SpreadChunks" is preparing, "Dedupe/FindPairs/SpreadScans" the scan."""
    m = re.search(r"\(([\w/-]+?)(?:/ReshufflePerKey/GroupByKey|/Gather)?/Read\)", fused)
    if m:
        return m.group(1)
    m = re.search(r"ref_AppliedPTransform_([\w-]+?)_\d+", fused)
    return m.group(1).replace("-", "/") if m else fused[:40]


def print_stages(rows: list[dict], least: float = 0.005) -> None:
    """CPU seconds of the driver's process per fused stage (embedded runner), those over `least` of a run's."""
    totals = [collections.Counter() for _ in rows]
    for total, r in zip(totals, rows):
        for fused, cpu in r["stages"].items():
            total[stage_label(fused)] += cpu
    shown = sorted({k for t, r in zip(totals, rows) for k, v in t.items() if v >= least * r["cpu"]})
    if not shown:
        return
    print("\nCPU s per stage (the driver's process; named by the shuffle each reads):")
    print(f"  {'stage':<48}" + "".join(f"{r['duplicates']:>10}" for r in rows))
    for k in sorted(shown, key=lambda k: -totals[-1][k]):
        print(f"  {k:<48}" + "".join(f"{t[k]:>10.1f}" for t in totals))
    print(f"  {'(all stages)':<48}" + "".join(f"{sum(t.values()):>10.1f}" for t in totals))


def print_callers(r: dict, top: int) -> None:
    by_caller: collections.Counter = collections.Counter()
    for (kind, obj, caller), n in r["counts"].items():
        where = "source image" if obj == "src" else "source shard" if obj == "wds" else obj.split("/", 2)[-1]
        by_caller[(caller, kind, where)] += n * (2 if kind == "rename" else 1)
    print(f"\nrequests per kept image by caller, duplicates {r['duplicates']} (rename = 2), top {top}:")
    for (caller, kind, where), n in by_caller.most_common(top):
        print(f"  {n / r['kept']:6.3f}  {kind:<6} {caller:<45} {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2000, help="inputs (rounded down to a multiple of --classes)")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--runner", choices=("embedded", "dask"), default="embedded")
    parser.add_argument("--dask-workers", type=int, default=2)
    parser.add_argument(
        "--duplicates",
        choices=("on", "off", "both"),
        default="both",
        help="--duplicates keep (on), off, or off then keep (both: gives dedupe's share of wall time)",
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="sleep added to every request")
    parser.add_argument("--prep-workers", type=int, help="prep convert --workers (threads per pipeline worker)")
    parser.add_argument("--top", type=int, default=15, help="callers listed")
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows here")
    parser.add_argument(
        "--listing-only",
        action="store_true",
        help="only the driver up to a staged listing (embedded runner): its peak RSS, time to the first worker task",
    )
    parser.add_argument(
        "--webdataset",
        type=int,
        metavar="N",
        help="SOURCE: the images as WebDataset shards of N samples (simfs://wds) instead of class folders",
    )
    parser.add_argument(
        "--parquet",
        type=int,
        metavar="N",
        help="SOURCE: the images as Parquet files of N rows (simfs://pq) instead of class folders",
    )
    parser.add_argument(
        "--show",
        type=pathlib.Path,
        nargs="+",
        metavar="JSON",
        help="run nothing: print the rows that earlier runs wrote with --json, compared (e.g. a 1 M --duplicates off "
        "and a --duplicates on run, made apart or at the same time: each takes 20-40 minutes on a shared machine)",
    )
    parser.add_argument("--code", type=pathlib.Path, default=ROOT, help="with --listing-only: whose prep to run")
    parser.add_argument(
        "--label-file",
        action="store_true",
        help="with --listing-only: list a CSV label file of the inputs (read in ranges on workers) rather "
        "than SOURCE's class folders",
    )
    parser.add_argument(
        "--on-driver",
        action="store_true",
        help="with --listing-only: list on the driver, as the embedded runner does (and code before workers did)",
    )
    parser.add_argument(
        "--multilabel",
        action="store_true",
        help="with --label-file: each row names its class and a second one (`a|b`): a multi-label file",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="with --listing-only: the listing's steps in the driver's process, as the embedded runner runs them "
        "(default: as a pipeline, as on any other runner)",
    )
    args = parser.parse_args()

    if args.show:  # rows as --json wrote them: CPU per stage and the table's figures, no request counts by caller
        rows = [r for path in args.show for r in json.loads(path.read_text())]
        print_table(rows)
        print_stages(rows)
        return
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="scale-sim-"))
    os.environ["SIMFS_STORE"] = str(scratch / "store")
    os.environ["SIMFS_LATENCY_MS"] = str(args.latency_ms)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if args.listing_only:
        try:
            listing_only(args, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    cluster = client = None
    try:
        if args.runner == "dask":
            cluster, client = start_cluster(args.dask_workers)
        args.source = write_webdataset(args) if args.webdataset else write_parquet(args) if args.parquet else None
        modes = {"on": ["keep"], "off": ["off"], "both": ["off", "keep"]}[args.duplicates]
        rows = [run_once(args, scratch, mode, client) for mode in modes]
    finally:
        if client is not None:
            client.close()
            cluster.close()
        shutil.rmtree(scratch, ignore_errors=True)
    print_table(rows)
    print_stages(rows)
    for r in rows:
        if r["groups"]:
            print(f"duplicates.jsonl, {r['duplicates']}: {json.dumps(r['groups'])}")
    print_callers(rows[-1], args.top)
    if args.json:
        args.json.write_text(
            json.dumps(
                [{**{k: v for k, v in r.items() if k != "counts"}, **per_kept(r["counts"], r["kept"])} for r in rows],
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
