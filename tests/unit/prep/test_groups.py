"""prep.core.groups (decisions on duplicate groups) and the pinned groups of prep.core.layout."""

from __future__ import annotations

from fractions import Fraction

import pytest

from prep.core.errors import OptionsError
from prep.core.groups import DedupeOptions, Member, balance_pins, decide, merge_units, pin_split, summarize, user_group
from prep.core.label_file import list_label_file
from prep.core.layout import PlanOptions, largest_remainder, make_layout, parse_split_fractions

FRACTIONS = (("train", Fraction(1, 2)), ("validation", Fraction(1, 4)), ("test", Fraction(1, 4)))


def member(item, path, label=0, split="", sha="a" * 64, user=""):
    return Member(item, path, label, ("cat", "dog")[label], split, sha, user)


def test_options_are_checked_with_the_option_named():
    with pytest.raises(OptionsError, match="--duplicates must be one of keep, drop, off, got 'x'"):
        DedupeOptions(duplicates="x")
    with pytest.raises(OptionsError, match="--group-pattern"):
        DedupeOptions(group_pattern="(")
    with pytest.raises(OptionsError, match="--conflicts acts on duplicate groups"):
        DedupeOptions(duplicates="off", conflicts="keep")
    assert DedupeOptions().manifest_options() == {}
    assert DedupeOptions(duplicates="drop").manifest_options() == {"duplicates": "drop"}


def test_group_by_is_checked_and_recorded():
    with pytest.raises(OptionsError, match="--group-by .* and --group-pattern .* pass one of them"):
        DedupeOptions(group_by="patient", group_pattern="p")
    with pytest.raises(OptionsError, match="--group-by is empty"):
        DedupeOptions(group_by=" ")
    assert DedupeOptions(group_by="patient").manifest_options() == {"group_by": "patient"}
    assert DedupeOptions(group_by="patient").user_groups and not DedupeOptions().user_groups


def test_group_by_reads_the_column_of_the_label_file(tmp_path):
    (tmp_path / "l.csv").write_text("path,label,patient\na.jpg,cat,P1\nb.jpg,dog, \nc.jpg,cat,P1\n")
    refs = list_label_file(str(tmp_path), str(tmp_path / "l.csv"), group_by="patient").refs
    assert [(r.path, r.group) for r in refs] == [("a.jpg", "P1"), ("b.jpg", None), ("c.jpg", "P1")]
    assert refs[1].fields() == ["b.jpg", "dog", None]  # no group: staged as before the option
    assert list_label_file(str(tmp_path), str(tmp_path / "l.csv")).refs[0].group is None
    (tmp_path / "l.jsonl").write_text(
        '{"path": "a.jpg", "label": "cat", "patient": 7}\n{"path": "b.jpg", "label": "cat"}\n'
    )
    refs = list_label_file(str(tmp_path), str(tmp_path / "l.jsonl"), group_by="patient").refs
    assert [r.group for r in refs] == ["7", None]


def test_duplicates_merge_the_user_groups_they_link():
    units = merge_units([["P3", "P1"], ["P7"], ["P3", "P9"], ["P5", "P8"]])
    assert units == {"P1": "P1", "P3": "P1", "P9": "P1", "P7": "P7", "P5": "P5", "P8": "P5"}
    assert merge_units([]) == {}
    # decide pins the group by its unit, whatever its own members' user groups
    members = [member(1, "a.jpg", user="P3"), member(2, "b.jpg", user="P9")]
    decisions, _ = decide(members, DedupeOptions(), 0, FRACTIONS, True, unit="P1")
    assert {d.pin for d in decisions} == {pin_split(0, "P1", FRACTIONS)}


def test_user_group_is_the_first_group_or_the_whole_match():
    assert user_group("a/patient12_x.jpg", r"patient(\d+)") == "12"
    assert user_group("a/patient12_x.jpg", r"patient\d+") == "patient12"
    assert user_group("a/x.jpg", r"patient\d+") is None
    assert user_group("a/x.jpg", None) is None


def test_pins_follow_the_fractions_and_the_seed():
    pins = [pin_split(0, f"unit{i}", FRACTIONS) for i in range(4000)]
    assert abs(pins.count("train") / 4000 - 0.5) < 0.03 and abs(pins.count("test") / 4000 - 0.25) < 0.03
    assert pins == [pin_split(0, f"unit{i}", FRACTIONS) for i in range(4000)]
    assert pins != [pin_split(1, f"unit{i}", FRACTIONS) for i in range(4000)]


def test_keep_pins_the_whole_group_and_rejects_nothing():
    members = [member(3, "b.jpg"), member(1, "a.jpg", sha="b" * 64)]
    decisions, line = decide(members, DedupeOptions(), 0, FRACTIONS, True)
    assert {d.item for d in decisions} == {1, 3} and all(d.reject is None for d in decisions)
    assert len({d.pin for d in decisions}) == 1 and decisions[0].pin == pin_split(0, "a.jpg", FRACTIONS)
    assert line["kind"] == "near" and [m["path"] for m in line["members"]] == ["a.jpg", "b.jpg"]
    assert decide(members, DedupeOptions(), 0, None, True)[0][0].pin == ""


def test_drop_keeps_the_first_by_path():
    members = [member(5, "c.jpg"), member(4, "a.jpg"), member(9, "b.jpg")]
    decisions, _ = decide(members, DedupeOptions(duplicates="drop"), 0, None, True)
    got = {d.item: d.reject for d in decisions}
    assert got[4] is None
    assert got[9].reason == got[5].reason == "duplicate_of" and got[9].detail == got[5].detail == "a.jpg"


def test_a_conflict_rejects_every_member_naming_the_others_unless_kept():
    members = [member(1, "a.jpg", 0), member(2, "b.jpg", 1), member(3, "c.jpg", 0)]
    decisions, line = decide(members, DedupeOptions(duplicates="drop", conflicts="reject"), 0, None, True)
    assert all(d.reject.reason == "label_conflict" for d in decisions) and line["conflict"]
    assert decisions[0].reject.detail == "a duplicate of b.jpg (dog), c.jpg (cat) with another label"
    kept, _ = decide(members, DedupeOptions(conflicts="keep"), 0, None, True)
    assert all(d.reject is None for d in kept)
    other_task, _ = decide(members, DedupeOptions(), 0, None, False)  # strata, not labels: never a conflict
    assert all(d.reject is None for d in other_task)


def test_the_default_rejects_an_exact_conflict():
    """Same stored bytes under two labels: rejected by default (reject-exact), as by reject."""
    members = [member(1, "a.jpg", 0), member(2, "b.jpg", 1)]
    assert DedupeOptions().conflicts == "reject-exact"
    decisions, line = decide(members, DedupeOptions(), 0, None, True)
    assert [(d.reject.reason, d.reject.detail) for d in decisions] == [
        ("label_conflict", "a duplicate of b.jpg (dog) with another label"),
        ("label_conflict", "a duplicate of a.jpg (cat) with another label"),
    ]
    assert line["kind"] == "exact" and line["conflict"] and summarize([line])["rejected"] == 2
    assert decide(members, DedupeOptions(conflicts="reject"), 0, None, True)[0] == decisions


def test_the_default_reports_a_near_conflict_and_reject_rejects_it():
    """Near matches only (different sha256) under two labels: reported by default, not rejected; --conflicts
    reject rejects the whole group, keep keeps it."""
    members = [member(1, "a.jpg", 0, sha="a" * 64), member(2, "b.jpg", 1, sha="b" * 64)]
    decisions, line = decide(members, DedupeOptions(), 0, FRACTIONS, True)
    assert all(d.reject is None for d in decisions) and len({d.pin for d in decisions}) == 1
    assert line["kind"] == "near" and line["conflict"] and [m["rejected"] for m in line["members"]] == [None, None]
    counts = summarize([line])
    assert counts["conflict_groups"] == 1 and counts["rejected"] == 0
    rejected, line = decide(members, DedupeOptions(conflicts="reject"), 0, None, True)
    assert [d.reject.reason for d in rejected] == ["label_conflict"] * 2 and summarize([line])["rejected"] == 2
    assert all(d.reject is None for d in decide(members, DedupeOptions(conflicts="keep"), 0, None, True)[0])
    assert DedupeOptions(conflicts="reject").manifest_options() == {"conflicts": "reject"}


def test_the_default_rejects_only_the_exact_copies_of_a_mixed_group():
    """A near group holding exact copies under two labels: those copies are rejected, naming each other only;
    the near member is kept, and --duplicates drop and --cross-split remove act on the members left."""
    members = [
        member(1, "a.jpg", 0, sha="a" * 64, split="train"),
        member(2, "b.jpg", 1, sha="a" * 64, split="train"),
        member(3, "c.jpg", 1, sha="c" * 64, split="test"),
        member(4, "d.jpg", 1, sha="d" * 64, split="test"),
    ]
    decisions, line = decide(members, DedupeOptions(), 0, None, True)
    got = {d.item: d.reject for d in decisions}
    assert got[1].detail == "a duplicate of b.jpg (dog) with another label" and got[2].reason == "label_conflict"
    assert got[3] is None and got[4] is None and line["kind"] == "near" and line["conflict"]
    dropped = {d.item: d.reject for d in decide(members, DedupeOptions(duplicates="drop"), 0, None, True)[0]}
    assert dropped[3] is None and (dropped[4].reason, dropped[4].detail) == ("duplicate_of", "c.jpg")
    removed = {d.item: d.reject for d in decide(members, DedupeOptions(cross_split="remove"), 0, None, True)[0]}
    assert removed[3] is None and removed[4] is None  # the members left are all in one split
    assert all(d.reject for d in decide(members, DedupeOptions(conflicts="reject"), 0, None, True)[0])


def test_cross_split_remove_keeps_train_then_the_first_split_by_name():
    members = [
        member(1, "test/a.jpg", split="test"),
        member(2, "val/a.jpg", split="validation"),
        member(3, "train/a.jpg", split="train"),
    ]
    decisions, line = decide(members, DedupeOptions(cross_split="remove"), 0, None, True)
    got = {d.item: d.reject for d in decisions}
    assert got[3] is None and got[1].reason == got[2].reason == "cross_split_duplicate"
    assert got[1].detail == "a duplicate of train/a.jpg in split 'train'"
    report, _ = decide(members, DedupeOptions(), 0, None, True)
    assert all(d.reject is None for d in report)
    counts = summarize([line])
    assert counts["cross_split_groups"] == 1 and counts["cross_split_images"] == 2 and counts["rejected"] == 2


def check_balance(layout, sizes, options):
    """Every rank of every group placed once; positions of a split cover 0..n-1 once."""
    positions = {}
    for group in sizes:
        for rank in range(layout.kept[group]):
            split, _ = layout.locate(group, rank)
            if len(group) == 3:
                assert split == group[2]
            seg = next(s for s in layout.segments[group] if s.start <= rank < s.end)
            positions.setdefault(split, []).append(seg.position + rank - seg.start)
    for s in layout.splits:
        assert sorted(positions.get(s.name, [])) == list(range(s.examples))


def test_pinned_groups_land_in_their_split_and_the_free_ones_fill_the_fractions():
    options = PlanOptions(split_fractions=FRACTIONS, num_shards=2)
    sizes = {(None, 0): 30, (None, 0, "test"): 6, (None, 1): 40, (None, 1, "train"): 4}
    layout = make_layout(sizes, 2, options, 100)
    check_balance(layout, sizes, options)
    per_class = {}
    for group, n in sizes.items():
        for rank in range(n):
            split, _ = layout.locate(group, rank)
            per_class[split, group[1]] = per_class.get((split, group[1]), 0) + 1
    for label, total in ((0, 36), (1, 44)):  # exact largest-remainder shares: the pinned ones fit inside them
        assert [per_class.get((s, label), 0) for s, _ in FRACTIONS] == largest_remainder(
            total, [f for _, f in FRACTIONS]
        )


def test_a_pinned_group_larger_than_its_share_takes_from_the_other_splits():
    options = PlanOptions(split_fractions=FRACTIONS)
    sizes = {(None, 0): 10, (None, 0, "test"): 8}
    layout = make_layout(sizes, 1, options, 100)
    check_balance(layout, sizes, options)
    assert {s.name: s.examples for s in layout.splits} == {"train": 9, "validation": 1, "test": 8}


def test_group_by_survives_the_multilabel_listing(tmp_path):
    from prep.core.task_inputs import multilabel_listing

    (tmp_path / "l.csv").write_text("path,label,patient\na.jpg,cat|dog,P1\nb.jpg,dog,P2\nc.jpg,cat,\n")
    listing = list_label_file(str(tmp_path), str(tmp_path / "l.csv"), group_by="patient")
    refs = multilabel_listing(listing, seed=0).refs
    assert {r.path: r.group for r in refs} == {"a.jpg": "P1", "b.jpg": "P2", "c.jpg": None}


EIGHTY = parse_split_fractions("train=0.8,validation=0.2")


def test_balance_pins_sends_the_largest_group_to_the_largest_split():
    pins = balance_pins([("blank/0.png", {"(none)": 148}), ("a/1.png", {"cat": 2})], EIGHTY)
    assert pins["blank/0.png"] == "train"


def test_balance_pins_splits_each_labels_pinned_images_by_the_fractions():
    groups = [(f"g{i:02d}", {"cat": 2}) for i in range(10)] + [(f"h{i:02d}", {"dog": 3}) for i in range(5)]
    pins = balance_pins(groups, EIGHTY)
    assert sum(pins[f"g{i:02d}"] == "validation" for i in range(10)) == 2  # 4 of 20 cat images
    assert sum(pins[f"h{i:02d}"] == "validation" for i in range(5)) == 1  # 3 of 15 dog images
    assert balance_pins(list(reversed(groups)), EIGHTY) == pins  # whatever order the runner gives


def test_balance_pins_skips_groups_with_no_member_kept():
    assert balance_pins([("x", {}), ("y", {"cat": 0})], EIGHTY) == {}


@pytest.mark.parametrize("size", [2, 11, 12, 13, 40])
def test_a_conflict_names_the_first_ten_others_and_counts_the_rest(size):
    """Each member of a conflicting group is rejected naming the other members in path order, ten at most,
    and how many more; a member among the first ten is skipped, not counted."""
    members = [member(i, f"p{i:02d}.jpg", label=i % 2) for i in range(size)]
    decisions, _ = decide(reversed(members), DedupeOptions(), 0, None, True)
    for d in decisions:
        others = [f"p{i:02d}.jpg ({('cat', 'dog')[i % 2]})" for i in range(size) if i != d.item]
        named = ", ".join(others[:10]) + (f" and {len(others) - 10} more" if len(others) > 10 else "")
        assert d.reject.detail == f"a duplicate of {named} with another label"
