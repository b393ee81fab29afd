"""Reading, checking and converting images; their records go to spill files.

Each element is a chunk id. The driver wrote the chunk's listing to
``.prep-tmp/listing/chunk-NNNNNN.json``, so the pipeline graph holds only
chunk ids, however many inputs there are. A pool of `workers` threads works on
the chunk's images (Pillow releases the GIL while decoding, resizing and
encoding); the framed TFRecord bytes of each good image are appended, in input
order, to the chunk's spill file, and only a small `PreparedRef` travels on.
"""

from __future__ import annotations

import concurrent.futures
import os
import json
import typing

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_jobs import storage
from prep.images import ImageOptions, ImageRejected, prepare_image
from prep.schema import ImageRecord
from prep.sources import InputRef, Reject
from prep.tfrecord import frame

OK, REJECT = "ok", "reject"


class PreparedRef(typing.NamedTuple):
    """A checked example whose framed record waits in a spill file.

    A NamedTuple, not a dataclass: Beam encodes it field by field, many times
    faster than pickling a dataclass, which matters at millions of refs.
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


def read_and_prepare(source: str, ref: InputRef, label: int, options: ImageOptions):
    """Reads one input; returns (framed record bytes, converted) or a Reject."""
    try:
        data = storage.read_bytes(storage.join(source, ref.path))
    except FileNotFoundError:
        return Reject(ref.path, "missing", "file does not exist")
    except IsADirectoryError:
        return Reject(ref.path, "unreadable", "path is a folder")
    except OSError as exc:
        reason = "symlink_loop" if exc.errno == 40 else "unreadable"
        return Reject(ref.path, reason, exc.strerror or str(exc))
    try:
        image = prepare_image(data, options)
    except ImageRejected as exc:
        return Reject(ref.path, exc.reason, exc.detail)
    record = ImageRecord.build(image.encoded, image.format, image.height, image.width, image.channels,
                               label, ref.label, ref.path)
    return frame(record.to_bytes()), image.converted


class PrepareChunk(beam.DoFn):
    """chunk id -> (OK, PreparedRef) per good input and (REJECT, Reject) per bad one."""

    def __init__(self, source: str, tmp_dir: str, labels: tuple[str, ...], options: ImageOptions, workers: int | None):
        self._source = source
        self._tmp_dir = tmp_dir
        self._label_ids = {name: i for i, name in enumerate(labels)}
        self._options = options
        self._workers = workers
        self._pool = None
        self._prepared = Metrics.counter("prep", "examples_prepared")
        self._rejected = Metrics.counter("prep", "examples_rejected")

    def setup(self):
        self._pool = concurrent.futures.ThreadPoolExecutor(self._workers or os.cpu_count() or 1, thread_name_prefix="prepare")

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def _one(self, ref: InputRef):
        return read_and_prepare(self._source, ref, self._label_ids[ref.label], self._options)

    def process(self, chunk: int):
        refs = [InputRef(*r) for r in json.loads(storage.read_bytes(listing_path(self._tmp_dir, chunk)))]
        path = spill_path(self._tmp_dir, chunk)
        offset = 0
        outcomes = []
        with storage.open_write(path + ".part") as f:
            for ref, result in zip(refs, self._pool.map(self._one, refs)):
                if isinstance(result, Reject):
                    outcomes.append((REJECT, result))
                    continue
                data, converted = result
                f.write(data)
                outcomes.append((OK, PreparedRef(ref.path, self._label_ids[ref.label], ref.split or "", chunk,
                                                 offset, len(data), converted)))
                offset += len(data)
        storage.rename(path + ".part", path)
        rejected = sum(kind == REJECT for kind, _ in outcomes)
        self._rejected.inc(rejected)
        self._prepared.inc(len(outcomes) - rejected)
        yield from outcomes
