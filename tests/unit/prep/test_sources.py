"""Listing inputs: class folders, split folders, label files, and what gets rejected before reading."""

import json

import pytest

from prep.core.errors import SourceError
from prep.core.label_file import list_label_file, normalize_path
from prep.core.listing import Reject, list_folders, read_class_file
from tests.support.imagegen import image_bytes, write_class_tree


def test_class_folders(tmp_path):
    write_class_tree(tmp_path, {"dog": 3, "cat": 2})
    (tmp_path / "README.txt").write_text("not in a class")
    (tmp_path / "dog" / ".DS_Store").write_bytes(b"\0")
    listing = list_folders(str(tmp_path))
    assert listing.classes == ("cat", "dog")
    assert [r.path for r in listing.refs][:2] == ["cat/cat_0000.jpg", "cat/cat_0001.jpg"]
    assert {r.label for r in listing.refs} == {"cat", "dog"}
    assert all(r.split is None for r in listing.refs)
    assert {(r.path, r.reason) for r in listing.rejects} == {("README.txt", "no_class"), ("dog/.DS_Store", "hidden")}
    assert listing.found == 7


def test_split_folders_detected_and_kept(tmp_path):
    write_class_tree(tmp_path / "train", {"a": 2, "b": 2})
    write_class_tree(tmp_path / "val", {"a": 1, "b": 1})
    listing = list_folders(str(tmp_path))
    assert {(r.split, r.label) for r in listing.refs} == {("train", "a"), ("train", "b"), ("val", "a"), ("val", "b")}
    assert listing.classes == ("a", "b")
    # forced classes layout sees "train" and "val" as classes
    assert list_folders(str(tmp_path), layout="classes").classes == ("train", "val")


def test_splits_that_differ_only_in_case_are_refused(tmp_path):
    # Their shard files (Train-00000-of-00001.tfrecord, train-...) are one file on macOS and Windows.
    write_class_tree(tmp_path / "src" / "train", {"a": 1})
    write_class_tree(tmp_path / "src" / "Train", {"a": 1})
    with pytest.raises(SourceError, match="splits 'Train' and 'train' differ only in case"):
        list_folders(str(tmp_path / "src"), layout="splits")
    labels = _jsonl(
        tmp_path,
        ['{"path": "x.jpg", "label": "a", "split": "test"}', '{"path": "y.jpg", "label": "a", "split": "TEST"}'],
    )
    with pytest.raises(SourceError, match="splits 'TEST' and 'test' differ only in case"):
        list_label_file(str(tmp_path), labels)


def test_classes_file_fixes_order_and_rejects_unknown(tmp_path):
    write_class_tree(tmp_path / "src", {"a": 1, "b": 1, "c": 1})
    classes = tmp_path / "classes.txt"
    classes.write_text("b\na\n")
    listing = list_folders(str(tmp_path / "src"), classes=read_class_file(str(classes)))
    assert listing.classes == ("b", "a")
    assert [(r.path, r.reason) for r in listing.rejects] == [("c/c_0000.jpg", "unknown_label")]


def test_an_empty_class_folder_is_a_class_without_inputs_and_all_empty_is_an_error(tmp_path):
    # What becomes of a class with no example is --empty-classes's to say (tests/test_empty_classes.py).
    write_class_tree(tmp_path / "src", {"a": 2})
    (tmp_path / "src" / "empty").mkdir()
    listing = list_folders(str(tmp_path / "src"))
    assert listing.classes == ("a", "empty") and {r.label for r in listing.refs} == {"a"}
    (tmp_path / "none" / "x").mkdir(parents=True)
    (tmp_path / "none" / "y").mkdir()
    with pytest.raises(SourceError, match=r"class 'x' has no images in .*none \(and 1 more empty\)"):
        list_folders(str(tmp_path / "none"))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "f.txt").write_text("x") and p / "f.txt", "is not a folder"),
        (lambda p: p, "has no class folders"),
    ],
)
def test_bad_source(tmp_path, make, message):
    with pytest.raises(SourceError, match=message):
        list_folders(str(make(tmp_path)))


def test_symlink_loop_and_broken_link(tmp_path):
    write_class_tree(tmp_path, {"a": 1})
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "broken.jpg").symlink_to(tmp_path / "nowhere.jpg")
    listing = list_folders(str(tmp_path))
    reasons = {r.path: r.reason for r in listing.rejects}
    assert reasons == {"a/loop": "symlink_loop"}
    assert "a/broken.jpg" in [r.path for r in listing.refs]  # read later, rejected as broken_symlink


def test_a_symlinked_folder_does_not_take_files_from_their_real_class(tmp_path):
    # "dog" sorts after "cat", so a walk that went depth-first in name order
    # reached cat/sub through dog/alias first and labelled its images dog.
    root = tmp_path / "src"
    for folder in ("src/cat", "src/cat/sub", "src/dog", "elsewhere"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "0.jpg").write_bytes(image_bytes())
    (root / "dog" / "alias").symlink_to(root / "cat" / "sub")
    (root / "dog" / "other").symlink_to(tmp_path / "elsewhere")  # a folder outside SOURCE: followed
    listing = list_folders(str(root))
    assert {r.path: r.label for r in listing.refs} == {
        "cat/0.jpg": "cat",
        "cat/sub/0.jpg": "cat",
        "dog/0.jpg": "dog",
        "dog/other/0.jpg": "dog",
    }
    assert [(r.path, r.reason) for r in listing.rejects if r.reason == "symlink_loop"] == [
        ("dog/alias", "symlink_loop")
    ]


@pytest.mark.parametrize("ext, sep", [(".csv", ","), (".tsv", "\t")])
def test_label_file_csv_tsv(tmp_path, ext, sep):
    (tmp_path / "img").mkdir()
    for name in ("x.jpg", "y.jpg", "z.jpg"):
        (tmp_path / "img" / name).write_bytes(image_bytes())
    rows = [
        "path,label,split",
        "img/x.jpg,cat,train",
        "img/y.jpg,dog,test",
        "img/x.jpg,dog,train",
        "../etc/passwd,cat,train",
        "img/z.jpg,,train",
        "img/q.jpg,cat,train,extra",
    ]
    labels = tmp_path / f"labels{ext}"
    labels.write_text("\n".join(r.replace(",", sep) for r in rows) + "\n")
    listing = list_label_file(str(tmp_path), str(labels))
    assert [(r.path, r.label, r.split) for r in listing.refs] == [
        ("img/x.jpg", "cat", "train"),
        ("img/y.jpg", "dog", "test"),
    ]
    assert sorted(r.reason for r in listing.rejects) == ["bad_row", "duplicate", "empty_label", "outside_source"]
    assert listing.found == 6


def test_label_file_jsonl(tmp_path):
    lines = [{"path": "a.jpg", "label": "cat"}, {"path": "b.jpg", "label": "dog"}, "not json{"]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines))
    listing = list_label_file(str(tmp_path), str(labels))
    assert [r.label for r in listing.refs] == ["cat", "dog"]
    assert [r.reason for r in listing.rejects] == ["bad_row"]


def _jsonl(tmp_path, lines: list[str]) -> str:
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(lines) + "\n")
    return str(labels)


def test_jsonl_null_is_an_empty_value_and_objects_are_bad_rows(tmp_path):
    # A list label makes the file multi-label (tests/e2e/test_multilabel_convert.py); an object is a bad row.
    listing = list_label_file(
        str(tmp_path),
        _jsonl(
            tmp_path,
            [
                '{"path": "a.jpg", "label": "cat"}',
                '{"path": "b.jpg", "label": null}',
                '{"path": null, "label": "cat"}',
                '{"path": "c.jpg", "label": {"cat": 1}}',
                '{"path": "d.jpg", "label": 3}',
                '{"path": "e.jpg", "label": "dog", "split": null}',
            ],
        ),
    )
    assert [(r.path, r.label, r.split) for r in listing.refs] == [
        ("a.jpg", "cat", None),
        ("d.jpg", "3", None),
        ("e.jpg", "dog", None),
    ]
    assert sorted((r.path, r.reason, r.detail) for r in listing.rejects) == [
        ("b.jpg", "empty_label", "line 2: label is empty"),
        ("labels.jsonl:3", "bad_row", "empty path"),
        ("labels.jsonl:4", "bad_row", "'label' is a JSON object, not text"),
    ]
    assert listing.classes == ("3", "cat", "dog")  # no class called "null"


def test_jsonl_null_split_on_some_rows_is_a_missing_split(tmp_path):
    labels = _jsonl(
        tmp_path,
        ['{"path": "a.jpg", "label": "cat", "split": "train"}', '{"path": "b.jpg", "label": "cat", "split": null}'],
    )
    with pytest.raises(SourceError, match="gives a split for some rows but not for others"):
        list_label_file(str(tmp_path), labels)


def test_jsonl_text_no_file_name_can_hold_is_a_bad_row(tmp_path):
    listing = list_label_file(
        str(tmp_path),
        _jsonl(
            tmp_path,
            [
                '{"path": "a.jpg", "label": "cat"}',
                '{"path": "b\\u0000.jpg", "label": "cat"}',
                '{"path": "c\\ud800.jpg", "label": "cat"}',
                '{"path": "d.jpg", "label": "cat\\ud800"}',
                '{"path": "e\\udcff.jpg", "label": "cat"}',
            ],
        ),
    )
    # \udcff is how Python spells the byte 0xff of a file name that is not UTF-8: kept.
    assert [r.path for r in listing.refs] == ["a.jpg", "e\udcff.jpg"]
    assert sorted((r.path, r.detail) for r in listing.rejects) == [
        ("labels.jsonl:2", "path contains a NUL character"),
        ("labels.jsonl:3", "path holds a lone surrogate ('c\\ud800.jpg'), not text"),
        ("labels.jsonl:4", "label holds a lone surrogate ('cat\\ud800'), not text"),
    ]


def test_two_spellings_of_one_file_name_are_one_input_and_a_duplicate(tmp_path):
    # "\udcc3\udca9" spells the bytes of "é" one by one, as Python writes undecodable names:
    # the same file, so the second row is a duplicate, not a second example.
    listing = list_label_file(
        str(tmp_path),
        _jsonl(
            tmp_path,
            [
                '{"path": "a/\\u00e9.png", "label": "cat"}',
                '{"path": "a/\\udcc3\\udca9.png", "label": "cat"}',
                '{"path": "a/\\udcff.png", "label": "cat"}',
            ],
        ),
    )
    assert [r.path for r in listing.refs] == ["a/é.png", "a/\udcff.png"]
    assert [(r.path, r.reason) for r in listing.rejects] == [("a/é.png", "duplicate")]


def test_csv_paths_are_kept_as_written_but_for_spaces_after_the_comma(tmp_path):
    # "x.png " and "x.png" are two files: stripping the first would label x.png twice.
    labels = tmp_path / "labels.csv"
    labels.write_text('path,label\n"x.png ",cat\nx.png,dog\nlabel_first.png, cat\n')
    listing = list_label_file(str(tmp_path), str(labels))
    assert [(r.path, r.label) for r in listing.refs] == [
        ("label_first.png", "cat"),
        ("x.png", "dog"),
        ("x.png ", "cat"),
    ]
    assert listing.rejects == ()


def test_csv_with_a_byte_order_mark(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_bytes("\ufeffpath,label\na.jpg,cat\n".encode("utf-8"))
    assert [(r.path, r.label) for r in list_label_file(str(tmp_path), str(labels)).refs] == [("a.jpg", "cat")]


@pytest.mark.parametrize(
    "content, message",
    [
        ("file,label\na.jpg,cat\n", "has no 'path' column"),
        ("path,class\na.jpg,cat\n", "has no 'label' column"),
        ("", "is empty"),
        ("path,label,split\na.jpg,cat,train\nb.jpg,dog,\n", "gives a split for some rows but not for others"),
    ],
)
def test_label_file_errors(tmp_path, content, message):
    labels = tmp_path / "labels.csv"
    labels.write_text(content)
    with pytest.raises(SourceError, match=message):
        list_label_file(str(tmp_path), str(labels))


@pytest.mark.parametrize(
    "path, inside, outside_allowed",
    [
        ("a/x.jpg", "a/x.jpg", "a/x.jpg"),
        ("./a//x.jpg", "a/x.jpg", "a/x.jpg"),
        ("/data/src/a/x.jpg", "a/x.jpg", "a/x.jpg"),
        ("../src/a/x.jpg", "a/x.jpg", "a/x.jpg"),  # leaves SOURCE and comes back
        ("../x.jpg", None, "../x.jpg"),
        ("a/../../other/x.jpg", None, "../other/x.jpg"),
        ("/elsewhere/./x.jpg", None, "/elsewhere/x.jpg"),
        ("/data/srcfoo/x.jpg", None, "/data/srcfoo/x.jpg"),  # a sibling whose name starts like SOURCE
        (".", None, None),
    ],
)
def test_normalize_path(path, inside, outside_allowed):
    assert normalize_path("/data/src", path) == inside
    assert normalize_path("/data/src", path, allow_outside=True) == outside_allowed


def test_normalize_remote_paths():
    assert normalize_path("gs://b/src", "gs://b/src/a/x.jpg") == "a/x.jpg"
    assert normalize_path("gs://b/src", "gs://b/other/x.jpg") is None
    assert normalize_path("gs://b/src", "gs://b/other/x.jpg", allow_outside=True) == "gs://b/other/x.jpg"
    assert normalize_path("gs://b/src", "../x.jpg", allow_outside=True) == "../x.jpg"


def test_rejects_of_non_utf8_names_stay_valid_utf8_and_keep_the_bytes():
    name = b"a/caf\xe9.jpg".decode("utf-8", "surrogateescape")
    assert Reject(name, "undecodable", "x").to_json() == {
        "path": "a/caf\\xe9.jpg",
        "reason": "undecodable",
        "detail": "x",
        "path_hex": b"a/caf\xe9.jpg".hex(),
    }
    assert Reject("a/café.jpg", "empty", "x").to_json() == {"path": "a/café.jpg", "reason": "empty", "detail": "x"}


@pytest.mark.parametrize("name", ["test\n", "a b", "", "trainé", "x/y"])
def test_split_names_are_letters_digits_or_underscore(name):
    from prep.core.naming import check_split_name

    with pytest.raises(ValueError, match="must be letters, digits or '_'"):
        check_split_name(name)
    check_split_name("validation_2")


def test_classes_file_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "classes.txt"
    path.write_bytes("\ufeffcat\ndog\n".encode("utf-8"))
    assert read_class_file(str(path)) == ("cat", "dog")
