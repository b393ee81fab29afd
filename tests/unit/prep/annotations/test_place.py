"""place_objects: the frame, EXIF turns against turned pixels, resize, the box policy, masks."""

import io
import math

import numpy as np
import pytest
from PIL import Image, ImageDraw

from prep.core.annotations import BoxPolicy, ImageAnnotation, Obj, place_objects
from prep.core.annotations.masks import instance_mask
from prep.core.annotations.orient import METHODS, displayed_size
from prep.core.errors import OptionsError
from prep.core.image_rules import ImageRejected

STORED = (64, 40)
BOXES = [(5, 7, 23, 19), (40, 2, 61, 33)]  # continuous coordinates in the stored frame
CLIP = BoxPolicy()


def drawn(stored=STORED, boxes=BOXES):
    """A stored image with each box drawn in its own gray value."""
    img = Image.new("L", stored)
    draw = ImageDraw.Draw(img)
    for k, (x0, y0, x1, y1) in enumerate(boxes):
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=100 + 50 * k)  # inclusive pixel corners
    return img


def turned(img, orientation, final=None):
    method = METHODS.get(orientation)
    out = img.transpose(method) if method is not None else img
    return out if final is None else out.resize(final, Image.Resampling.NEAREST)


def pixel_boxes(img, count):
    a = np.asarray(img)
    return [Image.fromarray(((a == 100 + 50 * k) * 255).astype(np.uint8)).getbbox() for k in range(count)]


def ann(boxes, size, normalized=False, **obj):
    objects = tuple(Obj(i, "thing", tuple(float(v) for v in b), **obj) for i, b in enumerate(boxes))
    w, h = size if size else (None, None)
    return ImageAnnotation("a.jpg", w, h, normalized, objects)


def in_pixels(placed, final):
    fw, fh = final
    return [(o.xmin * fw, o.ymin * fh, o.xmax * fw, o.ymax * fh) for o in placed.objects]


def close(got, want, tol=1.0):
    return all(abs(g - w) <= tol for gb, wb in zip(got, want) for g, w in zip(gb, wb)) and len(got) == len(want)


@pytest.mark.parametrize("orientation", [5, 6, 7, 8])
@pytest.mark.parametrize("scale", [1.0, 0.5, 0.37])
def test_stored_frame_boxes_turn_with_the_pixels(orientation, scale):
    shown = displayed_size(STORED, orientation)
    final = (round(shown[0] * scale), round(shown[1] * scale))
    placed = place_objects(ann(BOXES, STORED), STORED, orientation, final, CLIP, masks=False)
    truth = pixel_boxes(turned(drawn(), orientation, final), len(BOXES))
    assert close(in_pixels(placed, final), truth), (in_pixels(placed, final), truth)
    assert placed.dropped == () and placed.clipped == ()


@pytest.mark.parametrize("orientation", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("declared", [True, False])
def test_displayed_frame_boxes_stay_and_scale(orientation, declared):
    shown_img = turned(drawn(), orientation)
    shown = shown_img.size
    boxes = pixel_boxes(shown_img, len(BOXES))  # the annotation of the upright picture
    final = (shown[0] // 2, shown[1] // 2)
    placed = place_objects(ann(boxes, shown if declared else None), STORED, orientation, final, CLIP, masks=False)
    truth = pixel_boxes(turned(drawn(), orientation, final), len(BOXES))
    assert close(in_pixels(placed, final), truth)
    for o, b in zip(placed.objects, boxes):
        assert o.area == pytest.approx((b[2] - b[0]) * (b[3] - b[1]) / 4)


@pytest.mark.parametrize("orientation", [1, 6])
def test_yolo_normalised_boxes_are_in_the_displayed_frame(orientation):
    shown_img = turned(drawn(), orientation)
    w, h = shown_img.size
    boxes = [(x0 / w, y0 / h, x1 / w, y1 / h) for x0, y0, x1, y1 in pixel_boxes(shown_img, len(BOXES))]
    placed = place_objects(ann(boxes, None, normalized=True), STORED, orientation, (w, h), CLIP, masks=False)
    assert close(in_pixels(placed, (w, h)), pixel_boxes(shown_img, len(BOXES)), 1e-9)


@pytest.mark.parametrize("orientation, size", [(1, (64, 41)), (6, (63, 40)), (3, (40, 64))])
def test_other_sizes_reject_the_image(orientation, size):
    with pytest.raises(ImageRejected) as err:
        place_objects(ann(BOXES, size), STORED, orientation, (10, 10), CLIP, masks=False)
    assert err.value.reason == "size_mismatch"
    assert f"{size[0]}x{size[1]}" in err.value.detail and "64x40" in err.value.detail


CASES = [
    # box, policy -> kept box (pixels) or None, reason, clipped?
    ((0.5, 1, 10, 10), "clip", (0.5, 1, 10, 10), None, False),
    ((-0.8, 1, 10, 40.9), "clip", (0, 1, 10, 40), None, False),  # within tolerance: clipped silently
    ((-5, 1, 10, 10), "clip", (0, 1, 10, 10), "box_outside", True),
    ((-5, 1, 10, 10), "drop", None, "box_outside", False),
    ((3, 3, 70, 50), "clip", (3, 3, 64, 40), "box_outside", True),
    ((70, 3, 80, 10), "clip", None, "box_outside", False),  # wholly outside
    ((3, 3, 3, 10), "clip", None, "box_degenerate", False),
    ((9, 3, 3, 10), "drop", None, "box_degenerate", False),
    ((3, float("nan"), 5, 10), "clip", None, "box_nan", False),
    ((3, 1, float("inf"), 10), "clip", None, "box_nan", False),
]


@pytest.mark.parametrize("box, policy, kept, reason, was_clipped", CASES)
def test_box_policy(box, policy, kept, reason, was_clipped):
    good = (1, 1, 2, 2)
    placed = place_objects(ann([good, box], STORED), STORED, 1, STORED, BoxPolicy(bad_boxes=policy), masks=False)
    assert len(placed.objects) + len(placed.dropped) == 2  # read = written + dropped
    got = in_pixels(placed, STORED)
    assert close(got[:1], [good], 1e-9)
    if kept is None:
        assert [(p.reason, p.box, p.path) for p in placed.dropped] == [(reason, 1, "a.jpg")]
        assert len(got) == 1 and placed.clipped == ()
    else:
        assert close(got[1:], [kept], 1e-9) and placed.dropped == ()
        assert [(p.reason, p.box) for p in placed.clipped] == ([(reason, 1)] if was_clipped else [])
    if reason is not None:
        with pytest.raises(ImageRejected) as err:
            place_objects(ann([good, box], STORED), STORED, 1, STORED, BoxPolicy(bad_boxes="reject-image"), masks=False)
        assert err.value.reason == reason and "box 1" in err.value.detail


@pytest.mark.parametrize("orientation", [6, 8])
def test_inverted_box_in_the_stored_frame_is_degenerate_before_the_turn(orientation):
    placed = place_objects(ann([(20, 5, 10, 9)], STORED), STORED, orientation, (40, 64), CLIP, masks=False)
    assert [p.reason for p in placed.dropped] == ["box_degenerate"] and placed.objects == ()


def test_tolerance_option():
    box = [(-3, 1, 10, 10)]
    assert place_objects(ann(box, STORED), STORED, 1, STORED, BoxPolicy(tolerance=5), False).clipped == ()
    assert len(place_objects(ann(box, STORED), STORED, 1, STORED, BoxPolicy(tolerance=0), False).clipped) == 1


@pytest.mark.parametrize("crowd, kept, reason", [("keep", 2, None), ("drop", 1, "crowd")])
def test_crowd_policy(crowd, kept, reason):
    a = ann([(1, 1, 5, 5)], STORED)
    a = a._replace(objects=a.objects + (Obj(1, "people", (2.0, 2.0, 9.0, 9.0), crowd=True),))
    placed = place_objects(a, STORED, 1, STORED, BoxPolicy(crowd=crowd), masks=False)
    assert len(placed.objects) == kept and [p.reason for p in placed.dropped] == ([reason] if reason else [])
    if crowd == "keep":
        assert [o.crowd for o in placed.objects] == [False, True]
    with pytest.raises(ImageRejected) as err:
        place_objects(a, STORED, 1, STORED, BoxPolicy(crowd="reject-image"), masks=False)
    assert err.value.reason == "crowd"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"bad_boxes": "fix"}, "--bad-boxes must be one of clip, drop, reject-image, got 'fix'"),
        ({"crowd": "no"}, "--crowd must be one of keep, drop, reject-image, got 'no'"),
        ({"tolerance": -1}, "--box-tolerance must be a number of pixels in [0, 1e6], got -1"),
        ({"tolerance": float("nan")}, "got nan"),
    ],
)
def test_policy_options_are_checked(kwargs, message):
    with pytest.raises(OptionsError) as err:
        BoxPolicy(**kwargs)
    assert message in str(err.value)


def decode_png(data):
    img = Image.open(io.BytesIO(data))
    assert img.mode == "L"
    return np.asarray(img)


POLY = (5.3, 7.3, 30.3, 9.3, 22.3, 31.3, 6.3, 25.3)


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_polygon_mask_turns_with_the_pixels(orientation):
    box = (5.3, 7.3, 30.3, 31.3)
    stored_mask = Image.fromarray(instance_mask([POLY], None, STORED))
    shown = displayed_size(STORED, orientation)
    a = ann([box], STORED if orientation in (6, 8) else shown, polygons=(POLY,))
    if orientation == 3:  # displayed frame: the polygon as the upright picture shows it
        a = ann(
            [(64 - 30.3, 40 - 31.3, 64 - 5.3, 40 - 7.3)],
            shown,
            polygons=(tuple(64 - v if i % 2 == 0 else 40 - v for i, v in enumerate(POLY)),),
        )
    placed = place_objects(a, STORED, orientation, shown, CLIP, masks=True)
    mask = decode_png(placed.objects[0].mask_png)
    want = np.asarray(turned(stored_mask, orientation))
    if orientation == 3:
        # A displayed-frame polygon is drawn in that frame, as annToMask draws it; pycocotools'
        # drawing is not symmetric under a half turn (16 edge pixels differ here).
        want = instance_mask(a.objects[0].polygons, None, shown)
    assert set(np.unique(mask)) <= {0, 1} and mask.shape == want.shape
    assert (mask == want).all()
    assert placed.objects[0].area == float(mask.sum())


def test_mask_resized_and_rle_turned():
    rle_mask = np.zeros((40, 64), dtype=np.uint8)  # stored frame, (h, w)
    rle_mask[5:20, 10:30] = 1
    flat = rle_mask.T.reshape(-1)  # column-major; it starts with a run of zeros, as RLE does
    counts = [int(c) for c in np.diff(np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]]))]
    rle = {"size": [40, 64], "counts": counts}
    a = ann([(10, 5, 30, 20)], STORED, rle=rle)
    final = (20, 32)  # displayed 40x64 halved
    placed = place_objects(a, STORED, 6, final, CLIP, masks=True)
    mask = decode_png(placed.objects[0].mask_png)
    want = (
        np.asarray(
            Image.fromarray(rle_mask * 255)
            .transpose(Image.Transpose.ROTATE_270)
            .resize(final, Image.Resampling.NEAREST)
        )
        > 0
    )
    assert (mask.astype(bool) == want).all() and placed.objects[0].area == want.sum()


def test_bad_rle_drops_the_object_with_its_reason():
    a = ann([(1, 1, 5, 5)], STORED, rle={"size": [40, 64], "counts": [3, 4]})
    placed = place_objects(a, STORED, 1, STORED, CLIP, masks=True)
    assert placed.objects == () and [p.reason for p in placed.dropped] == ["bad_rle"]
    assert "2560" in placed.dropped[0].detail
    placed = place_objects(a, STORED, 1, STORED, CLIP, masks=False)  # masks not asked: the box stays
    assert len(placed.objects) == 1


def test_object_without_a_shape_gets_its_box_as_mask():
    placed = place_objects(ann([(2, 3, 12, 9)], STORED), STORED, 1, STORED, CLIP, masks=True)
    mask = decode_png(placed.objects[0].mask_png)
    assert mask.sum() == 60 and placed.objects[0].area == 60.0
    assert Image.fromarray(mask * 255).getbbox() == (2, 3, 12, 9)


def test_deterministic_bytes():
    a = ann([(2, 3, 12, 9)], STORED, polygons=(POLY,))
    one = place_objects(a, STORED, 6, (20, 32), CLIP, masks=True)
    assert one == place_objects(a, STORED, 6, (20, 32), CLIP, masks=True)
    assert not math.isnan(one.objects[0].area)
