"""What a shard file format must do: the interface every format's owner implements.

A conversion's work files hold TFRecord-framed records (`prep.core.tfrecord`); a shard's
container is the format's. So a writer takes a stream of framed records, cut anywhere,
and writes each record's bytes, unchanged, into its container; the same records in the
same order give the same records in any format. Readers give records back in order
(`records`), one at a time by position (`open`), or read the whole file once to check it
(`scan`, for `prep verify`).
"""

from __future__ import annotations

import abc
import dataclasses
import struct
from collections.abc import Callable, Iterator
from typing import Protocol

from prep.core.tfrecord import FOOTER, HEADER


class RecordSource(Protocol):
    """Records of one shard by position, as Grain's `RandomAccessDataSource` takes them."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> bytes: ...

    def read_range(self, start: int, stop: int) -> list[bytes]:
        """Records `start` .. `stop` - 1, in order, in one call."""
        ...

    def close(self) -> None: ...


@dataclasses.dataclass
class ScanResult:
    """What reading a shard file once found, filled in as `ShardFormat.scan` is iterated.

    Attributes:
        size, sha256: of the whole file.
        records: records read intact before any damage.
        error: (record index, message) where the container is damaged; None if it is whole.
        record_sizes: a TFRecord's framed record sizes, in file order (for its index); empty otherwise.
    """

    size: int = 0
    sha256: str = ""
    records: int = 0
    error: tuple[int, str] | None = None
    record_sizes: list[int] = dataclasses.field(default_factory=list)


class ShardWriter(abc.ABC):
    """Writes one shard: framed records in, the container's file out."""

    @abc.abstractmethod
    def write(self, framed: bytes | memoryview) -> None:
        """Takes the next bytes of a stream of TFRecord-framed records, cut anywhere. The caller may
        reuse the buffer once this returns (`shard_copy.copy_records` does): keep no view of it."""

    @abc.abstractmethod
    def finish(self, size: int, sha256: str) -> tuple[int, str]:
        """Closes the file; returns its (bytes, sha256), given those of the framed stream written
        (a TFRecord's file is that stream). Raises if the stream ended inside a record."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Closes the file after a failure, raising nothing more. A file at the path given stays, as
        any temporary file of a failed run does, for --resume or --overwrite to clear; a copy of
        its own outside it (ArrayRecord's, for a remote path) is deleted."""


class ShardFormat(abc.ABC):
    """The owner of one file format: its names and every read and write of its container.

    Attributes:
        name: the value of ``--file-format`` and of the manifest's ``options.file_format``.
        suffix: of its shard files (`prep.core.naming.ShardName`).
        tfds_format: tensorflow-datasets' name of it (``DatasetInfo.file_format``).
    """

    name: str
    suffix: str
    tfds_format: str
    default_options: str | None = None  # its writer's options, None if it takes none

    def check_options(self, options: str | None) -> str | None:
        """The writer options to use (default filled in); raises ValueError if it takes none."""
        if options is not None:
            raise ValueError(f"the {self.name} format takes no writer options")
        return None

    @abc.abstractmethod
    def open_writer(self, path: str, options: str | None = None) -> ShardWriter:
        """A writer of a new shard at `path` (local or remote), with `check_options`' options."""

    @abc.abstractmethod
    def records(self, path: str, name: str) -> Iterator[bytes]:
        """The shard's records in order, each checked as the container allows.

        Raises:
            RecordError: naming `name` and the record, where the container is damaged.
        """

    @abc.abstractmethod
    def open(self, path: str) -> RecordSource:
        """The shard's records by position (a remote file is first copied to a local one)."""

    def count(self, path: str) -> int:
        """How many records the shard holds, as its container says."""
        source = self.open(path)
        try:
            return len(source)
        finally:
            source.close()

    @abc.abstractmethod
    def scan(
        self, path: str, name: str, result: ScanResult, on_block: Callable[[int], None] | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """Reads the file once: yields (index, record) in order and fills `result` (size, sha256,
        records, and where it is damaged, which ends the iteration without raising).

        Raises:
            OSError: the file cannot be read.
        """


class FrameSplitter:
    """Cuts a stream of TFRecord-framed records, arriving in pieces cut anywhere, into records.

    The work files' frames were checked when read (or written by us), so only lengths are read.
    """

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, piece: bytes | memoryview) -> list[bytes]:
        """The records completed by `piece`, in order."""
        self._pending += piece
        out, start = [], 0
        with memoryview(self._pending) as view:
            while len(view) - start >= HEADER:
                (length,) = struct.unpack_from("<Q", view, start)
                end = start + HEADER + length + FOOTER
                if end > len(view):
                    break
                out.append(view[start + HEADER : end - FOOTER].tobytes())
                start = end
        del self._pending[:start]
        return out

    @property
    def pending(self) -> int:
        """Bytes of a record not yet complete."""
        return len(self._pending)
