"""`loaders.load` in one process: what a training script relies on, read back from real `prep convert` output."""

import json
import shutil
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import loaders
from prep.cli import main
from prep.core.errors import LoaderError, ManifestError
from tests.support.imagegen import image_bytes, write_class_tree

tf = pytest.importorskip("tensorflow")

COUNTS = {"a": 13, "b": 11, "c": 7}  # 31 records in 3 shards
SIZE = (16, 20)  # (height, width) of the generated images


def convert(source, out, *args):
    result = CliRunner().invoke(main, ["convert", str(source), str(out), "--no-progress", *map(str, args)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loaders")
    write_class_tree(tmp / "src", COUNTS, size=(SIZE[1], SIZE[0]))
    return convert(tmp / "src", tmp / "out", "--num-shards", 3), tmp / "src"


def filenames(ds):
    return [f.decode() for batch in ds for f in batch["image/filename"].numpy()]


def test_training_batches_are_static_full_and_counted_up_front(data):
    out, _ = data
    ds = loaders.load(out, "train", batch_size=4, image_size=(12, 10))
    assert ds.element_spec[0].shape == (4, 12, 10, 3) and ds.element_spec[1].shape == (4,)
    assert int(ds.cardinality()) == loaders.steps_per_epoch(out, "train", 4) == 7  # 31 // 4
    batches = list(ds)
    assert len(batches) == 7
    for images, labels in batches:
        assert images.dtype == tf.float32 and labels.dtype == tf.int32
        assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
    assert set(np.concatenate([b[1].numpy() for b in batches])) <= {0, 1, 2}


def test_evaluation_reads_the_whole_split_in_order_with_the_right_labels(data):
    out, src = data
    ds = loaders.load(out, "train", batch_size=8, image_size=SIZE, training=False, output="features")
    assert [int(b["image"].shape[0]) for b in ds] == [8, 8, 8, 7]
    assert int(ds.cardinality()) == 4 == loaders.steps_per_epoch(out, "train", 8, training=False)
    first, second = filenames(ds), filenames(ds)
    assert first == second  # deterministic, unshuffled
    assert sorted(first) == sorted(p.relative_to(src).as_posix() for p in src.rglob("*.*"))
    labels = json.loads((out / "manifest.json").read_text())["labels"]
    for batch in ds:
        for name, label in zip(batch["image/filename"].numpy(), batch["label"].numpy()):
            assert labels[label] == name.decode().split("/")[0]


def test_pixels_survive_the_round_trip(data):
    """Decoded at the stored size, PNG pixels are exact and JPEG pixels match Pillow's decode closely."""
    out, src = data
    ds = loaders.load(
        out,
        "train",
        batch_size=31,
        image_size=SIZE,
        training=False,
        eval_crop="resize",
        normalize="none",
        output="features",
    )
    batch = next(iter(ds))
    checked = Counter()
    for name, fmt, image in zip(batch["image/filename"].numpy(), batch["image/format"].numpy(), batch["image"].numpy()):
        expected = np.asarray(Image.open(src / name.decode()).convert("RGB"), np.float32)
        diff = np.abs(image - expected)
        if fmt == b"png":
            assert diff.max() == 0, name
        else:
            assert diff.mean() < 3, (name, diff.mean())
        checked[fmt] += 1
    assert checked[b"png"] > 0 and checked[b"jpeg"] > 0


@pytest.mark.parametrize("training", [False, True])
def test_five_pipelines_over_three_shards_get_equal_disjoint_shares(data, training):
    out, _ = data
    kwargs = dict(batch_size=2, image_size=(8, 8), training=training, output="features")
    shares = [filenames(loaders.load(out, "train", pipeline=(i, 5), **kwargs)) for i in range(5)]
    assert [len(s) for s in shares] == [6] * 5  # 31 // 5 = 6 each; training: 3 full batches of 2
    everything = [f for s in shares for f in s]
    assert len(everything) == len(set(everything)) == 30  # one record dropped, at most n - 1 = 4


def test_every_epoch_reshuffles_and_the_same_seed_repeats(data):
    out, _ = data
    kwargs = dict(batch_size=4, image_size=(8, 8), output="features", deterministic=True, seed=3)
    ds = loaders.load(out, "train", **kwargs)
    epochs = [filenames(ds) for _ in range(3)]
    assert all(len(e) == len(set(e)) == 28 for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    assert filenames(loaders.load(out, "train", **kwargs)) == epochs[0]
    assert filenames(loaders.load(out, "train", **{**kwargs, "seed": 4})) != epochs[0]


def test_padding_has_weight_zero(data):
    out, _ = data
    shares = [
        list(loaders.load(out, "train", 4, (8, 8), training=False, remainder="pad", pipeline=(i, 2))) for i in range(2)
    ]
    weights = [np.concatenate([b[2].numpy() for b in s]) for s in shares]
    assert [len(w) for w in weights] == [16, 16]
    assert sorted(weights[0]) == [1.0] * 16 and sorted(weights[1]) == [0.0] + [1.0] * 15


def test_augment_hook_runs_before_normalisation(data):
    out, _ = data
    seen = {}

    def augment(images, labels):
        seen["shape"] = tuple(images.shape)
        return tf.zeros_like(images) + 255.0, labels

    images, _ = next(iter(loaders.load(out, "train", 4, (8, 8), augment=augment, normalize="symmetric")))
    assert seen["shape"] == (4, 8, 8, 3)
    assert np.allclose(images.numpy(), 1.0)


def test_cache_keeps_reshuffling_in_training_and_stores_decoded_images_in_evaluation(data, tmp_path):
    out, _ = data
    ds = loaders.load(out, "train", 4, (8, 8), cache=True, output="features", deterministic=True)
    first, second = filenames(ds), filenames(ds)
    assert first != second and len(set(first)) == len(set(second)) == 28
    prefix = tmp_path / "cache"
    ev = loaders.load(out, "train", 8, (8, 8), training=False, cache=str(prefix))
    a = np.concatenate([b[0].numpy() for b in ev])
    assert list(tmp_path.glob("cache-train-decoded-0*"))
    b = np.concatenate([b[0].numpy() for b in ev])
    assert a.shape == (31, 8, 8, 3) and np.array_equal(a, b)


def test_a_file_cache_is_never_read_back_for_other_pipelines_or_options(data, tmp_path):
    out, _ = data
    kwargs = dict(batch_size=2, image_size=(8, 8), output="features", training=False, cache=str(tmp_path / "c"))
    assert len(filenames(loaders.load(out, "train", **kwargs))) == 31  # caches the whole split for one pipeline
    shares = [filenames(loaders.load(out, "train", pipeline=(i, 2), **kwargs)) for i in range(2)]
    everything = shares[0] + shares[1]
    assert len(everything) == len(set(everything)) == 30  # 15 each; pipeline 0 once read the whole split's cache
    small = next(iter(loaders.load(out, "train", **{**kwargs, "image_size": (4, 4)})))
    assert small["image"].shape[1:3] == (4, 4)  # not the 8x8 images cached before
    assert len(list(tmp_path.glob("c-train-decoded-*.index"))) == 3  # the 4x4 one, read in part, is not kept


def test_class_weights_from_the_manifest(data):
    out, _ = data
    weights = loaders.class_weights(out, "train")
    assert weights == pytest.approx({0: 31 / (3 * 13), 1: 31 / (3 * 11), 2: 31 / (3 * 7)})


def test_rebalance_evens_out_classes_and_keeps_the_count(tmp_path):
    write_class_tree(tmp_path / "src", {"x": 40, "y": 8}, size=(8, 8))
    out = convert(tmp_path / "src", tmp_path / "out", "--num-shards", 2)
    ds = loaders.load(out, "train", 8, (8, 8), rebalance=True)
    assert int(ds.cardinality()) == 6
    labels = Counter()
    for _ in range(3):
        batches = list(ds)
        assert len(batches) == 6
        labels.update(np.concatenate([b[1].numpy() for b in batches]).tolist())
    assert 0.3 < labels[0] / 144 < 0.7  # 40:8 unbalanced would be 0.83


def test_aspect_buckets_batch_similar_shapes_without_decoding_first(tmp_path):
    src = tmp_path / "src"
    for c, cls in enumerate(("p", "q")):
        (src / cls).mkdir(parents=True)
        for i in range(12):
            size = (32, 16) if i % 2 else (16, 32)  # (width, height): wide and tall images
            # other seeds per class: the same picture in both would be a label conflict, and rejected
            (src / cls / f"{i}.png").write_bytes(image_bytes("PNG", size=size, seed=100 * c + i))
    out = convert(src, tmp_path / "out", "--num-shards", 2)
    for training in (True, False):
        ds = loaders.load(out, "train", 4, (16, 16), training=training, aspect_buckets=(0.5, 2.0), output="features")
        batches = list(ds)
        for batch in batches:
            ratios = set((batch["image/width"].numpy() / batch["image/height"].numpy()).tolist())
            assert len(ratios) == 1  # one bucket per batch
            expected = (23, 11) if ratios == {0.5} else (11, 23)  # about 16 x 16 pixels at the bucket's ratio
            assert tuple(batch["image"].shape[1:3]) == expected
        if training:  # 6 full batches this time, but only ceil((24 - 2 buckets x 3) / 4) = 5 are guaranteed
            assert len(batches) == int(ds.cardinality()) == 5
            assert loaders.steps_per_epoch(out, "train", 4, aspect_buckets=(0.5, 2.0)) == 5
        else:
            assert sum(int(b["image"].shape[0]) for b in batches) == 24
    # Evaluation batches are partial per bucket, so how many there are depends on the images.
    with pytest.raises(LoaderError, match="with aspect_buckets and partial batches .* iterate the dataset to its end"):
        loaders.steps_per_epoch(out, "train", 4, training=False, aspect_buckets=(0.5, 2.0))
    with pytest.raises(LoaderError, match="aspect_buckets with several input pipelines needs drop_remainder=True"):
        loaders.load(out, "train", 4, (16, 16), training=False, aspect_buckets=(0.5, 2.0), pipeline=(0, 2))


@pytest.fixture
def broken(data, tmp_path):
    out, _ = data
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    return copy


def test_clear_errors(broken, tmp_path):
    with pytest.raises(ManifestError, match=f"{tmp_path}/nowhere/manifest.json does not exist"):
        loaders.load(tmp_path / "nowhere")
    with pytest.raises(LoaderError, match=r"split 'test' is not in .* \(splits: train\)"):
        loaders.load(broken, "test")
    with pytest.raises(
        LoaderError,
        match="a batch is larger than a replica's data: the input pipeline reads 31 "
        r"record\(s\) per epoch, fewer than one step's 32 \(batch 32\)",
    ):
        loaders.load(broken, "train", batch_size=32)
    with pytest.raises(LoaderError, match="batch_size must be a positive int, got 0"):
        loaders.load(broken, "train", batch_size=0)
    shard = broken / "train-00001-of-00003.tfrecord"
    with open(shard, "ab") as f:
        f.write(b"x")
    size = shard.stat().st_size
    with pytest.raises(LoaderError, match=f"shard {shard} has {size} bytes, but manifest.json records {size - 1}"):
        loaders.load(broken)
    shard.unlink()
    with pytest.raises(LoaderError, match=f"shard {shard} is missing"):
        loaders.load(broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    del manifest["splits"]["train"]["shards"][0]["bytes"]
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ManifestError,
        match=r"manifest.json is malformed: splits.train.shards\[0\].bytes must be an "
        "integer >= 0, got None",
    ):
        loaders.load(broken)
    manifest["version"] = 99
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="has version 99; this tool reads versions 1, 2"):
        loaders.load(broken)


def test_distribute_checks_sizes_before_building(data):
    out, _ = data
    strategy = tf.distribute.get_strategy()  # the default strategy: one replica, one pipeline
    with pytest.raises(LoaderError, match="a batch is larger than a replica's data"):
        loaders.distribute(strategy, out, "train", global_batch_size=64)
    dist = loaders.distribute(strategy, out, "train", 4, (8, 8))
    assert sum(1 for _ in dist) == loaders.steps_per_epoch(out, "train", 4, strategy=strategy) == 7


def test_paths_with_a_scheme_go_through_gfile(data, tmp_path):
    """gs://-style paths: the manifest, shard sizes and records are read with tf.io.gfile (here its ram://)."""
    out, _ = data
    root = f"ram://{tmp_path.name}"
    tf.io.gfile.makedirs(root)
    for path in out.iterdir():
        tf.io.gfile.copy(str(path), f"{root}/{path.name}", overwrite=True)
    ds = loaders.load(root, "train", 4, (8, 8))
    assert len(list(ds)) == loaders.steps_per_epoch(root, "train", 4) == 7
    tf.io.gfile.remove(f"{root}/train-00002-of-00003.tfrecord")
    with pytest.raises(LoaderError, match=f"shard {root}/train-00002-of-00003.tfrecord is missing"):
        loaders.load(root)
    with pytest.raises(ManifestError, match=f"{root}-nope/manifest.json does not exist"):
        loaders.load(f"{root}-nope")


@pytest.mark.parametrize("training", [True, False])
def test_images_decoded_one_by_one_give_the_batches_of_a_whole_batch_decode(data, monkeypatch, training):
    import loaders.decode as images

    def whole_batches(ds, d, batch_size, drop_remainder, deterministic, then):
        decode = images.whole_batch(d)
        return ds.map(lambda *x: then(decode(*x)))

    def epoch():
        ds = loaders.load(data[0], "train", 4, (12, 12), training=training, deterministic=True, seed=3, flip=True)
        return [[t.numpy() for t in tf.nest.flatten(x)] for x in ds]

    ours = epoch()
    monkeypatch.setattr(images, "image_map", whole_batches)
    reference = epoch()
    assert len(ours) == len(reference) > 1
    for a, b in zip(ours, reference):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
