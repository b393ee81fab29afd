"""The streamed COCO reader against the json.loads reader it replaced (tests/support/coco_loads.py):
the same annotations, problems and listing for every kind of bad annotation, in any order of the arrays,
with chunks and buckets cut anywhere; malformed files as one-line errors naming the file and position."""

import json
import math

import pytest

from prep.core.annotations import coco, coco_join, json_stream, read_annotations
from prep.core.annotations.model import ImageAnnotation, object_count
from prep.core.annotations.rows import ObjectStore, listing_extra, objects_of, objects_text, row_of, rows_of
from prep.core.config import TaskOptions
from prep.core.detection_inputs import _listing, list_detection
from prep.core.errors import SourceError
from tests.support import coco_loads


def crafted():
    """A document with every kind of annotation the reader rejects, and images with none."""
    nan, inf = float("nan"), float("inf")
    images = [
        {"id": 7, "file_name": "a.jpg", "width": 40, "height": 30},
        {"id": 9, "file_name": "sub/b.jpg", "width": 20, "height": 10},
        {"id": 11, "file_name": "empty.jpg", "width": 8, "height": 8},  # no annotations
        {"id": "s1", "file_name": "str id.png", "width": 0, "height": True},  # a str id, unusable sizes
        {"id": 13, "file_name": "../out.jpg"},  # outside SOURCE, with annotations
        {"id": 14, "file_name": "../out.jpg"},  # the same name again: two outside_source problems
        {"id": 15, "file_name": "c.jpg", "width": 5, "height": 5},
    ]
    anns = [
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
        {"id": 4, "image_id": 99, "category_id": 3, "bbox": [0, 0, 1, 1]},  # unknown image
        {"id": 5, "category_id": 3, "bbox": [0, 0, 1, 1]},  # no image_id
        {"id": 6, "image_id": None, "category_id": 3, "bbox": [0, 0, 1, 1]},
        {"id": 7, "image_id": True, "category_id": 3, "bbox": [0, 0, 1, 1]},
        {"id": 8, "image_id": [7], "category_id": 3, "bbox": [0, 0, 1, 1]},
        "not an object",
        {"id": 10, "image_id": 9, "category_id": 4, "bbox": [0, 0, 1, 1]},  # unknown category
        {"id": 11, "image_id": 9, "category_id": True, "bbox": [0, 0, 1, 1]},
        {"id": 12, "image_id": 9, "category_id": 3, "bbox": [0, 0, 1]},  # bad bboxes
        {"id": 13, "image_id": 9, "category_id": 3, "bbox": [0, "x", 1, 1]},
        {"id": 14, "image_id": 9, "category_id": 3},
        {"id": 15, "image_id": 9, "category_id": 3, "bbox": [0, 0, 1, 1], "segmentation": [[1, 2, 3]]},
        {"id": 16, "image_id": 9, "category_id": 3, "bbox": [0, 0, 1, 1], "segmentation": {"counts": [1]}},
        {"id": 17, "image_id": 9, "category_id": 3, "bbox": [0, 0, 1, 1], "segmentation": "rle?"},
        {
            "id": 18,
            "image_id": 9,
            "category_id": 3,
            "bbox": [0, 0, 1, 1],
            "segmentation": {"size": [10, 20], "counts": "PPYo0"},
        },  # compressed RLE
        {"id": 19, "image_id": 9.0, "category_id": 3.0, "bbox": ["1.5", 2, 3, 4]},  # float ids, a str number
        {"id": 20, "image_id": 9, "category_id": 3, "bbox": [nan, 1, inf, 2], "area": -inf},
        {"id": 21, "image_id": "s1", "category_id": 17, "bbox": [1, 1, 2, 2], "segmentation": []},
        {"id": 22, "image_id": 13, "category_id": 3, "bbox": [1, 1, 2, 2]},
        {"id": 23, "image_id": 13, "category_id": 3, "bbox": [1, 1, 2, 2]},
        {"id": 24, "image_id": 14, "category_id": 3, "bbox": [1, 1, 2, 2]},
        {"id": 25, "image_id": "7", "category_id": 3, "bbox": [1, 1, 2, 2]},  # "7" is not 7
        {"id": 26, "image_id": 9.5, "category_id": 3, "bbox": [1, 1, 2, 2]},
        {
            "id": 27,
            "image_id": 15,
            "category_id": 3,
            "bbox": [1, 1, 2, 2],
            "iscrowd": True,
            "segmentation": [[0, 0, 1, nan, 1, 1]],
        },
        {"id": "x", "image_id": 15, "category_id": 90, "bbox": [1e300, 1e-300, 2, 2], "area": "12"},
    ]
    cats = [{"id": 90, "name": "zebra"}, {"id": 3, "name": "cat"}, {"id": 17, "name": "dog é"}]
    return images, anns, cats


def write(tmp_path, order=("images", "annotations", "categories"), indent=None, name="instances.json"):
    images, anns, cats = crafted()
    parts = {"images": images, "annotations": anns, "categories": cats, "info": {"year": 2017, "NaN": "NaN"}}
    doc = {key: parts[key] for key in ("info", *order)}
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=indent, ensure_ascii=indent is None))
    return str(path)


def norm(x):
    """`x` with NaN as a string and dicts as sorted pairs: equal values compare equal, key order aside."""
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, dict):
        return ("dict", sorted((k, norm(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [norm(v) for v in x])
    return (type(x).__name__, x)


def same(a, b):
    assert norm(a) == norm(b)


@pytest.mark.parametrize(
    "order",
    [
        ("images", "annotations", "categories"),
        ("annotations", "images", "categories"),
        ("categories", "annotations", "images"),
    ],
)
@pytest.mark.parametrize("classes", [None, ("dog é", "cat", "horse")])
def test_same_annotations_and_problems_as_json_loads(tmp_path, order, classes):
    path = write(tmp_path, order, indent=1 if classes else None)
    got = read_annotations(str(tmp_path), path, classes=classes)
    same(got, coco_loads.read_coco(str(tmp_path), path, classes))
    reasons = {p.reason for p in got.problems}
    assert reasons >= {
        "unknown_image",
        "bad_annotation",
        "unknown_category",
        "bad_box",
        "bad_segmentation",
        "outside_source",
    }


def test_chunks_and_buckets_cut_anywhere(tmp_path, monkeypatch):
    path = write(tmp_path, ("annotations", "categories", "images"), indent=2)
    want = coco_loads.read_coco(str(tmp_path), path)
    for chunk in (1, 3, 7, 64):
        monkeypatch.setattr(json_stream, "CHUNK", chunk)
        monkeypatch.setattr(coco_join, "BUCKET_BYTES", 50)  # many buckets
        monkeypatch.setattr(coco_join, "BUFFER_BYTES", 300)  # appended to them several times
        same(read_annotations(str(tmp_path), path), want)
    assert coco_join.bucket_count(5000) > 10


def test_literals_are_rewritten_outside_strings_only(tmp_path, monkeypatch):
    text = '{"a": [NaN, "NaN", "x\\"NaN", "\\\\", -Infinity, {"Infinity": Infinity}], "b": ["\\u0041", 1e5, -0, 2.50]}'
    (tmp_path / "x.json").write_text(text)
    for chunk in (1, 2, 5, 1 << 20):
        monkeypatch.setattr(json_stream, "CHUNK", chunk)
        got: list = []
        json_stream.stream_arrays(str(tmp_path / "x.json"), ("a", "b"), lambda k, v, got=got: got.append((k, v)))
        want = json.loads(text)
        same(got, [("a", v) for v in want["a"]] + [("b", v) for v in want["b"]])
        assert [type(v) for _, v in got[-3:]] == [float, int, float]


def test_same_listing_as_from_json_loads(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for name in ("a.jpg", "sub/b.jpg", "empty.jpg", "c.jpg", "stray.png"):
        (src / name).write_bytes(b"x")
    path = write(tmp_path)
    for unannotated in ("skip", "keep"):
        options = TaskOptions(annotations=path, unannotated=unannotated)
        got = list_detection(str(src), options, None, "auto", 5)
        files = ["a.jpg", "c.jpg", "empty.jpg", "stray.png", "sub/b.jpg"]
        want = _listing(str(src), rows_of(coco_loads.read_coco(str(src), path)), files, unannotated, "auto", 5, None)
        same(got, want)
        objects = sum(object_count(json.loads(r.extra)["a"]) for r in got.refs)
        assert objects + got.boxes.read == len(crafted()[1])  # boxes read = listed + dropped so far


def test_listing_extra_is_the_json_of_the_annotation(tmp_path):
    found = coco_loads.read_coco(str(tmp_path), write(tmp_path))
    store = rows_of(found).store
    forms = set()
    for i, ann in enumerate(found.images):
        for variant in (ann, ann._replace(split="train", normalized=True, width=None)):
            made = variant.to_json()
            objects = json.loads(objects_text(made.pop("o")))  # columns ("c") unless masks or none
            made["o" if isinstance(objects, list) else "c"] = objects
            forms.add(tuple(sorted(made)))
            want = json.dumps({"a": made, "s": str(i)}, separators=(",", ":"), sort_keys=True)
            got = listing_extra(row_of(variant, store), store, str(i))
            assert got == want
            assert ImageAnnotation.from_json(json.loads(got)["a"]).to_json() == variant.to_json()  # NaN as text
    assert {"c" in form for form in forms} == {True, False}  # both forms met


@pytest.mark.parametrize(
    "items",
    [
        [{"i": 0, "l": "a", "b": [1.0, 2.0, 3.0, 4.0]}, {"i": 1, "l": "b", "b": [0.0, 0.0, 1.0, 1.0]}],
        [{"i": 0, "l": "a", "b": [1.0, 2.0, 3.0, 4.0], "a": 4.0}, {"i": 2, "l": "b", "b": ["nan", 0.0, 1.0, 1.0]}],
        [{"i": 1, "l": "a", "b": [1.0, 2.0, 3.0, 4.0], "f": 5}, {"i": 3, "l": "a", "b": [0, 0, 1, 1], "a": "inf"}],
    ],
)
def test_objects_as_columns_read_back_as_the_objects(items):
    text = objects_text(items)
    assert text.startswith("{") and objects_of(text) == items
    assert object_count({"c": json.loads(text)}) == len(items)
    assert json.loads(text)["b"][:4] == items[0]["b"]


def test_objects_with_masks_or_none_stay_objects():
    masked = [{"i": 0, "l": "a", "b": [1.0, 2.0, 3.0, 4.0]}, {"i": 1, "l": "a", "b": [1, 2, 3, 4], "p": [[1, 2]]}]
    assert objects_text(masked) == json.dumps(masked, separators=(",", ":"), sort_keys=True)
    assert objects_text([]) == "[]" and objects_of("[]") == []


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"images": [{"id": 1, "file_name": "a"},\n  {"id": 2 "file_name": "b"}]}',
            "line 2 column 22",
        ),  # yajl stops after the token it cannot take
        ('{"images": [', "premature EOF at line 1 column 13"),
        ('\ufeff{"images": [1,\n2,\n]}', "line 3 column 1"),
        ('{"categories": [{"id": 1, "name": "é"}], x}', "line 1 column 42"),
    ],
)
def test_malformed_json_names_the_file_and_position(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError) as err:
        read_annotations(str(tmp_path), str(path))
    assert str(path) in str(err.value) and "not JSON" in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_not_utf8_is_said(tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"images": [{"id": 1, "file_name": "\xff.jpg"}]}')
    with pytest.raises(SourceError, match="is not UTF-8 text"):
        read_annotations(str(tmp_path), str(path))


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"images": [], "annotations": [], "categories": {}}, "'categories' is not a list"),
        ({"images": [{"id": 1}], "annotations": 5}, "no 'categories' list"),  # categories first, as before
        ({"images": [{"id": 1}], "annotations": 5, "categories": []}, "images[0] has no 'id'"),
        ({"images": [], "categories": []}, "no 'annotations' list"),
        ({"images": None, "annotations": [], "categories": []}, "no 'images' list"),
        ({"annotations": [{"image_id": 1}], "images": [], "categories": [], "images": 3}, "'images' is not a list"),  # noqa: F601
    ],
)
def test_faults_come_in_the_order_json_loads_gave(tmp_path, doc, message):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SourceError) as new:
        read_annotations(str(tmp_path), str(path))
    with pytest.raises(SourceError) as old:
        coco_loads.read_coco(str(tmp_path), str(path))
    assert message in str(new.value) and str(new.value) == str(old.value)


def test_nan_in_polygons_round_trips(tmp_path):
    got = read_annotations(str(tmp_path), write(tmp_path))
    c = next(a for a in got.images if a.path == "c.jpg")
    assert math.isnan(c.objects[0].polygons[0][3]) and c.objects[1].area == 12.0


def test_a_record_kept_in_memory_is_the_line_read_back():
    """A one-bucket file keeps `spill_record`s in memory: each must give what `read_line` reads of its line,
    its head as read back and its object (a dict, not the line's text) the same row, text and problems."""
    odd = {"id": {"b": 1, "a": (2,)}, "image_id": 7, "bbox": [1, 2, 3, 4]}  # a head JSON changes (keys sorted)
    names = {17: "cat", 90: "d\u00f6g", 3: "x"}
    entry = ("a.jpg", "a.jpg", 10, 10, 0)
    objects = 0
    for position, ann in enumerate([*crafted()[1], odd]):
        line = coco_join.spill_line("x.json", position, ann, coco.shape)
        record = coco_join.spill_record("x.json", position, ann, coco.shape)
        held = coco_join.Spill("unused", 1, "x.json")  # one bucket: `add` keeps the record (its own fast path)
        held.add(position, ann, coco.shape)
        if isinstance(line, coco_join.Problem):
            assert record == line and held.problems == [line]
            continue
        assert repr(held._records) == repr([record[1]]) and not held.problems  # repr: NaN equals itself
        assert not isinstance(record, coco_join.Problem)
        read = coco_join.read_line(line[1])
        assert line[0] == record[0] and read[:4] == record[1][:4]
        made = []
        for one in (read, record[1]):
            store, rows, problems = ObjectStore(), [], []
            coco_join.image_row(7, entry, [one], names, store, rows, problems)
            made.append((rows, problems, [store.get(r.at) for r in rows]))
        objects += bool(made[0][0][0].labels)
        assert made[0] == made[1]
    assert objects >= 10


@pytest.mark.parametrize("source", ["/data/src", "rel/src", "s3://bucket/src", "/"])
def test_an_image_path_is_what_normalize_path_gives(source):
    from prep.core.annotations.files import image_path
    from prep.core.label_file import normalize_path

    names = ["a.jpg", "sub/b.jpg", ".hidden/c.jpg", "..d.jpg", "a/../b.jpg", "./a.jpg", "a//b.jpg", "a/", ".", ".."]
    names += ["../out.jpg", "/abs/a.jpg", "src/../src/a.jpg", "../src/a.jpg", "s3://bucket/src/x.jpg", "", "a/./b"]
    for name in names:
        assert image_path(source, name) == normalize_path(source, name), name
