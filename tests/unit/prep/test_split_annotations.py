"""`--annotations SPLIT=PATH` (prep/core/split_annotations.py, convert_options) and the split lists of
Pascal VOC's ImageSets/Main (prep/core/annotations/voc.py)."""

from __future__ import annotations

import argparse
import json

import pytest

from prep.core.annotations.model import object_count
from prep.core.config import TaskOptions
from prep.core.convert_options import add_arguments, build_config
from prep.core.detection_inputs import list_detection
from prep.core.errors import OptionsError, SourceError
from prep.core.split_annotations import image_folder


def _coco(path, names, categories=((1, "cat"), (18, "dog"))):
    images = [{"id": i + 1, "file_name": n, "width": 16, "height": 12} for i, n in enumerate(names)]
    anns = [
        {"id": i + 1, "image_id": i + 1, "category_id": categories[0][0], "bbox": [1, 1, 4, 4]}
        for i in range(len(names))
    ]
    cats = [{"id": i, "name": n} for i, n in categories]
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return str(path)


def _files(root, *names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")


def test_split_path_options(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    config = build_config(str(tmp_path), str(tmp_path / "out"), {"annotations": (f"train={a}", f"validation={b}")})
    assert config.tasks.split_annotations == (("train", str(a)), ("validation", str(b)))
    assert config.tasks.annotations is None and config.tasks.task == "detection"
    assert config.manifest_options()["annotations"] == ["train=a.json", "validation=b.json"]
    one = build_config(str(tmp_path), str(tmp_path / "out"), {"annotations": (str(a),)})
    assert one.tasks.annotations == str(a) and one.tasks.split_annotations == ()
    odd = tmp_path / "x=y.json"  # a path that exists keeps its '='
    odd.write_text("{}")
    assert build_config(str(tmp_path), "o", {"annotations": (str(odd),)}).tasks.annotations == str(odd)
    for values, message in [
        ((f"train={a}", str(b)), "must each be SPLIT=PATH"),
        ((f"train={a}", f"train={b}"), "split 'train' twice"),
        ((f"val-x={a}",), "must be letters, digits or '_'"),
    ]:
        with pytest.raises(OptionsError, match=message):
            build_config(str(tmp_path), str(tmp_path / "out"), {"annotations": values})
    with pytest.raises(OptionsError, match="--masks"):
        TaskOptions(split_annotations=(("train", str(a)),), masks="m")


def test_beam_entry_point_takes_the_option_repeated():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args, _ = parser.parse_known_args(["--annotations", "train=a.json", "--annotations", "val=b.json"])
    assert args.annotations == ["train=a.json", "val=b.json"]


def test_each_split_file_is_read_in_its_image_folder_and_an_image_in_two_is_a_conflict(tmp_path):
    src = tmp_path / "coco"
    _files(src, "train2017/1.jpg", "train2017/2.jpg", "val2017/3.jpg", "val2017/2.jpg", "2.jpg")
    train = _coco(tmp_path / "t.json", ["1.jpg", "2.jpg"])
    val = _coco(tmp_path / "v.json", ["3.jpg", "2.jpg"])  # SOURCE has 2.jpg too: val2017 has both
    listing = list_detection(str(src), TaskOptions(split_annotations=(("train", train), ("val", val))), None, "auto", 0)
    assert {r.path: r.split for r in listing.refs} == {
        "train2017/1.jpg": "train",
        "train2017/2.jpg": "train",
        "val2017/3.jpg": "val",
        "val2017/2.jpg": "val",
    }
    assert {r.path: r.reason for r in listing.rejects} == {"2.jpg": "not_annotated"}
    conflict = _coco(tmp_path / "c.json", ["1.jpg"])  # train's 1.jpg too, with SOURCE train2017
    listing = list_detection(
        str(src / "train2017"), TaskOptions(split_annotations=(("train", train), ("test", conflict))), None, "auto", 0
    )
    assert {r.path: r.reason for r in listing.rejects} == {"1.jpg": "split_conflict"}
    assert listing.boxes.read == 2 and dict(listing.boxes.dropped) == {"image_rejected": 2}


def test_split_files_must_name_the_same_classes(tmp_path):
    src = tmp_path / "s"
    _files(src, "a.jpg", "b.jpg")
    a = _coco(tmp_path / "a.json", ["a.jpg"])
    b = _coco(tmp_path / "b.json", ["b.jpg"], ((1, "cat"), (2, "dog")))
    with pytest.raises(SourceError, match="names other classes than train="):
        list_detection(str(src), TaskOptions(split_annotations=(("train", a), ("val", b))), None, "auto", 0)
    # --classes picks the same ones from both
    listing = list_detection(str(src), TaskOptions(split_annotations=(("train", a), ("val", b))), ("cat",), "auto", 0)
    assert {r.path: r.split for r in listing.refs} == {"a.jpg": "train", "b.jpg": "val"}


def test_image_folder_prefers_source_on_a_tie_and_is_order_free():
    files = {"a/1.jpg", "b/1.jpg", "1.jpg", "b/2.jpg"}
    assert image_folder(["1.jpg"], files) == ""
    assert image_folder(["1.jpg", "2.jpg"], files) == "b"
    assert image_folder(["9.jpg"], files) == ""


def test_voc_image_sets_give_splits_and_unlisted_images_a_reason(tmp_path):
    voc = tmp_path / "VOC2012"
    _files(voc / "JPEGImages", "x1.jpg", "x2.jpg", "x3.jpg", "x4.jpg")
    (voc / "Annotations").mkdir()
    for i in range(1, 5):
        (voc / "Annotations" / f"x{i}.xml").write_text(
            f"<annotation><filename>x{i}.jpg</filename><object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
            "<xmax>4</xmax><ymax>4</ymax></bndbox></object></annotation>"
        )
    main = voc / "ImageSets" / "Main"
    main.mkdir(parents=True)
    (main / "train.txt").write_text("x1\nx4\n")
    (main / "val.txt").write_text("x2\nx4\n")
    (main / "trainval.txt").write_text("x1\nx2\nx3\nx4\n")  # the union: not a split
    listing = list_detection(str(voc / "JPEGImages"), TaskOptions(str(voc / "Annotations")), None, "auto", 0)
    assert {r.path: r.split for r in listing.refs} == {"x1.jpg": "train", "x2.jpg": "val"}
    assert {r.path: r.reason for r in listing.rejects} == {"x3.jpg": "no_split", "x4.jpg": "split_conflict"}
    assert listing.boxes.read == 2 and dict(listing.boxes.dropped) == {"image_rejected": 2}
    for f in main.iterdir():
        f.unlink()
    listing = list_detection(str(voc / "JPEGImages"), TaskOptions(str(voc / "Annotations")), None, "auto", 0)
    assert {r.split for r in listing.refs} == {None} and len(listing.refs) == 4  # no lists: no splits


def _ultralytics(ds, yaml_text):
    for split in ("train", "val"):
        for i in range(2):
            _files(ds, f"images/{split}/{split}{i}.jpg")
            (ds / "labels" / split).mkdir(parents=True, exist_ok=True)
            (ds / "labels" / split / f"{split}{i}.txt").write_text("0 0.5 0.5 0.2 0.2\n1 0.4 0.4 0.1 0.1\n")
    (ds / "data.yaml").write_text(yaml_text)
    return str(ds / "data.yaml")


def test_data_yaml_entries_as_lists_globs_and_list_files(tmp_path):
    ds = tmp_path / "ds"
    path = _ultralytics(
        ds, "train: [images/train/train0.jpg, 'images/train/*1.jpg']\nval: val.txt\nnames: [cat, dog]\n"
    )
    (ds / "val.txt").write_text("./images/val/val0.jpg\nimages/val/val1.jpg\nimages/val/gone.jpg\n")
    listing = list_detection(str(ds), TaskOptions(path), None, "auto", 0)
    assert {r.path: r.split for r in listing.refs} == {
        "images/train/train0.jpg": "train",
        "images/train/train1.jpg": "train",
        "images/val/val0.jpg": "val",
        "images/val/val1.jpg": "val",
    }
    assert {r.path: r.reason for r in listing.rejects} == {"images/val/gone.jpg": "missing_image"}
    assert listing.classes == ("cat", "dog")


def test_data_yaml_entry_outside_source_is_one_error(tmp_path):
    path = _ultralytics(tmp_path / "ds", "train: images/train\nval: images/val\nnames: [cat, dog]\n")
    with pytest.raises(SourceError, match="val entry 'images/val' is no folder, glob or list file under SOURCE"):
        list_detection(str(tmp_path / "ds" / "images" / "train"), TaskOptions(path), None, "auto", 0)
    # SOURCE the images folder: the entries resolve under it, and labels are found by the full path
    listing = list_detection(str(tmp_path / "ds" / "images"), TaskOptions(path), None, "auto", 0)
    assert {r.path: r.split for r in listing.refs} == {f"{s}/{s}{i}.jpg": s for s in ("train", "val") for i in range(2)}
    assert all(object_count(json.loads(r.extra)["a"]) == 2 for r in listing.refs)


def test_a_yolo_label_folder_beside_a_data_yaml_names_it_when_nothing_is_found(tmp_path):
    ds = tmp_path / "ds"
    path = _ultralytics(ds, "train: images/train\nval: images/val\nnames: [cat, dog]\n")
    with pytest.raises(SourceError, match=f"Or, for Ultralytics' layout: --annotations {path} with SOURCE the dataset"):
        list_detection(str(ds), TaskOptions(str(ds / "labels")), None, "auto", 0)
