"""Reading, checking and converting images; their records go to spill files.

Each element is a chunk id. The driver wrote the chunk's listing to
``.prep-tmp/listing/chunk-NNNNNN.json``, so the pipeline graph holds only
chunk ids, however many inputs there are. A pool of `workers` threads works on
the chunk's images (Pillow releases the GIL while decoding, resizing and
encoding); the threads append the framed TFRecord bytes of each good image to the
chunk's spill file as they finish, and only a small `PreparedRef` (where
the record is) travels on.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
import typing

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_jobs import checkpoints, storage
from beam_jobs.pooled import PooledDoFn
from prep.images import ImageOptions, ImageRejected, prepare_image
from prep.schema import ImageRecord
from prep.sources import InputRef, Reject
from prep.tfrecord import frame

OK, REJECT, REUSED = "ok", "reject", "reused"


class PreparedRef(typing.NamedTuple):
    """A checked example whose framed record waits in a spill file.

    A NamedTuple, not a dataclass: Beam pickles either, but a slots dataclass
    pickles through its field-by-field __getstate__, several times slower
    (measured at 20,000 refs: 0.9 s -> 0.7 s between prepare and write).
    """

    path: str
    label: int
    split: str  # "" when the source names no split
    chunk: int
    offset: int
    length: int  # bytes of the framed record
    converted: bool


def listing_path(tmp_dir: str, chunk: int) -> str:
    return storage.join(tmp_dir, "listing", f"chunk-{chunk:06d}.json")


def spill_path(tmp_dir: str, chunk: int) -> str:
    return storage.join(tmp_dir, "spill", f"chunk-{chunk:06d}.bin")


def write_listing(tmp_dir: str, chunk: int, refs) -> None:
    storage.write_atomic(listing_path(tmp_dir, chunk), json.dumps([list(r) for r in refs]).encode())


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def read_input(path: str) -> bytes | tuple[str, str]:
    """The bytes of one input, or (reason, detail) if it cannot be read.

    Only regular files are opened: reading a FIFO or a device named like an
    image would block or never end.
    """
    if not storage.is_remote(path):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if os.path.islink(path):
                return "broken_symlink", "symlink points to a file that does not exist"
            return "missing", "file does not exist"
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "symlink_loop", exc.strerror or "too many levels of symbolic links"
            return "unreadable", exc.strerror or str(exc)
        if stat.S_ISDIR(st.st_mode):
            return "unreadable", "path is a folder"
        if not stat.S_ISREG(st.st_mode):
            return "unreadable", f"not a regular file ({_KINDS.get(stat.S_IFMT(st.st_mode), 'special file')})"
    try:
        return storage.read_bytes(path)
    except FileNotFoundError:
        return "missing", "file does not exist"
    except IsADirectoryError:
        return "unreadable", "path is a folder"
    except OSError as exc:
        reason = "symlink_loop" if exc.errno == errno.ELOOP else "unreadable"
        return reason, exc.strerror or str(exc)


def read_and_prepare(source: str, ref: InputRef, label: int, options: ImageOptions):
    """Reads one input; returns ((framed record bytes, converted) or a Reject, input signature)."""
    path = storage.input_path(source, ref.path)
    sig = None if storage.is_remote(path) else storage.signature(path)  # before reading: a later change shows
    data = read_input(path)
    if isinstance(data, tuple):
        return Reject(ref.path, *data), sig or ""
    sig = sig if sig is not None else storage.signature(path, data)
    try:
        image = prepare_image(data, options)
    except ImageRejected as exc:
        return Reject(ref.path, exc.reason, exc.detail), sig
    record = ImageRecord.build(image.encoded, image.format, image.height, image.width, image.channels,
                               label, ref.label, ref.path)
    return (frame(record.to_bytes()), image.converted), sig


class _Spill:
    """A chunk's spill file, appended to by the pool threads in the order they finish.

    The pool threads write their own records, so that all per-image work runs
    on the `workers` threads and the runner's thread only passes references on.
    Records land in completion order; each reference keeps its offset.
    """

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()
        self.size = 0

    def append(self, data: bytes) -> int:
        """Writes `data`; returns its offset."""
        with self._lock:
            offset = self.size
            self._stream.write(data)
            self.size += len(data)
        return offset


class PrepareChunk(PooledDoFn):
    """chunk id -> (OK, [PreparedRef]) for its good inputs and (REJECT, [Reject]) for its bad
    ones, plus (REUSED, chunk id) when `reuse` finds the chunk complete from an interrupted run.

    One element per chunk and kind, not one per input: Beam's cost per element
    (coders, several transforms) runs on the runner's thread, outside the pool,
    and would otherwise be a serial cost per image. After the spill file is
    renamed into place, the chunk's outcomes are recorded in its index (see
    checkpoints.py), which a resumed run emits instead of reading the images again.
    """

    def __init__(self, source: str, tmp_dir: str, labels: tuple[str, ...], options: ImageOptions, workers: int | None,
                 reuse: bool = False):
        super().__init__(workers)
        self._source = source
        self._tmp_dir = tmp_dir
        self._label_ids = {name: i for i, name in enumerate(labels)}
        self._options = options
        self._reuse = reuse
        self._prepared = Metrics.counter("prep", "examples_prepared")
        self._rejected = Metrics.counter("prep", "examples_rejected")

    def _one(self, ref: InputRef, spill: "_Spill"):
        """Runs on a pool thread: prepares one input and appends its record to the spill."""
        result, signature = read_and_prepare(self._source, ref, self._label_ids[ref.label], self._options)
        if isinstance(result, Reject):
            return result, signature
        data, converted = result
        return (spill.append(data), len(data), converted), signature

    def process(self, chunk: int):
        path = spill_path(self._tmp_dir, chunk)
        if self._reuse:
            recorded = checkpoints.read_chunk_index(self._tmp_dir, chunk, path)
            if recorded is not None:
                yield REUSED, chunk
                yield from _batches([(kind, PreparedRef(*f) if kind == OK else Reject(*f))
                                     for kind, f in recorded.outcomes])
                return
        checkpoints.pause_for_tests("chunk")
        refs = [InputRef(*r) for r in json.loads(storage.read_bytes(listing_path(self._tmp_dir, chunk)))]
        outcomes, signatures = [], []
        with storage.open_write(path + ".part") as f:
            spill = _Spill(f)
            for ref, (result, signature) in zip(refs, self._pool.map(lambda r: self._one(r, spill), refs)):
                signatures.append(signature)
                if isinstance(result, Reject):
                    outcomes.append((REJECT, result))
                else:
                    offset, length, converted = result
                    outcomes.append((OK, PreparedRef(ref.path, self._label_ids[ref.label], ref.split or "", chunk,
                                                     offset, length, converted)))
        storage.rename(path + ".part", path)
        checkpoints.write_chunk_index(self._tmp_dir, chunk, outcomes, spill.size, signatures)
        rejected = sum(kind == REJECT for kind, _ in outcomes)
        self._rejected.inc(rejected)
        self._prepared.inc(len(outcomes) - rejected)
        yield from _batches(outcomes)


def _batches(outcomes):
    """[(kind, value)] -> (OK, [PreparedRef]) and (REJECT, [Reject]), each only if not empty."""
    for kind in (OK, REJECT):
        values = [value for k, value in outcomes if k == kind]
        if values:
            yield kind, values
