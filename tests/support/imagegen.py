"""Small test images made with Pillow and numpy; nothing is downloaded."""

from __future__ import annotations

import hashlib
import io
import pathlib
import random
import struct
import zlib

import numpy as np
from PIL import Image


def image_bytes(fmt: str = "JPEG", size=(24, 18), mode: str = "RGB", seed: int = 0, **save) -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1, "LA": 2, "CMYK": 4}.get(mode)
    if mode in ("I;16", "I"):
        arr = rng.integers(0, 65535, (size[1], size[0]), dtype=np.uint16)
        img = Image.fromarray(arr, "I;16")
    elif mode == "P":
        img = Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8), "RGB").convert(
            "P", palette=Image.Palette.ADAPTIVE
        )
    else:
        arr = rng.integers(0, 255, (size[1], size[0], channels), dtype=np.uint8)
        img = Image.fromarray(arr[..., 0] if channels == 1 else arr, mode)
    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return buf.getvalue()


def write_class_tree(
    root: pathlib.Path, counts: dict[str, int], size=(20, 16), png_every: int = 5, seed: int = 0, order: str = "forward"
) -> list[pathlib.Path]:
    """Writes root/<class>/<i>.jpg|png with `counts` images per class; returns the paths."""
    jobs = []
    for cls, n in counts.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            ext = "png" if png_every and i % png_every == png_every - 1 else "jpg"
            # a stable 64-bit seed per image: hash() of a str changes per process, and 16 bits gave
            # identical pictures in two classes (a label conflict, rejected) in about every other run
            digest = hashlib.sha256(f"{cls}\0{i}\0{seed}".encode()).digest()
            jobs.append((root / cls / f"{cls}_{i:04d}.{ext}", ext, int.from_bytes(digest[:8], "big")))
    if order == "reverse":
        jobs.reverse()
    elif order == "shuffle":
        random.Random(seed).shuffle(jobs)
    for path, ext, s in jobs:
        path.write_bytes(image_bytes("PNG" if ext == "png" else "JPEG", size=size, seed=s))
    return [p for p, _, _ in jobs]


# --- hostile inputs --------------------------------------------------------------------


def encode(img: Image.Image, fmt: str, **save) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return buf.getvalue()


def marker_image(width: int = 48, height: int = 32) -> np.ndarray:
    """An upright test picture no flip or rotation maps onto itself: white, with a red
    block at the top left and a blue bar along the right of the top half (16-pixel
    blocks, so JPEG keeps the colours)."""
    arr = np.full((height, width, 3), 255, np.uint8)
    arr[:16, :16] = (220, 30, 30)
    arr[:16, width - 16 :] = (30, 60, 200)
    return arr


def stored_for_orientation(upright: np.ndarray, orientation: int) -> np.ndarray:
    """The pixels a camera stores for `upright` with EXIF orientation 1-8, from the
    EXIF definition of where stored row 0 and column 0 are in the scene."""
    u = upright
    return {
        1: u,
        2: u[:, ::-1],  # row 0 top, column 0 right
        3: u[::-1, ::-1],  # row 0 bottom, column 0 right
        4: u[::-1, :],  # row 0 bottom, column 0 left
        5: u.transpose(1, 0, 2),  # row 0 left, column 0 top
        6: np.rot90(u, 1),  # row 0 right, column 0 top
        7: u[::-1, ::-1].transpose(1, 0, 2),  # row 0 right, column 0 bottom
        8: np.rot90(u, -1),  # row 0 left, column 0 bottom
    }[orientation].copy()


def oriented(upright: np.ndarray, orientation: int, fmt: str = "JPEG") -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(
        Image.fromarray(stored_for_orientation(upright, orientation)),
        fmt,
        exif=exif,
        **({"quality": 95} if fmt == "JPEG" else {}),
    )


def ycck_jpeg(target: np.ndarray) -> bytes:
    """An Adobe YCCK JPEG whose correct decoding is the RGB picture `target`.

    libjpeg writes CMYK JPEGs with an Adobe APP14 marker, transform 0; with
    transform 2 a decoder reads the first three components as YCbCr of the
    inverted CMY (and K passes through). So the components written are the
    YCbCr of 255 - target, and K = 255 (no ink, Adobe's inverted convention),
    then the flag is patched. Pillow writes CMYK inverted, hence the 255 - ...
    """
    inv = 255.0 - target.astype(np.float64)
    r, g, b = inv[..., 0], inv[..., 1], inv[..., 2]
    ycc = np.stack(
        [
            0.299 * r + 0.587 * g + 0.114 * b,
            -0.168736 * r - 0.331264 * g + 0.5 * b + 128,
            0.5 * r - 0.418688 * g - 0.081312 * b + 128,
        ],
        -1,
    )
    ycc = np.clip(np.round(ycc), 0, 255).astype(np.uint8)
    components = np.concatenate([255 - ycc, np.zeros(ycc.shape[:2] + (1,), np.uint8)], -1)
    data = bytearray(encode(Image.fromarray(components, "CMYK"), "JPEG", quality=95))
    at = data.find(b"\xff\xee")
    if at < 0 or data[at + 4 : at + 9] != b"Adobe":
        raise RuntimeError("Pillow wrote no Adobe APP14 marker")
    data[at + 15] = 2  # transform: 0 CMYK, 1 YCbCr, 2 YCCK
    return bytes(data)


def png_raw(pixels: np.ndarray, bit_depth: int, color_type: int) -> bytes:
    """A PNG written by hand (no Pillow), for sample formats Pillow cannot write, e.g. 16-bit RGB.

    `pixels`: H x W x samples, values of `bit_depth` bits; color type 0 gray, 2 RGB.
    """
    height, width = pixels.shape[:2]
    dtype = ">u2" if bit_depth == 16 else "u1"
    rows = b"".join(b"\x00" + row.astype(dtype).tobytes() for row in pixels)
    return _png(width, height, bit_depth, color_type, zlib.compress(rows))


def truncated_exif_jpeg(size=(16, 8)) -> bytes:
    """A valid JPEG whose one EXIF tag claims 1,000 bytes the block does not hold:
    Pillow reads it and warns "Truncated File Read"."""
    tiff = b"II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHII", 0x010E, 2, 1000, 26) + struct.pack("<I", 0)
    out = io.BytesIO()
    Image.new("RGB", size, (10, 20, 30)).save(out, "JPEG", exif=b"Exif\x00\x00" + tiff)
    return out.getvalue()


def bomb_png(side: int = 12_000) -> bytes:
    """A real decompression bomb: a 1-bit grayscale PNG of side x side pixels (144 M by
    default, over Pillow's 89 M), all zeros, a few kilobytes on disk."""
    row = b"\x00" + bytes((side + 7) // 8)
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    return _png(side, side, 1, 0, idat)


def _png(width: int, height: int, bit_depth: int, color_type: int, idat: bytes, interlace: int = 0) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def write_dirty_tree(root: pathlib.Path, counts: dict[str, int], size=(14, 10)) -> pathlib.Path:
    """A class tree plus one truncated JPEG (rejected) and one RGBA PNG (converted)."""
    write_class_tree(root, counts, size=size)
    (root / "bee" / "broken.jpg").write_bytes(image_bytes("JPEG", size=(64, 64))[:300])
    (root / "cat" / "rgba.png").write_bytes(image_bytes("PNG", size=(9, 9), mode="RGBA"))
    return root


# --- offenders: files that make a decoder spend far more than their header says -----------------


def gray_png(width: int, height: int) -> bytes:
    """An 8-bit grayscale PNG of zeros: cheap to store (~1.2 KB per Mpx), slow to decode when large.
    Every row uses the Paeth filter, the slowest to undo (89 Mpx: 0.58 s here, 0.30 s unfiltered)."""
    row = b"\x04" + bytes(width)
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    return _png(width, height, 8, 0, idat)


def interlaced_gray_png(width: int, height: int) -> bytes:
    """`gray_png` stored Adam7-interlaced: the same pixels and memory, about 1.8 times the decode time (seven
    passes, each row Paeth-filtered), so its decode outlasts a short --image-timeout on a fast, idle machine
    too (89 Mpx: 0.47 s against gray_png's 0.26 s here, on a day gray_png took 0.26 s instead of 0.58)."""
    passes = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
    compressor = zlib.compressobj(9)
    parts = []
    for x0, y0, dx, dy in passes:
        w, h = max(0, -(-(width - x0) // dx)), max(0, -(-(height - y0) // dy))
        if w and h:
            row = b"\x04" + bytes(w)
            parts += [compressor.compress(row) for _ in range(h)]
    parts.append(compressor.flush())
    return _png(width, height, 8, 0, b"".join(parts), interlace=1)


def rgba_png(width: int, height: int) -> bytes:
    """A transparent RGBA PNG of zeros: 4 bytes a pixel decoded, ~19 converted, a few KB stored."""
    row = b"\x00" + bytes(4 * width)
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    return _png(width, height, 8, 6, idat)


def icns(entries: list[tuple[bytes, bytes]]) -> bytes:
    """An Apple icon file of (type, data) entries; type b"ic08" holds a 256x256 PNG or JPEG 2000."""
    body = b"".join(kind + struct.pack(">I", len(data) + 8) + data for kind, data in entries)
    return b"icns" + struct.pack(">I", len(body) + 8) + body


def ico(width: int, height: int, png: bytes) -> bytes:
    """A Windows icon whose directory declares width x height and whose one entry is `png`,
    whatever size that PNG really is."""
    entry = struct.pack("<BBBBHHII", width % 256, height % 256, 0, 0, 1, 32, len(png), 6 + 16)
    return struct.pack("<HHH", 0, 1, 1) + entry + png


def damaged_deflate_tiff(size=(64, 64)) -> bytes:
    """A deflate TIFF whose strip data is overwritten: libtiff prints 'ZIPDecode: Decoding error'."""
    data = bytearray(image_bytes("TIFF", size=size, compression="tiff_adobe_deflate"))
    start = len(data) * 3 // 10
    data[start : start + 200] = b"\xab" * 200
    return bytes(data)


def huge_j2k(width: int = 510_000, height: int = 510_000) -> bytes:
    """A JPEG 2000 codestream of a tiny image whose SIZ marker declares width x height
    (510,000 squared: the 260 gigapixels of the ICNS that took a real run to 24 GB)."""
    data = bytearray(image_bytes("JPEG2000", size=(16, 16), no_jp2=True))
    siz = data.index(b"\xff\x51")
    struct.pack_into(">II", data, siz + 6, width, height)  # Xsiz, Ysiz after FF51, Lsiz, Rsiz
    return bytes(data)
