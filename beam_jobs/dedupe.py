"""`Dedupe`: duplicate and user groups of the prepared images, between preparing and planning.

PrepareChunk records the content keys of each chunk's good inputs in one binary file, and
their item ids and hashes in another, for the scan (grouping.py); only chunk ids and keys
travel, never image bytes:

    counts   : ChunkCounts                     per prepared chunk (prepare.py)
    keyed    = FlatMap(chunk_keys)             (None, (chunk, items in its key file))
    tasks    = GroupByKey | FlatMap(scan_tasks) | Reshuffle   a ScanTask of every crop scale (one per part of
                                                        the bands' bits past PART_TARGET images)
    pairs    = ParDo(Scan)                     near pairs, an array a scale and band (exact copies: identical hashes), on a
                                                        thread pool (scan_tasks.py), found by sorting the
                                                        hashes on the band (prep.core.band_scan: oversized
                                                        runs cut, bounded)
    members  = GroupByKey(one key) | FlatMap(components)   (chunk, ((item, group, batch), ...)) per chunk, from the
                                                        bounded union-find; a batch is GROUPS_PER_BATCH groups
               | GroupByKey | FlatMap(member_info)      (batch, ("members", Slice)) per chunk and batch: the
                                                        chunk's Members (path, label, split, user group) go to a
                                                        work file (group_batches.py), never into an element
    units    = (links, chunk ids) | GroupByKey(one key) | FlatMap(merge_user_groups)
                                                        only with user groups and --split: user groups that
                                                        duplicates link become one unit (groups.merge_units),
                                                        recorded for regroup, then a marker per chunk
    decided  = (members, units) | GroupByKey(batch) | FlatMap(decide_batch)   per group batch, its decisions
                                                        (prep.core.groups.decide) and lines of duplicates.jsonl
                                                        to work files; per chunk a Slice of its decisions
    report   = GroupByKey(one key) | FlatMap(write_report)   OUTPUT/duplicates.jsonl (header: the counts),
                                                        streamed from the batches' line files (dedupe_decide.py)
    regroup  = (counts, decisions, report, units) | GroupByKey(chunk) | FlatMap(regroup)
             : ChunkCounts | GroupNotes    each chunk's counts by planner group (pins included, rejected
                                           inputs left out), and with the report's, the counts of the
                                           manifest's `groups` and the group batches whose rejects files
                                           publish reads (their rejects never travel as elements)

What is held at once: one bucket (at most `cap`² distances), one group (at most
`max_size` members, union_find.py), one chunk; and in the one union-find task, two
32-bit ints per image that is in some pair, plus the pairs (duplicates only). One
decide task holds one group batch; the report task one line per batch at a time.
Only Create, ParDo, GroupByKey and Flatten are used (the DaskRunner's subset).
"""

from __future__ import annotations

import json

import apache_beam as beam
import numpy as np

from beam_jobs import group_batches, grouping
from beam_jobs.dedupe_decide import decide_batch, write_report
from beam_jobs.scan_tasks import Scan, scan_tasks
from beam_jobs.prepare import ChunkCounts, PreparedRef, chunk_counts, place_of, prepared_fields, read_recorded
from prep.core import storage
from prep.core.groups import DedupeOptions, Member, balance_pins, merge_units, pin_split
from prep.core import band_scan
from prep.core.union_find import DEFAULT_MAX_SIZE, UnionFind
from prep.core.workdir import WorkDir

REPORT = grouping.DUPLICATES_FILE
PART_TARGET = 1_000_000  # images per scan task, about (48 bytes each: id and hashes)


def chunk_items(work: WorkDir, chunk: int, with_keys: bool = True, only=None) -> list[tuple]:
    """[(item id, PreparedRef, its key row (grouping.KEY_ROWS) or None)] of a prepared chunk's good
    inputs, in index order; with `only` (item ids), of those alone."""
    table = grouping.RowTable(work) if with_keys else None
    recorded = read_recorded(work, chunk)
    first = grouping.item_id(chunk, 0)
    positions = range(len(recorded)) if only is None else sorted(item - first for item in only)
    out = []
    for position in positions:
        ref = PreparedRef._make(prepared_fields(recorded[position]))
        out.append((first + position, ref, table.get(ref.spill, ref.offset) if table is not None else None))
    return out


def chunk_keys(counts: ChunkCounts, work: WorkDir):
    """A prepared chunk -> (None, (chunk, items in its key file)). PrepareChunk wrote that file with the
    chunk's keys; a chunk staged again by a resume with another seed (replan.restage) has none yet, and
    gets it here from its index and the key rows of the chunks that prepared its inputs."""
    n = grouping.chunk_keys_count(work, counts.chunk)
    if n is None:
        rows = [(item, row["hashes"]) for item, _, row in chunk_items(work, counts.chunk) if row is not None]
        n = grouping.write_chunk_keys(work, counts.chunk, np.array([item for item, _ in rows], np.int64),
                                      np.array([hashes for _, hashes in rows], np.uint64).reshape(
                                          len(rows), grouping.NUM_HASHES))
    yield None, (counts.chunk, n)


def components(element, max_size: int):
    """(None, pairs and skip counts) -> (chunk, ((item, group id, group batch), ...)) per chunk with an item
    in a group, and the stats.

    Pairs are fed exact first, then by distance and ids, so which unions a full group
    refuses depends on the data alone. A group's id is its smallest item.
    """
    _, values = element
    found = [v for kind, v in values if kind == "pairs"]
    pairs = np.unique(np.concatenate(found), axis=0).tolist() if found else []  # rows (distance, a, b), sorted
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
    batch = {group: group_batches.batch_of(rank)
             for rank, group in enumerate(sorted(least[root] for root, n in sizes.items() if n > 1))}
    by_chunk: dict[int, list] = {}
    for item in items:
        group = least[uf.find(index[item])]
        if group in batch:
            by_chunk.setdefault(grouping.item_chunk(item), []).append((item, group, batch[group]))
    for chunk, rows in sorted(by_chunk.items()):
        yield "member", (chunk, tuple(rows))
    yield "stats", (uf.refused, skipped)


def member_info(element, work: WorkDir, labels, options: DedupeOptions, links: bool):
    """(chunk, [((item, group, batch), ...)]) -> (batch, ("members", Slice)) per group batch of the chunk's
    grouped items, recorded in the work dir (group_batches.write_members); with `links`, also
    (None, ("link", (group, batch, its members' user groups in this chunk))) per group with some."""
    chunk, grouped = element
    where = {item: (group, batch) for rows in grouped for item, group, batch in rows}
    user = grouping.user_keys(work, chunk, options)
    by_batch: dict[int, list] = {}
    for item, ref, row in chunk_items(work, chunk, only=where):
        group, batch = where[item]
        path = ref.path.decode("utf-8", "surrogateescape")
        by_batch.setdefault(batch, []).append((group, Member(
            item, path, ref.label, labels[ref.label], ref.split or "",
            "" if row is None else row["sha256"].tobytes().hex(), user(path) or "")))
    for batch, where_ in group_batches.write_members(work, chunk, by_batch).items():
        yield batch, ("members", where_)
    if links:
        keys: dict[tuple[int, int], set] = {}
        for batch, rows in by_batch.items():
            for group, m in rows:
                if m.user:
                    keys.setdefault((group, batch), set()).add(m.user)
        for (group, batch), users in sorted(keys.items()):
            yield None, ("link", (group, batch, tuple(sorted(users))))


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
    """(None, links, user group sizes and chunk ids) -> (batch, ("unit", (group, unit, split))) per linked
    group, and (chunk, ("units", None)) per chunk once the merged user groups and their splits are recorded
    (regroup reads them: `grouping.read_units`, `grouping.read_choices`). User groups that duplicates link become
    one unit (`merge_units`); units are spread over the splits by `balance_pins`, as duplicate groups are."""
    _, values = element
    linked: dict[tuple[int, int], set] = {}  # a group's members may be in several chunks: a link from each
    for kind, v in values:
        if kind == "link":
            linked.setdefault(v[:2], set()).update(v[2])
    links = [(group, batch, sorted(keys)) for (group, batch), keys in sorted(linked.items())]
    units = merge_units(keys for _, _, keys in links)
    sizes: dict[str, dict[str, int]] = {}
    for kind, v in values:
        if kind == "sizes":
            unit, label, n = v
            by_label = sizes.setdefault(units.get(unit, unit), {})
            by_label[label] = by_label.get(label, 0) + n
    pins = balance_pins(sizes.items(), fractions)
    grouping.write_units(work, units)
    grouping.write_choices(work, "users", pins)
    for group, batch, keys in links:
        unit = units[keys[0]]
        yield batch, ("unit", (group, unit, pins.get(unit)))
    for chunk in sorted({v for kind, v in values if kind == "chunk"}):
        yield chunk, ("units", None)


def regroup(element, work: WorkDir, options: DedupeOptions, seed: int, fractions):
    """(chunk, [("counts", ChunkCounts) | ("decided", Slice of its Decisions)]) -> the chunk's ChunkCounts by planner
    group (its policy rejects left out); records the chunk's placements for rank_task."""
    chunk, values = element
    if chunk < 0 or not any(kind == "counts" for kind, _ in values):
        return  # the report's marker: waited for, nothing to plan
    decisions = {d.item: d for kind, v in values if kind == "decided" for d in group_batches.read_decisions(v)}
    user = grouping.user_keys(work, chunk, options) if fractions and options.user_groups else None
    units_ready = any(kind == "units" for kind, _ in values)
    merged = grouping.read_units(work) if units_ready else {}
    user_pins = grouping.read_choices(work, "users") if units_ready else {}
    # write_report recorded them before this GroupByKey could emit (it feeds the same one)
    pins = grouping.read_choices(work, "duplicates") if fractions and any(d.movable for d in decisions.values()) else {}
    placed = {}
    refs = read_recorded(work, chunk) if decisions or user else []  # as recorded: the path is text
    first = grouping.item_id(chunk, 0)
    for item, d in decisions.items():
        ref = refs[item - first]
        if d.reject is not None:  # listed by decide_batch's rejects file, which publish reads
            placed[place_of(ref)] = None
        elif d.pin:
            placed[place_of(ref)] = pins.get(d.movable, d.pin) if d.movable else d.pin
    if user:
        for position, ref in enumerate(refs):
            unit = None if first + position in decisions else user(ref[0])
            unit = merged.get(unit, unit)
            if unit is not None:
                placed[place_of(ref)] = user_pins.get(unit) or pin_split(seed, unit, fractions)
    grouping.write_groups(work, chunk, placed)
    pinned = sum(1 for pin in placed.values() if pin)
    if pinned:
        yield grouping.GroupNotes((("pinned_images", pinned),))
    if not placed:
        yield from (v for kind, v in values if kind == "counts")
    else:  # the placements just written, as grouping.placer gives them to rank_task
        yield ChunkCounts(chunk, chunk_counts(refs, placed))


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
    rejects left out) and GroupNotes (the manifest's `groups`, where the rejects wait); writes
    OUTPUT/duplicates.jsonl.
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
            # (batch, ("members", Slice)) per chunk and group batch; with merging, (None, ("link", ...))
            member_slices = (
                found
                | "Members" >> beam.FlatMap(lambda v: [v[1]] if v[0] == "member" else [])
                | "MembersByChunk" >> beam.GroupByKey()
                | "MemberInfo" >> beam.FlatMap(member_info, self._work, self._labels, self._options, merging)
            )
            batched = member_slices | "MemberSlices" >> beam.FlatMap(lambda v: [v] if v[1][0] == "members" else [])
            if merging:  # duplicates may link user groups: merge them
                links = member_slices | "UserLinks" >> beam.FlatMap(lambda v: [v] if v[1][0] == "link" else [])
                merged = self._merge([*user_items, links])
                batched = ((batched, merged | "Units" >> beam.FlatMap(lambda v: [v] if v[1][0] == "unit" else []))
                           | "MembersAndUnits" >> beam.Flatten())
            decided = (
                batched
                | "ByBatch" >> beam.GroupByKey()
                | "Decide" >> beam.FlatMap(decide_batch, self._work, self._options, self._seed,
                                           self._fractions, self._single_label)
            )
            stats = found | "Stats" >> beam.FlatMap(lambda v: [v] if v[0] == "stats" else [])
            report = (
                (decided | "Lines" >> beam.FlatMap(lambda v: [v] if v[0] == "lines" else []), stats)
                | "ReportItems" >> beam.Flatten()
                | "OneReportKey" >> beam.Map(lambda v: (None, v))
                | "GatherReport" >> beam.GroupByKey()
                | "WriteReport" >> beam.FlatMap(write_report, self._output, self._work, self._fractions)
            )
            notes = report | "ReportNotes" >> beam.FlatMap(lambda v: [v[1][1]] if v[1][0] == "notes" else [])
            report = report | "ReportDone" >> beam.FlatMap(lambda v: [v] if v[1][0] == "report" else [])
            decisions = decided | "Decisions" >> beam.FlatMap(lambda v: [v[1]] if v[0] == "decided" else [])
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
