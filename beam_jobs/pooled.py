"""`PooledDoFn`: a DoFn with a pool of `workers` threads or processes (None: all cores of the worker)."""

from __future__ import annotations

import concurrent.futures
import os

import apache_beam as beam

from beam_jobs.workers import process_pool


class PooledDoFn(beam.DoFn):
    """Owns `self._pool`, made in setup() and shut down in teardown(). Work submitted to
    it must finish inside process(): outputs emitted later would be lost on the DaskRunner.

    Threads suit work that releases the GIL and runners that already run one
    SDK process per core (Dataflow, Flink, Spark). `processes=True` suits the
    embedded local runner, which runs every stage in its one process: with
    threads, the Python parts of each image's work (Pillow's header parsing,
    record building) serialise on the GIL, and two threads reach about 1.8x
    one; two processes reach 2x (bench/convert_bench.py).
    """

    def __init__(self, workers: int | None, processes: bool = False):
        super().__init__()
        self._workers = workers
        self._processes = processes
        self._pool = None

    def setup(self):
        workers = self._workers or os.cpu_count() or 1
        if self._processes:
            self._pool = process_pool(workers)
        else:
            self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=type(self).__name__)

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
