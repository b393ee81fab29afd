"""The ArrayRecord format's owner: shards that Grain, `tfds ... .as_data_source()` and the
`array_record` package read by position.

An ArrayRecord file is a Riegeli file of chunks (each with a hash of its header and data)
and a footer indexing them; with ``group_size:1`` each record is its own chunk, so reading
record i reads that chunk alone. The records are the same bytes as a TFRecord shard's,
taken out of the work files' framing (`FrameSplitter`).

The `array_record` package (imported here only, lazily) reads and writes local files, so a
shard bound for a remote OUTPUT is written to a local temporary file and copied through
`prep.core.storage`; a remote shard is copied to a local one to be read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import prep.core.formats.local as local
from prep.core import storage
from prep.core.errors import RecordError
from prep.core.formats.base import FrameSplitter, ScanResult, ShardFormat, ShardWriter

# Random access first: one record per chunk, so a read decodes only its record; no compression,
# as the records are mostly JPEG or PNG bytes that zstd would not shrink (docs/benchmarks.md).
DEFAULT_OPTIONS = "group_size:1,uncompressed"
_READ_IN_ORDER = "readahead_buffer_size:16777216"  # 16 MiB read ahead when records are read in order
_RANDOM_ACCESS = "readahead_buffer_size:0"  # no read ahead: a read fetches its own chunk only
_BATCH = 64  # records read at a time in order


def _module() -> Any:
    from array_record.python import array_record_module

    return array_record_module


def _open_reader(path: str, name: str, options: str) -> Any:
    try:
        reader = _module().ArrayRecordReader(path, options)
    except RuntimeError as exc:
        raise RecordError(f"{name}: not a readable ArrayRecord file: {exc}") from None
    if not reader.ok():
        with contextlib.suppress(RuntimeError):  # raised again, without a reason
            reader.close()
        raise RecordError(
            f"{name}: not a readable ArrayRecord file: its footer, which indexes the records, is "
            "missing or damaged (is the file cut short?)"
        )
    return reader


class _Writer(ShardWriter):
    def __init__(self, path: str, options: str) -> None:
        self._path = path
        if storage.is_remote(path):
            self._local = local.temp_file(path)
        else:
            self._local = path
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # as storage.open_write does
        self._splitter = FrameSplitter()
        self._writer = _module().ArrayRecordWriter(self._local, options)

    def write(self, framed: bytes | memoryview) -> None:
        for record in self._splitter.feed(framed):
            self._writer.write(record)

    def finish(self, size: int, sha256: str) -> tuple[int, str]:
        if self._splitter.pending:
            self.abort()
            raise RuntimeError(f"internal error: {self._path} was given a record cut short")
        self._writer.close()
        if self._local == self._path:
            return storage.sha256_file(self._path)
        try:
            return local.upload(self._local, self._path)
        finally:
            local.remove(self._local)

    def abort(self) -> None:
        with contextlib.suppress(Exception):  # the failure may have been the writer's own
            self._writer.close()
        if self._local != self._path:
            local.remove(self._local)


class _Records:
    """A local ArrayRecord file's records by position; removes a temporary copy on close."""

    def __init__(self, path: str, name: str, temporary: bool) -> None:
        self._path, self._temporary = path, temporary
        self._reader = _open_reader(path, name, _RANDOM_ACCESS)

    def __len__(self) -> int:
        return int(self._reader.num_records())

    def __getitem__(self, index: int) -> bytes:
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} of {len(self)}")
        return bytes(self._reader.read([index])[0])

    def read_range(self, start: int, stop: int) -> list[bytes]:
        return list(self._reader.read(start, stop)) if start < stop else []

    def close(self) -> None:
        self._reader.close()
        if self._temporary:
            local.remove(self._path)


def _in_order(path: str, name: str, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """(index, record) of a local file from `start` on; RecordError naming the first damaged record."""
    reader = _open_reader(path, name, _READ_IN_ORDER)
    try:
        count = reader.num_records()
        for first in range(start, count, _BATCH):
            last = min(first + _BATCH, count)
            try:
                batch = reader.read(first, last)
            except RuntimeError:
                batch = []
                for index in range(first, last):  # find the damaged record: each is its own chunk
                    try:
                        batch.append(reader.read([index])[0])
                    except RuntimeError as exc:
                        yield from enumerate(batch, first)
                        raise RecordError(f"{name}: record {index}: {exc}") from None
            yield from enumerate(batch, first)
    finally:
        reader.close()


class ArrayRecordFormat(ShardFormat):
    name = "array_record"
    suffix = ".array_record"
    tfds_format = "array_record"
    default_options = DEFAULT_OPTIONS

    def check_options(self, options: str | None) -> str | None:
        """`options` (``group_size:1,uncompressed`` when None) if the writer takes them, else ValueError."""
        options = DEFAULT_OPTIONS if options is None else options
        probe = local.temp_file("options.array_record")
        try:
            _module().ArrayRecordWriter(probe, options).close()
        except ValueError as exc:
            raise ValueError(f"--array-record-options {options!r}: {exc}") from None
        finally:
            local.remove(probe)
        return options

    def open_writer(self, path: str, options: str | None = None) -> ShardWriter:
        return _Writer(path, DEFAULT_OPTIONS if options is None else options)

    def records(self, path: str, name: str) -> Iterator[bytes]:
        with local.local_copy(path) as file:
            for _, record in _in_order(file, name):
                yield record

    def open(self, path: str) -> _Records:
        if not storage.is_remote(path):
            return _Records(path, path, temporary=False)
        return _Records(local.fetch(path), path, temporary=True)

    def scan(
        self, path: str, name: str, result: ScanResult, on_block: Callable[[int], None] | None = None
    ) -> Iterator[tuple[int, bytes]]:
        digest = hashlib.sha256()

        def hashed(block: bytes) -> None:
            digest.update(block)
            result.size += len(block)
            if on_block is not None:
                on_block(len(block))

        # Hashed first, in one pass (copied on the way when remote): Riegeli's reader reads
        # the footer before the records, so the two reads cannot share one stream.
        if storage.is_remote(path):
            file = local.fetch(path, hashed)
        else:
            file = path
            with open(path, "rb") as f:
                while block := f.read(local.BLOCK):
                    hashed(block)
        result.sha256 = digest.hexdigest()
        try:
            for index, record in _in_order(file, name):
                result.records = index + 1
                yield index, record
        except RecordError as exc:
            result.error = (result.records, str(exc).removeprefix(f"{name}: "))
        finally:
            if file != path:
                local.remove(file)


ARRAY_RECORD = ArrayRecordFormat()
