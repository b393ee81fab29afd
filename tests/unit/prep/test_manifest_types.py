"""The typed manifest: what `Manifest.from_json` refuses, by name, and that `to_json` gives the same bytes."""

import dataclasses
import json

import pytest

from prep.core.errors import ManifestError
from prep.core.manifest import FILENAME, Extras, Inputs, Manifest, ShardInfo, dumps
from prep.core.naming import ShardName


def document() -> dict:
    shard = {
        "file": "train-00000-of-00001.tfrecord",
        "index": 0,
        "examples": 3,
        "bytes": 120,
        "sha256": "ab",
        "class_counts": {"cat": 2, "dog": 1},
        "index_file": {"file": "train-00000-of-00001.tfrecord.idx", "bytes": 9, "sha256": "cd"},
    }
    return {
        "format": "tfrecord-prep",
        "version": 1,
        "tool": {"name": "tfrecord-prep", "version": "0.1.0", "pillow": "12.3.0"},
        "labels": ["cat", "dog"],
        "options": {"seed": 0, "num_shards": None},
        "splits": {
            "train": {
                "examples": 3,
                "bytes": 120,
                "num_shards": 1,
                "class_counts": {"cat": 2, "dog": 1},
                "shards": [shard],
            }
        },
        "inputs": {
            "found": 4,
            "written": 3,
            "rejected": 1,
            "capped": 0,
            "converted": 0,
            "rejected_by_reason": {"empty": 1},
            "capped_by_class": {"cat": 0, "dog": 0},
        },
        "run": {
            "runner": "local",
            "workers": None,
            "source": "/src",
            "started": 1.5,
            "created": "2026-01-01T00:00:00Z",
            "seconds": 0.25,
            "resumed": {"chunks": 2, "chunks_reused": 1, "shards": 1, "shards_reused": 0},
        },
    }


def test_round_trip_is_byte_identical_and_typed():
    data = dumps(document())
    manifest = Manifest.from_json(data)
    assert manifest.dumps() == data
    assert manifest.splits["train"].shards[0].index_file.file == "train-00000-of-00001.tfrecord.idx"
    assert manifest.inputs.reconciles and manifest.examples == 3 and manifest.run.resumed.chunks_reused == 1


def test_optional_fields_stay_absent():
    doc = document()
    del doc["splits"]["train"]["shards"][0]["index_file"], doc["inputs"]["converted"], doc["run"]["resumed"]
    assert Manifest.from_json(doc).to_json() == doc


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(version=3), "has version 3; this tool reads versions 1, 2"),
        (lambda d: d.update(version=2), "is malformed: shard_counts must be an object, got None"),
        (lambda d: d.pop("splits"), "lacks 'splits'"),
        (lambda d: d.update(labels=[]), "is malformed: labels is empty"),
        (lambda d: d["inputs"].update(found=-1), "inputs.found must be an integer >= 0, got -1"),
        (lambda d: d["splits"]["train"].update(bytes=True), "splits.train.bytes must be an integer >= 0, got True"),
        (
            lambda d: d["splits"]["train"]["shards"][0]["class_counts"].update(cat="2"),
            "splits.train.shards[0].class_counts['cat'] must be an integer >= 0, got '2'",
        ),
        (
            lambda d: d["splits"]["train"]["shards"][0]["index_file"].pop("sha256"),
            "splits.train.shards[0].index_file.sha256 must be a string, got None",
        ),
        (lambda d: d["splits"].update({"bad name": {}}), "split name 'bad name' must be letters, digits or '_'"),
    ],
)
def test_a_malformed_manifest_is_a_manifest_error_naming_the_field(edit, message):
    doc = document()
    edit(doc)
    with pytest.raises(ManifestError, match=f"^{FILENAME} .*{message.replace('[', '.').replace(']', '.')}"):
        Manifest.from_json(json.dumps(doc).encode())


def test_build_sums_shards_into_splits_in_name_order():
    labels = ("a", "b")
    shards = [
        (ShardName("val", 0, 1), ShardInfo("val-00000-of-00001.tfrecord", 0, 1, 10, "x", {"a": 1, "b": 0})),
        (ShardName("train", 1, 2), ShardInfo("train-00001-of-00002.tfrecord", 1, 2, 20, "y", {"a": 1, "b": 1})),
        (ShardName("train", 0, 2), ShardInfo("train-00000-of-00002.tfrecord", 0, 1, 15, "z", {"a": 0, "b": 1})),
    ]
    manifest = Manifest.build(labels, {}, shards, Inputs(4, 4, 0, 0), {}, run=Manifest.from_json(document()).run)
    assert list(manifest.splits) == ["train", "val"]
    train = manifest.splits["train"]
    assert (train.examples, train.bytes, train.num_shards, train.class_counts) == (3, 35, 2, {"a": 1, "b": 2})
    assert [s.index for s in train.shards] == [0, 1]


def test_task_fields_round_trip_and_classification_bytes_stay_as_they_were():
    # Detection, multi-label and segmentation add optional keys; a classification manifest
    # writes none of them, so its bytes are those of version 1 before the tasks existed.
    from prep.core.manifest import BoxAccounting, Category, Inputs, Manifest, ShardInfo, SplitInfo

    shard = ShardInfo(
        "train-00000-of-00001.tfrecord",
        0,
        2,
        10,
        "ab",
        {"cat": 2, "dog": 1},
        box_counts={"cat": 3, "dog": 1},
        stratum_counts={"dog": 1, "(none)": 1},
    )
    split = SplitInfo("train", 2, 10, 1, {"cat": 2, "dog": 1}, (shard,), box_counts={"cat": 3, "dog": 1}, max_boxes=3)
    boxes = BoxAccounting(read=6, written=4, dropped=2, clipped=1, dropped_by_reason={"box_degenerate": 2})
    m = Manifest(
        labels=("cat", "dog"),
        options={},
        splits={"train": split},
        inputs=Inputs(2, 2, 0, 0, boxes=boxes),
        tool={},
        task="detection",
        categories=(Category(1, "cat", 17), Category(2, "dog", "n02")),
        ignore_value=None,
    )
    document, counts = m.documents()  # version 2: the shard's counts in the sidecar
    back = Manifest.from_json(document).with_shard_counts(counts)
    assert dataclasses.replace(back, shard_counts=None) == m and back.documents() == (document, counts)
    assert back.inputs.boxes.reconciles
    plain = Manifest.from_json(m.dumps().replace(b'"task": "detection"', b'"task": "classification"'))
    assert b'"task"' not in dataclasses.replace(plain, categories=None).dumps()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(task="pose"), "task must be one of"),
        (lambda d: d["categories"][0].update(id=-1), r"categories\[0\].id must be an integer >= 0"),
        (lambda d: d["splits"]["train"].update(max_boxes="3"), "splits.train.max_boxes must be an integer"),
        (
            lambda d: d["splits"]["train"]["shards"][0].update(box_counts={"cat": -1}),
            r"splits.train.shards\[0\].box_counts\['cat'\] must be an integer",
        ),
        (lambda d: d["inputs"].update(boxes={"read": 1}), "inputs.boxes.written must be an integer"),
    ],
)
def test_a_malformed_task_field_is_named(edit, message):
    from prep.core.errors import ManifestError
    from prep.core.manifest import Category, Inputs, Manifest, ShardInfo, SplitInfo

    shard = ShardInfo("train-00000-of-00001.tfrecord", 0, 1, 10, "ab", {"cat": 1}, box_counts={"cat": 1})
    m = Manifest(
        labels=("cat",),
        options={},
        splits={"train": SplitInfo("train", 1, 10, 1, {"cat": 1}, (shard,))},
        inputs=Inputs(1, 1, 0, 0),
        tool={},
        task="detection",
        categories=(Category(1, "cat"),),
    )
    doc = json.loads(m.dumps())
    edit(doc)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(doc)


def test_groups_and_fraction_deviation_round_trip_and_are_checked():
    doc = document()
    doc["groups"] = {
        "duplicate_groups": 2,
        "duplicate_images": 5,
        "exact_groups": 1,
        "near_groups": 1,
        "conflict_groups": 0,
        "cross_split_groups": 0,
        "cross_split_images": 0,
        "rejected": 1,
        "pinned_images": 5,
        "refused_unions": 0,
        "skipped_comparisons": 0,
    }
    doc["splits"]["train"]["fraction_deviation"] = {"cat": -0.5, "dog": 0.5}
    data = dumps(doc)
    manifest = Manifest.from_json(data)
    assert manifest.dumps() == data and manifest.groups.pinned_images == 5
    assert manifest.splits["train"].fraction_deviation == {"cat": -0.5, "dog": 0.5}
    bad = json.loads(data)
    bad["groups"].pop("rejected")
    with pytest.raises(ManifestError, match="groups.rejected must be an integer >= 0, got None"):
        Manifest.from_json(bad)
    bad = json.loads(data)
    bad["splits"]["train"]["fraction_deviation"]["cat"] = "x"
    with pytest.raises(ManifestError, match=r"splits.train.fraction_deviation\['cat'\] must be a number"):
        Manifest.from_json(bad)


def test_build_writes_groups_only_when_they_say_something_and_deviations_per_class():
    from fractions import Fraction

    from prep.core.manifest import GroupCounts, Run

    shard = ShardInfo("train-00000-of-00001.tfrecord", 0, 3, 10, "ab", {"cat": 2, "dog": 1})
    test = ShardInfo("test-00000-of-00001.tfrecord", 0, 1, 10, "cd", {"cat": 0, "dog": 1})
    written = [(ShardName("train", 0, 1), shard), (ShardName("test", 0, 1), test)]
    inputs = Inputs(found=4, written=4, rejected=0, capped=0)
    plain = Manifest.build(["cat", "dog"], {}, written, inputs, {}, Run(), Extras(groups=GroupCounts()))
    assert "groups" not in plain.to_json() and plain.splits["train"].fraction_deviation is None
    pinned = Manifest.build(
        ["cat", "dog"],
        {},
        written,
        inputs,
        {},
        Run(),
        Extras(
            groups=GroupCounts().plus([("pinned_images", 2)]),
            fractions={"train": Fraction(1, 2), "test": Fraction(1, 2)},
        ),
    )
    assert pinned.to_json()["groups"]["pinned_images"] == 2
    assert pinned.splits["train"].fraction_deviation == {"cat": 1.0, "dog": 0.0}
    assert pinned.splits["test"].fraction_deviation == {"cat": -1.0, "dog": 0.0}
