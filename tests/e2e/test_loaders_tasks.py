"""Detection, segmentation and multi-label through `loaders.load`: targets follow the pixels.

The datasets are drawn shapes (tests/support/task_records.py), one colour per class, so the
truth is in the pixels: after any crop, flip and resize, the inside of every box is its class's
colour, and every mask pixel's class is the colour of the image there. Images are JPEG
(decoded through `decode_and_crop_jpeg`) or PNG; `normalize="none"` keeps pixel values.
"""

import logging

import numpy as np
import pytest

import loaders
from prep.core.errors import LoaderError
from tests.support.task_records import BACKGROUND, COLOURS, read_split, write_dataset

tf = pytest.importorskip("tensorflow")

TOLERANCE = 48  # per channel: JPEG and bilinear resizing blur colours near an edge; the classes differ by ~200
BORDER = 2  # output pixels next to a box's or a mask region's edge are not checked


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tasks")
    out = {}
    for task, fmt in (
        ("detection", "jpeg"),
        ("detection", "png"),
        ("segmentation", "jpeg"),
        ("segmentation", "png"),
        ("multilabel", "jpeg"),
    ):
        out[task, fmt] = write_dataset(
            tmp / f"{task}-{fmt}", task, {"train": 40, "validation": 12}, fmt=fmt, seed=len(out)
        )
    out["fixed"] = write_dataset(
        tmp / "fixed", "segmentation", {"train": 8, "validation": 6}, fmt="png", size_range=(40, 40), seed=9
    )
    out["fixed-det"] = write_dataset(
        tmp / "fixed-det", "detection", {"train": 8, "validation": 6}, fmt="png", size_range=(40, 40), seed=10
    )
    return out


def colour_ok(pixels, colour) -> bool:
    return bool(np.all(np.abs(pixels.reshape(-1, 3) - np.array(colour, np.float32)) <= TOLERANCE))


def check_boxes(images, boxes, classes, num) -> tuple[int, int]:
    """Every real box's inside (less BORDER) is its class's colour; padding is -1 / zeros. Returns
    (boxes checked, boxes touching the image's edge)."""
    checked = edge = 0
    h, w = images.shape[1:3]
    for image, bx, cl, n in zip(images, boxes, classes, num):
        assert (cl[n:] == -1).all() and (bx[n:] == 0).all() and (cl[:n] >= 1).all()
        for (y0, x0, y1, x1), c in zip(bx[:n], cl[:n]):
            assert 0 <= y0 < y1 <= 1 and 0 <= x0 < x1 <= 1, (y0, x0, y1, x1)
            edge += bool(min(y0, x0) == 0 or max(y1, x1) == 1)
            r0, r1 = int(np.ceil(y0 * h)) + BORDER, int(np.floor(y1 * h)) - BORDER
            c0, c1 = int(np.ceil(x0 * w)) + BORDER, int(np.floor(x1 * w)) - BORDER
            if r1 > r0 and c1 > c0:  # a sliver of a box has no inside (and a negative end would wrap)
                inside = image[r0:r1, c0:c1]
                assert colour_ok(inside, COLOURS[int(c)]), (c, inside.reshape(-1, 3)[:3])
                checked += 1
    return checked, edge


def check_class_map(images, masks, ignore=255) -> int:
    """Where a mask is one class in a (2 BORDER + 1)^2 square, the image is that class's colour. Returns pixels checked."""
    colours = {0: BACKGROUND, **COLOURS}
    k = 2 * BORDER + 1
    checked = 0
    for image, mask in zip(images, masks[..., 0]):
        windows = np.lib.stride_tricks.sliding_window_view(mask, (k, k))
        uniform = windows.min(axis=(2, 3)) == windows.max(axis=(2, 3))
        centre = mask[BORDER:-BORDER, BORDER:-BORDER]
        pixels = image[BORDER:-BORDER, BORDER:-BORDER]
        for value in np.unique(centre[uniform]):
            if value == ignore:
                continue
            assert colour_ok(pixels[uniform & (centre == value)], colours[int(value)]), value
            checked += int((uniform & (centre == value)).sum())
    return checked


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_training_boxes_hold_their_class_colour_after_crop_and_flip(sets, fmt):
    data = sets["detection", fmt]
    ds = loaders.load(data, "train", 8, (48, 40), normalize="none", seed=3, area_range=(0.2, 1.0))
    spec = ds.element_spec
    n = read_split(data, "train", "detection")
    most = max(len(r.objects) for r in n)
    assert spec[0].shape == (8, 48, 40, 3) and spec[1]["boxes"].shape == (8, most, 4)
    assert spec[1]["classes"].dtype == tf.int32 and spec[1]["num_boxes"].shape == (8,)
    checked = edges = 0
    for _ in range(3):  # epochs: new crops and flips
        for images, targets in ds:
            c, e = check_boxes(
                images.numpy(), targets["boxes"].numpy(), targets["classes"].numpy(), targets["num_boxes"].numpy()
            )
            checked, edges = checked + c, edges + e
    assert checked > 100 and edges > 5  # crops did cut boxes, and those were checked too


def test_the_augment_hook_receives_and_returns_the_targets(sets):
    def mirror(images, targets):  # a flip of our own: the pixels must still match the boxes it returns
        y0, x0, y1, x1 = tf.unstack(targets["boxes"], axis=-1)
        valid = targets["classes"] >= 0
        flipped = tf.stack([y0, 1 - x1, y1, 1 - x0], axis=-1)
        return tf.reverse(images, [2]), {**targets, "boxes": tf.where(valid[..., None], flipped, 0.0)}

    ds = loaders.load(sets["detection", "png"], "train", 8, (40, 40), normalize="none", augment=mirror, flip=False)
    checked = sum(
        check_boxes(i.numpy(), t["boxes"].numpy(), t["classes"].numpy(), t["num_boxes"].numpy())[0] for i, t in ds
    )
    assert checked > 30
    seen = []
    ds = loaders.load(
        sets["segmentation", "png"],
        "train",
        8,
        (40, 40),
        normalize="none",
        augment=lambda im, m: (seen.append(m.shape) or tf.reverse(im, [2]), tf.reverse(m, [2])),
    )
    assert sum(check_class_map(i.numpy(), m.numpy()) for i, m in ds) > 1000 and seen == [(8, 40, 40, 1)]


@pytest.mark.parametrize("letterbox", [False, True])
def test_an_evaluation_epoch_returns_every_box_of_the_split(sets, letterbox):
    data = sets["detection", "jpeg"]
    records = {r.source_id: r for r in read_split(data, "validation", "detection")}
    ds = loaders.load(
        data, "validation", 5, (50, 50), training=False, output="features", normalize="none", letterbox=letterbox
    )
    got = {}
    for batch in ds:
        assert (
            check_boxes(
                batch["image"].numpy(), batch["boxes"].numpy(), batch["classes"].numpy(), batch["num_boxes"].numpy()
            )[0]
            >= 0
        )
        for i, sid in enumerate(batch["image/source_id"].numpy()):
            n = int(batch["num_boxes"][i])
            got[sid.decode()] = (
                batch["boxes"][i, :n].numpy(),
                batch["classes"][i, :n].numpy(),
                batch["image/height"][i].numpy(),
                batch["image/width"][i].numpy(),
            )
    assert set(got) == set(records)
    total = 0
    for sid, record in records.items():
        boxes, classes, h, w = got[sid]
        want = np.array([[o.ymin, o.xmin, o.ymax, o.xmax] for o in record.objects], np.float32).reshape(-1, 4)
        if letterbox:  # placed at the top left, scaled to fit 50 x 50
            scale = min(50 / h, 50 / w)
            want = want * np.array([round(h * scale) / 50, round(w * scale) / 50] * 2, np.float32)
        np.testing.assert_allclose(boxes, want, atol=1e-5)
        assert classes.tolist() == [o.label for o in record.objects]
        total += len(classes)
    assert total == sum(len(r.objects) for r in records.values()) > 10


def test_ragged_output_holds_the_same_boxes_as_the_padded_one(sets):
    data = sets["detection", "png"]
    padded = loaders.load(data, "validation", 4, (32, 32), training=False)
    ragged = loaders.load(data, "validation", 4, (32, 32), training=False, output="ragged")
    for (_, p), (_, r) in zip(padded, ragged):
        assert isinstance(r["boxes"], tf.RaggedTensor)
        assert r["boxes"].row_lengths().numpy().tolist() == p["num_boxes"].numpy().tolist()
        for i, n in enumerate(p["num_boxes"].numpy()):
            np.testing.assert_array_equal(r["boxes"][i].numpy(), p["boxes"][i, :n].numpy())
            np.testing.assert_array_equal(r["classes"][i].numpy(), p["classes"][i, :n].numpy())


def test_a_smaller_max_boxes_cuts_with_a_warning(sets, caplog):
    data = sets["detection", "png"]
    with caplog.at_level(logging.WARNING):
        ds = loaders.load(data, "validation", 4, (32, 32), training=False, max_boxes=1)
    assert "max_boxes=1" in caplog.text
    assert ds.element_spec[1]["boxes"].shape[1:] == (1, 4)
    assert max(int(t["num_boxes"].numpy().max()) for _, t in ds) == 1
    with pytest.raises(LoaderError, match="eval_crop='center' would cut the detection targets"):
        loaders.load(data, "validation", 4, (32, 32), training=False, eval_crop="center")


def test_instance_masks_follow_their_boxes(sets):
    ds = loaders.load(sets["detection", "png"], "train", 8, (40, 40), output="features", normalize="none", seed=5)
    checked = 0
    for batch in ds.take(4):
        images, masks = batch["image"].numpy(), batch["masks"].numpy()
        for b in range(images.shape[0]):
            for j in range(int(batch["num_boxes"][b])):
                ys, xs = np.nonzero(masks[b, j])
                if not len(ys):
                    continue
                y0, x0, y1, x1 = batch["boxes"][b, j].numpy() * 40
                # the mask's extent is the box's, to a pixel (nearest neighbour versus exact box edges)
                assert abs(ys.min() - y0) <= 1 and abs(ys.max() + 1 - y1) <= 1, (ys.min(), ys.max(), y0, y1)
                assert abs(xs.min() - x0) <= 1 and abs(xs.max() + 1 - x1) <= 1
                klass = int(batch["classes"][b, j])
                one = masks[b, j][..., None].astype(np.int32) * klass
                checked += check_class_map(images[b : b + 1] * (one > 0), one[None]) > 0
    assert checked > 10


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_segmentation_masks_match_the_pixels_after_crop_and_flip(sets, fmt):
    ds = loaders.load(sets["segmentation", fmt], "train", 8, (48, 48), normalize="none", seed=1)
    assert ds.element_spec[1].shape == (8, 48, 48, 1) and ds.element_spec[1].dtype == tf.int32
    checked, values = 0, set()
    for _ in range(2):
        for images, masks in ds:
            checked += check_class_map(images.numpy(), masks.numpy())
            values |= set(np.unique(masks.numpy()).tolist())
    assert checked > 20000 and {0, 1, 2, 3, 255} <= values  # every class, and the ignore value, carried


@pytest.mark.parametrize("letterbox", [False, True])
def test_segmentation_evaluation_at_the_stored_size_is_the_drawn_mask(sets, letterbox):
    data = sets["fixed"]
    records = {r.filename: r for r in read_split(data, "validation", "segmentation")}
    size = (40, 60) if letterbox else (40, 40)
    ds = loaders.load(
        data, "validation", 3, size, training=False, output="features", normalize="none", letterbox=letterbox
    )
    seen = 0
    for batch in ds:
        for name, image, mask in zip(batch["image/filename"].numpy(), batch["image"].numpy(), batch["masks"].numpy()):
            r = records[name.decode()]
            want = tf.io.decode_png(r.segmentation).numpy()
            np.testing.assert_array_equal(mask[:, :40], want)
            np.testing.assert_array_equal(image[:, :40], tf.io.decode_png(r.encoded).numpy().astype(np.float32))
            if letterbox:
                assert (mask[:, 40:] == 255).all() and (image[:, 40:] == 0).all()
            seen += 1
    assert seen == len(records)


def test_multilabel_gives_multi_hot_vectors(sets):
    data = sets["multilabel", "jpeg"]
    records = {r.filename: r for r in read_split(data, "validation", "multilabel")}
    ds = loaders.load(data, "validation", 5, (32, 32), training=False, output="features")
    seen = 0
    for batch in ds:
        for name, hot in zip(batch["image/filename"].numpy(), batch["label"].numpy()):
            want = np.zeros(3, np.float32)
            want[list(records[name.decode()].labels)] = 1.0
            np.testing.assert_array_equal(hot, want)
            seen += 1
    assert seen == len(records)
    train = loaders.load(data, "train", 8, (32, 32))
    assert train.element_spec[1].shape == (8, 3) and train.element_spec[1].dtype == tf.float32
    assert len(list(train)) == loaders.steps_per_epoch(data, "train", 8) == 5
    buckets = loaders.load(data, "train", 4, (32, 32), aspect_buckets=(0.75, 1.0, 1.33))
    shapes = {(tuple(i.shape[1:3]), tuple(h.shape)) for i, h in buckets}
    assert {h for _, h in shapes} == {(4, 3)} and len(shapes) > 1  # multi-hot labels through aspect buckets


def test_class_weights_refuse_a_dataset_without_one_label_per_record(sets):
    with pytest.raises(LoaderError, match="class_weights is for single-label classification"):
        loaders.class_weights(sets["detection", "png"], "train")
