"""`loaders.grain` on converted datasets: the batches of `loaders.load` in evaluation, a global shuffle in
training, exact resume mid-epoch, worker processes, Keras 3 `fit` and a plain JAX training loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

import loaders
import loaders.grain as lg
from prep.core.errors import LoaderError
from tests.support import task_datasets
from tests.support.imagegen import write_dirty_tree
from tests.support.shards import convert_with_cli

SIZE = (16, 16)
FORMATS = ("tfrecord", "array_record")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain")
    write_dirty_tree(root / "src", {"ant": 23, "bee": 31, "cat": 12}, size=(20, 14))
    args = ("--split", "train=0.7,validation=0.3", "--num-shards", 3)
    return {
        "tfrecord": convert_with_cli(root / "src", root / "tf", *args),
        "array_record": convert_with_cli(root / "src", root / "ar", *args, "--file-format", "array_record"),
    }


def flat(batch) -> list[np.ndarray]:
    """The arrays of a batch: a tuple of arrays, or of arrays and dicts of them (detection)."""
    if isinstance(batch, dict):
        return [a for key in sorted(batch) for a in flat(batch[key])]
    if isinstance(batch, (tuple, list)):
        return [a for part in batch for a in flat(part)]
    return [np.asarray(batch)]


def assert_same_batches(a: list, b: list) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        fx, fy = flat(x), flat(y)
        assert len(fx) == len(fy)
        for u, v in zip(fx, fy):
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("file_format", FORMATS)
def test_evaluation_gives_the_batches_of_loaders_load(datasets, file_format):
    out = str(datasets[file_format])
    expected = list(loaders.load(out, "train", 4, SIZE, training=False).as_numpy_iterator())
    got = list(lg.dataset(out, "train", 4, SIZE, training=False))
    assert_same_batches(got, expected)
    assert got[-1][0].shape[0] == 47 % 4  # the partial last batch, as loaders.load keeps it


@pytest.mark.parametrize("file_format", FORMATS)
def test_training_shuffles_the_whole_split_each_epoch_and_resumes_exactly(datasets, file_format):
    out = str(datasets[file_format])
    steps = lg.epoch_batches(out, "train", 4)
    assert steps == 47 // 4
    ds = lg.dataset(out, "train", 4, SIZE, num_epochs=3, seed=5)
    uninterrupted = list(ds)
    assert len(uninterrupted) == 3 * steps and all(b[0].shape == (4, *SIZE, 3) for b in uninterrupted)
    assert all(b[0].dtype == np.float32 and 0 <= b[0].min() and b[0].max() <= 1 for b in uninterrupted)
    epochs = [np.concatenate([b[1] for b in uninterrupted[e * steps : (e + 1) * steps]]) for e in range(3)]
    assert not np.array_equal(epochs[0], epochs[1])  # a new order each epoch

    it = iter(ds)
    first = [next(it) for _ in range(steps + 5)]  # stopped in the middle of epoch 1
    state = json.loads(json.dumps(it.get_state()))  # as a checkpoint would store it
    restored = iter(lg.dataset(out, "train", 4, SIZE, num_epochs=3, seed=5))
    restored.set_state(state)
    assert_same_batches(first + list(restored), uninterrupted)


def test_both_formats_give_the_same_training_batches(datasets):
    got = [list(lg.dataset(str(datasets[f]), "train", 4, SIZE, num_epochs=2)) for f in FORMATS]
    assert_same_batches(*got)


def test_worker_processes_give_the_same_batches(datasets):
    out = str(datasets["array_record"])
    in_process = list(lg.dataset(out, "train", 8, SIZE, num_epochs=2))
    assert_same_batches(list(lg.dataset(out, "train", 8, SIZE, num_epochs=2, workers=2)), in_process)


def test_every_process_gets_the_same_number_of_batches(datasets):
    out = str(datasets["array_record"])
    counts = [len(list(lg.dataset(out, "validation", 3, SIZE, pipeline=(i, 3)))) for i in range(3)]
    assert counts == [20 // 3 // 3] * 3


def test_options_grain_cannot_honour_are_refused(datasets):
    out = str(datasets["array_record"])
    for options, message in (
        ({"remainder": "pad"}, "Grain drops the remainder"),
        ({"repeat": True}, "pass num_epochs"),
        ({"on_corrupt": "skip"}, "TFRecord shards only"),
        ({"pipeline": (2, 2)}, "0 <= index < count"),
    ):
        with pytest.raises(LoaderError, match=message):
            lg.dataset(out, "train", 4, SIZE, **options)


def test_detection_evaluation_gives_the_batches_of_loaders_load(tmp_path, monkeypatch):
    real = task_datasets._convert
    monkeypatch.setattr(task_datasets, "_convert", lambda *args: real(*args, "--file-format", "array_record"))
    out = str(task_datasets.converted_detection(tmp_path / "out"))
    expected = list(loaders.load(out, "train", 2, SIZE, training=False).as_numpy_iterator())
    assert_same_batches(list(lg.dataset(out, "train", 2, SIZE, training=False)), expected)


def test_keras_fit_takes_the_dataset(datasets):
    import keras

    out = str(datasets["array_record"])
    steps = lg.epoch_batches(out, "train", 8)
    model = keras.Sequential([keras.Input((*SIZE, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(
        lg.dataset(out, "train", 8, SIZE, num_epochs=2), epochs=2, steps_per_epoch=steps, shuffle=False, verbose=0
    )
    assert len(history.history["loss"]) == 2 and all(np.isfinite(history.history["loss"]))


def _train(batches, weights, steps: int):
    """`steps` steps of softmax regression by SGD in JAX (jitted), as a JAX training loop runs them."""
    import jax
    import jax.numpy as jnp

    def loss(w, x, y):
        logits = x @ w
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(y)), y])

    step = jax.jit(lambda w, x, y: w - 0.01 * jax.grad(loss)(w, x, y))
    for _ in range(steps):
        images, labels = next(batches)
        weights = step(weights, jnp.asarray(images.reshape(len(images), -1)), jnp.asarray(labels))
    return np.asarray(weights)


def test_a_jax_loop_checkpointed_mid_epoch_ends_where_an_uninterrupted_one_does(datasets):
    out = str(datasets["array_record"])
    steps = 2 * lg.epoch_batches(out, "train", 4)
    start = np.zeros((SIZE[0] * SIZE[1] * 3, 3), np.float32)
    straight = _train(iter(lg.dataset(out, "train", 4, SIZE, num_epochs=2)), start, steps)

    it = iter(lg.dataset(out, "train", 4, SIZE, num_epochs=2))
    half = _train(it, start, 7)
    checkpoint = {"weights": half.copy(), "data": json.dumps(it.get_state())}
    del it  # the process dies here
    resumed = iter(lg.dataset(out, "train", 4, SIZE, num_epochs=2))
    resumed.set_state(json.loads(checkpoint["data"]))
    np.testing.assert_array_equal(_train(resumed, checkpoint["weights"], steps - 7), straight)
    assert not np.array_equal(straight, start)
    # resumed one batch off, it ends elsewhere: the check above can fail
    shifted = iter(lg.dataset(out, "train", 4, SIZE, num_epochs=2))
    shifted.set_state(json.loads(checkpoint["data"]))
    next(shifted)
    assert not np.array_equal(_train(shifted, checkpoint["weights"], steps - 8), straight)
