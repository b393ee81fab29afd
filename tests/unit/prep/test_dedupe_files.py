"""The dedupe stage's work files: slices read back what was written, rewriting gives the same bytes (a
retried bundle, a --resume), the lines merge in the report's order, an interrupted write leaves nothing under
the final name; every file is JSON or .npy that any tool reads without running code, the binary ones
versioned (a resume refuses another version's), and records are read back by name."""

from __future__ import annotations

import ast
import json
import pathlib
import typing

import numpy as np
import pytest

from prep.core import storage
from prep.core.errors import ResumeError
from prep.core.groups import Decision, Member
from prep.core.listing import Reject
from prep.core.run import dedupe_files, key_rows
from prep.core.workdir import WorkDir


@pytest.fixture
def work(tmp_path):
    return WorkDir(str(tmp_path))


def member(item: int, path: str) -> Member:
    return Member(item, path, 1, "cat", "", "ab" * 32, "")


def test_members_round_trip_by_batch_and_rewrite_the_same_bytes(work):
    rows = {0: [(5, member(5, "a.jpg")), (5, member(6, "b\udcff.jpg"))], 3: [(9, member(9, "c.jpg"))]}
    slices = dedupe_files.write_members(work, 2, rows)
    assert sorted(slices) == [0, 3]
    assert {b: dedupe_files.read_members(s) for b, s in slices.items()} == rows
    path = work.members(2)
    first = open(path, "rb").read()
    assert dedupe_files.write_members(work, 2, dict(reversed(rows.items()))) == slices
    assert open(path, "rb").read() == first


def test_decisions_round_trip_by_chunk(work):
    kept = Decision(7, None, "train", "a.jpg")
    rejected = Decision(8, Reject("b.jpg", "duplicate_of", "a.jpg"), "", "")
    slices = dedupe_files.write_decisions(work, 1, {4: [kept], 0: [rejected]})
    assert dedupe_files.read_decisions(slices[4]) == [kept]
    assert dedupe_files.read_decisions(slices[0]) == [rejected]


def test_lines_merge_in_order_of_first_path(work):
    def line(*paths):
        return {"members": [{"path": p} for p in paths], "_movable": ""}

    dedupe_files.write_lines(work, 0, [line("d.jpg", "e.jpg"), line("a.jpg")])
    dedupe_files.write_lines(work, 1, [line("c.jpg"), line("b.jpg", "z.jpg")])
    merged = [dedupe_files.first_path(x) for x in dedupe_files.merged_lines(work, [1, 0, 1])]
    assert merged == ["a.jpg", "b.jpg", "c.jpg", "d.jpg"]


def test_an_interrupted_streamed_write_leaves_no_file(tmp_path):
    path = str(tmp_path / "report.jsonl")

    def pieces():
        yield b"header\n"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        storage.write_streamed(path, pieces())
    assert list(tmp_path.iterdir()) == []
    storage.write_streamed(path, iter([b"a\n", b"b\n"]))
    assert open(path, "rb").read() == b"a\nb\n"


def test_rejects_round_trip_in_rejects_order_whatever_order_they_come_in(work):
    rejects = [
        Reject("b.jpg", "label_conflict", "others: a.jpg"),
        Reject("a\udcff.jpg", "duplicate_of", "c.jpg"),
        Reject("a.jpg", "label_conflict", "others: b.jpg"),
    ]
    dedupe_files.write_rejects(work, 3, rejects)
    first = open(work.policy_rejects(3), "rb").read()
    assert list(dedupe_files.read_rejects(work, 3)) == sorted(rejects)
    dedupe_files.write_rejects(work, 3, list(reversed(rejects)))  # a retried batch writes the same bytes
    assert open(work.policy_rejects(3), "rb").read() == first


def test_work_files_are_json_objects_by_name(work):
    rows = {0: [(5, member(5, "a.jpg"))]}
    dedupe_files.write_members(work, 2, rows)
    [record] = [json.loads(line) for line in open(work.members(2), "rb")]
    assert record == {"group": 5, **member(5, "a.jpg")._asdict()}
    rejected = Decision(8, Reject("b.jpg", "duplicate_of", "a.jpg"), "", "")
    dedupe_files.write_decisions(work, 1, {0: [rejected]})
    [record] = [json.loads(line) for line in open(work.decisions(1), "rb")]
    assert record == {
        "item": 8,
        "reject": {"path": "b.jpg", "reason": "duplicate_of", "detail": "a.jpg"},
        "pin": "",
        "movable": "",
    }
    dedupe_files.write_groups(work, 3, {(2, 10): "train", (1, 0): None})
    assert json.loads(open(work.placements(3), "rb").read()) == [
        {"spill": 1, "offset": 0, "pin": None},
        {"spill": 2, "offset": 10, "pin": "train"},
    ]

    class Ref(typing.NamedTuple):
        spill: int
        offset: int

    place = dedupe_files.placer(work, 3, grouped=True)
    assert [place(Ref(1, 0)), place(Ref(2, 10)), place(Ref(2, 11))] == [None, "train", ""]


def test_key_files_are_versioned_npy_that_numpy_reads_without_pickle(work):
    items = np.arange(3, dtype=np.int64)
    hashes = np.array(
        [[0x5555_5555_5555_5555 << s & (2**64 - 1) | 1 for s in range(dedupe_files.NUM_HASHES)]] * 3, np.uint64
    )
    n = dedupe_files.write_chunk_keys(work, 4, items, hashes)
    assert dedupe_files.chunk_keys_count(work, 4) == n
    with open(work.scan_keys(4), "rb") as f:
        assert np.load(f, allow_pickle=False) == dedupe_files.FILE_VERSION
        assert np.load(f, allow_pickle=False).dtype == dedupe_files.KEY_DTYPE
    assert dedupe_files.chunk_keys_count(work, 5) is None
    rows = np.zeros(2, key_rows.KEY_ROWS)
    rows["spill"], rows["offset"] = 7, [0, 40]
    key_rows.write_rows(work, 0, rows, ["a.jpg", "b\udcff.jpg"])
    got, block = key_rows.read_rows(work, 0)
    assert got.tobytes() == rows.tobytes() and block == "a.jpg\0b\udcff.jpg".encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("damage", ["version", "layout", "not npy"])
def test_a_key_file_of_another_version_is_refused(work, damage):
    rows = np.zeros(2, key_rows.KEY_ROWS)
    key_rows.write_rows(work, 0, rows, ["a.jpg", "b.jpg"])
    with open(work.key_rows(0), "wb") as f:
        if damage == "not npy":
            f.write(len(rows).to_bytes(4, "little") + rows.tobytes())  # RUN_VERSION 8's rows file
        else:
            np.save(f, np.array(dedupe_files.FILE_VERSION + (damage == "version"), "<u4"))
            np.save(f, rows[["spill", "offset"]] if damage == "layout" else rows)
            np.save(f, np.zeros(3, np.uint8))
    with pytest.raises(ResumeError, match="written by another version of tfrecord-prep"):
        key_rows.read_rows(work, 0)


DEDUPE_MODULES = (
    "beam_jobs/dedupe.py",
    "prep/core/run/dedupe_types.py",
    "beam_jobs/dedupe_decide.py",
    "prep/core/run/dedupe_files.py",
    "prep/core/run/key_rows.py",
    "beam_jobs/dedupe_scan.py",
    "prep/core/run/publish_keys.py",
    "beam_jobs/prepare.py",
    "prep/core/run/checkpoints.py",
    "prep/core/workdir.py",
    "prep/core/groups.py",
)


@pytest.mark.parametrize("module", DEDUPE_MODULES)
def test_the_dedupe_stage_and_its_work_files_never_import_pickle(module):
    root = pathlib.Path(__file__).resolve().parents[3]
    tree = ast.parse((root / module).read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] in ("pickle", "dill", "cloudpickle", "marshal", "shelve")]
