"""The manifest grows with shards + classes, never shards x classes (issue 37), and readers that do not
need the per-shard counts never open shard_counts.jsonl. bench/manifest_scale.py measures 21,841 classes."""

from __future__ import annotations

import json

import pytest

from prep.core.manifest import FILENAME, SHARD_COUNTS
from tests.support.imagegen import write_class_tree

CLASSES = 300


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    from click.testing import CliRunner

    from prep.cli import main

    src = tmp_path_factory.mktemp("scale-src")
    write_class_tree(src, {f"c{i:03d}": 3 for i in range(CLASSES)}, size=(8, 8), png_every=0)
    outs = {}
    for shards in (2, 60):
        out = tmp_path_factory.mktemp("scale") / f"out{shards}"
        result = CliRunner().invoke(
            main,
            ["convert", str(src), str(out), "--num-shards", str(shards), "--duplicates", "off", "--no-progress"],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        outs[shards] = out
    return outs


def test_manifest_size_grows_with_shards_not_shards_times_classes(outputs):
    small, large = ((outputs[n] / FILENAME).stat().st_size for n in (2, 60))
    # A shard object (file, index, examples, bytes, sha256, indented) is ~230 bytes; listing every class per
    # shard, as version 1 did, would add 300 x ~18 bytes per shard.
    assert large - small <= 58 * 300, (small, large)
    document = json.loads((outputs[60] / FILENAME).read_text())
    assert document["version"] == 2 and len(document["splits"]["train"]["class_counts"]) == CLASSES
    # The sidecar: one line per shard and only the 900 records' non-zero (class, shard) counts.
    lines = (outputs[60] / SHARD_COUNTS).read_text().splitlines()
    assert len(lines) == 60 and sum(len(json.loads(line)["class_counts"]) for line in lines) <= 3 * CLASSES
    assert (outputs[60] / SHARD_COUNTS).stat().st_size <= 60 * 80 + 3 * CLASSES * 10


def test_verify_and_inspect_read_the_sidecar(outputs, run_cli):
    result = run_cli("verify", outputs[60])
    assert result.exit_code == 0 and result.output.splitlines()[-1].startswith("OK: 60 shards and 900 records")
    result = run_cli("inspect", outputs[60], "--json")
    assert result.exit_code == 0, result.output
    classes = json.loads(result.output)["splits"]["train"]["classes"]
    assert classes["c000"]["per_shard"] == {"min": 0, "max": 1}  # 3 records in 60 shards


def test_loaders_never_read_the_sidecar(outputs, tmp_path):
    pytest.importorskip("tensorflow")
    import shutil

    import loaders

    out = tmp_path / "no-sidecar"
    shutil.copytree(outputs[60], out)
    (out / SHARD_COUNTS).unlink()
    assert loaders.steps_per_epoch(str(out), "train", 30) == 30
    assert loaders.class_weights(str(out), "train") == {i: 1.0 for i in range(CLASSES)}
    images, labels = next(iter(loaders.load(str(out), "train", batch_size=30, image_size=(8, 8))))
    assert images.shape == (30, 8, 8, 3) and labels.shape == (30,)
