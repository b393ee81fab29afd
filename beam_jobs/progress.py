"""Progress bars for a local OUTPUT, driven by polling the files the pipeline writes.

Spill files, one per batch of a chunk, appear as images are prepared; plan.json gives the shard
count; shard files appear as they are written. Polling the file system works
whatever runner executes the pipeline, as long as OUTPUT is local.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading

from beam_jobs import storage
from beam_jobs.spill import BATCH
from prep import manifest as manifest_lib
from prep.naming import ShardName


_SPILL = re.compile(r"chunk-(\d{6})-(\d{4})\.bin")


def prepared_count(names, chunk_sizes: list[int]) -> int:
    """Inputs prepared, from the names of the complete spill files: one per batch of
    `BATCH` inputs of a chunk (spill.spill_path), the chunk's last batch maybe shorter."""
    count = 0
    for name in names:
        match = _SPILL.fullmatch(name)
        if match and int(match[1]) < len(chunk_sizes):
            count += max(0, min(BATCH, chunk_sizes[int(match[1])] - int(match[2]) * BATCH))
    return count


class Progress:
    """Polls the temporary folder of a local OUTPUT and drives two progress bars."""

    def __init__(self, output: str, chunk_sizes: list[int], enabled: bool):
        self._tmp = os.path.join(output, manifest_lib.TMP_DIR)
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
            spill = os.path.join(self._tmp, "spill")
            images.n = prepared_count(storage.list_names(spill), self._chunk_sizes)
            images.refresh()
            plan = os.path.join(self._tmp, "plan.json")
            if shards is None and os.path.exists(plan):
                with open(plan) as f:
                    shards = tqdm(total=json.load(f)["shards"], unit="shard", desc="write", file=sys.stderr,
                                  leave=False)
            if shards is not None:
                shards.n = sum(1 for n in storage.list_names(self._output) if ShardName.parse(n))
                shards.refresh()
        images.close()
        if shards is not None:
            shards.close()
