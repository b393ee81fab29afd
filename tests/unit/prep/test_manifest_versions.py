"""Manifest versions: a committed version-1 dataset (tests/data/manifest_v1, made by the code before
version 2) still reads, round-trips its bytes, verifies, inspects and loads; version 2 keeps its shard
counts in shard_counts.jsonl, which readers check against manifest.json and only load when asked."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil

import pytest

from prep.core import shard_counts
from prep.core.errors import ManifestError
from prep.core.manifest import FILENAME, SHARD_COUNTS, Extras, Inputs, Manifest, Run, ShardInfo
from prep.core.naming import ShardName

V1 = pathlib.Path(__file__).resolve().parents[2] / "data" / "manifest_v1"


def test_a_version_1_manifest_reads_and_gives_back_its_bytes():
    data = (V1 / FILENAME).read_bytes()
    manifest = Manifest.from_json(data)
    assert manifest.version == 1 and manifest.shard_counts is None
    assert manifest.dumps() == data and manifest.documents() == (data, None)
    shards = manifest.splits["train"].shards
    assert [s.class_counts for s in shards][2] == {"bird": 1, "cat": 1, "fish": 0}  # inline, zeros and all
    assert Manifest.load(str(V1), shard_counts=True) == manifest


def test_a_version_1_dataset_verifies_and_inspects():
    from prep.inspect import summary
    from prep.verify import verify

    report = verify(str(V1), deep=True)
    assert report.ok, report.problems
    classes = summary(Manifest.load(str(V1)), str(V1))["splits"]["train"]["classes"]
    assert classes["fish"] == {"count": 4, "share": pytest.approx(1 / 3, abs=1e-6), "per_shard": {"min": 0, "max": 1}}


def test_a_version_1_dataset_loads_for_training():
    pytest.importorskip("tensorflow")
    import loaders

    assert loaders.steps_per_epoch(str(V1), "train", 4) == 3
    assert loaders.class_weights(str(V1), "train") == {0: 1.0, 1: 1.0, 2: 1.0}
    images, labels = next(iter(loaders.load(str(V1), "train", batch_size=4, image_size=(8, 8))))
    assert images.shape == (4, 8, 8, 3) and labels.shape == (4,)


def built(task: str = "classification") -> Manifest:
    """A version-2 manifest of two shards, one class absent from the second."""
    strata = ({"a": 2, "b": 1}, {"b": 2, "(none)": 1})
    written = []
    for i, counts in enumerate(({"a": 2, "b": 1}, {"b": 2})):
        name = ShardName("train", i, 2)
        extra = {"stratum_counts": strata[i]} if task == "multilabel" else {}
        written.append((name, ShardInfo(name.filename, i, 3, 10 + i, f"{i}" * 64, counts, **extra)))
    return Manifest.build(
        ("a", "b", "c"), {"seed": 0}, written, Inputs(6, 6, 0, 0), {"name": "tfrecord-prep"}, Run(), Extras(task=task)
    )


def write(manifest: Manifest, out: pathlib.Path) -> pathlib.Path:
    document, counts = manifest.documents()
    out.mkdir()
    (out / FILENAME).write_bytes(document)
    (out / SHARD_COUNTS).write_bytes(counts)
    return out


def test_version_2_names_its_sidecar_and_reads_it_only_when_asked(tmp_path):
    manifest = built()
    out = write(manifest, tmp_path / "out")
    document = json.loads((out / FILENAME).read_bytes())
    assert document["version"] == 2
    assert [set(s) for s in document["splits"]["train"]["shards"]] == [
        {"file", "index", "examples", "bytes", "sha256"}
    ] * 2
    assert document["splits"]["train"]["class_counts"] == {"a": 2, "b": 3, "c": 0}  # split totals stay
    lines = (out / SHARD_COUNTS).read_bytes()
    assert lines == (
        b'{"class_counts":{"a":2,"b":1},"file":"train-00000-of-00002.tfrecord","split":"train"}\n'
        b'{"class_counts":{"b":2},"file":"train-00001-of-00002.tfrecord","split":"train"}\n'
    )
    assert document["shard_counts"] == shard_counts.SidecarRef.of(lines).to_json()

    plain = Manifest.load(str(out))
    assert [s.class_counts for _, s in plain.shards()] == [None, None]
    assert plain.dumps() == (out / FILENAME).read_bytes()  # round trip without the sidecar
    full = Manifest.load(str(out), shard_counts=True)
    assert [s.class_counts for _, s in full.shards()] == [{"a": 2, "b": 1}, {"b": 2}]
    assert full.documents() == ((out / FILENAME).read_bytes(), lines)
    (out / SHARD_COUNTS).unlink()
    assert Manifest.load(str(out)) == plain  # a reader that does not need them never opens the sidecar
    with pytest.raises(ManifestError, match="shard_counts.jsonl does not exist: manifest.json names it"):
        Manifest.load(str(out), shard_counts=True)


def test_multilabel_strata_travel_in_the_sidecar(tmp_path):
    out = write(built("multilabel"), tmp_path / "out")
    full = Manifest.load(str(out), shard_counts=True)
    assert [s.stratum_counts for _, s in full.shards()] == [{"a": 2, "b": 1}, {"b": 2, "(none)": 1}]
    assert full == dataclasses.replace(built("multilabel"), shard_counts=full.shard_counts)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda b: b + b"\n", r"is (\d+) bytes, manifest.json says (?!\1)\d+"),
        (lambda b: b.replace(b'"b":1', b'"b":7'), r"has sha256 [0-9a-f]{64}, manifest.json says"),
        (
            lambda b: b"\n".join(reversed(b.rstrip(b"\n").split(b"\n"))) + b"\n",
            r"line 1 must be the counts of train/train-00000-of-00002.tfrecord \(manifest order\)",
        ),
        (lambda b: b.replace(b'"b":2', b'"b":-2'), r"line 2: class_counts\['b'\] must be an integer >= 0, got -2"),
        (lambda b: b.split(b"\n")[0] + b"\n", r"has 1 line\(s\) for the manifest's 2 shard\(s\)"),
        (lambda b: b.replace(b'{"class_counts"', b"{class_counts", 1), r"line 1 is not valid JSON"),
    ],
)
def test_a_sidecar_that_is_not_the_one_written_is_a_manifest_error_naming_the_line(tmp_path, edit, message):
    manifest = built()
    document, counts = manifest.documents()
    changed = edit(counts)
    if "bytes, manifest" not in message and "sha256" not in message:  # past the size and hash checks
        document = manifest.dumps().replace(
            json.dumps(shard_counts.SidecarRef.of(counts).sha256).encode(),
            json.dumps(shard_counts.SidecarRef.of(changed).sha256).encode(),
        )
        document = json.loads(document)
        document["shard_counts"]["bytes"] = len(changed)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(document).with_shard_counts(changed)


def test_a_version_2_manifest_must_name_a_sidecar_beside_it():
    document = built().to_json()
    for bad in ("../x.jsonl", "/etc/passwd", ".hidden", "a\\b", ""):
        document["shard_counts"]["file"] = bad
        with pytest.raises(ManifestError, match="shard_counts.file must be a file name beside it"):
            Manifest.from_json(document)
    del document["shard_counts"]
    with pytest.raises(ManifestError, match="shard_counts must be an object, got None"):
        Manifest.from_json(document)


def test_verify_names_a_damaged_sidecar(tmp_path):
    from prep.verify import verify

    out = tmp_path / "v2"
    shutil.copytree(V1, out)
    document = shard_counts.split_out(json.loads((out / FILENAME).read_bytes()))
    (out / FILENAME).write_bytes(json.dumps(document[0]).encode())
    (out / SHARD_COUNTS).write_bytes(document[1])
    assert verify(str(out)).ok  # the version-1 dataset as version 2: the same shards, the same verdict
    (out / SHARD_COUNTS).write_bytes(document[1].replace(b'"cat":1', b'"cat":2', 1))
    problems = verify(str(out)).problems
    assert [(p.file, p.message[:11]) for p in problems] == [(SHARD_COUNTS, "has sha256 ")]
