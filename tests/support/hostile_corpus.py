"""A corpus of odd and damaged image files in many formats, made with Pillow and a seed.

Each format gets a few base images (modes, sizes, options Pillow writes), and each
base image some seeded damage: truncated, bytes flipped, a run zeroed, another
format's header spliced on, junk appended, its size fields scrambled. Files go
into one class folder per format, as a real third-party corpus might be arranged.
"""

from __future__ import annotations

import io
import pathlib
import random
import struct

import numpy as np
from PIL import Image

from tests.support.imagegen import damaged_deflate_tiff, huge_j2k, icns, ico

# format folder: (Pillow format, file suffix, [(mode, size, save options)])
FORMATS = {
    "jpeg": ("JPEG", "jpg", [("RGB", (48, 32), {}), ("L", (40, 40), {"progressive": True}), ("CMYK", (24, 24), {})]),
    "png": ("PNG", "png", [("RGBA", (40, 30), {}), ("P", (32, 32), {"transparency": 0}), ("I;16", (20, 20), {})]),
    "bmp": ("BMP", "bmp", [("RGB", (37, 21), {}), ("P", (16, 16), {})]),
    "gif": ("GIF", "gif", [("P", (40, 30), {}), ("RGB", (20, 20), {"save_all": True, "frames": 3})]),
    "tiff": (
        "TIFF",
        "tif",
        [
            ("RGB", (40, 30), {"compression": "tiff_lzw"}),
            ("L", (33, 20), {"compression": "tiff_adobe_deflate"}),
            ("RGB", (24, 24), {"compression": "jpeg"}),
            ("I;16", (16, 16), {}),
        ],
    ),
    "webp": ("WEBP", "webp", [("RGB", (40, 30), {"quality": 80}), ("RGBA", (24, 24), {"lossless": True})]),
    "ico": ("ICO", "ico", [("RGBA", (32, 32), {}), ("RGB", (48, 48), {"sizes": [(16, 16), (48, 48)]})]),
    "icns": ("ICNS", "icns", [("RGBA", (64, 64), {})]),
    "jp2": ("JPEG2000", "jp2", [("RGB", (40, 30), {}), ("L", (32, 32), {"irreversible": True})]),
    "j2k": ("JPEG2000", "j2k", [("RGB", (24, 24), {"no_jp2": True})]),
    "tga": ("TGA", "tga", [("RGB", (40, 30), {}), ("RGBA", (20, 20), {"compression": "tga_rle"})]),
    "ppm": ("PPM", "ppm", [("RGB", (40, 30), {}), ("L", (20, 20), {}), ("1", (16, 16), {})]),
    "pcx": ("PCX", "pcx", [("RGB", (40, 30), {}), ("P", (17, 13), {})]),
    "sgi": ("SGI", "rgb", [("RGB", (40, 30), {}), ("L", (20, 20), {})]),
    "im": ("IM", "im", [("RGB", (40, 30), {}), ("L", (20, 20), {})]),
    "dds": ("DDS", "dds", [("RGBA", (32, 32), {}), ("RGB", (16, 16), {})]),
    "spider": ("SPIDER", "spi", [("F", (24, 24), {})]),
    "xbm": ("XBM", "xbm", [("1", (40, 30), {})]),
    "msp": ("MSP", "msp", [("1", (40, 32), {})]),
    "qoi": ("QOI", "qoi", [("RGB", (40, 30), {}), ("RGBA", (20, 20), {})]),
    "blp": ("BLP", "blp", [("P", (32, 32), {})]),
    "eps": ("EPS", "eps", [("RGB", (16, 16), {})]),
    "pdf": ("PDF", "pdf", [("RGB", (16, 16), {})]),
    "palm": ("PALM", "palm", [("1", (16, 16), {})]),
}
DAMAGE = ("intact", "truncated", "flipped", "zeroed", "spliced", "junk", "sizes", "cut_head")


def _picture(mode: str, size: tuple[int, int], rng: np.random.Generator) -> Image.Image:
    w, h = size
    base = np.clip(
        np.add.outer(np.arange(h), np.arange(w))[..., None] * 4 + rng.integers(0, 40, (h, w, 4)), 0, 255
    ).astype(np.uint8)
    if mode == "I;16":
        return Image.fromarray(base[..., 0].astype(np.uint16) * 257)
    if mode == "F":
        return Image.fromarray(base[..., 0].astype(np.float32))
    rgba = Image.fromarray(base, "RGBA")
    if mode == "P":
        return rgba.convert("RGB").convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    return rgba.convert(mode)


def base_file(fmt: str, mode: str, size, options: dict, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    img = _picture(mode, size, rng)
    options = dict(options)
    frames = options.pop("frames", 1)
    if frames > 1:
        options["append_images"] = [_picture(mode, size, rng) for _ in range(frames - 1)]
    out = io.BytesIO()
    img.save(out, fmt, **options)
    return out.getvalue()


def damage(data: bytes, kind: str, rng: random.Random, other: bytes) -> bytes:
    if kind == "intact" or len(data) < 8:
        return data
    if kind == "truncated":
        return data[: rng.randrange(1, len(data))]
    if kind == "flipped":
        out = bytearray(data)
        for _ in range(rng.randint(1, 12)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == "zeroed":
        start = rng.randrange(len(data))
        return data[:start] + bytes(min(len(data) - start, rng.randint(8, 256))) + data[start + 256 :]
    if kind == "spliced":  # another file's header on this file's body
        cut = rng.randint(8, 64)
        return other[:cut] + data[cut:]
    if kind == "junk":
        return data + rng.randbytes(rng.randint(1, 2048))
    if kind == "sizes":  # every 16- and 32-bit word of the header that looks like a size, scrambled
        out = bytearray(data)
        for pos in range(0, min(64, len(out) - 4)):
            if (
                struct.unpack_from(">H", out, pos)[0] in (16, 17, 20, 21, 24, 30, 32, 33, 37, 40, 48, 64)
                and rng.random() < 0.5
            ):
                struct.pack_into(">H", out, pos, rng.choice((0, 1, 0x7FFF, 0xFFFF)))
        return bytes(out)
    return data[rng.randint(1, 16) :]  # cut_head


def write_corpus(root: pathlib.Path, seed: int = 0) -> dict[str, int]:
    """Writes the corpus under root/<format>/; returns {format: files}."""
    rng = random.Random(seed)
    bases = []
    for folder, (fmt, suffix, variants) in FORMATS.items():
        for i, (mode, size, options) in enumerate(variants):
            bases.append((folder, suffix, i, base_file(fmt, mode, size, options, seed + len(bases))))
    counts: dict[str, int] = {}
    for folder, suffix, i, data in bases:
        (root / folder).mkdir(parents=True, exist_ok=True)
        for kind in DAMAGE:
            other = rng.choice(bases)[3]
            (root / folder / f"{i}_{kind}.{suffix}").write_bytes(damage(data, kind, rng, other))
            counts[folder] = counts.get(folder, 0) + 1
    # The kinds of file that took real runs down, and a few more that make a decoder work hard.
    extra = root / "offenders"
    extra.mkdir(exist_ok=True)
    small = base_file("PNG", "RGBA", (16, 16), {}, seed)
    files = {
        "icns_j2k.icns": icns([(b"ic08", huge_j2k())]),
        "ico_png.ico": ico(16, 16, small),
        "tiff_damaged.tif": damaged_deflate_tiff(),
        "empty.png": b"",
        "text.jpg": b"not an image\n",
        "png_header_only.png": small[:33],
        "jpeg_soi_only.jpg": b"\xff\xd8\xff",
    }
    for name, data in files.items():
        (extra / name).write_bytes(data)
    counts["offenders"] = len(files)
    return counts
