"""Content keys of an image: what says two images are the same picture. Pure: Pillow, numpy, hashlib.

`ContentKeys` holds
- `sha256`: of the encoded bytes; equal digests are exact duplicates;
- `hashes`: 64-bit perceptual hashes (pHash) of the *displayed* picture (EXIF
  orientation applied, transparency composited on white, gray levels), one of
  the whole picture and one of each centre crop in `CROP_SCALES`.

pHash alone is thrown off by border crops: 4% cut from one side moves the
whole frame under the 32x32 grid the hash is computed on. With the same centre
crops taken of both images, a copy cropped by up to 5% is framed nearly alike
in at least one of them; `distance` is the least Hamming distance between
hashes of the same crop scale. Comparing every hash with every other instead
finds no more crops and more unrelated pairs (bench/dedupe_quality.py;
docs/leakage.md has the figures that chose the scales and `NEAR_DISTANCE`).
A pHash has as many 1 bits as 0 bits (a median split of 64 values), so
distances are even: 7 and 6 draw the same line.

The pHash is imagehash's (`imagehash.phash`: 32x32 gray, 2-D DCT-II, the 8x8
lowest frequencies against their median), written over numpy: the DCT is two
products with a fixed 32x32 matrix, so neither scipy nor PyWavelets is needed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io

import numpy as np
from PIL import Image, ImageOps

from prep.core import lanczos

HASH_SIDE = 8  # 8x8 low frequencies: 64-bit hashes
GRID = 32  # the gray image the DCT is taken of
CROP_SCALES = (0.96, 0.92, 0.88, 0.84)  # centre crops hashed besides the whole picture (side fraction)
NEAR_DISTANCE = 7  # at most this many differing bits (least over hash pairs) is a near duplicate
DRAFT = 64  # JPEGs are decoded at the smallest DCT scale that is still at least this many pixels a side
_ORIENTATION = 0x0112


def _dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix: `m @ x` is the DCT of the columns of x (scipy's dct(norm="ortho"))."""
    k = np.arange(n)[:, None]
    m = np.cos(np.pi * (2 * np.arange(n)[None, :] + 1) * k / (2 * n)) * np.sqrt(2 / n)
    m[0] /= np.sqrt(2)
    return m


_DCT = _dct_matrix(GRID)[:HASH_SIDE]  # only the rows of the frequencies kept
_HALF = HASH_SIDE * HASH_SIDE // 2
_WEIGHTS = 1 << np.arange(HASH_SIDE * HASH_SIDE - 1, -1, -1, dtype=np.uint64)  # first bit is the top bit


@dataclasses.dataclass(frozen=True)
class ContentKeys:
    """An image's sha256 (hex) and its perceptual hashes: `hashes[0]` of the whole picture, then one per
    centre crop of `CROP_SCALES`, each a 64-bit integer."""

    sha256: str
    hashes: tuple[int, ...]

    def __post_init__(self):
        if len(self.sha256) != 64 or not all(c in "0123456789abcdef" for c in self.sha256):
            raise ValueError(f"sha256 must be 64 lowercase hex digits, got {self.sha256!r}")
        if not self.hashes:
            raise ValueError("hashes must hold at least the whole picture's hash, got none")
        for h in self.hashes:
            if not 0 <= h < 1 << 64:
                raise ValueError(f"each hash must be a 64-bit unsigned integer, got {h!r}")

    def to_json(self) -> dict:
        return {"sha256": self.sha256, "hashes": [f"{h:016x}" for h in self.hashes]}

    @classmethod
    def from_json(cls, obj: dict) -> "ContentKeys":
        """The inverse of `to_json`. Raises ValueError (or KeyError, TypeError) on anything else."""
        return cls(obj["sha256"], tuple(int(h, 16) for h in obj["hashes"]))


def _phashes(grids: np.ndarray) -> tuple[int, ...]:
    """The pHashes of a stack of GRID x GRID gray arrays, all in one numpy pass (less time holding the GIL)."""
    low = (_DCT @ grids @ _DCT.T).reshape(len(grids), -1)
    middle = np.partition(low, (_HALF - 1, _HALF), axis=1)  # np.median's answer, without its checks
    bits = low > ((middle[:, _HALF - 1] + middle[:, _HALF]) / 2)[:, None]
    return tuple(int(v) for v in (bits * _WEIGHTS).sum(axis=1, dtype=np.uint64))


def phash(gray: Image.Image) -> int:
    """The 64-bit pHash of a gray ("L") image: imagehash.phash's bits, packed with the first bit on top."""
    return crop_hashes(gray, ())[0]


def displayed_gray(img: Image.Image) -> Image.Image:
    """The picture as a viewer shows it, in gray: EXIF orientation applied, transparency on white."""
    try:
        orientation = int(img.getexif().get(_ORIENTATION, 1))
    except Exception:
        orientation = 1  # an unreadable EXIF block leaves the pixels as stored, as the converter does
    if orientation != 1:
        img = ImageOps.exif_transpose(img)
    if "A" in img.getbands() or "transparency" in img.info:
        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        # Gray levels beyond 8 bits: scaled to 0-255 so the median split sees the same picture.
        values = np.asarray(img, dtype=np.float64)
        top = values.max(initial=0)
        img = Image.fromarray((values * (255.0 / top if top > 255 else 1.0)).clip(0, 255).astype(np.uint8), "L")
    return img.convert("L")


def crop_hashes(gray: Image.Image, scales=CROP_SCALES) -> tuple[int, ...]:
    """The pHash of the whole gray picture, then of its centre crop at each scale (fraction of each side)."""
    w, h = gray.size
    pixels = np.asarray(gray)
    grids = np.empty((1 + len(scales), GRID, GRID))
    for i, s in enumerate((1.0, *scales)):
        cw, ch = max(1, round(w * s)), max(1, round(h * s))
        left, top = (w - cw) // 2, (h - ch) // 2
        # crop, then resize (Pillow's LANCZOS, the same bytes: lanczos.py): resizing with a box would let the
        # filter reach past the crop's edges
        grids[i] = lanczos.resize(pixels[top:top + ch, left:left + cw], GRID)
    return _phashes(grids)


def image_keys(data: bytes, scales=CROP_SCALES, draft: int | None = DRAFT) -> ContentKeys:
    """The content keys of one encoded image.

    Args:
        data: the image file's bytes (any format Pillow reads).
        scales: centre-crop scales hashed besides the whole picture.
        draft: decode JPEGs at a reduced DCT scale, still at least this many pixels
            a side (None: full size). The hash looks at 32x32 pixels.

    Raises:
        OSError, ValueError, Image.DecompressionBombError: Pillow cannot decode it.
    """
    digest = hashlib.sha256(data).hexdigest()
    with Image.open(io.BytesIO(data)) as img:
        if draft is not None and img.format == "JPEG":
            img.draft("L" if img.mode in ("L", "RGB", "YCbCr") else img.mode, (draft, draft))
        img.load()
        return ContentKeys(digest, crop_hashes(displayed_gray(img), scales))


def distance(a: ContentKeys, b: ContentKeys) -> int:
    """The least Hamming distance between hashes of `a` and `b` at the same crop scale (0 to 64).

    Raises:
        ValueError: `a` and `b` hold different numbers of hashes (keys made with other scales).
    """
    if len(a.hashes) != len(b.hashes):
        raise ValueError(f"keys of {len(a.hashes)} and {len(b.hashes)} hashes cannot be compared")
    return min((x ^ y).bit_count() for x, y in zip(a.hashes, b.hashes))
