"""The dedupe stage's deciding steps (dedupe.py wires them): user groups merged, a batch of duplicate groups
decided at a time, OUTPUT/duplicates.jsonl streamed from the batches' line files, and each chunk's inputs
placed (pinned to a split, or left out) for the planner.

A step holds one group batch (at most `dedupe_files.GROUPS_PER_BATCH` groups), or, for the report, one line per
batch plus, under --split, a (first path, label counts) pair per group no user group pins; regroup holds one
chunk. Only slices of work files travel on (dedupe_files.py).
"""

from __future__ import annotations

import itertools
import json

import apache_beam as beam

from beam_jobs.prepare import ChunkCounts, chunk_counts, read_prepared
from prep.core import storage
from prep.core.groups import balance_pins, decide, merge_units, pin_split, summarize
from prep.core.run import dedupe_files
from prep.core.run.dedupe_types import (
    BatchLines,
    ChunkId,
    DecidedSlice,
    DedupeSettings,
    MemberSlice,
    ReportWritten,
    ScanStats,
    UnitChoice,
    UnitSize,
    UnitsReady,
    UserLink,
)
from prep.core.run.heap import release_free_memory
from prep.core.workdir import WorkDir


def _path(ref) -> str:
    return ref.path.decode("utf-8", "surrogateescape")


def unit_labels(counts: ChunkCounts, work: WorkDir, settings: DedupeSettings):
    """A prepared chunk -> `UnitSize` per user group and label of its inputs."""
    user = dedupe_files.user_keys(work, counts.chunk, settings.options)
    sizes: dict[tuple[str, str], int] = {}
    for ref in read_prepared(work, counts.chunk):
        unit = user(_path(ref))
        if unit is not None:
            key = (unit, settings.labels[ref.label])
            sizes[key] = sizes.get(key, 0) + 1
    for (unit, label), n in sorted(sizes.items()):
        yield UnitSize(unit, label, n)


def merge_user_groups(element, work: WorkDir, fractions):
    """(None, [UserLink | UnitSize | ChunkId]) -> `UnitChoice` per linked duplicate group, and `UnitsReady` per
    chunk once the merged user groups and their splits are recorded (regroup reads them: `dedupe_files.read_units`,
    `dedupe_files.read_choices`). User groups that duplicates link become one unit (`merge_units`); units are
    spread over the splits by `balance_pins`, as duplicate groups are."""
    _, values = element
    values = list(values)
    linked: dict[tuple[int, int], set] = {}  # a group's members may be in several chunks: a link from each
    for link in values:
        if isinstance(link, UserLink):
            linked.setdefault((link.group, link.batch), set()).update(link.users)
    links = [(group, batch, sorted(keys)) for (group, batch), keys in sorted(linked.items())]
    units = merge_units(keys for _, _, keys in links)
    sizes: dict[str, dict[str, int]] = {}
    for size in values:
        if isinstance(size, UnitSize):
            by_label = sizes.setdefault(units.get(size.unit, size.unit), {})
            by_label[size.label] = by_label.get(size.label, 0) + size.images
    pins = balance_pins(sizes.items(), fractions)
    dedupe_files.write_units(work, units)
    dedupe_files.write_choices(work, "users", pins)
    for group, batch, keys in links:
        unit = units[keys[0]]
        yield UnitChoice(batch, group, unit, pins.get(unit))
    for chunk in sorted({v.chunk for v in values if isinstance(v, ChunkId)}):
        yield UnitsReady(chunk)


def decide_batch(element, work: WorkDir, settings: DedupeSettings):
    """(batch, [MemberSlice | UnitChoice]) -> `DecidedSlice` per chunk with a member, and `BatchLines` once
    its lines are recorded.

    Decisions come from `prep.core.groups.decide`, one group at a time; they, the group lines and the
    policy rejects are recorded in the work dir (`dedupe_files.write_decisions`, `write_lines`, `write_rejects`)."""
    batch, values = element
    values = list(values)
    units = {v.group: v for v in values if isinstance(v, UnitChoice)}
    groups: dict[int, list] = {}
    for v in values:
        if isinstance(v, MemberSlice):
            for group, member in dedupe_files.read_members(v.where):
                groups.setdefault(group, []).append(member)
    by_chunk: dict[int, list] = {}
    lines = []
    for group in sorted(groups):
        choice = units.get(group)
        unit, unit_split = (choice.unit, choice.split) if choice else (None, None)
        decisions, line = decide(
            groups[group], settings.options, settings.seed, settings.fractions, settings.single_label, unit, unit_split
        )
        for d in decisions:
            by_chunk.setdefault(dedupe_files.item_chunk(d.item), []).append(d)
        lines.append({**line, "_movable": decisions[0].movable})  # write_report balances those groups' splits
    for decisions in by_chunk.values():
        decisions.sort(key=lambda d: d.item)
    slices = dedupe_files.write_decisions(work, batch, by_chunk)
    dedupe_files.write_lines(work, batch, lines)
    dedupe_files.write_rejects(work, batch, [d.reject for ds in by_chunk.values() for d in ds if d.reject is not None])
    for chunk, slice_ in slices.items():
        yield DecidedSlice(chunk, slice_)
    yield BatchLines(batch)


def write_report(element, output: str, work: WorkDir, fractions):
    """(None, [BatchLines | ScanStats]) -> writes OUTPUT/duplicates.jsonl when a group was found (or a
    comparison or a union left out), and yields `ReportWritten`, which regroup waits on, and the `GroupNotes`.
    Under --split, first picks the split of each group no user group pins (`balance_pins`, recorded for
    regroup: `dedupe_files.write_choices`). The lines are read from the batches' files, merged in order, twice:
    for the header's counts, then to write them."""
    _, values = element
    values = list(values)
    batches = sorted(v.batch for v in values if isinstance(v, BatchLines))
    stats = [v for v in values if isinstance(v, ScanStats)]
    refused, skipped = sum(s.refused for s in stats), sum(s.skipped for s in stats)
    if not batches and not refused and not skipped:
        yield ReportWritten()  # nothing found: no file, so a dataset without duplicates is as before
        return
    pins: dict[str, str] = {}
    if fractions:
        movable = [
            (line["_movable"], _kept_labels(line))
            for line in dedupe_files.merged_lines(work, batches)
            if line["_movable"]
        ]
        if movable:
            pins = balance_pins(movable, fractions)
            dedupe_files.write_choices(work, "duplicates", pins)

    def lines():
        for line in dedupe_files.merged_lines(work, batches):
            key = line.pop("_movable")
            if key:
                for m in line["members"]:
                    m["split"] = pins.get(key, m["split"])
            yield line

    header = {"format": "tfrecord-prep-duplicates", "version": 1, **summarize(lines(), refused, skipped)}
    text = (
        json.dumps(x, sort_keys=True, ensure_ascii=True).encode() + b"\n" for x in itertools.chain([header], lines())
    )
    storage.write_streamed(storage.join(output, dedupe_files.DUPLICATES_FILE), text)
    release_free_memory()
    yield ReportWritten()
    yield dedupe_files.report_notes(header, batches)


def _kept_labels(line: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in line["members"]:
        if m["rejected"] is None:
            out[m["label"]] = out.get(m["label"], 0) + 1
    return out


class Regroup(beam.DoFn):
    """`regroup` of each chunk, the run-wide files it reads (merged user groups, the splits chosen) read once a
    bundle rather than once a chunk: the duplicate pins hold a line per group, so reading them per chunk grows
    as chunks x groups (~1e7 entries at 1 M images). They are complete before any chunk gets here (ReportWritten
    and UnitsReady feed the same GroupByKey), so a bundle's copy is every chunk's."""

    def __init__(self, work: WorkDir, settings: DedupeSettings):
        self._work, self._settings = work, settings
        self._read: dict[str, dict[str, str]] = {}

    def start_bundle(self):
        self._read = {}

    def process(self, element):
        yield from regroup(element, self._work, self._settings, self._read)


def _once(read: dict[str, dict[str, str]], name: str, load) -> dict[str, str]:
    if name not in read:
        read[name] = load()
    return read[name]


def regroup(element, work: WorkDir, settings: DedupeSettings, read: dict[str, dict[str, str]] | None = None):
    """(chunk, [ChunkCounts | DecidedSlice | UnitsReady | ReportWritten]) -> the chunk's ChunkCounts by planner
    group (its policy rejects left out), and a GroupNotes of its pinned images; records the chunk's placements
    for rank_task (`dedupe_files.write_groups`). `read`: the run-wide files already read, by name (`Regroup`)."""
    read = {} if read is None else read
    chunk, values = element
    values = list(values)
    counts = [v for v in values if isinstance(v, ChunkCounts)]
    if not counts:
        return  # the report's marker (ReportWritten): waited for, nothing to plan
    options, seed, fractions = settings.options, settings.seed, settings.fractions
    decisions = {d.item: d for v in values if isinstance(v, DecidedSlice) for d in dedupe_files.read_decisions(v.where)}
    user = dedupe_files.user_keys(work, chunk, options) if fractions and options.user_groups else None
    units_ready = any(isinstance(v, UnitsReady) for v in values)
    merged = _once(read, "units", lambda: dedupe_files.read_units(work)) if units_ready else {}
    user_pins = _once(read, "users", lambda: dedupe_files.read_choices(work, "users")) if units_ready else {}
    # write_report recorded them before this GroupByKey could emit (it feeds the same one)
    pins = (
        _once(read, "duplicates", lambda: dedupe_files.read_choices(work, "duplicates"))
        if fractions and any(d.movable for d in decisions.values())
        else {}
    )
    placed: dict[tuple[int, int], str | None] = {}  # {(spill, offset): pin, None if rejected}
    refs = read_prepared(work, chunk) if decisions or user else []
    first = dedupe_files.item_id(chunk, 0)
    for item, d in decisions.items():
        ref = refs[item - first]
        if d.reject is not None:  # listed by decide_batch's rejects file, which publish reads
            placed[ref.place] = None
        elif d.pin:
            placed[ref.place] = pins.get(d.movable, d.pin) if d.movable else d.pin
    if user is not None and fractions:  # (`user` only with fractions)
        for position, ref in enumerate(refs):
            unit = None if first + position in decisions else user(_path(ref))
            if unit is not None:
                unit = merged.get(unit, unit)
                placed[ref.place] = user_pins.get(unit) or pin_split(seed, unit, fractions)
    dedupe_files.write_groups(work, chunk, placed)
    pinned = sum(1 for pin in placed.values() if pin)
    if pinned:
        yield dedupe_files.GroupNotes((("pinned_images", pinned),))
    if not placed:
        yield from counts
    else:  # the placements just written, as dedupe_files.placer gives them to rank_task
        yield ChunkCounts(chunk, chunk_counts(refs, placed))
