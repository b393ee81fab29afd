"""Small converted datasets for the verify and inspect tests, and ways to change one consistently."""

from __future__ import annotations

import json
import pathlib
import shutil

from click.testing import CliRunner

from prep.cli import main
from prep.core import manifest as manifest_lib
from prep.core import shard_counts, tfds_meta
from prep.core.errors import ManifestError
from prep.core.schema import ImageRecord
from prep.core.tfrecord import frame, read_records


def convert(source: pathlib.Path, out: pathlib.Path, *args) -> pathlib.Path:
    result = CliRunner().invoke(main, ["convert", str(source), str(out), *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


def copy(dataset: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    shutil.copytree(dataset, dest)
    return dest


def load(out: pathlib.Path) -> dict:
    """The manifest as one document to edit: a version-2 manifest's shard counts put back in its shards
    (`shard_counts.inline`, version 1's form), which `save` moves out again."""
    document = json.loads((out / manifest_lib.FILENAME).read_text())
    if document.get("version") == 2 and isinstance(document.get("shard_counts"), dict):
        return shard_counts.inline(document, (out / document["shard_counts"]["file"]).read_bytes())
    return document


def inline_v1(out: pathlib.Path) -> bool:
    """Whether `out` holds a version-1 manifest (counts inline), which `save` then keeps as it is."""
    return json.loads((out / manifest_lib.FILENAME).read_text()).get("version") == 1


def save(out: pathlib.Path, manifest: dict) -> None:
    """Writes `manifest` (as `load` gives it), and the tfds metadata that follows from it, so only what a
    test breaks is wrong (a manifest broken beyond reading leaves the tfds metadata as it was).

    A dataset written with a version-2 manifest gets one again: the shard counts go to its sidecar, which
    the manifest names with its new size and SHA-256, so the counts a test changes are what verify reads.
    """
    if manifest.get("version") == 1 and not inline_v1(out):
        try:
            manifest, data = shard_counts.split_out(manifest)
        except (AttributeError, KeyError, TypeError, ValueError):
            data = None  # too broken to split: written as it is
        if data is not None:
            (out / shard_counts.FILENAME).write_bytes(data)
    try:
        typed = manifest_lib.Manifest.from_json(manifest)
    except ManifestError:
        typed = None
    for name, data in tfds_meta.files(typed).items() if typed is not None else ():
        (out / name).write_bytes(data)
    (out / manifest_lib.FILENAME).write_bytes(manifest_lib.dumps(manifest))


def records(path: pathlib.Path) -> list[bytes]:
    with open(path, "rb") as f:
        return [data for _, _, data in read_records(f, path.name)]


def record_starts(path: pathlib.Path) -> list[int]:
    with open(path, "rb") as f:
        return [offset for _, offset, _ in read_records(f, path.name)]


def rewrite_split(out: pathlib.Path, split: str, shards: list[list[bytes]]) -> None:
    """Writes new record lists for the shards of `split` and updates the manifest to match them exactly.

    Sizes, sha256 and counts are all recomputed, so what remains wrong is only
    what the records themselves break (balance, schema, images).
    """
    import hashlib

    manifest = load(out)
    labels = manifest["labels"]
    info = manifest["splits"][split]
    assert len(shards) == len(info["shards"])
    for entry, datas in zip(info["shards"], shards):
        blob = b"".join(frame(d) for d in datas)
        (out / entry["file"]).write_bytes(blob)
        counts = {name: 0 for name in labels}
        for data in datas:
            try:
                label = ImageRecord.from_bytes(data).label
            except Exception:
                continue
            if 0 <= label < len(labels):
                counts[labels[label]] += 1
        entry.update(examples=len(datas), bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest(), class_counts=counts)
    info["examples"] = sum(s["examples"] for s in info["shards"])
    info["bytes"] = sum(s["bytes"] for s in info["shards"])
    info["class_counts"] = {name: sum(s["class_counts"][name] for s in info["shards"]) for name in labels}
    manifest["inputs"]["written"] = sum(s["examples"] for s in manifest["splits"].values())
    manifest["inputs"]["found"] = sum(manifest["inputs"][k] for k in ("written", "rejected", "capped"))
    save(out, manifest)
