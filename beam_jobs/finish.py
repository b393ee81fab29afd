"""The last step: rejects.jsonl, the tfds metadata, then the manifest, written last and atomically.

Order matters for crash safety: the manifest is written in full under a
temporary name (storage.temp_path), then renamed to manifest.json, and only
then is .prep-tmp deleted. A kill before the rename leaves no manifest.json
and a resumable .prep-tmp; a kill after it leaves a finished dataset plus a
leftover .prep-tmp, which `--resume` (or `--overwrite`) removes.
"""

from __future__ import annotations

import collections
import json
import time

from beam_jobs import checkpoints, storage
from prep import manifest as manifest_lib
from prep import tfds_meta
from prep.errors import PlanError
from prep.naming import ShardName
from prep.sources import Reject

SHARD, REJECT, CAPPED, REUSED = "shard", "reject", "capped", "reused"


def listing_rejects_path(tmp_dir: str) -> str:
    return storage.join(tmp_dir, "listing", "rejects.json")


def write_listing_rejects(tmp_dir: str, rejects) -> None:
    storage.write_atomic(listing_rejects_path(tmp_dir), json.dumps([list(r) for r in rejects]).encode())


def drop_empty_classes(labels, shard_results: list[dict], accounting: dict, policy: str) -> tuple[list, list]:
    """(labels of the manifest, names of the classes with no example written), in label order.

    With `policy` "drop", those classes leave `labels` and every class count; the
    records were written with the ids that follow from that (`prep.plan.label_ids`).
    """
    totals = collections.Counter()
    for result in shard_results:
        totals.update(result["class_counts"])
    empty = [name for name in labels if not totals[name]]
    if policy != "drop" or not empty:
        return list(labels), empty
    gone = set(empty)
    for result in shard_results:
        result["class_counts"] = {k: v for k, v in result["class_counts"].items() if k not in gone}
    accounting["capped_by_class"] = {k: v for k, v in accounting["capped_by_class"].items() if k not in gone}
    return [name for name in labels if name not in gone], empty


def delete_unplanned_shards(output: str, manifest: dict) -> None:
    """Deletes shard and record-index files the manifest does not name: a resumed run that
    planned anew (other --num-shards, --split, ...) leaves none of the old plan's shards behind."""
    planned = set()
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            planned.add(shard["file"])
            planned.add(ShardName.parse(shard["file"]).index_filename)
    for name in storage.list_names(output):
        if name not in planned and (ShardName.parse(name) is not None or ShardName.parse_index(name) is not None):
            storage.delete(storage.join(output, name))


def finish(element, *, output, tmp_dir, labels, options, found, tool, run, splits=()):
    """(None, [(SHARD, result) | (REJECT, [Reject]) | (CAPPED, (label, count)) | (REUSED, chunk)]) -> written count.

    Writes rejects.jsonl and the files tensorflow-datasets reads (`prep.tfds_meta`), publishes
    manifest.json, then removes the temporary folder. `splits` are the splits SOURCE names
    (split folders or a split column): each must keep an example.
    """
    _, items = element
    shard_results, rejects = [], [Reject(*r) for r in json.loads(storage.read_bytes(listing_rejects_path(tmp_dir)))]
    capped_by_class = {name: 0 for name in labels}
    chunks_reused = 0
    for kind, value in items:
        if kind == SHARD:
            shard_results.append(value)
        elif kind == REJECT:
            rejects.extend(value)
        elif kind == REUSED:
            chunks_reused += 1
        else:
            label, count = value
            capped_by_class[labels[label]] += count
    rejects.sort(key=lambda r: (r.path, r.reason))
    written = sum(r["examples"] for r in shard_results)
    capped = sum(capped_by_class.values())
    accounting = {
        "found": found, "written": written, "rejected": len(rejects), "capped": capped,
        "converted": sum(r["converted"] for r in shard_results),
        "rejected_by_reason": dict(sorted(collections.Counter(r.reason for r in rejects).items())),
        "capped_by_class": capped_by_class,
    }
    lines = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in rejects)
    storage.write_atomic(storage.join(output, manifest_lib.REJECTS), lines.encode())
    if not shard_results:
        reasons = ", ".join(f"{k} {v}" for k, v in accounting["rejected_by_reason"].items())
        raise PlanError(f"no input could be converted ({reasons}); see {storage.join(output, manifest_lib.REJECTS)}")
    emptied = sorted(set(splits) - {r["split"] for r in shard_results})
    if emptied:
        raise PlanError(f"split{'s' if len(emptied) > 1 else ''} {', '.join(map(repr, emptied))} "
                        f"{'have' if len(emptied) > 1 else 'has'} no example left: every input listed in "
                        f"{'them' if len(emptied) > 1 else 'it'} was rejected; see "
                        f"{storage.join(output, manifest_lib.REJECTS)}")
    if found != written + len(rejects) + capped:
        raise RuntimeError(f"internal error: counts do not reconcile: {accounting}")
    labels, empty = drop_empty_classes(labels, shard_results, accounting, options.get("empty_classes", "keep"))
    if empty:  # only then, so that the manifest of a dataset without them is as it always was
        accounting["empty_classes"] = empty
    run = dict(run, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               seconds=round(time.time() - run["started"], 3))
    if run.get("resumed") is not None:
        resumed = dict(run["resumed"])
        in_flight = set(resumed.pop("in_flight", ()))
        run["resumed"] = dict(resumed, chunks_reused=chunks_reused, shards=len(shard_results),
                              shards_reused=sum(bool(r.get("reused")) for r in shard_results))
        if in_flight:  # what the killed run was reading, prepared again in the sandbox
            run["resumed"]["in_flight"] = {"inputs": len(in_flight), "rejected_by_reason": dict(sorted(
                collections.Counter(r.reason for r in rejects if r.path in in_flight).items()))}
    manifest = manifest_lib.build(labels, options, shard_results, accounting, tool, run)
    if run.get("resumed") is not None:
        delete_unplanned_shards(output, manifest)
    # Before the manifest, so that a folder with manifest.json is complete for tfds too.
    for name, data in tfds_meta.files(manifest).items():
        storage.write_atomic(storage.join(output, name), data)
    staged = storage.temp_path(storage.join(output, manifest_lib.FILENAME))
    with storage.open_write(staged) as f:
        f.write(manifest_lib.dumps(manifest))
    checkpoints.pause_for_tests("manifest")
    storage.rename(staged, storage.join(output, manifest_lib.FILENAME))
    checkpoints.delete_tmp(tmp_dir)
    yield written
