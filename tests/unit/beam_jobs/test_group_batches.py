"""The dedupe stage's per-image work files: slices read back what was written, rewriting gives the same
bytes (a retried bundle, a --resume), the lines merge in the report's order, an interrupted write leaves
nothing under the final name."""

from __future__ import annotations

import pytest

from beam_jobs import group_batches
from prep.core import storage
from prep.core.groups import Decision, Member
from prep.core.listing import Reject
from prep.core.workdir import WorkDir


@pytest.fixture
def work(tmp_path):
    return WorkDir(str(tmp_path))


def member(item: int, path: str) -> Member:
    return Member(item, path, 1, "cat", "", "ab" * 32, "")


def test_members_round_trip_by_batch_and_rewrite_the_same_bytes(work):
    rows = {0: [(5, member(5, "a.jpg")), (5, member(6, "b\udcff.jpg"))], 3: [(9, member(9, "c.jpg"))]}
    slices = group_batches.write_members(work, 2, rows)
    assert sorted(slices) == [0, 3]
    assert {b: group_batches.read_members(s) for b, s in slices.items()} == rows
    path = group_batches.members_path(work, 2)
    first = open(path, "rb").read()
    assert group_batches.write_members(work, 2, dict(reversed(rows.items()))) == slices
    assert open(path, "rb").read() == first


def test_decisions_round_trip_by_chunk(work):
    kept = Decision(7, None, "train", "a.jpg")
    rejected = Decision(8, Reject("b.jpg", "duplicate_of", "a.jpg"), "", "")
    slices = group_batches.write_decisions(work, 1, {4: [kept], 0: [rejected]})
    assert group_batches.read_decisions(slices[4]) == [kept]
    assert group_batches.read_decisions(slices[0]) == [rejected]


def test_lines_merge_in_order_of_first_path(work):
    def line(*paths):
        return {"members": [{"path": p} for p in paths], "_movable": ""}

    group_batches.write_lines(work, 0, [line("d.jpg", "e.jpg"), line("a.jpg")])
    group_batches.write_lines(work, 1, [line("c.jpg"), line("b.jpg", "z.jpg")])
    merged = [group_batches.first_path(x) for x in group_batches.merged_lines(work, [1, 0, 1])]
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
    rejects = [Reject("b.jpg", "label_conflict", "others: a.jpg"), Reject("a\udcff.jpg", "duplicate_of", "c.jpg"),
               Reject("a.jpg", "label_conflict", "others: b.jpg")]
    group_batches.write_rejects(work, 3, rejects)
    first = open(group_batches.rejects_path(work, 3), "rb").read()
    assert list(group_batches.read_rejects(work, 3)) == sorted(rejects)
    group_batches.write_rejects(work, 3, list(reversed(rejects)))  # a retried batch writes the same bytes
    assert open(group_batches.rejects_path(work, 3), "rb").read() == first
