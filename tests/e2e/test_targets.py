"""`--target`: what a target makes `prep convert` write and `prep verify` check, without TensorFlow.

tests/test_model_garden.py reads the output with Model Garden itself.
"""

import json
import shlex

import pytest

from prep.core import schema, targets
from prep.core.manifest import Inputs, Manifest, Run
from tests.support.datasets import convert, load, records, save
from tests.support.imagegen import write_class_tree


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets") / "src"
    write_class_tree(root, {"a": 20, "b": 14, "c": 6}, size=(16, 12), png_every=3)  # 40 inputs: 3 chunks
    return root


def test_model_garden_records_are_jpeg_with_unique_ids_whatever_the_workers(source, tmp_path, run_cli):
    one = convert(source, tmp_path / "one", "--num-shards", 2, "--target", "model-garden", "--workers", 1)
    two = convert(
        source,
        tmp_path / "two",
        "--num-shards",
        2,
        "--target",
        "model-garden",
        "--workers",
        2,
        "--image-format",
        "jpeg",
    )  # what the target implies may also be said
    shards = sorted(one.glob("*.tfrecord"))
    assert [p.read_bytes() for p in shards] == [(two / p.name).read_bytes() for p in shards]
    parsed = [schema.ImageRecord.from_bytes(r) for p in shards for r in records(p)]
    assert len(parsed) == 40 and {r.format for r in parsed} == {"jpeg"}
    assert len({r.source_id for r in parsed}) == 40 and all(r.source_id.isdigit() for r in parsed)
    manifest = load(one)
    assert manifest["options"]["target"] == "model-garden" and manifest["options"]["image_format"] == "jpeg"
    assert manifest["inputs"]["converted"] == 12  # the PNGs, re-encoded
    summary = run_cli("convert", source, tmp_path / "three", "--target", "model-garden").output
    assert (
        "target model-garden: every record is JPEG with an image/source_id, for Model Garden's default "
        "decoders (num_classes 3)" in summary
    )
    assert load(convert(source, tmp_path / "plain"))["options"]["target"] == "none"


@pytest.mark.parametrize("fmt", ["png", "keep"])
def test_a_format_the_target_cannot_read_is_one_error(source, tmp_path, run_cli, fmt):
    result = run_cli("convert", source, tmp_path / "out", "--target", "model-garden", "--image-format", fmt)
    assert result.exit_code == 1
    assert result.output == (
        f"Error: --target model-garden stores every image as JPEG (Model Garden's classification "
        f"Parser decodes only JPEG by default), so --image-format {fmt} contradicts it: leave "
        f"--image-format out\n"
    )
    assert not (tmp_path / "out").exists()


def test_plain_verify_checks_the_target_the_manifest_records(source, tmp_path, run_cli):
    out = convert(source, tmp_path / "out", "--num-shards", 2)
    assert run_cli("verify", out).exit_code == 0  # no target: PNG records are fine
    manifest = load(out)
    manifest["options"]["target"] = "model-garden"  # as if converted for it: now it must hold
    save(out, manifest)
    result = run_cli("verify", out)
    assert result.exit_code == 1
    assert result.output.count("image/encoded is PNG") == 12
    assert (
        "--target model-garden: 40 records that Model Garden's default decoders cannot read (12 not JPEG, for "
        "the classification Parser; 40 without image/source_id, for TfExampleDecoder)" in result.output
    )
    manifest["options"]["target"] = "od-api"
    save(out, manifest)
    problems = json.loads(run_cli("verify", out, "--json").output)["problems"]
    assert problems == [
        {
            "file": "manifest.json",
            "record": None,
            "message": "options.target is 'od-api', not a target this version knows (none, model-garden)",
        }
    ]


def test_fix_command_repeats_the_options_that_decided_the_output():
    options = {
        "seed": 3,
        "num_shards": None,
        "shard_size": 1 << 20,
        "split": "train=0.9,test=0.1",
        "max_per_class": 50,
        "resize": 256,
        "max_side": None,
        "image_format": "keep",
        "quality": 90,
        "max_pixels": 89_478_485,
        "layout": "label_file",
        "label_file": "labels.csv",
        "classes_fixed": True,
        "allow_outside_source": True,
        "index": True,
        "target": "none",
    }
    manifest = Manifest(
        labels=("a",),
        options=options,
        splits={},
        inputs=Inputs(0, 0, 0, 0),
        tool={},
        run=Run(source="/data/raw images"),
    )
    assert shlex.split(targets.fix_command(manifest, "out", "model-garden")) == [
        "prep",
        "convert",
        "/data/raw images",
        "out",
        "--labels",
        "labels.csv",
        "--classes",
        "CLASSES",
        "--split",
        "train=0.9,test=0.1",
        "--shard-size",
        str(1 << 20),
        "--max-per-class",
        "50",
        "--seed",
        "3",
        "--resize",
        "256",
        "--quality",
        "90",
        "--allow-outside-source",
        "--index",
        "--target",
        "model-garden",
        "--overwrite",
    ]
