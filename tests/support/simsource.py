"""The virtual SOURCE of `simfs://` (tests/support/simfs.py): its names and its pictures, made from the names.

`simfs://src/<C>x<P>[d<K>]/class-CCCC/img-NNNNNNN.jpg` is picture N of class C, one of C classes of P images
each. Each picture is a 64x64 JPEG of random 8x8 grey blocks (seeded by class and number), tinted by class,
padded with a JPEG comment to IMAGE_BYTES so that a listing knows every size without drawing anything;
their pHashes are far apart, so dedupe groups none of them. With `d<K>`, every K-th image of a class
(number % K == K - 1) repeats the picture of the one before it, byte for byte: an exact duplicate.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Iterator

import numpy as np
from apache_beam.io.filesystem import BeamIOError

ROOT = "simfs://src"
IMAGE_BYTES = 2048  # every source image, padded: a listing needs no drawing
IMAGE_SIDE = 64
_SPEC = re.compile(r"(\d+)x(\d+)(?:d(\d+))?")
_IMAGE = re.compile(r"class-(\d{4})/img-(\d{7})\.jpg")


def parse_source(path: str) -> tuple[str, int, int, int | None, str]:
    """(spec folder URL, classes, per_class, duplicate_every, rest of the key) of a source path."""
    key = path[len(ROOT) + 1 :]
    spec, _, rest = key.partition("/")
    m = _SPEC.fullmatch(spec)
    if not m:
        raise BeamIOError(f"not a simfs source folder: {path}", {})
    dup = int(m.group(3)) if m.group(3) else None
    return f"{ROOT}/{spec}", int(m.group(1)), int(m.group(2)), dup, rest


def source_image(path: str) -> tuple[int, int] | None:
    """(class, number of the picture drawn) of an existing source image, or None."""
    _, classes, per_class, dup, rest = parse_source(path)
    m = _IMAGE.fullmatch(rest)
    if not m:
        return None
    c, n = int(m.group(1)), int(m.group(2))
    if c >= classes or n >= per_class:
        return None
    if dup and n % dup == dup - 1:
        n -= 1
    return c, n


def source_names(classes: int, per_class: int) -> Iterator[str]:
    """Keys under a source folder, in key order."""
    return (f"class-{c:04d}/img-{n:07d}.jpg" for c in range(classes) for n in range(per_class))


@functools.lru_cache(maxsize=4096)
def image_bytes(c: int, n: int) -> bytes:
    """The JPEG of picture n of class c: 8x8 random grey blocks, tinted by class, padded to IMAGE_BYTES."""
    from PIL import Image

    rng = np.random.default_rng([c, n, 7919])
    blocks = rng.integers(0, 256, size=(8, 8), dtype=np.uint8)
    grey = np.kron(blocks, np.ones((IMAGE_SIDE // 8, IMAGE_SIDE // 8), dtype=np.uint8))
    tint = np.array([(c * 53) % 256, (c * 97) % 256, (c * 29) % 256], dtype=np.uint16)
    rgb = ((grey[..., None].astype(np.uint16) * 3 + tint) // 4).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(out, "JPEG", quality=90)
    data = out.getvalue()
    pad = IMAGE_BYTES - len(data) - 4  # a COM segment: FF FE, 2-byte length, payload
    if pad < 0:
        raise ValueError(f"image {c}/{n} encodes to {len(data)} bytes, more than IMAGE_BYTES")
    comment = b"\xff\xfe" + (pad + 2).to_bytes(2, "big") + b"\0" * pad
    return data[:2] + comment + data[2:]
