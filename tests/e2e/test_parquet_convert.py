"""Parquet and Arrow datasets written with Hugging Face `datasets` (the Hub's `data/` layout, `save_to_disk`)
and plain pyarrow, converted: every record's label and image bytes as written, splits from the source,
damage rejected with reasons naming file and row, counts that reconcile, the same bytes at 1 and 2 workers
and on Beam's DirectRunner, verify / inspect / report / leakage on the output, and --resume."""

import json
import os

import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from tests.support.imagegen import image_bytes
from tests.support.shards import assert_same_dataset, convert_with_cli, read_dataset
from tests.support.table_data import damage_row_group, expected, hf_dataset, hf_rows, write_hub, write_plain


def _records(out):
    return {
        split: {r["image/filename"].decode(): r for shard in shards for r in shard}
        for split, shards in read_dataset(out).items()
    }


def _rejects(out):
    return [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]


def _inputs(out):
    return json.loads((out / "manifest.json").read_text())["inputs"]


def _check_written(out, want):
    """Every record is the row written (image bytes, class name and id), at its split."""
    records = _records(out)
    got = {}
    for by_name in records.values():
        for name, record in by_name.items():
            got[name] = (record["image/encoded"], record["image/class/text"].decode())
    assert got == want
    return records


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    train0 = hf_rows(10)
    train0["label"][3] = -1  # no label
    train0["image"][4] = {"bytes": b"not an image", "path": None}
    train0["image"][5] = {"bytes": None, "path": "lost.jpg"}
    train1 = hf_rows(9, start=20)
    train1["image"][8], train1["label"][8] = train0["image"][0], train0["label"][0]  # a copy: a group, both kept
    files = {
        "data/train-00000-of-00002.parquet": train0,
        "data/train-00001-of-00002.parquet": train1,
        "data/test-00000-of-00001.parquet": hf_rows(6, start=40),
    }
    write_hub(root, files)
    want = expected(files)
    del want["data/train-00000-of-00002.parquet#row=4"]  # undecodable
    return root, want


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    root, _ = source
    return convert_with_cli(root, tmp_path_factory.mktemp("ref") / "out", "--num-shards", 2, "--seed", 3)


def test_every_record_is_the_row_written_and_every_reject_names_file_and_row(source, reference):
    _, want = source
    records = _check_written(reference, want)
    assert {split: {n.partition("-")[0] for n in r} for split, r in records.items()} == {
        "train": {"data/train"},
        "test": {"data/test"},
    }
    assert {n: r["image/class/label"] for n, r in records["test"].items()} == {
        f"data/test-00000-of-00001.parquet#row={i}": (40 + i) % 3 for i in range(6)
    }
    assert sorted((r["path"], r["reason"]) for r in _rejects(reference)) == [
        ("data/train-00000-of-00002.parquet#row=3", "no_label"),
        ("data/train-00000-of-00002.parquet#row=4", "undecodable"),
        ("data/train-00000-of-00002.parquet#row=5", "no_image"),
    ]
    inputs = _inputs(reference)
    assert inputs["found"] == 25 == inputs["written"] + inputs["rejected"] + inputs["capped"]
    assert inputs["written"] == 22
    assert json.loads((reference / "duplicates.jsonl").read_text().splitlines()[0])["exact_groups"] == 1


def test_two_workers_and_the_direct_runner_write_the_same_bytes(source, reference, tmp_path):
    """The reference lists the files in its process (the embedded runner), its images copied in chunk order;
    here the driver lists them (rows read by file and row), and the DirectRunner's workers do."""
    root, _ = source
    for i, (workers, runner, driver) in enumerate(((2, "local", True), (1, "DirectRunner", False))):
        out = tmp_path / f"out{i}"
        config = build_config(str(root), str(out), {"num_shards": 2, "seed": 3, "workers": workers})
        conversion.convert(config, list_inputs(config) if driver else None, runner=runner)
        assert_same_dataset(out, reference, shards=4)


def test_the_output_verifies_and_inspect_report_and_leakage_read_it(reference, run_cli, tmp_path):
    import shutil

    copy = shutil.copytree(reference, tmp_path / "copy")  # the report is written into the dataset
    assert run_cli("verify", copy, "--deep").exit_code == 0
    assert run_cli("inspect", copy).exit_code == 0
    assert run_cli("report", copy).exit_code == 0 and (copy / "report.html").exists()
    result = run_cli("leakage", copy, copy, "--json")  # the duplicates inside it: the exact copy in train
    assert result.exit_code == 1, result.output
    assert "data/train-00001-of-00002.parquet#row=8" in result.output


def test_a_save_to_disk_dataset_dict_keeps_its_splits(tmp_path):
    import datasets

    train, validation = hf_rows(7), hf_rows(5, start=10)
    datasets.DatasetDict({"train": hf_dataset(train), "validation": hf_dataset(validation)}).save_to_disk(
        str(tmp_path / "saved")
    )
    out = convert_with_cli(tmp_path / "saved", tmp_path / "out", "--num-shards", 1)
    want = expected(
        {f"{split}/data-00000-of-00001.arrow": rows for split, rows in (("train", train), ("validation", validation))}
    )
    records = _check_written(out, want)
    assert {split: len(r) for split, r in records.items()} == {"train": 7, "validation": 5}


def test_plain_pyarrow_with_a_split_column_and_named_columns(tmp_path):
    images = [image_bytes("PNG", size=(16, 12), seed=i) for i in range(8)]
    write_plain(
        tmp_path / "src" / "photos.parquet",
        {
            "thumb": [b"\x89PNG thumbnail"] * 8,
            "photo": images,
            "species": ["owl", "emu"] * 4,
            "part": ["train"] * 6 + ["eval"] * 2,
        },
    )
    args = ("--image-column", "photo", "--label-column", "species", "--split-column", "part", "--num-shards", 1)
    out = convert_with_cli(tmp_path / "src" / "photos.parquet", tmp_path / "out", *args)
    records = _check_written(out, {f"photos.parquet#row={i}": (images[i], ["owl", "emu"][i % 2]) for i in range(8)})
    assert {split: len(r) for split, r in records.items()} == {"train": 6, "eval": 2}


def test_damaged_files_and_row_groups_are_rejected_and_counted(tmp_path):
    files = {"a.parquet": hf_rows(12), "b.parquet": hf_rows(4, start=20), "c.parquet": hf_rows(4, start=30)}
    write_hub(tmp_path / "src", files)
    damage_row_group(tmp_path / "src" / "a.parquet", 1, "image.bytes")  # images of rows 4..7: read, not listed
    damage_row_group(tmp_path / "src" / "c.parquet", 0, "label")
    data = (tmp_path / "src" / "b.parquet").read_bytes()
    (tmp_path / "src" / "b.parquet").write_bytes(data[: len(data) // 2])  # no footer
    out = convert_with_cli(tmp_path / "src", tmp_path / "out", "--num-shards", 1)
    lost = {f"a.parquet#row={i}" for i in (4, 5, 6, 7)}
    want = {k: v for k, v in expected(files).items() if k.startswith("a.") and k not in lost}
    _check_written(out, want)
    reasons = sorted((r["path"], r["reason"]) for r in _rejects(out))
    assert reasons == sorted(
        [(f"a.parquet#row={i}", "damaged_table") for i in (4, 5, 6, 7)]
        + [(f"c.parquet#row={i}", "damaged_table") for i in range(4)]
        + [("b.parquet", "damaged_table")]
    )
    inputs = _inputs(out)
    assert inputs["found"] == 17 == inputs["written"] + inputs["rejected"]


def test_a_conversion_killed_after_some_shards_resumes_to_the_same_bytes(tmp_path, run_cli):
    from tests.e2e import test_kill

    root = tmp_path / "src"
    write_hub(root, {f"train-0000{i}-of-00004.parquet": hf_rows(12, start=12 * i, size=(16, 12)) for i in range(4)})
    reference = convert_with_cli(root, tmp_path / "ref", *test_kill.ARGS)
    out = tmp_path / "out"
    test_kill.kill_when(test_kill.start(root, out, "shard=1.5"), lambda: len(test_kill.sidecars(out)) >= 1)
    assert not (out / "manifest.json").exists()
    result = run_cli("convert", root, out, *test_kill.ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert_same_dataset(out, reference, shards=test_kill.SHARDS)
    assert json.loads((out / "manifest.json").read_text())["run"]["resumed"]["shards_reused"] >= 1


def test_the_sample_writes_a_parquet_dataset_and_converts_it(tmp_path):
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(root / "samples" / "parquet_sample.py"), "--out", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "found 204  written 204  rejected 0  capped 0" in proc.stdout
    names = {n for split in _records(tmp_path / "s" / "tfrecords").values() for n in split}
    assert len(names) == 204 and all(".parquet#row=" in n for n in names)


def test_the_dask_runner_on_a_local_cluster_writes_the_same_bytes(source, reference, tmp_path, dask_cluster):
    # dask_cluster: the session's LocalCluster (tests/e2e/conftest.py); one of its own cost two more worker
    # processes that import TensorFlow and Beam for this one conversion.
    from tests.e2e.test_runners import DASK

    root, _ = source
    out = tmp_path / "out"
    config = build_config(str(root), str(out), {"num_shards": 2, "seed": 3})
    address = f"--dask_client_address={dask_cluster}"
    conversion.convert(config, None, runner=DASK, beam_args=[address])  # listed on the Dask workers
    assert_same_dataset(out, reference, shards=4)


def test_files_in_the_simulated_object_store_are_read_by_row_group(tmp_path, monkeypatch):
    import collections

    from click.testing import CliRunner

    from prep.cli import main
    from tests.support import simfs

    store = tmp_path / "store"
    monkeypatch.setenv("SIMFS_STORE", str(store))
    monkeypatch.delenv("SIMFS_LATENCY_MS", raising=False)
    files = {f"data/train-0000{i}-of-00003.parquet": hf_rows(20, start=20 * i) for i in range(3)}
    write_hub(store / "hub", files, rows_per_group=10)
    before, _ = simfs.local_counts()
    result = CliRunner().invoke(main, ["convert", "simfs://hub", "simfs://out/x", "--num-shards", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    counts = simfs.local_counts()[0] - before
    _check_written(store / "out" / "x", expected(files))
    reads = collections.Counter()
    for (kind, what, _), n in counts.items():
        if what.startswith("hub/"):
            reads[kind] += n
    # the driver reads each file's footer, the listing its footer, and each row group's labels and images
    # once (copied to the work directory); the prepare step and the writer read none of these files
    assert reads["read"] < 60 / 2, reads


def test_one_file_in_the_simulated_object_store_is_a_source(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from prep.cli import main

    store = tmp_path / "store"
    monkeypatch.setenv("SIMFS_STORE", str(store))
    monkeypatch.delenv("SIMFS_LATENCY_MS", raising=False)
    files = {"one.parquet": hf_rows(14)}
    write_hub(store / "hub", files)
    args = ["convert", "simfs://hub/one.parquet", "simfs://out/x", "--num-shards", "1", "--no-progress"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    _check_written(store / "out" / "x", expected(files))
    assert _inputs(store / "out" / "x")["found"] == 14
