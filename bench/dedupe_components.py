"""Duplicate components in one task against spread over parts (beam_jobs/dedupe_components.py), without
Beam: every step's function called as the runner would, one task at a time, on one thread. Prints the
largest task's pairs or edges and its memory, the total CPU, and the rounds used (docs/benchmarks.md).

    PYTHONPATH=$PWD python bench/dedupe_components.py --count 1000000 --pairs 2000000 --shape clusters
    PYTHONPATH=$PWD python bench/dedupe_components.py --count 1000000 --pairs 2000000 --shape random

Pairs: `--pairs` rows (distance, a, b) among `--count` image ids (chunks of 1,024), as the band parts emit
them (cut into `--band-parts` BandPairs, some pairs met twice). `clusters`: pairs inside random groups of
`--cluster` images (copies, bursts: components stay small); `random`: pairs between any two images (false
near pairs: past one pair an image they chain most images into one component, the worst case for the
spread path, whose groups' task then holds that component's pairs).
Memory: tracemalloc's peak of the largest task run again alone (numpy's arrays are traced).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
import tracemalloc

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beam_jobs import dedupe_components as dc  # noqa: E402
from beam_jobs.dedupe import components  # noqa: E402
from prep.core import near_components  # noqa: E402
from prep.core.run import dedupe_files  # noqa: E402
from prep.core.run.dedupe_types import (  # noqa: E402
    BandPairs,
    ComponentPairs,
    PartEdges,
    PartLabels,
    PartPairs,
    PartState,
    Unsettled,
)


def make_pairs(count: int, pairs: int, shape: str, cluster: int, seed: int) -> np.ndarray:
    rnd = np.random.default_rng(seed)
    ids = np.arange(count, dtype=np.int64)
    ids = (ids // 1024) * dedupe_files.item_id(1, 0) + ids % 1024  # item ids of full chunks
    if shape == "clusters":
        groups = rnd.permutation(ids)[: count - count % cluster].reshape(-1, cluster)
        which = rnd.integers(0, len(groups), pairs)
        a = groups[which, rnd.integers(0, cluster, pairs)]
        b = groups[which, rnd.integers(0, cluster, pairs)]
    else:
        a, b = rnd.choice(ids, pairs), rnd.choice(ids, pairs)
    keep = a != b
    a, b = a[keep], b[keep]
    return np.c_[rnd.integers(0, 8, len(a)), np.minimum(a, b), np.maximum(a, b)].astype(np.int64)


class Tasks:
    """Runs a step's tasks one at a time: CPU per task, the largest task's input size and its key."""

    def __init__(self):
        self.cpu = 0.0
        self.largest: tuple[int, str, object] = (0, "", None)

    def run(self, name: str, fn, groups: dict, size, *args):
        out = []
        for key, values in groups.items():
            start = time.process_time()
            out += list(fn((key, values), *args))
            self.cpu += time.process_time() - start
            n = size(values)
            if n > self.largest[0]:
                self.largest = (n, name, (fn, (key, values), args))
        return out


def by_part(elements, kinds):
    out: dict = {}
    for e in elements:
        if isinstance(e, kinds):
            out.setdefault(e.part, []).append(e)
    return out


def rows_of(values) -> int:
    return sum(len(getattr(v, "edges", getattr(v, "pairs", ()))) for v in values)


def spread(found: list[BandPairs], rounds: int, max_size: int):
    tasks = Tasks()
    start = time.process_time()
    first = [e for f in found for e in dc.first_edges(f)]
    tasks.cpu += time.process_time() - start
    edges = [e for e in first if isinstance(e, PartEdges)]
    used = None
    for r in range(rounds):
        joined = by_part(edges, PartEdges)
        if used is None and all(near_components.settled(dc._edges(v)[0]) for v in joined.values()):
            used = r
        edges = tasks.run("round", dc.close_part, joined, rows_of)
    settled = tasks.run("settle", dc.settle_part, by_part(edges, PartEdges), rows_of)
    states = [s for s in settled if isinstance(s, PartState)]
    if used is None and all(s.settled for s in states):
        used = rounds
    verdicts = list(dc.verdict((None, states)))
    joined = by_part(
        verdicts + [s for s in settled if isinstance(s, (PartLabels, PartEdges))] + first,
        (type(verdicts[0]), PartLabels, PartEdges, PartPairs),
    )
    labelled = tasks.run("label", dc.label_part, joined, rows_of)
    late = [v for v in labelled if isinstance(v, Unsettled)]
    if late:
        labelled += tasks.run("fallback", dc.fallback, {None: late}, rows_of)
    groups = tasks.run("groups", dc.part_groups, by_part(labelled, ComponentPairs), rows_of, max_size)
    return groups, tasks, used, bool(late)


def peak(fn, element, args) -> int:
    tracemalloc.start()
    list(fn(element, *args))
    out = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=2_000_000)
    parser.add_argument("--shape", choices=("clusters", "random"), default="clusters")
    parser.add_argument("--cluster", type=int, default=10)
    parser.add_argument("--parts", type=int, default=16, help="component parts (2**bits of the band parts)")
    parser.add_argument("--band-parts", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=dc.ROUNDS)
    parser.add_argument("--max-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    pairs = make_pairs(args.count, args.pairs, args.shape, args.cluster, args.seed)
    cuts = np.array_split(pairs, args.band_parts)
    found = [BandPairs(np.concatenate([c, c[:3]]), 0, args.parts) for c in cuts]

    start = time.process_time()
    one = list(components((None, found), args.max_size))
    one_cpu = time.process_time() - start
    one_peak = peak(components, (None, found), (args.max_size,))

    groups, tasks, used, late = spread(found, args.rounds, args.max_size)
    size, name, (fn, element, fargs) = tasks.largest
    spread_peak = peak(fn, element, fargs)

    def rows(outputs):
        return sorted((i, g) for o in outputs if hasattr(o, "rows") for i, g, _ in o.rows)

    same = rows(one) == rows(groups)
    refused = sum(getattr(o, "refused", 0) for o in groups)
    print(
        f"\n{args.count:,} images, {len(pairs):,} pairs ({args.shape}"
        + (f" of {args.cluster}" if args.shape == "clusters" else "")
        + f"), {args.parts} parts, {len(found)} band parts' BandPairs; CPU of one thread\n"
    )
    print("| components | largest task | its rows | its peak, MB | CPU s | rounds to settle |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    print(f"| one task | components | {len(pairs) + 3 * len(found):,} pairs | {one_peak / 1e6:.0f} | {one_cpu:.1f} | |")
    print(
        f"| spread | {name} | {size:,} | {spread_peak / 1e6:.0f} | {tasks.cpu:.1f} | "
        f"{'not in ' + str(args.rounds) + ' (fallback task)' if late else used} |"
    )
    print(f"\nsame groups: {same}; unions refused: {refused:,}")


if __name__ == "__main__":
    main()
