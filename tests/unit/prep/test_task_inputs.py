"""Listing detection, segmentation and multi-label inputs (prep/core/task_inputs.py), their options,
and the balance rule on strata (manifest_checks.strata_unbalanced)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from prep.core.config import TaskOptions
from prep.core.detection_inputs import list_detection
from prep.core.errors import OptionsError, SourceError
from prep.core.label_file import list_label_file
from prep.core.manifest import Manifest
from prep.core.manifest_checks import contradictions, strata_unbalanced
from prep.core.ordering import listing_order
from prep.core.task_inputs import NO_STRATUM, BoxTally, list_segmentation, multilabel_listing, total_tally


def _coco(tmp_path, images, annotations, categories=((5, "cat"), (9, "dog"))):
    path = tmp_path / "instances.json"
    path.write_text(
        json.dumps(
            {
                "images": [{"id": i, "file_name": name, "width": 8, "height": 6} for i, name in images],
                "annotations": [
                    {"id": n, "image_id": i, "category_id": c, "bbox": box, "iscrowd": 0}
                    for n, (i, c, box) in enumerate(annotations, 1)
                ],
                "categories": [{"id": i, "name": name} for i, name in categories],
            }
        )
    )
    return str(path)


def _files(root, *names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")


def test_detection_listing_rejects_missing_and_unannotated_and_keeps_found_equal(tmp_path):
    src = tmp_path / "src"
    _files(src, "a.jpg", "b.png", "stray.jpg", ".hidden.jpg", "notes.txt")
    ann = _coco(
        tmp_path,
        [(10, "a.jpg"), (11, "b.png"), (12, "gone.jpg")],
        [(10, 5, [0, 0, 2, 2]), (10, 9, [3, 3, 2, 2]), (12, 9, [1, 1, 1, 1]), (11, 77, [1, 1, 1, 1])],
    )
    listing = list_detection(str(src), TaskOptions(ann), None, "auto", 0)
    assert listing.task == "detection" and listing.classes == ("cat", "dog")
    assert [(c.id, c.name, c.source_id) for c in listing.categories] == [(1, "cat", 5), (2, "dog", 9)]
    assert {r.path: r.reason for r in listing.rejects} == {
        "gone.jpg": "missing_image",
        "stray.jpg": "not_annotated",
        ".hidden.jpg": "hidden",
    }
    assert listing.found == 5  # notes.txt is no image: not an input
    refs = {r.path: r for r in listing.refs}
    assert json.loads(refs["a.jpg"].extra)["s"] == "10"
    assert refs["b.png"].label == NO_STRATUM  # its one box names an unknown category: a box note
    assert [(n.path, n.box, n.reason) for n in listing.box_notes] == [("b.png", 0, "unknown_category")]
    boxes = listing.boxes
    assert boxes.read == 2 and boxes.written == 0 and sum(n for _, n in boxes.dropped) == 2  # gone.jpg's + b.png's


def test_unannotated_keep_lists_images_without_objects_with_fresh_source_ids(tmp_path):
    src = tmp_path / "src"
    _files(src, "a.jpg", "z.jpg")
    ann = _coco(tmp_path, [(40, "a.jpg")], [(40, 5, [0, 0, 2, 2])])
    listing = list_detection(str(src), TaskOptions(ann, unannotated="keep"), None, "auto", 0)
    refs = {r.path: r for r in listing.refs}
    assert listing.rejects == () and json.loads(refs["z.jpg"].extra) == {"a": {"p": "z.jpg", "o": []}, "s": "41"}


def test_split_folders_give_the_split(tmp_path):
    src = tmp_path / "src"
    _files(src, "train/a.jpg", "test/b.jpg")
    ann = _coco(tmp_path, [(1, "train/a.jpg"), (2, "test/b.jpg")], [(1, 5, [0, 0, 2, 2]), (2, 9, [0, 0, 2, 2])])
    listing = list_detection(str(src), TaskOptions(ann), None, "auto", 0)
    assert {r.path: r.split for r in listing.refs} == {"train/a.jpg": "train", "test/b.jpg": "test"}
    assert list_detection(str(src), TaskOptions(ann), None, "classes", 0).refs[0].split is None


def test_stratified_rank_keys_order_the_staged_listing(tmp_path):
    src = tmp_path / "src"
    names = [f"{i}.jpg" for i in range(12)]
    _files(src, *names)
    ann = _coco(
        tmp_path, [(i, n) for i, n in enumerate(names)], [(i, 5 if i % 3 else 9, [0, 0, 2, 2]) for i in range(12)]
    )
    listing = list_detection(str(src), TaskOptions(ann), None, "auto", 3)
    ordered = listing_order(listing.refs, 3)
    for group in ("cat", "dog"):
        keys = [r.key for r in ordered if r.label == group]
        assert keys == sorted(keys) and all(keys)
    assert {r.path: r.label for r in listing.refs} == {n: "cat" if i % 3 else "dog" for i, n in enumerate(names)}


def test_segmentation_listing_pairs_masks_by_stem(tmp_path):
    src, masks = tmp_path / "src", tmp_path / "masks"
    _files(src, "a/x.jpg", "b.png")
    _files(masks, "a/x.png")
    listing = list_segmentation(str(src), str(masks), ("bg", "fg"), "auto")
    assert [(r.path, json.loads(r.extra)["m"]) for r in listing.refs] == [("a/x.jpg", "a/x.png")]
    assert [(r.path, r.reason) for r in listing.rejects] == [("b.png", "missing_mask")]
    with pytest.raises(SourceError, match="--masks .* does not exist"):
        list_segmentation(str(src), str(tmp_path / "nope"), ("bg",), "auto")


@pytest.mark.parametrize(
    "text, name",
    [
        ("path,label\na.jpg,dog|cat\nb.jpg,cat\n", "l.csv"),
        ('{"path": "a.jpg", "label": ["dog", "cat"]}\n{"path": "b.jpg", "label": ["cat"]}\n', "l.jsonl"),
    ],
)
def test_multilabel_label_files(tmp_path, text, name):
    (tmp_path / name).write_text(text)
    listing = list_label_file(str(tmp_path), str(tmp_path / name))
    assert listing.task == "multilabel" and listing.classes == ("cat", "dog")
    assert [r.label for r in listing.refs] == ["cat|dog", "cat"]
    staged = multilabel_listing(listing, 0)
    assert [json.loads(r.extra)["l"] for r in staged.refs] == [[0, 1], [0]]
    assert {r.label for r in staged.refs} <= {"cat", "dog"} and all(r.key for r in staged.refs)


def test_a_single_label_file_is_unchanged(tmp_path):
    (tmp_path / "l.csv").write_text("path,label\na.jpg,dog\n")
    listing = list_label_file(str(tmp_path), str(tmp_path / "l.csv"))
    assert listing.task == "classification" and listing.refs[0].fields() == ["a.jpg", "dog", None]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"annotations": "a.json", "masks": "m"}, "pass one of them"),
        ({"bad_boxes": "maybe", "annotations": "a.json"}, "--bad-boxes must be one of"),
        ({"skip_empty": True}, "--skip-empty applies to detection"),
        ({"unannotated": "keep"}, "--unannotated applies to detection"),
    ],
)
def test_task_options_name_the_bad_value(kwargs, message):
    with pytest.raises(OptionsError, match=message):
        TaskOptions(**kwargs)


def _manifest(strata_a, strata_b, task="detection"):
    shard = {"file": "", "index": 0, "bytes": 1, "sha256": "x", "class_counts": {"cat": 0}}
    shards = []
    for i, strata in enumerate((strata_a, strata_b)):
        shards.append(
            dict(
                shard,
                file=f"train-0000{i}-of-00002.tfrecord",
                index=i,
                examples=sum(strata.values()),
                stratum_counts=strata,
            )
        )
    n = sum(s["examples"] for s in shards)
    return Manifest.from_json(
        {
            "format": "tfrecord-prep",
            "version": 1,
            "labels": ["cat"],
            "options": {},
            "task": task,
            "splits": {
                "train": {"examples": n, "bytes": 2, "num_shards": 2, "class_counts": {"cat": 0}, "shards": shards}
            },
            "inputs": {"found": n, "written": n, "rejected": 0, "capped": 0},
        }
    )


def test_strata_balance_rule():
    good = _manifest({"cat": 3, NO_STRATUM: 1}, {"cat": 2, NO_STRATUM: 2})
    assert strata_unbalanced(good) == [] and contradictions(good) == []
    bad = _manifest({"cat": 4, NO_STRATUM: 0}, {"cat": 1, NO_STRATUM: 3})
    problems = strata_unbalanced(bad)
    assert problems and all("stratum" in m for _, m in problems)
    wrong_sum = dataclasses.replace(
        good,
        splits={
            "train": dataclasses.replace(
                good.splits["train"],
                shards=(
                    dataclasses.replace(good.splits["train"].shards[0], examples=5),
                    good.splits["train"].shards[1],
                ),
            )
        },
    )
    assert any("stratum_counts sum" in m for m in contradictions(wrong_sum))


def test_an_images_stratum_is_its_rarest_label(tmp_path):
    src = tmp_path / "src"
    _files(src, "a.jpg", "b.jpg", "c.jpg", "d.jpg")
    ann = _coco(
        tmp_path,
        [(1, "a.jpg"), (2, "b.jpg"), (3, "c.jpg"), (4, "d.jpg")],
        [(1, 5, [0, 0, 2, 2]), (1, 9, [3, 3, 2, 2]), (2, 5, [0, 0, 2, 2]), (3, 5, [0, 0, 2, 2])],
    )
    listing = list_detection(str(src), TaskOptions(ann), None, "auto", 0)
    assert {r.path: r.label for r in listing.refs} == {
        "a.jpg": "dog",
        "b.jpg": "cat",
        "c.jpg": "cat",
        "d.jpg": NO_STRATUM,
    }


def test_kept_unannotated_images_get_ids_after_every_index_without_coco_ids(tmp_path):
    src = tmp_path / "src"
    _files(src, "a.jpg", "b.jpg", "c.jpg")
    boxes = tmp_path / "boxes.csv"
    boxes.write_text("path,label,xmin,ymin,xmax,ymax\na.jpg,cat,0,0,2,2\nb.jpg,dog,0,0,2,2\n")
    listing = list_detection(str(src), TaskOptions(str(boxes), unannotated="keep"), None, "auto", 0)
    ids = {r.path: json.loads(r.extra)["s"] for r in listing.refs}
    assert ids == {"a.jpg": "1", "b.jpg": "2", "c.jpg": "3"}


def test_segmentation_tries_a_file_of_any_extension_that_has_a_mask(tmp_path):
    src, masks = tmp_path / "src", tmp_path / "masks"
    _files(src, "a.jpg", "b.tga", "c", "notes.txt")
    _files(masks, "a.png", "b.png", "c.png")
    listing = list_segmentation(str(src), str(masks), ("bg", "fg"), "auto")
    assert [r.path for r in listing.refs] == ["a.jpg", "b.tga", "c"] and listing.rejects == ()


def test_a_total_tally_is_the_tallies_added_in_turn():
    tallies = [
        BoxTally(3, 2, 1, (("box_nan", 1),)),
        BoxTally(),
        BoxTally(5, 3, 0, (("box_degenerate", 1), ("image_rejected", 1))),
        BoxTally(1, 0, 0, (("box_nan", 1),)),
    ]
    want = BoxTally()
    for tally in tallies:
        want = want.plus(tally)
    assert (
        total_tally(tallies)
        == want
        == BoxTally(9, 5, 1, (("box_degenerate", 1), ("box_nan", 2), ("image_rejected", 1)))
    )
    assert total_tally([]) == BoxTally()
