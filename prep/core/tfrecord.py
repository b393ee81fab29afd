"""TFRecord framing: write records and read them back with every CRC checked.

Each record is ``uint64 length | uint32 masked_crc32c(length) | data |
uint32 masked_crc32c(data)``, little-endian, as TensorFlow writes it.
CRC32C comes from the crc32c package (hardware instructions, C), which lets go of the GIL while it
sums a piece of 32 KiB or more (an image): the prepare and write stages' threads frame and check
records at once. google-crc32c, the one Beam uses, holds it (docs/benchmarks.md, session 24).

`record_index` gives the per-record index NVIDIA DALI's TFRecord reader needs
(and the `tfrecord` package's readers use to shard and shuffle): one
``"{offset} {size}\n"`` line per record, `size` being the whole framed record,
exactly what DALI's `tfrecord2idx` tool writes.
"""

from __future__ import annotations

import struct
import typing
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import crc32c

from prep.core.errors import RecordError

HEADER = 12  # length + its CRC
FOOTER = 4  # data CRC


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    return _mask(crc32c.crc32c(data))


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_around(head: bytes, value: bytes, tail: bytes) -> tuple[bytes, bytes]:
    """(before, after) such that before + value + after == frame(head + value + tail),
    without copying `value` into one buffer with the others."""
    length = struct.pack("<Q", len(head) + len(value) + len(tail))
    return length + struct.pack("<I", masked_crc32c(length)) + head, tail + _data_crc(head, value, tail)


def framed_around_matches(before: bytes, value: bytes, after: bytes) -> bool:
    """Whether before + value + after is a whole record whose data CRC holds, as
    `frame_around` makes it: checks that `value` is the bytes it was framed with."""
    if len(before) < HEADER or len(after) < FOOTER:
        return False
    if struct.unpack("<Q", before[:8])[0] != len(before) - HEADER + len(value) + len(after) - FOOTER:
        return False
    return _data_crc(before[HEADER:], value, after[:-FOOTER]) == after[-FOOTER:]


def _data_crc(*pieces: bytes) -> bytes:
    """The framing's masked CRC32C of the pieces' concatenation, as 4 bytes, without joining them."""
    crc = 0
    for piece in pieces:
        crc = crc32c.crc32c(piece, crc)
    return struct.pack("<I", _mask(crc))


def frame(data: bytes) -> bytes:
    """The bytes of one TFRecord holding `data`."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), data, struct.pack("<I", masked_crc32c(data))))


class Frame(typing.NamedTuple):
    """One framed record as read: its index and byte offset in the file, its data, and
    whether the data's CRC holds (the length's always does, or no frame is given)."""

    index: int  # type: ignore[assignment]  # shadows tuple.index, which NamedTuple permits
    offset: int
    data: bytes
    intact: bool

    @property
    def size(self) -> int:
        """The whole framed record's bytes."""
        return HEADER + len(self.data) + FOOTER


def frames(stream: BinaryIO, name: str = "<stream>") -> Iterator[Frame]:
    """Yields each record's `Frame`, stepping over a record whose data CRC fails: its
    length is still trusted. A record that cannot be framed ends the file for a reader.

    Raises:
        RecordError: naming the file, record index and offset, on a truncated
            header or record or a length CRC mismatch (nothing after it can be found).
    """
    index = offset = 0
    while True:
        header = stream.read(HEADER)
        if not header:
            return
        where = f"{name}: record {index} at byte {offset}"
        if len(header) < HEADER:
            raise RecordError(f"{where}: truncated header ({len(header)} of {HEADER} bytes)")
        length_bytes, (length_crc,) = header[:8], struct.unpack("<I", header[8:])
        if masked_crc32c(length_bytes) != length_crc:
            raise RecordError(f"{where}: length CRC mismatch")
        (length,) = struct.unpack("<Q", length_bytes)
        body = stream.read(length + FOOTER)
        if len(body) < length + FOOTER:
            raise RecordError(f"{where}: truncated record ({len(body)} of {length + FOOTER} bytes)")
        data, (data_crc,) = body[:length], struct.unpack("<I", body[length:])
        yield Frame(index, offset, data, masked_crc32c(data) == data_crc)
        index += 1
        offset += HEADER + length + FOOTER


def read_records(stream: BinaryIO, name: str = "<stream>") -> Iterator[tuple[int, int, bytes]]:
    """Yields (record index, byte offset, data) for each record, checking both CRCs.

    Raises:
        RecordError: naming the file, record index and offset, on a truncated
            record or a CRC mismatch.
    """
    for frame_ in frames(stream, name):
        if not frame_.intact:
            raise RecordError(f"{name}: record {frame_.index} at byte {frame_.offset}: data CRC mismatch")
        yield frame_.index, frame_.offset, frame_.data


def record_index(sizes: Iterable[int]) -> bytes:
    """The index of a file holding framed records of `sizes` bytes each, in order.

    Args:
        sizes: each record's framed size (`HEADER` + data + `FOOTER`), in file order.

    Returns:
        ASCII lines ``"{offset} {size}\n"``, offsets starting at 0.
    """
    lines, offset = [], 0
    for size in sizes:
        lines.append(f"{offset} {size}\n")
        offset += size
    return "".join(lines).encode("ascii")
