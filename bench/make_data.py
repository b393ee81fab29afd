"""Generates realistic benchmark JPEGs: ~500x375 (varied), quality 90, photo-like content.

    python bench/make_data.py --count 2000 --out bench/data/jpeg2000

Content is smooth colour fields, drawn shapes and sensor-like noise, so JPEG
sizes (~40-90 KB) and decode costs resemble photographs rather than flat
test patterns. Classes are skewed (--skew: the first class holds that share).

    python bench/make_data.py --count 100000 --tile 20000 --out bench/data/jpeg100000

`--tile N` makes the set from the N-photo one (made first if missing): every photo hard-linked
count/N times under new names, in minutes less than generating. Copies are byte-identical, so
only a conversion that does not look for duplicates (`--duplicates off`) does the work of as many
distinct photos; the benchmarks say where they use a tiled set.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import pathlib
import random
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def prep_command() -> str:
    """The `prep` console script installed with this interpreter, not a shim found on
    PATH (pyenv's adds ~50 ms of bash to every run it times)."""
    script = pathlib.Path(sys.executable).with_name("prep")
    return str(script) if script.exists() else "prep"


def photo_like(rng: random.Random, width: int, height: int) -> Image.Image:
    nprng = np.random.default_rng(rng.randrange(2**32))
    coarse = nprng.integers(0, 255, (6, 8, 3), dtype=np.uint8)
    img = Image.fromarray(coarse, "RGB").resize((width, height), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(3, 9)):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        x1, y1 = x0 + rng.randint(20, width // 2), y0 + rng.randint(20, height // 2)
        colour = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 2.0)))
    noise = nprng.normal(0, rng.uniform(4, 10), (height, width, 3))
    return Image.fromarray(np.clip(np.asarray(img, dtype=np.float32) + noise, 0, 255).astype(np.uint8), "RGB")


def _write(job):
    path, seed, width, height = job
    photo_like(random.Random(seed), width, height).save(path, "JPEG", quality=90)


def ensure_data(count: int) -> pathlib.Path:
    """bench/data/jpeg<count>, generated with the defaults on first use."""
    data = pathlib.Path(__file__).parent / "data" / f"jpeg{count}"
    if not data.exists():
        main(["--count", str(count), "--out", str(data)])
    return data


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--skew", type=float, default=0.3, help="share of the first class")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tile", type=int, help="hard-link the photos of this many photos' set (see above)")
    args = parser.parse_args(argv)
    if args.tile:
        tile(ensure_data(args.tile), pathlib.Path(args.out), args.count)
        return
    rng = random.Random(args.seed)
    out = pathlib.Path(args.out)
    first = int(args.count * args.skew)
    rest = args.count - first
    counts = [first] + [
        rest // (args.classes - 1) + (1 if i < rest % (args.classes - 1) else 0) for i in range(args.classes - 1)
    ]
    jobs = []
    for c, n in enumerate(counts):
        (out / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
        for i in range(n):
            w, h = rng.randint(440, 560), rng.randint(330, 420)
            if rng.random() < 0.3:
                w, h = h, w
            jobs.append((out / f"class{c:02d}" / f"img{i:06d}.jpg", rng.randrange(2**32), w, h))
    with concurrent.futures.ProcessPoolExecutor() as pool:
        list(pool.map(_write, jobs, chunksize=64))
    print(f"wrote {len(jobs)} JPEGs in {len(counts)} classes to {out}")


def tile(base: pathlib.Path, out: pathlib.Path, count: int) -> None:
    """`out` holds every photo of `base` count / len(base) times (a whole number), hard-linked."""
    photos = sorted(base.glob("*/*.jpg"))
    copies, rest = divmod(count, len(photos))
    if rest or not copies:
        raise SystemExit(f"--count {count} is not a multiple of the {len(photos)} photos of {base}")
    for photo in photos:
        (out / photo.parent.name).mkdir(parents=True, exist_ok=True)
        for k in range(copies):
            (out / photo.parent.name / f"{photo.stem}-{k}.jpg").hardlink_to(photo)
    print(f"linked {count} JPEGs ({len(photos)} photos x {copies}) from {base} to {out}")


if __name__ == "__main__":
    main()
