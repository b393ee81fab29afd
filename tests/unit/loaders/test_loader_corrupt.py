"""Loader side of bad shards: an error naming the shard (and the record range read), or (opt-in) skip and count."""

import json
import logging
import shutil
import struct

import pytest

from tests.support.imagegen import write_class_tree


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from click.testing import CliRunner

    from prep.cli import main

    src = tmp_path_factory.mktemp("corrupt-src")
    write_class_tree(src, {"a": 12, "b": 9}, size=(16, 12))
    out = tmp_path_factory.mktemp("corrupt") / "out"
    result = CliRunner().invoke(main, ["convert", str(src), str(out), "--num-shards", "2"])
    assert result.exit_code == 0, result.output
    return out


def record_offsets(path):
    data, offsets, pos = path.read_bytes(), [], 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        offsets.append((pos, length))
        pos += 12 + length + 4
    return offsets


def damaged_copy(dataset, tmp_path, how):
    out = tmp_path / "out"
    shutil.copytree(dataset, out)
    shard = out / json.loads((out / "manifest.json").read_text())["splits"]["train"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    pos, length = record_offsets(shard)[3]
    if how == "data":  # record 3's data CRC fails; the size is unchanged
        data[pos + 12 + length // 2] ^= 0x40
    elif how == "length":  # record 3's length CRC fails: the rest of the shard is unreadable
        data[pos] ^= 0x01
    shard.write_bytes(bytes(data))
    return out, shard.name


def count(ds):
    return sum(int(labels.shape[0]) for _, labels in ds)


@pytest.mark.parametrize("how", ["data", "length"])
def test_corrupt_record_error_names_shard_and_record(dataset, tmp_path, how):
    import tensorflow as tf

    import loaders

    out, shard = damaged_copy(dataset, tmp_path, how)
    ds = loaders.load(out, "train", batch_size=4, image_size=(8, 8), training=False)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=rf"\[shard\] \[\S*{shard}\] \[is corrupt: a record from index\] \[0\] \[to\] \[\d+\] \[cannot be read",
    ):
        count(ds)


def test_clean_dataset_reads_every_record(dataset):
    import loaders

    assert count(loaders.load(dataset, "train", batch_size=4, image_size=(8, 8), training=False)) == 21


@pytest.mark.parametrize("how, skipped", [("data", 1), ("length", 11 - 3)])
def test_skip_mode_reads_the_good_records_and_counts_the_rest(dataset, tmp_path, caplog, how, skipped):
    import loaders

    out, shard = damaged_copy(dataset, tmp_path, how)
    with caplog.at_level(logging.WARNING, logger="loaders"):
        ds = loaders.load(out, "train", batch_size=4, image_size=(8, 8), training=False, on_corrupt="skip")
    assert count(ds) == 21 - skipped
    (message,) = [r.getMessage() for r in caplog.records if r.name == "loaders"]
    assert f"skipping {skipped} corrupt or unreadable record(s) of shard" in message and shard in message
    assert "from record 3 on" in message


def test_skip_mode_keeps_pipelines_equal(dataset, tmp_path):
    import loaders

    out, _ = damaged_copy(dataset, tmp_path, "data")  # 20 good records left over 2 shards
    sizes = [
        count(
            loaders.load(
                out, "train", batch_size=1, image_size=(8, 8), training=False, on_corrupt="skip", pipeline=(i, 3)
            )
        )
        for i in range(3)
    ]
    assert sizes == [6, 6, 6]  # 20 // 3, at most 2 dropped (remainder="drop")


@pytest.mark.parametrize("how", ["data", "length"])
def test_skip_mode_steps_per_epoch_counts_only_readable_records(dataset, tmp_path, how):
    # fit(steps_per_epoch=...) and training loops run exactly this many steps: counting
    # the manifest's records would run out of data before the epoch ends.
    import loaders

    out, _ = damaged_copy(dataset, tmp_path, how)  # 20 or 13 good records
    kwargs = dict(training=True, on_corrupt="skip")
    steps = loaders.steps_per_epoch(out, "train", 4, **kwargs)
    ds = loaders.load(out, "train", batch_size=4, image_size=(8, 8), **kwargs)
    assert steps == int(ds.cardinality()) == sum(1 for _ in ds) == {"data": 5, "length": 3}[how]
    assert loaders.steps_per_epoch(out, "train", 4, training=True) == 5  # the manifest's 21 records


def test_skip_mode_refuses_a_shard_with_more_records_than_the_manifest(dataset, tmp_path):
    import loaders
    from prep.core.errors import LoaderError

    out, shard = damaged_copy(dataset, tmp_path, "none")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["examples"] -= 2
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        LoaderError,
        match=f"shard {out / shard} holds 11 readable records, but the manifest "
        "records 9: it is not the shard that was converted",
    ):
        loaders.load(out, "train", batch_size=4, image_size=(8, 8), training=False, on_corrupt="skip")


def test_skip_mode_on_truncated_shard(dataset, tmp_path):
    import loaders

    out, shard = damaged_copy(dataset, tmp_path, "none")
    path = out / shard
    pos, _ = record_offsets(path)[5]
    path.write_bytes(path.read_bytes()[: pos + 7])  # cut inside record 5's header
    with pytest.raises(Exception, match="has .* bytes, but manifest.json records"):
        loaders.load(out, "train", batch_size=4, image_size=(8, 8), training=False)
    ds = loaders.load(out, "train", batch_size=4, image_size=(8, 8), training=False, on_corrupt="skip")
    assert count(ds) == 21 - (11 - 5)


def test_on_corrupt_option_is_checked():
    from loaders.load_options import LoadOptions
    from prep.core.errors import LoaderError

    with pytest.raises(LoaderError, match="on_corrupt must be one of error, skip, got 'ignore'"):
        LoadOptions(on_corrupt="ignore")


def test_skip_mode_on_a_remote_dataset(dataset, tmp_path, caplog):
    # gs://-style paths go through tf.io.gfile; TensorFlow's ram:// file system stands in for gs:// here.
    import tensorflow as tf

    import loaders
    from prep.core.errors import LoaderError

    out, shard = damaged_copy(dataset, tmp_path, "data")  # 20 good records
    root = f"ram://skip-{tmp_path.name}"
    tf.io.gfile.makedirs(root)
    for path in out.iterdir():
        tf.io.gfile.copy(str(path), f"{root}/{path.name}", overwrite=True)
    with caplog.at_level(logging.WARNING, logger="loaders"):
        ds = loaders.load(root, "train", batch_size=4, image_size=(8, 8), training=False, on_corrupt="skip")
    assert count(ds) == 20
    (message,) = [r.getMessage() for r in caplog.records if r.name == "loaders"]
    assert f"skipping 1 corrupt or unreadable record(s) of shard {root}/{shard}, from record 3 on" in message
    assert loaders.steps_per_epoch(root, "train", 4, training=True, on_corrupt="skip") == 5
    tf.io.gfile.remove(f"{root}/{shard}")
    with pytest.raises(LoaderError, match=f"shard {root}/{shard} is missing"):
        loaders.load(root, "train", batch_size=4, image_size=(8, 8), on_corrupt="skip")


def test_guard_passes_a_complete_range_and_names_the_shard_of_a_short_one():
    # The guard asks for its failing element only when a range ends early: a complete
    # range comes through unchanged, a short one (a read error ended it) names the shard.
    import tensorflow as tf

    from loaders.dataset import _named_errors

    records = tf.data.Dataset.from_tensor_slices([b"a", b"b", b"c"])
    file, skip = tf.constant("shard-7.tfrecord"), tf.constant(4, tf.int64)
    assert list(_named_errors(records, file, skip, tf.constant(3, tf.int64)).as_numpy_iterator()) == [b"a", b"b", b"c"]
    assert list(_named_errors(records, file, skip, tf.constant(2, tf.int64)).as_numpy_iterator()) == [b"a", b"b"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[shard-7.tfrecord\] .* \[4\] \[to\] \[7\]"):
        list(_named_errors(records, file, skip, tf.constant(4, tf.int64)).as_numpy_iterator())
