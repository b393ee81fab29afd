"""stratify: strata, determinism, balance through the real layout, and the bench's functions."""

import sys
from pathlib import Path

import numpy as np
import pytest

from prep.core.annotations import stratify
from prep.core.annotations.strata import strata_of

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "bench"))
import stratify_bench  # noqa: E402


def test_stratum_is_the_rarest_label_ties_by_id():
    images = [("a", (0, 1)), ("b", (0, 2)), ("c", (1, 2, 0)), ("d", ()), ("e", (3, 0)), ("f", (2, 2))]
    # counts: 0 -> 4, 1 -> 2, 2 -> 3, 3 -> 1
    assert strata_of(images, 4) == [1, 2, 1, None, 3, 2]
    assert [s for s, _ in stratify(images, 4, seed=0)] == [1, 2, 1, None, 3, 2]
    assert strata_of([("a", (1, 0)), ("b", (0, 1))], 2) == [0, 0]  # equal counts: the smaller id


def test_label_out_of_range():
    with pytest.raises(ValueError, match="b: label id 5 is outside"):
        stratify([("a", (0,)), ("b", (5,))], 3, 0)


def test_deterministic_and_keys_order_each_stratum():
    images = stratify_bench.make_dataset(600, 12, seed=3)
    one = stratify(images, 12, seed=1)
    assert one == stratify(images, 12, seed=1)
    assert one != stratify(images, 12, seed=2)
    by_stratum = {}
    for stratum, key in one:
        by_stratum.setdefault(stratum, []).append(key)
    for stratum, keys in by_stratum.items():
        assert len(set(keys)) == len(keys)  # a total order inside the stratum
        if stratum is not None:
            ranks = sorted(int.from_bytes(k, "big") for k in keys)
            assert ranks == list(range(len(keys)))


@pytest.mark.parametrize("locate", [None, lambda stratum, rank: ("train" if rank % 5 else "test", rank % 3)])
def test_input_order_does_not_matter(locate):
    images = stratify_bench.make_dataset(300, 10, seed=4)
    got = dict(zip((p for p, _ in images), stratify(images, 10, 0, locate)))
    reordered = images[::-1]
    assert dict(zip((p for p, _ in reordered), stratify(reordered, 10, 0, locate))) == got


@pytest.mark.parametrize("shards, informed", [(4, True), (10, True), (16, True), (4, False), (16, False)])
def test_balance_through_the_layout_beats_random(shards, informed):
    images = stratify_bench.make_dataset(3000, 20, seed=0)
    y = stratify_bench.indicator(images, 20)
    planned, peak, _ = stratify_bench.plan_ours(images, 20, shards, seed=0, informed=informed, trace=shards == 4)
    ours, _, spread = stratify_bench.deviations(planned["train"], y, shards)
    rand, _, _ = stratify_bench.deviations(stratify_bench.plan_random(3000, shards, 0), y, shards)
    assert spread <= 1 and (peak > 0) == (shards == 4)
    assert ours * (4 if informed else 2) < rand, (ours, rand)
    # the stratum label itself is exact: every stratum's images differ by at most one between shards
    strata = [s for s, _ in stratify(images, 20, 0)]
    for stratum in set(strata) - {None}:
        members = [i for i, s in enumerate(strata) if s == stratum]
        counts = np.bincount(planned["train"][members], minlength=shards)
        assert counts.max() - counts.min() <= 1


def test_bench_runs_small():
    rows = stratify_bench.run(800, 10, 4, seed=0, split="train=0.75,test=0.25", iterstrat=False)
    names = [r["method"] for r in rows]
    assert names[0].startswith("ours") and any(n.startswith("random") for n in names)
    assert all(r["max_dev"] >= r["mean_dev"] >= 0 for r in rows)


def test_split_fractions_are_stratified_with_locate():
    from prep.core.layout import parse_split_fractions

    images = stratify_bench.make_dataset(4000, 20, seed=1)
    y = stratify_bench.indicator(images, 20)
    fractions = parse_split_fractions("train=0.8,test=0.2")
    planned, _, _ = stratify_bench.plan_ours(images, 20, 4, seed=0, split=fractions, trace=False)
    train = planned["train"] >= 0
    assert train.sum() == pytest.approx(3200, abs=20) and not (train & (planned["test"] >= 0)).any()
    off = np.abs(y[train].sum(axis=0) - 0.8 * y.sum(axis=0)).max()
    shuffled = np.random.default_rng(0).permutation(4000)[: int(train.sum())]
    off_random = np.abs(y[shuffled].sum(axis=0) - 0.8 * y.sum(axis=0)).max()
    assert off * 3 < off_random, (off, off_random)


def test_capped_ranks_are_a_cell_too():
    images = [(f"{i}", (0,) if i % 3 else (0, 1)) for i in range(30)]  # stratum 1: 10 images, stratum 0: 20
    got = stratify(images, 2, seed=0, locate=lambda stratum, rank: None if rank >= 5 else rank % 2)
    ranks = sorted(int.from_bytes(k, "big") for s, k in got if s == 0)
    assert ranks == list(range(20))
