"""The image rule: which input bytes go into `image/encoded`, checked or converted.

Owns the rule documented in docs/convert.md "Images"; `prepare_image` is a pure function of
the input bytes and `ImageOptions` (Pillow only, no file access):

* A JPEG or PNG whose pixels are 8-bit grayscale (L) or RGB, with no EXIF
  rotation (orientation absent or 1), one frame, no transparency, and no resize
  or format change asked for, keeps its original bytes, after a decode proves
  them readable (a JPEG's at 1/8 scale, which decodes every entropy-coded
  block; a PNG's chunk CRCs are checked too).
* Anything else is decoded, given its first frame, turned upright by its EXIF
  orientation, converted (alpha and palette transparency composited onto white;
  16-bit samples scaled to 8 bits; CMYK/YCCK and every other mode to RGB;
  grayscale stays 1-channel grayscale), resized if asked, and re-encoded:
  JPEG sources as JPEG at `quality`, every other source as lossless PNG, unless
  `image_format` forces one format for all. An MPO file (a JPEG with more
  pictures appended, as cameras write) is a JPEG source with several frames.
* `image/format` always tells what the stored bytes are, whatever the file
  name says.

Every failure is an `ImageRejected` with a short reason code and a detail.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import struct
import tempfile
import warnings
import zlib
from typing import Any

from PIL import Image, ImageOps, UnidentifiedImageError

from prep.core import content_keys
from prep.core.errors import OptionsError
from prep.core.headers import read_header

# Pillow's bomb check is tied to --max-pixels (`bomb_limit`): it raises above the limit and
# warns above half of it, which means nothing here. Set once: filters are process-wide,
# and changing them while other threads decode is not safe.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)

IMAGE_FORMATS = ("keep", "jpeg", "png")
ISOLATE = ("auto", "all", "none")
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold
DEFAULT_MAX_IMAGE_MEMORY = 2 << 30  # docs/convert.md "Images": the largest JPEG or PNG of --max-pixels needs 1.7 GiB
DEFAULT_IMAGE_TIMEOUT = 60.0
_KEEP_MODES = ("L", "RGB")
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_ORIENTATION_TAG = 0x0112


MIN_IMAGE_MEMORY = 16 << 20


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """How images are checked and transformed."""

    resize: int | None = None  # shorter side, downscale only
    max_side: int | None = None  # longer side cap, downscale only
    image_format: str = "keep"
    quality: int = 95
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_image_memory: int = DEFAULT_MAX_IMAGE_MEMORY  # bytes one image's decode may allocate
    image_timeout: float = DEFAULT_IMAGE_TIMEOUT  # seconds one image may take
    isolate: str = "auto"  # which images are prepared in a sandboxed process (prep/core/run/sandbox.py)

    def __post_init__(self) -> None:
        for name in ("resize", "max_side"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= 65535:
                raise OptionsError(f"--{name.replace('_', '-')} must be in [1, 65535], got {value}")
        if self.image_format not in IMAGE_FORMATS:
            raise OptionsError(f"--image-format must be one of {', '.join(IMAGE_FORMATS)}, got {self.image_format!r}")
        if not 1 <= self.quality <= 100:
            raise OptionsError(f"--quality must be in [1, 100], got {self.quality}")
        if self.max_pixels < 1:
            raise OptionsError(f"--max-pixels must be >= 1, got {self.max_pixels}")
        if not MIN_IMAGE_MEMORY <= self.max_image_memory <= 1 << 40:
            raise OptionsError(
                f"--max-image-memory must be in [{MIN_IMAGE_MEMORY >> 20}MiB, 1TiB], got {self.max_image_memory} bytes"
            )
        if not 0 < self.image_timeout <= 86400:
            raise OptionsError(f"--image-timeout must be in (0, 86400] seconds, got {self.image_timeout}")
        if self.isolate not in ISOLATE:
            raise OptionsError(f"--isolate must be one of {', '.join(ISOLATE)}, got {self.isolate!r}")


@dataclasses.dataclass(frozen=True)
class PreparedImage:
    """Encoded bytes ready for a record, and their properties."""

    encoded: bytes
    format: str  # "jpeg" or "png"
    height: int
    width: int
    channels: int
    converted: bool
    stored: tuple[int, int] = (0, 0)  # (width, height) of the input's pixels as stored, before EXIF orientation
    orientation: int = 1  # the input's EXIF orientation, 1..8 (1: none): boxes and masks follow it
    # an image kept as it is, prepared with keys=True: its displayed gray picture, decoded as
    # content_keys decodes for hashing, so the check's decode serves the keys too
    gray: Image.Image | None = dataclasses.field(default=None, compare=False, repr=False)


class ImageRejected(Exception):
    """The input cannot become a record; `reason` is a short code for counting."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def target_size(width: int, height: int, options: ImageOptions) -> tuple[int, int]:
    """Size after `resize` (shorter side) and `max_side` (longer side); never upscales."""
    scale = 1.0
    if options.resize is not None and min(width, height) > options.resize:
        scale = options.resize / min(width, height)
    if options.max_side is not None and max(width, height) * scale > options.max_side:
        scale = options.max_side / max(width, height)
    if scale == 1.0:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))


def _png_damage(data: bytes) -> str | None:
    """Why a PNG's chunks are damaged (a chunk fails its CRC, or the file ends
    before IEND), or None. Pillow decodes such files without a word, but libpng,
    which TensorFlow's decoder uses, refuses them."""
    pos = len(_PNG_SIGNATURE)
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        end = pos + 8 + length
        if end + 4 > len(data):
            break
        (crc,) = struct.unpack_from(">I", data, end)
        name = kind.decode("latin-1")
        if zlib.crc32(memoryview(data)[pos + 4 : end]) != crc:
            return f"PNG chunk {name!r} at byte {pos} fails its CRC (the file is damaged)"
        if kind == b"IEND":
            return None
        pos = end + 4
    return "PNG file ends before its IEND chunk (truncated)"


def _png_bit_depth(data: bytes) -> int:
    return data[24] if data.startswith(_PNG_SIGNATURE) and len(data) > 24 else 8


def _has_transparency(img: Image.Image) -> bool:
    return "A" in img.getbands() or "transparency" in img.info


def _to_output_mode(img: Image.Image, sixteen_bit: bool) -> Image.Image:
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        import numpy as np

        values = np.asarray(img)
        # 16-bit samples are scaled even when the image is dark (every value
        # < 256); 32-bit "I" from other formats is scaled only if it needs it.
        # Integers stay integers (v // 256 is the old float64 path's truncation of
        # v / 256, in a quarter of its memory: 2.2 GiB for 89 Mpx before).
        if sixteen_bit or img.mode.startswith("I;16"):
            scale = 256
        else:
            scale = 256 if img.mode != "F" and values.max(initial=0) > 255 else 1
        if values.dtype.kind == "f":
            gray = np.clip(values.astype(np.float64) / scale, 0, 255).astype(np.uint8)
        else:
            gray = np.clip(values // scale, 0, 255).astype(np.uint8)
        key = img.info.get("transparency")
        if isinstance(key, int) and not isinstance(key, bool):
            # A grayscale tRNS colour (16-bit for a 16-bit PNG): those pixels go onto white,
            # and the result is RGB, as for 8-bit grayscale with a transparent colour.
            gray = np.where(values == key, 255, gray).astype(np.uint8)
            return Image.fromarray(np.repeat(gray[..., None], 3, axis=2), "RGB")
        return Image.fromarray(gray, "L")
    if _has_transparency(img):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if img.mode in ("L", "RGB"):
        # Already the output's mode: convert("RGB") would only copy the pixels (a whole decoded
        # image per resized photo), which its save or resize copies again anyway.
        return img
    return img.convert("RGB")


class EncodeBuffer:
    """A reusable scratch file that Pillow encodes into; close it when done.

    Pillow's encoders hold the GIL while they write into a BytesIO, but write
    to a real file descriptor with the GIL released (ImageFile._save's
    encode_to_file), so only through a file do several threads encode at
    once (docs/design.md). The file is
    in memory (memfd) on Linux, a temporary file elsewhere. It is never
    truncated, so its pages are reused; only the first bytes written by
    the last `encode` count. One per thread: it is not thread-safe.
    """

    def __init__(self) -> None:
        if hasattr(os, "memfd_create"):
            self._file = open(os.memfd_create("prep-encode", os.MFD_CLOEXEC), "w+b", buffering=0)
        else:
            self._file = tempfile.TemporaryFile(buffering=0)

    def encode(self, img: Image.Image, fmt: str, **params: Any) -> bytes:
        self._file.seek(0)
        img.save(self._file, fmt, **params)
        size = self._file.tell()
        self._file.seek(0)
        data = self._file.read(size)
        if len(data) != size:
            raise OSError(f"encode buffer returned {len(data)} of {size} bytes")
        return data

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EncodeBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _encode(img: Image.Image, fmt: str, quality: int, buffer: EncodeBuffer | None) -> bytes:
    params = {"quality": quality} if fmt == "jpeg" else {}
    if buffer is not None:
        return buffer.encode(img, fmt.upper(), **params)
    out = io.BytesIO()
    img.save(out, fmt.upper(), **params)
    return out.getvalue()


def quiet_pillow() -> None:
    """Keeps Pillow's Python warnings (a corrupt EXIF block, a truncated TIFF tag) off the
    console. Warning filters are
    process-wide, so this is called once per process, by the pipeline and the sandbox."""
    warnings.filterwarnings("ignore", module=r"PIL\.")


def bomb_limit(max_pixels: int) -> None:
    """Ties Pillow's own decompression-bomb check to `max_pixels`.

    Pillow raises DecompressionBombError above 2 x MAX_IMAGE_PIXELS (only warns
    above 1 x), and checks the sizes inside containers too (ICNS, ICO, TIFF tiles,
    GIF frames), which our check of the header's size cannot see. Its limit is a
    module global: every call of one conversion sets the same value, so threads
    agree; two conversions with different --max-pixels in one process would race.
    """
    Image.MAX_IMAGE_PIXELS = max_pixels / 2  # type: ignore[assignment]  # a float: Pillow's 2x is max_pixels exactly


_BOMB_PIXELS = re.compile(r"\((\d+) pixels\)")


def _failure(exc: BaseException, options: ImageOptions, size: str = "an inner image or frame of ") -> ImageRejected:
    """The rejection for an exception Pillow raised while opening or decoding; `size`
    says whose size Pillow's bomb check found too large."""
    if isinstance(exc, Image.DecompressionBombError):
        found = _BOMB_PIXELS.search(str(exc))
        pixels = f"{found[1]} pixels" if found else "more pixels"
        return ImageRejected("too_large", f"{size}{pixels} exceeds --max-pixels {options.max_pixels}")
    if isinstance(exc, MemoryError):
        return ImageRejected(
            "image_memory",
            f"decoding needs more than --max-image-memory {options.max_image_memory} bytes (MemoryError)",
        )
    return ImageRejected("undecodable", f"{type(exc).__name__}: {exc}")


def prepare_image(
    data: bytes, options: ImageOptions, buffer: EncodeBuffer | None = None, keys: bool = False
) -> PreparedImage:
    """Checks `data` and returns the bytes to store, following the module's rule.

    A converted image is encoded through `buffer` if given: pass one per thread
    when several threads prepare images (see EncodeBuffer). With `keys`, an image
    kept as it is comes with its gray pixels for the content keys (`PreparedImage.gray`).

    Raises:
        ImageRejected: empty, undecodable, too many pixels, or unsupported.
    """
    if not data:
        raise ImageRejected("empty", "file has zero bytes")
    bomb_limit(options.max_pixels)
    try:
        img: Image.Image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise ImageRejected("undecodable", "not an image format Pillow can identify") from None
    except Image.DecompressionBombError as exc:
        header = read_header(data)
        whose = f"{header.width}x{header.height} = " if header else ""
        raise _failure(exc, options, whose) from None
    except Exception as exc:  # Pillow raises many types on hostile headers
        raise _failure(exc, options, "") from None
    width, height = img.size
    if width * height > options.max_pixels:
        raise ImageRejected(
            "too_large", f"{width}x{height} = {width * height} pixels exceeds --max-pixels {options.max_pixels}"
        )
    if width < 1 or height < 1:
        raise ImageRejected("undecodable", f"image has size {width}x{height}")
    source_format = (img.format or "").lower()
    if source_format == "mpo":  # a JPEG with more pictures appended (cameras, phones)
        source_format = "jpeg"
    if source_format == "png":
        damage = _png_damage(data)
        if damage is not None:
            raise ImageRejected("undecodable", damage)
    if source_format != "jpeg":
        # Decoded before its EXIF is read: for PNG and others getexif() loads
        # the image, and a decode error there must reject it, not be taken for
        # a bad EXIF block (after which load() returns the half-decoded pixels).
        # A JPEG's EXIF is in its header; it is decoded below, after draft().
        try:
            img.load()
        except Exception as exc:
            raise _failure(exc, options) from None
    try:
        orientation = int(img.getexif().get(_ORIENTATION_TAG, 1))
    except Exception:
        orientation = 1  # an unreadable EXIF block does not make the pixels wrong
    upright = (height, width) if orientation in (5, 6, 7, 8) else (width, height)
    size = target_size(*upright, options)
    out_format = source_format if options.image_format == "keep" else options.image_format
    keep = (
        source_format in ("jpeg", "png")
        and out_format == source_format
        and img.mode in _KEEP_MODES
        and not _has_transparency(img)
        and orientation == 1
        and getattr(img, "n_frames", 1) == 1
        and size == (width, height)
        and (source_format != "png" or _png_bit_depth(data) == 8)
    )
    try:
        if keep:
            channels = len(img.getbands())  # the stored picture's: the keys' decode may be gray
            if keys:  # the keys' decode (a reduced DCT scale too, never below content_keys.DRAFT a side)
                content_keys.decode_for_keys(img)
            else:
                if source_format == "jpeg":
                    # Decoded at 1/8 scale: every entropy-coded block is still decoded, which
                    # is where a damaged JPEG fails (the inverse DCT that the scale skips
                    # cannot), in less time (docs/design.md).
                    img.draft(img.mode, (max(1, width // 8), max(1, height // 8)))
                img.load()
            return PreparedImage(
                data,
                source_format,
                height,
                width,
                channels,
                converted=False,
                stored=(width, height),
                gray=content_keys.gray_image(img, upright=True) if keys else None,
            )
        if out_format not in ("jpeg", "png"):
            out_format = "png"
        if source_format == "jpeg" and orientation == 1 and size != (width, height):
            img.draft(img.mode, size)  # decode at a reduced DCT scale, still >= size
        img.load()
        img = ImageOps.exif_transpose(img) if orientation != 1 else img
        img = _to_output_mode(img, source_format == "png" and _png_bit_depth(data) == 16)
        if img.size != size:
            img = img.resize(size, Image.Resampling.BICUBIC)
        encoded = _encode(img, out_format, options.quality, buffer)
    except ImageRejected:
        raise
    except Exception as exc:
        raise _failure(exc, options) from None
    return PreparedImage(
        encoded,
        out_format,
        img.size[1],
        img.size[0],
        len(img.getbands()),
        converted=True,
        stored=(width, height),
        orientation=orientation if 1 <= orientation <= 8 else 1,
    )
