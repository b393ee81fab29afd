"""Worker processes for the embedded runner's pools (see pooled.py).

No Beam here: a spawned worker imports this module to run its initializer, and
the task module (spill.py), and nothing else, so it starts in a fraction of
the time an `import apache_beam` takes.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
import threading
import time
import types


def _exit_with(parent: int) -> None:
    """Worker-process initializer: exit as soon as the process that started us is gone.

    A pool's workers otherwise outlive a killed `prep convert` (SIGKILL, the
    OOM killer), blocked on their task queue forever and holding its terminal
    or pipes open. They are spawned children of that process, so a change of
    parent PID means it died.
    """

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def process_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """`workers` spawned processes, started now.

    Spawned, not forked: fresh interpreters, never copies of the runner's
    process and its threads. They run only our functions, so they are started
    without the caller's main script: by default multiprocessing re-runs it in
    every spawned process, which would convert again from a script that lacks
    ``if __name__ == "__main__":`` and fails outright for ``python - < script``.
    """
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_exit_with, initargs=(os.getpid(),))
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        # Each submit to a pool with no idle worker starts one process, reading
        # __main__ as it does so.
        for _ in range(workers):
            pool.submit(int)
    finally:
        sys.modules["__main__"] = main
    return pool
