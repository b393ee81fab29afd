"""A small COCO file is read in one pass (`json_stream.read_arrays`, `coco.scan(whole=True)`): the same items
and counts as the pass a key (`iter_arrays`), and the same listing, on well-formed and on odd files."""

from __future__ import annotations

import json

import pytest

from prep.core.annotations import coco, json_stream
from prep.core.annotations.json_stream import read_arrays
from prep.core.errors import SourceError

CATS = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
IMAGES = [{"id": 1, "file_name": "x.png", "width": 8, "height": 8}, {"id": 2, "file_name": "y.png"}]
ANNS = [
    {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 2, 2], "area": 4.5},
    {"id": 2, "image_id": 2, "category_id": 2, "bbox": [0.5, 1, 2, 3], "iscrowd": 1},
    {"id": 3, "image_id": 9, "category_id": 1, "bbox": [1, 1, 2, 2]},
]

TEXTS = {
    "plain": json.dumps({"images": IMAGES, "annotations": ANNS, "categories": CATS}),
    "annotations first": json.dumps({"annotations": ANNS, "info": {"x": [1]}, "categories": CATS, "images": IMAGES}),
    "key twice": (
        f'{{"images": {json.dumps(IMAGES)}, "annotations": {json.dumps(ANNS[:1])}, '
        f'"categories": {json.dumps(CATS)}, "annotations": {json.dumps(ANNS[1:])}}}'
    ),
    "NaN": json.dumps({"images": IMAGES, "annotations": [{**ANNS[0], "area": float("nan")}], "categories": CATS}),
    "images not a list": json.dumps({"images": {"item": IMAGES[0]}, "annotations": ANNS, "categories": CATS}),
    "no images": json.dumps({"annotations": ANNS, "categories": CATS}),
    "empty": json.dumps({"images": [], "annotations": [], "categories": CATS}),
    "a top-level list": json.dumps([{"images": IMAGES}]),
    "bom": "\ufeff" + json.dumps({"images": IMAGES, "annotations": ANNS, "categories": CATS}),
    "not JSON": '{"images": [1, 2,, "annotations": []}',
    # what json.loads and yajl read apart, or might: `json_stream._loaded` leaves these to ijson
    "int past 64 bits": json.dumps({"images": IMAGES, "annotations": [{**ANNS[0], "id": 10**20}], "categories": CATS}),
    "float past 1e308": json.dumps({"images": IMAGES, "annotations": ANNS, "categories": CATS}).replace("4.5", "4e999"),
    "key twice, escaped": json.dumps({"images": IMAGES, "annotations": ANNS, "categories": CATS})[:-1]
    + ', "\\u0061nnotations": []}',
    "escaped name": json.dumps({"images": IMAGES, "annotations": ANNS, "categories": [{"id": 1, "name": "d\u00f6g"}]}),
    "raw UTF-8 name": json.dumps(
        {"images": IMAGES, "annotations": ANNS, "categories": [{"id": 1, "name": "d\u00f6g"}]}, ensure_ascii=False
    ),
    "trailing text": json.dumps({"images": IMAGES, "annotations": ANNS, "categories": CATS}) + " x",
    "a lone surrogate": json.dumps(
        {"images": IMAGES, "annotations": ANNS, "categories": [{"id": 1, "name": "\ud800"}]}
    ),
}


def _items(path, whole):
    counts: dict[str, int] = {}
    try:
        got = list(coco.scan(path, counts, whole=whole))
    except SourceError as exc:
        return "error", str(exc)
    return sorted(map(repr, got)), counts


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_one_pass_gives_what_a_pass_a_key_gives(tmp_path, name):
    path = tmp_path / "instances.json"
    path.write_text(TEXTS[name], encoding="utf-8")
    assert _items(str(path), True) == _items(str(path), False)


@pytest.mark.parametrize(
    ("name", "held"),
    [("plain", True), ("key twice", True), ("NaN", False), ("images not a list", False), ("not JSON", False)],
)
def test_one_pass_steps_aside_when_it_cannot_be_sure(tmp_path, name, held):
    path = tmp_path / "instances.json"
    path.write_text(TEXTS[name], encoding="utf-8")
    assert (read_arrays(str(path), coco.SECTIONS) is not None) is held


@pytest.mark.parametrize("name", ["plain", "key twice", "annotations first"])
def test_the_listing_is_the_same_read_either_way(tmp_path, monkeypatch, name):
    (tmp_path / "src").mkdir()
    path = tmp_path / "instances.json"
    path.write_text(TEXTS[name], encoding="utf-8")

    def rows(spilled):
        if spilled:  # two buckets: the file streamed a key at a time, its annotations spilled
            monkeypatch.setattr(coco, "bucket_count", lambda size: 2)
        folder = tmp_path / f"work-{spilled}"
        folder.mkdir()
        found = coco.read_coco_rows(str(tmp_path / "src"), str(path), None, str(folder))
        try:
            return [(r, found.store.get(r.at)) for r in found.rows], found.categories, found.problems
        finally:
            found.store.close()

    assert rows(False) == rows(True)


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_json_loads_reads_only_what_it_reads_as_ijson_does(tmp_path, monkeypatch, name):
    """`read_arrays` takes `json.loads`' items (`_loaded`) for a plain file and leaves every doubtful one to ijson."""
    data = TEXTS[name].encode("utf-8", "surrogatepass")
    loaded = json_stream._loaded(data, coco.SECTIONS)
    plain = ("plain", "annotations first", "empty", "no images", "bom", "raw UTF-8 name")
    assert (loaded is not None) is (name in plain)
    if loaded is not None:
        path = tmp_path / "instances.json"
        path.write_bytes(data)
        monkeypatch.setattr(json_stream, "_loaded", lambda data, keys: None)  # ijson's one pass
        assert read_arrays(str(path), coco.SECTIONS) == loaded


def test_text_not_utf8_is_left_to_ijson():
    data = json.dumps({"images": [{"id": 1, "file_name": "\u00e9.png"}], "annotations": [], "categories": CATS})
    assert json_stream._loaded(data.encode("utf-8"), coco.SECTIONS) is None  # an escape
    assert json_stream._loaded(data.replace("\\u00e9", "\u00e9").encode("latin-1"), coco.SECTIONS) is None
