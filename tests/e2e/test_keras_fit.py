"""Keras 3 `model.fit` on `loaders` output with no glue: the README's documented call, as written there."""

import numpy as np
import pytest

import loaders
from tests.support.imagegen import write_class_tree
from tests.support.shards import convert_with_cli

keras = pytest.importorskip("keras")

COUNTS = {"a": 24, "b": 12, "c": 6}  # uneven, so the balanced class weights differ from 1
SIZE = (32, 32)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras-fit")
    write_class_tree(root / "src", COUNTS, size=SIZE)
    return convert_with_cli(
        root / "src", root / "out", "--split", "train=0.75,validation=0.25", "--num-shards", 2, "--no-progress"
    )


def small_model(optimizer="adam"):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((*SIZE, 3)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(len(COUNTS)),
        ]
    )
    model.compile(
        optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    return model


def test_the_readme_fit_call_runs(out):
    model = small_model()
    # The README's call, unchanged apart from the tiny sizes.
    history = model.fit(
        loaders.load(out, "train", batch_size=8, image_size=SIZE),
        steps_per_epoch=loaders.steps_per_epoch(out, "train", 8),
        validation_data=loaders.load(out, "validation", batch_size=8, image_size=SIZE, training=False),
        class_weight=loaders.class_weights(out),
        epochs=2,
        verbose=0,
    )
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert len(history.history["loss"]) == 2  # the second epoch found data: each epoch reads the split anew
    assert all(np.isfinite(v) for values in history.history.values() for v in values)


def test_fit_applies_the_manifests_class_weights(out):
    """With a zero learning rate the weights stay put, so fit's reported loss must be the loss weighted
    by `class_weights`, computed here by hand on the same (deterministic) batches."""
    weights = loaders.class_weights(out)
    assert len(set(weights.values())) == 3  # the check below can tell weighted from unweighted
    data = loaders.load(out, "train", batch_size=8, image_size=SIZE, training=False, drop_remainder=True)
    model = small_model(keras.optimizers.SGD(learning_rate=0.0))
    history = model.fit(data, class_weight=weights, epochs=1, verbose=0)
    per_record = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    weighted, plain = [], []
    for images, labels in data:
        losses = np.asarray(per_record(labels, model(images, training=False)))
        weighted.append(np.mean(losses * np.array([weights[int(y)] for y in labels])))
        plain.append(np.mean(losses))
    assert history.history["loss"][0] == pytest.approx(np.mean(weighted), rel=1e-5)
    assert np.mean(weighted) != pytest.approx(np.mean(plain), rel=1e-3)
