"""Drawn-shape detection and segmentation sets whose true boxes can be found in the pixels.

Every shape is filled with its class's colour on a white background, and shapes never
touch (each sits in its own cell of a grid), so the box of an object can be computed
from any stored, decoded copy of the image (`true_box`): the pixels near the stored box
that are closer to the class colour than to white. A shape covering pixel columns
x0..x1-1 has the continuous box [x0, x1], as the annotations say (COCO xywh, VOC 1-based
indices, YOLO centres and CSV corners are all written from it).

EXIF-rotated JPEGs are stored turned, with the orientation tag that turns them upright:
their annotations are in the displayed (upright) frame.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import pathlib
import random

import numpy as np
from PIL import Image, ImageDraw

COLOURS = ((220, 30, 30), (30, 160, 30), (30, 30, 220), (200, 160, 0), (150, 0, 170), (0, 150, 160))
SOURCE_IDS = (3, 7, 12, 20, 31, 44)  # sparse COCO category ids, as COCO's own
# ImageOps.exif_transpose turns orientation 3 by 180, 6 by 270 and 8 by 90 degrees; the stored pixels are
# the upright ones turned the other way.
_STORE_TURN = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}


@dataclasses.dataclass(frozen=True)
class Shape:
    label: str
    kind: str  # rect, ellipse, triangle
    box: tuple[int, int, int, int]  # continuous (x0, y0, x1, y1) in the displayed frame

    def polygon(self) -> list[float]:
        """The shape's outline as COCO polygon coordinates (continuous, in the displayed frame)."""
        x0, y0, x1, y1 = self.box
        if self.kind == "triangle":
            return [x0, y1, (x0 + x1) / 2, y0, x1, y1]
        if self.kind == "ellipse":
            cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
            angles = np.linspace(0, 2 * np.pi, 24, endpoint=False)
            return [round(float(v), 3) for a in angles for v in (cx + rx * np.cos(a), cy + ry * np.sin(a))]
        return [x0, y0, x1, y0, x1, y1, x0, y1]


@dataclasses.dataclass(frozen=True)
class DrawnImage:
    path: str  # relative to SOURCE
    size: tuple[int, int]  # displayed (width, height)
    shapes: tuple[Shape, ...]
    orientation: int = 1
    fmt: str = "PNG"


def draw(img: DrawnImage, classes: tuple[str, ...]) -> Image.Image:
    """The displayed (upright) picture of `img`."""
    picture = Image.new("RGB", img.size, (255, 255, 255))
    pen = ImageDraw.Draw(picture)
    for s in img.shapes:
        colour = COLOURS[classes.index(s.label)]
        x0, y0, x1, y1 = s.box
        last = (x1 - 1, y1 - 1)  # pixel indices: the shape covers columns x0..x1-1
        if s.kind == "rect":
            pen.rectangle((x0, y0, *last), fill=colour)
        elif s.kind == "ellipse":
            pen.ellipse((x0, y0, *last), fill=colour)
        else:
            pen.polygon([(x0, last[1]), ((x0 + last[0]) / 2, y0), last], fill=colour)
    return picture


def class_map(img: DrawnImage, classes: tuple[str, ...]) -> Image.Image:
    """The segmentation class map of `img` (displayed frame): class index where a shape is, 0 elsewhere
    is background only if classes[0] is the background class; callers name it."""
    picture = draw(img, classes)
    arr = np.asarray(picture).astype(int)
    out = np.zeros(arr.shape[:2], np.uint8)
    for i, colour in enumerate(COLOURS[: len(classes)]):
        out[np.abs(arr - colour).sum(axis=2) == 0] = i
    return Image.fromarray(out, "L")


def encode(img: DrawnImage, classes: tuple[str, ...]) -> bytes:
    """The file of `img`: its picture, stored turned with an EXIF orientation tag when it has one."""
    picture = draw(img, classes)
    buf = io.BytesIO()
    if img.orientation != 1:
        exif = Image.Exif()
        exif[0x0112] = img.orientation
        picture.transpose(_STORE_TURN[img.orientation]).save(buf, "JPEG", quality=95, exif=exif)
    elif img.fmt == "JPEG":
        picture.save(buf, "JPEG", quality=95)
    else:
        picture.save(buf, "PNG")
    return buf.getvalue()


def make_images(
    n: int,
    classes: tuple[str, ...],
    seed: int = 0,
    size=(96, 72),
    max_objects: int = 4,
    empty_every: int = 7,
    jpeg_every: int = 3,
    orientations=(),
    prefix: str = "img",
) -> list[DrawnImage]:
    """`n` images with 1..max_objects shapes each (every `empty_every`-th none), on a grid of cells
    so that shapes never touch; the images listed in `orientations` order get EXIF orientations."""
    rng = random.Random(seed)
    out = []
    w, h = size
    cols, rows = 4, 3
    cw, ch = w // cols, h // rows
    for i in range(n):
        count = 0 if empty_every and i % empty_every == empty_every - 1 else rng.randint(1, max_objects)
        cells = rng.sample(range(cols * rows), min(count, cols * rows))
        shapes = []
        for cell in cells:
            cx, cy = (cell % cols) * cw, (cell // cols) * ch
            bw, bh = rng.randint(cw // 2, cw - 8), rng.randint(ch // 2, ch - 8)  # >= 8 px between shapes
            x0, y0 = cx + rng.randint(4, cw - bw - 4), cy + rng.randint(4, ch - bh - 4)
            shapes.append(
                Shape(rng.choice(classes), rng.choice(("rect", "ellipse", "triangle")), (x0, y0, x0 + bw, y0 + bh))
            )
        orientation = orientations[i] if i < len(orientations) else 1
        fmt = "JPEG" if orientation != 1 or (jpeg_every and i % jpeg_every == 0) else "PNG"
        out.append(
            DrawnImage(f"{prefix}{i:04d}.{'jpg' if fmt == 'JPEG' else 'png'}", size, tuple(shapes), orientation, fmt)
        )
    return out


def write_images(root: pathlib.Path, images, classes) -> None:
    for img in images:
        path = root / img.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode(img, classes))


def coco(images, classes, image_ids=None) -> dict:
    """A COCO instances document for `images` (sparse category ids, polygons, displayed sizes)."""
    doc = {
        "images": [],
        "annotations": [],
        "categories": [{"id": SOURCE_IDS[i], "name": name} for i, name in enumerate(classes)],
    }
    ann_id = 1
    for n, img in enumerate(images):
        image_id = image_ids[n] if image_ids else 1000 + n
        doc["images"].append({"id": image_id, "file_name": img.path, "width": img.size[0], "height": img.size[1]})
        for s in img.shapes:
            x0, y0, x1, y1 = s.box
            doc["annotations"].append(
                {
                    "id": ann_id,
                    "image_id": image_id,
                    "category_id": SOURCE_IDS[classes.index(s.label)],
                    "bbox": [x0, y0, x1 - x0, y1 - y0],
                    "area": float((x1 - x0) * (y1 - y0)),
                    "iscrowd": 0,
                    "segmentation": [s.polygon()],
                }
            )
            ann_id += 1
    return doc


def write_voc(folder: pathlib.Path, images) -> None:
    """Pascal VOC XML, one per image, 1-based pixel indices (xmin = x0 + 1, xmax = x1)."""
    folder.mkdir(parents=True, exist_ok=True)
    for img in images:
        objs = "".join(
            f"<object><name>{s.label}</name><difficult>0</difficult><bndbox><xmin>{s.box[0] + 1}</xmin>"
            f"<ymin>{s.box[1] + 1}</ymin><xmax>{s.box[2]}</xmax><ymax>{s.box[3]}</ymax></bndbox></object>"
            for s in img.shapes
        )
        xml = (
            f"<annotation><filename>{img.path}</filename><size><width>{img.size[0]}</width>"
            f"<height>{img.size[1]}</height><depth>3</depth></size>{objs}</annotation>"
        )
        (folder / (img.path.rsplit(".", 1)[0] + ".xml")).write_text(xml)


def write_yolo(folder: pathlib.Path, images, classes) -> None:
    """YOLO txt (class cx cy w h, normalised) and classes.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "classes.txt").write_text("\n".join(classes) + "\n")
    for img in images:
        w, h = img.size
        lines = [
            f"{classes.index(s.label)} {(s.box[0] + s.box[2]) / 2 / w:.8f} {(s.box[1] + s.box[3]) / 2 / h:.8f} "
            f"{(s.box[2] - s.box[0]) / w:.8f} {(s.box[3] - s.box[1]) / h:.8f}"
            for s in img.shapes
        ]
        (folder / (img.path.rsplit(".", 1)[0] + ".txt")).write_text("\n".join(lines) + ("\n" if lines else ""))


def write_box_csv(path: pathlib.Path, images) -> None:
    """One box per row (path,label,xmin,ymin,xmax,ymax); an image without objects has empty box fields."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "label", "xmin", "ymin", "xmax", "ymax"])
        for img in images:
            if not img.shapes:
                out.writerow([img.path, "", "", "", "", ""])
            for s in img.shapes:
                out.writerow([img.path, s.label, *s.box])


def true_box(pixels: np.ndarray, colour, near, margin: int = 3):
    """The continuous box of the pixels of `colour` around `near` (x0, y0, x1, y1 in pixels), or None.

    A pixel belongs to the shape when it has at least a fifth of the colour's tint (its distance
    from white): resizing blends a shape's edge pixels with the background, and a triangle's apex
    keeps only a faint tint.
    """
    h, w = pixels.shape[:2]
    x0, y0 = max(0, int(near[0]) - margin), max(0, int(near[1]) - margin)
    x1, y1 = min(w, int(np.ceil(near[2])) + margin), min(h, int(np.ceil(near[3])) + margin)
    region = pixels[y0:y1, x0:x1].astype(float)
    if region.ndim == 2:
        region = np.repeat(region[..., None], 3, axis=2)
    tint = np.abs(255.0 - np.asarray(colour, float)).sum()
    to_white = np.abs(region - 255.0).sum(axis=2)
    ys, xs = np.nonzero(to_white >= tint / 5)
    if not len(xs):
        return None
    return (x0 + xs.min(), y0 + ys.min(), x0 + xs.max() + 1, y0 + ys.max() + 1)


def write_coco_set(root: pathlib.Path, n: int, classes=("cat", "dog", "bird"), **kwargs):
    """SOURCE root/images with `n` drawn images and root/instances.json; returns (images, json path)."""
    images = make_images(n, tuple(classes), **kwargs)
    write_images(root / "images", images, tuple(classes))
    path = root / "instances.json"
    path.write_text(json.dumps(coco(images, tuple(classes))))
    return images, path
