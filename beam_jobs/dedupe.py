"""`Dedupe`: duplicate and user groups of the prepared images, between preparing and planning.

PrepareChunk records each good input's content keys beside its spill file
(grouping.py); only chunk ids and keys travel, never image bytes:

    counts   : ChunkCounts                     per prepared chunk (prepare.py)
    keyed    = FlatMap(chunk_keys)             (None, (chunk, items)): its items' hashes in one binary file
    tasks    = GroupByKey | FlatMap(scan_tasks) | Reshuffle   a ScanTask per crop scale (and part of the
                                                        bands' bits past PART_TARGET images)
    pairs    = ParDo(Scan)                     near pairs (exact copies: identical hashes), its bands on a
                                                        thread pool (scan_tasks.py), found by sorting the
                                                        hashes on the band (prep.core.band_scan: oversized
                                                        runs cut, bounded)
    members  = GroupByKey(one key) | FlatMap(components)   (chunk, (item, group)) from the bounded union-find
               | GroupByKey | FlatMap(member_info)      (group, Member): path, label, split, user group
               | GroupByKey                             (group, [Member])
    units    = (links, chunk ids) | GroupByKey(one key) | FlatMap(merge_user_groups)
                                                        only with user groups and --split: user groups that
                                                        duplicates link become one unit (groups.merge_units),
                                                        recorded for regroup, then a marker per chunk
    decided  = (members, units) | GroupByKey | FlatMap(decide_group)   per member a Decision
                                                        (prep.core.groups.decide), per group a line of duplicates.jsonl
    report   = GroupByKey(one key) | FlatMap(write_report)   OUTPUT/duplicates.jsonl (header: the counts)
    regroup  = (counts, decisions, report, units) | GroupByKey(chunk) | FlatMap(regroup)
             : ChunkCounts | RejectedInputs | GroupNotes    each chunk's counts by planner group (pins
                                               included, rejected inputs left out), its rejects, and
                                               with the report's, the counts of the manifest's `groups`

What is held at once: one bucket (at most `cap`² distances), one group (at most
`max_size` members, union_find.py), one chunk; and in the one union-find task, two
32-bit ints per image that is in some pair, plus the pairs (duplicates only). The
report is written from one task holding the group lines (images in groups only).
Only Create, ParDo, GroupByKey and Flatten are used (the DaskRunner's subset).
"""

from __future__ import annotations

import json

import apache_beam as beam

from beam_jobs import grouping
from beam_jobs.heap import release_free_memory
from beam_jobs.scan_tasks import Scan, scan_tasks
from beam_jobs.prepare import ChunkCounts, PreparedRef, RejectedInputs, chunk_counts, read_prepared
from prep.core import storage
from prep.core.groups import DedupeOptions, Member, balance_pins, decide, merge_units, pin_split, summarize
from prep.core import band_scan
from prep.core.union_find import DEFAULT_MAX_SIZE, UnionFind
from prep.core.workdir import WorkDir

REPORT = grouping.DUPLICATES_FILE
PART_TARGET = 1_000_000  # images per scan task, about (16 bytes each: id and one hash)


def chunk_items(work: WorkDir, chunk: int, with_keys: bool = True) -> list[tuple]:
    """[(item id, PreparedRef, its key row (grouping.SPILL_KEYS) or None)] of a prepared chunk's good
    inputs, in index order."""
    refs = [PreparedRef._make(fields) for fields in read_prepared(work, chunk)]
    tables: dict[int, tuple] = {}
    out = []
    for position, ref in enumerate(refs):
        row = None
        if with_keys:
            if ref.spill not in tables:
                rows, _ = grouping.spill_keys(work, ref.spill)
                tables[ref.spill] = (dict(zip(rows["offset"].tolist(), range(len(rows)))), rows)
            where, rows = tables[ref.spill]
            at = where.get(ref.offset)
            row = None if at is None else rows[at]
        out.append((grouping.item_id(chunk, position), ref, row))
    return out


def chunk_keys(counts: ChunkCounts, work: WorkDir):
    """A prepared chunk -> its items' hashes in one binary file (grouping.write_chunk_keys), and
    (None, (chunk, items with keys))."""
    rows = [(item, row["hashes"]) for item, _, row in chunk_items(work, counts.chunk) if row is not None]
    grouping.write_chunk_keys(work, counts.chunk, rows)
    yield None, (counts.chunk, len(rows))


def components(element, max_size: int):
    """(None, pairs and skip counts) -> (chunk, (item, group id)) per item in a group, and the stats.

    Pairs are fed exact first, then by distance and ids, so which unions a full group
    refuses depends on the data alone. A group's id is its smallest item.
    """
    _, values = element
    pairs = sorted({v for kind, v in values if kind == "pair"})
    skipped = sum(v for kind, v in values if kind == "skipped")
    items = sorted({x for _, a, b in pairs for x in (a, b)})
    index = {item: i for i, item in enumerate(items)}
    uf = UnionFind(len(items), max_size)
    for _, a, b in pairs:
        uf.union(index[a], index[b])
    least: dict[int, int] = {}
    for item in items:  # items ascending: the first seen of a root is its smallest
        least.setdefault(uf.find(index[item]), item)
    sizes: dict[int, int] = {}
    for item in items:
        root = uf.find(index[item])
        sizes[root] = sizes.get(root, 0) + 1
    for item in items:
        root = uf.find(index[item])
        if sizes[root] > 1:
            yield "member", (grouping.item_chunk(item), (item, least[root]))
    yield "stats", (uf.refused, skipped)


def member_info(element, work: WorkDir, labels, options: DedupeOptions):
    """(chunk, [(item, group)]) -> (group, Member) for each of the chunk's grouped items."""
    chunk, grouped = element
    group_of = dict(grouped)
    user = grouping.user_keys(work, chunk, options)
    for item, ref, row in chunk_items(work, chunk):
        if item in group_of:
            path = ref.path.decode("utf-8", "surrogateescape")
            yield group_of[item], Member(item, path, ref.label, labels[ref.label], ref.split or "",
                                         "" if row is None else row["sha256"].tobytes().hex(), user(path) or "")


def user_links(element):
    """(group, [Member]) -> (None, ("link", (group, its members' user groups))) when it has some."""
    group, members = element
    keys = sorted({m.user for m in members if m.user})
    if keys:
        yield None, ("link", (group, keys))


def unit_labels(counts: ChunkCounts, work: WorkDir, labels, options: DedupeOptions):
    """A prepared chunk -> (None, ("sizes", (user group, label, images))) for its inputs in user groups."""
    user = grouping.user_keys(work, counts.chunk, options)
    sizes: dict[tuple[str, str], int] = {}
    for _, ref, _ in chunk_items(work, counts.chunk, with_keys=False):
        unit = user(ref.path.decode("utf-8", "surrogateescape"))
        if unit is not None:
            key = (unit, labels[ref.label])
            sizes[key] = sizes.get(key, 0) + 1
    for (unit, label), n in sorted(sizes.items()):
        yield None, ("sizes", (unit, label, n))


def merge_user_groups(element, work: WorkDir, fractions):
    """(None, links, user group sizes and chunk ids) -> (group, ("unit", (unit, split))) per linked group, and
    (chunk, ("units", None)) per chunk once the merged user groups and their splits are recorded (regroup
    reads them: `grouping.read_units`, `grouping.read_choices`). User groups that duplicates link become
    one unit (`merge_units`); units are spread over the splits by `balance_pins`, as duplicate groups are."""
    _, values = element
    links = [v for kind, v in values if kind == "link"]
    units = merge_units(keys for _, keys in links)
    sizes: dict[str, dict[str, int]] = {}
    for kind, v in values:
        if kind == "sizes":
            unit, label, n = v
            by_label = sizes.setdefault(units.get(unit, unit), {})
            by_label[label] = by_label.get(label, 0) + n
    pins = balance_pins(sizes.items(), fractions)
    grouping.write_units(work, units)
    grouping.write_choices(work, "users", pins)
    for group, keys in links:
        unit = units[keys[0]]
        yield group, ("unit", (unit, pins.get(unit)))
    for chunk in sorted({v for kind, v in values if kind == "chunk"}):
        yield chunk, ("units", None)


def decide_group(element, options: DedupeOptions, seed: int, fractions, single_label: bool):
    """(group, [("members", [Member]) and ("unit", unit) if any]) -> ("decision", (chunk, Decision)) per member,
    and ("line", group line)."""
    _, values = element
    members = next(v for kind, v in values if kind == "members")
    unit, unit_split = next((v for kind, v in values if kind == "unit"), (None, None))
    decisions, line = decide(members, options, seed, fractions, single_label, unit, unit_split)
    for d in decisions:
        yield "decision", (grouping.item_chunk(d.item), d)
    yield "line", {**line, "_movable": decisions[0].movable}  # write_report balances those groups' splits


def write_report(element, output: str, work: WorkDir, fractions):
    """(None, lines and stats) -> writes OUTPUT/duplicates.jsonl when a group was found (or a comparison or a
    union left out), and yields the marker regroup waits on. Under --split, first picks the split of each
    group no user group pins (`balance_pins`, recorded for regroup: `grouping.write_choices`)."""
    _, values = element
    lines = sorted((v for kind, v in values if kind == "line"), key=lambda line: line["members"][0]["path"])
    movable = [line for line in lines if line["_movable"]]
    if fractions and movable:
        pins = balance_pins([(line["_movable"], _kept_labels(line)) for line in movable], fractions)
        grouping.write_choices(work, "duplicates", pins)
        for line in movable:
            for m in line["members"]:
                m["split"] = pins.get(line["_movable"], m["split"])
    lines = [{k: v for k, v in line.items() if k != "_movable"} for line in lines]
    refused = sum(v[0] for kind, v in values if kind == "stats")
    skipped = sum(v[1] for kind, v in values if kind == "stats")
    header = {"format": "tfrecord-prep-duplicates", "version": 1, **summarize(lines, refused, skipped)}
    if not lines and not refused and not skipped:
        yield -1, ("report", None)  # nothing found: no file, so a dataset without duplicates is as before
        return
    text = "\n".join(json.dumps(x, sort_keys=True, ensure_ascii=True) for x in [header, *lines]) + "\n"
    storage.write_atomic(storage.join(output, REPORT), text.encode())
    del lines, movable, text
    release_free_memory()  # every group's line was held here at once
    yield -1, ("report", None)
    yield -1, ("notes", grouping.report_notes(header))


def _kept_labels(line: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in line["members"]:
        if m["rejected"] is None:
            out[m["label"]] = out.get(m["label"], 0) + 1
    return out


def regroup(element, work: WorkDir, options: DedupeOptions, seed: int, fractions):
    """(chunk, [("counts", ChunkCounts) | ("decision", Decision)]) -> the chunk's ChunkCounts by planner
    group and the RejectedInputs of its group policies; records the chunk's placements for rank_task."""
    chunk, values = element
    if chunk < 0 or not any(kind == "counts" for kind, _ in values):
        return  # the report's marker: waited for, nothing to plan
    decisions = {d.item: d for kind, d in values if kind == "decision"}
    user = grouping.user_keys(work, chunk, options) if fractions and options.user_groups else None
    units_ready = any(kind == "units" for kind, _ in values)
    merged = grouping.read_units(work) if units_ready else {}
    user_pins = grouping.read_choices(work, "users") if units_ready else {}
    # write_report recorded them before this GroupByKey could emit (it feeds the same one)
    pins = grouping.read_choices(work, "duplicates") if fractions and any(d.movable for d in decisions.values()) else {}
    placed, rejects = {}, []
    if decisions or user:
        for item, ref, _ in chunk_items(work, chunk, with_keys=False):
            d = decisions.get(item)
            if d is not None:
                if d.reject is not None:
                    placed[(ref.spill, ref.offset)] = None
                    rejects.append(d.reject)
                elif d.pin:
                    placed[(ref.spill, ref.offset)] = pins.get(d.movable, d.pin) if d.movable else d.pin
            elif user:
                unit = user(ref.path.decode("utf-8", "surrogateescape"))
                unit = merged.get(unit, unit)
                if unit is not None:
                    placed[(ref.spill, ref.offset)] = user_pins.get(unit) or pin_split(seed, unit, fractions)
    grouping.write_groups(work, chunk, placed)
    pinned = sum(1 for pin in placed.values() if pin)
    if pinned:
        yield grouping.GroupNotes((("pinned_images", pinned),))
    if not placed:
        yield from (v for kind, v in values if kind == "counts")
    else:
        place = grouping.placer(work, chunk, True)
        yield ChunkCounts(chunk, chunk_counts(read_prepared(work, chunk), place))
    if rejects:
        yield RejectedInputs(tuple(sorted(rejects)))


def duplicates_summary(output: str) -> list[str]:
    """The lines `prep convert` prints about OUTPUT/duplicates.jsonl: nothing when there is none."""
    path = storage.join(output, REPORT)
    if not storage.exists(path):
        return []
    with storage.open_read(path) as f:
        h = json.loads(f.readline())
    lines = [f"duplicates: {h['groups']} group(s) of {h['images']} images ({h['exact_groups']} exact, "
             f"{h['near_groups']} near), {h['rejected']} rejected by the group policies (see {REPORT})"]
    if h["conflict_groups"]:
        lines.append(f"Warning: {h['conflict_groups']} duplicate group(s) carry different labels (label_conflict)")
    if h["cross_split_groups"]:
        lines.append(f"Warning: {h['cross_split_groups']} duplicate group(s) span splits SOURCE gives "
                     f"({h['cross_split_images']} images outside their group's first split; --cross-split remove "
                     "takes them out of the evaluation splits)")
    if h["refused_unions"] or h["skipped_comparisons"]:
        lines.append(f"Warning: {h['refused_unions']} union(s) refused by the group size bound and "
                     f"{h['skipped_comparisons']} comparison(s) left out in oversized hash buckets")
    return lines


class Dedupe(beam.PTransform):
    """ChunkCounts -> ChunkCounts by planner group (duplicate and user groups pinned to one split, policy
    rejects left out), RejectedInputs and GroupNotes (the manifest's `groups`); writes OUTPUT/duplicates.jsonl.
    See the module docstring."""

    def __init__(self, work: WorkDir, output: str, labels, options: DedupeOptions, seed: int, fractions,
                 single_label: bool, cap: int = band_scan.SCAN_CAP, max_size: int = DEFAULT_MAX_SIZE,
                 part_target: int = PART_TARGET, workers: int | None = None):
        super().__init__()
        self._work, self._output, self._labels, self._options = work, output, tuple(labels), options
        self._seed, self._fractions, self._single_label = seed, fractions, single_label
        self._cap, self._max_size, self._part_target = cap, max_size, part_target
        self._workers = workers

    def _merge(self, items):
        # (group, ("unit", (unit, split))) per linked duplicate group, (chunk, ("units", None)) per chunk
        return (items
                | "LinksAndChunks" >> beam.Flatten()
                | "GatherLinks" >> beam.GroupByKey()
                | "MergeUserGroups" >> beam.FlatMap(merge_user_groups, self._work, self._fractions))

    def expand(self, counts):
        keyed = counts | "ByChunk" >> beam.Map(lambda c: (c.chunk, ("counts", c)))
        joined = [keyed]
        merging = bool(self._options.user_groups and self._fractions)
        if merging:  # every user group's size per label, and each chunk's id, for MergeUserGroups
            user_items = [counts | "UnitLabels" >> beam.FlatMap(unit_labels, self._work, self._labels, self._options),
                          counts | "ChunkIds" >> beam.Map(lambda c: (None, ("chunk", c.chunk)))]
        merged = None
        if self._options.keys:
            pairs = (
                counts
                | "ChunkKeys" >> beam.FlatMap(chunk_keys, self._work)
                | "GatherChunkKeys" >> beam.GroupByKey()
                | "ScanTasks" >> beam.FlatMap(scan_tasks, self._part_target)
                | "SpreadScans" >> beam.Reshuffle()
                | "Scan" >> beam.ParDo(Scan(self._work, self._cap, self._workers))
            )
            start = counts.pipeline | "NoPairs" >> beam.Create([("skipped", 0)])
            found = (
                (pairs, start)
                | "AllPairs" >> beam.Flatten()
                | "OnePairKey" >> beam.Map(lambda v: (None, v))
                | "GatherPairs" >> beam.GroupByKey()
                | "Components" >> beam.FlatMap(components, self._max_size)
            )
            by_group = (
                found
                | "Members" >> beam.FlatMap(lambda v: [v[1]] if v[0] == "member" else [])
                | "MembersByChunk" >> beam.GroupByKey()
                | "MemberInfo" >> beam.FlatMap(member_info, self._work, self._labels, self._options)
                | "ByGroup" >> beam.GroupByKey()
            )
            tagged = by_group | "TagMembers" >> beam.Map(lambda gm: (gm[0], ("members", list(gm[1]))))
            if merging:  # duplicates may link user groups: merge them
                merged = self._merge([*user_items, by_group | "UserLinks" >> beam.FlatMap(user_links)])
                with_units = (
                    (tagged, merged | "Units" >> beam.FlatMap(lambda v: [v] if v[1][0] == "unit" else []))
                    | "MembersAndUnits" >> beam.Flatten()
                    | "ByGroupWithUnit" >> beam.GroupByKey()
                )
            else:
                with_units = tagged | "NoUnits" >> beam.Map(lambda kv: (kv[0], [kv[1]]))
            decided = with_units | "Decide" >> beam.FlatMap(decide_group, self._options, self._seed,
                                                             self._fractions, self._single_label)
            stats = found | "Stats" >> beam.FlatMap(lambda v: [v] if v[0] == "stats" else [])
            report = (
                (decided | "Lines" >> beam.FlatMap(lambda v: [v] if v[0] == "line" else []), stats)
                | "ReportItems" >> beam.Flatten()
                | "OneReportKey" >> beam.Map(lambda v: (None, v))
                | "GatherReport" >> beam.GroupByKey()
                | "WriteReport" >> beam.FlatMap(write_report, self._output, self._work, self._fractions)
            )
            notes = report | "ReportNotes" >> beam.FlatMap(lambda v: [v[1][1]] if v[1][0] == "notes" else [])
            report = report | "ReportDone" >> beam.FlatMap(lambda v: [v] if v[1][0] == "report" else [])
            decisions = decided | "Decisions" >> beam.FlatMap(
                lambda v: [(v[1][0], ("decision", v[1][1]))] if v[0] == "decision" else [])
            joined += [decisions, report]
        if merging and merged is None:
            merged = self._merge(user_items)
        if merging:
            joined.append(merged | "UnitsReady" >> beam.FlatMap(lambda v: [v] if v[1][0] == "units" else []))
        regrouped = (
            joined
            | "JoinChunk" >> beam.Flatten()
            | "GatherChunk" >> beam.GroupByKey()
            | "Regroup" >> beam.FlatMap(regroup, self._work, self._options, self._seed, self._fractions)
        )
        if not self._options.keys:
            return regrouped
        return (regrouped, notes) | "WithNotes" >> beam.Flatten()
