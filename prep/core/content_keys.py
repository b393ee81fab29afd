"""Content keys of an image: what says two images are the same picture. Pure: Pillow, numpy, hashlib.

`ContentKeys` holds `sha256`, of the encoded bytes (equal digests are exact duplicates), and `hashes`: 64-bit
perceptual hashes (pHash) of the *displayed* picture (EXIF orientation applied, transparency composited on white,
gray levels), one of the whole picture and one of each centre crop in `CROP_SCALES`.

pHash alone is thrown off by border crops: 4% cut from one side moves the whole frame under the hash's 32x32 grid.
With the same centre crops taken of both images, a copy cropped by up to 5% is framed nearly alike in at least one;
`distance` is the least Hamming distance between hashes of the same crop scale. Comparing every hash with every other
finds no more crops and more unrelated pairs (bench/dedupe_quality.py; docs/leakage.md has the figures that chose the
scales and `NEAR_DISTANCE`). A pHash has as many 1 bits as 0 bits (a median split of 64 values), so distances are even
(7 and 6 draw the same line), but for a picture whose frequencies tie with their median (flat, or drawn symmetric).

The pHash is imagehash's (`imagehash.phash`: the picture resized to 32x32 gray with LANCZOS, its 2-D DCT-II, the 8x8
lowest frequencies against their median), written over numpy, with the resize and the DCT folded into one linear map
per side (`_projection`), so neither scipy nor PyWavelets is needed and a batch of images is a few products. Pillow
rounds the resized pixels to integers; this does not, so a hash can differ from imagehash's in the few frequencies
nearest the median (two bits, in about one hash of ten).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps

from prep.core import lanczos

HASH_SIDE = 8  # 8x8 low frequencies: 64-bit hashes
GRID = 32  # the gray image the DCT is taken of
CROP_SCALES = (0.96, 0.92, 0.88, 0.84)  # centre crops hashed besides the whole picture (side fraction)
NEAR_DISTANCE = 7  # at most this many differing bits (least over hash pairs) is a near duplicate
DRAFT = 64  # JPEGs too small for a 1/8-scale decode of GRID pixels a side are decoded at least this large
_ORIENTATION = 0x0112
Box = tuple[int, int, int, int]  # (left, top, width, height) of a crop
Waiting = tuple[list[int], list[npt.NDArray[np.uint8]]]  # KeyBatch.take: (rows in the batch, each one's gray pixels)
Taken = tuple[npt.NDArray[np.uint64], list[Waiting]]  # a batch's hashes and what KeyBatch.take left waiting


def _dct_matrix(n: int) -> npt.NDArray[np.float64]:
    """The orthonormal DCT-II matrix: `m @ x` is the DCT of the columns of x (scipy's dct(norm="ortho"))."""
    k = np.arange(n)[:, None]
    m: npt.NDArray[np.float64] = np.cos(np.pi * (2 * np.arange(n)[None, :] + 1) * k / (2 * n)) * np.sqrt(2 / n)
    m[0] /= np.sqrt(2)
    return m


_DCT = _dct_matrix(GRID)[:HASH_SIDE]  # only the rows of the frequencies kept
_HALF = HASH_SIDE * HASH_SIDE // 2
_QUANTUM = float(1 << 16)  # coefficients are compared in steps of 2**-16 (see _phash_rows)


@dataclasses.dataclass(frozen=True)
class ContentKeys:
    """An image's sha256 (hex) and its perceptual hashes: `hashes[0]` of the whole picture, then one per
    centre crop of `CROP_SCALES`, each a 64-bit integer."""

    sha256: str
    hashes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.sha256) != 64 or not all(c in "0123456789abcdef" for c in self.sha256):
            raise ValueError(f"sha256 must be 64 lowercase hex digits, got {self.sha256!r}")
        if not self.hashes:
            raise ValueError("hashes must hold at least the whole picture's hash, got none")
        for h in self.hashes:
            if not 0 <= h < 1 << 64:
                raise ValueError(f"each hash must be a 64-bit unsigned integer, got {h!r}")

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "hashes": [f"{h:016x}" for h in self.hashes]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ContentKeys:
        """The inverse of `to_json`. Raises ValueError (or KeyError, TypeError) on anything else."""
        return cls(obj["sha256"], tuple(int(h, 16) for h in obj["hashes"]))


@functools.lru_cache(maxsize=256)  # ~20 KB an entry for the 1/8 decode of a 640x480 JPEG
def _projection(size: int, spans: tuple[tuple[int, int], ...]) -> npt.NDArray[np.float64]:
    """(len(spans), HASH_SIDE, size): for each crop span (start, length) of a side of `size` pixels, the lowest
    HASH_SIDE DCT frequencies of that span resized to GRID, as one linear map: `_DCT @` the resize's weights, placed
    over the span. Cached per side length, not per image size: in a set of pictures of many sizes, widths and
    heights recur far more often than their pairs."""
    m = np.zeros((len(spans), HASH_SIDE, size))
    for i, (start, length) in enumerate(spans):
        m[i, :, start : start + length] = _DCT @ lanczos.weights(length, GRID)
    m.setflags(write=False)
    return m


_BLOCK = 1 << 20  # input pixels per horizontal product: a large picture is not copied to float64 whole


def _pass_across(rows: npt.NDArray[np.uint8], boxes: Sequence[Box], out: npt.NDArray[np.float64]) -> None:
    """Into `out` (pixel rows, len(boxes) * HASH_SIDE): each pixel row (of one width) times every box's
    horizontal projection, in blocks of about `_BLOCK` input pixels."""
    width = rows.shape[1]
    matrix = _projection(width, tuple((box[0], box[2]) for box in boxes)).reshape(-1, width).T
    step = max(1, _BLOCK // width)
    for start in range(0, len(rows), step):
        np.matmul(rows[start : start + step].astype(np.float64), matrix, out=out[start : start + step])


def _low_frequencies(grays: npt.NDArray[np.uint8], boxes: tuple[Box, ...]) -> npt.NDArray[np.float64]:
    """The HASH_SIDE x HASH_SIDE lowest DCT frequencies of every box (left, top, width, height) of every image of a
    stack (B, height, width) of same-sized gray images, each box resized to GRID x GRID first, as rows (image, box)
    of HASH_SIDE**2 values, u major.

    Resizing and the DCT are linear, so each side is one product: every box's horizontal projection at once over
    the rows of all images (`rows @ H`), then each box's vertical projection over its columns of all images, a
    batched product. Pillow would round the resized pixels after each pass; here nothing is rounded before the
    frequencies, so a flat picture's are exactly zero but its mean."""
    b, height, width = grays.shape
    n = len(boxes)
    down = _projection(height, tuple((box[1], box[3]) for box in boxes))  # (n, HASH_SIDE, height)
    rows = grays.transpose(1, 0, 2).reshape(height * b, width)  # row h of every image, then row h + 1
    x = np.empty((height * b, n * HASH_SIDE))
    _pass_across(rows, boxes, x)
    x = x.reshape(height, b, n, HASH_SIDE).transpose(2, 0, 1, 3).reshape(n, height, b * HASH_SIDE)
    low: npt.NDArray[np.float64] = np.matmul(down, x)  # (box, u, image and v)
    return low.reshape(n, HASH_SIDE, b, HASH_SIDE).transpose(2, 0, 1, 3).reshape(b * n, HASH_SIDE * HASH_SIDE)


def _phash_rows(low: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """The pHash of each of `_low_frequencies`' rows, as uint64. The frequencies are rounded to 2**-16 before the
    median split: float sums in another order (another BLAS, another CPU) then give the same bits, and a flat
    picture's zero frequencies are zero."""
    low = np.rint(low * _QUANTUM)
    middle = np.partition(low, (_HALF - 1, _HALF), axis=1)  # np.median's answer, without its checks
    bits = low > ((middle[:, _HALF - 1] + middle[:, _HALF]) / 2)[:, None]
    return np.packbits(bits, axis=1).view(">u8")[:, 0].astype(np.uint64)  # the first bit on top


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


def crop_boxes(width: int, height: int, scales: Sequence[float] = CROP_SCALES) -> tuple[Box, ...]:
    """(left, top, width, height) of the whole picture and of its centre crop at each scale."""
    boxes: list[Box] = []
    for s in (1.0, *scales):
        cw, ch = max(1, round(width * s)), max(1, round(height * s))
        boxes.append(((width - cw) // 2, (height - ch) // 2, cw, ch))
    return tuple(boxes)


def crop_hashes(gray: Image.Image, scales: Sequence[float] = CROP_SCALES) -> tuple[int, ...]:
    """The pHash of the whole gray picture, then of its centre crop at each scale (fraction of each side)."""
    return gray_hashes([np.asarray(gray)], scales)[0]


def gray_hashes(grays: list[npt.NDArray[np.uint8]], scales: Sequence[float] = CROP_SCALES) -> list[tuple[int, ...]]:
    """`crop_hashes` of each 8-bit gray array (height, width), images of one size hashed together."""
    out: list[tuple[int, ...]] = [()] * len(grays)  # every one filled below
    by_size: dict[tuple[int, int], list[int]] = {}
    for i, g in enumerate(grays):
        by_size.setdefault(g.shape, []).append(i)
    for members in by_size.values():
        for i, hashes in zip(members, stack_hashes(np.stack([grays[i] for i in members]), scales).tolist()):
            out[i] = tuple(hashes)
    return out


def stack_hashes(stack: npt.NDArray[np.uint8], scales: Sequence[float] = CROP_SCALES) -> npt.NDArray[np.uint64]:
    """(images, 1 + len(scales)) uint64: `crop_hashes` of each of a stack (images, height, width) of 8-bit gray
    images of one size. Each crop is cut, then resized to GRID x GRID (Lanczos, lanczos.py); resizing the whole
    picture with a box instead would let the filter reach past the crop's edges."""
    b, height, width = stack.shape
    boxes = crop_boxes(width, height, scales)
    return _phash_rows(_low_frequencies(stack, boxes)).reshape(b, len(boxes))


def decode_for_keys(img: Image.Image, draft: int | None = DRAFT) -> None:
    """Loads an opened image as the keys see it. A colour JPEG is decoded straight to gray (libjpeg keeps the luma and
    skips the colour conversion), at a reduced DCT scale: 1/8 when that is still GRID pixels a side or more (the scale
    the converter's check of a JPEG it keeps uses anyway), else the smallest scale still at least `draft` pixels a side
    (None: full size), so a small picture keeps the detail its hash needs. When keys are wanted, that check decodes
    this way instead (prep.core.image_rules): every entropy-coded block is still decoded, so its pixels serve both."""
    if img.format in ("JPEG", "MPO"):
        w, h = img.size
        size = None if draft is None else (w // 8, h // 8) if min(w, h) // 8 >= GRID else (draft, draft)
        img.draft("L", size)  # only an RGB JPEG changes mode; CMYK and gray ones decode as they are
    img.load()


def gray_image(img: Image.Image, upright: bool = False) -> Image.Image:
    """The loaded image's displayed gray picture (`displayed_gray`), the one the hashes are taken of.
    `upright`: the caller has checked that the image has no EXIF turn and no transparency."""
    return (img if img.mode == "L" else img.convert("L")) if upright else displayed_gray(img)


def gray_pixels(img: Image.Image, upright: bool = False) -> npt.NDArray[np.uint8]:
    """`gray_image` as an array (height, width)."""
    return _array(gray_image(img, upright))


def _array(gray: Image.Image) -> npt.NDArray[np.uint8]:
    """An "L" image's pixels (height, width), from its bytes (np.asarray costs more Python an image)."""
    return np.frombuffer(gray.tobytes(), np.uint8).reshape(gray.height, gray.width)


def image_keys(data: bytes, scales: Sequence[float] = CROP_SCALES, draft: int | None = DRAFT) -> ContentKeys:
    """The content keys of one encoded image.

    Args:
        data: the image file's bytes (any format Pillow reads).
        scales: centre-crop scales hashed besides the whole picture.
        draft: decode JPEGs at a reduced DCT scale, still at least this many pixels a side (None: full size).

    Raises:
        OSError, ValueError, Image.DecompressionBombError: Pillow cannot decode it."""
    digest = hashlib.sha256(data).hexdigest()
    with Image.open(io.BytesIO(data)) as img:
        decode_for_keys(img, draft)
        return ContentKeys(digest, crop_hashes(displayed_gray(img), scales))


class KeyBatch:
    """The content keys of a run of images, hashed together: images of one size share the products
    (`_low_frequencies`), so a batch costs less than its images one by one.

    `add` takes an image's encoded bytes, their sha256 when already known, and, when its decode is at hand, its
    `gray_image` (else the bytes are decoded by `image_keys`' rule); `hashes()` gives every image's, in order.
    `take()` instead leaves the small images' hashes to be computed later, with other batches' (`hash_waiting`).
    Large images are hashed on arrival, so waiting pixels stay small."""

    LARGE = 128 * 128  # pixels: a gray image larger than this is hashed at once, not held

    def __init__(self, scales: Sequence[float] = CROP_SCALES) -> None:
        self._scales = scales
        self._digests: list[str] = []
        self._hashed: list[tuple[int, npt.NDArray[np.uint64]]] = []  # (index, hashes) of the large images
        self._waiting: list[tuple[int, Image.core.ImagingCore]] = []  # (index, pixels) of the small images

    def add(self, data: bytes, gray: Image.Image | None = None, sha256: str | None = None) -> None:
        index = len(self._digests)
        self._digests.append(sha256 or hashlib.sha256(data).hexdigest())
        if gray is None:
            try:
                with Image.open(io.BytesIO(data)) as img:
                    decode_for_keys(img)
                    gray = gray_image(img)
            except Exception:  # noqa: BLE001 - any decoder failure means "no keys", never a lost image
                return
        if gray.width * gray.height > self.LARGE:
            self._hashed.append((index, stack_hashes(_array(gray)[None], self._scales)[0]))
        else:  # only the pixels are held (`.im`), not the opened file the picture came from
            self._waiting.append((index, gray.im))

    def take(self) -> tuple[list[str], npt.NDArray[np.uint64], npt.NDArray[np.bool_], list[Waiting]]:
        """Once, after the last `add`: (sha256 hex digests, hashes (images, 1 + len(scales)) uint64, whether each
        image has hashes, waiting), in the order images were added. An image that could not be decoded has no
        hashes, and a row of zeros. `waiting` holds the small images' gray pixels as [(rows, [pixels (height,
        width) of each])]: their rows are zeros until `hash_waiting`."""
        hashes = np.zeros((len(self._digests), 1 + len(self._scales)), np.uint64)
        has = np.zeros(len(self._digests), bool)
        for index, row in self._hashed:
            hashes[index], has[index] = row, True
        waiting: list[Waiting] = []
        if self._waiting:  # every waiting picture into one strip, read out at once: one core paste a picture (half
            # Image.paste's cost) and one tobytes() a batch, on a thread sharing the GIL; each picture views its corner
            sizes = [pixels.size for _, pixels in self._waiting]
            tops = np.cumsum([0, *(h for _, h in sizes)]).tolist()
            strip = Image.new("L", (max(w for w, _ in sizes), tops[-1]))
            for (_, pixels), (w, h), top in zip(self._waiting, sizes, tops):
                strip.im.paste(pixels, (0, top, w, top + h))
            rows = [index for index, _ in self._waiting]
            has[rows] = True
            whole = np.frombuffer(strip.tobytes(), np.uint8).reshape(strip.height, strip.width)
            waiting.append((rows, [whole[top : top + h, :w] for (w, h), top in zip(sizes, tops)]))
        return self._digests, hashes, has, waiting

    def hashes(self) -> tuple[list[str], npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
        """`take()` with every image hashed: (sha256 hex digests, hashes, whether each image has them)."""
        digests, hashes, has, waiting = self.take()
        hash_waiting([(hashes, waiting)], self._scales)
        return digests, hashes, has

    def keys(self) -> list[ContentKeys | None]:
        """`hashes()` as each image's ContentKeys, None for one that could not be decoded."""
        digests, hashes, has = self.hashes()
        return [ContentKeys(d, tuple(h)) if ok else None for d, h, ok in zip(digests, hashes.tolist(), has)]


_STACK_PIXELS = 1 << 18  # pixels hash_waiting hashes at once: ~2 MB of float64 temporaries (no faster past 64 images)


def hash_waiting(parts: Iterable[Taken], scales: Sequence[float] = CROP_SCALES) -> None:
    """Fills in the hashes that `KeyBatch.take()` left waiting. `parts`: (hashes, waiting) of each batch. Every
    batch's waiting images are hashed together, in blocks of about `_STACK_PIXELS` pixels (`_block_hashes`): fewer
    numpy calls, each of which gives up the GIL and waits for it while the prepare stage's threads hold it."""
    images = [
        (hashes, row, image) for hashes, waiting in parts for rows, stack in waiting for row, image in zip(rows, stack)
    ]
    # By width, then height: a block's images share few widths (the pass across) and heights (the pass down)
    images.sort(key=lambda x: x[2].shape[::-1])
    start = 0
    while start < len(images):
        stop, pixels = start, 0
        while stop < len(images) and (stop == start or pixels + images[stop][2].size <= _STACK_PIXELS):
            pixels += images[stop][2].size
            stop += 1
        some = images[start:stop]
        for (hashes, row, _), got in zip(some, _block_hashes([image for _, _, image in some], scales)):
            hashes[row] = got
        start = stop


def _block_hashes(grays: list[npt.NDArray[np.uint8]], scales: Sequence[float]) -> npt.NDArray[np.uint64]:
    """`stack_hashes` of gray images of any sizes, sorted by (width, height): the pass across (which depends on the
    width alone) is one product per width over the rows of all its images, and the pass down one batched product per
    height over the images of that height, whatever their widths. Pictures of many sizes thus cost a few calls per
    width and height, not a dozen per size; the products are `_low_frequencies`' for one size, row for row."""
    n, widths = 1 + len(scales), [g.shape[1] for g in grays]
    first = np.cumsum([0, *(g.shape[0] for g in grays)])  # where each image's rows start
    across = np.empty((first[-1], n * HASH_SIDE))  # every image's rows, passed across
    edges = [k for k in range(len(grays) + 1) if k in (0, len(grays)) or widths[k] != widths[k - 1]]
    for i, j in zip(edges, edges[1:]):  # each run of images of one width
        rows = np.concatenate(grays[i:j]) if j - i > 1 else grays[i]
        _pass_across(rows, crop_boxes(widths[i], 1, scales), across[first[i] : first[j]])
    low = np.empty((len(grays), n, HASH_SIDE, HASH_SIDE))
    by_height: dict[int, list[int]] = {}
    for k, g in enumerate(grays):
        by_height.setdefault(g.shape[0], []).append(k)
    for height, members in by_height.items():
        boxes = crop_boxes(1, height, scales)
        down = _projection(height, tuple((box[1], box[3]) for box in boxes))  # (n, HASH_SIDE, height)
        b = len(members)
        together = b == members[-1] - members[0] + 1  # consecutive (one size): their rows are one slice
        x = (
            across[first[members[0]] : first[members[-1] + 1]]
            if together
            else np.concatenate([across[first[k] : first[k + 1]] for k in members])
        )
        x = x.reshape(b, height, n, HASH_SIDE).transpose(2, 1, 0, 3).reshape(n, height, b * HASH_SIDE)
        got = np.matmul(down, x).reshape(n, HASH_SIDE, b, HASH_SIDE).transpose(2, 0, 1, 3)
        low[slice(members[0], members[-1] + 1) if together else members] = got
    return _phash_rows(low.reshape(len(grays) * n, HASH_SIDE * HASH_SIDE)).reshape(len(grays), n)


def comparable(keys: ContentKeys) -> bool:
    """Whether an image takes part in the near-duplicate search. A picture whose frequencies tie with their median
    (flat, or drawn symmetric) gets hashes of fewer than 32 one bits, only the frequencies above the tie, so any
    other such picture, of any colour, would look like it: it is only ever an exact duplicate (its sha256), in a
    conversion and in `prep leakage` alike."""
    return all(h.bit_count() == _HALF for h in keys.hashes)


def comparable_rows(hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
    """`comparable` of each row of a (images, hashes) uint64 array."""
    rows: npt.NDArray[np.bool_] = (np.bitwise_count(np.asarray(hashes, dtype=np.uint64)) == _HALF).all(axis=-1)
    return rows


def distance(a: ContentKeys, b: ContentKeys) -> int:
    """The least Hamming distance between hashes of `a` and `b` at the same crop scale (0 to 64).

    Raises:
        ValueError: `a` and `b` hold different numbers of hashes (keys made with other scales)."""
    if len(a.hashes) != len(b.hashes):
        raise ValueError(f"keys of {len(a.hashes)} and {len(b.hashes)} hashes cannot be compared")
    return min((x ^ y).bit_count() for x, y in zip(a.hashes, b.hashes))
