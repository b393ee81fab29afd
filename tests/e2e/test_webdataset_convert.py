"""WebDataset shards written by `webdataset`'s TarWriter, converted: every record's label and image bytes as
written, damage rejected with reasons, counts that reconcile, the same bytes at 1 and 2 workers and on Beam's
DirectRunner."""

import collections
import json
import os

import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from tests.support.shards import assert_same_dataset, convert_with_cli, read_dataset
from tests.support.wds_data import corrupt_header, labelled, png, write_shards


def _records(out):
    return {
        split: {r["image/filename"].decode(): r for shard in shards for r in shard}
        for split, shards in read_dataset(out).items()
    }


def _rejects(out):
    return [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    train = labelled(9, 3) + [
        {"__key__": "nolabel", "jpg": png(90)},
        {"__key__": "noimage", "cls": 1},
        {"__key__": "notimage", "jpg": b"not an image", "cls": 2},
    ]
    shards = {
        "train/00000.tar": train,
        # an exact copy of train/00000.tar/s00000 under another key: one duplicate group, both kept
        "train/00001.tar": labelled(8, 3, start=20) + [{**labelled(1, 3)[0], "__key__": "copy"}],
        "validation/00000.tar": labelled(6, 3, start=40),
    }
    return root, write_shards(root, shards)


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    root, _ = source
    return convert_with_cli(root, tmp_path_factory.mktemp("ref") / "out", "--num-shards", 2, "--seed", 3)


def test_every_record_is_the_sample_written_and_every_reject_names_shard_and_member(source, reference):
    _, expected = source
    records = _records(reference)
    assert set(records) == {"train", "validation"}
    written = {}
    for split, by_name in records.items():
        for name, record in by_name.items():
            shard_member, _, where = name.partition("#bytes=")
            assert where and shard_member.startswith(split + "/")
            key = shard_member.rsplit(".", 1)[0]
            written[key] = (record["image/encoded"], record["image/class/text"].decode())
            assert record["image/class/label"] == int(expected[key][1])  # cls 0..2: label id = cls
    assert written == {k: (image, label) for k, (image, label) in expected.items() if k != "train/00000.tar/notimage"}
    reasons = {r["path"].partition("#")[0]: r["reason"] for r in _rejects(reference)}
    assert reasons == {
        "train/00000.tar/nolabel.jpg": "no_label",
        "train/00000.tar/noimage": "no_image",
        "train/00000.tar/notimage.jpg": "undecodable",
    }
    inputs = json.loads((reference / "manifest.json").read_text())["inputs"]
    assert inputs["found"] == 27 == inputs["written"] + inputs["rejected"] + inputs["capped"]
    assert inputs["written"] == 24
    groups = json.loads((reference / "duplicates.jsonl").read_text().splitlines()[0])
    assert groups["exact_groups"] == 1


def test_two_workers_and_the_direct_runner_write_the_same_bytes(source, reference, tmp_path):
    root, _ = source
    for i, (workers, runner) in enumerate(((2, "local"), (1, "DirectRunner"))):
        out = tmp_path / f"out{i}"
        config = build_config(str(root), str(out), {"num_shards": 2, "seed": 3, "workers": workers})
        conversion.convert(config, list_inputs(config), runner=runner)
        assert_same_dataset(out, reference, shards=4)


def test_a_damaged_shard_loses_only_what_is_damaged(tmp_path):
    root = tmp_path / "src"
    expected = write_shards(root, {"a.tar": labelled(6, 2), "b.tar": labelled(6, 2, start=10)})
    corrupt_header(root / "a.tar", "s00002.jpg")  # a bad header in the middle
    data = (root / "b.tar").read_bytes()
    cut = data.find(b"s00015.jpg\0")
    (root / "b.tar").write_bytes(data[: cut + 512 + 100])  # cut short inside the last image
    out = convert_with_cli(root, tmp_path / "out", "--num-shards", 1)
    names = {n.partition("#")[0] for n in _records(out)["train"]}
    assert names == {f"a.tar/s0000{i}.jpg" for i in (0, 1, 3, 4, 5)} | {f"b.tar/s000{i}.jpg" for i in range(10, 15)}
    for name, record in _records(out)["train"].items():
        key = name.partition("#")[0].rsplit(".", 1)[0]
        assert record["image/encoded"] == expected[key][0]
    reasons = sorted((r["path"].partition("#")[0], r["reason"]) for r in _rejects(out))
    assert reasons == [
        ("a.tar", "damaged_tar"),
        ("a.tar/s00002", "no_image"),
        ("b.tar/s00015.jpg", "truncated_member"),
    ]
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    assert inputs["found"] == 13 == inputs["written"] + inputs["rejected"]


def test_the_output_verifies_and_inspect_and_report_read_it(reference, run_cli, tmp_path):
    import shutil

    copy = shutil.copytree(reference, tmp_path / "copy")  # the report is written into the dataset
    assert run_cli("verify", copy, "--deep").exit_code == 0
    assert run_cli("inspect", copy).exit_code == 0
    assert run_cli("report", copy).exit_code == 0 and (copy / "report.html").exists()


def test_a_conversion_killed_after_some_shards_resumes_to_the_same_bytes(tmp_path, run_cli):
    from tests.e2e import test_kill

    root = tmp_path / "src"
    write_shards(root, {f"{i:05d}.tar": labelled(12, 3, start=12 * i, size=(16, 12)) for i in range(4)})
    reference = convert_with_cli(root, tmp_path / "ref", *test_kill.ARGS)
    out = tmp_path / "out"
    test_kill.kill_when(test_kill.start(root, out, "shard=1.5"), lambda: len(test_kill.sidecars(out)) >= 1)
    assert not (out / "manifest.json").exists()
    result = run_cli("convert", root, out, *test_kill.ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert_same_dataset(out, reference, shards=test_kill.SHARDS)
    assert json.loads((out / "manifest.json").read_text())["run"]["resumed"]["shards_reused"] >= 1


def test_shards_in_the_simulated_object_store_are_read_by_range(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from prep.cli import main
    from tests.support import simfs

    store = tmp_path / "store"
    monkeypatch.setenv("SIMFS_STORE", str(store))
    monkeypatch.delenv("SIMFS_LATENCY_MS", raising=False)
    expected = write_shards(store / "wds", {f"{i:05d}.tar": labelled(20, 2, start=20 * i) for i in range(3)})
    before, _ = simfs.local_counts()
    result = CliRunner().invoke(main, ["convert", "simfs://wds", "simfs://out/x", "--num-shards", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    counts = simfs.local_counts()[0] - before
    records = _records(store / "out" / "x")["train"]
    assert {n.partition("#")[0].rsplit(".", 1)[0]: r["image/encoded"] for n, r in records.items()} == {
        k: image for k, (image, _) in expected.items()
    }
    reads = collections.Counter()
    for (kind, what, caller), n in counts.items():
        if what.startswith("wds/"):
            reads[kind, caller.rpartition(":")[2]] += n
    # each shard streamed once to list it (one GET, never a seek), its members copied as they stream by
    # (`_Tee.read`); the prepare step reads those copies, a batch at a time, never the shards again
    assert reads == {
        ("list", "remote_names"): 1,  # the listing on workers, which finds shards and leaves them to the driver
        ("list", "shard_source"): 1,  # the shard names, on the driver
        ("stat", "list_shard"): 6,  # its size, through Beam's match
        ("read", "read"): 3,
    }


def test_requests_per_image_from_tar_shards_are_far_below_one(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from prep.cli import main
    from tests.support import simfs

    monkeypatch.setenv("SIMFS_STORE", str(tmp_path / "store"))
    monkeypatch.delenv("SIMFS_LATENCY_MS", raising=False)
    shards, per_shard = 10, 200
    expected = write_shards(
        tmp_path / "store" / "wds",
        {f"{i:05d}.tar": labelled(per_shard, 4, start=per_shard * i, size=(8, 6)) for i in range(shards)},
    )
    before, _ = simfs.local_counts()
    result = CliRunner().invoke(
        main, ["convert", "simfs://wds", "simfs://out/b", "--num-shards", "2", "--duplicates", "off", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    counts = simfs.local_counts()[0] - before
    records = _records(tmp_path / "store" / "out" / "b")["train"]
    assert {n.partition("#")[0].rsplit(".", 1)[0]: r["image/encoded"] for n, r in records.items()} == {
        k: image for k, (image, _) in expected.items()
    }
    kept = len(records)
    assert kept == shards * per_shard
    to_shards = sum(n for (kind, what, _), n in counts.items() if what.startswith("wds/") and kind != "list")
    assert to_shards == 3 * shards  # two stats and one streamed read a shard, whatever their samples
    to_members = sum(n for (kind, what, _), n in counts.items() if kind == "read" and "members/" in what)
    to_spill = sum(n for (kind, what, c), n in counts.items() if kind == "read" and "spill/" in what and "_stage" in c)
    print(
        f"\n{simfs.requests(counts) / kept:.2f} requests per kept image, {to_members / kept:.3f} member reads, "
        f"{to_spill / kept:.3f} spill reads"
    )
    # a batch's members (16) in one read, two where they straddle two groups' files; one a piece to merge them
    assert to_members / kept < 0.15, to_members / kept
    # the writer reads a part's spilled records a run of a spill file at a time (shard_copy._stage): one
    # request per record before (0.886 per image at 20,000)
    assert to_spill / kept < 0.05, to_spill / kept
    assert simfs.requests(counts) / kept <= 0.75, simfs.requests(counts) / kept


def test_the_sample_writes_a_webdataset_and_converts_it(tmp_path):
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(root / "samples" / "webdataset_sample.py"), "--out", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wrote 159 train samples, 45 validation samples" in proc.stdout
    assert "found 204  written 204  rejected 0  capped 0" in proc.stdout
    names = {n.partition("#")[0] for split in _records(tmp_path / "s" / "tfrecords").values() for n in split}
    assert len(names) == 204 and all(".tar/" in n for n in names)


def test_the_dask_runner_on_a_local_cluster_writes_the_same_bytes(source, reference, tmp_path, dask_cluster):
    # dask_cluster: the session's LocalCluster (tests/e2e/conftest.py); one of its own cost two more worker
    # processes that import TensorFlow and Beam for this one conversion.
    from tests.e2e.test_runners import DASK

    root, _ = source
    out = tmp_path / "out"
    config = build_config(str(root), str(out), {"num_shards": 2, "seed": 3})
    address = f"--dask_client_address={dask_cluster}"
    conversion.convert(config, list_inputs(config), runner=DASK, beam_args=[address])
    assert_same_dataset(out, reference, shards=4)


def test_damaged_shards_in_the_simulated_object_store_give_the_local_conversion(tmp_path, monkeypatch):
    """Remote shards are listed streamed, their members copied as they stream by; with a bad header and a
    shard cut short (the pass restarts past the bad block), the output is the local SOURCE's, byte for byte,
    also when the pieces' copies are merged with one reader open at a time."""
    import shutil

    from click.testing import CliRunner

    from prep.cli import main
    from tests.support import simfs  # noqa: F401  (registers simfs://)

    store = tmp_path / "store"
    monkeypatch.setenv("SIMFS_STORE", str(store))
    monkeypatch.delenv("SIMFS_LATENCY_MS", raising=False)
    monkeypatch.setattr("beam_jobs.list_shards._Readers.OPEN", 1)  # a group's pieces merged reopening readers
    root = tmp_path / "src"
    write_shards(root, {"a.tar": labelled(30, 3), "b.tar": labelled(30, 3, start=30)})
    corrupt_header(root / "a.tar", "s00012.jpg")
    data = (root / "b.tar").read_bytes()
    cut = data.find(b"s00055.jpg\0")
    (root / "b.tar").write_bytes(data[: cut + 512 + 100])
    shutil.copytree(root, store / "wds")
    local = convert_with_cli(root, tmp_path / "local", "--num-shards", 2)
    args = ["--num-shards", "2", "--no-progress"]
    result = CliRunner().invoke(main, ["convert", "simfs://wds", "simfs://out/r", *args])
    assert result.exit_code == 0, result.output
    from tests.support.shards import manifest_without_run, other_files, shard_bytes

    out = store / "out" / "r"
    assert shard_bytes(out) == shard_bytes(local) and len(shard_bytes(out)) == 2
    assert manifest_without_run(out) == manifest_without_run(local)
    assert other_files(out) == other_files(local)
    assert not [p for p in (out / ".prep-tmp").rglob("*") if p.is_file()]  # the store's objects; folders are not
    assert {r["reason"] for r in _rejects(local)} == {"damaged_tar", "no_image", "truncated_member"}


def test_a_glob_or_brace_pattern_selects_shards_and_names_what_is_missing(tmp_path, run_cli):
    """SOURCE as webdataset users write shard lists: `shards/{00000..00002}.tar`, `shards/0000*.tar`; the
    folder the pattern lies under stands for SOURCE, so records are named as from that folder."""
    root = tmp_path / "shards"
    expected = write_shards(root, {f"{i:05d}.tar": labelled(4, 2, start=4 * i) for i in range(4)})
    write_shards(root, {"other.tar": labelled(3, 2, start=90)})
    braced = convert_with_cli(f"{root}/{{00000..00002}}.tar", tmp_path / "braced", "--num-shards", 1)
    names = {n.partition("#")[0].rsplit(".", 1)[0] for n in _records(braced)["train"]}
    assert names == {k for k in expected if not k.startswith("00003")}
    globbed = list_inputs(build_config(f"{root}/0000*.tar", str(tmp_path / "globbed"), {}))
    assert {r.path.partition("#")[0].rsplit(".", 1)[0] for r in globbed.refs} == set(expected)
    for pattern, message in (
        (f"{root}/{{00000..00005}}.tar", "shard 00004.tar of SOURCE pattern {00000..00005}.tar does not exist"),
        (f"{root}/x-*.tar", "SOURCE pattern x-*.tar matches no file"),
    ):
        result = run_cli("convert", pattern, tmp_path / "bad", "--num-shards", 1)
        assert result.exit_code != 0 and message in result.output, result.output
        assert not (tmp_path / "bad").exists()


def test_gzipped_shards_are_streamed_and_their_kept_images_never_decompressed_again(tmp_path, monkeypatch):
    """`.tar.gz` / `.tgz` shards give the records of the same `.tar` shards; kept images come from the copy the
    listing made as it streamed each shard, never by decompressing a shard again; a gzip stream cut short
    keeps the samples before the cut and names the one it cut."""
    import gzip
    import zlib

    from prep.core.sources import webdataset

    plain = tmp_path / "plain"
    expected = write_shards(plain, {"a.tar": labelled(12, 3), "b.tar": labelled(12, 3, start=12)})
    packed = tmp_path / "packed"
    packed.mkdir()
    (packed / "a.tar.gz").write_bytes(gzip.compress((plain / "a.tar").read_bytes()))
    data = (plain / "b.tar").read_bytes()
    cut = data.find(b"s00020.jpg\0") + 512 + 100  # inside s00020's image
    z = zlib.compressobj(wbits=31)  # gzip, flushed at the cut: a stream that ends there, as a copy cut short
    (packed / "b.tgz").write_bytes(z.compress(data[:cut]) + z.flush(zlib.Z_SYNC_FLUSH))
    again = []
    read_member = webdataset.read_member
    monkeypatch.setattr(webdataset, "read_member", lambda p: again.append(p) or read_member(p))
    out = convert_with_cli(packed, tmp_path / "out", "--num-shards", 1)
    assert not [p for p in again if webdataset.compressed(p)]
    records = _records(out)["train"]
    got = {n.partition("#")[0].rsplit(".", 1)[0]: r["image/encoded"] for n, r in records.items()}
    keys = {f"{'a.tar.gz' if k.startswith('a') else 'b.tgz'}/{k.split('/')[1]}": v[0] for k, v in expected.items()}
    assert got == {k: v for k, v in keys.items() if not k.startswith("b.tgz/") or k < "b.tgz/s00020"}
    reasons = {(r["path"].partition("#")[0], r["reason"]) for r in _rejects(out)}
    assert ("b.tgz/s00020.jpg", "truncated_member") in reasons, reasons
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    assert inputs["found"] == inputs["written"] + inputs["rejected"] and inputs["written"] == 20


def test_a_json_list_of_labels_gives_a_multilabel_dataset(tmp_path):
    """`--label-key tags` with `{"tags": ["cat", "dog"]}`: every record holds the sample's names; an empty list
    is `empty_label`, a name --classes lacks `unknown_label`; counts reconcile."""
    from tests.support.wds_data import photo

    tags = [["cat", "dog"], ["dog"], ["bird", "cat"], ["cat"], [], ["cat", "fish"]] * 3
    samples = [{"__key__": f"s{i:02d}", "jpg": photo(i), "json": {"tags": t}} for i, t in enumerate(tags)]
    write_shards(tmp_path / "src", {"a.tar": samples[:9], "b.tar": samples[9:]})
    (tmp_path / "classes.txt").write_text("bird\ncat\ndog\n")
    out = convert_with_cli(
        tmp_path / "src", tmp_path / "out", "--label-key", "tags", "--classes", tmp_path / "classes.txt"
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "multilabel" and manifest["labels"] == ["bird", "cat", "dog"]
    import tensorflow as tf

    records = {}
    for shard in out.rglob("*.tfrecord*"):
        for raw in tf.data.TFRecordDataset(str(shard)).as_numpy_iterator():
            f = tf.train.Example.FromString(raw).features.feature
            records[f["image/filename"].bytes_list.value[0].decode().partition("#")[0]] = f
    for i, t in enumerate(tags):
        name = f"{'a' if i < 9 else 'b'}.tar/s{i:02d}.jpg"
        if not t or "fish" in t:
            assert name not in records
            continue
        assert [x.decode() for x in records[name]["image/class/text"].bytes_list.value] == sorted(t)
        assert records[name]["image/encoded"].bytes_list.value[0] == photo(i)
    assert len(records) == 12
    reasons = collections.Counter(r["reason"] for r in _rejects(out))
    assert reasons == {"empty_label": 3, "unknown_label": 3}
    inputs = manifest["inputs"]
    assert inputs["found"] == 18 == inputs["written"] + inputs["rejected"] + inputs["capped"]


def test_a_brace_pattern_on_the_simulated_object_store(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from prep.cli import main
    from tests.support import simfs  # noqa: F401  (registers simfs://)

    store = tmp_path / "store"
    monkeypatch.setenv("SIMFS_STORE", str(store))
    monkeypatch.delenv("SIMFS_LATENCY_MS", raising=False)
    expected = write_shards(store / "wds", {f"{i:05d}.tar": labelled(5, 2, start=5 * i) for i in range(3)})
    args = ["--num-shards", "1", "--no-progress"]
    result = CliRunner().invoke(main, ["convert", "simfs://wds/{00000..00001}.tar", "simfs://out/p", *args])
    assert result.exit_code == 0, result.output
    records = _records(store / "out" / "p")["train"]
    assert {n.partition("#")[0].rsplit(".", 1)[0]: r["image/encoded"] for n, r in records.items()} == {
        k: image for k, (image, _) in expected.items() if not k.startswith("00002")
    }
    result = CliRunner().invoke(main, ["convert", "simfs://wds/{00002..00003}.tar", "simfs://out/q", *args])
    assert result.exit_code != 0 and "shard 00003.tar of SOURCE pattern" in result.output, result.output
