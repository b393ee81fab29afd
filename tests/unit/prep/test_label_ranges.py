"""A label file read in byte ranges (prep/core/label_ranges.py) gives the rows and line numbers of the driver's
whole read (`label_file._label_rows`), at every range size; a read failing part-way names the file."""

from __future__ import annotations

import random

import pytest

from prep.core.errors import SourceError
from prep.core.label_file import RowRules, _label_rows
from prep.core.label_ranges import LabelSource, count_range, place, read_range


def ranged(path: str, data: bytes, range_bytes: int, ext: str):
    src = LabelSource(path, ext, len(data), range_bytes, RowRules("/src", "x", False, None))
    jobs = place([count_range(src, part) for part in range(src.ranges)])
    return [row for job in jobs for row in read_range(src, job)]  # the first error: the earliest range's


def outcome(read):
    try:
        return read()
    except SourceError as exc:
        return "error", str(exc)


def assert_same_at_every_range_size(tmp_path, ext: str, data: bytes) -> list:
    path = str(tmp_path / f"labels{ext}")
    with open(path, "wb") as f:
        f.write(data)
    want = outcome(lambda: list(_label_rows(path, None)))
    for range_bytes in range(1, len(data) + 2):
        assert outcome(lambda n=range_bytes: ranged(path, data, n, ext)) == want, (data, range_bytes)
    return want


def test_rows_split_across_ranges_crlf_blank_lines_and_no_newline_at_the_end(tmp_path):
    data = b'\xef\xbb\xbfpath,label\r\n"a\r\nb.png",cat\r\n\r\n  \n"x,y.png" , "d""og"\rlast.png,emu'
    rows = assert_same_at_every_range_size(tmp_path, ".csv", data)
    assert rows == [
        (3, {"path": "a\r\nb.png", "label": "cat"}, None),
        (6, {"path": "x,y.png ", "label": 'd"og'}, None),
        (7, {"path": "last.png", "label": "emu"}, None),
    ]


def test_a_header_split_across_ranges_and_a_quote_inside_an_unquoted_field(tmp_path):
    data = b'path\tlabel\t"no\nte"\nab"c\td\te\n"q\t\n\n"\tr\ts\n'
    assert assert_same_at_every_range_size(tmp_path, ".tsv", data) == [
        (3, {"path": 'ab"c', "label": "d", "no\nte": "e"}, None),
        (6, {"path": "q\t\n\n", "label": "r", "no\nte": "s"}, None),
    ]


def test_jsonl_lines_and_bad_rows(tmp_path):
    data = b'{"path": "a", "label": "c"}\r\n\r  \n[1]\nnot json\r{"path": "b", "label": 3}'
    assert [r[0] for r in assert_same_at_every_range_size(tmp_path, ".jsonl", data)] == [1, 4, 5, 6]


@pytest.mark.parametrize("ext", [".csv", ".jsonl"])
def test_text_that_is_not_utf8_is_the_drivers_error(tmp_path, ext):
    data = b'path,label\n"a.png",cat\n' if ext == ".csv" else b'{"path": "a", "label": "c"}\n'
    want = assert_same_at_every_range_size(tmp_path, ext, data + b"b\xff.png,cat\n" + data[-12:])
    assert want == ("error", f"label file {tmp_path}/labels{ext} is not UTF-8 text")


def test_random_files_read_in_ranges_as_whole(tmp_path):
    rnd = random.Random(37)
    pieces = ["a", "b", ",", "\t", " ", '"', '""', "\n", "\r", "\r\n", "é", "|"]
    for _ in range(100):
        ext = rnd.choice([".csv", ".tsv"])
        header = rnd.choice(["path,label\n", "path\tlabel\r\n", '"path",label\r'])
        text = header + "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 30)))
        assert_same_at_every_range_size(tmp_path, ext, text.encode())


def test_a_remote_file_read_failing_part_way_names_the_file(tmp_path, monkeypatch):
    import beam_jobs  # noqa: F401  (installs Beam's file systems behind prep.core.storage)
    from tests.support.testfs import TestFileSystem, to_url

    data = b"path,label\n" + b"".join(b"img/%d.png,cat\n" % i for i in range(200))
    (tmp_path / "labels.csv").write_bytes(data)
    url = to_url(str(tmp_path / "labels.csv"))
    assert len(ranged(url, data, 500, ".csv")) == 200

    opened = TestFileSystem.open

    def failing(self, path, *args, **kwargs):
        f = opened(self, path, *args, **kwargs)
        read = f.read

        def read_then_fail(size=-1):
            if f.tell() > 1000:
                raise OSError("connection reset")
            return read(size)

        f.read = read_then_fail
        return f

    monkeypatch.setattr(TestFileSystem, "open", failing)
    with pytest.raises(SourceError, match=f"cannot read label file {url}: connection reset"):
        ranged(url, data, 500, ".csv")


@pytest.mark.parametrize("case", ["no source", "no file", "a folder", "a fifo", "extension"])
def test_what_the_driver_checks_before_reading_gives_its_errors(tmp_path, case):
    import os

    from prep.core.convert_options import build_config
    from prep.core.inputs import list_inputs
    from prep.core.label_ranges import label_source

    source, labels = tmp_path / "src", tmp_path / ("labels.xls" if case == "extension" else "labels.csv")
    if case != "no source":
        source.mkdir()
    if case in ("no source", "extension"):
        labels.write_text("path,label\na.png,cat\n")
    elif case == "a folder":
        labels.mkdir()
    elif case == "a fifo":
        os.mkfifo(labels)
    config = build_config(str(source), str(tmp_path / "out"), {"labels": str(labels)})
    with pytest.raises(SourceError) as driver:
        list_inputs(config)
    with pytest.raises(SourceError) as ranges:
        label_source(config)
    assert str(ranges.value) == str(driver.value)
