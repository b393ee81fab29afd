"""`manifest.json`: what a finished dataset holds. Schema in docs/manifest.md.

The manifest is written last, atomically; its presence means every shard it
names was complete when it was written. Everything except the "run" object is a
function of the inputs and options, so two runs on any runner compare equal
once "run" is removed.
"""

from __future__ import annotations

import json

from prep.errors import ManifestError

FILENAME = "manifest.json"
REJECTS = "rejects.jsonl"
FORMAT = "tfrecord-prep"
VERSION = 1
TMP_DIR = ".prep-tmp"


def build(labels, options: dict, shard_results: list[dict], accounting: dict, tool: dict, run: dict) -> dict:
    """Assembles the manifest from per-shard results (see `shard_result`)."""
    splits: dict[str, dict] = {}
    for result in sorted(shard_results, key=lambda r: (r["split"], r["index"])):
        split = splits.setdefault(result["split"], {
            "examples": 0, "bytes": 0, "num_shards": result["count"],
            "class_counts": {name: 0 for name in labels}, "shards": []})
        split["examples"] += result["examples"]
        split["bytes"] += result["bytes"]
        for name, n in result["class_counts"].items():
            split["class_counts"][name] += n
        shard = {k: result[k] for k in ("file", "index", "examples", "bytes", "sha256", "class_counts")}
        if "index_file" in result:  # only with --index
            shard["index_file"] = result["index_file"]
        split["shards"].append(shard)
    return {
        "format": FORMAT,
        "version": VERSION,
        "tool": tool,
        "labels": list(labels),
        "options": options,
        "splits": splits,
        "inputs": accounting,
        "run": run,
    }


def shard_result(name, examples: int, size: int, sha256: str, class_counts: dict) -> dict:
    return {"file": name.filename, "split": name.split, "index": name.index, "count": name.count,
            "examples": examples, "bytes": size, "sha256": sha256, "class_counts": class_counts}


def dumps(manifest: dict) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=True) + "\n").encode()


def loads(data: bytes, where: str = FILENAME) -> dict:
    """Parses a manifest and checks its format and version.

    Raises:
        ManifestError: not JSON, not ours, or a version this tool does not know.
    """
    try:
        manifest = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ManifestError(f"{where} is not a tfrecord-prep manifest")
    if manifest.get("version") != VERSION:
        raise ManifestError(f"{where} has version {manifest.get('version')!r}; this tool reads version {VERSION}")
    for key in ("labels", "splits", "inputs", "options"):
        if key not in manifest:
            raise ManifestError(f"{where} lacks {key!r}")
    return manifest


def load(output: str) -> dict:
    """Reads OUTPUT/manifest.json (local path).

    Raises:
        ManifestError: missing or invalid.
    """
    import os

    path = os.path.join(output, FILENAME)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist: {output} is not a finished dataset") from None
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc.strerror}") from None
    return loads(data, path)


def without_run(manifest: dict) -> dict:
    """The manifest minus the fields that record time, runner and workers."""
    return {k: v for k, v in manifest.items() if k != "run"}
