"""Planner invariants: exact balance per shard and per class, stratified splits, caps, determinism."""

from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prep.core.errors import OptionsError, PlanError
from prep.core.layout import PlanOptions, largest_remainder, parse_split_fractions
from tests.support.reference_plan import Example, make_plan


def examples_for(counts, split=None, size=100):
    return [Example(f"c{label}/img{i:05d}.jpg", label, split, size) for label, n in enumerate(counts) for i in range(n)]


def check_balance(examples, plan, num_classes):
    """Asserts the balance promise for every split of `plan`."""
    for split in plan.splits():
        shards = [s for s in plan.shards if s.name.split == split]
        sizes = [len(s.members) for s in shards]
        assert max(sizes) - min(sizes) <= 1, (split, sizes)
        for label in range(num_classes):
            per_shard = [sum(1 for m in s.members if examples[m].label == label) for s in shards]
            assert max(per_shard) - min(per_shard) <= 1, (split, label, per_shard)
        assert [s.name.index for s in shards] == list(range(len(shards)))
        assert all(s.name.count == len(shards) for s in shards)


def members(plan):
    return sorted(m for s in plan.shards for m in s.members)


@pytest.mark.parametrize(
    "counts, shards, expected_sizes",
    [
        ([1, 7, 100, 1000], 8, [139, 139, 139, 139, 138, 138, 138, 138]),
        ([1, 7, 100, 1000], 3, [370, 369, 369]),
        ([5], 5, [1, 1, 1, 1, 1]),
        ([1, 1, 1], 2, [2, 1]),
        ([10, 0, 3], 4, [4, 3, 3, 3]),
        ([2, 2], 1, [4]),
    ],
)
def test_shard_sizes_table(counts, shards, expected_sizes):
    examples = examples_for(counts)
    plan = make_plan(examples, len(counts), PlanOptions(num_shards=shards))
    assert sorted((len(s.members) for s in plan.shards), reverse=True) == sorted(expected_sizes, reverse=True)
    check_balance(examples, plan, len(counts))
    assert members(plan) == list(range(len(examples)))


def test_more_shards_than_some_classes_have_images():
    examples = examples_for([1, 7, 100, 1000])
    plan = make_plan(examples, 4, PlanOptions(num_shards=16))
    check_balance(examples, plan, 4)
    per_class = Counter(examples[m].label for s in plan.shards for m in s.members)
    assert per_class == {0: 1, 1: 7, 2: 100, 3: 1000}


def test_more_shards_than_examples_is_an_error():
    with pytest.raises(PlanError, match="split 'train' has 3 example.*--num-shards 4"):
        make_plan(examples_for([3]), 1, PlanOptions(num_shards=4))


def test_shard_size_derives_count_but_never_more_than_examples():
    examples = examples_for([10, 10], size=1000)  # 20 kB in all
    assert len(make_plan(examples, 2, PlanOptions(shard_size=5000)).shards) == 4
    assert len(make_plan(examples, 2, PlanOptions(shard_size=1)).shards) == 20
    assert len(make_plan(examples, 2, PlanOptions(shard_size=10**9)).shards) == 1


def test_stratified_split_counts_per_class():
    examples = examples_for([10, 7, 1, 100])
    fractions = parse_split_fractions("train=0.8,validation=0.1,test=0.1")
    plan = make_plan(examples, 4, PlanOptions(num_shards=1, split_fractions=fractions))
    got = {s.name.split: Counter(examples[m].label for m in s.members) for s in plan.shards}
    assert got["train"] == {0: 8, 1: 5, 2: 1, 3: 80}  # 7: quotas 5.6, 0.7, 0.7 -> 5, 1, 1
    assert got["validation"] == {0: 1, 1: 1, 3: 10}
    assert got["test"] == {0: 1, 1: 1, 3: 10}
    assert [s.name.split for s in plan.shards] == ["train", "validation", "test"]


@pytest.mark.parametrize(
    "n, fractions, expected",
    [
        (10, "0.8,0.1,0.1", [8, 1, 1]),
        (7, "0.8,0.1,0.1", [5, 1, 1]),  # remainders .6 < .7 = .7
        (1, "0.8,0.1,0.1", [1, 0, 0]),
        (3, "0.5,0.5", [2, 1]),
        (0, "0.5,0.5", [0, 0]),
        (100, "0.333,0.333,0.334", [33, 33, 34]),
    ],
)
def test_largest_remainder_table(n, fractions, expected):
    assert largest_remainder(n, [Fraction(f) for f in fractions.split(",")]) == expected


def test_split_folders_are_kept_and_split_option_refused():
    examples = [Example(f"{s}/c{l}/{i}.jpg", l, s, 10) for s in ("train", "val") for l in range(2) for i in range(4)]
    plan = make_plan(examples, 2, PlanOptions(num_shards=2))
    assert plan.splits() == ["train", "val"]
    for shard in plan.shards:
        assert all(examples[m].split == shard.name.split for m in shard.members)
    with pytest.raises(PlanError, match="--split cannot be used"):
        make_plan(examples, 2, PlanOptions(split_fractions=parse_split_fractions("a=0.5,b=0.5")))


def test_max_per_class_caps_deterministically():
    examples = examples_for([3, 50, 200])
    plan = make_plan(examples, 3, PlanOptions(num_shards=4, max_per_class=20))
    kept = Counter(examples[m].label for s in plan.shards for m in s.members)
    assert kept == {0: 3, 1: 20, 2: 20}
    assert len(plan.capped) == 30 + 180
    assert make_plan(examples, 3, PlanOptions(num_shards=4, max_per_class=20)) == plan
    other = make_plan(examples, 3, PlanOptions(num_shards=4, max_per_class=20, seed=1))
    assert other.capped != plan.capped


def test_plan_ignores_input_order_and_seed_changes_order():
    examples = examples_for([5, 9, 13])
    shuffled = list(reversed(examples))
    a = make_plan(examples, 3, PlanOptions(num_shards=3))
    b = make_plan(shuffled, 3, PlanOptions(num_shards=3))
    paths = lambda plan, ex: [[ex[m].path for m in s.members] for s in plan.shards]
    assert paths(a, examples) == paths(b, shuffled)
    c = make_plan(examples, 3, PlanOptions(num_shards=3, seed=7))
    assert paths(c, examples) != paths(a, examples)


def test_shard_is_not_one_class_at_a_time():
    examples = examples_for([50, 50])
    (shard,) = make_plan(examples, 2, PlanOptions(num_shards=1)).shards
    labels = [examples[m].label for m in shard.members]
    changes = sum(1 for a, b in zip(labels, labels[1:]) if a != b)
    assert changes > 20


def test_empty_split_is_an_error():
    with pytest.raises(PlanError, match="split 'test' gets no examples"):
        make_plan(examples_for([2]), 1, PlanOptions(split_fractions=parse_split_fractions("train=0.9,test=0.1")))


@pytest.mark.parametrize(
    "text, message",
    [
        ("train=0.8,test=0.1", "must sum to 1"),
        ("train=0.5,train=0.5", "names 'train' twice"),
        ("train=0.5,Train=0.5", "names 'train' and 'Train', which differ only in case"),
        ("train", "is not NAME=FRACTION"),
        ("train=abc,test=1", "is not a number"),
        ("train=1.5,test=-0.5", r"must be in \(0, 1\]"),
        ("tr-ain=1", "letters, digits"),
    ],
)
def test_split_spec_errors(text, message):
    with pytest.raises(OptionsError, match=message):
        parse_split_fractions(text)


@st.composite
def datasets(draw):
    counts = draw(st.lists(st.integers(0, 40), min_size=1, max_size=6))
    if sum(counts) == 0:
        counts[0] = 1
    shards = draw(st.integers(1, sum(counts)))
    seed = draw(st.integers(0, 2**31))
    return counts, shards, seed


@settings(max_examples=150, deadline=None)
@given(datasets())
def test_property_every_example_once_and_balanced(data):
    counts, shards, seed = data
    examples = examples_for(counts)
    plan = make_plan(examples, len(counts), PlanOptions(num_shards=shards, seed=seed))
    assert members(plan) == list(range(len(examples)))
    check_balance(examples, plan, len(counts))
    assert len(plan.shards) == shards


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=5),
    st.integers(0, 1000),
    st.sampled_from(["train=0.8,validation=0.1,test=0.1", "a=0.5,b=0.5", "x=0.7,y=0.3"]),
)
def test_property_stratified_split_is_proportional_and_balanced(counts, seed, spec):
    examples = examples_for(counts)
    fractions = parse_split_fractions(spec)
    try:
        plan = make_plan(examples, len(counts), PlanOptions(num_shards=1, seed=seed, split_fractions=fractions))
    except PlanError as exc:
        assert "gets no examples" in str(exc)
        return
    assert members(plan) == list(range(len(examples)))
    for label, n in enumerate(counts):
        expected = largest_remainder(n, [f for _, f in fractions])
        got = [
            sum(1 for s in plan.shards if s.name.split == name for m in s.members if examples[m].label == label)
            for name, _ in fractions
        ]
        assert got == expected
        for name, fraction in fractions:
            assert abs(got[[n for n, _ in fractions].index(name)] - n * fraction) < 1
    check_balance(examples, plan, len(counts))


@settings(max_examples=300, deadline=None)
@given(st.fractions(min_value=Fraction(1, 10**9), max_value=1, max_denominator=10**9))
def test_the_manifest_records_split_fractions_exactly(fraction):
    from prep.core.config import fraction_text

    assert Fraction(fraction_text(fraction)) == fraction


def test_fractions_that_plan_differently_are_recorded_differently():
    # "%g" once recorded both as 0.333333 each, so --resume took one for the other.
    from prep.core.config import ConvertConfig

    def recorded(text):
        return ConvertConfig(
            "s", "o", plan=PlanOptions(split_fractions=parse_split_fractions(text))
        ).manifest_options()["split"]

    assert recorded("a=1/3,b=1/3,c=1/3") == "a=1/3,b=1/3,c=1/3"
    assert recorded("a=0.3333333,b=0.3333333,c=0.3333334") == "a=0.3333333,b=0.3333333,c=0.3333334"
    assert recorded("train=0.8,validation=0.1,test=0.1") == "train=0.8,validation=0.1,test=0.1"
