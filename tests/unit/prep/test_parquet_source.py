"""Listing Parquet and Arrow tables: columns found from Hugging Face metadata, types and names, or named;
labels (ClassLabel names, -1, null, strings, --classes); splits from files and a split column; damage;
a row read back by its row group."""

import pytest

from prep.core.config import TableColumns
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from prep.core.inputs import list_inputs
from prep.core.sources import parquet, table_files
from tests.support.imagegen import image_bytes
from tests.support.table_data import CLASSES, damage_row_group, hf_rows, write_hub, write_plain


def _list(root, files=None, classes=None, columns=None, layout="auto"):
    columns = columns if columns is not None else TableColumns()
    files = files if files is not None else parquet.local_tables(str(root))
    return parquet.list_tables(str(root), files, layout, classes, columns)


def test_a_hugging_face_export_gives_class_label_names_and_splits_from_file_names(tmp_path):
    rows = hf_rows(5)
    rows["label"][1] = -1  # Hugging Face's "no label" (test splits)
    rows["label"][2] = None
    write_hub(tmp_path, {"data/train-00000-of-00001.parquet": rows, "data/test-00000-of-00001.parquet": hf_rows(2)})
    listing = _list(tmp_path)
    assert listing.classes == tuple(CLASSES)
    assert [(r.path, r.label, r.split) for r in listing.refs] == [
        ("data/test-00000-of-00001.parquet#row=0", "cat", "test"),
        ("data/test-00000-of-00001.parquet#row=1", "dog", "test"),
        ("data/train-00000-of-00001.parquet#row=0", "cat", "train"),
        ("data/train-00000-of-00001.parquet#row=3", "cat", "train"),
        ("data/train-00000-of-00001.parquet#row=4", "dog", "train"),
    ]
    assert [(r.path, r.reason) for r in listing.rejects] == [
        ("data/train-00000-of-00001.parquet#row=1", "no_label"),
        ("data/train-00000-of-00001.parquet#row=2", "no_label"),
    ]


def test_plain_parquet_columns_by_type_and_name_a_split_column_and_string_labels(tmp_path):
    images = [image_bytes(seed=i) for i in range(4)]
    write_plain(
        tmp_path / "a.parquet",
        {"jpg": images, "species": ["owl", "emu", "owl", ""], "split": ["train", "test", "train", "train"]},
    )
    with pytest.raises(SourceError, match=r"no label column: name one with --label-column \(columns: jpg \(binary\)"):
        _list(tmp_path)
    listing = _list(tmp_path, columns=TableColumns(label="species"))
    assert [(r.path, r.label, r.split) for r in listing.refs] == [
        ("a.parquet#row=0", "owl", "train"),
        ("a.parquet#row=1", "emu", "test"),
        ("a.parquet#row=2", "owl", "train"),
    ]
    assert [(r.path, r.reason) for r in listing.rejects] == [("a.parquet#row=3", "no_label")]


def test_several_image_columns_are_an_error_naming_them_unless_one_is_chosen(tmp_path):
    write_plain(tmp_path / "a.parquet", {"front": [b"x"], "back": [b"y"], "label": [0]})
    with pytest.raises(SourceError, match=r"several image columns \(front, back\): name one with --image-column"):
        _list(tmp_path)
    assert len(_list(tmp_path, columns=TableColumns(image="back")).refs) == 1
    with pytest.raises(SourceError, match="--image-column 'side' is not a column of a.parquet"):
        _list(tmp_path, columns=TableColumns(image="side"))


def test_pandas_categorical_labels_are_strings(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"image": [b"x", b"y"], "label": pd.Categorical(["owl", "emu"])})
    frame.to_parquet(tmp_path / "a.parquet")
    assert [r.label for r in _list(tmp_path).refs] == ["owl", "emu"]


def test_integer_labels_without_names_are_ordered_numerically_and_index_classes(tmp_path):
    write_plain(tmp_path / "a.parquet", {"image": [b"x"] * 4, "label": [10, 2, 0, 1]})
    assert _list(tmp_path).classes == ("0", "1", "2", "10")
    listing = _list(tmp_path, classes=("a", "b", "c"))
    assert sorted(r.label for r in listing.refs) == ["a", "b", "c"]
    assert [(r.path, r.reason) for r in listing.rejects] == [("a.parquet#row=0", "unknown_label")]


def test_file_splits_from_folders_shard_names_and_split_names():
    folders = frozenset({"holdout"})
    assert parquet.file_split("data/train-00000-of-00002.parquet", folders) == "train"
    assert parquet.file_split("validation/data-00000-of-00001.arrow", folders) == "validation"
    assert parquet.file_split("holdout/data-00000-of-00001.arrow", folders) == "holdout"
    assert parquet.file_split("data-00000-of-00001.arrow", folders) is None  # save_to_disk's shard name
    assert parquet.file_split("test.parquet", folders) == "test"
    assert parquet.file_split("part-1.parquet", folders) is None


def test_files_with_and_without_a_split_are_an_error(tmp_path):
    write_hub(tmp_path, {"train.parquet": hf_rows(1), "extra.parquet": hf_rows(1)})
    with pytest.raises(SourceError, match="train.parquet names a split and extra.parquet does not"):
        _list(tmp_path)


def test_a_damaged_file_and_row_group_are_rejects_that_count_their_rows(tmp_path):
    write_hub(tmp_path, {"a.parquet": hf_rows(12), "b.parquet": hf_rows(4)})
    damage_row_group(tmp_path / "a.parquet", 1, "label")  # rows 4..7
    data = (tmp_path / "b.parquet").read_bytes()
    (tmp_path / "b.parquet").write_bytes(data[: len(data) // 2])
    listing = _list(tmp_path)
    assert {r.path for r in listing.refs} == {f"a.parquet#row={i}" for i in (0, 1, 2, 3, 8, 9, 10, 11)}
    assert [(r.path, r.reason) for r in listing.rejects] == [
        ("a.parquet#row=4", "damaged_table"),
        ("a.parquet#row=5", "damaged_table"),
        ("a.parquet#row=6", "damaged_table"),
        ("a.parquet#row=7", "damaged_table"),
        ("b.parquet", "damaged_table"),
    ]
    assert "its rows cannot be counted" in listing.rejects[-1].detail


def test_a_row_is_read_back_from_its_row_group_and_one_file_may_be_source(tmp_path):
    rows = hf_rows(9)
    rows["image"][5] = {"bytes": None, "path": "x/5.jpg"}
    write_hub(tmp_path, {"one.parquet": rows})
    single = str(tmp_path / "one.parquet")
    listing = _list(single, ["one.parquet"])
    assert [r.path for r in listing.refs][:2] == ["one.parquet#row=0", "one.parquet#row=1"]
    for i in (7, 0, 8):
        assert table_files.read_row(f"{single}/one.parquet#row={i}", None) == rows["image"][i]["bytes"]
    assert table_files.read_row(f"{single}/one.parquet#row=5", None) == (
        "no_image",
        "the image has a path (x/5.jpg) but no bytes",
    )
    assert table_files.read_row(f"{single}/one.parquet#row=9", None)[0] == "missing"
    assert table_files.read_row(f"{single}/a.jpg", None) is None


def test_column_options_without_tables_are_an_error(tmp_path):
    (tmp_path / "src" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "cat" / "a.jpg").write_bytes(image_bytes())
    config = build_config(str(tmp_path / "src"), str(tmp_path / "out"), {"label_column": "species"})
    with pytest.raises(SourceError, match="--label-column and --split-column name columns of Parquet"):
        list_inputs(config)


def test_a_remote_files_signature_is_asked_once_while_rows_are_prepared(monkeypatch):
    """The prepare step (`data` given) reuses a remote file's signature for a while; a resume's check of a
    change (no `data`) asks every time; a local file is stated every time."""
    asked = []
    monkeypatch.setattr(table_files.storage, "signature", lambda path, data=None: asked.append(path) or "7")
    monkeypatch.setattr(table_files, "_SIGNATURES", {})
    rows = [f"s3://b/d/a.parquet#row={i}" for i in range(5)] + ["s3://b/d/b.parquet#row=0"]
    assert [table_files.input_signature(r, b"x") for r in rows] == ["7"] * 6
    assert asked == ["s3://b/d/a.parquet", "s3://b/d/b.parquet"]
    table_files.input_signature(rows[0])
    table_files.input_signature("/d/a.parquet#row=1", b"x")
    table_files.input_signature("/d/a.parquet#row=2", b"x")
    assert asked[2:] == ["s3://b/d/a.parquet", "/d/a.parquet", "/d/a.parquet"]
    monkeypatch.setattr(table_files, "_SIGNATURE_SECONDS", 0.0)
    table_files.input_signature(rows[1], b"x")
    assert asked[-1] == "s3://b/d/a.parquet" and len(asked) == 6


def test_list_labels_name_their_ids_and_reject_with_the_reason():
    from prep.core.sources import multilabel, table_labels

    names = ("cat", "dog", "emu")
    for feature in (
        {"_type": "Sequence", "feature": {"_type": "ClassLabel", "names": list(names)}},
        {"_type": "List", "feature": {"_type": "ClassLabel", "names": list(names)}},
        [{"_type": "ClassLabel", "names": list(names)}],
        {"_type": "ClassLabel", "names": list(names)},
    ):
        assert table_labels.class_names(feature) == names
    assert table_labels.class_names({"_type": "List", "feature": {"_type": "Value", "dtype": "string"}}) is None
    path = "a.parquet#row=3"
    assert table_labels.row_label(path, [2, 0, 2], names) == multilabel.MULTI + "cat|emu"
    assert table_labels.row_label(path, ["yak", "ant"], None) == multilabel.MULTI + "ant|yak"
    assert table_labels.row_label(path, [5, 1], None) == multilabel.MULTI + "1|5"
    cases = {
        (): "empty_label",
        ("",): "empty_label",
        (0, None): "bad_label",
        ("a|b",): "bad_label",
        (1, 3): "unknown_label",
    }
    for value, reason in cases.items():
        got = table_labels.row_label(path, list(value), names)
        assert got.path == path and got.reason == reason, (value, got)
    assert table_labels.row_label(path, None, names).reason == "no_label"


def test_a_list_column_is_found_by_name_or_metadata_and_other_lists_are_refused(tmp_path):
    import pyarrow as pa

    from prep.core.sources import table_labels

    schema = pa.schema([("image", pa.binary()), ("labels", pa.list_(pa.string()))])
    assert table_labels.label_column(schema, None, "f") == ("labels", None)
    schema = pa.schema([("image", pa.binary()), ("labels", pa.list_(pa.float32()))])
    with pytest.raises(SourceError, match="no label column"):
        table_labels.label_column(schema, None, "f")
    with pytest.raises(SourceError, match="is list<item: float>: labels are integers or strings, or lists"):
        table_labels.label_column(schema, "labels", "f")
