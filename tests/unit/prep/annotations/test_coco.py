"""COCO reader: ids, boxes, shapes, every unusable annotation with its reason, malformed files."""

import json
import math
import pickle

import pytest

from prep.core.annotations import ImageAnnotation, read_annotations
from prep.core.errors import SourceError


def write(tmp_path, doc, name="instances.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def doc(**changes):
    base = {
        "images": [
            {"id": 7, "file_name": "a.jpg", "width": 40, "height": 30},
            {"id": 9, "file_name": "sub/b.jpg", "width": 20, "height": 10},
            {"id": 11, "file_name": "empty.jpg", "width": 8, "height": 8},
        ],
        "categories": [{"id": 90, "name": "zebra"}, {"id": 3, "name": "cat"}, {"id": 17, "name": "dog"}],
        "annotations": [
            {
                "id": 1,
                "image_id": 7,
                "category_id": 17,
                "bbox": [1, 2, 10, 5],
                "area": 50,
                "iscrowd": 0,
                "segmentation": [[1, 2, 11, 2, 11, 7, 1, 7]],
            },
            {
                "id": 2,
                "image_id": 7,
                "category_id": 90,
                "bbox": [0, 0, 4, 4],
                "iscrowd": 1,
                "segmentation": {"size": [30, 40], "counts": [0, 4, 26, 4, 1166]},
            },
            {"id": 3, "image_id": 9, "category_id": 3, "bbox": [2.5, 1.5, 3, 2]},
        ],
    }
    base.update(changes)
    return base


def test_categories_ids_boxes_and_shapes(tmp_path):
    got = read_annotations(str(tmp_path), write(tmp_path, doc()))
    assert [(c.id, c.name, c.source_id) for c in got.categories] == [(1, "cat", 3), (2, "dog", 17), (3, "zebra", 90)]
    assert [i.path for i in got.images] == ["a.jpg", "empty.jpg", "sub/b.jpg"]
    a, empty, b = got.images
    assert (a.width, a.height, a.source_id, a.normalized) == (40, 30, 7, False)
    assert empty.objects == () and empty.source_id == 11
    dog, zebra = a.objects
    assert (dog.index, dog.label, dog.box, dog.crowd, dog.area) == (0, "dog", (1.0, 2.0, 11.0, 7.0), False, 50.0)
    assert dog.polygons == ((1.0, 2.0, 11.0, 2.0, 11.0, 7.0, 1.0, 7.0),)
    assert (zebra.index, zebra.crowd, zebra.rle["size"]) == (1, True, [30, 40])
    assert b.objects[0].box == (2.5, 1.5, 5.5, 3.5)
    assert got.problems == ()


def test_detected_from_json_suffix_and_classes_restrict(tmp_path):
    got = read_annotations(str(tmp_path), write(tmp_path, doc()), classes=("dog", "cat", "horse"))
    assert [(c.id, c.name, c.source_id) for c in got.categories] == [(1, "dog", 17), (2, "cat", 3), (3, "horse", None)]
    assert [(p.path, p.reason, p.box) for p in got.problems] == [("a.jpg", "unknown_class", 1)]


@pytest.mark.parametrize(
    "annotation, reason, where",
    [
        ({"id": 5, "image_id": 99, "category_id": 3, "bbox": [0, 0, 1, 1]}, "unknown_image", ("instances.json", 3)),
        ({"id": 5, "category_id": 3, "bbox": [0, 0, 1, 1]}, "bad_annotation", ("instances.json", 3)),
        ({"id": 5, "image_id": 9, "category_id": 4, "bbox": [0, 0, 1, 1]}, "unknown_category", ("sub/b.jpg", 1)),
        ({"id": 5, "image_id": 9, "category_id": 3, "bbox": [0, 0, 1]}, "bad_box", ("sub/b.jpg", 1)),
        ({"id": 5, "image_id": 9, "category_id": 3, "bbox": [0, "x", 1, 1]}, "bad_box", ("sub/b.jpg", 1)),
        ({"id": 5, "image_id": 9, "category_id": 3}, "bad_box", ("sub/b.jpg", 1)),
        (
            {"id": 5, "image_id": 9, "category_id": 3, "bbox": [0, 0, 1, 1], "segmentation": [[1, 2, 3]]},
            "bad_segmentation",
            ("sub/b.jpg", 1),
        ),
        (
            {"id": 5, "image_id": 9, "category_id": 3, "bbox": [0, 0, 1, 1], "segmentation": {"counts": [1]}},
            "bad_segmentation",
            ("sub/b.jpg", 1),
        ),
    ],
)
def test_unusable_annotation_has_its_reason(tmp_path, annotation, reason, where):
    d = doc()
    d["annotations"].append(annotation)
    got = read_annotations(str(tmp_path), write(tmp_path, d))
    assert [(p.path, p.box, p.reason) for p in got.problems] == [(*where, reason)]
    assert str(annotation["id"]) in got.problems[0].detail
    # boxes reconcile: every annotation is an object or a problem
    assert sum(len(i.objects) for i in got.images) + len(got.problems) == len(d["annotations"])


def test_image_outside_source_is_a_problem(tmp_path):
    d = doc()
    d["images"].append({"id": 12, "file_name": "../x.jpg", "width": 5, "height": 5})
    got = read_annotations(str(tmp_path), write(tmp_path, d))
    assert [(p.path, p.reason, p.box) for p in got.problems] == [("../x.jpg", "outside_source", None)]


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not JSON"),
        ("[]", "not a JSON object"),
        (json.dumps({"categories": [], "annotations": []}), "no 'images' list"),
        (json.dumps(doc(annotations={})), "'annotations' is not a list"),
        (json.dumps(doc(categories=[{"id": "3", "name": "cat"}])), "categories[0] has no integer 'id'"),
        (
            json.dumps(doc(categories=[{"id": 3, "name": "cat"}, {"id": 3, "name": "dog"}])),
            "category id 3 is given twice",
        ),
        (json.dumps(doc(categories=[{"id": 3, "name": "cat"}, {"id": 4, "name": "cat"}])), "name 'cat' is given twice"),
        (json.dumps(doc(images=[{"id": 1}])), "images[0] has no 'id' and non-empty 'file_name'"),
        (
            json.dumps(doc(images=[{"id": 1, "file_name": "a"}, {"id": 1, "file_name": "b"}])),
            "image id 1 is given twice",
        ),
        (json.dumps(doc(images=[{"id": 1, "file_name": "a"}, {"id": 2, "file_name": "./a"}])), "both name 'a'"),
    ],
)
def test_malformed_file_is_a_one_line_source_error(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SourceError) as err:
        read_annotations(str(tmp_path), path)
    assert message in str(err.value) and path in str(err.value) and "\n" not in str(err.value)


def test_missing_file_is_a_source_error(tmp_path):
    for fmt in (None, "coco"):
        with pytest.raises(SourceError, match="cannot read COCO annotations .*nope.json: No such file"):
            read_annotations(str(tmp_path), str(tmp_path / "nope.json"), fmt=fmt)
    with pytest.raises(SourceError, match="does not exist"):
        read_annotations(str(tmp_path), str(tmp_path / "nope"))


def test_json_form_and_pickle_round_trip(tmp_path):
    d = doc()
    d["annotations"].append({"id": 8, "image_id": 9, "category_id": 3, "bbox": [float("nan"), 0, 1, float("inf")]})
    got = read_annotations(str(tmp_path), write(tmp_path, d))
    for image in got.images:
        text = json.dumps(image.to_json(), allow_nan=False)
        back = ImageAnnotation.from_json(json.loads(text))
        assert repr(back) == repr(image)
        assert pickle.loads(pickle.dumps(image)) == image or math.isnan(image.objects[-1].box[0])
