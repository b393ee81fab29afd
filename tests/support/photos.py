"""Photo-like test images made by code, and the edited copies a duplicate finder must see through.

Nothing is downloaded. Each scene is built from what makes photographs hard for
a perceptual hash: most of the energy at low spatial frequencies (multi-octave
noise, gradients, a horizon), a few large objects, textures, a slight blur,
sensor noise and JPEG. Four kinds of scene (landscape, close-up object on a
background, texture filling the frame, interior with walls and a window) keep
unrelated images from being trivially far apart: two landscapes share their
bright-top, dark-bottom layout, as real ones do.

`EDITS` are the planted near-copies of issue 20: re-encoded at quality 60,
resized to 75%, brightness +12%, and border crops of up to 5%.
"""

from __future__ import annotations

import io
import random

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

SCENES = ("landscape", "object", "texture", "interior")


def _noise(rng: np.random.Generator, h: int, w: int, octaves: int = 5, base: int = 3, falloff: float = 0.55):
    """Fractal value noise in [0, 1]: random grids upsampled bicubically, finer ones weighted less."""
    out = np.zeros((h, w), np.float32)
    amp, total = 1.0, 0.0
    for octave in range(octaves):
        cells = base * 2**octave
        grid = rng.random((cells + 1, int(cells * w / h) + 1), dtype=np.float32)
        layer = np.asarray(Image.fromarray(grid, "F").resize((w, h), Image.BICUBIC))
        out += amp * layer
        total += amp
        amp *= falloff
    out /= total
    lo, hi = out.min(), out.max()
    return (out - lo) / (hi - lo + 1e-6)


def _colour(rng: np.random.Generator, lo: int = 0, hi: int = 255) -> np.ndarray:
    return rng.integers(lo, hi, 3).astype(np.float32)


def _blend(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    return a * (1 - t[..., None]) + b * t[..., None]


def _textured(rng, h, w, dark, light, octaves=5, base=3):
    return _blend(np.broadcast_to(dark, (h, w, 3)), np.broadcast_to(light, (h, w, 3)), _noise(rng, h, w, octaves, base))


def _shapes(rng: np.random.Generator, canvas: np.ndarray, count: int, scale: float) -> np.ndarray:
    """Draws `count` textured ellipses and polygons onto `canvas` (H x W x 3 float)."""
    h, w = canvas.shape[:2]
    for _ in range(count):
        mask = Image.new("L", (w, h), 0)
        draw = ImageDraw.Draw(mask)
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.05, scale) * min(w, h)
        if rng.random() < 0.5:
            draw.ellipse([cx - r, cy - r * rng.uniform(0.4, 1.6), cx + r, cy + r * rng.uniform(0.4, 1.6)], fill=255)
        else:
            angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(3, 8))))
            radii = r * rng.uniform(0.5, 1.3, len(angles))
            draw.polygon(
                [(float(cx + q * np.cos(a)), float(cy + q * np.sin(a))) for a, q in zip(angles, radii)], fill=255
            )
        alpha = np.asarray(mask.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 3))), np.float32) / 255
        base = _colour(rng)
        fill = _textured(rng, h, w, base * rng.uniform(0.4, 0.8), np.minimum(base * 1.3 + 20, 255), 4, 4)
        canvas = _blend(canvas, fill, alpha)
    return canvas


def _scene(rng: np.random.Generator, kind: str, h: int, w: int) -> np.ndarray:
    if kind == "landscape":
        sky = _blend(
            np.broadcast_to(_colour(rng, 120), (h, w, 3)),
            np.broadcast_to(_colour(rng, 60), (h, w, 3)),
            np.broadcast_to(np.linspace(0, 1, h, dtype=np.float32)[:, None], (h, w)),
        )
        clouds = _noise(rng, h, w, 5, 2) ** 2
        sky = _blend(sky, np.full((h, w, 3), 240, np.float32), clouds * rng.uniform(0.2, 0.8))
        ridge = (rng.uniform(0.3, 0.75) + 0.15 * (_noise(rng, 8, w, 4, 2)[0] - 0.5)) * h
        ground = _textured(rng, h, w, _colour(rng, 0, 100), _colour(rng, 60, 220))
        below = (np.arange(h, dtype=np.float32)[:, None] > ridge[None, :]).astype(np.float32)
        canvas = _blend(sky, ground, below)
        return _shapes(rng, canvas, int(rng.integers(0, 5)), 0.25)
    if kind == "object":
        canvas = _textured(rng, h, w, _colour(rng, 0, 120), _colour(rng, 80, 255), 4, 2)
        return _shapes(rng, canvas, int(rng.integers(1, 4)), 0.45)
    if kind == "texture":
        canvas = _textured(rng, h, w, _colour(rng, 0, 90), _colour(rng, 100, 255), 6, int(rng.integers(3, 9)))
        return _shapes(rng, canvas, int(rng.integers(4, 14)), 0.12)
    # interior: walls meeting at a random corner, a floor, a bright window
    canvas = _textured(rng, h, w, _colour(rng, 60, 160), _colour(rng, 140, 240), 3, 2)
    corner, floor = int(rng.uniform(0.2, 0.8) * w), int(rng.uniform(0.55, 0.85) * h)
    canvas[:, corner:] *= rng.uniform(0.6, 0.9)
    canvas[floor:] = _textured(rng, h - floor, w, _colour(rng, 20, 100), _colour(rng, 80, 180), 5, 4)
    x0, y0 = int(rng.uniform(0.05, 0.6) * w), int(rng.uniform(0.05, 0.3) * h)
    canvas[y0 : y0 + int(0.3 * h), x0 : x0 + int(0.25 * w)] = _colour(rng, 200)
    return _shapes(rng, canvas, int(rng.integers(1, 4)), 0.2)


def photo(seed: int, size: tuple[int, int] = (320, 240)) -> Image.Image:
    """A photo-like RGB image of `size` (width, height), a pure function of `seed`."""
    rng = np.random.default_rng(seed)
    w, h = size
    kind = SCENES[seed % len(SCENES)]
    canvas = _scene(rng, kind, h, w)
    light = _noise(rng, h, w, 2, 1)  # uneven lighting, as a lens and the sun make it
    canvas *= (0.75 + 0.5 * light)[..., None]
    img = Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8), "RGB")
    img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
    arr = np.asarray(img, np.float32) + rng.normal(0, rng.uniform(1, 5), (h, w, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def jpeg(img: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _open(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


def reencode(data: bytes, rnd: random.Random) -> bytes:
    return jpeg(_open(data), 60)


def resize(data: bytes, rnd: random.Random) -> bytes:
    img = _open(data)
    return jpeg(img.resize((round(img.width * 0.75), round(img.height * 0.75)), Image.LANCZOS))


def brighten(data: bytes, rnd: random.Random) -> bytes:
    return jpeg(ImageEnhance.Brightness(_open(data)).enhance(1.12))


def crop(data: bytes, rnd: random.Random, most: float = 0.05) -> bytes:
    """Removes 1% to `most` of the width and, independently, of the height, split at random between the
    two opposite borders (so the crop is rarely centred)."""
    img = _open(data)
    box = []
    for extent in (img.width, img.height):
        cut = extent * rnd.uniform(0.01, most)
        first = cut * rnd.random()
        box.append((round(first), round(extent - (cut - first))))
    (left, right), (top, bottom) = box
    return jpeg(img.crop((left, top, right, bottom)))


def copy(data: bytes, rnd: random.Random) -> bytes:
    return data


EDITS = {"copy": copy, "reencode_q60": reencode, "resize_75": resize, "brightness_12": brighten, "crop_5": crop}


def planted_set(originals: int, edited: int, seed: int = 0, size: tuple[int, int] = (320, 240)):
    """`originals` distinct photos (JPEG q90), and for the first `edited` of them one copy per kind of `EDITS`.

    Returns:
        (images, planted): images is a list of (name, bytes); planted is a list of
        (kind, name of the original, name of the copy).
    """
    rnd = random.Random(seed)
    images, planted = [], []
    for i in range(originals):
        data = jpeg(photo(seed * 1_000_003 + i, size))
        name = f"photo_{i:05d}.jpg"
        images.append((name, data))
        if i < edited:
            for kind, edit in EDITS.items():
                copy_name = f"photo_{i:05d}_{kind}.jpg"
                images.append((copy_name, edit(data, rnd)))
                planted.append((kind, name, copy_name))
    return images, planted


def write_leaky_pair(root, per_kind: int = 8, unrelated: int = 20, size: tuple[int, int] = (160, 120), seed: int = 0):
    """Two class trees: `root/a` with photos, `root/b` with an edited copy of `per_kind` of them per kind of
    `EDITS`, plus `unrelated` other photos; and `root/c` with only other photos.

    Returns:
        The planted leaks: (kind, path in a, path in b), paths relative to their tree, as image/filename holds them.
    """
    import pathlib

    root = pathlib.Path(root)
    rnd = random.Random(seed)
    originals = per_kind * len(EDITS) + 10  # some of A's photos are in no other tree
    classes = ("cat", "dog")
    planted, n = [], 0
    for i in range(originals):
        cls = classes[i % 2]
        data = jpeg(photo(seed * 1_000_003 + i, size))
        (root / "a" / cls).mkdir(parents=True, exist_ok=True)
        (root / "a" / cls / f"a{i:03d}.jpg").write_bytes(data)
        if i < per_kind * len(EDITS):
            kind = list(EDITS)[i % len(EDITS)]
            (root / "b" / cls).mkdir(parents=True, exist_ok=True)
            (root / "b" / cls / f"b{i:03d}_{kind}.jpg").write_bytes(EDITS[kind](data, rnd))
            planted.append((kind, f"{cls}/a{i:03d}.jpg", f"{cls}/b{i:03d}_{kind}.jpg"))
    for tree in ("b", "c"):
        for j in range(unrelated):
            cls = classes[j % 2]
            (root / tree / cls).mkdir(parents=True, exist_ok=True)
            n += 1
            (root / tree / cls / f"{tree}{j:03d}.jpg").write_bytes(jpeg(photo(seed * 1_000_003 + 500_000 + n, size)))
    return planted
