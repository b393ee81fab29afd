"""`Dedupe`: duplicate and user groups of the prepared images, between preparing and planning.

PrepareChunk records the content keys of each chunk's good inputs in its rows file, and their item ids and
hashes in its key file (dedupe_files.py); only chunk ids, keys and slices of work files travel, never image
bytes. The steps, and what each PCollection holds (dedupe_types.py):

    counts    : ChunkCounts                     per prepared chunk (prepare.py)
    found     = FindPairs | Components          GroupedItems per chunk with an item in a group, and
                                                ScanStats. FindPairs (dedupe_scan.py): up to `part_target`
                                                images one ScanTask, its near pairs found by sorting the
                                                hashes on each band (prep.core.near_bands); past that,
                                                BucketTasks cut the hashes into band parts, and a GroupByKey
                                                gives each part to a task of its own; BandPairs either way.
                                                Components: the bounded union-find over the one scan's
                                                pairs, in one task; the band parts' pairs go to
                                                SpreadComponents (dedupe_components.py): rounds by image
                                                part, then a union-find task per part of the components.
                                                With --near off, ExactGroups (dedupe_exact.py) instead:
                                                equal sha256 by a GroupByKey, no scan
    members   = RecordMembers                   MemberSlice per chunk and group batch (the chunk's Members
                                                go to its members file, dedupe_files.py), UserLink with user groups
    units     = MergeUserGroups                 only with user groups and --split: user groups that duplicates
                                                link become one unit (groups.merge_units), recorded; UnitChoice
                                                per linked group, UnitsReady per chunk (dedupe_decide.py)
    decided   = Decide                          per group batch, its decisions (prep.core.groups.decide) to
                                                work files: DecidedSlice per chunk, BatchLines
    report    = WriteReport                     OUTPUT/duplicates.jsonl (header: the counts), streamed from the
                                                batches' line files: ReportWritten, GroupNotes
    regrouped = Regroup                         ChunkCounts by planner group (pins included, rejected inputs
                                                left out), each chunk's placements recorded for the planner

What is held at once: one bucket (at most `cap`² distances), one group (at most `max_size` members,
union_find.py), one chunk; a scan task about `part_target` images (48 bytes each whole, 16 a part), a bucket
task as many; and in the one union-find task (up to `part_target` images), the pairs as arrays (24 bytes a
pair, duplicates only) and 8 bytes an image in some pair; past it, a part of the images' edges or of the
components' pairs (dedupe_components.py). One decide task holds one group batch; the report task one line per batch
at a time. Only Create, ParDo, GroupByKey and Flatten are used (the DaskRunner's subset); a step with several
kinds of output emits one NamedTuple type per kind, split by type (`dedupe_types.only`).

On the embedded runner, up to `part_target` images, near pairs on and no user groups merged (the default
conversion), the same functions run in turn in one task instead (`_InOneTask`): that runner's one worker
runs every step on one thread anyway, so the steps above cost only Beam's machinery, ~0.3 s a conversion.
"""

from __future__ import annotations

import json
import typing

import apache_beam as beam
import numpy as np

from beam_jobs.dedupe_components import SpreadComponents, grouped_items
from beam_jobs.dedupe_decide import Regroup, decide_batch, merge_user_groups, regroup, unit_labels, write_report
from beam_jobs.dedupe_exact import ExactGroups
from beam_jobs.dedupe_scan import BucketTask, Scan, ScanTask, bucket, scan_bands, scan_part, scan_tasks
from beam_jobs.pooled import PooledDoFn
from beam_jobs.prepare import ChunkCounts, read_prepared
from beam_jobs.spread import embedded, spread
from prep.core import storage
from prep.core.groups import CONFLICTS_DEFAULT, Member
from prep.core.run import dedupe_files, key_rows
from prep.core.run.dedupe_types import (
    BandPairs,
    BatchLines,
    ChunkId,
    DecidedSlice,
    DedupeSettings,
    GroupedItems,
    KeyFile,
    MemberSlice,
    ReportWritten,
    ScanStats,
    UnitChoice,
    UnitsReady,
    UserLink,
    only,
)
from prep.core.union_find import pair_groups
from prep.core.workdir import WorkDir

REPORT = dedupe_files.DUPLICATES_FILE


def chunk_items(work: WorkDir, chunk: int, with_keys: bool = True, wanted=None) -> list[tuple]:
    """[(item id, PreparedRef, its key row (key_rows.KEY_ROWS) or None)] of a prepared chunk's good
    inputs, in index order; with `wanted` (item ids), of those alone."""
    table = key_rows.RowTable(work) if with_keys else None
    refs = read_prepared(work, chunk)
    first = dedupe_files.item_id(chunk, 0)
    positions = range(len(refs)) if wanted is None else sorted(item - first for item in wanted)
    return [(first + p, refs[p], table.get(*refs[p].place) if table is not None else None) for p in positions]


def chunk_keys(counts: ChunkCounts, work: WorkDir):
    """A prepared chunk -> its `KeyFile`. PrepareChunk wrote that file with the chunk's keys; a chunk staged
    again by a resume with another seed (replan.restage) has none yet, and gets it here from its index and
    the key rows of the chunks that prepared its inputs."""
    n = dedupe_files.chunk_keys_count(work, counts.chunk)
    if n is None:
        rows = [(item, row["hashes"]) for item, _, row in chunk_items(work, counts.chunk) if row is not None]
        n = dedupe_files.write_chunk_keys(
            work,
            counts.chunk,
            np.array([item for item, _ in rows], np.int64),
            np.array([hashes for _, hashes in rows], np.uint64).reshape(len(rows), dedupe_files.NUM_HASHES),
        )
    yield KeyFile(counts.chunk, n)


def _with_keys(counts: ChunkCounts, work: WorkDir):
    """A prepared chunk -> itself and its `KeyFile` (`chunk_keys`)."""
    yield counts
    yield from chunk_keys(counts, work)


def components(element: tuple[None, list[BandPairs]], max_size: int):
    """(None, every BandPairs) -> `GroupedItems` per chunk with an item in a group, and the `ScanStats`: one
    task, the union-find over every pair (union_find.pair_groups). Group batches in order of group id."""
    _, found = element
    found = list(found)
    skipped = sum(f.skipped for f in found)
    arrays = [f.pairs for f in found if len(f.pairs)]
    del found
    pairs = np.concatenate(arrays) if arrays else np.zeros((0, 3), np.int64)
    del arrays
    items, groups, ranks, refused = pair_groups(pairs, max_size)
    del pairs
    yield from grouped_items(items, groups, [dedupe_files.batch_of(r) for r in ranks.tolist()])
    yield ScanStats(refused, skipped)


def member_info(element: tuple[int, list[GroupedItems]], work: WorkDir, settings: DedupeSettings):
    """(chunk, [GroupedItems]) -> `MemberSlice` per group batch of the chunk's grouped items, recorded in the
    work dir (dedupe_files.write_members); when merging user groups, also a `UserLink` per group with some."""
    chunk, grouped = element
    where = {item: (group, batch) for g in grouped for item, group, batch in g.rows}
    user = dedupe_files.user_keys(work, chunk, settings.options)
    by_batch: dict[int, list] = {}
    for item, ref, row in chunk_items(work, chunk, wanted=where):
        group, batch = where[item]
        path = ref.path.decode("utf-8", "surrogateescape")
        by_batch.setdefault(batch, []).append(
            (
                group,
                Member(
                    item,
                    path,
                    ref.label,
                    settings.labels[ref.label],
                    ref.split or "",
                    "" if row is None else row["sha256"].tobytes().hex(),
                    user(path) or "",
                ),
            )
        )
    for batch, slice_ in dedupe_files.write_members(work, chunk, by_batch).items():
        yield MemberSlice(batch, slice_)
    if settings.merging:
        keys: dict[tuple[int, int], set] = {}
        for batch, rows in by_batch.items():
            for group, m in rows:
                if m.user:
                    keys.setdefault((group, batch), set()).add(m.user)
        for (group, batch), users in sorted(keys.items()):
            yield UserLink(group, batch, tuple(sorted(users)))


def duplicates_summary(output: str, conflicts: str = CONFLICTS_DEFAULT) -> list[str]:
    """The lines `prep convert` prints about OUTPUT/duplicates.jsonl: nothing when there is none.

    `conflicts` is the --conflicts the conversion ran with: the warning says what became of the groups
    whose labels differ."""
    path = storage.join(output, REPORT)
    if not storage.exists(path):
        return []
    with storage.open_read(path) as f:
        h = json.loads(f.readline())
    lines = [
        f"duplicates: {h['groups']} group(s) of {h['images']} images ({h['exact_groups']} exact, "
        f"{h['near_groups']} near), {h['rejected']} rejected by the group policies (see {REPORT})"
    ]
    if h["conflict_groups"]:
        lines.append(
            f"Warning: {h['conflict_groups']} duplicate group(s) carry different labels: "
            + {
                "reject": "every member rejected (label_conflict)",
                "reject-exact": "images whose exact duplicates carry another label rejected (label_conflict); "
                "conflicts only near matches make are reported, not rejected (see "
                f"{REPORT}; --conflicts reject rejects them too)",
                "keep": "kept (--conflicts keep)",
            }[conflicts]
        )
    if h["cross_split_groups"]:
        lines.append(
            f"Warning: {h['cross_split_groups']} duplicate group(s) span splits SOURCE gives "
            f"({h['cross_split_images']} images outside their group's first split; --cross-split remove "
            "takes them out of the evaluation splits)"
        )
    if h["refused_unions"] or h["skipped_comparisons"]:
        lines.append(
            f"Warning: {h['refused_unions']} union(s) refused by the group size bound and "
            f"{h['skipped_comparisons']} comparison(s) left out in oversized hash buckets"
        )
    return lines


def _key(element, field: str | None):
    return getattr(element, field) if field else None, element


class _Gathered(beam.PTransform):
    """A PCollection (or a tuple of them) of elements -> `fn((key, [its elements]), *args)`'s outputs, per value of
    the elements' attribute `field` (None: all of them in one task); `fn` may be a DoFn (args then unused)."""

    def __init__(self, field: str | None, fn, *args):
        super().__init__()
        self._field, self._fn, self._args = field, fn, args

    def expand(self, pcolls):
        together = pcolls if isinstance(pcolls, beam.PCollection) else pcolls | "Together" >> beam.Flatten()
        return (
            together
            | "Key" >> beam.Map(_key, self._field)
            | "Gather" >> beam.GroupByKey()
            | "Apply"
            >> (beam.ParDo(self._fn) if isinstance(self._fn, beam.DoFn) else beam.FlatMap(self._fn, *self._args))
        )


class _FindPairs(beam.PTransform):
    """ChunkCounts -> (`BandPairs` of the one scan task, and one empty so that Components runs; `BandPairs`
    of the band parts, or None when there can be no more than `part_target` images)."""

    def __init__(self, work: WorkDir, settings: DedupeSettings):
        super().__init__()
        self._work, self._settings = work, settings

    def expand(self, counts):
        s = self._settings
        tasks = (
            counts
            | "ChunkKeys" >> beam.FlatMap(chunk_keys, self._work)
            | "ScanTasks" >> _Gathered(None, scan_tasks, s.part_target)
        )
        scans = spread(tasks | "Whole" >> beam.FlatMap(only(ScanTask)), "SpreadScans")
        whole = scans | "Scan" >> beam.ParDo(Scan(self._work, s.cap, s.workers))
        none = counts.pipeline | "NoPairs" >> beam.Create([BandPairs(np.zeros((0, 3), np.int64), 0)])
        whole = (whole, none) | "WholePairs" >> beam.Flatten()
        if not s.spread:  # scan_tasks makes one ScanTask: no band parts to wait for
            return whole, None
        parts = (
            spread(tasks | "Buckets" >> beam.FlatMap(only(BucketTask)), "SpreadBuckets")
            | "Bucket" >> beam.FlatMap(bucket, self._work)
            | "ByPart" >> beam.GroupByKey()
            | "ScanParts" >> beam.FlatMap(scan_part, s.cap)
        )
        return whole, parts


class _InOneTask(PooledDoFn):
    """(None, every ChunkCounts and KeyFile) -> what Dedupe's steps give (regrouped ChunkCounts, GroupNotes),
    each step's function run in turn in this one task, in the order the steps' GroupByKeys impose: for the
    embedded runner, whose one worker runs every step on one thread anyway, up to `part_target` images (one
    scan task, one union-find task), near pairs on, no user groups merged. The same functions on the same
    work files give the same groups, decisions and report; what goes is 9 fused stages and ~100 of Beam's
    transforms, ~0.2 s of CPU a conversion (docs/benchmarks.md, "Session 24"). What is held: the scan's and
    the union-find's as in their own tasks, then one chunk's or one group batch's at a time, and the small
    slices and counts that passed between the steps."""

    def __init__(self, work: WorkDir, output: str, settings: DedupeSettings):
        super().__init__(settings.workers)
        self._work, self._output, self._settings = work, output, settings

    def process(self, element: tuple[None, typing.Iterable[ChunkCounts | KeyFile]]) -> typing.Iterator[object]:
        assert self._pool is not None  # made in setup()
        work, s = self._work, self._settings
        _, values = element
        counts: dict[int, list[ChunkCounts]] = {}
        files = []
        for v in values:
            if isinstance(v, ChunkCounts):
                counts.setdefault(v.chunk, []).append(v)
            else:
                files.append(v)
        pairs: list = [BandPairs(np.zeros((0, 3), np.int64), 0)]
        for task in scan_tasks((None, files), s.part_target):
            assert isinstance(task, ScanTask), "no band parts without Dedupe's spread steps"
            pairs += scan_bands(work, task, s.cap, self._pool)
        found = list(components((None, pairs), s.max_size))
        del pairs
        by_chunk: dict[int, list[GroupedItems]] = {}
        for grouped in found:
            if isinstance(grouped, GroupedItems):
                by_chunk.setdefault(grouped.chunk, []).append(grouped)
        by_batch: dict[int, list[MemberSlice]] = {}
        for chunk, grouped in sorted(by_chunk.items()):
            for member in member_info((chunk, grouped), work, s):
                by_batch.setdefault(member.batch, []).append(member)
        decided: dict[int, list[DecidedSlice]] = {}
        lines: list = [stats for stats in found if isinstance(stats, ScanStats)]  # and BatchLines
        for batch, members in sorted(by_batch.items()):
            for out in decide_batch((batch, members), work, s):
                if isinstance(out, DecidedSlice):
                    decided.setdefault(out.chunk, []).append(out)
                else:
                    lines.append(out)
        for out in write_report((None, lines), self._output, work, s.fractions):
            if isinstance(out, dedupe_files.GroupNotes):  # (and ReportWritten, which regroup waits for below)
                yield out
        read: dict[str, dict[str, str]] = {}  # the run-wide files, read once (as Regroup does a bundle)
        for chunk, chunk_counts in sorted(counts.items()):
            yield from regroup((chunk, [*chunk_counts, *decided.get(chunk, [])]), work, s, read)


class Dedupe(beam.PTransform):
    """ChunkCounts -> ChunkCounts by planner group (duplicate and user groups pinned to one split, policy
    rejects left out) and GroupNotes (the manifest's `groups`, where the rejects wait); writes
    OUTPUT/duplicates.jsonl. See the module docstring."""

    def __init__(self, work: WorkDir, output: str, settings: DedupeSettings):
        super().__init__()
        self._work, self._output, self._settings = work, output, settings

    def expand(self, counts):
        work, s, keys = self._work, self._settings, self._settings.options.keys
        if keys and s.options.near != "off" and not s.spread and not s.merging and embedded(counts.pipeline):
            with_keys = counts | "ChunkKeys" >> beam.FlatMap(_with_keys, work)  # no Flatten: one stage fewer
            return with_keys | "InOneTask" >> _Gathered(None, _InOneTask(work, self._output, s))
        by_chunk, by_batch, notes = [counts], [], []  # what Regroup gathers by chunk, and Decide by group batch
        if keys:
            # GroupedItems | ScanStats
            if s.options.near == "off":
                found = counts | "ExactGroups" >> ExactGroups(work, s)
            else:
                whole, parts = counts | "FindPairs" >> _FindPairs(work, s)
                found = whole | "Components" >> _Gathered(None, components, s.max_size)
                if parts is not None:  # steps cost ~0.1 s each on the embedded runner even when given nothing
                    spread = parts | "SpreadComponents" >> SpreadComponents(s.max_size)
                    found = (found, spread) | "Found" >> beam.Flatten()
            # MemberSlice | UserLink
            members = (
                found
                | "Grouped" >> beam.FlatMap(only(GroupedItems))
                | "RecordMembers" >> _Gathered("chunk", member_info, work, s)
            )
            by_batch.append(members | "MemberSlices" >> beam.FlatMap(only(MemberSlice)))
        if s.merging:
            links = [members | "UserLinks" >> beam.FlatMap(only(UserLink))] if keys else []
            # UnitChoice | UnitsReady
            units = (
                counts | "UnitSizes" >> beam.FlatMap(unit_labels, work, s),
                counts | "ChunkIds" >> beam.Map(lambda c: ChunkId(c.chunk)),
                *links,
            ) | "MergeUserGroups" >> _Gathered(None, merge_user_groups, work, s.fractions)
            by_chunk.append(units | "UnitsReady" >> beam.FlatMap(only(UnitsReady)))
            if keys:
                by_batch.append(units | "UnitChoices" >> beam.FlatMap(only(UnitChoice)))
        if keys:
            # DecidedSlice | BatchLines
            decided = tuple(by_batch) | "Decide" >> _Gathered("batch", decide_batch, work, s)
            # ReportWritten | GroupNotes
            report = (
                decided | "Lines" >> beam.FlatMap(only(BatchLines)),
                found | "Stats" >> beam.FlatMap(only(ScanStats)),
            ) | "WriteReport" >> _Gathered(None, write_report, self._output, work, s.fractions)
            by_chunk += [
                decided | "Decided" >> beam.FlatMap(only(DecidedSlice)),
                report | "ReportDone" >> beam.FlatMap(only(ReportWritten)),
            ]
            notes.append(report | "Notes" >> beam.FlatMap(only(dedupe_files.GroupNotes)))
        # ChunkCounts | GroupNotes (of pinned images)
        regrouped = tuple(by_chunk) | "Regroup" >> _Gathered("chunk", Regroup(work, s))
        return [regrouped, *notes] | "WithNotes" >> beam.Flatten()
