"""Services the runner tests convert through, started once per test session (fixtures in tests/e2e/conftest.py):
a Dask LocalCluster and Beam's local job service with an external worker pool (the path Flink and Spark take).

Why once: starting them is cheap, but their worker processes import TensorFlow and Beam on their first task
(several seconds each on a busy 2-core machine); a cluster per test paid that again in every Dask test. A
real cluster also runs job after job in the same workers, so sharing them checks that too."""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from tests.support.workers import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]


# The session's cluster idles between its tests for most of the session; Dask's own watchers tick meanwhile: the
# event-loop check every 20 ms, the system monitor every 0.5 s and the statistical profiler every 10 ms, in the
# scheduler, each nanny and each worker. Slower ticks (and no profiler) cut its idle CPU by more than half
# (1.95 -> 0.87 CPU s per 30 s idle); none of them changes how tasks run.
QUIET_DASK = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.profile.enabled": False,
}


@contextlib.contextmanager
def dask_cluster(n_workers: int = 2) -> Iterator[str]:
    """A LocalCluster of `n_workers` processes of one thread each; yields the scheduler's address."""
    import dask
    from dask import distributed

    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    with (
        dask.config.set(QUIET_DASK),
        distributed.LocalCluster(
            n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
    ):
        yield cluster.scheduler_address


@contextlib.contextmanager
def dask_threads_cluster(n_workers: int = 2, threads_per_worker: int = 2) -> Iterator[str]:
    """A LocalCluster whose workers are threads of this process (`processes=False`, a setup users pick): Dask
    hands tasks to them without serializing, so tasks share whatever their graph shares. Yields the address."""
    from dask import distributed

    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    with distributed.LocalCluster(
        n_workers=n_workers, threads_per_worker=threads_per_worker, processes=False, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited early with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")


@contextlib.contextmanager
def portable_services(cwd: pathlib.Path) -> Iterator[tuple[int, int]]:
    """Beam's local job service and an external worker pool; yields (job port, pool port).

    The workers import this checkout's code (PYTHONPATH), not whatever copy is installed."""
    job_port, pool_port = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main", "--port", str(job_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={pool_port}"],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    try:
        wait_for_port(job_port, procs[0])
        wait_for_port(pool_port, procs[1])
        yield job_port, pool_port
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)
