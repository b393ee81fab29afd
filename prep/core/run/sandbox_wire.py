"""The messages between `Sandbox` and its worker processes (prep/core/run/sandbox.py), and the answer kinds.

Each message is two `multiprocessing.connection` frames: a header, then the raw bytes
it carries (the image in, the prepared image out; empty for a rejection). Reading one
can build only the types named here, never run code (the worker reads hostile images,
and a corrupted worker's answer must stay data); the image bytes are neither copied
into nor out of an encoding, so that a message costs no more than a pickle did.

    in:   JSON of ImageOptions' fields (made once per options)          + the input's bytes
    out:  _OK: kind, converted, channels, orientation, height, width, stored (w, h);
               then the texts format, message                          + encoded
          _REJECTED: kind; then the texts reason, detail, message       + b""

A text is its UTF-8 length (4 bytes, little-endian) and its bytes. A fixed binary
header rather than JSON for answers: one per image, and packing it is ~20 times cheaper.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import struct
import typing
from multiprocessing.connection import Connection

from prep.core.image_rules import ImageOptions, PreparedImage

_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(ImageOptions))
_OK = struct.Struct("<B?BBIIII")
_REJECTED = struct.Struct("<B")
_LENGTH = struct.Struct("<I")


class Kind(enum.Enum):
    """What became of an image sent to a worker, and its code on the wire. OK and REJECTED come from
    the worker; the parent sees DIED and TIMEOUT itself, and MALFORMED when an answer does not read as one."""

    OK = 1
    REJECTED = 2
    DIED = 3
    TIMEOUT = 4
    MALFORMED = 5


class Answer(typing.NamedTuple):
    """A worker's answer for one image."""

    kind: Kind
    image: PreparedImage | None = None  # OK
    reason: str = ""  # REJECTED: as ImageRejected's
    detail: str = ""
    message: str = ""  # OK, REJECTED: what the codec printed, or its first Python warning ("" if nothing)
    status: int | None = None  # DIED: the exit status (negative: the signal)


def send_request(conn: Connection, data: bytes, options: ImageOptions) -> None:
    conn.send_bytes(_options_header(options))
    conn.send_bytes(data)


def read_request(conn: Connection) -> tuple[bytes, ImageOptions]:
    """Raises EOFError once the parent closed the pipe."""
    options = _options_from(conn.recv_bytes())
    return conn.recv_bytes(), options


# A run sends one ImageOptions: each end encodes or decodes (and checks) it once.
@functools.lru_cache(maxsize=16)
def _options_header(options: ImageOptions) -> bytes:
    return json.dumps({name: getattr(options, name) for name in _OPTION_FIELDS}).encode()


@functools.lru_cache(maxsize=16)
def _options_from(header: bytes) -> ImageOptions:
    return ImageOptions(**json.loads(header))


def send_answer(conn: Connection, answer: Answer) -> None:
    if answer.kind is Kind.OK:
        image = answer.image
        assert image is not None  # an OK answer carries its image
        header = _OK.pack(
            Kind.OK.value, image.converted, image.channels, image.orientation, image.height, image.width, *image.stored
        ) + _texts(image.format, answer.message)
        payload = image.encoded
    else:
        header = _REJECTED.pack(Kind.REJECTED.value) + _texts(answer.reason, answer.detail, answer.message)
        payload = b""
    conn.send_bytes(header)
    conn.send_bytes(payload)


def read_answer(conn: Connection) -> Answer:
    """The answer on `conn`: OK or REJECTED, or MALFORMED when it is not one.

    Raises:
        EOFError, OSError: the worker is gone.
    """
    header, payload = conn.recv_bytes(), conn.recv_bytes()
    try:
        kind = Kind(header[0])
        if kind is Kind.OK:
            _, converted, channels, orientation, height, width, *stored = _OK.unpack_from(header)
            image_format, message = _read_texts(header, _OK.size, 2)
            return Answer(
                kind,
                PreparedImage(payload, image_format, height, width, channels, converted, tuple(stored), orientation),
                message=message,
            )
        if kind is Kind.REJECTED and not payload:
            reason, detail, message = _read_texts(header, _REJECTED.size, 3)
            return Answer(kind, reason=reason, detail=detail, message=message)
    except (ValueError, IndexError, struct.error):  # UnicodeDecodeError is a ValueError
        pass
    return Answer(Kind.MALFORMED)


def _texts(*texts: str) -> bytes:
    return b"".join(_LENGTH.pack(len(b)) + b for b in (t.encode("utf-8", "surrogatepass") for t in texts))


def _read_texts(header: bytes, offset: int, count: int) -> list[str]:
    """`count` texts from `offset`, which must end the header."""
    texts = []
    for _ in range(count):
        (n,), offset = _LENGTH.unpack_from(header, offset), offset + _LENGTH.size
        if offset + n > len(header):
            raise ValueError("a text runs past the header")
        texts.append(header[offset : offset + n].decode("utf-8", "surrogatepass"))
        offset += n
    if offset != len(header):
        raise ValueError("bytes after the header's texts")
    return texts
