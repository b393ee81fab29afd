"""Every instance mask equals pycocotools' `COCO.annToMask` for its annotation, bit for bit.

A COCO file is written, read by our reader and placed by `place_objects`; the same file is
loaded by pycocotools' own `COCO` class. With no turn and no resize the masks must be equal;
with an EXIF turn and a resize, equal to annToMask's mask turned and resized as the pixels are.
"""

import io
import json

import numpy as np
import pytest
from PIL import Image

from prep.core.annotations import BoxPolicy, place_objects, read_coco
from prep.core.annotations.orient import METHODS

W, H = 80, 60  # the images' stored size


def _rle_of(mask, compressed):
    from pycocotools import mask as coco_mask

    if compressed:
        rle = coco_mask.encode(np.asfortranarray(mask))
        return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}
    flat = mask.T.reshape(-1)
    runs = np.diff(np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])).tolist()
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": ([0] if flat[0] else []) + runs}


def _segmentations(rng, n):
    """n segmentations of every kind: 8-point polygons (some reaching outside), multi-polygons, RLE."""
    out = []
    for k in range(n):
        kind = k % 5
        if kind in (0, 1):  # one random 8-point polygon, the case; some points outside
            lo, hi = (-4, 4) if kind == 1 else (0, 0)
            poly = []
            for _ in range(4):
                poly += [rng.uniform(lo, W + hi), rng.uniform(lo, H + hi)]
            out.append(([poly], 0))
        elif kind == 2:  # several polygons of one object, small ones included
            polys = []
            for _ in range(int(rng.integers(2, 4))):
                cx, cy, r = rng.uniform(5, W - 5), rng.uniform(5, H - 5), rng.uniform(0.5, 6)
                angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(3, 9))))
                polys.append([float(v) for a in angles for v in (cx + r * np.cos(a), cy + r * np.sin(a))])
            out.append((polys, 0))
        else:  # compressed RLE, or an uncompressed one as crowds are written
            mask = (rng.random((H, W)) < rng.uniform(0.05, 0.9)).astype(np.uint8)
            if k % 15 == 3:
                mask[:] = 1  # the first run (zeros) is empty
            out.append((_rle_of(mask, compressed=kind == 3), int(kind == 4)))
    return out


def _coco_file(tmp_path, segmentations, stored=(W, H)):
    annotations = []
    for i, (seg, crowd) in enumerate(segmentations):
        annotations.append(
            {
                "id": i + 1,
                "image_id": 1,
                "category_id": 1,
                "bbox": [0, 0, 10, 10],
                "iscrowd": crowd,
                "segmentation": seg,
            }
        )
    doc = {
        "images": [{"id": 1, "file_name": "a.png", "width": stored[0], "height": stored[1]}],
        "annotations": annotations,
        "categories": [{"id": 1, "name": "thing"}],
    }
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _ann_to_masks(path):
    from pycocotools.coco import COCO

    coco = COCO(path)
    return [coco.annToMask(a) for a in coco.loadAnns(sorted(coco.getAnnIds()))]


def _ours(path, tmp_path, orientation, final):
    ann = read_coco(str(tmp_path), path).images[0]
    placed = place_objects(ann, (W, H), orientation, final, BoxPolicy(), masks=True)
    assert not placed.dropped
    return [np.asarray(Image.open(io.BytesIO(o.mask_png))) for o in placed.objects], placed


def _moved(mask, orientation, final):
    img = Image.fromarray(mask * 255, "L")
    method = METHODS.get(orientation)
    img = img.transpose(method) if method is not None else img
    return (np.asarray(img.resize(final, Image.Resampling.NEAREST)) > 127).astype(np.uint8)


@pytest.mark.parametrize("seed", range(5))
def test_masks_equal_ann_to_mask(tmp_path, seed):
    segs = _segmentations(np.random.default_rng(seed), 100)  # 500 in all, 200 random 8-point polygons
    path = _coco_file(tmp_path, segs)
    theirs = _ann_to_masks(path)
    ours, placed = _ours(path, tmp_path, 1, (W, H))
    assert len(ours) == len(theirs) == 100
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == b.dtype == np.uint8 and a.shape == b.shape == (H, W)
        assert (a == b).all(), f"segmentation {k} ({segs[k]!r:.80}): {(a != b).sum()} pixels differ"
        assert placed.objects[k].area == float(b.sum())


@pytest.mark.parametrize("orientation, final", [(6, (60, 80)), (8, (30, 40)), (1, (40, 30)), (5, (90, 120))])
def test_masks_after_the_exif_turn_and_resize_are_ann_to_mask_moved(tmp_path, orientation, final):
    # The annotation is in the stored frame (its declared size is the stored one), as COCO
    # files of phone photos are: the mask turns and is resized with the pixels.
    segs = _segmentations(np.random.default_rng(orientation), 25)
    path = _coco_file(tmp_path, segs)
    theirs = _ann_to_masks(path)
    ours, _ = _ours(path, tmp_path, orientation, final)
    assert len(ours) == len(theirs) == 25
    for k, (a, b) in enumerate(zip(ours, theirs)):
        want = _moved(b, orientation, final)
        assert (a == want).all(), f"segmentation {k}: {(a != want).sum()} pixels differ"
