"""Generates samples/shapes/: a small, learnable, deliberately uneven image dataset.

Five classes of drawn shapes with random colour, size, position, background and
noise; mostly JPEG with some PNG; varied image sizes. Run once; the output is
committed. Re-running with the same seed gives the same images.

    python samples/make_samples.py
"""

from __future__ import annotations

import argparse
import math
import pathlib
import random

import numpy as np
from PIL import Image, ImageDraw

COUNTS = {"circle": 60, "square": 48, "triangle": 40, "star": 32, "cross": 24}


def _polygon(cx, cy, r, sides, rotation, inner=None):
    points = []
    steps = sides * (2 if inner else 1)
    for i in range(steps):
        angle = rotation + 2 * math.pi * i / steps
        radius = inner * r if inner and i % 2 else r
        points.append((cx + radius * math.cos(angle), cy + radius * math.sin(angle)))
    return points


def draw_shape(shape: str, rng: random.Random) -> Image.Image:
    width, height = rng.randint(96, 200), rng.randint(96, 200)
    background = tuple(rng.randint(0, 255) for _ in range(3))
    colour = tuple((c + rng.randint(96, 160)) % 256 for c in background)
    img = Image.new("RGB", (width, height), background)
    draw = ImageDraw.Draw(img)
    r = rng.uniform(0.22, 0.4) * min(width, height)
    cx, cy = rng.uniform(r, width - r), rng.uniform(r, height - r)
    rotation = rng.uniform(0, 2 * math.pi)
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=colour)
    elif shape == "square":
        draw.polygon(_polygon(cx, cy, r, 4, rotation), fill=colour)
    elif shape == "triangle":
        draw.polygon(_polygon(cx, cy, r, 3, rotation), fill=colour)
    elif shape == "star":
        draw.polygon(_polygon(cx, cy, r, 5, rotation, inner=0.45), fill=colour)
    elif shape == "cross":
        w = r * 0.35
        for angle in (rotation, rotation + math.pi / 2):
            dx, dy = math.cos(angle), math.sin(angle)
            px, py = -dy, dx
            draw.polygon(
                [
                    (cx + r * dx + w * px, cy + r * dy + w * py),
                    (cx + r * dx - w * px, cy + r * dy - w * py),
                    (cx - r * dx - w * px, cy - r * dy - w * py),
                    (cx - r * dx + w * px, cy - r * dy + w * py),
                ],
                fill=colour,
            )
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0, 12, (height, width, 3))
    pixels = np.clip(np.asarray(img, dtype=np.float64) + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels, "RGB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "shapes"))
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    out = pathlib.Path(args.out)
    for shape, count in COUNTS.items():
        (out / shape).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            img = draw_shape(shape, rng)
            if rng.random() < 0.2:
                img.save(out / shape / f"{shape}_{i:03d}.png", optimize=True)
            else:
                img.save(out / shape / f"{shape}_{i:03d}.jpg", quality=rng.choice([75, 85, 90]))
    print(f"wrote {sum(COUNTS.values())} images to {out}")


if __name__ == "__main__":
    main()
