"""The TFRecord format's owner: shards as TensorFlow writes them, framing in `prep.core.tfrecord`.

A TFRecord shard is the work files' framed stream itself, so its writer copies bytes as
they come. Random access needs each record's offset: `open` reads the headers once and
seeks over the data.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
from collections.abc import Callable, Iterator
from typing import BinaryIO, cast

from prep.core import storage
from prep.core.errors import RecordError
from prep.core.formats.base import ScanResult, ShardFormat, ShardWriter
from prep.core.formats.local import local_copy
from prep.core.tfrecord import FOOTER, HEADER, masked_crc32c, read_records

BLOCK = 1 << 20  # big enough that system calls vanish beside the bytes (docs/design.md)


class HashingReader:
    """A read-only stream over `raw` that hashes every byte once, as it reads big blocks.

    `read(n)` is served from the current block, so `read_records` can ask for a
    12-byte header and then one record without a system call each.
    """

    def __init__(self, raw: BinaryIO, on_block: Callable[[int], None] | None = None, block: int = BLOCK):
        self._raw = raw
        self._on_block = on_block
        self._block = block
        self._buffer = b""
        self._pos = 0
        self.sha256 = hashlib.sha256()
        self.size = 0

    def _next_block(self) -> bytes:
        block = self._raw.read(self._block)
        if block:
            self.sha256.update(block)
            self.size += len(block)
            if self._on_block is not None:
                self._on_block(len(block))
        return block

    def read(self, n: int) -> bytes:
        start, end = self._pos, self._pos + n
        if end <= len(self._buffer):
            self._pos = end
            return self._buffer[start:end]
        parts = [self._buffer[start:]]
        need = n - len(parts[0])
        self._buffer, self._pos = b"", 0
        while need > 0:
            block = self._next_block()
            if not block:
                break
            if len(block) > need:
                parts.append(block[:need])
                self._buffer, self._pos = block, need
                break
            parts.append(block)
            need -= len(block)
        return b"".join(parts)

    def drain(self) -> None:
        """Reads (and hashes) the rest of the file."""
        self._buffer, self._pos = b"", 0
        while self._next_block():
            pass


def open_raw(path: str) -> BinaryIO:
    """`path` opened for reading without Python's buffer (local), which `HashingReader` replaces."""
    return open(path, "rb", buffering=0) if not storage.is_remote(path) else storage.open_read(path)


class _Writer(ShardWriter):
    def __init__(self, path: str) -> None:
        self._path = path
        self._out = storage.open_write(path)
        # A local file copies what it is given before write returns; a remote writer may keep it, or take bytes only.
        self._copy = storage.is_remote(path)

    def write(self, framed: bytes | memoryview) -> None:
        self._out.write(bytes(framed) if self._copy else framed)

    def finish(self, size: int, sha256: str) -> tuple[int, str]:
        self._out.close()
        return size, sha256

    def abort(self) -> None:
        with contextlib.suppress(Exception):  # the failure may have been the file's own
            self._out.close()


class _Offsets:
    """A local TFRecord's records by position: each record's offset, from its headers. Reads are
    positional (`os.pread`), so threads may share it."""

    def __init__(self, path: str) -> None:
        self._name = path
        self._file = open(path, "rb")
        self._starts: list[int] = []
        offset = 0
        while header := self._file.read(HEADER):
            if len(header) < HEADER or masked_crc32c(header[:8]) != struct.unpack("<I", header[8:])[0]:
                self._file.close()
                raise RecordError(f"{path}: record {len(self._starts)} at byte {offset}: damaged header")
            self._starts.append(offset)
            offset += HEADER + struct.unpack("<Q", header[:8])[0] + FOOTER
            self._file.seek(offset)
        self._starts.append(offset)  # the end of the last record

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, index: int) -> bytes:
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} of {len(self)}")
        return self.read_range(index, index + 1)[0]

    def read_range(self, start: int, stop: int) -> list[bytes]:
        if start >= stop:
            return []
        first, end = self._starts[start], self._starts[stop]
        data = os.pread(self._file.fileno(), end - first, first)
        records = read_records(io.BytesIO(data), f"{self._name} (from byte {first})")
        return [next(records)[2] for _ in range(start, stop)]

    def close(self) -> None:
        self._file.close()


class TFRecordFormat(ShardFormat):
    name = "tfrecord"
    suffix = ".tfrecord"
    tfds_format = "tfrecord"

    def open_writer(self, path: str, options: str | None = None) -> ShardWriter:
        return _Writer(path)

    def records(self, path: str, name: str) -> Iterator[bytes]:
        with storage.open_read(path) as f:
            for _, _, data in read_records(f, name):
                yield data

    def open(self, path: str) -> _Offsets:
        with local_copy(path) as local:
            return _Offsets(local)

    def scan(
        self, path: str, name: str, result: ScanResult, on_block: Callable[[int], None] | None = None
    ) -> Iterator[tuple[int, bytes]]:
        with open_raw(path) as raw:
            stream = HashingReader(raw, on_block)
            end = 0  # the byte where the next record starts
            try:
                # read_records only calls read(n), which HashingReader serves
                for index, offset, data in read_records(cast(BinaryIO, stream), name):
                    result.records, end = index + 1, offset + HEADER + len(data) + FOOTER
                    result.record_sizes.append(end - offset)
                    yield index, data
            except RecordError as exc:
                # read_records names the file, record and offset; the caller names the file.
                where = f"{name}: record {result.records} at byte {end}: "
                result.error = (result.records, f"{str(exc).removeprefix(where)}; the record starts at byte {end}")
                stream.drain()
            result.size, result.sha256 = stream.size, stream.sha256.hexdigest()


TFRECORD = TFRecordFormat()
