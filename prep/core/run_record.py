"""The run record: what decides a conversion's output, and whether an interrupted run may be resumed.

Pure comparisons, no file access.

A conversion records, before any image is read, what decides its output
(`run_record`): the output-deciding options (`ConvertConfig.manifest_options`),
the tool and Pillow versions (Pillow encodes re-encoded images), the class
names and a digest of the listing (every input path with its label and split, and every early
reject; made of per-chunk sums, `listing_digest`). `--resume` recomputes the record and refuses unless
it is identical, but for the planning options (`PLANNING_OPTIONS`): they
decide only which prepared example goes to which shard and the label ids
written, so a resumed run may change them and plan the prepared images anew
(`replanned` names them). `differences` says what changed, in the user's terms.

What the listing cannot show, a file changed in place, is caught by the
per-input signatures that each prepared chunk records (see
`prep.core.run.checkpoints`).
"""

from __future__ import annotations

import hashlib
import json
import typing
from collections.abc import Iterable, Sequence
from typing import Any

import prep
from prep.core.listing import InputRef, printable

# 2: spill files leave kept images out, and chunk indexes record where they go.
# 3: damaged PNGs are rejected, so chunks prepared before decided otherwise.
# 4: the listing is staged in `ordering.listing_order`, which the planner relies on.
# 5: a spill's key rows hold each input's path, and keys come from the check's own decode (content keys v2).
# 6: a spill's key rows are packed binary (prep/core/run/dedupe_files.encode_keys).
# 7: they end the spill file (dedupe_files.spill_trailer), from a luma decode (content keys v3).
# 8: keys are hashed a chunk at a time and recorded per chunk (key_rows.write_rows), not after each batch's records.
# 9: chunk indexes record outcomes by field name (checkpoints.INDEX_VERSION 2), key files are versioned .npy.
# 10: one spill file per chunk (checkpoints.INDEX_VERSION 3), offsets from its start; names spread by a hash.
# 11: single-label chunks are cut by rank-key buckets (ordering.plan_chunks); the listing digest adds per-chunk sums.
RUN_VERSION = 11
_MOD = 2**256
_FLAGS = {"layout": "--layout", "label_file": "--labels", "classes_fixed": "--classes"}
# Manifest options that only shape the plan, read after every image is prepared.
PLANNING_OPTIONS = ("seed", "num_shards", "shard_size", "split", "max_per_class", "empty_classes")
# What a planning failure after the images were read adds: the command that recovers.
REPLAN_HINT = (
    "the images read so far are kept: run the same command again with the corrected option and "
    "--resume to plan them anew without reading them again"
)


def tool_info() -> dict[str, str]:
    """The manifest's `tool`: our version and Pillow's, which decides re-encoded bytes."""
    import PIL

    return {"name": "tfrecord-prep", "version": prep.__version__, "pillow": PIL.__version__}


def refs_sum(refs: Iterable[InputRef]) -> int:
    """The inputs' share of the listing digest: the sum of each one's SHA-256 (of its staged fields), mod 2**256.

    A sum, so that it does not depend on the order or chunks the inputs are staged in (the seed orders
    them, and a resumed run may change the seed), and chunks staged by many tasks add up (`listing_digest`).
    """
    total = 0
    for r in refs:
        total += int.from_bytes(hashlib.sha256(json.dumps(r.fields()).encode()).digest(), "big")
    return total % _MOD


def listing_digest(classes: Sequence[str], sums: Iterable[int], rejects: str) -> str:
    """SHA-256 of the listing: the classes, the inputs (`refs_sum` of each chunk, added) and the SHA-256 of
    the early rejects' file (`checkpoints.write_listing_rejects`). Made of per-chunk sums, so that whoever
    stages the chunks (the driver, or workers: `beam_jobs.listing`) gives the same digest, and the driver
    never hashes inputs one by one."""
    total = sum(sums) % _MOD
    return hashlib.sha256(json.dumps([list(classes), f"{total:064x}", rejects]).encode()).hexdigest()


class ListedDigest(typing.NamedTuple):
    """The run record's `listing`: its digest (`listing_digest`), inputs and early rejects."""

    sha256: str
    inputs: int
    rejected: int


def run_record(
    options: dict[str, Any], tool: dict[str, str], classes: Sequence[str], listed: ListedDigest
) -> dict[str, Any]:
    """What decides a conversion's output; stored as `.prep-tmp/run.json`."""
    return {
        "version": RUN_VERSION,
        "options": options,
        "tool": tool,
        "labels": list(classes),
        "listing": listed._asdict(),
    }


def _show(value: object) -> str:
    return "unset" if value is None else json.dumps(value)


def flag(key: str) -> str:
    """The option a manifest option key comes from: "num_shards" -> "--num-shards"."""
    return _FLAGS.get(key, "--" + key.replace("_", "-"))


def replanned(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The planning options (`PLANNING_OPTIONS`) whose values differ, as flags, sorted."""
    then, now = old.get("options") or {}, new["options"]
    return [flag(key) for key in sorted(PLANNING_OPTIONS) if then.get(key) != now.get(key)]


def differences(old: dict[str, Any], new: dict[str, Any], planning: bool = True) -> list[str]:
    """What differs between the interrupted run's record and this run's, one phrase each.

    The listing is compared by digest only; `listing_change` names an input.
    Without `planning`, changed planning options (`PLANNING_OPTIONS`) are not counted.
    """
    if not isinstance(old, dict) or old.get("version") != RUN_VERSION:
        return ["the interrupted run was recorded by another version of tfrecord-prep"]
    found: list[str] = []
    if old.get("tool") != new["tool"]:
        then, now = old.get("tool") or {}, new["tool"]
        found.append(
            f"tfrecord-prep {then.get('version')} with Pillow {then.get('pillow')} ran it, "
            f"this is tfrecord-prep {now['version']} with Pillow {now['pillow']}"
        )
    old_options = old.get("options") or {}
    for key in sorted(set(old_options) | set(new["options"])):
        then, now = old_options.get(key), new["options"].get(key)
        if then != now and (planning or key not in PLANNING_OPTIONS):
            found.append(f"{flag(key)} was {_show(then)}, now {_show(now)}")
    if old.get("labels") != new["labels"]:
        found.append(f"the classes were {', '.join(old.get('labels') or [])}, now {', '.join(new['labels'])}")
    if old.get("listing") != new["listing"]:
        found.append("SOURCE lists other inputs")
    return found


def listing_change(old_entries: Sequence[tuple[Any, ...]], new_entries: Sequence[tuple[Any, ...]]) -> str:
    """Names what changed between two listings, as (path, ...) tuples of inputs and early rejects."""
    old = {e[0]: tuple(e) for e in old_entries}
    new = {e[0]: tuple(e) for e in new_entries}
    added = sorted(new.keys() - old.keys())
    removed = sorted(old.keys() - new.keys())
    changed = sorted(p for p in new.keys() & old.keys() if new[p] != old[p])
    parts = []
    for paths, what in ((added, "new"), (removed, "gone"), (changed, "listed with another label, split or reason")):
        if paths:
            more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
            parts.append(f"{printable(paths[0])}{more} {'are' if more else 'is'} {what}")
    return "; ".join(parts) or "the inputs are listed in another order"
