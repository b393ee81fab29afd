"""Does the pipeline spread over a runner's workers? One image thread per worker, 1 against 2 workers.

    python bench/runner_scaling.py                    # 2,000 generated JPEGs, --resize 256, 3 repeats
    python bench/runner_scaling.py --count 20000 --repeats 1

Why a CPU-bound stage fed by `beam.Create` gained nothing from more workers in
our probe: on the DirectRunner, Create is an Impulse (one element) and a
FlatMap fused with the steps after it, so the runner has nothing to split;
on the DaskRunner, Create puts up to 128 elements in one partition and a
GroupByKey keeps the number of partitions, so everything stays in one
partition, on one worker. The pipeline puts a Reshuffle between the chunk
ids and PrepareChunk, so that the DirectRunner can cut that stage's input
into bundles for its workers, and on the DaskRunner it asks for as many
partitions as the cluster has task slots (`runners.dask_partition_args`).
This script checks both, with `--workers 1` (one image thread per runner
worker) so that all parallelism comes from the runner:

- local: the embedded runner, the default (threads inside one process; for comparison);
- DirectRunner `--direct_running_mode=multi_processing --direct_num_workers=N`;
- DaskRunner on a `dask.distributed.LocalCluster` of N single-threaded worker
  processes, started before the timed runs (a cluster exists before a job).

The Dask clusters stay up through all runs, and their idle processes slow
every run a little. Each run is a fresh `prep convert` process, configurations interleaved within
each repeat; the table gives medians, the 1-to-2 ratio per runner, and whether
every run's shards are byte-identical to the first local run's (manifest SHA-256s).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from make_data import ensure_data, prep_command  # noqa: E402  (bench/ scripts run as files)

DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"


def configs(clusters: dict[int, str]) -> list[tuple[str, int, list[str]]]:
    """(runner, workers, prep convert arguments after the common ones)."""
    rows = []
    for n in (1, 2):
        rows.append(("local", n, ["--workers", str(n)]))
    for n in (1, 2):
        rows.append(
            (
                "DirectRunner multi_processing",
                n,
                [
                    "--workers",
                    "1",
                    "--runner",
                    "DirectRunner",
                    "--",
                    "--direct_running_mode=multi_processing",
                    f"--direct_num_workers={n}",
                ],
            )
        )
    for n, address in clusters.items():
        rows.append(("DaskRunner", n, ["--workers", "1", "--runner", DASK, "--", f"--dask_client_address={address}"]))
    return rows


def run_once(source: str, out: pathlib.Path, extra: list[str], args: list[str]) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    cmd = [prep_command(), "convert", source, str(out), "--no-progress", "--num-shards", "4", *extra, *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    shards = sorted((s["file"], s["sha256"]) for split in manifest["splits"].values() for s in split["shards"])
    return {"wall": wall, "pipeline": manifest["run"]["seconds"], "shards": shards}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="/tmp/prep-bench-runners")
    parser.add_argument("--pass-through", action="store_true", help="no --resize 256")
    args = parser.parse_args(argv)
    source = str(ensure_data(args.count))
    extra = [] if args.pass_through else ["--resize", "256"]
    from dask.distributed import LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    clusters = {
        n: LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) for n in (1, 2)
    }
    try:
        rows = configs({n: c.scheduler_address for n, c in clusters.items()})
        runs: dict[tuple[str, int], list[dict]] = {(r, n): [] for r, n, _ in rows}
        for _ in range(args.repeats):
            for runner, n, cli in rows:
                runs[(runner, n)].append(run_once(source, pathlib.Path(args.out), extra, cli))
    finally:
        for cluster in clusters.values():
            cluster.close()
    reference = runs[("local", 1)][0]["shards"]
    print(
        f"prep convert {' '.join(extra) or '(pass-through)'} --num-shards 4, {args.count} JPEGs ~500x375 q90, "
        f"{os.cpu_count()} cores, median of {args.repeats}"
    )
    print(f"{'runner':<31}{'workers':>8}{'wall s':>9}{'x wall':>8}{'pipeline s':>12}{'x pipe':>8}{'same bytes':>12}")
    table = []
    for runner, n, _ in rows:
        wall = statistics.median(r["wall"] for r in runs[(runner, n)])
        pipe = statistics.median(r["pipeline"] for r in runs[(runner, n)])
        wall1 = statistics.median(r["wall"] for r in runs[(runner, 1)])
        pipe1 = statistics.median(r["pipeline"] for r in runs[(runner, 1)])
        same = all(r["shards"] == reference for r in runs[(runner, n)])
        table.append({"runner": runner, "workers": n, "wall": wall, "pipeline": pipe, "same": same})
        print(
            f"{runner:<31}{n:>8}{wall:>9.2f}{wall1 / wall:>8.2f}{pipe:>12.2f}{pipe1 / pipe:>8.2f}"
            f"{'yes' if same else 'NO':>12}"
        )
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"runners-{args.count}.json").write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
