"""beam_fs.RangeReader: the reader of s3:// and gs:// objects, each read one ranged request (no server here:
`get` serves a bytes object and records the ranges asked; tests/e2e/test_object_stores.py reads real ones)."""

from __future__ import annotations

import io
import os

import pytest

from beam_jobs.beam_fs import RangeReader

DATA = bytes(range(256)) * 8192  # 2 MiB


def _reader(data: bytes = DATA):
    asked: list[tuple[int, int | None]] = []

    def get(start, end):
        asked.append((start, end))
        return data[start:end]

    return RangeReader(get, "s3://b/k"), asked


def test_a_whole_read_is_one_request_and_nothing_is_asked_before_it():
    f, asked = _reader()
    assert asked == []
    assert f.read() == DATA and asked == [(0, None)]


def test_a_ranged_read_asks_for_its_bytes_only():
    f, asked = _reader()
    f.seek(1000)
    assert f.read(300_000) == DATA[1000:301_000]
    assert asked == [(1000, 301_000)]
    f.seek(len(DATA) + 5)
    assert f.read(10) == b"" and f.tell() == len(DATA) + 5


def test_small_reads_read_ahead_more_while_they_go_on():
    f, asked = _reader()
    pieces = []
    while piece := f.read(1000):  # small reads, each far under the read-ahead
        pieces.append(piece)
    assert b"".join(pieces) == DATA
    assert len(asked) <= 5, asked  # 256 KiB, then 512 KiB, 1 MiB, ...: not a request per read
    f.seek(100)
    assert f.read(4) == DATA[100:104]  # a seek back elsewhere: read ahead from there, 256 KiB again
    assert asked[-1] == (100, 100 + 256 * 1024)


def test_a_seek_within_what_was_read_ahead_costs_nothing():
    f, asked = _reader()
    assert f.read(10) == DATA[:10]
    f.seek(5000)
    assert f.read(20) == DATA[5000:5020] and len(asked) == 1


def test_lines_and_text_come_from_the_read_ahead():
    text = b"".join(b"line %d\n" % i for i in range(50_000))
    f, asked = _reader(text)
    assert f.readline() == b"line 0\n"
    assert f.readline(3) == b"lin"
    assert f.readline() == b"e 1\n"
    assert list(f)[-1] == b"line 49999\n"
    assert len(asked) <= 3, asked
    g, asked = _reader(text)
    assert io.TextIOWrapper(g, encoding="utf-8").read() == text.decode()
    assert len(asked) <= 3, asked


def test_a_negative_seek_is_refused():
    f, _ = _reader()
    with pytest.raises(ValueError):
        f.seek(-1)
    f.seek(10)
    assert f.seek(-4, os.SEEK_CUR) == 6
