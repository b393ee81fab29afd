"""The Beam planner gives exactly the reference plan, with bounded groups, from per-chunk counts."""

import json
import pathlib
import pickle
import random
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_jobs import prepare
from beam_jobs.plan import (
    INLINE_MAX,
    Capped,
    Entry,
    PartEntries,
    PlanShards,
    layout_tasks,
    pack_entry,
    prefix_bits,
    rank_task,
    read_section,
    unpack_entries,
)
from prep.core.errors import PlanError
from prep.core.layout import PlanOptions, parse_split_fractions
from prep.core.listing import InputRef, Reject
from prep.core.ordering import listing_order
from prep.core.run import checkpoints
from prep.core.workdir import WorkDir
from tests.support.reference_plan import Example, make_plan

CHUNK = 37
SPILLED = bytes(range(256))  # every synthetic spill file: a record's spilled bytes are its first length - image


def _spill_files(work, spills):
    for spill in spills:
        path = pathlib.Path(work.spill(spill))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(SPILLED)


def stage(counts, options, tmp_path, splits=("",), reject_every=0):
    """Stages synthetic chunk indexes as a conversion leaves them: the listing in `listing_order`,
    every `reject_every`-th input rejected (-1: every input of the second chunk), every other image
    left in the source (`image`).
    Returns (examples kept, [(chunk, counts)])."""
    names = ("", "é", "\udcff")  # plain, not ASCII, and a file name that is not UTF-8
    inputs = [
        InputRef(f"c{label}/{split}{names[i % 3]}{i:06d}.jpg", f"class{label:02d}", split or None)
        for split in splits
        for label, n in enumerate(counts)
        for i in range(n)
    ]
    random.Random(1).shuffle(inputs)  # the order found on disk must not matter
    ordered = listing_order(inputs, options.seed)
    examples, elements = [], []
    for chunk, start in enumerate(range(0, len(ordered), CHUNK)):
        outcomes = []
        for i, ref in enumerate(ordered[start : start + CHUNK], start=start):
            if (reject_every > 0 and i % reject_every == 0) or (reject_every < 0 and chunk == 1):
                outcomes.append((prepare.REJECT, Reject(ref.path, "corrupt", "")))
                continue
            label = int(ref.label[5:])
            outcomes.append(
                (
                    prepare.OK,
                    prepare.PreparedRef(
                        path=ref.path.encode("utf-8", "surrogateescape"),
                        label=label,
                        split=ref.split or "",
                        spill=len(examples),
                        offset=0,
                        length=100 + i % 7,
                        converted=False,
                        cut=3,
                        image=50 * (i % 2),
                    ),
                )
            )
            examples.append(Example(ref.path, label, ref.split, 100 + i % 7))
        _spill_files(WorkDir(str(tmp_path)), [ref.spill for kind, ref in outcomes if kind == prepare.OK])
        checkpoints.write_chunk_index(WorkDir(str(tmp_path)), chunk, outcomes, {}, [])
        good = prepare.read_prepared(WorkDir(str(tmp_path)), chunk)
        if good:
            elements.append(prepare.ChunkCounts(chunk, prepare.chunk_counts(good)))
    return examples, elements


def _dump(items, path):
    with open(path, "wb") as f:
        pickle.dump(items, f)


def beam_plan(elements, num_classes, options, group_target, tmp_path, examples, inline_max=INLINE_MAX):
    """{(split, shard, num_shards): [spill ids in write order]}, capped counts, and the largest part.

    Checks that each entry names its input's path exactly when its image is read from the source again,
    and carries its spilled bytes then, and that a section carries its entries exactly when they fit in
    `inline_max` bytes.
    """
    tmp = WorkDir(str(tmp_path))
    with beam.Pipeline(runner=FnApiRunner()) as p:
        ranked = (
            p
            | beam.Create(elements)
            | PlanShards(num_classes, options, tmp, group_target=group_target, inline_max=inline_max)
        )
        parts = (
            ranked
            | "Entries" >> beam.FlatMap(lambda r: [(r.key, r.section)] if isinstance(r, PartEntries) else [])
            | beam.GroupByKey()
        )
        capped = (
            ranked
            | "Capped" >> beam.FlatMap(lambda r: [(("capped", r.label), r.count)] if isinstance(r, Capped) else [])
            | beam.CombinePerKey(sum)
        )
        (
            (parts, capped)
            | beam.Flatten()
            | "All" >> beam.combiners.ToList()
            | beam.Map(_dump, str(tmp_path / "plan.pickle"))
        )
    with open(tmp_path / "plan.pickle", "rb") as f:
        out = pickle.load(f)
    capped = {key[1]: n for key, n in out if key[0] == "capped"}
    shards, largest = {}, 0
    for key, sections in out:
        if key[0] == "capped":
            continue
        split, shard, count, part, parts = key
        entries = [e for section in sections for e in read_section(tmp, section)]
        assert all(bool(section.data) == (section.length <= inline_max) for section in sections)
        for e in entries:
            path = examples[e.spill].path.encode("utf-8", "surrogateescape")
            assert e.cut == 3 and e.source == (path if e.image else b"")
            assert e.rest == (SPILLED[: e.length - e.image] if e.image else b"")
        largest = max(largest, len(entries))
        shards.setdefault((split, shard, count), []).extend((part, e) for e in entries)
    return (
        {k: [e.spill for _, e in sorted(v, key=lambda pe: (pe[0], pe[1].order))] for k, v in shards.items()},
        capped,
        largest,
    )


PLAN_CASES = [
    ([3, 50, 400], PlanOptions(num_shards=4, seed=3), 16),
    ([1, 7, 100, 1000], PlanOptions(num_shards=3, split_fractions=parse_split_fractions("a=0.7,b=0.3")), 64),
    ([40, 900], PlanOptions(num_shards=2, max_per_class=500), 32),
    ([600], PlanOptions(num_shards=1), 50),  # one shard cut into parts
    ([5, 5], PlanOptions(shard_size=300), 20000),  # shard count from the size
]
REJECT_EVERY = [0, 5, -1]
INLINE_MAXES = [0, INLINE_MAX, 1 << 30]  # sections in entry files, by size, all inline


def _plan_params():
    """Every pair of values of two parameters is run (a Latin square: each plan case with each reject_every and
    each inline_max), and the richest case (two splits, four classes) with all 9 combinations: 21 Beam
    pipelines of ~0.5 s CPU, not the 45 of the whole product."""
    for i, case in enumerate(PLAN_CASES):
        for j, reject_every in enumerate(REJECT_EVERY):
            inlines = INLINE_MAXES if i == 1 else [INLINE_MAXES[(i + j) % len(INLINE_MAXES)]]
            for inline_max in inlines:
                yield pytest.param(
                    *case, reject_every, inline_max, id=f"case{i}-reject{reject_every}-inline{inline_max}"
                )


@pytest.mark.parametrize("counts, options, group_target, reject_every, inline_max", list(_plan_params()))
def test_plan_from_chunk_counts_equals_reference_plan(
    counts, options, group_target, reject_every, inline_max, tmp_path
):
    examples, elements = stage(counts, options, tmp_path, reject_every=reject_every)
    reference = make_plan(examples, len(counts), options)
    expected = {(s.name.split, s.name.index, s.name.count): list(s.members) for s in reference.shards}
    got, capped, largest = beam_plan(elements, len(counts), options, group_target, tmp_path, examples, inline_max)
    assert got == expected
    assert capped == dict(Counter(examples[i].label for i in reference.capped))
    assert largest <= 2 * group_target  # parts: bounded, about group_target each
    # A rank task holds about group_target references: its last chunk may take it past.
    tasks = list(layout_tasks((None, elements), len(counts), options, WorkDir(str(tmp_path)), group_target))
    held = {chunk: sum(c[2] for c in counts) for chunk, counts in elements}
    assert max(sum(held[chunk] for chunk, _ in task.chunks) for _, task in tasks) < group_target + CHUNK
    assert len(tasks) >= sum(held.values()) // (group_target + CHUNK)


def test_splits_named_by_the_source_are_planned_as_the_reference_plans_them(tmp_path):
    options = PlanOptions(num_shards=3, seed=7, max_per_class=60)
    examples, elements = stage([10, 80, 45], options, tmp_path, splits=("train", "test"), reject_every=7)
    reference = make_plan(examples, 3, options)
    got, capped, _ = beam_plan(elements, 3, options, 40, tmp_path, examples)
    assert got == {(s.name.split, s.name.index, s.name.count): list(s.members) for s in reference.shards}
    assert sorted(got) == [(split, i, 3) for split in ("test", "train") for i in range(3)]
    assert capped == dict(Counter(examples[i].label for i in reference.capped))


def test_a_chunk_staged_out_of_rank_order_is_an_internal_error_not_a_wrong_plan(tmp_path):
    options = PlanOptions(num_shards=2)
    _, elements = stage([30], options, tmp_path)
    index = pathlib.Path(WorkDir(str(tmp_path)).chunk_index(0))
    recorded = json.loads(index.read_text())
    recorded["outcomes"].reverse()
    index.write_text(json.dumps(recorded))
    (task,) = layout_tasks((None, elements), 1, options, WorkDir(str(tmp_path)), 1000)
    with pytest.raises(RuntimeError, match="not staged in rank order"):
        list(rank_task(task, WorkDir(str(tmp_path)), options.seed))


def test_a_split_emptied_by_the_layout_is_a_plan_error(tmp_path):
    options = PlanOptions(num_shards=1, split_fractions=parse_split_fractions("a=0.9,b=0.1"))
    _, elements = stage([3], options, tmp_path)
    with pytest.raises(PlanError, match="split 'b' gets no examples"):
        list(layout_tasks((None, elements), 1, options, WorkDir(str(tmp_path)), 1000))


def test_a_task_whose_sections_all_travel_inline_writes_no_entry_file(tmp_path):
    options = PlanOptions(num_shards=40, seed=2)  # more shards than a task's references: tiny sections
    examples, elements = stage([30, 30], options, tmp_path)
    work = WorkDir(str(tmp_path))
    planned = []
    for task in layout_tasks((None, elements), 2, options, work, 1000):
        sections = [s.section for s in rank_task(task, work, options.seed) if isinstance(s, PartEntries)]
        assert sections and all(s.data and s.length == len(s.data) for s in sections)
        assert not pathlib.Path(work.entries(task[0])).exists()
        planned += [e.spill for s in sections for e in read_section(work, s)]
    assert sorted(planned) == list(range(len(examples)))


def test_entries_survive_packing():
    entries = [
        Entry(
            bytes(range(32)), 2**40, 5, 7, 3, True, "caf\u00e9/\udcff.jpg".encode("utf-8", "surrogateescape"), 11, 13
        ),
        Entry(b"\xff" * 32, 0, 0, 1, 0, False, b"", 0, 0),
        Entry(b"\x01" * 32, 3, 9, 70, 1, False, b"a.jpg", 4, 50, -1, ((1, 2),), b"spilled \x00 bytes"),
    ]
    assert unpack_entries(b"".join(map(pack_entry, entries))) == entries
    assert unpack_entries(b"") == []


def test_prefix_bits():
    assert prefix_bits(10, 20) == 0
    assert prefix_bits(20_000_000, 20_000) == 10
    assert prefix_bits(5_000_000, 20_000) == 8
