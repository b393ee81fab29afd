"""The loaders' pure core: balanced ranges per pipeline, epoch sizes, class weights, options. No TensorFlow."""

import pathlib
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.epoch import Range, bucketed_steps, epoch_size, pipeline_ranges, records_per_pipeline, shard_order
from loaders.load_options import LoadOptions
from loaders.weights import acceptance_probabilities, balanced_weights
from prep.core.errors import LoaderError

ROOT = str(pathlib.Path(__file__).resolve().parents[3])


def reads(counts, pipeline, n, remainder="drop", order=None, multiple=1):
    """(shard, record index, padding) of every record pipeline `pipeline` reads."""
    return [
        (r.shard, r.skip + k, r.padding)
        for r in pipeline_ranges(counts, pipeline, n, remainder, order, multiple)
        for k in range(r.take)
    ]


@pytest.mark.parametrize(
    "counts, n, expected",
    [
        # 3 shards, 2 pipelines: 31 // 2 = 15 each; one shard is split between them.
        ([11, 10, 10], 2, [[Range(0, 0, 11), Range(1, 0, 4)], [Range(1, 4, 6), Range(2, 0, 9)]]),
        # fewer shards than pipelines: one shard read by three pipelines, 3 records each.
        ([10], 3, [[Range(0, 0, 3)], [Range(0, 3, 3)], [Range(0, 6, 3)]]),
        # 2 shards, 4 pipelines, 7 records: 1 each, 3 dropped.
        ([4, 3], 4, [[Range(0, 0, 1)], [Range(0, 1, 1)], [Range(0, 2, 1)], [Range(0, 3, 1)]]),
        ([5, 5], 1, [[Range(0, 0, 5), Range(1, 0, 5)]]),
    ],
)
def test_ranges_table(counts, n, expected):
    assert [list(pipeline_ranges(counts, i, n)) for i in range(n)] == expected


@pytest.mark.parametrize(
    "counts, n, expected",
    [
        # pad: 31 -> 16 + 16, the last place is record 0 of shard 0 again, flagged.
        ([11, 10, 10], 2, [[Range(0, 0, 11), Range(1, 0, 5)], [Range(1, 5, 5), Range(2, 0, 10), Range(0, 0, 1, True)]]),
        # pad with more pipelines than records: 2 records, 5 pipelines, 1 each.
        (
            [2],
            5,
            [
                [Range(0, 0, 1)],
                [Range(0, 1, 1)],
                [Range(0, 0, 1, True)],
                [Range(0, 1, 1, True)],
                [Range(0, 0, 1, True)],
            ],
        ),
    ],
)
def test_padded_ranges_table(counts, n, expected):
    assert [list(pipeline_ranges(counts, i, n, "pad")) for i in range(n)] == expected


def test_padding_fills_whole_steps():
    # 31 records, 2 pipelines, steps of 4: 16 each (one padding record); steps of 6: 18 each (5 padding).
    assert [list(pipeline_ranges([11, 10, 10], i, 2, "pad", multiple=6)) for i in range(2)] == [
        [Range(0, 0, 11), Range(1, 0, 7)],
        [Range(1, 7, 3), Range(2, 0, 10), Range(0, 0, 5, True)],
    ]
    # 3 records, 1 pipeline, steps of 8: the split is read again, twice over, as padding.
    assert list(pipeline_ranges([3], 0, 1, "pad", multiple=8)) == [
        Range(0, 0, 3),
        Range(0, 0, 3, True),
        Range(0, 0, 2, True),
    ]


def test_shuffled_order_moves_the_cut_but_keeps_counts():
    counts = [11, 10, 10]
    order = shard_order(3, seed=5)
    assert sorted(order) == [0, 1, 2] and order == shard_order(3, seed=5)
    assert {shard_order(3, seed=s) for s in range(20)} == {
        (0, 1, 2),
        (0, 2, 1),
        (1, 0, 2),
        (1, 2, 0),
        (2, 0, 1),
        (2, 1, 0),
    }
    ranges = [pipeline_ranges(counts, i, 2, order=order) for i in range(2)]
    assert ranges[0][0].shard == order[0]
    assert [sum(r.take for r in rs) for rs in ranges] == [15, 15]


def test_shard_order_is_the_same_in_another_process():
    code = "from loaders.epoch import shard_order; print(shard_order(50, 123456789))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": ROOT, "PYTHONHASHSEED": "17"},
    ).stdout
    assert out.strip() == str(shard_order(50, 123456789))


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    n=st.integers(1, 20),
    pad=st.booleans(),
    seed=st.none() | st.integers(0, 2**63 - 1),
    multiple=st.integers(1, 9),
)
def test_balance_invariants(counts, n, pad, seed, multiple):
    total = sum(counts)
    remainder = "pad" if pad else "drop"
    if total == 0 or (total < n and not pad):
        with pytest.raises(LoaderError):
            pipeline_ranges(counts, 0, n, remainder)
        return
    order = shard_order(len(counts), seed)
    multiple = multiple if pad else 1
    per = [reads(counts, i, n, remainder, order, multiple) for i in range(n)]
    sizes = [len(p) for p in per]
    assert len(set(sizes)) == 1  # every pipeline the same count
    per_pipeline = -(-total // n)  # ceil
    assert sizes[0] == (-(-per_pipeline // multiple) * multiple if pad else total // n)
    real = [(s, k) for p in per for s, k, padding in p if not padding]
    padding = [(s, k) for p in per for s, k, is_pad in p if is_pad]
    assert len(real) == len(set(real))  # no record twice, except padding
    assert all(0 <= k < counts[s] for s, k in real + padding)
    everything = {(s, k) for s, c in enumerate(counts) for k in range(c)}
    if pad:
        assert set(real) == everything and len(padding) == n * sizes[0] - total <= n - 1 + n * (multiple - 1)
    else:
        assert not padding and len(everything) - len(real) == total % n <= n - 1
    for i in range(n):  # a pipeline never reads a record twice, and its ranges are non-empty
        assert all(r.take >= 1 for r in pipeline_ranges(counts, i, n, remainder, order, multiple))
        assert len(per[i]) == len(set(per[i])) or pad and sizes[0] > total


@pytest.mark.parametrize(
    "records, batch, n, r, drop, remainder, steps, per_pipeline_batches, dropped, padded",
    [
        (31, 2, 1, 2, True, "drop", 7, 14, 3, 0),  # MirroredStrategy, 2 devices
        (31, 2, 1, 3, True, "drop", 5, 15, 1, 0),  # MirroredStrategy, 3 devices
        (31, 2, 2, 1, True, "drop", 7, 7, 3, 0),  # 2 workers: 15 each, 7 batches, 1 + 2x1 dropped
        (31, 2, 2, 1, False, "pad", 8, 8, 0, 1),  # evaluation, padded: 16 each
        (31, 4, 2, 1, False, "drop", 4, 4, 1, 0),  # evaluation: 15 each -> 3 full + 1 partial batch
        (10, 3, 4, 1, True, "pad", 1, 1, 0, 2),  # more pipelines than shards or records per shard
        (31, 8, 1, 2, False, "pad", 2, 4, 0, 1),  # padded evaluation, 2 replicas: 32 = 2 full steps of 16
        (31, 2, 1, 3, False, "pad", 6, 18, 0, 5),  # padded evaluation, 3 replicas: 36 = 6 full steps of 6
        (100, 8, 1, 1, False, "drop", 13, 13, 0, 0),
    ],
)
def test_epoch_size_table(records, batch, n, r, drop, remainder, steps, per_pipeline_batches, dropped, padded):
    size = epoch_size(records, batch, n, r, drop, remainder)
    assert (size.steps, size.batches_per_pipeline, size.dropped, size.padded) == (
        steps,
        per_pipeline_batches,
        dropped,
        padded,
    )
    assert size.global_batch_size == batch * n * r


def test_batch_larger_than_a_replicas_data_is_a_clear_error():
    with pytest.raises(
        LoaderError,
        match=r"a batch is larger than a replica's data: each of 2 input pipelines "
        r"reads 15 record\(s\) per epoch, fewer than one step's 16 "
        r"\(batch 8 x 2 replicas\); use a smaller batch size",
    ):
        epoch_size(31, 8, 2, 2)
    with pytest.raises(LoaderError, match="fewer than the 4 input pipelines; use remainder='pad'"):
        records_per_pipeline(3, 4)


def test_bucketed_steps_are_guaranteed():
    # 100 records, 3 buckets, batch 8: worst case leaves 7 in each bucket -> (100 - 21) / 8 -> 10 full batches
    assert bucketed_steps(100, 8, 3) == 10
    assert bucketed_steps(100, 8, 3, replicas_per_pipeline=3) == 3
    with pytest.raises(LoaderError, match="cannot guarantee one full step"):
        bucketed_steps(20, 8, 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=5), st.integers(1, 8))
def test_bucketed_steps_is_a_lower_bound(bucket_counts, batch):
    full = sum(c // batch for c in bucket_counts)
    try:
        steps = bucketed_steps(sum(bucket_counts), batch, len(bucket_counts))
    except LoaderError:
        return
    assert steps <= full


def test_balanced_class_weights():
    # samples/shapes train-like counts
    weights = balanced_weights([60, 48, 40, 32, 24])
    assert weights == pytest.approx({0: 204 / 300, 1: 204 / 240, 2: 204 / 200, 3: 204 / 160, 4: 204 / 120})
    assert sum(w * n for w, n in zip(weights.values(), [60, 48, 40, 32, 24])) == pytest.approx(204)
    assert balanced_weights([10, 0, 30]) == {0: 2.0, 1: 0.0, 2: 40 / 60}
    assert acceptance_probabilities([10, 0, 40]) == [1.0, 0.0, 0.25]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"image_size": (0, 4)}, "image_size must be positive, got (0, 4)"),
        ({"image_size": "big"}, "image_size must be (height, width), got 'big'"),
        ({"remainder": "wrap"}, "remainder must be one of drop, pad, got 'wrap'"),
        ({"normalize": "zscore"}, "normalize must be one of unit, symmetric, none, got 'zscore'"),
        ({"eval_crop": "corner"}, "eval_crop must be one of center, resize, got 'corner'"),
        ({"area_range": (0.5, 0.1)}, "area_range must satisfy 1e-06 <= low <= high <= 1.0, got (0.5, 0.1)"),
        ({"aspect_buckets": (1.0, 0.5)}, "aspect_buckets must be increasing positive ratios, got (1.0, 0.5)"),
        ({"augment": 3}, "augment must be callable, got 3"),
        ({"rebalance": True, "training": False}, "rebalance=True is for training"),
        ({"cycle_length": 0}, "cycle_length must be >= 1, got 0"),
        ({"seed": -1}, "seed must be an int in [0, 2**63), got -1"),
        # Wrong types: "no" would be a true flag, and repeat="no" an endless dataset.
        ({"repeat": "no"}, "repeat must be True or False, got 'no'"),
        ({"training": 1}, "training must be True or False, got 1"),
        ({"flip": "no"}, "flip must be True, False or None, got 'no'"),
        ({"shuffle_files": "yes"}, "shuffle_files must be True, False or None, got 'yes'"),
        ({"cycle_length": "8"}, "cycle_length must be an int, got '8'"),
        ({"threads": None}, "threads must be an int, got None"),
        ({"shuffle_buffer": 2.5}, "shuffle_buffer must be an int or None, got 2.5"),
        ({"central_fraction": "0.5"}, "central_fraction must be a number, got '0.5'"),
        ({"cache": 5}, "cache must be False, True or a file name prefix, got 5"),
    ],
)
def test_bad_options_name_the_value(kwargs, message):
    with pytest.raises(LoaderError) as info:
        LoadOptions(**kwargs)
    assert message in str(info.value)


def test_numpy_numbers_and_paths_are_accepted():
    import pathlib

    import numpy as np

    opts = LoadOptions(
        cycle_length=np.int64(4),
        shuffle_buffer=np.int32(16),
        central_fraction=np.float32(0.5),
        cache=pathlib.Path("/tmp/c"),
        flip=None,
    )
    assert opts.cycle_length == 4 and opts.cache == pathlib.Path("/tmp/c")


def test_option_defaults_follow_training():
    train, evaluation = LoadOptions().resolved(), LoadOptions(training=False).resolved()
    assert (train.shuffle_files, train.shuffle_buffer, train.deterministic, train.drop_remainder, train.flip) == (
        True,
        1024,
        False,
        True,
        True,
    )
    assert (
        evaluation.shuffle_files,
        evaluation.shuffle_buffer,
        evaluation.deterministic,
        evaluation.drop_remainder,
        evaluation.flip,
    ) == (False, 0, True, False, False)
    buckets = LoadOptions(image_size=(64, 64), aspect_buckets=(0.5, 1.0, 2.0))
    assert buckets.bucket_sizes() == ((91, 45), (64, 64), (45, 91))
    assert buckets.bucket_boundaries() == pytest.approx((2**-0.5, 2**0.5))


def test_importing_loaders_does_not_import_tensorflow():
    code = "import sys, loaders; loaders.LoadOptions(); print('tensorflow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": ROOT}
    ).stdout
    assert out.strip() == "False"
