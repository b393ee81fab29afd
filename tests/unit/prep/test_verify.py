"""`prep verify`: a fresh dataset passes; each kind of damage is reported with its file and record."""

import bisect
import dataclasses
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prep.core.schema import ImageRecord
from prep.core.tfrecord import frame
from prep.shard_checks import HashingReader
from prep.verify import Problem, balance_problems, verify
from tests.support import datasets
from tests.support.imagegen import image_bytes, write_class_tree

SHARD = "train-00001-of-00003.tfrecord"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """63 images in 3 classes, split 60/20/20, 3 shards per split: 9 shards, ~68 KB."""
    root = tmp_path_factory.mktemp("verify")
    write_class_tree(root / "src", {"cat": 23, "dog": 31, "owl": 9}, size=(16, 12))
    return datasets.convert(
        root / "src", root / "out", "--split", "train=0.6,validation=0.2,test=0.2", "--num-shards", 3
    )


@pytest.fixture
def out(dataset, tmp_path):
    """A fresh copy of the dataset to damage."""
    return datasets.copy(dataset, tmp_path / "out")


def problems(path, **kwargs) -> list[tuple]:
    return [(p.file, p.record, p.message) for p in verify(str(path), **kwargs).problems]


def files_of(path) -> set[str]:
    return {p.file for p in verify(str(path)).problems}


def test_fresh_dataset_passes(dataset, run_cli):
    manifest = datasets.load(dataset)
    for deep in (False, True):
        report = verify(str(dataset), deep=deep, workers=2)
        assert report.ok and report.problems == ()
        assert report.bytes_read == sum(s["bytes"] for info in manifest["splits"].values() for s in info["shards"])
        for name, info in manifest["splits"].items():
            stats = report.splits[name]
            assert (stats.shards, stats.examples, stats.bytes) == (3, info["examples"], info["bytes"])
            assert stats.class_counts == info["class_counts"]
    result = run_cli("verify", dataset)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["split", "shards", "records", "bytes", "problems"]
    assert lines[2].split()[:3] == ["train", "3", "38"] and lines[2].split()[-1] == "0"
    assert lines[-1].startswith("OK: 9 shards and 63 records match the manifest")
    assert run_cli("verify", dataset, "--deep").output.splitlines()[-1].endswith("schema and decoded image)")


def test_json_report(out, run_cli):
    fresh = json.loads(run_cli("verify", out, "--json").output)
    assert fresh["verdict"] == "ok" and fresh["problems"] == [] and fresh["version"] == 1
    assert fresh["splits"]["train"] == {
        "shards": 3,
        "examples": 38,
        "bytes": fresh["splits"]["train"]["bytes"],
        "class_counts": {"cat": 14, "dog": 19, "owl": 5},
        "problems": 0,
    }
    (out / "test-00002-of-00003.tfrecord").unlink()
    result = run_cli("verify", out, "--json")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["verdict"] == "problems"
    assert report["problems"] == [
        {
            "file": "test-00002-of-00003.tfrecord",
            "record": None,
            "message": "missing: the manifest names it but OUTPUT has no such file",
        }
    ]
    assert report["splits"]["test"]["problems"] == 1 and report["splits"]["test"]["shards"] == 2
    assert set(report) == {
        "version",
        "output",
        "verdict",
        "deep",
        "problems",
        "splits",
        "bytes_read",
        "seconds",
        "target",
    }
    assert report["target"] is None  # converted with no --target, and none asked


@pytest.fixture(scope="module")
def flip_target(dataset, tmp_path_factory):
    """One working copy for the property test, with every shard's size and record start offsets."""
    work = datasets.copy(dataset, tmp_path_factory.mktemp("flip") / "out")
    shards = [s["file"] for info in datasets.load(work)["splits"].values() for s in info["shards"]]
    sizes = [(work / f).stat().st_size for f in shards]
    starts = {f: datasets.record_starts(work / f) for f in shards}
    ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    return work, shards, ends, starts


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.integers(min_value=0), mask=st.integers(1, 255))
def test_a_flipped_byte_anywhere_is_caught(flip_target, position, mask):
    work, shards, ends, starts = flip_target
    position %= ends[-1]
    i = bisect.bisect_right(ends, position)
    file, offset = shards[i], position - (ends[i - 1] if i else 0)
    path = work / file
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[offset] ^= mask
    path.write_bytes(damaged)
    try:
        found = verify(str(work)).problems
    finally:
        path.write_bytes(original)
    assert found and {p.file for p in found} == {file}
    assert any(p.record is None and p.message.startswith("sha256 is ") for p in found)
    # Every byte of a shard is inside some record's length, CRCs or data, so a CRC catches it there.
    record = bisect.bisect_right(starts[file], offset) - 1
    assert any(p.record == record and "CRC mismatch" in p.message for p in found), (offset, found)


def test_flipped_byte_through_the_cli(out, run_cli):
    path = out / SHARD
    data = bytearray(path.read_bytes())
    start = datasets.record_starts(path)[4]
    data[start + 30] ^= 0x10
    path.write_bytes(data)
    result = run_cli("verify", out)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[-4] == "problems:"
    assert lines[-3].startswith(f"  {SHARD}: sha256 is ")
    assert lines[-2] == f"  {SHARD} record 4: data CRC mismatch; the record starts at byte {start}"
    assert lines[-1] == "FAILED: 2 problems in 1 file"
    assert [line.split()[-1] for line in lines[1:4]] == ["0", "2", "0"]  # problems per split


def test_truncated_shard(out):
    path = out / SHARD
    data = path.read_bytes()
    starts = datasets.record_starts(path)
    size = f"size is {{}} bytes, the manifest says {len(data)}"
    path.write_bytes(data[: starts[7] + 5])  # inside record 7's header
    found = problems(out)
    assert found[0] == (SHARD, None, size.format(starts[7] + 5))
    assert found[1][:2] == (SHARD, None) and found[1][2].startswith("sha256 is ")
    assert found[2] == (SHARD, 7, f"truncated header (5 of 12 bytes); the record starts at byte {starts[7]}")
    assert len(found) == 3  # counts and balance are not judged on a shard read in part
    path.write_bytes(data[:-1])
    assert problems(out)[2][1:] == (
        len(starts) - 1,
        f"truncated record ({len(data) - starts[-1] - 13} of "
        f"{len(data) - starts[-1] - 12} bytes); the record starts at byte {starts[-1]}",
    )
    path.write_bytes(data[: starts[-1]])  # cut at a record boundary: the framing is fine, the count is not
    found = problems(out)
    assert (SHARD, None, f"holds {len(starts) - 1} records, the manifest says {len(starts)}") in found
    assert any("records per class differ from the manifest" in m for _, _, m in found)
    assert len(found) == 4  # size, sha256, count, classes; 12 of 37 in 3 shards is still balanced


def test_missing_shard(out):
    (out / SHARD).unlink()
    assert problems(out) == [(SHARD, None, "missing: the manifest names it but OUTPUT has no such file")]


def test_extra_shard_files(out):
    (out / "train-00003-of-00004.tfrecord").write_bytes((out / SHARD).read_bytes())
    (out / "old.tfrecord").write_bytes(b"")
    (out / "notes.txt").write_text("not a shard, not a problem")
    assert problems(out) == [
        ("old.tfrecord", None, "unexpected shard file: the manifest does not name it"),
        ("train-00003-of-00004.tfrecord", None, "unexpected shard file: the manifest does not name it"),
    ]


def test_edited_manifest_counts(out):
    manifest = datasets.load(out)
    shard = manifest["splits"]["train"]["shards"][1]
    shard["examples"] += 1
    shard["class_counts"]["owl"] += 1
    datasets.save(out, manifest)
    n = shard["examples"]
    owl = shard["class_counts"]["owl"]
    assert problems(out) == [
        ("manifest.json", None, "split train: examples is 38 but its shards sum to 39"),
        ("manifest.json", None, "split train: class_counts['owl'] is 5 but its shards sum to 6"),
        (SHARD, None, f"holds {n - 1} records, the manifest says {n}"),
        (SHARD, None, f"records per class differ from the manifest: owl {owl - 1} (manifest {owl})"),
    ]
    manifest = datasets.load(out)
    manifest["splits"]["test"]["examples"] = 11  # the splits now hold 38 + 11 + 13 = 62
    manifest["inputs"]["written"] = 60
    datasets.save(out, manifest)
    found = problems(out)
    assert ("manifest.json", None, "split test: examples is 11 but its shards sum to 12") in found
    assert ("manifest.json", None, "inputs.written is 60 but the splits hold 62") in found
    assert ("manifest.json", None, "inputs.found is not written + rejected + capped") in found


def test_manifest_that_contradicts_its_shard_names(out):
    manifest = datasets.load(out)
    manifest["splits"]["train"]["num_shards"] = 4
    manifest["splits"]["test"]["shards"][2]["file"] = "test-00002-of-00004.tfrecord"
    manifest["labels"].append("cat")
    datasets.save(out, manifest)
    assert problems(out) == [
        ("manifest.json", None, "labels repeat a class name"),
        (
            "manifest.json",
            None,
            "split test: shard 2 of 3 must be test-00002-of-00003.tfrecord with index 2, "
            "not test-00002-of-00004.tfrecord with index 2",
        ),
        ("manifest.json", None, "split train: num_shards is 4 but 3 shards are listed"),
        ("test-00002-of-00004.tfrecord", None, "missing: the manifest names it but OUTPUT has no such file"),
        ("test-00002-of-00003.tfrecord", None, "unexpected shard file: the manifest does not name it"),
    ]


def test_rejects_file_must_match_the_count(out):
    (out / "rejects.jsonl").write_text('{"path": "x.jpg", "reason": "empty", "detail": ""}\n')
    assert problems(out) == [("rejects.jsonl", None, "has 1 lines, the manifest counts 0 rejects")]
    (out / "rejects.jsonl").unlink()
    assert problems(out) == []


def test_unbalanced_shards(out):
    shards = [datasets.records(out / f"train-0000{i}-of-00003.tfrecord") for i in range(3)]
    shards[0].append(shards[1].pop())
    datasets.rewrite_split(out, "train", shards)
    found = problems(out)
    sizes = [len(s) for s in shards]  # 14, 12, 12 (from 13, 13, 12)
    assert sizes == [14, 12, 12]
    assert (
        "train-00000-of-00003.tfrecord",
        None,
        "unbalanced: holds 14 records; split train has 38 records in 3 shards, so each must hold 12 or 13",
    ) in found
    assert all(m.startswith("unbalanced: ") and f.startswith("train-") for f, _, m in found)
    assert verify(str(out)).splits["train"].examples == 38


def test_unbalanced_classes_with_balanced_shard_sizes(out):
    shards = [datasets.records(out / f"train-0000{i}-of-00003.tfrecord") for i in range(3)]
    label = lambda d: ImageRecord.from_bytes(d).label  # noqa: E731
    for src, dst, cls in ((0, 1, 0), (0, 1, 0), (1, 0, 1), (1, 0, 1)):  # two cats 0->1, two dogs 1->0
        record = next(d for d in shards[src] if label(d) == cls)
        shards[src].remove(record)
        shards[dst].append(record)
    datasets.rewrite_split(out, "train", shards)
    found = problems(out)
    assert found and all(f in ("train-00000-of-00003.tfrecord", "train-00001-of-00003.tfrecord") for f, _, _ in found)
    assert any(
        "holds" in m and "of class 'cat'; split train has 14 of class 'cat' in 3 shards, so each must hold 4 or 5" in m
        for _, _, m in found
    )
    assert any("of class 'dog'" in m for _, _, m in found)
    assert not any(m.startswith("unbalanced: holds 1") and "records;" in m for _, _, m in found)


def _record(**changes) -> bytes:
    fields = dict(
        encoded=image_bytes("JPEG", size=(16, 12), seed=7),
        format="jpeg",
        height=12,
        width=16,
        channels=3,
        label=0,
        text="cat",
        filename="cat/x.jpg",
    )
    fields.update(changes)
    record = ImageRecord.build(**fields)
    return record.to_bytes()


def test_records_that_break_the_schema(out):
    shards = [datasets.records(out / f"test-0000{i}-of-00003.tfrecord") for i in range(3)]
    shards[0][1] = b"\x0a\x03abc"  # framed fine, not an Example of ours
    shards[0][2] = _record(text="dog")
    shards[0][3] = _record(label=7, text="owl")
    shards[1][0] = _record(format="gif", channels=4)
    datasets.rewrite_split(out, "test", shards)
    file0, file1 = "test-00000-of-00003.tfrecord", "test-00001-of-00003.tfrecord"
    expected = {
        (file0, 1, "does not parse as an Example of our schema: field runs past the end of the record"),
        (file0, 2, "image/class/text is 'dog' but label 0 is 'cat'"),
        (file0, 3, "image/class/label 7 is not an index into the manifest's 3 labels"),
        (file1, 0, "image/format is 'gif', not one of jpeg, png"),
        (file1, 0, "image/channels is 4, not 1 or 3"),
        # Records without a class are in no class count of the manifest, and verify says so.
        (
            "manifest.json",
            None,
            f"{file0}: examples is {len(shards[0])} but its class_counts sum to {len(shards[0]) - 2}",
        ),
        (file0, None, "records per class differ from the manifest: <label 7> 1 (manifest 0)"),
    }
    found = set(problems(out))
    assert expected <= found
    # Replacing records moved classes between shards, so balance may complain too; nothing else does.
    assert all(m.startswith("unbalanced: ") and f == file0 for f, _, m in found - expected), found - expected


def test_deep_decodes_every_image(out):
    shards = [datasets.records(out / f"validation-0000{i}-of-00003.tfrecord") for i in range(3)]
    cat = [i for i, d in enumerate(shards[2]) if ImageRecord.from_bytes(d).label == 0][0]
    shards[2][cat] = _record(height=13)
    good = ImageRecord.from_bytes(shards[0][0])
    shards[0][0] = ImageRecord.build(
        b"\xff\xd8 not really a jpeg",
        "jpeg",
        good.height,
        good.width,
        good.channels,
        good.label,
        good.text,
        good.filename,
    ).to_bytes()
    record = ImageRecord.from_bytes(shards[0][1])
    shards[0][1] = dataclasses.replace(record, sha256="0" * 64).to_bytes()
    png = ImageRecord.from_bytes(shards[1][0])
    shards[1][0] = dataclasses.replace(png, format="png" if png.format == "jpeg" else "jpeg").to_bytes()
    datasets.rewrite_split(out, "validation", shards)
    assert problems(out) == []  # every field is plausible; only decoding tells
    found = problems(out, deep=True, workers=2)
    file0, file1, file2 = (f"validation-0000{i}-of-00003.tfrecord" for i in range(3))
    assert found[0][:2] == (file0, 0) and found[0][2].startswith("image does not decode: UnidentifiedImageError")
    assert found[1:] == [
        (file0, 1, "image/key/sha256 is not the sha256 of image/encoded"),
        (file1, 0, f"image/format is '{'png' if png.format == 'jpeg' else 'jpeg'}' but the bytes are {png.format}"),
        (file2, cat, "stored height 13, width 16, channels 3; the image decodes to height 12, width 16, channels 3"),
    ]


def test_deep_keeps_to_the_datasets_max_pixels(out):
    manifest = datasets.load(out)
    manifest["options"]["max_pixels"] = 16 * 12 - 1  # every image is 16x12
    datasets.save(out, manifest)
    found = problems(out, deep=True)
    assert len(found) == 63 and {m for _, _, m in found} == {
        "image has 16x12 pixels, more than the dataset's max_pixels 191"
    }
    assert problems(out) == []


@pytest.mark.parametrize(
    "damage, line",
    [
        (lambda o: (o / "manifest.json").unlink(), "manifest.json: does not exist: {o} is not a finished dataset"),
        (
            lambda o: (o / "manifest.json").write_text("{"),
            "manifest.json: is not valid JSON: Expecting property name "
            "enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (
            lambda o: datasets.save(o, {**datasets.load(o), "version": 3}),
            "manifest.json: has version 3; this tool reads versions 1, 2",
        ),
        (
            lambda o: datasets.save(o, {**datasets.load(o), "format": "tfds"}),
            "manifest.json: is not a tfrecord-prep manifest",
        ),
        (
            lambda o: datasets.save(o, {**datasets.load(o), "labels": "cat"}),
            "manifest.json: is malformed: labels must be a list, got 'cat'",
        ),
    ],
)
def test_manifest_problems_exit_1(out, run_cli, damage, line):
    damage(out)
    result = run_cli("verify", out)
    assert result.exit_code == 1
    assert result.output.splitlines() == ["problems:", "  " + line.format(o=out), "FAILED: 1 problem in 1 file"]


@pytest.mark.parametrize(
    "args, error",
    [
        (lambda t: ["verify", t / "nope"], "Error: OUTPUT {t}/nope does not exist"),
        (lambda t: ["verify", t / "file.txt"], "Error: OUTPUT {t}/file.txt is not a folder"),
        (lambda t: ["verify", t, "--workers", 0], "Error: Invalid value for '--workers': 0 is not in the range x>=1."),
        (lambda t: ["verify", t, "--fast"], "Error: No such option '--fast'."),
        (lambda t: ["verify"], "Error: Missing argument 'OUTPUT'."),
    ],
)
def test_usage_errors_exit_2(tmp_path, run_cli, args, error):
    (tmp_path / "file.txt").write_text("x")
    result = run_cli(*args(tmp_path))
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == error.format(t=tmp_path)
    assert "Traceback" not in result.output


def test_help(run_cli):
    text = run_cli("verify", "--help").output
    assert "Prove that the dataset in OUTPUT" in text and "--deep" in text and "--json" in text
    assert "verify" in run_cli("--help").output


def test_progress_reports_every_byte(dataset):
    seen = []
    report = verify(str(dataset), progress=lambda n, total: seen.append((n, total)))
    assert sum(n for n, _ in seen) == report.bytes_read and {t for _, t in seen} == {report.bytes_read}


@pytest.mark.parametrize("block", [1, 5, 12, 13, 4096])
def test_hashing_reader_serves_the_same_bytes_it_hashes(block):
    import hashlib

    blob = b"".join(frame(bytes([i]) * (i * 7)) for i in range(40))
    reader = HashingReader(io.BytesIO(blob), block=block)
    pieces, sizes = [], [12, 1, 300, 0, 5000, 3, 100000]
    for size in sizes:
        pieces.append(reader.read(size))
    assert b"".join(pieces) == blob and [len(p) for p in pieces][:3] == [12, 1, 300]
    assert reader.read(10) == b""
    assert reader.sha256.hexdigest() == hashlib.sha256(blob).hexdigest() and reader.size == len(blob)


@pytest.mark.parametrize(
    "counts, bad",
    [
        ([{"a": 2, "b": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 2}], []),  # sizes 3,2,3 of 8 in 3; a 2,1,1; b 1,1,2
        (
            [{"a": 3}, {"a": 1}],
            [
                ("s0", "holds 3 records; split train has 4 records in 2 shards, so each must hold 2"),
                ("s1", "holds 1 records; split train has 4 records in 2 shards, so each must hold 2"),
                ("s0", "holds 3 of class 'a'; split train has 4 of class 'a' in 2 shards, so each must hold 2"),
                ("s1", "holds 1 of class 'a'; split train has 4 of class 'a' in 2 shards, so each must hold 2"),
            ],
        ),
        (
            [{"a": 2, "b": 0}, {"a": 0, "b": 2}],
            [
                ("s0", "holds 2 of class 'a'; split train has 2 of class 'a' in 2 shards, so each must hold 1"),
                ("s1", "holds 0 of class 'a'; split train has 2 of class 'a' in 2 shards, so each must hold 1"),
                ("s0", "holds 0 of class 'b'; split train has 2 of class 'b' in 2 shards, so each must hold 1"),
                ("s1", "holds 2 of class 'b'; split train has 2 of class 'b' in 2 shards, so each must hold 1"),
            ],
        ),
        ([{"a": 1}, {}, {}], []),  # one example, three shards: 1, 0, 0 is balanced
    ],
)
def test_balance_rule(counts, bad):
    files = [f"s{i}" for i in range(len(counts))]
    assert [(p.file, p.message.removeprefix("unbalanced: ")) for p in balance_problems("train", files, counts)] == bad


def test_problem_text():
    assert str(Problem("a.tfrecord", 3, "data CRC mismatch")) == "a.tfrecord record 3: data CRC mismatch"
    assert str(Problem("a.tfrecord", None, "missing")) == "a.tfrecord: missing"
