"""Progress bars for a local OUTPUT, driven by polling the files the pipeline writes.

Spill files, one per chunk, appear as its images are prepared; plan.json gives the shard
count; shard files appear as they are written. Polling the file system works
whatever runner executes the pipeline, as long as OUTPUT is local.
"""

from __future__ import annotations

import json
import os.path
import sys
import threading

from prep.core import storage
from prep.core.naming import ShardName
from prep.core.workdir import WorkDir, parse_spill_name


def prepared_count(names, chunk_sizes: list[int]) -> int:
    """Inputs prepared, from the names of the complete spill files: one per chunk."""
    chunks = {parse_spill_name(name) for name in names}
    return sum(chunk_sizes[c] for c in chunks if c is not None and c < len(chunk_sizes))


class Progress:
    """Polls the temporary folder of a local OUTPUT and drives two progress bars."""

    def __init__(self, output: str, chunk_sizes: list[int], enabled: bool):
        self._work = WorkDir(output)
        self._output = output
        self._chunk_sizes = chunk_sizes
        self._enabled = enabled and not storage.is_remote(output)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._enabled:
            self._thread.join()

    def _loop(self):
        from tqdm import tqdm

        images = tqdm(total=sum(self._chunk_sizes), unit="img", desc="prepare", file=sys.stderr, leave=False)
        shards = None
        while not self._stop.wait(0.25):
            images.n = prepared_count(storage.list_names(self._work.spill_folder), self._chunk_sizes)
            images.refresh()
            plan = self._work.plan
            if shards is None and os.path.exists(plan):
                with open(plan) as f:
                    shards = tqdm(
                        total=json.load(f)["shards"], unit="shard", desc="write", file=sys.stderr, leave=False
                    )
            if shards is not None:
                shards.n = sum(1 for n in storage.list_names(self._output) if ShardName.parse(n))
                shards.refresh()
        images.close()
        if shards is not None:
            shards.close()
