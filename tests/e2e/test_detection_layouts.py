"""Detection datasets in the layouts their tools write, each converted in one command with its splits:
Ultralytics (data.yaml), COCO 2017 (one instances file per split) and Pascal VOC (ImageSets/Main)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import yaml
from PIL import Image

from prep.core.task_record import TaskRecord
from prep.core.tfrecord import read_records

CLASSES = ("cat", "dog")
W, H = 40, 30


def records(out: pathlib.Path) -> dict[str, tuple[str, TaskRecord]]:
    """{image/filename: (split, record)} of every shard."""
    found = {}
    for shard in sorted(out.glob("*.tfrecord")):
        with open(shard, "rb") as f:
            for _, _, data in read_records(f, shard.name):
                r = TaskRecord.from_bytes(data, "detection")
                found[r.filename] = (shard.name.split("-")[0], r)
    return found


def boxes_of(i: int) -> list[tuple[int, tuple[int, int, int, int]]]:
    """(class index, (x0, y0, x1, y1) pixels) of image i: one or two boxes."""
    out = [(i % 2, (2 + i % 5, 3, 20 + i % 5, 18))]
    if i % 3 == 0:
        out.append((1 - i % 2, (22, 12, 38, 28)))
    return out


def draw(path: pathlib.Path, i: int) -> None:
    """A picture of its own (structure, so that duplicate detection sees it) for image i."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(i).integers(0, 256, (H // 5, W // 5, 3), dtype=np.uint8)
    Image.fromarray(pixels).resize((W, H), Image.Resampling.BILINEAR).save(path, format="JPEG", quality=95)


def assert_boxes(found: dict[str, tuple[str, TaskRecord]], expected=boxes_of) -> None:
    """Every record holds exactly the boxes its image was annotated with (`expected(i)`), normalised."""
    for name, (_, r) in found.items():
        i = int(pathlib.PurePosixPath(name).stem.split("_")[-1])
        want = sorted((c + 1, x0 / W, y0 / H, x1 / W, y1 / H) for c, (x0, y0, x1, y1) in expected(i))
        got = sorted((o.label, o.xmin, o.ymin, o.xmax, o.ymax) for o in r.objects)
        assert len(got) == len(want), (name, got, want)
        for g, e in zip(got, want):
            assert g[0] == e[0] and max(abs(x - y) for x, y in zip(g[1:], e[1:])) < 1e-6, (name, got, want)


def test_ultralytics_data_yaml_with_source_at_the_dataset_root(tmp_path, run_cli):
    ds = tmp_path / "ds"
    names = {}
    for split, ids in (("train", range(0, 6)), ("val", range(6, 10))):
        for i in ids:
            draw(ds / "images" / split / f"im_{i}.jpg", i)
            if i == 9:
                continue  # no label file: a background image, as Ultralytics trains it
            lines = [
                f"{c} {(x0 + x1) / 2 / W} {(y0 + y1) / 2 / H} {(x1 - x0) / W} {(y1 - y0) / H}"
                for c, (x0, y0, x1, y1) in boxes_of(i)
            ]
            (ds / "labels" / split).mkdir(parents=True, exist_ok=True)
            (ds / "labels" / split / f"im_{i}.txt").write_text("\n".join(lines) + "\n")
            names[f"images/{split}/im_{i}.jpg"] = split
    names["images/val/im_9.jpg"] = "val"
    (ds / "data.yaml").write_text(
        yaml.safe_dump(
            {"path": "../elsewhere/ds", "train": "images/train", "val": "images/val", "names": {0: "cat", 1: "dog"}}
        )
    )
    out = tmp_path / "out"
    args = ["convert", ds, out, "--annotations", ds / "data.yaml", "--num-shards", 1]
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert {s: i["examples"] for s, i in manifest["splits"].items()} == {"train": 6, "val": 4}
    found = records(out)
    assert {n: s for n, (s, _) in found.items()} == names
    assert found["images/val/im_9.jpg"][1].objects == ()
    assert_boxes({n: v for n, v in found.items() if not n.endswith("im_9.jpg")})
    assert manifest["inputs"]["boxes"]["read"] == sum(len(boxes_of(i)) for i in range(9))
    assert [c["name"] for c in manifest["categories"]] == list(CLASSES)


def test_ultralytics_list_files_and_roboflow_paths(tmp_path, run_cli):
    ds = tmp_path / "ds"
    for split, ids in (("train", range(0, 5)), ("valid", range(5, 8))):
        for i in ids:
            draw(ds / split / "images" / f"im_{i}.jpg", i)
            (ds / split / "labels").mkdir(parents=True, exist_ok=True)
            c, (x0, y0, x1, y1) = boxes_of(i)[0]
            line = f"{c} {(x0 + x1) / 2 / W} {(y0 + y1) / 2 / H} {(x1 - x0) / W} {(y1 - y0) / H}"
            (ds / split / "labels" / f"im_{i}.txt").write_text(line + "\n")
    (ds / "train.txt").write_text("".join(f"./train/images/im_{i}.jpg\n" for i in range(5)))
    # Roboflow writes ../valid/images beside the yaml in the dataset root; Ultralytics tries valid/images
    (ds / "data.yaml").write_text(
        yaml.safe_dump({"train": "train.txt", "val": "../valid/images", "names": ["cat", "dog"]})
    )
    out = tmp_path / "out"
    result = run_cli("convert", ds, out, "--annotations", ds / "data.yaml", "--num-shards", 1)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert {s: i["examples"] for s, i in manifest["splits"].items()} == {"train": 5, "val": 3}
    assert_boxes(records(out), lambda i: boxes_of(i)[:1])


def _coco(images: list[tuple[int, str]]) -> dict:
    anns = []
    for iid, _ in images:
        for k, (c, (x0, y0, x1, y1)) in enumerate(boxes_of(iid)):
            anns.append(
                {"id": iid * 10 + k, "image_id": iid, "category_id": [1, 18][c], "bbox": [x0, y0, x1 - x0, y1 - y0]}
            )
    return {
        "images": [{"id": iid, "file_name": name, "width": W, "height": H} for iid, name in images],
        "annotations": anns,
        "categories": [{"id": 1, "name": "cat"}, {"id": 18, "name": "dog"}],
    }


def test_coco_2017_train_and_val_files_make_one_dataset(tmp_path, run_cli):
    coco = tmp_path / "coco"
    (coco / "annotations").mkdir(parents=True)
    files = {"train": range(0, 8), "val": range(8, 12)}
    for split, ids in files.items():
        for i in ids:
            draw(coco / f"{split}2017" / f"{i:012d}_{i}.jpg", i)
        doc = _coco([(i, f"{i:012d}_{i}.jpg") for i in ids])
        (coco / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(doc))
    # the same picture in both splits: one dataset, so it is a cross-split duplicate
    (coco / "val2017" / f"{11:012d}_11.jpg").write_bytes((coco / "train2017" / f"{3:012d}_3.jpg").read_bytes())
    names = {
        f"{s}2017/{i:012d}_{i}.jpg": {"train": "train", "val": "validation"}[s] for s, ids in files.items() for i in ids
    }
    del names[f"val2017/{11:012d}_11.jpg"]
    out = tmp_path / "out"
    result = run_cli(
        "convert",
        coco,
        out,
        "--annotations",
        f"train={coco / 'annotations' / 'instances_train2017.json'}",
        "--annotations",
        f"validation={coco / 'annotations' / 'instances_val2017.json'}",
        "--cross-split",
        "remove",
        "--num-shards",
        1,
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert {s: i["examples"] for s, i in manifest["splits"].items()} == {"train": 8, "validation": 3}
    assert manifest["inputs"]["rejected_by_reason"] == {"cross_split_duplicate": 1}
    assert {n: s for n, (s, _) in records(out).items()} == names
    assert_boxes(records(out))
    assert manifest["options"]["annotations"] == ["train=instances_train2017.json", "validation=instances_val2017.json"]
    assert [c["source_id"] for c in manifest["categories"]] == [1, 18]
    assert manifest["inputs"]["boxes"]["read"] == sum(len(boxes_of(i)) for i in range(12))


def test_pascal_voc_image_sets_decide_the_splits(tmp_path, run_cli):
    voc = tmp_path / "VOCdevkit" / "VOC2012"
    (voc / "Annotations").mkdir(parents=True)
    (voc / "ImageSets" / "Main").mkdir(parents=True)
    lists = {"train": [0, 1, 2, 3, 4, 5], "val": [6, 7, 8]}
    for i in range(10):  # 9 is in no list
        draw(voc / "JPEGImages" / f"2012_{i}.jpg", i)
        objects = "".join(
            f"<object><name>{CLASSES[c]}</name><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin>"
            f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            for c, (x0, y0, x1, y1) in boxes_of(i)
        )
        (voc / "Annotations" / f"2012_{i}.xml").write_text(
            f"<annotation><filename>2012_{i}.jpg</filename><size><width>{W}</width><height>{H}</height></size>"
            f"{objects}</annotation>"
        )
    for split, ids in lists.items():
        (voc / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"2012_{i}\n" for i in ids))
    (voc / "ImageSets" / "Main" / "cat_train.txt").write_text("2012_0  1\n")  # per-class lists are not splits
    out = tmp_path / "out"
    result = run_cli("convert", voc / "JPEGImages", out, "--annotations", voc / "Annotations", "--num-shards", 1)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert {s: i["examples"] for s, i in manifest["splits"].items()} == {"train": 6, "val": 3}
    assert manifest["inputs"]["rejected_by_reason"] == {"no_split": 1}
    assert manifest["inputs"]["boxes"]["read"] == sum(len(boxes_of(i)) for i in range(10))
    assert {n: s for n, (s, _) in records(out).items()} == {f"2012_{i}.jpg": s for s, ids in lists.items() for i in ids}
    assert_boxes(records(out))
