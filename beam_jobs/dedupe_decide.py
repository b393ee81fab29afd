"""The dedupe stage's decide and report steps: a batch of duplicate groups decided at a time, and
OUTPUT/duplicates.jsonl streamed from the batches' line files (beam_jobs/group_batches.py).

A step holds one group batch (at most `group_batches.GROUPS_PER_BATCH` groups), or,
for the report, one line per batch plus, under --split, a (first path, label
counts) pair per group no user group pins. Only slices of work files travel on.
"""

from __future__ import annotations

import itertools
import json

from beam_jobs import group_batches
from beam_jobs import grouping
from beam_jobs.heap import release_free_memory
from prep.core import storage
from prep.core.groups import DedupeOptions, balance_pins, decide, summarize
from prep.core.workdir import WorkDir


def decide_batch(element, work: WorkDir, options: DedupeOptions, seed: int, fractions, single_label: bool):
    """(batch, [("members", Slice) and ("unit", (group, unit, split)) if any]) -> ("decided", (chunk,
    ("decided", Slice))) per chunk with a member, and ("lines", batch) once its lines are recorded.

    Decisions come from `prep.core.groups.decide`, one group at a time; they, the group lines and the
    policy rejects are recorded in the work dir (`group_batches.write_decisions`, `write_lines`,
    `write_rejects`)."""
    batch, values = element
    units = {v[0]: v[1:] for kind, v in values if kind == "unit"}
    groups: dict[int, list] = {}
    for kind, v in values:
        if kind == "members":
            for group, member in group_batches.read_members(v):
                groups.setdefault(group, []).append(member)
    by_chunk: dict[int, list] = {}
    lines = []
    for group in sorted(groups):
        unit, unit_split = units.get(group, (None, None))
        decisions, line = decide(groups[group], options, seed, fractions, single_label, unit, unit_split)
        for d in decisions:
            by_chunk.setdefault(grouping.item_chunk(d.item), []).append(d)
        lines.append({**line, "_movable": decisions[0].movable})  # write_report balances those groups' splits
    for decisions in by_chunk.values():
        decisions.sort(key=lambda d: d.item)
    slices = group_batches.write_decisions(work, batch, by_chunk)
    group_batches.write_lines(work, batch, lines)
    group_batches.write_rejects(work, batch, [d.reject for ds in by_chunk.values() for d in ds if d.reject is not None])
    for chunk, where in slices.items():
        yield "decided", (chunk, ("decided", where))
    yield "lines", batch


def write_report(element, output: str, work: WorkDir, fractions):
    """(None, [("lines", batch) and ("stats", (refused, skipped))]) -> writes OUTPUT/duplicates.jsonl when a
    group was found (or a comparison or a union left out), and yields the marker regroup waits on. Under
    --split, first picks the split of each group no user group pins (`balance_pins`, recorded for regroup:
    `grouping.write_choices`). The lines are read from the batches' files, merged in order, twice: for the
    header's counts, then to write them."""
    _, values = element
    batches = sorted(v for kind, v in values if kind == "lines")
    refused = sum(v[0] for kind, v in values if kind == "stats")
    skipped = sum(v[1] for kind, v in values if kind == "stats")
    if not batches and not refused and not skipped:
        yield -1, ("report", None)  # nothing found: no file, so a dataset without duplicates is as before
        return
    pins: dict[str, str] = {}
    if fractions:
        movable = [(line["_movable"], _kept_labels(line))
                   for line in group_batches.merged_lines(work, batches) if line["_movable"]]
        if movable:
            pins = balance_pins(movable, fractions)
            grouping.write_choices(work, "duplicates", pins)

    def lines():
        for line in group_batches.merged_lines(work, batches):
            key = line.pop("_movable")
            if key:
                for m in line["members"]:
                    m["split"] = pins.get(key, m["split"])
            yield line

    header = {"format": "tfrecord-prep-duplicates", "version": 1, **summarize(lines(), refused, skipped)}
    text = (json.dumps(x, sort_keys=True, ensure_ascii=True).encode() + b"\n"
            for x in itertools.chain([header], lines()))
    storage.write_streamed(storage.join(output, grouping.DUPLICATES_FILE), text)
    release_free_memory()
    yield -1, ("report", None)
    yield -1, ("notes", grouping.report_notes(header, batches))


def _kept_labels(line: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in line["members"]:
        if m["rejected"] is None:
            out[m["label"]] = out.get(m["label"], 0) + 1
    return out
