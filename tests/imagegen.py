"""Small test images made with Pillow and numpy; nothing is downloaded."""

from __future__ import annotations

import io
import pathlib
import random

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
            "P", palette=Image.Palette.ADAPTIVE)
    else:
        arr = rng.integers(0, 255, (size[1], size[0], channels), dtype=np.uint8)
        img = Image.fromarray(arr[..., 0] if channels == 1 else arr, mode)
    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return buf.getvalue()


def write_class_tree(root: pathlib.Path, counts: dict[str, int], size=(20, 16), png_every: int = 5,
                     seed: int = 0, order: str = "forward") -> list[pathlib.Path]:
    """Writes root/<class>/<i>.jpg|png with `counts` images per class; returns the paths."""
    jobs = []
    for cls, n in counts.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            ext = "png" if png_every and i % png_every == png_every - 1 else "jpg"
            jobs.append((root / cls / f"{cls}_{i:04d}.{ext}", ext, hash((cls, i, seed)) & 0xFFFF))
    if order == "reverse":
        jobs.reverse()
    elif order == "shuffle":
        random.Random(seed).shuffle(jobs)
    for path, ext, s in jobs:
        path.write_bytes(image_bytes("PNG" if ext == "png" else "JPEG", size=size, seed=s))
    return [p for p, _, _ in jobs]
