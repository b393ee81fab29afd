"""The bucketed Beam planner gives exactly the reference plan, with bounded groups."""

import pickle
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_jobs.planning import CAPPED, ENTRY, Entry, PlanShards, prefix_bits
from beam_jobs.prepare import PreparedRef
from prep.plan import Example, PlanOptions, make_plan, parse_split_fractions


def synthetic_refs(counts, split=""):
    refs = []
    for label, n in enumerate(counts):
        for i in range(n):
            refs.append(PreparedRef(f"c{label}/{i:06d}.jpg", label, split, spill=len(refs), offset=0,
                                    length=100 + i % 7, converted=False, cut=0, image=0))
    return refs


def _dump(items, path):
    with open(path, "wb") as f:
        pickle.dump(items, f)


def beam_plan(refs, num_classes, options, group_target, tmp_path):
    """{(split, shard, num_shards): [paths in write order]}, capped counts, and the largest group seen."""
    by_spill = {r.spill: r.path for r in refs}
    with beam.Pipeline(runner=FnApiRunner()) as p:
        # as PrepareChunk emits them: plain tuples, the path in bytes
        batches = [[(r.path.encode(), *r[1:]) for r in refs[i:i + 37]] for i in range(0, len(refs), 37)]
        ranked = (p | beam.Create(batches)
                  | PlanShards(num_classes, options, len(refs), group_target=group_target))
        parts = (ranked
                 | "Entries" >> beam.FlatMap(lambda r: [(r[1], r[2])] if r[0] == ENTRY else [])
                 | beam.GroupByKey())
        capped = (ranked
                  | "Capped" >> beam.FlatMap(lambda r: [((CAPPED, r[1]), r[2])] if r[0] == CAPPED else [])
                  | beam.CombinePerKey(sum))
        ((parts, capped) | beam.Flatten() | "All" >> beam.combiners.ToList()
         | beam.Map(_dump, str(tmp_path / "plan.pickle")))
    with open(tmp_path / "plan.pickle", "rb") as f:
        out = pickle.load(f)
    capped = {key[1]: n for key, n in out if key[0] == CAPPED}
    out = [(k, [Entry._make(e) for entries in v for e in entries]) for k, v in out if k[0] != CAPPED]
    shards, largest = {}, 0
    for key, entries in out:
        split, shard, count, part, parts = key
        largest = max(largest, len(entries))
        shards.setdefault((split, shard, count), []).extend((part, e) for e in entries)
    return {k: [by_spill[e.spill] for _, e in sorted(v, key=lambda pe: (pe[0], pe[1].order))]
            for k, v in shards.items()}, capped, largest


@pytest.mark.parametrize("counts, options, group_target", [
    ([3, 50, 400], PlanOptions(num_shards=4, seed=3), 16),
    ([1, 7, 100, 1000], PlanOptions(num_shards=3, split_fractions=parse_split_fractions("a=0.7,b=0.3")), 64),
    ([40, 900], PlanOptions(num_shards=2, max_per_class=500), 32),
    ([600], PlanOptions(num_shards=1), 50),  # one shard cut into parts
    ([5, 5], PlanOptions(shard_size=300), 20000),  # shard count from the size
])
def test_bucketed_plan_equals_reference_plan(counts, options, group_target, tmp_path):
    refs = synthetic_refs(counts)
    examples = [Example(r.path, r.label, None, r.length) for r in refs]
    reference = make_plan(examples, len(counts), options)
    expected = {(s.name.split, s.name.index, s.name.count): [examples[m].path for m in s.members]
                for s in reference.shards}
    got, capped, largest = beam_plan(refs, len(counts), options, group_target, tmp_path)
    assert got == expected
    assert capped == dict(Counter(examples[i].label for i in reference.capped))
    assert largest <= 3 * group_target  # hash buckets: bounded, about group_target each


def test_prefix_bits():
    assert prefix_bits(10, 20) == 0
    assert prefix_bits(20_000_000, 20_000) == 10
    assert prefix_bits(5_000_000, 20_000) == 8
