"""What a JPEG's or PNG's header declares, read without Pillow, and what decoding it may cost.

`--isolate auto` prepares an image in the calling thread only when `predictable` says its
header promises a decode within --max-image-memory and a quarter of --image-timeout;
everything else goes to a sandboxed process (prep/core/run/sandbox.py). Pure functions over bytes.
"""

from __future__ import annotations

import struct
import typing

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Header(typing.NamedTuple):
    """What a JPEG's or PNG's header declares, read without Pillow."""

    format: str  # "jpeg" or "png"
    width: int
    height: int
    components: int  # JPEG components, or PNG samples per pixel
    scans: int  # scans a JPEG's decode may take (see read_header); 1 for PNG
    bit_depth: int


_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_JPEG_PROGRESSIVE = {0xC2, 0xC6, 0xCA, 0xCE}
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def read_header(data: bytes) -> Header | None:
    """The declared size of a JPEG or PNG, or None for anything else (or a header we cannot read)."""
    if data.startswith(_PNG_SIGNATURE) and len(data) >= 33 and data[12:16] == b"IHDR":
        width, height, depth, colour = struct.unpack_from(">IIBB", data, 16)
        if colour not in _PNG_SAMPLES:
            return None
        return Header("png", width, height, _PNG_SAMPLES[colour], 1, depth)
    if not data.startswith(b"\xff\xd8"):
        return None
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if marker in _JPEG_SOF:
            if pos + 10 > len(data):
                return None
            depth, height, width, components = struct.unpack_from(">BHHB", data, pos + 4)
            if marker not in _JPEG_PROGRESSIVE:
                # A sequential JPEG codes each component in one scan, so it has at most
                # `components` scans (libjpeg refuses more), without counting them (~100 us).
                return Header("jpeg", width, height, components, max(1, components), depth)
            # FF DA never occurs in entropy-coded data (an FF there is followed by 00), so this
            # counts scans, plus any in an embedded thumbnail: an estimate that errs high.
            return Header("jpeg", width, height, components, max(1, data.count(b"\xff\xda", pos)), depth)
        if marker == 0xDA or length < 2:
            return None
        pos += 2 + length
    return None


# Per pixel, at most, while a JPEG or PNG is decoded, converted and resized (prepare_image):
# the decoded image, its converted copies (a 16-bit PNG goes through float64 arrays, a
# transparent one through three RGBA images) and, for a JPEG of several scans, libjpeg's
# whole-image coefficient buffer (2 bytes per sample). Measured: docs/convert.md "Images".
_PNG_BYTES_PER_PIXEL = 20  # measured: 19.2 for an RGBA PNG, 7.7 for 16-bit gray
_JPEG_BYTES_PER_PIXEL = 8  # plus the samples, three times over for a JPEG of several scans
# A pessimistic decode time per pixel and scan (this machine decodes 5-15 ns); an image is
# decoded in the calling thread only if this predicts at most a quarter of --image-timeout.
SECONDS_PER_PIXEL_SCAN = 50e-9


def decode_cost(header: Header) -> tuple[int, float]:
    """(bytes, seconds) that preparing an image with this header may take, at most."""
    pixels = header.width * header.height
    if header.format == "png":
        return pixels * _PNG_BYTES_PER_PIXEL, pixels * SECONDS_PER_PIXEL_SCAN * 2  # Adam7: 2 passes
    samples = header.components * (3 if header.scans > 1 else 1)
    return pixels * (samples + _JPEG_BYTES_PER_PIXEL), pixels * header.scans * SECONDS_PER_PIXEL_SCAN


class DecodeBudget(typing.Protocol):
    """What an image's decode may cost (`image_rules.ImageOptions`, which imports this module)."""

    @property
    def max_image_memory(self) -> int: ...

    @property
    def image_timeout(self) -> float: ...


def predictable(data: bytes, options: DecodeBudget) -> bool:
    """Whether `data` may be prepared in the calling thread under `isolate=auto`: a JPEG or PNG
    whose header promises a decode within `options.max_image_memory` and a quarter of
    `options.image_timeout` (an ImageOptions). Everything else, Image.open included, belongs
    in a sandboxed process."""
    header = read_header(data)
    if header is None or header.width < 1 or header.height < 1:
        return False
    memory, seconds = decode_cost(header)
    return memory <= options.max_image_memory and seconds <= options.image_timeout / 4
