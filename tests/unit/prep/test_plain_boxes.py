"""Detection's plain-box path (`place_plain`, `ObjectColumns`) against the general one it stands in for: the same
placed values, records byte for byte, the same counts; and the general path taken whenever a box is not plain."""

import itertools
import json
import random

import pytest

from prep.core import annotations
from prep.core.annotations import BoxPolicy, ImageAnnotation, Obj, place_objects, place_plain
from prep.core.annotations.rows import objects_text
from prep.core.image_rules import ImageRejected, PreparedImage
from prep.core.listing import InputRef
from prep.core.run.task_build import TaskSpec, build_record
from prep.core.task_record import BoxObject, ObjectColumns, TaskRecord

CLASSES = ("cat", "dög", "z")


def objects(rng, n, plain):
    """n objects of a 40x30 frame: plain ones (ints and floats, on the edges too), or any kind of box."""
    out = []
    for i in range(n):
        x0, y0 = rng.choice([0, 0.0, 3, 2.5, 17.25]), rng.choice([0, 1.5, 4, 11.0])
        x1, y1 = x0 + rng.choice([1, 0.5, 10.75, 40 - x0]), y0 + rng.choice([1, 2.25, 30 - y0])
        box = [x0, y0, x1, y1]
        if not plain and rng.random() < 0.5:
            box = rng.choice([[-3.0, 1, 5, 6], [1, 1, 1, 5], [2, 2, 45, 9], [50, 1, 60, 5], [1, 2, 3, 4]])
        flags = rng.choice([0, 0, 1, 2, 3, 4])
        out.append(
            Obj(i, rng.choice(CLASSES), tuple(map(float, box)), bool(flags & 1), bool(flags & 2), bool(flags & 4), 7.0)
        )
    return out


def as_json(objs, **frame):
    return ImageAnnotation(
        "a.jpg", frame.get("w", 40), frame.get("h", 30), frame.get("n", False), tuple(objs)
    ).to_json()


def in_form(ann, form):
    """`ann` with its objects as a listing holds them: as they are ("o"), or as columns ("c") where they can be."""
    if form == "o":
        return ann
    objects = json.loads(objects_text(ann["o"]))
    return {k: v for k, v in ann.items() if k != "o"} | {"o" if isinstance(objects, list) else "c": objects}


FORMS = pytest.mark.parametrize("form", ["o", "c"])


@FORMS
def test_plain_boxes_are_what_place_objects_places(form):
    rng = random.Random(5)
    for n, final, crowd in itertools.product((0, 1, 3, 12), ((40, 30), (128, 96), (17, 5)), ("keep", "drop")):
        for _ in range(20):
            ann = as_json(objects(rng, n, plain=True))
            ann["o"][0:1] = (
                [{**ann["o"][0], "b": [int(v) if v.is_integer() else v for v in ann["o"][0]["b"]]}] if n else []
            )
            policy = BoxPolicy(crowd=crowd)
            got = place_plain(in_form(ann, form), (40, 30), 1, final, policy)
            want = place_objects(ImageAnnotation.from_json(ann), (40, 30), 1, final, policy, False)
            if crowd == "drop" and any(o.get("f", 0) & 1 for o in ann["o"]):
                assert got is None
                continue
            assert got is not None and not want.dropped and not want.clipped
            columns = list(zip(got.labels, got.xmin, got.ymin, got.xmax, got.ymax, got.area, got.crowd, got.difficult))
            assert columns == [
                (o.label, o.xmin, o.ymin, o.xmax, o.ymax, o.area, o.crowd, o.difficult) for o in want.objects
            ]


@pytest.mark.parametrize(
    "change",
    [
        {"b": [-0.5, 1.0, 5.0, 6.0]},  # reaches outside
        {"b": [1.0, 1.0, 41.0, 6.0]},
        {"b": [5.0, 1.0, 5.0, 6.0]},  # degenerate
        {"b": ["nan", 1.0, 5.0, 6.0]},  # not finite, written as text
        {"b": [1.0, 2.0, 3.0]},  # not four
    ],
)
@FORMS
def test_a_box_not_plain_sends_the_image_the_general_way(change, form):
    ann = as_json(objects(random.Random(1), 3, plain=True))
    ann["o"][1] = {**ann["o"][1], **change}
    assert place_plain(in_form(ann, form), (40, 30), 1, (40, 30), BoxPolicy()) is None


@FORMS
def test_a_crowd_the_policy_drops_sends_the_image_the_general_way(form):
    ann = as_json(objects(random.Random(1), 3, plain=True))
    ann["o"][2] = {**ann["o"][2], "f": 3}
    assert place_plain(in_form(ann, form), (40, 30), 1, (40, 30), BoxPolicy(crowd="drop")) is None
    assert place_plain(in_form(ann, form), (40, 30), 1, (40, 30), BoxPolicy()) is not None


@FORMS
def test_turned_or_normalised_frames_go_the_general_way_and_a_wrong_size_is_rejected_alike(form):
    ann = in_form(as_json(objects(random.Random(2), 2, plain=True)), form)
    assert place_plain(ann, (30, 40), 6, (40, 30), BoxPolicy()) is not None  # declared as displayed: no turn
    assert place_plain({**ann, "w": 30, "h": 40}, (30, 40), 6, (40, 30), BoxPolicy()) is None  # the stored frame
    assert place_plain({**ann, "n": 1}, (40, 30), 1, (40, 30), BoxPolicy()) is None
    with pytest.raises(ImageRejected, match="size_mismatch: the annotation is for a 41x30 image"):
        place_plain({**ann, "w": 41}, (40, 30), 1, (40, 30), BoxPolicy())  # the frame is judged before a box


def general(monkeypatch):
    monkeypatch.setattr(annotations, "place_plain", lambda *args: None)


@FORMS
@pytest.mark.parametrize("skip_empty", [False, True])
def test_records_and_counts_are_those_of_the_general_path(monkeypatch, skip_empty, form):
    rng = random.Random(3)
    spec = TaskSpec("detection", CLASSES, skip_empty=skip_empty)
    for n, size, orientation in itertools.product((0, 1, 5, 20), ((40, 30), (80, 60)), (1, 6)):
        for _ in range(5):
            plain = rng.random() < 0.5
            extra = json.dumps({"a": in_form(as_json(objects(rng, n, plain)), form), "s": "7"})
            ref = InputRef("a.jpg", "cat", None, extra)
            stored = (30, 40) if orientation == 6 else (40, 30)
            image = PreparedImage(b"\xff\xd8data", "jpeg", size[1], size[0], 3, False, stored, orientation)
            fast = build_record(spec, ref, image, bytes)
            with monkeypatch.context() as m:
                general(m)
                slow = build_record(spec, ref, image, bytes)
            assert fast == slow
            if isinstance(fast[0], TaskRecord):
                assert fast[0].to_bytes() == slow[0].to_bytes()
                assert fast[1].tally.read == fast[1].tally.written + sum(k for _, k in fast[1].tally.dropped)


def test_object_columns_read_and_compare_as_their_objects():
    objs = (BoxObject(1, "cat", 0.125, 0.25, 0.5, 0.75, 96.0, 0, 1), BoxObject(3, "z", 0.0, 0.5, 1.0, 1.0, 4.5, 1, 0))
    columns = ObjectColumns(
        [1, 3], ["cat", "z"], ([0.125, 0.0], [0.25, 0.5], [0.5, 1.0], [0.75, 1.0]), [96.0, 4.5], ([0, 1], [1, 0])
    )
    assert tuple(columns) == objs and columns == objs and objs == columns and columns[1] == objs[1]
    assert columns[:1] == objs[:1] and len(columns) == 2 and hash(columns) == hash(objs)
    assert columns != objs[:1]
    built = [
        TaskRecord.build("detection", b"x", format="jpeg", height=30, width=40, channels=3, filename="a.jpg", objects=o)
        for o in (objs, columns)
    ]
    assert built[0] == built[1] and built[0].to_bytes() == built[1].to_bytes()
    assert TaskRecord.from_bytes(built[1].to_bytes(), "detection").objects == columns
