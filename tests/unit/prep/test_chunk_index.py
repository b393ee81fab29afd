"""A chunk's index (checkpoints.write_chunk_index, prepare's read-back): outcomes recorded as objects of their
fields by name, with a version, and read back typed; a field left out takes its default; an index of another
version is not reused, and the planner's read refuses it."""

from __future__ import annotations

import json

import pytest

from beam_jobs import prepare
from prep.core.errors import ResumeError
from prep.core.listing import Reject
from prep.core.run import checkpoints
from prep.core.task_inputs import BoxNote, BoxTally
from prep.core.workdir import WorkDir

REF = prepare.PreparedRef(
    path="a/é\udcff.jpg".encode("utf-8", "surrogateescape"),
    label=2,
    split="train",
    spill=1025,
    offset=40,
    length=900,
    converted=True,
    cut=12,
    image=800,
    rank="0f",
    tags=((1, 2), (3, 1)),
)
OUTCOMES = [
    (prepare.OK, REF),
    (prepare.REJECT, Reject("b.jpg", "corrupt", "cannot decode")),
    (
        prepare.BOXES,
        prepare.BoxNotes((BoxNote("a.jpg", 3, "outside", "x > width", True),), BoxTally(4, 3, 1, (("outside", 1),))),
    ),
]


@pytest.fixture
def work(tmp_path):
    return WorkDir(str(tmp_path))


def test_outcomes_round_trip_by_name(work):
    checkpoints.write_chunk_index(work, 0, OUTCOMES, {1025: 1000}, ["sig"])
    data = json.loads(open(work.chunk_index(0), "rb").read())
    assert data["version"] == checkpoints.INDEX_VERSION
    assert data["outcomes"][0] == [
        "ok",
        {
            "path": "a/é\udcff.jpg",
            "label": 2,
            "split": "train",
            "spill": 1025,
            "offset": 40,
            "length": 900,
            "converted": True,
            "cut": 12,
            "image": 800,
            "rank": "0f",
            "tags": [[1, 2], [3, 1]],
        },
    ]
    assert prepare.read_prepared(work, 0) == [REF]
    assert [prepare._recorded(kind, fields) for kind, fields in data["outcomes"]] == [v for _, v in OUTCOMES]
    checkpoints.write_chunk_index(work, 1, data["outcomes"], {}, ["sig"])  # replan.restage passes them on as read
    assert open(work.chunk_index(1), "rb").read() == open(work.chunk_index(0), "rb").read().replace(
        b'[[1025, 1000]]', b'[]'
    )


def test_a_field_left_out_takes_its_default(work):
    checkpoints.write_chunk_index(work, 0, [(prepare.OK, REF)], {}, [])
    path = work.chunk_index(0)
    data = json.loads(open(path, "rb").read())
    del data["outcomes"][0][1]["rank"], data["outcomes"][0][1]["tags"]
    open(path, "w").write(json.dumps(data))
    assert prepare.read_prepared(work, 0) == [REF._replace(rank="", tags=())]


def test_an_index_of_another_version_is_not_reused(work):
    checkpoints.write_chunk_index(work, 0, OUTCOMES, {}, [])
    assert checkpoints.read_chunk_index(work, 0) is not None
    path = work.chunk_index(0)
    data = json.loads(open(path, "rb").read())
    old = {
        "spills": [],
        "outcomes": [[kind, list(fields.values())] for kind, fields in data["outcomes"][:1]],
        "inputs": [],
    }  # as RUN_VERSION 8 wrote it
    open(path, "w").write(json.dumps(old))
    assert checkpoints.read_chunk_index(work, 0) is None
    with pytest.raises(ResumeError, match="written by another version of tfrecord-prep"):
        prepare.read_prepared(work, 0)


def test_chunk_counts_and_places_by_name():
    other = REF._replace(spill=3, offset=0, length=100, split="")
    assert REF.place == (1025, 40)
    assert prepare.chunk_counts([REF, other, other]) == (
        prepare.GroupCount("train", 2, 1, 900),
        prepare.GroupCount("", 2, 2, 200),
    )
    assert prepare.chunk_counts([REF, other], {REF.place: None, other.place: "test"}) == (
        prepare.GroupCount("", 2, 1, 100, "test"),
    )
