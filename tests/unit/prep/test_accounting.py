"""rejects.jsonl streamed from sorted runs: the same lines, in the same order, as sorting every reject at
once; the counts come from the stream."""

from __future__ import annotations

import json
import random

import pytest

from prep.core import accounting
from prep.core.listing import Reject
from prep.core.manifest import GroupCounts
from prep.core.task_inputs import BoxNote


def test_merged_runs_are_the_order_of_one_sort_and_stream_in_pieces():
    rng = random.Random(0)
    rejects = [
        Reject(
            f"{rng.choice('abc')}/{rng.randrange(50):03d}.jpg",
            rng.choice(["duplicate_of", "truncated"]),
            str(rng.randrange(3)),
        )
        for _ in range(300)
    ]
    runs = [accounting.sort_rejects(rejects[i::4]) for i in range(4)]
    merged = list(accounting.merged_rejects(runs))
    assert merged == sorted(rejects, key=lambda r: (r.path, r.reason, r.detail))
    pieces = list(accounting.rejects_lines(merged, per_piece=7))
    assert len(pieces) == 43  # 300 lines, 7 a piece
    lines = b"".join(pieces).decode().splitlines()
    assert [json.loads(line)["path"] for line in lines] == [r.path for r in merged]


def test_box_notes_follow_their_image_by_index():
    rejects = [Reject("a.jpg", "truncated", "x"), Reject("c.jpg", "truncated", "y")]
    notes = [
        BoxNote("c.jpg", 1, "out_of_image", "z"),
        BoxNote("b.jpg", 0, "degenerate", "w"),
        BoxNote("c.jpg", 0, "degenerate", "v"),
    ]
    out = list(accounting.with_box_notes(iter(rejects), notes))
    assert [(x.path, getattr(x, "box", -1)) for x in out] == [
        ("a.jpg", -1),
        ("b.jpg", 0),
        ("c.jpg", -1),
        ("c.jpg", 0),
        ("c.jpg", 1),
    ]


def test_group_rejects_must_match_the_reports_count():
    accounting.check_group_rejects(GroupCounts(rejected=2), {"duplicate_of": 1, "label_conflict": 1, "truncated": 5})
    with pytest.raises(RuntimeError, match="reject 3 inputs, rejects.jsonl lists 2"):
        accounting.check_group_rejects(GroupCounts(rejected=3), {"duplicate_of": 2})
