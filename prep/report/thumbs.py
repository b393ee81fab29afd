"""Thumbnails as `data:` URIs, so the page needs no other file and makes no request.

Samples are decoded from the records' `image/encoded`; rejected inputs from SOURCE (local, or remote
through `prep.core.storage`), when the file is a regular file that decodes at all (a truncated JPEG shows what is
there). Never opens anything but a regular file (a FIFO would block), and never decodes
more than `MAX_PIXELS` unless JPEG can decode at a reduced scale.
"""

from __future__ import annotations

import base64
import io
import os
import stat
import warnings

from prep.core import storage

MAX_FILE_BYTES = 64 << 20
MAX_PIXELS = 40_000_000  # larger images are drawn only when JPEG can decode them at a reduced scale
QUALITY = 70


def data_uri(encoded: bytes, tile: int) -> str | None:
    """A JPEG thumbnail of at most tile x tile pixels as a data: URI, or None if the bytes do not decode."""
    from PIL import Image, ImageFile, ImageOps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        img: Image.Image | None = None
        before = ImageFile.LOAD_TRUNCATED_IMAGES
        for truncated in (False, True):  # a second try shows what a damaged file still holds
            ImageFile.LOAD_TRUNCATED_IMAGES = truncated
            try:
                img = Image.open(io.BytesIO(encoded))
                img.draft("RGB", (tile, tile))  # JPEG: decode at a reduced scale
                if img.width * img.height > MAX_PIXELS:
                    return None
                img = img.convert("RGB")
                break
            except Exception:  # noqa: BLE001 - anything Pillow raises means "does not decode"
                img = None
            finally:
                ImageFile.LOAD_TRUNCATED_IMAGES = before
        if img is None:
            return None
    img = ImageOps.contain(img, (tile, tile), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def input_path(source: str, path: str, raw: bytes | None) -> str | bytes:
    """Where a rejected input is: SOURCE joined with its recorded path (exact bytes when recorded)."""
    if storage.is_remote(source):
        return storage.input_path(source, path)
    if raw is not None:
        return os.path.join(os.fsencode(source), raw)
    return os.path.join(source, *path.split("/"))


def file_uri(path: str | bytes, tile: int) -> str | None:
    """The thumbnail of an input file, or None when it is not a readable regular file that decodes."""
    if isinstance(path, str) and storage.is_remote(path):
        try:
            found = storage.size(path)
            if not found or found > MAX_FILE_BYTES:
                return None
            return data_uri(storage.read_bytes(path), tile)
        except Exception:  # each store raises its own types; no thumbnail, as for a local file
            return None
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0 or info.st_size > MAX_FILE_BYTES:
            return None
        with open(path, "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    return data_uri(data, tile)
