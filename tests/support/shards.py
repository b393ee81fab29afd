"""Reading a converted dataset back with plain TensorFlow, for assertions."""

from __future__ import annotations

import json
import pathlib


def read_dataset(output: pathlib.Path) -> dict[str, list[list[dict]]]:
    """{split: [[parsed record dict per record] per shard]} read with TFRecordDataset + parse_single_example."""
    import tensorflow as tf

    from loaders.decode import tf_feature_spec

    manifest = json.loads((output / "manifest.json").read_text())
    result = {}
    for split, info in manifest["splits"].items():
        shards = []
        for shard in info["shards"]:
            records = []
            for raw in tf.data.TFRecordDataset(str(output / shard["file"])):
                parsed = tf.io.parse_single_example(raw, tf_feature_spec())
                records.append({k: v.numpy() for k, v in parsed.items()})
            shards.append(records)
        result[split] = shards
    return result


def shard_bytes(output: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(output.glob("*.tfrecord"))}


def manifest_without_run(output: pathlib.Path) -> dict:
    manifest = json.loads((output / "manifest.json").read_text())
    manifest.pop("run")
    return manifest


def other_files(output: pathlib.Path) -> dict[str, bytes]:
    """Every file but the shards and manifest.json (rejects.jsonl, tfds metadata, record indexes)."""
    return {
        p.name: p.read_bytes()
        for p in sorted(output.iterdir())
        if p.is_file() and p.suffix != ".tfrecord" and p.name != "manifest.json"
    }


def assert_same_dataset(out: pathlib.Path, reference: pathlib.Path, shards: int) -> None:
    """Same shard bytes, manifest (minus "run") and every other file as `reference`, and no temporary folder."""
    assert shard_bytes(out) == shard_bytes(reference)
    assert len(shard_bytes(out)) == shards
    assert manifest_without_run(out) == manifest_without_run(reference)
    assert other_files(out) == other_files(reference)
    assert {"rejects.jsonl", "dataset_info.json", "features.json"} <= set(other_files(out))
    assert not (out / ".prep-tmp").exists()


def convert_with_cli(source: pathlib.Path, out: pathlib.Path, *args) -> pathlib.Path:
    """`prep convert SOURCE OUT ARGS` in-process; asserts success and returns OUT."""
    from click.testing import CliRunner

    from prep.cli import main

    result = CliRunner().invoke(main, ["convert", str(source), str(out), *map(str, args)])
    assert result.exit_code == 0, result.output
    return out
