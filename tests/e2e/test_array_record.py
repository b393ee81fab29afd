"""`--file-format array_record` end to end: the same records as TFRecord, in the same shards and order;
read by tensorflow-datasets' `as_data_source`, by the `array_record` package itself and by our
readers; checked by `prep verify`; written on a remote OUTPUT, resumed, and for every task."""

from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

from beam_jobs import convert as conversion
from prep.core import formats
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from tests.e2e.test_resume import FullDisk, fail_writes
from tests.support import task_datasets
from tests.support.imagegen import write_dirty_tree
from tests.support.shards import convert_with_cli
from tests.support.testfs import to_url

ARGS = ("--split", "train=0.7,validation=0.3", "--num-shards", 3, "--workers", 2)
AR = ("--file-format", "array_record")


def shards(out, file_format: str) -> dict[str, list[bytes]]:
    """{shard name without its suffix: its records, in order}, read by the format's owner."""
    owner = formats.get(file_format)
    return {
        os.path.basename(path).removesuffix(owner.suffix): list(owner.records(path, path))
        for path in sorted(glob.glob(os.path.join(str(out), "*" + owner.suffix)))
    }


def assert_same_records(tfrecord_out, array_record_out, count: int | None = None) -> None:
    """Both outputs hold the same records (bytes) in the same shards and order, and manifests that
    differ only in the format, the shards' bytes and digests."""
    ours, theirs = shards(tfrecord_out, "tfrecord"), shards(array_record_out, "array_record")
    assert ours == theirs and all(ours.values())
    if count is not None:
        assert len(ours) == count
    a, b = (json.loads((out / "manifest.json").read_text()) for out in (tfrecord_out, array_record_out))
    assert b["options"].pop("file_format") == "array_record"
    assert b["options"].pop("format_options") == "group_size:1,uncompressed"
    counts = [(out / "shard_counts.jsonl").read_text() for out in (tfrecord_out, array_record_out)]
    assert counts[0] == counts[1].replace(".array_record", ".tfrecord")
    for m in (a, b):
        m.pop("run"), m.pop("shard_counts")
        for split in m["splits"].values():
            split.pop("bytes")
            for shard in split["shards"]:
                shard["file"] = shard["file"].rsplit(".", 1)[0]
                shard.pop("bytes"), shard.pop("sha256")
    assert a == b


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("ar-src")
    write_dirty_tree(root, {"ant": 23, "bee": 31, "cat": 12}, size=(14, 10))
    return root


@pytest.fixture(scope="module")
def both(source, tmp_path_factory):
    base = tmp_path_factory.mktemp("ar-out")
    return convert_with_cli(source, base / "tf", *ARGS), convert_with_cli(source, base / "ar", *ARGS, *AR)


def test_the_same_records_in_the_same_shards_and_order(both):
    assert_same_records(*both, count=6)
    assert sorted(p.name for p in both[1].iterdir() if p.suffix == ".array_record")[0] == (
        "train-00000-of-00003.array_record"
    )


def test_tfds_as_data_source_reads_every_record(both):
    import tensorflow_datasets as tfds

    tf_out, ar_out = both
    builder = tfds.builder_from_directory(str(ar_out))
    assert builder.info.file_format.value == "array_record"
    manifest = json.loads((ar_out / "manifest.json").read_text())
    for split, info in manifest["splits"].items():
        source = builder.as_data_source(split)
        assert len(source) == info["examples"]
        from_tfrecord = list(tfds.builder_from_directory(str(tf_out)).as_dataset(split).as_numpy_iterator())
        for i in (0, len(source) - 1):
            assert source[i]["image/filename"] == from_tfrecord[i]["image/filename"]
            assert source[i]["image/class/label"] == from_tfrecord[i]["image/class/label"]


def test_the_array_record_package_reads_the_shards_by_position(both):
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    tf_out, ar_out = both
    expected = [r for name, records in sorted(shards(tf_out, "tfrecord").items()) if "train" in name for r in records]
    source = ArrayRecordDataSource(sorted(str(p) for p in ar_out.glob("train-*.array_record")))
    assert len(source) == len(expected)
    assert [source[i] for i in reversed(range(len(source)))] == expected[::-1]


def test_verify_inspect_and_report_read_the_shards(both, run_cli, tmp_path):
    out = both[1]
    result = run_cli("verify", "--deep", out)
    assert result.exit_code == 0 and "OK: 6 shards and 67 records" in result.output, result.output
    inspected = run_cli("inspect", out, "--contact-sheet", tmp_path / "sheet.png")
    assert inspected.exit_code == 0 and (tmp_path / "sheet.png").is_file(), inspected.output
    report = run_cli("report", out, "-o", tmp_path / "report.html")
    assert report.exit_code == 0 and "could not" not in report.output, report.output


@pytest.mark.parametrize("damage", ["flip", "truncate", "stray"])
def test_verify_catches_a_damaged_shard(both, run_cli, tmp_path, damage):
    out = shutil.copytree(both[1], tmp_path / "out")
    shard = out / "train-00001-of-00003.array_record"
    data = bytearray(shard.read_bytes())
    if damage == "flip":
        data[100] ^= 0x01  # inside the first record's chunk
        shard.write_bytes(bytes(data))
    elif damage == "truncate":
        shard.write_bytes(bytes(data[: len(data) // 2]))
    else:
        (out / "train-00009-of-00010.array_record").write_bytes(bytes(data))
    result = run_cli("verify", out)
    assert result.exit_code == 1, result.output
    expected = {
        "flip": "record 0: ",
        "truncate": "not a readable ArrayRecord file",
        "stray": "unexpected shard file",
    }[damage]
    assert expected in result.output
    if damage == "flip":
        assert "Corrupted Riegeli/records file" in result.output


def test_loaders_load_gives_the_same_batches_from_either_format(both):
    import numpy as np

    import loaders

    tf_out, ar_out = both
    got = [
        list(loaders.load(str(out), "validation", batch_size=4, training=False, image_size=(8, 8)).as_numpy_iterator())
        for out in both
    ]
    assert len(got[0]) == len(got[1]) > 0
    for (xa, ya), (xb, yb) in zip(*got):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


def test_remote_output_is_written_locally_then_copied(source, both, tmp_path, run_cli):
    out = tmp_path / "remote"
    result = run_cli("convert", source, to_url(str(out)), *ARGS, *AR)
    assert result.exit_code == 0, result.output
    assert_same_records(both[0], out)
    verified = run_cli("verify", "--deep", to_url(str(out)))
    assert verified.exit_code == 0, verified.output


def test_multi_part_shards_and_resume(source, both, tmp_path, monkeypatch):
    """group_target=3 cuts every shard into parts, joined into one ArrayRecord file; a resumed run
    rewrites a damaged shard and keeps the others."""
    out = tmp_path / "out"
    options = {"split": "train=0.7,validation=0.3", "num_shards": 3, "workers": 2, "file_format": "array_record"}
    config = build_config(str(source), str(out), options)
    with monkeypatch.context() as patch:
        fail_writes(patch, "manifest.json.", FullDisk)
        with pytest.raises(Exception, match="No space left on device"):
            conversion.convert(config, list_inputs(config), group_target=3)
    assert list((out / ".prep-tmp" / "parts").iterdir())
    damaged = out / "validation-00002-of-00003.array_record"
    damaged.write_bytes(damaged.read_bytes()[:-5])
    resume = build_config(str(source), str(out), dict(options, resume=True))
    manifest = conversion.convert(resume, list_inputs(resume), group_target=3)
    assert manifest.run.resumed.to_json()["shards_reused"] == 5
    assert_same_records(both[0], out, count=6)


def test_resume_refuses_another_file_format(source, tmp_path, run_cli, monkeypatch):
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        fail_writes(patch, "manifest.json.", FullDisk)
        assert run_cli("convert", source, out, *ARGS).exit_code == 1
    result = run_cli("convert", source, out, *ARGS, *AR, "--resume")
    assert result.exit_code == 1 and "file_format" in result.output.replace("-", "_"), result.output


def test_other_options_give_the_same_records(source, tmp_path):
    # Options that change which records are written and their bytes, in one conversion: the format only
    # writes the records it is given, in order.
    extra = ("--duplicates", "drop", "--max-per-class", 10, "--resize", 8)
    tf_out = convert_with_cli(source, tmp_path / "tf", *ARGS, *extra)
    assert_same_records(tf_out, convert_with_cli(source, tmp_path / "ar", *ARGS, *extra, *AR))


@pytest.mark.parametrize("task", ["detection", "segmentation", "multilabel"])
def test_every_task_gives_the_same_records(task, tmp_path, monkeypatch):
    make = {
        "detection": task_datasets.converted_detection,
        "segmentation": task_datasets.converted_segmentation,
        "multilabel": task_datasets.converted_multilabel,
    }[task]
    tf_root, ar_root = tmp_path / "tf", tmp_path / "ar"
    tf_root.mkdir(), ar_root.mkdir()
    tf_out = make(tf_root / "out" if task == "detection" else tf_root)
    real = task_datasets._convert
    monkeypatch.setattr(task_datasets, "_convert", lambda *args: real(*args, *AR))
    ar_out = make(ar_root / "out" if task == "detection" else ar_root)
    assert_same_records(tf_out, ar_out)


def test_another_runner_writes_the_same_array_record_bytes(source, both, tmp_path, dask_cluster):
    """ArrayRecord files are as deterministic as TFRecords: the same bytes from worker processes and from
    shards written in parts (group_target). One runner whose workers are other processes proves it: that
    every runner gives the records themselves is tests/e2e/test_runners.py's."""
    options = {"split": "train=0.7,validation=0.3", "num_shards": 3, "workers": 2, "file_format": "array_record"}
    config = build_config(str(source), str(tmp_path / "out"), options)
    conversion.convert(
        config,
        list_inputs(config),
        runner="apache_beam.runners.dask.dask_runner.DaskRunner",
        beam_args=[f"--dask_client_address={dask_cluster}"],
        group_target=5,
    )
    written = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.array_record")}
    assert written == {p.name: p.read_bytes() for p in both[1].glob("*.array_record")} and len(written) == 6
