"""Peak resident memory of a process and all its descendants, polled."""

from __future__ import annotations

import threading

import psutil


class TreePeak:
    """Polls the summed RSS of `pid` and its children every `interval` s until stopped; `peak` in bytes.

    Polling can miss a spike shorter than the interval; the sandbox's limit is on address
    space (RSS <= address space), and ru_maxrss of each process is checked where it can be.
    """

    def __init__(self, pid: int, interval: float = 0.01):
        self.peak = 0
        self._root = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> TreePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                procs = [self._root, *self._root.children(recursive=True)]
            except psutil.Error:
                return
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(self._interval)
