"""Counting the requests made to `simfs://` (tests/support/simfs.py), in every process of a run.

Every request is counted per process by (kind, what, caller): kind is one of KINDS; what
is "src" for a source image, else the key with digit runs and hex tokens replaced by `#` (so that
`a3f-chunk-000012.bin` counts as `#-chunk-#.bin`); caller is the first frame of project code
(`prep/`, `beam_jobs/`, `loaders/`) on the stack, as `file:function`, skipping `prep/core/storage.py`
and `beam_jobs/beam_fs.py`, which only pass calls on. Request kinds follow what GCS or S3 would be asked:
a list page per 1,000 keys returned (`list`); `exists`, `size`, `metadata`, `last_updated`, `checksum`
(`stat`); an opened reader's first read, and each read after a seek elsewhere (`read`, a ranged GET);
`create` (`write`, one upload); `copy`; `rename` (one per object; a copy and a delete on a real store,
so two requests in `requests()`); `delete` (one per object). Bytes read and written are counted too.

With `$SIMFS_COUNTS` set to a folder (or `start_counting(folder)`), each process writes its counts to
`<folder>/<pid>.json` at most once a second while it makes requests, at exit, and on `flush()` (call it on
Dask workers before they are closed: `client.run(simfs.flush)`); `load_counts(folder)` sums them. A forked
child starts from zero.
`$SIMFS_LATENCY_MS` adds that much sleep to every request, in the process that makes it.
"""

from __future__ import annotations

import atexit
import collections
import functools
import json
import os
import re
import sys
import threading
import time
import uuid

from tests.support.simsource import ROOT

PREFIX = "simfs://"
KINDS = ("list", "stat", "read", "write", "copy", "rename", "delete")
_VARYING = re.compile(r"\b[0-9a-f]{3}(?=-chunk-)|[0-9a-f]{6,}|\d+")  # hash prefixes (workdir.spread) too

_lock = threading.Lock()
_counts: collections.Counter = collections.Counter()  # (kind, what, caller) -> requests
_bytes: collections.Counter = collections.Counter()  # ("read"|"write", what) -> bytes
_last_flush = [0.0]
_SKIP_FILES = ("/prep/core/storage.py", "/beam_jobs/beam_fs.py")
_PROJECT = re.compile(r".*/((?:prep|beam_jobs|loaders)/.*)\.py$")


def _reset_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _counts.clear()
    _bytes.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


@functools.cache
def _frame_label(filename: str, name: str) -> str | None:
    if filename.endswith(_SKIP_FILES) or "site-packages" in filename:
        return None
    m = _PROJECT.match(filename)
    return f"{m.group(1)}:{name}" if m else None


def _caller() -> str:
    frame = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            break
        label = _frame_label(frame.f_code.co_filename, frame.f_code.co_name)
        if label:
            return label
        frame = frame.f_back
    return "other"


def what(path: str) -> str:
    """How a request's object is counted: "src", or its key with varying parts as #."""
    if path.startswith(ROOT + "/"):
        return "src"
    return _VARYING.sub("#", path[len(PREFIX) :] if path.startswith(PREFIX) else path)


def count(kind: str, path: str, n: int = 1, nbytes: int = 0) -> None:
    latency = float(os.environ.get("SIMFS_LATENCY_MS") or 0)
    if latency:
        time.sleep(latency * n / 1000)
    key = (kind, what(path), _caller())
    with _lock:
        _counts[key] += n
        if nbytes:
            _bytes[(kind, key[1])] += nbytes
    if time.monotonic() - _last_flush[0] > 1.0:
        flush()


def count_bytes(kind: str, path: str, nbytes: int) -> None:
    with _lock:
        _bytes[(kind, what(path))] += nbytes


def flush() -> None:
    """Writes this process's counts to $SIMFS_COUNTS/<pid>.json (if set), replacing its previous ones."""
    folder = os.environ.get("SIMFS_COUNTS")
    _last_flush[0] = time.monotonic()
    if not folder:
        return
    with _lock:
        doc = {"counts": [[*k, v] for k, v in _counts.items()], "bytes": [[*k, v] for k, v in _bytes.items()]}
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.getpid()}.{uuid.uuid4().hex}")
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, os.path.join(folder, f"{os.getpid()}.json"))


atexit.register(flush)


def start_counting(folder: str | None) -> None:
    """From now on, counts start from zero and go to `folder` (None: kept in memory only); for a process
    that outlives one run, such as a Dask worker: `client.run(simfs.start_counting, folder)`."""
    with _lock:
        _counts.clear()
        _bytes.clear()
    if folder is None:
        os.environ.pop("SIMFS_COUNTS", None)
    else:
        os.environ["SIMFS_COUNTS"] = folder


def local_counts() -> tuple[collections.Counter, collections.Counter]:
    """This process's (requests by (kind, what, caller), bytes by (kind, what)), copies."""
    with _lock:
        return collections.Counter(_counts), collections.Counter(_bytes)


def load_counts(folder: str) -> tuple[collections.Counter, collections.Counter]:
    """The counts every process wrote to `folder`, summed."""
    counts: collections.Counter = collections.Counter()
    nbytes: collections.Counter = collections.Counter()
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                doc = json.load(f)
            for kind, obj, caller, n in doc["counts"]:
                counts[(kind, obj, caller)] += n
            for kind, obj, n in doc["bytes"]:
                nbytes[(kind, obj)] += n
    return counts, nbytes


def requests(counts: collections.Counter, kind: str | None = None) -> int:
    """Requests a real object store would serve: a rename is a copy and a delete there."""
    weight = {"rename": 2}
    return sum(
        n * (weight.get(k, 1) if kind is None else 1) for (k, _, _), n in counts.items() if kind is None or k == kind
    )
