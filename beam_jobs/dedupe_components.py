"""`SpreadComponents`: the duplicate groups of the band parts' pairs, with no task holding every pair or
every image in some pair (past `part_target` images; up to it, dedupe.components does it in one task).

Steps, and what each PCollection holds (dedupe_types.py; the work of each in prep.core.near_components):

    edges  = FlatMap(first_edges)       PartEdges per part a BandPairs touches, PartPairs (the pairs, by
                                        their first image's part), ScanStats (comparisons skipped)
    rounds = (GroupByKey | local_stars) x ROUNDS     PartEdges: each part's edges closed into stars
    settle = GroupByKey | settle_part   PartState, PartLabels, PartEdges (what is left, for the fallback)
    verdict= gather | verdict           Verdict per part: whether every part settled
    joined = GroupByKey | label_part    ComponentPairs by their component's part, or Unsettled
    late   = gather | fallback          ComponentPairs: only when some part did not settle, one task closes
                                        what is left of every part's edges (held: ~16 bytes an image)
    groups = GroupByKey | part_groups   GroupedItems per chunk, ScanStats (unions refused)

A part holds its images' edges: after a round at most one an image it meets, so about (images in pairs) /
parts images' worth, 16 bytes an edge each way. The groups' task holds its components' pairs: the bounded
union-find decides a component's groups from that component's pairs alone, in their order, so its groups
and refusals are those of one union-find over every pair. Its largest task is the largest component's
pairs: bounded while false pairs do not chain most images into one component (docs/leakage.md, Scale).
A group batch is numbered by its component part and its rank there (`dedupe_files.part_batch`).
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from prep.core import near_components
from prep.core.run import dedupe_files
from prep.core.run.dedupe_types import (
    BandPairs,
    ComponentPairs,
    GroupedItems,
    PartEdges,
    PartLabels,
    PartPairs,
    PartState,
    ScanStats,
    Unsettled,
    Verdict,
    only,
)
from prep.core.union_find import pair_groups

ROUNDS = 6  # star-closing rounds unrolled in the graph; past them the fallback task finishes (see module doc)


def first_edges(found: BandPairs):
    """A band part's pairs -> their edges by part, the pairs by their first image's part, the skipped count."""
    pairs, parts = found.pairs, found.parts
    if len(pairs):
        for part, edges in near_components.by_part(pairs[:, 1:], parts):
            yield PartEdges(part, edges, parts)
        for part, rows in near_components.pairs_by_part(pairs, pairs[:, 1], parts):
            yield PartPairs(part, rows, parts)
    if found.skipped:
        yield ScanStats(0, found.skipped)


def _edges(values: list) -> tuple[np.ndarray, int]:
    """A part's PartEdges -> its edges each once, sorted, and the number of parts."""
    arrays = [v for v in values if isinstance(v, PartEdges)]
    if not arrays:
        return near_components.EMPTY, 1
    return near_components.unique_edges(np.concatenate([v.edges for v in arrays])), arrays[0].parts


def close_part(element):
    """(part, [PartEdges]) -> PartEdges of its images, each joined to the least image it reaches."""
    _, values = element
    edges, parts = _edges(list(values))
    if not near_components.settled(edges):  # settled stars close into themselves: spare the work
        edges = near_components.local_stars(edges)
    for part, closed in near_components.by_part(edges, parts):
        yield PartEdges(part, closed, parts)


def settle_part(element):
    """(part, [PartEdges]) -> its PartState, its PartLabels when settled, and its edges for the fallback."""
    part, values = element
    edges, parts = _edges(list(values))
    settled = near_components.settled(edges)
    yield PartState(part, settled)
    if settled:
        yield PartLabels(part, *near_components.labels(edges))
    yield PartEdges(part, edges, parts)


def verdict(element):
    """(None, [PartState]) -> a Verdict per part: whether every part settled."""
    _, states = element
    states = list(states)
    every = all(s.settled for s in states)
    for s in states:
        yield Verdict(s.part, every)


def label_part(element):
    """(part, [Verdict, PartLabels, PartPairs, PartEdges]) -> its pairs as ComponentPairs, labelled; or, when
    some part did not settle, its edges and pairs as Unsettled, for the fallback task."""
    _, values = element
    values = list(values)
    pairs = [v for v in values if isinstance(v, PartPairs)]
    if not pairs:
        return
    rows, parts = np.concatenate([v.pairs for v in pairs]), pairs[0].parts
    if not all(v.settled for v in values if isinstance(v, Verdict)):
        yield Unsettled(_edges(values)[0], rows, parts)
        return
    (known,) = [v for v in values if isinstance(v, PartLabels)]
    label = near_components.label_pairs(rows, known.items, known.labels)
    for part, chunk in near_components.pairs_by_part(rows, label, parts):
        yield ComponentPairs(part, chunk)


def fallback(element):
    """(None, [Unsettled]) -> ComponentPairs of every part's pairs: the rounds left some part unsettled, so
    this one task closes what is left of every part's edges until they are stars."""
    _, values = element
    values = list(values)
    if not values:
        return
    edges = near_components.both_ways(np.concatenate([v.edges for v in values]))
    rows = np.concatenate([v.pairs for v in values])
    while not near_components.settled(edges):
        edges = near_components.both_ways(near_components.local_stars(edges))
    items, labels = near_components.labels(edges)
    label = near_components.label_pairs(rows, items, labels)
    for part, chunk in near_components.pairs_by_part(rows, label, values[0].parts):
        yield ComponentPairs(part, chunk)


def part_groups(element, max_size: int):
    """(component part, [ComponentPairs]) -> `GroupedItems` per chunk with an item in its groups, and the
    unions refused (ScanStats), from the bounded union-find over its components' pairs."""
    part, values = element
    pairs = np.concatenate([v.pairs for v in values])
    items, groups, ranks, refused = pair_groups(pairs, max_size)
    yield from grouped_items(items, groups, [dedupe_files.part_batch(part, r) for r in ranks.tolist()])
    if refused:
        yield ScanStats(refused, 0)


def grouped_items(items: np.ndarray, groups: np.ndarray, batches: list[int]):
    """Grouped items, their group ids and group batches -> `GroupedItems` per chunk, in chunk order."""
    by_chunk: dict[int, list] = {}
    for item, group, batch in zip(items.tolist(), groups.tolist(), batches):
        by_chunk.setdefault(dedupe_files.item_chunk(item), []).append((item, group, batch))
    for chunk, chunk_rows in sorted(by_chunk.items()):
        yield GroupedItems(chunk, tuple(chunk_rows))


def _by_part(element):
    return element.part, element


def _one(element):
    return None, element


class _Step(beam.PTransform):
    """Elements -> fn((key, [elements with that key]), *args)'s outputs; key: their `part`, or one for all."""

    def __init__(self, fn, *args, everything: bool = False):
        super().__init__()
        self._fn, self._args, self._key = fn, args, _one if everything else _by_part

    def expand(self, pcolls):
        together = pcolls if isinstance(pcolls, beam.PCollection) else pcolls | "Together" >> beam.Flatten()
        return (
            together
            | "Key" >> beam.Map(self._key)
            | "Gather" >> beam.GroupByKey()
            | "Apply" >> beam.FlatMap(self._fn, *self._args)
        )


class SpreadComponents(beam.PTransform):
    """BandPairs of band parts -> GroupedItems | ScanStats, as dedupe.components gives (module docstring)."""

    def __init__(self, max_size: int, rounds: int = ROUNDS):
        super().__init__()
        self._max_size, self._rounds = max_size, rounds

    def expand(self, found):
        start = found | "FirstEdges" >> beam.FlatMap(first_edges)
        edges = start | "Edges" >> beam.FlatMap(only(PartEdges))
        for r in range(self._rounds):
            edges = edges | f"Close{r}" >> _Step(close_part)
        settled = edges | "Settle" >> _Step(settle_part)
        verdicts = settled | "States" >> beam.FlatMap(only(PartState)) | "Verdict" >> _Step(verdict, everything=True)
        joined = (
            verdicts,
            settled | "Labels" >> beam.FlatMap(only(PartLabels, PartEdges)),
            start | "Pairs" >> beam.FlatMap(only(PartPairs)),
        ) | "LabelPairs" >> _Step(label_part)
        late = joined | "Unsettled" >> beam.FlatMap(only(Unsettled)) | "Fallback" >> _Step(fallback, everything=True)
        groups = (joined | "Labelled" >> beam.FlatMap(only(ComponentPairs)), late) | "Groups" >> _Step(
            part_groups, self._max_size
        )
        return (groups, start | "Skipped" >> beam.FlatMap(only(ScanStats))) | "WithStats" >> beam.Flatten()
