"""`loaders.load` decodes image by image (`decode.image_map`); with a deterministic order its batches
are exactly those of decoding each batch at once (`decode.whole_batch`, what Grain runs), every task."""

import numpy as np
import pytest

import loaders
from tests.support.task_records import write_dataset

tf = pytest.importorskip("tensorflow")
images = pytest.importorskip("loaders.decode")


def _whole_batches(ds, d, batch_size, drop_remainder, deterministic, then):
    decode = images.whole_batch(d)
    return ds.map(lambda *x: then(decode(*x)))


def _elements(ds):
    """Each element's tensors, ragged ones as their values and row splits, as numpy arrays."""
    return [[t.numpy() for t in tf.nest.flatten(x, expand_composites=True)] for x in ds]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("per-image")
    splits, shards = {"train": 21, "validation": 7}, {"train": 3, "validation": 2}
    return {
        task: write_dataset(tmp / task, task, splits, shards, size_range=(40, 72))
        for task in ("multilabel", "detection", "segmentation")
    }


CASES = [
    ("multilabel", "train", {"training": True}),
    ("multilabel", "train", {"training": True, "output": "features", "remainder": "pad"}),
    ("multilabel", "validation", {"training": False, "eval_crop": "center"}),
    ("detection", "train", {"training": True}),
    ("detection", "train", {"training": True, "output": "features"}),
    ("detection", "validation", {"training": False, "letterbox": True}),
    ("segmentation", "train", {"training": True, "flip": True}),
    ("segmentation", "validation", {"training": False}),
]


@pytest.mark.parametrize(("task", "split", "options"), CASES)
def test_image_by_image_gives_the_batches_of_a_whole_batch_decode(datasets, monkeypatch, task, split, options):
    def make():
        return loaders.load(datasets[task], split, 4, (32, 40), deterministic=True, seed=7, **options)

    ours = _elements(make())
    monkeypatch.setattr(images, "image_map", _whole_batches)
    reference = _elements(make())
    assert len(ours) == len(reference) > 1
    for a, b in zip(ours, reference):
        _same(a, b)


def test_without_a_deterministic_order_every_record_is_still_read_once_an_epoch(datasets):
    ds = loaders.load(
        datasets["detection"], "validation", 3, (32, 40), training=False, deterministic=False, output="features"
    )
    names = [n for batch in ds for n in batch["image/filename"].numpy().tolist()]
    assert len(names) == len(set(names)) == 7
