"""Pictures of a dataset for `prep inspect`: a contact sheet of samples per class, and a class-count chart.

The contact sheet shows what the shards hold (decoded from `image/encoded`),
not the source images: one row per class, labelled with its name, and up to N
thumbnails. The chart is drawn with matplotlib (imported only when asked for).
"""

from __future__ import annotations

import dataclasses
import io
import warnings

from prep.core.schema import ImageRecord

BACKGROUND = (255, 255, 255)
EMPTY = (238, 238, 238)  # a tile with no image: the class has fewer records than asked for
MISSING = (170, 170, 170)  # tile of an image that does not decode
TEXT = (0, 0, 0)


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
        return (self.label_width + self.columns * (self.tile + self.pad) + self.pad,
                self.rows * (self.tile + self.pad) + self.pad)

    def tile_box(self, row: int, column: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) of a tile, right and bottom exclusive."""
        left = self.label_width + self.pad + column * (self.tile + self.pad)
        top = self.pad + row * (self.tile + self.pad)
        return left, top, left + self.tile, top + self.tile

    def label_box(self, row: int) -> tuple[int, int, int, int]:
        top = self.pad + row * (self.tile + self.pad)
        return self.pad, top, self.label_width, top + self.tile


def _thumbnail(record: ImageRecord, tile: int):
    from PIL import Image, ImageOps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            img = Image.open(io.BytesIO(record.encoded))
            img.draft("RGB", (tile, tile))  # JPEG: decode at a reduced scale
            img = img.convert("RGB")
        except Exception:  # a damaged image still gets its (grey) tile
            return Image.new("RGB", (tile, tile), MISSING)
    return ImageOps.contain(img, (tile, tile), Image.Resampling.BICUBIC)  # small images are scaled up too


def _fit(draw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def render_sheet(labels: list[str], picked: dict[int, list[ImageRecord]], layout: SheetLayout):
    """Draws the contact sheet; returns a Pillow RGB image of `layout.size`.

    Args:
        labels: class names, one row each in label order.
        picked: records per label id, at most `layout.columns` each.
        layout: geometry; `layout.rows` must be `len(labels)`.
    """
    from PIL import Image, ImageDraw, ImageFont

    sheet = Image.new("RGB", layout.size, BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=13)
    for row, name in enumerate(labels):
        left, top, right, _ = layout.label_box(row)
        records = picked.get(row, [])
        draw.text((left, top + 2), _fit(draw, name, font, right - left - 4), fill=TEXT, font=font)
        draw.text((left, top + 20), f"label {row}" if records else f"label {row}: none", fill=TEXT, font=font)
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

    labels = summary["labels"]
    splits = list(summary["splits"])
    width = min(40.0, max(6.0, 0.35 * len(labels) * max(1, len(splits)) + 2))
    fig = Figure(figsize=(width, 4.5), dpi=100, layout="constrained")
    ax = fig.subplots()
    bar = 0.8 / max(1, len(splits))
    for i, split in enumerate(splits):
        counts = [summary["splits"][split]["classes"][name]["count"] for name in labels]
        ax.bar([x + (i - (len(splits) - 1) / 2) * bar for x in range(len(labels))], counts, bar, label=split)
    ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 8 else 0,
                  ha="right" if len(labels) > 8 else "center")
    ax.set_ylabel("records")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"Records per class and split: {summary['output']}")
    if splits:
        ax.legend()
    fig.savefig(path, format="png")
    return int(fig.get_figwidth() * fig.dpi), int(fig.get_figheight() * fig.dpi)
