"""Generates samples/shapes_detection/: a small detection dataset in COCO form.

120 images of drawn shapes (circle, square, triangle), several objects each and some
with none, each object with its box and polygon; mostly PNG, some JPEG, and some
JPEGs stored turned with an EXIF orientation tag (3, 6 or 8) that turns them upright,
as phones write them: their annotations are in the displayed (upright) frame, as
COCO's are. Run once; the output is committed. The same seed gives the same files.

    python samples/make_detection.py
    prep convert samples/shapes_detection/images /tmp/shapes-det \\
        --annotations samples/shapes_detection/instances.json --split train=0.8,validation=0.2
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import random

from PIL import Image, ImageDraw

CLASSES = {"circle": 1, "square": 2, "triangle": 3}  # COCO category ids
ORIENTATIONS = (3, 6, 8)
# ImageOps.exif_transpose turns orientation 3 by 180, 6 by 270 and 8 by 90 degrees: the stored pixels are
# the upright ones turned the other way.
STORE_TURN = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}


def outline(kind: str, box: tuple[int, int, int, int]) -> list[float]:
    """The shape's polygon (continuous coordinates) inside its box [x0, x1] x [y0, y1]."""
    x0, y0, x1, y1 = box
    if kind == "square":
        return [x0, y0, x1, y0, x1, y1, x0, y1]
    if kind == "triangle":
        return [x0, y1, (x0 + x1) / 2, y0, x1, y1]
    cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    return [
        round(v, 2)
        for i in range(24)
        for v in (cx + rx * math.cos(i * math.pi / 12), cy + ry * math.sin(i * math.pi / 12))
    ]


def draw_image(rng: random.Random, empty: bool) -> tuple[Image.Image, list[tuple[str, tuple]]]:
    """An upright picture and its objects (class, box), shapes in cells of a 3x2 grid so none overlap."""
    width, height = rng.choice(((128, 96), (112, 112), (96, 128)))
    background = tuple(rng.randint(200, 255) for _ in range(3))
    img = Image.new("RGB", (width, height), background)
    pen = ImageDraw.Draw(img)
    objects = []
    cols, rows = (3, 2) if width >= height else (2, 3)
    cw, ch = width // cols, height // rows
    for cell in [] if empty else rng.sample(range(cols * rows), rng.randint(1, 4)):
        kind = rng.choice(list(CLASSES))
        bw, bh = rng.randint(cw // 2, cw - 6), rng.randint(ch // 2, ch - 6)
        x0 = (cell % cols) * cw + rng.randint(3, cw - bw - 3)
        y0 = (cell // cols) * ch + rng.randint(3, ch - bh - 3)
        box = (x0, y0, x0 + bw, y0 + bh)
        colour = tuple(rng.randint(0, 150) for _ in range(3))
        last = (x0 + bw - 1, y0 + bh - 1)  # pixel indices: the shape covers columns x0..x0+bw-1
        if kind == "square":
            pen.rectangle((x0, y0, *last), fill=colour)
        elif kind == "circle":
            pen.ellipse((x0, y0, *last), fill=colour)
        else:
            pen.polygon([(x0, last[1]), ((x0 + last[0]) / 2, y0), last], fill=colour)
        objects.append((kind, box))
    return img, objects


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "shapes_detection"))
    parser.add_argument("--count", type=int, default=120)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    out = pathlib.Path(args.out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    doc = {
        "info": {"description": "tfrecord-prep drawn-shape detection sample"},
        "images": [],
        "annotations": [],
        "categories": [{"id": i, "name": name, "supercategory": "shape"} for name, i in CLASSES.items()],
    }
    for i in range(args.count):
        img, objects = draw_image(rng, empty=i % 10 == 9)
        orientation = ORIENTATIONS[(i // 8) % 3] if i % 8 == 3 else 1
        name = f"{i:04d}.{'jpg' if orientation != 1 or i % 4 == 0 else 'png'}"
        if orientation != 1:
            exif = Image.Exif()
            exif[0x0112] = orientation
            img.transpose(STORE_TURN[orientation]).save(out / "images" / name, "JPEG", quality=85, exif=exif)
        elif name.endswith(".jpg"):
            img.save(out / "images" / name, "JPEG", quality=85)
        else:
            img.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(
                out / "images" / name, "PNG", optimize=True
            )
        image_id = 1 + i
        doc["images"].append({"id": image_id, "file_name": name, "width": img.width, "height": img.height})
        for kind, (x0, y0, x1, y1) in objects:
            doc["annotations"].append(
                {
                    "id": len(doc["annotations"]) + 1,
                    "image_id": image_id,
                    "category_id": CLASSES[kind],
                    "bbox": [x0, y0, x1 - x0, y1 - y0],
                    "area": (x1 - x0) * (y1 - y0),
                    "iscrowd": 0,
                    "segmentation": [outline(kind, (x0, y0, x1, y1))],
                }
            )
    (out / "instances.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.count} images and {len(doc['annotations'])} objects to {out}")


if __name__ == "__main__":
    main()
