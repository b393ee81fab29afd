"""The task loaders on real `prep convert --annotations` output: drawn shapes (tests/support/drawn_shapes.py:
rectangles, ellipses and triangles in a colour per class on white, polygons as masks, some JPEGs stored
turned with EXIF orientations 3, 6 and 8) converted through the CLI, then read with `loaders.load`.
"""

import numpy as np
import pytest

import loaders
from prep.core.manifest import Manifest
from prep.core.task_record import TaskRecord
from prep.core.tfrecord import read_records
from tests.support import drawn_shapes as ds
from tests.support.shards import convert_with_cli

tf = pytest.importorskip("tensorflow")

CLASSES = ("cat", "dog", "bird")
BORDER = 2


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("converted")
    _, path = ds.write_coco_set(root, 36, CLASSES, orientations=(1, 3, 6, 8) * 3)
    out = convert_with_cli(
        root / "images",
        root / "out",
        "--annotations",
        path,
        "--split",
        "train=0.75,validation=0.25",
        "--num-shards",
        2,
        "--no-progress",
    )
    return out


def records(out, split):
    manifest = Manifest.load(str(out))
    result = {}
    for shard in manifest.splits[split].shards:
        with open(out / shard.file, "rb") as f:
            for _, _, data in read_records(f, shard.file):
                r = TaskRecord.from_bytes(data, "detection")
                result[r.source_id] = r
    return result


def test_an_evaluation_epoch_of_a_converted_split_returns_every_box(converted):
    want = records(converted, "validation")
    ds_ = loaders.load(converted, "validation", 4, (48, 64), training=False, output="features")
    seen = 0
    for batch in ds_:
        for i, sid in enumerate(batch["image/source_id"].numpy()):
            r = want[sid.decode()]
            n = int(batch["num_boxes"][i])
            boxes = np.array([[o.ymin, o.xmin, o.ymax, o.xmax] for o in r.objects], np.float32).reshape(-1, 4)
            np.testing.assert_allclose(batch["boxes"][i, :n].numpy(), boxes, atol=1e-6)
            assert batch["classes"][i, :n].numpy().tolist() == [o.label for o in r.objects]
            seen += 1
    assert seen == len(want) == Manifest.load(str(converted)).splits["validation"].examples


def test_converted_masks_and_boxes_follow_the_pixels_through_training_crops(converted):
    """Each instance mask (less a border) is its class's colour, and lies inside its box (to a pixel)."""
    data = loaders.load(
        converted, "train", 4, (60, 80), output="features", normalize="none", seed=2, area_range=(0.3, 1.0)
    )
    checked = 0
    for _ in range(2):
        for batch in data:
            images, masks = batch["image"].numpy(), batch["masks"].numpy()
            for b in range(images.shape[0]):
                for j in range(int(batch["num_boxes"][b])):
                    mask = masks[b, j].astype(bool)
                    ys, xs = np.nonzero(mask)
                    if len(ys) < 10:
                        continue
                    y0, x0, y1, x1 = batch["boxes"][b, j].numpy() * [60, 80, 60, 80]
                    assert (
                        ys.min() >= y0 - 1 and ys.max() + 1 <= y1 + 1 and xs.min() >= x0 - 1 and xs.max() + 1 <= x1 + 1
                    )
                    core = mask.copy()
                    for axis in (0, 1):  # erode by BORDER pixels along each axis
                        for shift in range(1, BORDER + 1):
                            core &= np.roll(mask, shift, axis) & np.roll(mask, -shift, axis)
                    if not core.any():
                        continue
                    # each pixel's nearest colour among the classes' and white is its class's (JPEG's 4:2:0
                    # chroma and resizing pull saturated colours far from their value, but not past another's)
                    palette = np.array(ds.COLOURS[: len(CLASSES)] + ((255, 255, 255),), np.float32)
                    nearest = np.abs(images[b][core][:, None] - palette[None]).sum(-1).argmin(-1)
                    assert (nearest == int(batch["classes"][b, j]) - 1).all(), (b, j, np.bincount(nearest))
                    checked += 1
    assert checked > 20


SEG_CLASSES = ("background", "cat", "dog", "bird")


@pytest.fixture(scope="module")
def converted_segmentation(tmp_path_factory):
    root = tmp_path_factory.mktemp("converted-seg")
    images = ds.make_images(16, SEG_CLASSES[1:], seed=6, orientations=(1, 3, 6, 8))
    ds.write_images(root / "images", images, SEG_CLASSES)  # class i drawn in COLOURS[i], background white
    (root / "masks").mkdir()
    for img in images:
        ds.class_map(img, SEG_CLASSES).save(root / "masks" / (img.path.rsplit(".", 1)[0] + ".png"))
    (root / "classes.txt").write_text("\n".join(SEG_CLASSES) + "\n")
    return convert_with_cli(
        root / "images",
        root / "out",
        "--masks",
        root / "masks",
        "--classes",
        root / "classes.txt",
        "--num-shards",
        2,
        "--no-progress",
    )


def test_converted_class_maps_follow_the_pixels_through_training_crops(converted_segmentation):
    data = loaders.load(converted_segmentation, "train", 4, (54, 72), normalize="none", seed=4, area_range=(0.3, 1.0))
    palette = np.array(((255, 255, 255),) + ds.COLOURS[1 : len(SEG_CLASSES)], np.float32)
    k = 2 * BORDER + 1
    checked, values = 0, set()
    for _ in range(2):
        for images, masks in data:
            assert masks.dtype == tf.int32 and masks.shape[1:] == (54, 72, 1)
            for image, mask in zip(images.numpy(), masks.numpy()[..., 0]):
                values |= set(np.unique(mask).tolist())
                windows = np.lib.stride_tricks.sliding_window_view(mask, (k, k))
                uniform = windows.min(axis=(2, 3)) == windows.max(axis=(2, 3))
                centre = mask[BORDER:-BORDER, BORDER:-BORDER][uniform]
                pixels = image[BORDER:-BORDER, BORDER:-BORDER][uniform]
                nearest = np.abs(pixels[:, None] - palette[None]).sum(-1).argmin(-1)
                assert (nearest == centre).all(), np.mean(nearest == centre)
                checked += len(centre)
    assert checked > 10000 and {0, 1, 2, 3} <= values
