"""Pictures of a dataset for `prep inspect`: a contact sheet of samples per class, and a class-count chart.

The contact sheet shows what the shards hold (decoded from `image/encoded`),
not the source images: one row per class, labelled with its name, and up to N
thumbnails. The chart is drawn with matplotlib (imported only when asked for).

Records of the other tasks (`TaskRecord`) are drawn with what they say on top, in one
colour per class (`class_colour`, Pascal VOC's palette, shown beside each row's name):
detection boxes with their class names and the outlines of instance masks; for
segmentation the class map as a translucent overlay (ignored pixels left clear).
"""

from __future__ import annotations

import dataclasses
import io
import warnings
from typing import cast

from prep.core.schema import IGNORE_VALUE, ImageRecord
from prep.core.task_record import TaskRecord

BACKGROUND = (255, 255, 255)
EMPTY = (238, 238, 238)  # a tile with no image: the class has fewer records than asked for
MISSING = (170, 170, 170)  # tile of an image that does not decode
TEXT = (0, 0, 0)
OVERLAY_ALPHA = 0.45  # segmentation: the class colour's share of an overlaid pixel


def class_colour(class_id: int) -> tuple[int, int, int]:
    """The colour of a class id (Pascal VOC's colour map: 0 black, 1 dark red, 2 dark green, ...).

    Detection ids are the records' (from 1); multi-label and sheet rows use label index + 1;
    segmentation uses the class-map value, so 0 (often the background) is black.
    """
    r = g = b = 0
    c = class_id
    for shift in range(7, -1, -1):
        r |= (c & 1) << shift
        g |= ((c >> 1) & 1) << shift
        b |= ((c >> 2) & 1) << shift
        c >>= 3
    return r, g, b


def thumbnail_frame(width: int, height: int, tile: int) -> tuple[int, int, int, int]:
    """Where an image of `width` x `height` lands in its tile: (left, top, width, height), as
    `ImageOps.contain` scales it and `render_sheet` centres it."""
    if width / height > 1:
        w, h = tile, round(height * tile / width)
    else:
        w, h = round(width * tile / height), tile
    return (tile - w) // 2, (tile - h) // 2, w, h


@dataclasses.dataclass(frozen=True)
class SheetLayout:
    """Geometry of a contact sheet: `rows` classes by `columns` tiles, after a label column."""

    rows: int
    columns: int
    tile: int = 96
    label_width: int = 160
    pad: int = 4

    def __post_init__(self):
        if self.rows < 1 or self.columns < 1:
            raise ValueError(f"a contact sheet needs at least one row and column, got {self.rows}x{self.columns}")
        if not 16 <= self.tile <= 1024:
            raise ValueError(f"tile size must be in [16, 1024], got {self.tile}")

    @property
    def size(self) -> tuple[int, int]:
        return (
            self.label_width + self.columns * (self.tile + self.pad) + self.pad,
            self.rows * (self.tile + self.pad) + self.pad,
        )

    def tile_box(self, row: int, column: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) of a tile, right and bottom exclusive."""
        left = self.label_width + self.pad + column * (self.tile + self.pad)
        top = self.pad + row * (self.tile + self.pad)
        return left, top, left + self.tile, top + self.tile

    def label_box(self, row: int) -> tuple[int, int, int, int]:
        top = self.pad + row * (self.tile + self.pad)
        return self.pad, top, self.label_width, top + self.tile


def _thumbnail(record: ImageRecord | TaskRecord, tile: int):
    from PIL import Image, ImageOps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            img: Image.Image = Image.open(io.BytesIO(record.encoded))
            img.draft("RGB", (tile, tile))  # JPEG: decode at a reduced scale
            img = img.convert("RGB")
        except Exception:  # a damaged image still gets its (grey) tile
            return Image.new("RGB", (tile, tile), MISSING)
    thumb = ImageOps.contain(img, (tile, tile), Image.Resampling.BICUBIC)  # small images are scaled up too
    if isinstance(record, TaskRecord):
        try:
            thumb = _overlay(thumb, record)
        except Exception:  # a damaged mask: the image is still shown; prep verify --deep names the mask
            pass
    return thumb


def _mask_at(png: bytes, size: tuple[int, int]):
    from PIL import Image

    return Image.open(io.BytesIO(png)).convert("L").resize(size, Image.Resampling.NEAREST)


def _overlay(thumb, record: TaskRecord):
    """Draws what a task record says onto its thumbnail (of the record's image, scaled)."""
    from PIL import Image, ImageChops, ImageDraw, ImageFilter, ImageFont

    w, h = thumb.size
    if record.task == "segmentation":
        import numpy as np

        classes = np.asarray(_mask_at(record.segmentation or b"", (w, h)))
        colours = np.array([class_colour(v) for v in range(256)], np.float32)[classes]
        pixels = np.asarray(thumb, np.float32)
        blended = (1 - OVERLAY_ALPHA) * pixels + OVERLAY_ALPHA * colours
        keep = (classes == IGNORE_VALUE)[..., None]
        return Image.fromarray(np.where(keep, pixels, blended).round().astype(np.uint8), "RGB")
    if record.task != "detection":
        return thumb
    draw = ImageDraw.Draw(thumb)
    font = ImageFont.load_default(size=10)
    for o in record.objects:
        colour = class_colour(o.label)
        if o.mask is not None:
            mask = _mask_at(o.mask, (w, h)).point(lambda v: 255 if v else 0)
            edge = ImageChops.subtract(mask, mask.filter(ImageFilter.MinFilter(3)))
            draw.bitmap((0, 0), edge, fill=colour)
    for o in record.objects:  # boxes and names over every outline
        colour = class_colour(o.label)
        x0, y0 = round(o.xmin * w), round(o.ymin * h)
        x1, y1 = max(x0, round(o.xmax * w) - 1), max(y0, round(o.ymax * h) - 1)
        draw.rectangle((x0, y0, x1, y1), outline=colour)
        if o.text:
            left, top, right, bottom = draw.textbbox((0, 0), o.text, font=font)
            ty = y0 - (bottom - top) - 2 if y0 >= bottom - top + 2 else y1 + 2  # above the box, else below
            draw.rectangle((x0, ty, x0 + right - left + 2, ty + bottom - top + 1), fill=colour)
            draw.text((x0 + 1 - left, ty - top), o.text, fill=(255, 255, 255), font=font)
    return thumb


def _fit(draw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def render_sheet(labels: list[str], picked: dict[int, list[ImageRecord | TaskRecord]], layout: SheetLayout):
    """Draws the contact sheet; returns a Pillow RGB image of `layout.size`.

    Args:
        labels: class names, one row each in label order.
        picked: records per label index (`TaskRecord`s: records containing the class), at most
            `layout.columns` each.
        layout: geometry; `layout.rows` must be `len(labels)`.
    """
    from PIL import Image, ImageDraw, ImageFont

    sheet = Image.new("RGB", layout.size, BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=13)
    task = next((r.task for rs in picked.values() for r in rs if isinstance(r, TaskRecord)), None)
    for row, name in enumerate(labels):
        left, top, right, _ = layout.label_box(row)
        records = picked.get(row, [])
        if task in ("detection", "segmentation"):  # the class's colour on the tiles, beside its name
            value = row if task == "segmentation" else row + 1
            draw.rectangle((left, top + 3, left + 11, top + 14), fill=class_colour(value), outline=TEXT)
            left += 16
        draw.text((left, top + 2), _fit(draw, name, font, right - left - 4), fill=TEXT, font=font)
        ident = f"id {row + 1}" if task == "detection" else f"label {row}"
        draw.text((left, top + 20), ident if records else f"{ident}: none", fill=TEXT, font=font)
        for column in range(layout.columns):
            x0, y0, x1, y1 = layout.tile_box(row, column)
            draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=EMPTY)
            if column >= len(records):
                continue
            img = _thumbnail(records[column], layout.tile)
            sheet.paste(img, (x0 + (layout.tile - img.width) // 2, y0 + (layout.tile - img.height) // 2))
    return sheet


def write_plot(summary: dict, path: str) -> tuple[int, int]:
    """Writes a bar chart of records per class, one bar per split, to the PNG `path`; returns its pixel size."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    from matplotlib.ticker import MaxNLocator

    labels = summary["labels"]
    splits = list(summary["splits"])
    width = min(40.0, max(6.0, 0.35 * len(labels) * max(1, len(splits)) + 2))
    fig = Figure(figsize=(width, 4.5), dpi=100, layout="constrained")
    ax = fig.subplots()
    bar = 0.8 / max(1, len(splits))
    for i, split in enumerate(splits):
        counts = [summary["splits"][split]["classes"][name]["count"] for name in labels]
        ax.bar([x + (i - (len(splits) - 1) / 2) * bar for x in range(len(labels))], counts, bar, label=split)
    ax.set_xticks(
        range(len(labels)), labels, rotation=45 if len(labels) > 8 else 0, ha="right" if len(labels) > 8 else "center"
    )
    ax.set_ylabel("records")
    # the default major locator, an AutoLocator, is a MaxNLocator; the stubs type it as any Locator
    cast(MaxNLocator, ax.yaxis.get_major_locator()).set_params(integer=True)
    ax.set_title(f"Records per class and split: {summary['output']}")
    if splits:
        ax.legend()
    fig.savefig(path, format="png")
    return int(fig.get_figwidth() * fig.dpi), int(fig.get_figheight() * fig.dpi)
