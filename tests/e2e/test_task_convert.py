"""Multi-label (a label file with several names per cell) and semantic segmentation (`--masks`)
end to end through `prep convert`."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest
from PIL import Image

from prep.core.manifest import Manifest
from prep.core.manifest_checks import contradictions, strata_unbalanced
from prep.core.task_record import TaskRecord
from prep.core.tfrecord import read_records
from tests.support import drawn_shapes as ds
from tests.support.imagegen import image_bytes
from tests.support.shards import manifest_without_run, shard_bytes


def records(out, task) -> dict[str, TaskRecord]:
    found = {}
    for shard in sorted(out.glob("*.tfrecord")):
        with open(shard, "rb") as f:
            for _, _, data in read_records(f, shard.name):
                r = TaskRecord.from_bytes(data, task)
                found[r.filename] = r
    return found


@pytest.fixture(scope="module")
def multilabel(tmp_path_factory):
    root = tmp_path_factory.mktemp("multilabel")
    rng = random.Random(1)
    names = ("cat", "dog", "owl", "rare")
    rows = []
    for i in range(40):
        (root / f"{i:03d}.jpg").write_bytes(image_bytes("JPEG", size=(16, 12), seed=i))
        labels = sorted(set(rng.sample(names[:3], rng.randint(1, 3)) + (["rare"] if i % 8 == 0 else [])))
        rows.append((f"{i:03d}.jpg", labels))
    return root, rows


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_multilabel_records_counts_and_strata(multilabel, tmp_path, run_cli, kind):
    root, rows = multilabel
    labels = tmp_path / f"labels.{kind}"
    if kind == "csv":
        labels.write_text("path,label\n" + "".join(f"{p},{'|'.join(ls)}\n" for p, ls in rows))
    else:
        labels.write_text("".join(json.dumps({"path": p, "label": ls}) + "\n" for p, ls in rows))
    out = tmp_path / "out"
    result = run_cli("convert", root, out, "--labels", labels, "--num-shards", 4, "--split", "train=0.75,test=0.25")
    assert result.exit_code == 0, result.output
    m = Manifest.load(str(out), shard_counts=True)
    assert m.task == "multilabel" and m.labels == ("cat", "dog", "owl", "rare")
    assert contradictions(m) == [] and strata_unbalanced(m) == []
    got = records(out, "multilabel")
    assert len(got) == 40
    for path, names in rows:
        r = got[path]
        assert list(r.texts) == names and [m.labels[i] for i in r.labels] == names
    total = {name: sum(s.class_counts[name] for s in m.splits.values()) for name in m.labels}
    assert total == {name: sum(name in ls for _, ls in rows) for name in m.labels}
    # "rare" is the rarest label of the 5 images holding it: a stratum split 0.75/0.25 and sharded within one.
    assert all(split.max_deviation <= 1.5 for split in m.splits.values()), m.splits  # the other labels follow
    rare = [s.stratum_counts.get("rare", 0) for split in m.splits.values() for s in split.shards]
    assert sum(rare) == 5 and max(rare) - min(rare) <= 1


def test_multilabel_with_unknown_class_is_rejected_by_name(multilabel, tmp_path, run_cli):
    root, rows = multilabel
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "".join(f"{p},{'|'.join(ls)}\n" for p, ls in rows))
    classes = tmp_path / "classes.txt"
    classes.write_text("cat\ndog\nowl\n")
    out = tmp_path / "out"
    result = run_cli("convert", root, out, "--labels", labels, "--classes", classes, "--num-shards", 2)
    assert result.exit_code == 0, result.output
    m = Manifest.load(str(out), shard_counts=True)
    assert m.inputs.rejected_by_reason == {"unknown_label": 5} and m.inputs.reconciles


SEG_CLASSES = ("background", "cat", "dog", "bird")


@pytest.fixture(scope="module")
def segmentation(tmp_path_factory):
    root = tmp_path_factory.mktemp("seg")
    images = ds.make_images(14, SEG_CLASSES[1:], seed=4, orientations=(1, 3, 6, 8), jpeg_every=0)
    # Drawn with the background class first, so that shape colours are COLOURS[1..3] and white is 0.
    images = [ds.DrawnImage(i.path, i.size, i.shapes, i.orientation, i.fmt) for i in images]
    ds.write_images(root / "images", images, SEG_CLASSES)
    (root / "masks").mkdir()
    for img in images:
        ds.class_map(img, SEG_CLASSES).save(root / "masks" / (img.path.rsplit(".", 1)[0] + ".png"))
    (root / "classes.txt").write_text("\n".join(SEG_CLASSES) + "\n")
    (root / "images" / "no_mask.png").write_bytes(ds.encode(images[0], SEG_CLASSES))
    return root, images


@pytest.mark.parametrize("extra", [(), ("--resize", 36)])
def test_segmentation_masks_equal_the_drawn_shapes(segmentation, tmp_path, run_cli, extra):
    root, images = segmentation
    out = tmp_path / "out"
    result = run_cli(
        "convert",
        root / "images",
        out,
        "--masks",
        root / "masks",
        "--classes",
        root / "classes.txt",
        "--num-shards",
        3,
        *extra,
    )
    assert result.exit_code == 0, result.output
    m = Manifest.load(str(out), shard_counts=True)
    assert m.task == "segmentation" and m.ignore_value == 255 and m.labels == SEG_CLASSES
    assert m.inputs.rejected_by_reason == {"missing_mask": 1} and m.inputs.reconciles
    assert contradictions(m) == [] and strata_unbalanced(m) == []
    shards = m.splits["train"].shards
    assert max(s.examples for s in shards) - min(s.examples for s in shards) <= 1
    got = records(out, "segmentation")
    assert len(got) == len(images)
    for img in images:
        r = got[img.path]
        mask = np.asarray(Image.open(io.BytesIO(r.segmentation)))
        assert mask.shape == (r.height, r.width)
        drawn = ds.class_map(img, SEG_CLASSES).resize((r.width, r.height), Image.Resampling.NEAREST)
        assert np.array_equal(mask, np.asarray(drawn)), img.path
        # ... and the mask lies on the stored pixels of its class: they agree but for blended edges.
        pixels = np.asarray(Image.open(io.BytesIO(r.encoded)).convert("RGB")).astype(int)
        nearest = np.argmin([np.abs(pixels - c).sum(axis=2) for c in ((255, 255, 255), *ds.COLOURS[1:4])], axis=0)
        assert (nearest == mask).mean() > 0.95, img.path


def test_segmentation_is_byte_identical_at_one_and_two_workers(segmentation, tmp_path, run_cli):
    root, _ = segmentation
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        result = run_cli(
            "convert",
            root / "images",
            out,
            "--masks",
            root / "masks",
            "--classes",
            root / "classes.txt",
            "--num-shards",
            2,
            "--workers",
            workers,
        )
        assert result.exit_code == 0, result.output
        outs.append(out)
    assert shard_bytes(outs[0]) == shard_bytes(outs[1])
    assert manifest_without_run(outs[0]) == manifest_without_run(outs[1])


def test_masks_need_classes(segmentation, tmp_path, run_cli):
    root, _ = segmentation
    result = run_cli("convert", root / "images", tmp_path / "out", "--masks", root / "masks")
    assert result.exit_code != 0 and "--masks needs --classes" in result.output
