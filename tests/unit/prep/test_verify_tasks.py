"""`prep verify` on multi-label, detection and segmentation datasets: intact ones pass, and each kind of
damage (a flipped or outside box, a wrong class id or name, a mask of the wrong size or values, counts off
in the manifest, broken balance) is reported by name with its file and record."""

import dataclasses
import json

import pytest

from prep.core import schema as s
from prep.core.manifest import NO_STRATUM
from prep.core.task_record import TaskRecord
from prep.verify import verify
from tests.support import datasets
from tests.support import task_datasets as td

DET = td.DETECTION_LABELS


def problems(path, **kwargs) -> list[tuple]:
    return [(p.file, p.record, p.message) for p in verify(str(path), **kwargs).problems]


@pytest.fixture(scope="module")
def detection(tmp_path_factory):
    return td.detection_dataset(tmp_path_factory.mktemp("det") / "out")


@pytest.fixture
def det_copy(detection, tmp_path):
    return datasets.copy(detection, tmp_path / "out")


def write_detection(tmp_path, damage) -> tuple:
    """The standard detection dataset with `damage(records)` applied before writing (so the manifest
    agrees with the damaged records and only what the records break is wrong); (OUT, records)."""
    records = td.detection_records()
    damage(records)
    out = td.write(
        tmp_path / "out",
        "detection",
        DET,
        {"train": records[:12], "validation": records[12:]},
        {"train": 3, "validation": 2},
    )
    return out, records


def where(out, record) -> tuple[str, int]:
    """The shard file and index in it of `record` (found by its filename)."""
    for path in sorted(out.glob("*.tfrecord")):
        for i, data in enumerate(datasets.records(path)):
            if td.TaskRecord.from_bytes(data, record.task).filename == record.filename:
                return path.name, i
    raise AssertionError(record.filename)


def replace_object(records, i, **changes):
    r = records[i]
    objects = list(r.objects)
    objects[0] = dataclasses.replace(objects[0], **changes)
    records[i] = dataclasses.replace(r, objects=tuple(objects))


@pytest.mark.parametrize(
    "make",
    [td.detection_dataset, td.segmentation_dataset, td.multilabel_dataset],
    ids=["detection", "segmentation", "multilabel"],
)
def test_intact_task_datasets_pass_shallow_and_deep(make, tmp_path, run_cli):
    out = make(tmp_path / "out")
    manifest = datasets.load(out)
    for deep in (False, True):
        report = verify(str(out), deep=deep, workers=2)
        assert report.problems == ()
    for name, info in manifest["splits"].items():  # deep: segmentation's class maps were decoded and counted
        assert report.splits[name].class_counts == info["class_counts"]
    result = run_cli("verify", out, "--deep")
    assert result.exit_code == 0 and result.output.splitlines()[-1].startswith("OK:"), result.output


def test_a_flipped_box_is_named_with_its_record(tmp_path):
    out, records = write_detection(tmp_path, lambda rs: replace_object(rs, 1, xmin=0.8, xmax=0.2))
    file, index = where(out, records[1])
    assert problems(out) == [(file, index, "object 0: box has xmin 0.800000011920929 > xmax 0.20000000298023224")]


def test_a_box_outside_the_image_and_a_nan_are_named(tmp_path):
    def damage(rs):
        replace_object(rs, 2, ymax=1.25)
        replace_object(rs, 3, xmin=float("nan"))

    out, records = write_detection(tmp_path, damage)
    found = problems(out)
    assert (*where(out, records[2]), "object 0: box outside [0, 1]: ymax 1.25") in found
    file, index = where(out, records[3])
    assert [m for f, i, m in found if (f, i) == (file, index)] == ["object 0: box outside [0, 1]: xmin nan"]
    assert len(found) == 2


class SkewedTfdsBoxes(td.TaskRecord):
    """A record whose image/object/bbox/yxyx (what tfds reads) is not its four box lists (what Model Garden reads)."""

    def features(self) -> dict:
        features = super().features()
        values = list(self.yxyx())
        values[1] = 0.5 if values[1] != 0.5 else 0.25  # object 0's xmin
        features[s.OBJECT_BBOX] = s.Floats(values)
        return features


class ShortTfdsBoxes(td.TaskRecord):
    def features(self) -> dict:
        return super().features() | {s.OBJECT_BBOX: s.Floats(self.yxyx()[:-4])}


def test_a_tfds_box_list_that_disagrees_with_the_four_lists_is_named(tmp_path):
    def skew(rs, i, cls):
        rs[i] = cls(**{f.name: getattr(rs[i], f.name) for f in dataclasses.fields(rs[i])})

    def damage(rs):
        skew(rs, 1, SkewedTfdsBoxes)
        skew(rs, 2, ShortTfdsBoxes)

    out, records = write_detection(tmp_path, damage)
    r1, r2 = records[1], records[2]
    xmin = TaskRecord.from_bytes(r1.to_bytes(), "detection").objects[0].xmin  # as stored: float32
    assert sorted(problems(out)) == sorted(
        [
            (
                *where(out, r1),
                f"image/object/bbox/yxyx[1] is {0.5 if xmin != 0.5 else 0.25} but object 0's xmin is "
                f"{xmin!r}: tensorflow-datasets would read other boxes than Model Garden",
            ),
            (
                *where(out, r2),
                f"image/object/bbox/yxyx holds {4 * len(r2.objects) - 4} values, not 4 per object "
                f"({4 * len(r2.objects)})",
            ),
        ]
    )
    assert len(r2.objects) > 0


def test_a_wrong_class_id_and_a_wrong_name_are_named(tmp_path):
    def damage(rs):
        replace_object(rs, 1, label=4)  # 3 classes: ids 1..3
        replace_object(rs, 2, label=0)  # background is not an object class
        replace_object(rs, 3, text="dog" if rs[3].objects[0].text != "dog" else "cat")

    out, records = write_detection(tmp_path, damage)
    found = problems(out)
    assert (
        *where(out, records[1]),
        "object 0: image/object/class/label 4 is not an id in 1..3 (0 is background)",
    ) in found
    assert (
        *where(out, records[2]),
        "object 0: image/object/class/label 0 is not an id in 1..3 (0 is background)",
    ) in found
    wrong = records[3].objects[0]
    assert (
        *where(out, records[3]),
        f"object 0: image/object/class/text is {wrong.text!r} but id {wrong.label} is {DET[wrong.label - 1]!r}",
    ) in found


def test_a_mask_of_the_wrong_size_or_values_is_named_with_deep(tmp_path):
    import numpy as np

    def damage(rs):
        w, h = rs[1].width, rs[1].height
        replace_object(rs, 1, mask=td.png(np.zeros((h, w + 1), np.uint8)))
        replace_object(rs, 2, mask=td.png(np.full((rs[2].height, rs[2].width), 255, np.uint8)))

    out, records = write_detection(tmp_path, damage)
    assert problems(out) == []  # masks are decoded with --deep only
    found = problems(out, deep=True)
    r1, r2 = records[1], records[2]
    assert found == sorted(
        [
            (
                *where(out, r1),
                f"object 0: image/object/mask is {r1.width + 1}x{r1.height}, the image is {r1.width}x{r1.height}",
            ),
            (*where(out, r2), "object 0: image/object/mask holds values 255, an instance mask holds 0 and 1"),
        ]
    )


def test_a_record_without_source_id_is_named(tmp_path):
    out, records = write_detection(tmp_path, lambda rs: rs.__setitem__(4, dataclasses.replace(rs[4], source_id=None)))
    file, index = where(out, records[4])
    assert problems(out) == [
        (
            file,
            None,
            f"1 of {datasets.load(out)['splits']['train']['shards'][0]['examples']} "
            f"detection records have no decimal image/source_id, which every "
            f"detection record carries (the first is record {index})",
        )
    ]


def shard(manifest, split="train", i=0):
    return manifest["splits"][split]["shards"][i]


def test_counts_off_in_the_manifest_are_named(det_copy):
    manifest = datasets.load(det_copy)
    entry = shard(manifest)
    name = entry["file"]
    boxes = dict(entry["box_counts"])
    entry["box_counts"]["owl"] += 1
    manifest["splits"]["train"]["box_counts"]["owl"] += 1
    manifest["inputs"]["boxes"]["written"] += 1
    manifest["inputs"]["boxes"]["read"] += 1
    datasets.save(det_copy, manifest)
    assert problems(det_copy) == [
        (name, None, f"boxes per class differ from the manifest: owl {boxes['owl']} (manifest {boxes['owl'] + 1})")
    ]
    manifest["splits"]["validation"]["max_boxes"] = 7
    entry["class_counts"]["dog"] += 1
    manifest["splits"]["train"]["class_counts"]["dog"] += 1
    datasets.save(det_copy, manifest)
    found = problems(det_copy)
    assert ("manifest.json", None, "split validation: max_boxes is 7, its records hold at most 3 objects") in found
    dogs = entry["class_counts"]["dog"]
    assert (
        name,
        None,
        f"images containing each class differ from the manifest: dog {dogs - 1} (manifest {dogs})",
    ) in found


def test_manifest_task_fields_that_contradict_themselves_are_named(det_copy):
    manifest = datasets.load(det_copy)
    manifest["inputs"]["boxes"]["read"] += 2  # read = written + dropped no longer holds
    manifest["categories"][0]["name"] = "lion"
    manifest["splits"]["train"]["box_counts"]["cat"] += 1
    datasets.save(det_copy, manifest)
    found = [m for f, _, m in problems(det_copy) if f == "manifest.json"]
    assert "categories must be the labels with ids 1..3 in order, got ['1=lion', '2=dog', '3=owl']" in found
    assert any(m.startswith("split train: box_counts {") and "are not the sum of its shards'" in m for m in found)
    boxes = manifest["inputs"]["boxes"]
    assert f"inputs.boxes: read {boxes['read']} is not written {boxes['written']} + dropped 0" in found


def test_strata_that_break_the_balance_rule_are_named(det_copy):
    manifest = datasets.load(det_copy)
    shards = manifest["splits"]["train"]["shards"]
    a, c = shards[0]["stratum_counts"], shards[2]["stratum_counts"]
    assert (a["dog"], a["owl"], c["dog"], c["owl"]) == (1, 1, 1, 2)
    # One dog-stratum image claimed by shard 2 instead of 0, one owl the other way: sums, and strata within
    # class_counts, still hold, but the dog stratum is 0, 1, 2 over the shards where the rule allows 1 each.
    a["dog"], a["owl"], c["dog"], c["owl"] = 0, 2, 2, 1
    datasets.save(det_copy, manifest)
    rule = "split train has 3 of stratum 'dog' in 3 shards, so each must hold 1"
    assert problems(det_copy) == [
        (shards[0]["file"], None, f"unbalanced: holds 0 of stratum 'dog'; {rule}"),
        (shards[2]["file"], None, f"unbalanced: holds 2 of stratum 'dog'; {rule}"),
    ]


def test_an_image_without_objects_counted_in_another_stratum_is_named(det_copy):
    manifest = datasets.load(det_copy)
    strata = shard(manifest)["stratum_counts"]
    none = strata.pop(NO_STRATUM)
    strata["owl"] = strata.get("owl", 0) + none
    datasets.save(det_copy, manifest)
    assert (
        shard(manifest)["file"],
        None,
        f"holds {none} records without objects, the manifest's stratum_counts['(none)'] says 0",
    ) in problems(det_copy)


def test_segmentation_masks_of_wrong_values_or_size_are_named(tmp_path):
    import numpy as np

    records = td.segmentation_records()
    bad = records[2].segmentation
    records[2] = dataclasses.replace(records[2], segmentation=td.png(np.full((24, 10), 9, np.uint8)))
    values = np.zeros((records[3].height, records[3].width), np.uint8)
    values[0, 0] = 7
    records[3] = dataclasses.replace(records[3], segmentation=td.png(values))
    out = td.write(tmp_path / "out", "segmentation", td.SEGMENTATION_LABELS, {"train": records}, 2)
    assert bad != records[2].segmentation
    found = [(f, m) for f, _, m in problems(out, deep=True)]
    assert any(m == f"image/segmentation/class/encoded is 10x24, the image is {records[2].width}x24" for _, m in found)
    assert any(
        m == "image/segmentation/class/encoded holds values 7, not class values 0..3 or the ignore value 255"
        for _, m in found
    )


def test_multilabel_ids_out_of_range_and_wrong_text_are_named(tmp_path):
    ids = [(0,), (0, 1), (5,), (2,)]
    records = [td.multilabel_record(i, t, td.MULTILABEL_LABELS + ["x", "y"]) for i, t in enumerate(ids)]
    records[3] = dataclasses.replace(records[3], texts=("red",))
    out = td.write(tmp_path / "out", "multilabel", td.MULTILABEL_LABELS + ["x", "y"], {"train": records}, 2)
    manifest = datasets.load(out)
    manifest["labels"] = td.MULTILABEL_LABELS  # the dataset's records name labels the manifest does not have
    for entry in manifest["splits"]["train"]["shards"] + [manifest["splits"]["train"]]:
        for key in ("class_counts", "stratum_counts"):
            if key in entry:
                entry[key] = {k: v for k, v in entry[key].items() if k not in ("x", "y")}
    (out / "manifest.json").write_text(json.dumps(manifest))
    messages = [m for _, _, m in problems(out)]
    assert "image/class/label[0] is 5, not an id in 0..3" in messages
    assert "image/class/text[0] is 'red' but label 2 is 'blue'" in messages


def test_a_detection_record_read_as_the_wrong_task_is_named(det_copy):
    manifest = datasets.load(det_copy)
    manifest["task"] = "multilabel"
    del manifest["categories"]
    (det_copy / "manifest.json").write_text(json.dumps(manifest))
    messages = {m for _, _, m in problems(det_copy)}
    assert "does not parse as a multilabel record: record lacks feature image/class/label" in messages


def test_segmentation_class_counts_are_read_only_with_deep(tmp_path):
    out = td.segmentation_dataset(tmp_path / "out")
    assert verify(str(out)).splits["train"].class_counts is None  # not decoded: not reported as zeros
    manifest = datasets.load(out)
    manifest["splits"]["train"]["shards"][0]["class_counts"]["car"] += 1
    manifest["splits"]["train"]["class_counts"]["car"] += 1
    datasets.save(out, manifest)
    assert problems(out) == []
    car = manifest["splits"]["train"]["shards"][0]["class_counts"]["car"]
    assert problems(out, deep=True) == [
        (
            manifest["splits"]["train"]["shards"][0]["file"],
            None,
            f"images containing each class differ from the manifest: car {car - 1} (manifest {car})",
        )
    ]


def test_target_fix_for_a_detection_dataset_keeps_its_annotations(tmp_path, run_cli):
    records = td.detection_records(n=6)
    records[1] = dataclasses.replace(records[1], source_id="abc")
    out = td.write(tmp_path / "out", "detection", DET, {"train": records}, 2)
    manifest = datasets.load(out)
    manifest["options"] |= {"annotations": "instances.json", "crowd": "drop", "bad_boxes": "clip"}
    datasets.save(out, manifest)
    report = verify(str(out), target="model-garden")
    assert report.target.by_reason == {"no_source_id": 1}
    assert report.target.fix.endswith("--annotations instances.json --crowd drop --target model-garden --overwrite")
    good = td.write(tmp_path / "good", "detection", DET, {"train": td.detection_records(n=6)}, 2)
    result = run_cli("verify", good, "--target", "model-garden")
    assert result.exit_code == 0 and result.output.splitlines()[-1] == (
        "OK: --target model-garden: every record has a decimal image/source_id and the keys TfExampleDecoder reads"
    )


def test_manifest_balance_problems_follow_the_task(det_copy):
    from prep.core.manifest import Manifest
    from prep.verify import manifest_balance_problems

    assert (
        manifest_balance_problems(Manifest.load(str(det_copy), shard_counts=True), "train") == []
    )  # class_counts are not ±1 here
    manifest = datasets.load(det_copy)
    shards = manifest["splits"]["train"]["shards"]
    shards[0]["stratum_counts"]["dog"], shards[2]["stratum_counts"]["dog"] = 0, 2
    shards[0]["stratum_counts"]["owl"], shards[2]["stratum_counts"]["owl"] = 2, 1
    datasets.save(det_copy, manifest)
    found = manifest_balance_problems(Manifest.load(str(det_copy), shard_counts=True), "train")
    assert [p.file for p in found] == [shards[0]["file"], shards[2]["file"]]


@pytest.fixture(scope="module")
def dropped_boxes(tmp_path_factory):
    """Converted by prep convert: 8 images; one's only box lies outside it (dropped box_outside), one's
    only object is a crowd (dropped with --crowd drop). Both images are written without objects, but
    their strata come from their annotations: 'b', not (none)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("dropped")
    (root / "images").mkdir()
    images, anns = [], []
    for i in range(8):
        Image.new("RGB", (40, 30), (200, 30 * i, 0)).save(root / "images" / f"{i}.jpg")
        images.append({"id": i + 1, "file_name": f"{i}.jpg", "width": 40, "height": 30})
        if i < 6:
            anns.append({"image_id": i + 1, "category_id": 1 + i % 2, "bbox": [5, 5, 10, 10], "iscrowd": 0})
    anns.append({"image_id": 7, "category_id": 2, "bbox": [100, 100, 10, 10], "iscrowd": 0})
    anns.append({"image_id": 8, "category_id": 2, "bbox": [1, 1, 10, 10], "iscrowd": 1})
    for i, a in enumerate(anns, 1):
        a |= {"id": i, "area": 100}
    (root / "instances.json").write_text(
        json.dumps(
            {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
        )
    )
    return datasets.convert(
        root / "images",
        root / "out",
        "--annotations",
        root / "instances.json",
        "--num-shards",
        2,
        "--crowd",
        "drop",
        "--no-progress",
    )


def test_a_converted_dataset_with_dropped_boxes_verifies(dropped_boxes):
    manifest = datasets.load(dropped_boxes)
    assert manifest["inputs"]["boxes"]["dropped_by_reason"] == {"box_outside": 1, "crowd": 1}
    assert sum(s["stratum_counts"].get(NO_STRATUM, 0) for s in manifest["splits"]["train"]["shards"]) == 0
    assert problems(dropped_boxes, deep=True) == []


def test_rejects_jsonl_box_lines_are_counted(dropped_boxes, tmp_path):
    out = datasets.copy(dropped_boxes, tmp_path / "out")
    lines = (out / "rejects.jsonl").read_text().splitlines()
    assert [json.loads(line)["action"] for line in lines] == ["dropped", "dropped"]
    (out / "rejects.jsonl").write_text(lines[0] + "\n")
    assert problems(out) == [
        (
            "rejects.jsonl",
            None,
            "has 1 dropped and 0 clipped box lines, the manifest counts "
            "2 dropped (besides the boxes of rejected images) and 0 clipped",
        )
    ]


def test_an_instance_mask_must_cover_its_area_inside_its_box_with_deep(tmp_path):
    import numpy as np

    def damage(rs):
        o = rs[1].objects[0]
        replace_object(rs, 1, area=o.area + 7)
        r = rs[2]
        far = np.zeros((r.height, r.width), np.uint8)
        o = r.objects[0]
        x = 0 if o.xmin * r.width > 10 else r.width - 4  # a 4x4 block away from the box
        far[0:4, x : x + 4] = 1
        replace_object(rs, 2, mask=td.png(far), area=16.0)

    out, records = write_detection(tmp_path, damage)
    found = problems(out, deep=True)
    o1 = records[1].objects[0]
    assert (
        *where(out, records[1]),
        f"object 0: image/object/area is {o1.area!r}, its mask covers {int(o1.area) - 7} pixels",
    ) in found
    file, index = where(out, records[2])
    assert [m for f, i, m in found if (f, i) == (file, index)][0].startswith("object 0: image/object/mask reaches ")
    assert len(found) == 2


def test_json_names_the_task(detection, run_cli):
    result = run_cli("verify", detection, "--json")
    doc = json.loads(result.output)
    assert result.exit_code == 0 and doc["task"] == "detection" and doc["verdict"] == "ok"
    assert doc["splits"]["train"]["class_counts"] == datasets.load(detection)["splits"]["train"]["class_counts"]
