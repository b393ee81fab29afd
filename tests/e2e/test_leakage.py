"""`prep leakage A B`: planted leaks between converted datasets, exit statuses, the key cache, errors."""

from __future__ import annotations

import collections
import json
import pathlib
import shutil

import pytest

from prep.core import keys_sidecar
from prep.core.schema import ImageRecord
from prep.leakage import compare, dataset_keys
from tests.support import datasets
from tests.support.photos import write_leaky_pair


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """a: 60 photos; b: an edited copy of 50 of them (10 per kind) and 20 others; c: 20 others only."""
    root = tmp_path_factory.mktemp("leakage")
    planted = write_leaky_pair(root, per_kind=10, unrelated=20, seed=3)
    outs = {t: datasets.convert(root / t, root / f"out_{t}", "--split", "train=0.5,test=0.5") for t in "abc"}
    return planted, outs


@pytest.fixture
def fresh(trees, tmp_path):
    """Copies of the converted datasets without their key sidecars, to change or to hash anew."""
    planted, outs = trees
    copies = {}
    for t, out in outs.items():
        copies[t] = datasets.copy(out, tmp_path / t)
        (copies[t] / keys_sidecar.FILENAME).unlink(missing_ok=True)
    return planted, copies


def test_planted_leaks_are_found_with_the_detection_goals(trees, run_cli):
    planted, outs = trees
    result = run_cli("leakage", outs["a"], outs["b"], "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    found = {(p["a"], p["b"]): p for p in doc["pairs"]}
    hits = collections.Counter(kind for kind, a, b in planted if (a, b) in found)
    for kind in ("copy", "reencode_q60", "resize_75", "brightness_12"):
        assert hits[kind] == 10, (kind, hits)
    assert hits["crop_5"] >= 9, hits
    assert len(found) == sum(hits.values())  # nothing but planted pairs
    split_of = {}
    for t in "ab":
        for split, info in datasets.load(outs[t])["splits"].items():
            for shard in info["shards"]:
                for data in datasets.records(outs[t] / shard["file"]):
                    split_of[t, ImageRecord.from_bytes(data).filename] = split
    for kind, a, b in planted:
        if (a, b) in found:
            pair = found[a, b]
            assert set(pair) == {"a", "b", "split_a", "split_b", "kind", "distance"}
            assert (pair["split_a"], pair["split_b"]) == (split_of["a", a], split_of["b", b])
            if kind == "copy":
                assert (pair["kind"], pair["distance"]) == ("exact", 0)
            else:
                assert pair["kind"] == "near" and 0 <= pair["distance"] <= 7
    assert doc["a"]["records"] == 60 and doc["b"]["records"] == 70 and doc["skipped_comparisons"] == 0


def test_the_table_lists_each_pair_and_a_summary(trees, run_cli):
    planted, outs = trees
    result = run_cli("leakage", outs["a"], outs["b"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[3].split() == ["kind", "bits", "split", "A", "split", "B"]
    copy_a, copy_b = next((a, b) for kind, a, b in planted if kind == "copy")
    row = next(line.split() for line in lines if copy_a in line.split())
    assert row[0:2] == ["exact", "0"] and row[3] == copy_a and row[5] == copy_b
    assert lines[-1].startswith(
        f"{sum(1 for line in lines if line.startswith(('exact', 'near ')))} pairs across A and B: 10 exact, "
    )


def test_no_shared_image_exits_0(trees, run_cli):
    _, outs = trees
    result = run_cli("leakage", outs["a"], outs["c"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "no exact or near duplicates across A and B (60 x 20 records)"
    assert json.loads(run_cli("leakage", outs["c"], outs["a"], "--json").output)["pairs"] == []


def test_keys_are_cached_beside_the_manifest_and_a_second_run_decodes_nothing(fresh):
    _, outs = fresh
    first = dataset_keys(str(outs["a"]))
    assert (first.computed, first.cached) == (60, 0)
    assert (outs["a"] / keys_sidecar.FILENAME).exists()
    second = dataset_keys(str(outs["a"]))
    assert (second.computed, second.cached) == (0, 60)
    assert second.records == first.records
    assert not [p for p in outs["a"].iterdir() if p.name.endswith(".part")]


def test_a_shard_changed_since_the_keys_were_cached_is_hashed_again(fresh):
    """The manifest's shard digest is the cache key: a rewritten shard's old keys are not trusted."""
    planted, outs = fresh
    before = compare(str(outs["a"]), str(outs["b"]))
    manifest = datasets.load(outs["b"])
    shard = manifest["splits"]["test"]["shards"][0]
    kept = datasets.records(outs["b"] / shard["file"])
    gone = {ImageRecord.from_bytes(d).filename for d in kept[:5]}
    datasets.rewrite_split(outs["b"], "test", [kept[5:]])
    after = compare(str(outs["a"]), str(outs["b"]))
    assert (after.b.computed, after.b.cached) == (len(kept) - 5, manifest["splits"]["train"]["examples"])
    assert after.a.computed == 0
    assert {(p.a, p.b) for p in after.found.pairs} == {(p.a, p.b) for p in before.found.pairs if p.b not in gone}


def test_a_sidecar_of_other_hashing_or_damaged_is_made_again(fresh):
    _, outs = fresh
    dataset_keys(str(outs["c"]))
    path = outs["c"] / keys_sidecar.FILENAME
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    for damaged in ([json.dumps({**header, "crop_scales": [0.5]})] + lines[1:], lines[:1] + ["{not json"] + lines[2:]):
        path.write_text("\n".join(damaged) + "\n")
        assert dataset_keys(str(outs["c"])).computed == 20
        assert path.read_text().splitlines() == lines


def test_an_image_that_does_not_decode_is_compared_by_sha256_and_named(fresh, run_cli):
    _, outs = fresh
    manifest = datasets.load(outs["c"])
    shard = manifest["splits"]["train"]["shards"][0]
    datas = datasets.records(outs["c"] / shard["file"])
    record = ImageRecord.from_bytes(datas[0])
    broken = ImageRecord.build(
        b"\xff\xd8 not really a jpeg", "jpeg", 4, 4, 3, record.label, record.text, record.filename
    )
    datasets.rewrite_split(outs["c"], "train", [[broken.to_bytes()] + datas[1:]])
    result = run_cli("leakage", outs["c"], outs["a"])
    assert result.exit_code == 0
    assert f"warning: A train {record.filename}: image does not decode (UnidentifiedImageError: " in result.output
    doc = json.loads(run_cli("leakage", outs["c"], outs["a"], "--json").output)
    assert [u["file"] for u in doc["a"]["unreadable"]] == [record.filename]


@pytest.mark.parametrize(
    "setup, message",
    [
        ("missing", "Error: {path} does not exist"),
        ("remote", "Error: {path} does not exist"),
        ("file", "Error: {path} is not a folder"),
        ("empty", "Error: {path}/manifest.json does not exist: {path} is not a finished dataset"),
        ("not_json", "Error: {path}/manifest.json is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
        ("malformed", "Error: {path}/manifest.json is malformed: labels must be a list, got 'cat'"),
        ("shard_gone", "Error: cannot access {path}/test-00000-of-00001.tfrecord: No such file or directory"),
        ("bad_crc", "Error: {path}/test-00000-of-00001.tfrecord: record 0 at byte 0: data CRC mismatch"),
    ],
)
def test_errors_exit_2_with_one_error_line(trees, tmp_path, run_cli, setup, message):
    _, outs = trees
    path = tmp_path / "x"
    if setup == "remote":
        from tests.support.testfs import to_url  # registers testfs://, a Beam file system over local files

        path = to_url(str(path))
    elif setup == "file":
        path.write_text("")
    elif setup == "empty":
        path.mkdir()
    elif setup in ("not_json", "malformed", "shard_gone", "bad_crc"):
        shutil.copytree(outs["c"], path)
        (path / keys_sidecar.FILENAME).unlink(missing_ok=True)  # there if an earlier test compared c
        if setup == "not_json":
            (path / "manifest.json").write_text("")
        elif setup == "malformed":
            manifest = datasets.load(path)
            manifest["labels"] = "cat"
            (path / "manifest.json").write_text(json.dumps(manifest))
        elif setup == "shard_gone":
            (path / "test-00000-of-00001.tfrecord").unlink()
        else:
            shard = path / "test-00000-of-00001.tfrecord"
            data = bytearray(shard.read_bytes())
            data[40] ^= 0xFF
            shard.write_bytes(bytes(data))
    for args in ((outs["a"], path), (path, outs["a"])):
        result = run_cli("leakage", *args)
        assert result.exit_code == 2, result.output
        assert result.output.splitlines() == [message.format(path=path)]


def test_help_says_what_the_exit_statuses_mean(run_cli):
    result = run_cli("leakage", "--help")
    assert result.exit_code == 0
    assert "0 no pair, 1 pairs found, 2 error" in " ".join(result.output.split())


def test_progress_goes_to_stderr_and_leaves_the_json_alone(fresh):
    from click.testing import CliRunner

    from prep.cli import main

    _, outs = fresh
    result = CliRunner().invoke(main, ["leakage", str(outs["a"]), str(outs["c"]), "--json", "--progress"])
    assert result.exit_code == 0, result.output
    assert "hashing A" in result.stderr and "hashing B" in result.stderr
    assert json.loads(result.stdout)["a"]["keys_computed"] == 60


def test_a_dataset_against_itself_lists_its_own_duplicates_once(tmp_path, run_cli):
    import random

    from tests.support.photos import EDITS, jpeg, photo

    for i in range(12):
        (tmp_path / "src" / "cat").mkdir(parents=True, exist_ok=True)
        data = jpeg(photo(900 + i, (160, 120)))
        (tmp_path / "src" / "cat" / f"p{i:02d}.jpg").write_bytes(data)
        if i < 2:
            (tmp_path / "src" / "cat" / f"p{i:02d}_copy.jpg").write_bytes(data)
            (tmp_path / "src" / "cat" / f"p{i:02d}_q60.jpg").write_bytes(EDITS["reencode_q60"](data, random.Random(0)))
    out = datasets.convert(tmp_path / "src", tmp_path / "out", "--split", "train=0.5,test=0.5")
    result = run_cli("leakage", out, out, "--json")
    assert result.exit_code == 1, result.output
    got = {(p["a"], p["b"], p["kind"]) for p in json.loads(result.output)["pairs"]}
    assert got == {(f"cat/p{i:02d}.jpg", f"cat/p{i:02d}_copy.jpg", "exact") for i in range(2)} | {
        (f"cat/p{i:02d}.jpg", f"cat/p{i:02d}_q60.jpg", "near") for i in range(2)
    } | {(f"cat/p{i:02d}_copy.jpg", f"cat/p{i:02d}_q60.jpg", "near") for i in range(2)}


def test_worker_processes_give_the_keys_hashed_in_process(fresh, monkeypatch):
    import prep.leakage as leakage_lib

    _, outs = fresh
    inline = dataset_keys(str(outs["b"]), workers=1)
    (outs["b"] / keys_sidecar.FILENAME).unlink()
    monkeypatch.setattr(leakage_lib, "POOL_FROM", 0)
    monkeypatch.setattr(leakage_lib, "BATCH", 4)
    pooled = dataset_keys(str(outs["b"]), workers=2)
    assert pooled.computed == 70 and pooled.records == inline.records
    # a record that does not parse is named from the worker too
    shard = datasets.load(outs["c"])["splits"]["train"]["shards"][0]
    datas = datasets.records(outs["c"] / shard["file"])
    datasets.rewrite_split(outs["c"], "train", [datas[:5] + [b"\x0a\x03abc"] + datas[6:]])
    from prep.core.errors import RecordError

    with pytest.raises(RecordError, match=rf"{shard['file']}: record 5: "):
        dataset_keys(str(outs["c"]), workers=2)


def test_images_decode_up_to_the_datasets_max_pixels_whatever_pillow_was_set_to(fresh, monkeypatch):
    from PIL import Image

    _, outs = fresh
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # as a caller's own bomb limit could leave it
    keys = dataset_keys(str(outs["c"]), workers=1)
    assert keys.computed == 20 and not keys.unreadable


def test_convert_overwrite_replaces_a_dataset_with_its_key_sidecar(fresh, run_cli):
    # The sidecar is prep's own file: --overwrite must not take it for a file of the user's.
    planted, outs = fresh
    dataset_keys(str(outs["c"]))
    assert (outs["c"] / keys_sidecar.FILENAME).exists()
    source = pathlib.Path(json.loads((outs["c"] / "manifest.json").read_text())["run"]["source"])
    result = run_cli("convert", source, outs["c"], "--split", "train=0.5,test=0.5", "--overwrite", "--no-progress")
    assert result.exit_code == 0, result.output
    again = dataset_keys(str(outs["c"]))  # the new conversion's own sidecar, valid for its new shards
    assert again.computed == 0 and again.cached == sum(
        s["examples"] for split in datasets.load(outs["c"])["splits"].values() for s in split["shards"]
    )


@pytest.mark.parametrize("options", [{}, {"resize": 120}])
def test_convert_records_the_keys_leakage_would_compute(tmp_path, options):
    """`prep convert` writes content_keys.jsonl: for every record, in shard order (shards cut into parts
    too), `image_keys` of its stored image, whether the keys came from the check's own decode (kept
    JPEGs of 256 px a side or more at 1/8 scale, smaller ones larger, PNGs) or from the stored bytes
    (converted: --resize); so `prep leakage` decodes nothing."""
    from beam_jobs import convert as conversion
    from prep.core import content_keys as ck
    from prep.core.convert_options import build_config
    from prep.core.inputs import list_inputs
    from tests.support.imagegen import write_class_tree

    src, out = tmp_path / "src", tmp_path / "out"
    write_class_tree(src, {"ant": 7, "bee": 9}, size=(300, 260), png_every=3)
    write_class_tree(src, {"cat": 6}, size=(90, 70), png_every=4)
    config = build_config(
        str(src), str(out), {"split": "train=0.7,validation=0.3", "num_shards": 2, "seed": 3, "workers": 2, **options}
    )
    conversion.convert(config, list_inputs(config), group_target=4)
    manifest = datasets.load(out)
    digests = {s["file"]: s["sha256"] for split in manifest["splits"].values() for s in split["shards"]}
    cached = keys_sidecar.loads((out / keys_sidecar.FILENAME).read_bytes(), digests)
    assert set(cached) == set(digests)
    for shard, records in cached.items():
        stored = [ImageRecord.from_bytes(r) for r in datasets.records(out / shard)]
        assert [r.record for r in records] == list(range(len(stored)))
        for r, record in zip(records, stored):
            assert (r.filename, r.keys) == (record.filename, ck.image_keys(record.encoded))
    found = dataset_keys(str(out))
    assert (found.computed, found.cached) == (0, 22)
