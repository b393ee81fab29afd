"""`PooledDoFn`: a DoFn with a thread pool of `workers` threads (None: all cores of the worker)."""

from __future__ import annotations

import concurrent.futures
import os

import apache_beam as beam


class PooledDoFn(beam.DoFn):
    """Owns `self._pool`, made in setup() and shut down in teardown(). Work submitted to
    it must finish inside process(): outputs emitted later would be lost on the DaskRunner
    (PrepareChunk's `lookahead`, which emits from finish_bundle, is for the embedded runner only).

    Threads, not processes: the image work releases the GIL in Pillow's C code,
    and a pool of worker processes measured no faster (docs/design.md).
    """

    def __init__(self, workers: int | None):
        super().__init__()
        self._workers = workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def setup(self):
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self._workers or os.cpu_count() or 1, thread_name_prefix=type(self).__name__
        )

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
