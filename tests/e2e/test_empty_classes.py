"""Classes left with no example (`--empty-classes keep|drop|fail`): every input of theirs rejected,
or an empty class folder. keep: named in a warning and in the manifest, label ids stable;
drop: out of `labels`, later ids renumbered byte-correctly; fail: one Error: line, recoverable
with --resume."""

import json
import shutil

import pytest

import loaders
from prep import render
from prep.core.errors import ManifestError, PlanError
from prep.core.layout import check_empty_classes, empty_labels, label_ids
from prep.core.manifest import Manifest
from prep.core.schema import ImageRecord, relabel, relabelled_size
from prep.verify import check_manifest
from tests.support import datasets
from tests.support.imagegen import image_bytes, write_class_tree
from tests.support.shards import manifest_without_run, other_files, read_dataset, shard_bytes

ARGS = ("--num-shards", 2, "--workers", 2, "--index")
COUNTS = {"ant": 9, "cat": 7, "dog": 6}
EXPECTED_ERROR = (
    "Error: class 'bee' has no example (every input rejected, or none listed) and --empty-classes is "
    "fail; the images read so far are kept: to write the dataset, run the same command again with "
    "--empty-classes keep (or drop) and --resume\n"
)


@pytest.mark.parametrize(
    "present, num_classes, policy, empty, ids",
    [
        ({0, 1, 2}, 3, "drop", (), (0, 1, 2)),
        ({0, 2}, 3, "keep", (1,), (0, 1, 2)),  # keep: ids stable
        ({0, 2}, 3, "drop", (1,), (0, -1, 1)),
        ({1, 3}, 5, "drop", (0, 2, 4), (-1, 0, -1, 1, -1)),
        ({4}, 5, "fail", (0, 1, 2, 3), (0, 1, 2, 3, 4)),  # fail never writes: ids as they are
    ],
)
def test_empty_labels_and_the_ids_written(present, num_classes, policy, empty, ids):
    assert empty_labels(present, num_classes) == empty
    assert label_ids(num_classes, empty, policy) == ids


def test_fail_names_the_classes():
    labels = [f"c{i}" for i in range(14)]
    check_empty_classes(labels, [1], "keep")
    check_empty_classes(labels, [1], "drop")
    check_empty_classes(labels, [], "fail")
    with pytest.raises(
        PlanError,
        match=r"^classes 'c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9' and 2 "
        r"more have no example \(every input rejected, or none listed\) and "
        r"--empty-classes is fail$",
    ):
        check_empty_classes(labels, list(range(12)), "fail")


@pytest.mark.parametrize("old, new", [(0, 1), (5, 2), (127, 126), (128, 127), (200, 3), (16384, 16383), (3, 300)])
@pytest.mark.parametrize("image_size", [1, 90, 110, 16_250, 16_400])
def test_a_renumbered_record_differs_only_in_its_label_and_its_size_is_known(old, new, image_size):
    # Image sizes put the record's length on both sides of 128 and 16384, where the outer varint widens.
    record = ImageRecord.build(b"\xff" * image_size, "jpeg", 4, 5, 3, old, "bee", "bee/x.jpg")
    data = relabel(record.to_bytes(), new)
    assert data == ImageRecord.build(b"\xff" * image_size, "jpeg", 4, 5, 3, new, "bee", "bee/x.jpg").to_bytes()
    assert relabelled_size(len(record.to_bytes()), old, new) == len(data)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """`mixed`: bee's every input is undecodable, eel's folder is empty; `clean`: the same without them;
    `rejected`: bee's inputs rejected, no empty folder."""
    root = tmp_path_factory.mktemp("empty-classes")
    write_class_tree(root / "clean", COUNTS, size=(14, 10))
    (root / "clean" / "cat" / "rgba.png").write_bytes(image_bytes("PNG", size=(9, 9), mode="RGBA"))  # converted
    shutil.copytree(root / "clean", root / "rejected")
    (root / "rejected" / "bee").mkdir()
    for i in range(3):
        (root / "rejected" / "bee" / f"bee_{i}.jpg").write_bytes(b"not an image %d" % i)
    shutil.copytree(root / "rejected", root / "mixed")
    (root / "mixed" / "eel").mkdir()
    return root


def convert(run_cli, source, out, *extra):
    result = run_cli("convert", source, out, *ARGS, *extra)
    assert result.exit_code == 0, result.output
    return result.output, datasets.load(out)  # the shards' counts in the shards (version 1's form)


@pytest.fixture(scope="module")
def converted(sources, tmp_path_factory):
    """`convert` of a source of `sources` with extra arguments, made once per (source, arguments) for the module,
    for the tests that only read it: (output, manifest, OUTPUT)."""
    from click.testing import CliRunner

    from prep.cli import main

    made: dict[tuple, tuple] = {}
    run = lambda *args: CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)  # noqa: E731

    def get(name, *extra):
        key = (name, *map(str, extra))
        if key not in made:
            out = tmp_path_factory.mktemp(name) / "out"
            made[key] = (*convert(run, sources / name, out, *extra), out)
        return made[key]

    return get


def labels_written(out) -> dict[str, set[int]]:
    return {
        name: {
            r["image/class/label"]
            for shards in read_dataset(out).values()
            for s in shards
            for r in s
            if r["image/class/text"].decode() == name
        }
        for name in COUNTS
    }


def test_keep_warns_counts_and_keeps_ids_stable(converted, run_cli):
    output, manifest, out = converted("mixed")
    assert (
        "warning: 2 classes with no example (bee, eel): every input rejected, or none listed; kept in labels "
        "with their label id (--empty-classes drop removes them)\n"
    ) in output
    assert manifest["labels"] == ["ant", "bee", "cat", "dog", "eel"]
    assert manifest["inputs"]["empty_classes"] == ["bee", "eel"]
    assert "empty_classes" not in manifest["options"]  # the default is not recorded
    assert manifest["splits"]["train"]["class_counts"] == {"ant": 9, "bee": 0, "cat": 8, "dog": 6, "eel": 0}
    assert labels_written(out) == {"ant": {0}, "cat": {2}, "dog": {3}}
    # Shards are those of the same classes without bee and eel, but for the ids and the class counts.
    assert run_cli("verify", out).exit_code == 0
    weights = loaders.class_weights(out, "train")
    assert weights == pytest.approx({0: 23 / (3 * 9), 1: 0.0, 2: 23 / (3 * 8), 3: 23 / (3 * 6), 4: 0.0})
    result = run_cli("inspect", out)
    assert (
        "2 classes with no example (bee, eel): every input rejected, or none listed; kept in labels with their "
        "label id (--empty-classes drop removes them)"
    ) in result.output.splitlines()


def test_without_empty_classes_nothing_is_added(sources, converted, tmp_path, run_cli):
    output, manifest = convert(run_cli, sources / "clean", tmp_path / "out", "--empty-classes", "drop")
    assert "warning" not in output and "empty_classes" not in manifest["inputs"]
    _, keep, kept = converted("clean")
    assert shard_bytes(tmp_path / "out") == shard_bytes(kept)
    assert render.empty_classes_line(keep["inputs"].get("empty_classes"), keep["options"].get("empty_classes")) is None
    assert "empty_classes" not in keep["options"]


@pytest.mark.parametrize("extra", [(), ("--resize", 8)])  # images kept as they are, and re-encoded
def test_drop_renumbers_byte_for_byte_as_if_the_classes_never_were(sources, converted, tmp_path, run_cli, extra):
    output, manifest = convert(run_cli, sources / "mixed", tmp_path / "out", "--empty-classes", "drop", *extra)
    assert (
        "warning: dropped 2 classes with no example (bee, eel) from labels: the label ids of the classes after "
        "them moved down\n"
    ) in output
    _, clean, clean_out = converted("clean", *extra)
    assert manifest["labels"] == clean["labels"] == ["ant", "cat", "dog"]
    assert manifest["options"]["empty_classes"] == "drop" and manifest["inputs"]["empty_classes"] == ["bee", "eel"]
    assert shard_bytes(tmp_path / "out") == shard_bytes(clean_out)
    indexes = {k: v for k, v in other_files(tmp_path / "out").items() if k.endswith(".idx")}
    assert len(indexes) == 2 and indexes == {k: v for k, v in other_files(clean_out).items() if k in indexes}
    assert manifest["splits"] == clean["splits"]
    assert labels_written(tmp_path / "out") == {"ant": {0}, "cat": {1}, "dog": {2}}
    assert run_cli("verify", tmp_path / "out", "--deep").exit_code == 0
    assert loaders.class_weights(tmp_path / "out", "train") == loaders.class_weights(clean_out, "train")
    assert (tmp_path / "out" / "image.class.label.labels.txt").read_text() == "ant\ncat\ndog\n"


def test_fail_stops_before_any_shard_and_resume_recovers(sources, tmp_path, run_cli):
    out = tmp_path / "out"
    result = run_cli("convert", sources / "rejected", out, *ARGS, "--empty-classes", "fail")
    assert (result.exit_code, result.output) == (1, EXPECTED_ERROR)
    assert list(out.glob("*.tfrecord")) == [] and not (out / "manifest.json").exists()
    output, manifest = convert(run_cli, sources / "rejected", out, "--empty-classes", "keep", "--resume")
    assert manifest["run"]["resumed"]["chunks_reused"] == manifest["run"]["resumed"]["chunks"] == 2  # none read again
    _, fresh = convert(run_cli, sources / "rejected", tmp_path / "fresh")
    assert shard_bytes(out) == shard_bytes(tmp_path / "fresh") and manifest_without_run(out) == manifest_without_run(
        tmp_path / "fresh"
    )
    assert "warning: 1 class with no example (bee)" in output
    assert manifest["inputs"]["empty_classes"] == ["bee"]


def test_fail_on_a_class_with_no_input_at_all_stops_before_reading(sources, tmp_path, run_cli):
    result = run_cli("convert", sources / "mixed", tmp_path / "out", *ARGS, "--empty-classes", "fail")
    assert (result.exit_code, result.output) == (
        1,
        "Error: class 'eel' has no example (every input rejected, or none listed) and --empty-classes is fail; "
        "nothing was read: run again with --empty-classes keep (or drop) to write the dataset\n",
    )
    assert not (tmp_path / "out").exists()


def test_the_manifest_is_checked_for_what_it_says_of_empty_classes(converted):
    _, manifest, _ = converted("mixed")
    assert check_manifest(Manifest.from_json(manifest)) == []
    broken = json.loads(json.dumps(manifest))
    broken["inputs"]["empty_classes"] = ["ant", "zebra"]
    assert [p.message for p in check_manifest(Manifest.from_json(broken))] == [
        "inputs.empty_classes names 'ant', which holds 9 record(s)",
        "inputs.empty_classes names 'zebra', which is not in labels",
    ]
    broken["options"]["empty_classes"] = "drop"
    broken["inputs"]["empty_classes"] = ["bee"]
    assert [p.message for p in check_manifest(Manifest.from_json(broken))] == [
        "inputs.empty_classes names 'bee' as dropped (--empty-classes drop), but it is in labels"
    ]
    broken["inputs"]["empty_classes"] = "bee"
    with pytest.raises(ManifestError, match=r"inputs.empty_classes must be a list, got 'bee'"):
        Manifest.from_json(broken)


def test_drop_renumbers_multi_part_shards_too(sources, converted, tmp_path):
    """group_target=3 cuts every shard into parts, written apart and joined (write.ConcatParts)."""
    from beam_jobs import convert as conversion
    from prep.core.convert_options import build_config
    from prep.core.inputs import list_inputs

    options = {"num_shards": 2, "workers": 2, "index": True, "empty_classes": "drop"}
    config = build_config(str(sources / "mixed"), str(tmp_path / "out"), options)
    manifest = conversion.convert(config, list_inputs(config), group_target=3)
    assert manifest.labels == ("ant", "cat", "dog")
    clean = converted("clean")[2]
    assert shard_bytes(tmp_path / "out") == shard_bytes(clean)
    assert {k: v for k, v in other_files(tmp_path / "out").items() if k.endswith(".idx")} == {
        k: v for k, v in other_files(clean).items() if k.endswith(".idx")
    }
