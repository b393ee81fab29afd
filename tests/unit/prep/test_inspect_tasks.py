"""`prep inspect` on detection, segmentation and multi-label datasets: the contact sheet draws each box
where the record puts it in its class's colour, with the outlines of instance masks, and the class map
as a translucent overlay; the summary counts images containing each class and boxes."""

import dataclasses
import json

import numpy as np
from PIL import Image

from prep import pictures
from prep.pictures import SheetLayout, class_colour, thumbnail_frame
from tests.support import task_datasets as td

TILE = 120


def tile_origin(layout: SheetLayout, row: int, column: int, record) -> tuple[int, int, int, int]:
    """Where the record's thumbnail is on the sheet: (left, top, width, height)."""
    x0, y0, _, _ = layout.tile_box(row, column)
    left, top, w, h = thumbnail_frame(record.width, record.height, layout.tile)
    return x0 + left, y0 + top, w, h


def one_box_record(masks=False):
    # A 60x40 image, one dog (id 2) at x 18..42, y 14..34: room above it for its name.
    return td.detection_record(0, (60, 40), [(2, (18, 14, 42, 34))], td.DETECTION_LABELS, masks=masks)


def sheet_of(record, labels=td.DETECTION_LABELS, row=1):
    layout = SheetLayout(rows=len(labels), columns=1, tile=TILE)
    return np.asarray(pictures.render_sheet(labels, {row: [record]}, layout)), layout


def test_a_box_outline_is_drawn_at_the_box_in_its_class_colour():
    record = one_box_record()
    sheet, layout = sheet_of(record)
    left, top, w, h = tile_origin(layout, 1, 0, record)
    assert (w, h) == (TILE, 80)
    assert tuple(sheet[top + 1, left + 1]) == td.BACKGROUND  # the frame is where the image is
    o = record.objects[0]
    x0, x1 = left + round(o.xmin * w), left + round(o.xmax * w) - 1
    y0, y1 = top + round(o.ymin * h), top + round(o.ymax * h) - 1
    colour = class_colour(2)
    assert colour != (0, 0, 0) and colour not in td.COLOURS
    middle_x, middle_y = (x0 + x1) // 2, (y0 + y1) // 2
    for y, x in ((y1, middle_x), (middle_y, x0), (middle_y, x1), (y0 + 1, x0), (y1, x1)):
        assert tuple(sheet[y, x]) == colour, (y, x)
    outline = np.all(sheet == colour, axis=-1)
    assert not outline[y0 + 2 : y1 - 1, x0 + 2 : x1 - 1].any()  # an outline, not a fill
    assert not outline[y1 + 2 : top + h, :].any() and not outline[top : top + h, x1 + 2 : left + w].any()
    # The class name in a box of the class colour just above it, and the row's colour swatch by its name.
    name = outline[top:y0, x0 : x1 + 1]
    assert name.sum() > 20
    lx0, ly0, _, _ = layout.label_box(1)
    assert tuple(sheet[ly0 + 8, lx0 + 5]) == colour


def test_instance_mask_outlines_are_drawn_inside_the_box():
    plain, layout = sheet_of(one_box_record(masks=False))
    masked, _ = sheet_of(one_box_record(masks=True))
    colour = class_colour(2)
    record = one_box_record(masks=True)
    left, top, w, h = tile_origin(layout, 1, 0, record)
    o = record.objects[0]
    inside = (
        slice(top + round(o.ymin * h) + 2, top + round(o.ymax * h) - 3),
        slice(left + round(o.xmin * w) + 2, left + round(o.xmax * w) - 3),
    )
    assert not np.all(plain[inside] == colour, axis=-1).any()
    drawn = np.all(masked[inside] == colour, axis=-1)
    assert drawn.sum() > 20
    # The outline runs along the ellipse: its pixels are where the scaled mask changes.
    mask = np.asarray(Image.open(__import__("io").BytesIO(o.mask)).resize((w, h), Image.Resampling.NEAREST))
    ys, xs = np.nonzero(drawn)
    ys, xs = ys + inside[0].start - top, xs + inside[1].start - left
    assert mask[ys, xs].all()  # on the mask
    edge = [mask[max(y - 1, 0) : y + 2, max(x - 1, 0) : x + 2].min() == 0 for y, x in zip(ys, xs)]
    assert all(edge)  # and at its border


def test_the_class_map_is_a_translucent_overlay():
    record = td.segmentation_records()[0]  # car (value 2) at x 4..14, y 6..14 of a 32x24 image
    labels = td.SEGMENTATION_LABELS
    sheet, layout = sheet_of(record, labels, row=2)
    left, top, w, h = tile_origin(layout, 2, 0, record)
    scale = w / record.width
    y, x = top + round(10 * scale), left + round(9 * scale)  # the middle of the car
    image = np.array(td.COLOURS[2], float)
    expected = np.round((1 - pictures.OVERLAY_ALPHA) * image + pictures.OVERLAY_ALPHA * np.array(class_colour(2)))
    assert np.abs(sheet[y, x].astype(int) - expected).max() <= 1
    y, x = top + round(20 * scale), left + round(16 * scale)  # road (value 1)
    expected = (1 - pictures.OVERLAY_ALPHA) * np.array(td.COLOURS[1]) + pictures.OVERLAY_ALPHA * np.array(
        class_colour(1)
    )
    assert np.abs(sheet[y, x].astype(int) - np.round(expected)).max() <= 1
    assert tuple(sheet[top, left + w // 2]) == (0, 0, 0)  # the ignored border is left as the image has it


def test_inspect_cli_on_a_detection_dataset(tmp_path, run_cli):
    out = td.detection_dataset(tmp_path / "out")
    result = run_cli("inspect", out, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert run_cli("inspect", out, "--contact-sheet", tmp_path / "s.png", "--per-class", 3).exit_code == 0
    assert summary["task"] == "detection"
    manifest = json.loads((out / "manifest.json").read_text())
    train = summary["splits"]["train"]
    assert train["max_boxes"] == manifest["splits"]["train"]["max_boxes"]
    assert {k: c["boxes"] for k, c in train["classes"].items()} == manifest["splits"]["train"]["box_counts"]
    assert {k: c["count"] for k, c in train["classes"].items()} == manifest["splits"]["train"]["class_counts"]
    sheet = np.asarray(Image.open(tmp_path / "s.png").convert("RGB"))
    for class_id in (1, 2, 3):  # every class's boxes are on the sheet
        assert np.all(sheet == class_colour(class_id), axis=-1).sum() > 50
    text = run_cli("inspect", out).output.splitlines()
    assert text[1] == "task detection: per class, the images containing it and its boxes"
    assert "class  images  share  per shard  boxes" in text


def test_multilabel_rows_hold_the_records_containing_each_class(tmp_path):
    from prep import inspect
    from prep.core.manifest import Manifest

    out = td.multilabel_dataset(tmp_path / "out")
    manifest = Manifest.load(str(out))
    picked = inspect.samples(manifest, str(out), 10)
    for label, records in picked.items():
        assert records and all(label in r.labels for r in records)
        assert len(records) == manifest.splits["train"].class_counts[manifest.labels[label]]
    assert dataclasses.is_dataclass(picked[0][0])
