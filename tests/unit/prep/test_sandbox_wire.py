"""The sandbox's messages (prep/core/run/sandbox_wire.py): what goes in comes out, and an answer that is not
one reads as MALFORMED, never as code or a half-built image."""

import pickle
import struct
from multiprocessing import Pipe

import pytest

from prep.core.image_rules import ImageOptions, PreparedImage
from prep.core.run.sandbox_wire import Answer, Kind, read_answer, read_request, send_answer, send_request


@pytest.fixture
def pipe():
    recv, send = Pipe(duplex=False)
    yield recv, send
    recv.close()
    send.close()


def test_a_request_arrives_as_sent(pipe):
    recv, send = pipe
    options = ImageOptions(
        resize=256, image_format="png", quality=80, max_pixels=1000, image_timeout=2.5, isolate="all"
    )
    send_request(send, b"\xff\xd8 an image", options)
    assert read_request(recv) == (b"\xff\xd8 an image", options)


@pytest.mark.parametrize(
    "answer",
    [
        Answer(Kind.OK, PreparedImage(b"\x89PNG bytes", "png", 3, 4, 1, True, (4, 3), 6), message="libpng warning"),
        Answer(Kind.OK, PreparedImage(b"", "jpeg", 1, 1, 3, False)),
        Answer(Kind.REJECTED, reason="image_memory", detail="needs more than 64 MiB", message="tiff: bad tag"),
        Answer(Kind.REJECTED, reason="corrupt", detail="lone surrogates \udcff \ud800 survive", message="\u00e9"),
    ],
)
def test_an_answer_arrives_as_sent(pipe, answer):
    recv, send = pipe
    send_answer(send, answer)
    assert read_answer(recv) == answer


def _raw(pipe, header: bytes, payload: bytes = b"") -> Answer:
    recv, send = pipe
    send.send_bytes(header)
    send.send_bytes(payload)
    return read_answer(recv)


class _Boom:
    def __reduce__(self):
        return (print, ("ran code",))


_OK_HEAD = struct.pack("<B?BBIIII", 1, True, 1, 6, 3, 4, 4, 3)


def _texts(*texts: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(t)) + t for t in texts)


def test_a_hand_made_answer_reads_as_the_format_says(pipe):
    assert _raw(pipe, _OK_HEAD + _texts(b"png", "caf\u00e9".encode()), b"img") == Answer(
        Kind.OK, PreparedImage(b"img", "png", 3, 4, 1, True, (4, 3), 6), message="caf\u00e9"
    )


@pytest.mark.parametrize(
    "header, payload",
    [
        (pickle.dumps(("ok", _Boom(), "")), b""),  # what the pipe held before: never unpickled now
        (b"", b""),
        (bytes([9]) + _texts(b"a", b"b", b"c"), b""),  # no such kind
        (bytes([3]), b""),  # the parent's own kinds (DIED) are not answers
        (_OK_HEAD[:-1], b"img"),  # cut short
        (_OK_HEAD + _texts(b"png"), b"img"),  # a text missing
        (_OK_HEAD + _texts(b"png", b"") + b"x", b"img"),  # bytes after it
        (_OK_HEAD + struct.pack("<I", 1000) + b"png", b"img"),  # a text longer than the header
        (_OK_HEAD + _texts(b"\xff\xfe", b""), b"img"),  # not UTF-8
        (bytes([2]) + _texts(b"image_memory", b"too big", b""), b"an image with a rejection"),
    ],
)
def test_an_answer_that_is_not_one_is_malformed(pipe, header, payload, capsys):
    assert _raw(pipe, header, payload) == Answer(Kind.MALFORMED)
    assert "ran code" not in capsys.readouterr().out
