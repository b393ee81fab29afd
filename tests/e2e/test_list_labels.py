"""A label file read in byte ranges on workers (beam_jobs/list_labels.py) stages exactly what the driver's
listing does: the same chunk files, early rejects (reasons, line numbers) and run record, so shards are
byte-identical, for single- and multi-label files; bad text is the driver's error."""

from __future__ import annotations

import json

import pytest

from beam_jobs import list_labels, list_source
from beam_jobs._execute import list_on_workers
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from prep.core.inputs import list_inputs
from prep.core.label_ranges import label_source
from prep.core.run import checkpoints
from prep.core.run.start import clear_output, ready_listed, ready_output
from prep.core.workdir import WorkDir
from tests.e2e.test_list_source import staged

PIPELINE = True


@pytest.fixture(params=[True, False], ids=["pipeline", "in-process"])
def as_pipeline(request, monkeypatch):
    """A test twice: the listing as a Beam pipeline (embedded runner), and its steps run in this process."""
    monkeypatch.setattr("tests.e2e.test_list_labels.PIPELINE", request.param)


both_ways = pytest.mark.usefixtures("as_pipeline")


def on_workers(source: str, out: str, range_bytes: int, **options):
    config = build_config(source, out, options)
    src = label_source(config, range_bytes)
    assert src is not None
    clear_output(config)
    summary = list_on_workers(config, src, pipeline=PIPELINE)
    list_source.delete_listed(out)
    if summary["fallback"] is not None:
        return summary["fallback"]
    return ready_listed(config, summary)


def on_driver(source: str, out: str, **options):
    config = build_config(source, out, options)
    return ready_output(config, list_inputs(config))


def assert_same_staging(source, tmp_path, range_bytes, **options):
    workers, driver = str(tmp_path / f"w{range_bytes}"), str(tmp_path / f"d{range_bytes}")
    a, b = on_workers(source, workers, range_bytes, **options), on_driver(source, driver, **options)
    assert (a.staged, a.chunk_sizes) == (b.staged, b.chunk_sizes)
    assert staged(workers) == staged(driver)
    return checkpoints.read_listing_rejects(WorkDir(workers))


# CRLF and LF lines, blank lines, a quoted path holding a comma and one holding a newline, bad rows,
# duplicates far apart (across ranges), a path outside SOURCE, an empty label, no newline at the end.
CSV = (
    "\ufeffpath,label,split\r\n"
    + "".join(f"img/{i:03d}.jpg,{('cat', 'dog', 'emu')[i % 3]},{'train' if i % 4 else 'test'}\r\n" for i in range(60))
    + '\n"img/a,b.jpg",cat,train\n"img/new\nline.jpg",dog,train\n\n'
    + "img/007.jpg,dog,train\nimg/bad.jpg,cat\n../out.jpg,cat,train\nimg/x.jpg,,train\n"
    + "".join(f"img/{i:03d}.jpg,{('cat', 'dog')[i % 2]},train\n" for i in range(60, 120))
    + "img/013.jpg,cat,train\nimg/last.jpg,emu,test"
)


@both_ways
@pytest.mark.parametrize("range_bytes", [7, 100, 1 << 20])
def test_a_csv_file_stages_as_on_the_driver(tmp_path, range_bytes):
    labels = tmp_path / "labels.csv"
    labels.write_bytes(CSV.encode())
    (tmp_path / "src").mkdir()
    rejects = assert_same_staging(str(tmp_path / "src"), tmp_path, range_bytes, labels=str(labels), seed=4)
    assert [(r.path, r.reason, r.detail) for r in rejects] == [
        ("../out.jpg", "outside_source", "line 69: path is outside SOURCE (--allow-outside-source accepts it)"),
        ("img/007.jpg", "duplicate", "line 67: path already listed on line 9"),
        ("img/013.jpg", "duplicate", "line 131: path already listed on line 15"),
        ("img/x.jpg", "empty_label", "line 70: label is empty"),
        ("labels.csv:68", "bad_row", "2 fields, header has 3"),
    ]


@both_ways
def test_a_jsonl_file_with_classes_and_a_remote_label_file(tmp_path):
    from tests.support.testfs import to_url

    lines = [f'{{"path": "p/{i}.png", "label": "{"ab"[i % 2]}"}}' for i in range(40)]
    lines[5] = '{"path": "p/1.png", "label": "b"}'  # a duplicate
    lines[9] = "not json"
    lines[12] = '{"path": "p/12.png", "label": "zebra"}'  # not in --classes
    lines[14] = lines[30] = '{"path": "p/\\udcff.png", "label": "a"}'  # a file name that is not UTF-8, twice
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\r\n".join(lines[:20]) + "\n\n   \n" + "\n".join(lines[20:]) + "\n")
    classes = tmp_path / "classes.txt"
    classes.write_text("b\na\n")
    (tmp_path / "src").mkdir()
    rejects = assert_same_staging(str(tmp_path / "src"), tmp_path, 50, labels=to_url(str(labels)), classes=str(classes))
    assert [(r.path, r.reason, r.detail) for r in rejects] == [
        ("labels.jsonl:10", "bad_row", "not JSON: Expecting value"),
        ("p/1.png", "duplicate", "line 6: path already listed on line 2"),
        ("p/12.png", "unknown_label", "label 'zebra' is not in --classes"),
        ("p/\udcff.png", "duplicate", "line 33: path already listed on line 15"),
    ]


# A multi-label CSV: names in any order and spaced, a name twice, a quoted cell holding a newline,
# a label of "|" only (empty), duplicates far apart (across ranges), a row of the wrong length, an unclosed
# quote at the end (one field), a path outside SOURCE, user groups and splits.
MULTI_CSV = (
    "path,label,split,patient\r\n"
    + "".join(
        f"img/{i:03d}.jpg,{('cat|dog', 'dog', ' emu | cat |cat', 'cat')[i % 4]},{'train' if i % 5 else 'test'},p{i % 7}\r\n"
        for i in range(70)
    )
    + '"img/new\nline.jpg","dog|\nemu",train,p1\nimg/e.jpg,|,train,p2\nimg/009.jpg,cat,train,p3\n'
    + "img/bad.jpg,cat,train\n../out.jpg,cat|dog,train,p1\n\n"
    + "".join(f"img/{i:03d}.jpg,{('emu', 'cat|emu')[i % 2]},test,p{i % 3}\n" for i in range(70, 130))
    + 'img/041.jpg,cat,test,p0\n"img/open.jpg,cat,train,p4\n'
)


@both_ways
@pytest.mark.parametrize("range_bytes", [7, 300, 1 << 20])
def test_a_multilabel_csv_file_stages_as_on_the_driver(tmp_path, range_bytes):
    labels = tmp_path / "labels.csv"
    labels.write_bytes(MULTI_CSV.encode())
    (tmp_path / "src").mkdir()
    options = {"labels": str(labels), "seed": 5, "group_by": "patient", "num_shards": 3}
    rejects = assert_same_staging(str(tmp_path / "src"), tmp_path, range_bytes, **options)
    assert [(r.path, r.reason, r.detail) for r in rejects] == [
        ("../out.jpg", "outside_source", "line 78: path is outside SOURCE (--allow-outside-source accepts it)"),
        ("img/009.jpg", "duplicate", "line 76: path already listed on line 11"),
        ("img/041.jpg", "duplicate", "line 140: path already listed on line 43"),
        ("img/e.jpg", "empty_label", "line 75: label is empty"),
        ("labels.csv:141", "bad_row", "1 fields, header has 4"),  # the unclosed quote runs to the end
        ("labels.csv:77", "bad_row", "3 fields, header has 4"),
    ]


@both_ways
def test_a_multilabel_jsonl_file_with_classes_stages_as_on_the_driver(tmp_path):
    lines = [f'{{"path": "p/{i}.png", "label": {["a", "b"] if i % 3 else ["b"]}}}'.replace("'", '"') for i in range(40)]
    lines[4] = '{"path": "p/1.png", "label": ["a"]}'  # a duplicate
    lines[7] = "not json"
    lines[11] = '{"path": "p/11.png", "label": ["a", "zebra"]}'  # not in --classes
    lines[13] = '{"path": "p/13.png", "label": ["a", ""]}'  # an empty name
    lines[17] = '{"path": "p/17.png", "label": {"a": 1}}'  # an object
    lines[19] = '{"path": "p/19.png", "label": "a"}'  # one name: in a multi-label file, a set of one
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\r\n".join(lines[:20]) + "\n\n   \n" + "\n".join(lines[20:]) + "\n")
    classes = tmp_path / "classes.txt"
    classes.write_text("b\na\nc\n")
    (tmp_path / "src").mkdir()
    rejects = assert_same_staging(str(tmp_path / "src"), tmp_path, 50, labels=str(labels), classes=str(classes))
    assert [(r.path, r.reason, r.detail) for r in rejects] == [
        ("labels.jsonl:14", "bad_row", "'label' list must hold non-empty names without '|'"),
        ("labels.jsonl:18", "bad_row", "'label' is a JSON object, not text"),
        ("labels.jsonl:8", "bad_row", "not JSON: Expecting value"),
        ("p/1.png", "duplicate", "line 5: path already listed on line 2"),
        ("p/11.png", "unknown_label", "label 'zebra' is not in --classes"),
    ]


@both_ways
def test_a_file_whose_only_multilabel_row_is_rejected_is_multilabel_on_workers_too(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\na.png,cat\nb.png,dog\n../c.png,cat|dog\n")
    (tmp_path / "src").mkdir()
    assert_same_staging(str(tmp_path / "src"), tmp_path, 9, labels=str(labels))
    assert on_workers(str(tmp_path / "src"), str(tmp_path / "again"), 9, labels=str(labels)).staged.task == "multilabel"


@both_ways
@pytest.mark.parametrize(
    "data",
    [
        b"path,label\na.png,cat\n" + b"b.png,c\xffat\n" * 30,  # not UTF-8
        b"path,label\r\n\r\n\r\n",  # no rows
        b"path,label,split\na.png,cat,train\nb.png,cat,\n",  # a split for some rows only
        b"path,lable\na.png,cat\n",  # a column missing
        b"path,label\n,cat\n",  # no usable row
        b"path,label\n,cat|dog\n",  # no usable multi-label row
        b"path,label,split\na.png,cat|dog,train\nb.png,cat,\n",  # multi-label, a split for some rows only
        b"path,label\na.png,cat|dog\n" + b"b.png,c\xffat\n" * 30,  # multi-label, not UTF-8
    ],
)
def test_errors_are_the_drivers(tmp_path, data):
    labels = tmp_path / "labels.csv"
    labels.write_bytes(data)
    (tmp_path / "src").mkdir()
    with pytest.raises(SourceError) as driver:
        on_driver(str(tmp_path / "src"), str(tmp_path / "d"), labels=str(labels))
    with pytest.raises(SourceError) as workers:
        on_workers(str(tmp_path / "src"), str(tmp_path / "w"), 8, labels=str(labels))
    assert str(workers.value) == str(driver.value)


def test_a_conversion_on_another_runner_writes_the_drivers_shards(tmp_path, monkeypatch):
    from beam_jobs import convert as conversion
    from tests.support.imagegen import write_class_tree
    from tests.support.shards import assert_same_dataset

    paths = write_class_tree(tmp_path / "src", {"ant": 14, "bee": 9, "cat": 5}, size=(6, 5))
    rows = [f"{p.relative_to(tmp_path / 'src')},{p.parent.name}" for p in paths]
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\r\n" + "\r\n".join([*rows, rows[3], "bad,row,here", "cat/none.png,cat"]))
    options = {"labels": str(labels), "split": "train=0.7,validation=0.3", "seed": 3, "num_shards": 2}
    conversion.convert(build_config(str(tmp_path / "src"), str(tmp_path / "driver"), options))
    built: list = []
    monkeypatch.setattr(list_labels, "build_listing", _recorded(list_labels.build_listing, built))
    config = build_config(str(tmp_path / "src"), str(tmp_path / "workers"), options)
    conversion.convert(config, runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"])
    assert len(built) == 1  # listed on workers
    assert_same_dataset(tmp_path / "workers", tmp_path / "driver", shards=4)


def test_a_multilabel_conversion_on_another_runner_writes_the_drivers_shards(tmp_path, monkeypatch):
    from beam_jobs import convert as conversion
    from tests.support.imagegen import write_class_tree
    from tests.support.shards import assert_same_dataset

    paths = write_class_tree(tmp_path / "src", {"ant": 12, "bee": 9, "cat": 6}, size=(6, 5))
    names = ("ant|bee", "bee", "cat|ant", "ant")
    rows = [f"{p.relative_to(tmp_path / 'src')},{names[i % 4]}" for i, p in enumerate(paths)]
    labels = tmp_path / "labels.csv"
    # a duplicate, a bad row, a missing image (rejected when read), an empty label
    extra = [rows[3], "bad,row,here", "cat/none.png,cat|bee", "ant/x.png,|"]
    labels.write_text("path,label\r\n" + "\r\n".join([*rows, *extra]))
    options = {"labels": str(labels), "split": "train=0.7,validation=0.3", "seed": 3, "num_shards": 2}
    conversion.convert(build_config(str(tmp_path / "src"), str(tmp_path / "driver"), options))
    built: list = []
    monkeypatch.setattr(list_labels, "build_listing", _recorded(list_labels.build_listing, built))
    config = build_config(str(tmp_path / "src"), str(tmp_path / "workers"), options)
    manifest = conversion.convert(config, runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"])
    assert len(built) == 1  # listed on workers
    assert manifest.task == "multilabel"
    assert_same_dataset(tmp_path / "workers", tmp_path / "driver", shards=4)
    rejects = [json.loads(line) for line in (tmp_path / "workers" / "rejects.jsonl").read_text().splitlines()]
    assert sorted(r["reason"] for r in rejects) == ["bad_row", "duplicate", "empty_label", "missing"]


def _recorded(build, calls: list):
    def recorded(*args):
        calls.append(args)
        return build(*args)

    return recorded


@both_ways
def test_a_group_by_column_is_staged_as_on_the_driver(tmp_path):
    rows = [f"g/{i}.png,{'xy'[i % 2]},p{i % 5}" for i in range(30)] + ["g/3.png,x,p9", "g/30.png,y,"]
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label,patient\n" + "\n".join(rows) + "\n")
    (tmp_path / "src").mkdir()
    rejects = assert_same_staging(str(tmp_path / "src"), tmp_path, 64, labels=str(labels), group_by="patient")
    assert [(r.path, r.reason) for r in rejects] == [("g/3.png", "duplicate")]
