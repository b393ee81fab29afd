"""Detection end to end through `prep convert --annotations`: boxes against the stored pixels (as
converted, resized, EXIF-turned), every bad-annotation case with its reason and reconciled counts,
the four annotation formats agreeing, determinism across workers, and stratified shards."""

from __future__ import annotations

import io
import json
import pathlib

import numpy as np
import pytest
from PIL import Image

from prep.core.manifest import Manifest
from prep.core.task_record import TaskRecord
from prep.core.tfrecord import read_records
from tests.support import drawn_shapes as ds
from tests.support.shards import manifest_without_run, shard_bytes

CLASSES = ("cat", "dog", "bird")


def records(out: pathlib.Path) -> dict[str, TaskRecord]:
    """{image/filename: record} of every shard."""
    found = {}
    for shard in sorted(out.glob("*.tfrecord")):
        with open(shard, "rb") as f:
            for _, _, data in read_records(f, shard.name):
                r = TaskRecord.from_bytes(data, "detection")
                found[r.filename] = r
    return found


def rejects(out: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]


def convert(run_cli, source, out, annotations, *extra, ok: bool = True):
    result = run_cli("convert", source, out, "--annotations", annotations, "--num-shards", 2, *extra)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def assert_boxes_match_pixels(out: pathlib.Path, images) -> int:
    """Every stored box is within 1 px of the box its shape's pixels have in the stored, decoded image."""
    by_path = {img.path: img for img in images}
    checked = 0
    for name, r in records(out).items():
        if name not in by_path:
            continue
        pixels = np.asarray(Image.open(io.BytesIO(r.encoded)).convert("RGB"))
        assert pixels.shape[:2] == (r.height, r.width)
        assert len(r.objects) == len(by_path[name].shapes)
        for o in r.objects:
            box = (o.xmin * r.width, o.ymin * r.height, o.xmax * r.width, o.ymax * r.height)
            truth = ds.true_box(pixels, ds.COLOURS[o.label - 1], box)
            assert truth is not None, (name, o)
            assert np.max(np.abs(np.subtract(box, truth))) <= 1.0, (name, o.text, box, truth)
            assert CLASSES[o.label - 1] == o.text
            checked += 1
        assert r.source_id is not None and r.source_id.isdigit()
    return checked


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    images, path = ds.write_coco_set(root, 24, CLASSES, orientations=(1, 3, 6, 8, 1, 3, 6, 8))
    return root / "images", path, images


@pytest.mark.parametrize(
    "extra", [(), ("--resize", 40), ("--max-side", 50, "--image-format", "png"), ("--isolate", "all", "--resize", 40)]
)  # prepared in the sandbox
def test_boxes_are_within_a_pixel_of_the_drawn_shapes(shapes, tmp_path, run_cli, extra):
    source, path, images = shapes
    out = tmp_path / "out"
    convert(run_cli, source, out, path, *extra)
    assert assert_boxes_match_pixels(out, images) == sum(len(i.shapes) for i in images)
    m = Manifest.load(str(out))
    assert m.task == "detection" and [c.source_id for c in m.categories] == [3, 7, 12]
    assert m.inputs.boxes.read == m.inputs.boxes.written == sum(len(i.shapes) for i in images)
    assert (out / "label_map.pbtxt").read_text().count("item {") == 3
    assert (out / "label_map.csv").read_text().splitlines()[:2] == ["id,name", "1,cat"]
    split = m.splits["train"]
    assert split.max_boxes == max(len(i.shapes) for i in images)
    assert sum(split.box_counts.values()) == sum(len(i.shapes) for i in images)
    # The rotated JPEGs were turned upright: their stored size is the displayed one.
    for r in records(out).values():
        if extra == ():
            assert (r.width, r.height) == (96, 72)


def test_exif_rotated_images_are_stored_upright_with_their_boxes(shapes, tmp_path, run_cli):
    source, path, images = shapes
    out = tmp_path / "out"
    convert(run_cli, source, out, path)
    turned = {i.path for i in images if i.orientation in (3, 6, 8)}
    assert {i.orientation for i in images} >= {3, 6, 8}
    got = records(out)
    assert turned <= set(got)
    assert_boxes_match_pixels(out, [i for i in images if i.path in turned])


def test_byte_identical_at_one_and_two_workers(shapes, tmp_path, run_cli):
    source, path, _ = shapes
    a = tmp_path / "a"
    b = tmp_path / "b"
    convert(run_cli, source, a, path, "--workers", 1, "--split", "train=0.75,test=0.25")
    convert(run_cli, source, b, path, "--workers", 2, "--split", "train=0.75,test=0.25")
    assert shard_bytes(a) == shard_bytes(b) and len(shard_bytes(a)) == 4
    assert manifest_without_run(a) == manifest_without_run(b)
    assert (a / "rejects.jsonl").read_bytes() == (b / "rejects.jsonl").read_bytes()


def test_strata_are_balanced_within_one_per_shard(tmp_path, run_cli):
    images, path = ds.write_coco_set(tmp_path / "src", 60, CLASSES, seed=3)
    out = tmp_path / "out"
    convert(run_cli, tmp_path / "src" / "images", out, path, "--num-shards", 3)
    m = Manifest.load(str(out), shard_counts=True)
    shards = m.splits["train"].shards
    assert len(shards) == 3
    assert max(s.examples for s in shards) - min(s.examples for s in shards) <= 1
    for stratum in shards[0].stratum_counts:
        counts = [s.stratum_counts.get(stratum, 0) for s in shards]
        assert max(counts) - min(counts) <= 1, (stratum, counts)
    assert sum(shards[0].stratum_counts.values()) == shards[0].examples
    split = m.splits["train"]
    worst = max(
        abs(s.class_counts[c] - split.class_counts[c] * s.examples / split.examples) for s in shards for c in CLASSES
    )
    assert split.max_deviation == round(worst, 3)
    # The keys were dealt for this layout (no input rejected): every class, not only the strata, follows.
    assert split.max_deviation <= 1.5, [s.class_counts for s in shards]


def _bad_set(tmp_path):
    """Eight images, each with one kind of trouble, and the COCO document naming them."""
    images = ds.make_images(8, CLASSES, seed=5, empty_every=0, jpeg_every=0)
    ds.write_images(tmp_path / "src", images, CLASSES)
    (tmp_path / "src" / "stray.png").write_bytes(ds.encode(images[0], CLASSES))  # never annotated
    doc = ds.coco(images, CLASSES)
    anns = {a["image_id"]: a for a in doc["annotations"]}  # the last box of each image
    first = doc["images"]
    anns[first[0]["id"]]["bbox"] = [80, 60, 30, 30]  # reaches outside 96x72: clipped
    anns[first[1]["id"]]["bbox"] = [10, 10, 0, 5]  # degenerate: dropped
    anns[first[2]["id"]]["bbox"] = [float("nan"), 1, 2, 2]  # NaN: dropped
    for a in doc["annotations"]:
        if a["image_id"] == first[3]["id"]:  # every box of image 3 invalid: kept without objects
            a["bbox"] = [5, 5, -1, 3]
    anns[first[4]["id"]]["iscrowd"] = 1
    first[5]["width"] = 50  # declares another size: size_mismatch
    doc["images"].append({"id": 99, "file_name": "gone.png", "width": 96, "height": 72})  # missing_image
    doc["annotations"].append({"id": 999, "image_id": 99, "category_id": 3, "bbox": [1, 1, 5, 5], "iscrowd": 0})
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))  # NaN is written as NaN, which Python's JSON reader (and COCO tools) accept
    return images, path


def _reconciles(m: Manifest):
    assert m.inputs.reconciles and m.inputs.boxes.reconciles, m.inputs.to_json()


def test_bad_annotations_each_give_their_reason_and_counts_reconcile(tmp_path, run_cli):
    images, path = _bad_set(tmp_path)
    out = tmp_path / "out"
    convert(run_cli, tmp_path / "src", out, path)
    m = Manifest.load(str(out))
    _reconciles(m)
    lines = rejects(out)
    by_reason = {(l["path"], l["reason"], l.get("box") is not None) for l in lines}
    p = [i.path for i in images]
    assert (p[5], "size_mismatch", False) in by_reason
    assert ("gone.png", "missing_image", False) in by_reason
    assert ("stray.png", "not_annotated", False) in by_reason
    assert any(l["path"] == p[0] and l.get("action") == "clipped" for l in lines)
    assert any(l["path"] == p[1] and l["reason"] == "box_degenerate" for l in lines)
    assert any(l["path"] == p[2] and l["reason"] == "box_nan" for l in lines)
    assert m.inputs.found == 10 and m.inputs.written == 7
    assert m.inputs.rejected_by_reason == {"missing_image": 1, "not_annotated": 1, "size_mismatch": 1}
    got = records(out)
    assert got[p[3]].objects == ()  # all its boxes invalid: kept, without objects
    assert [o.crowd for o in got[p[4]].objects][-1] == 1
    assert m.inputs.boxes.clipped == 1
    assert m.inputs.boxes.dropped_by_reason["image_rejected"] == len(images[5].shapes) + 1


@pytest.mark.parametrize(
    "args, reason",
    [
        (("--bad-boxes", "reject-image"), None),
        (("--crowd", "reject-image"), None),
        (("--crowd", "drop"), "crowd"),
        (("--skip-empty",), "no_objects"),
        (("--unannotated", "keep"), None),
    ],
)
def test_policies(tmp_path, run_cli, args, reason):
    images, path = _bad_set(tmp_path)
    out = tmp_path / "out"
    convert(run_cli, tmp_path / "src", out, path, *args)
    m = Manifest.load(str(out))
    _reconciles(m)
    lines = rejects(out)
    p = [i.path for i in images]
    if args == ("--bad-boxes", "reject-image"):
        rejected = {l["path"] for l in lines if "box" not in l}
        assert {p[0], p[1], p[2], p[3]} <= rejected
    if args == ("--crowd", "reject-image"):
        assert any(l["path"] == p[4] and "box" not in l for l in lines)
    if reason == "crowd":
        assert any(l["path"] == p[4] and l["reason"] == "crowd" and "box" in l for l in lines)
    if reason == "no_objects":
        assert any(l["path"] == p[3] and l["reason"] == "no_objects" for l in lines)
        assert p[3] not in records(out)
    if args == ("--unannotated", "keep"):
        assert records(out)["stray.png"].objects == ()
        assert "not_annotated" not in (m.inputs.rejected_by_reason or {})


def test_the_four_formats_give_the_same_boxes_and_labels(tmp_path, run_cli):
    images = ds.make_images(10, CLASSES, seed=9)
    source = tmp_path / "src"
    ds.write_images(source, images, CLASSES)
    (tmp_path / "coco.json").write_text(json.dumps(ds.coco(images, CLASSES)))
    ds.write_voc(tmp_path / "voc", images)
    ds.write_yolo(tmp_path / "yolo", images, CLASSES)
    ds.write_box_csv(tmp_path / "boxes.csv", images)
    classes = tmp_path / "classes.txt"
    classes.write_text("\n".join(CLASSES) + "\n")
    found = {}
    for name in ("coco.json", "voc", "yolo", "boxes.csv"):
        out = tmp_path / f"out-{name}"
        convert(run_cli, source, out, tmp_path / name, "--classes", classes)
        found[name] = {
            path: [(o.label, o.text, *(round(v, 4) for v in (o.xmin, o.ymin, o.xmax, o.ymax))) for o in r.objects]
            for path, r in records(out).items()
        }
        assert len(found[name]) == 10
    assert found["coco.json"] == found["voc"] == found["yolo"] == found["boxes.csv"]


@pytest.mark.parametrize(
    "args, message",
    [
        (("--annotations", "a.json", "--masks", "m"), "pass one of them"),
        (("--crowd", "drop"), "needs --annotations"),
        (("--annotations", "a.json", "--empty-classes", "drop"), "--empty-classes drop"),
        (("--annotations", "a.json", "--max-per-class", "3"), "--max-per-class"),
    ],
)
def test_contradictory_options_give_one_error_line(tmp_path, run_cli, args, message):
    (tmp_path / "src").mkdir()
    result = run_cli("convert", tmp_path / "src", tmp_path / "out", *args)
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output


def test_the_detection_sample_converts_upright_with_every_box(tmp_path, run_cli):
    sample = pathlib.Path(__file__).resolve().parents[2] / "samples" / "shapes_detection"
    out = tmp_path / "out"
    result = run_cli(
        "convert",
        sample / "images",
        out,
        "--annotations",
        sample / "instances.json",
        "--split",
        "train=0.8,validation=0.2",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((sample / "instances.json").read_text())
    m = Manifest.load(str(out))
    assert m.inputs.written == len(doc["images"]) and m.inputs.boxes.written == len(doc["annotations"])
    got = records(out)
    for image in doc["images"]:  # the EXIF-turned JPEGs are stored upright, at the size COCO gives
        r = got[image["file_name"]]
        assert (r.width, r.height) == (image["width"], image["height"])
        assert r.source_id == str(image["id"])
    assert all(len(r.objects[0].mask) > 0 for r in got.values() if r.objects)  # polygons become masks


def test_resume_reuses_prepared_detection_chunks_and_gives_the_same_dataset(shapes, tmp_path, run_cli, monkeypatch):
    import errno
    import os

    from prep.core import storage
    from tests.support.shards import assert_same_dataset

    source, path, _ = shapes
    reference = tmp_path / "ref"
    convert(run_cli, source, reference, path, "--split", "train=0.75,test=0.25")
    out = tmp_path / "out"
    real = storage.open_write

    def full_disk(p):
        if f"{os.sep}.prep-tmp{os.sep}shards{os.sep}" in p:
            raise OSError(errno.ENOSPC, "No space left on device", p)
        return real(p)

    with monkeypatch.context() as patch:
        patch.setattr(storage, "open_write", full_disk)
        assert convert(run_cli, source, out, path, "--split", "train=0.75,test=0.25", ok=False).exit_code == 1
    convert(run_cli, source, out, path, "--split", "train=0.75,test=0.25", "--resume")
    resumed = Manifest.load(str(out)).run.resumed
    assert resumed.chunks_reused == resumed.chunks > 0  # no image read again: boxes and counts from the indexes
    assert_same_dataset(out, reference, shards=4)


def test_detection_from_an_object_store_gives_the_same_dataset(shapes, tmp_path, run_cli):
    from beam_jobs import convert as conversion
    from prep.core.convert_options import build_config
    from prep.core.inputs import list_inputs
    from tests.support.shards import assert_same_dataset
    from tests.support.testfs import to_url

    source, path, _ = shapes
    reference = tmp_path / "ref"
    convert(run_cli, source, reference, path, "--seed", 4)
    out = tmp_path / "out"
    config = build_config(
        to_url(str(source)), to_url(str(out)), {"annotations": to_url(str(path)), "num_shards": 2, "seed": 4}
    )
    conversion.convert(config, list_inputs(config))
    assert_same_dataset(out, reference, shards=2)


def test_overwrite_knows_the_label_maps_as_its_own(shapes, tmp_path, run_cli):
    """And the tfds names file of detection, today's and an earlier version's."""
    source, path, _ = shapes
    out = tmp_path / "out"
    convert(run_cli, source, out, path)
    assert (out / "image.object-class.label.labels.txt").is_file()
    assert convert(run_cli, source, out, path, ok=False).exit_code != 0  # not without --overwrite
    (out / "image.object.class.label.labels.txt").write_text("background\n")  # as the version before wrote it
    convert(run_cli, source, out, path, "--overwrite", "--seed", 2)
    assert not (out / "image.object.class.label.labels.txt").exists()
    (out / "mine.txt").write_text("a user's file")
    result = convert(run_cli, source, out, path, "--overwrite", ok=False)
    assert result.exit_code != 0 and "mine.txt" in result.output
