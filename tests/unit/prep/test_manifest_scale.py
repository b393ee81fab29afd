"""The manifest at many classes: counts name only what a shard holds, and the checks over them are
sparse yet agree exactly with the dense definitions they replace."""

from __future__ import annotations

import random
import types

from prep.core.manifest_checks import unbalanced
from prep.core.manifest_parts import deviation


def dense_deviation(split_counts, examples, shards):
    """The definition: every shard against every class of the split."""
    worst = 0.0
    for shard in shards:
        for name, total in split_counts.items():
            share = total * shard.examples / examples if examples else 0.0
            worst = max(worst, abs(shard.class_counts.get(name, 0) - share))
    return round(worst, 3)


def random_layouts(seed: int, cases: int):
    """(dense per-shard counts, the same without zeros), some balanced, some not."""
    rng = random.Random(seed)
    for trial in range(cases):
        shards, classes = rng.randint(1, 12), rng.randint(1, 15)
        dense = [
            {f"c{c}": (rng.randint(0, 3) if rng.random() < 0.7 else 0) for c in range(classes)} for _ in range(shards)
        ]
        if trial % 3 == 0:  # laid out by the balance rule, as a conversion does
            dense = [{f"c{c}": 0 for c in range(classes)} for _ in range(shards)]
            p = 0
            for c in range(classes):
                for _ in range(rng.randint(0, 2 * shards)):
                    dense[p % shards][f"c{c}"] += 1
                    p += 1
        yield dense, [{k: v for k, v in d.items() if v} for d in dense]


def test_sparse_deviation_is_the_dense_one_bit_for_bit():
    for dense, sparse in random_layouts(1, 300):
        split: dict[str, int] = {}
        for d in dense:
            for k, v in d.items():
                split[k] = split.get(k, 0) + v
        examples = sum(split.values())
        as_shards = [
            [types.SimpleNamespace(class_counts=d, examples=sum(d.values())) for d in counts]
            for counts in (dense, sparse)
        ]
        expected = dense_deviation(split, examples, as_shards[0])
        assert deviation(split, examples, as_shards[0]) == expected
        assert deviation(split, examples, as_shards[1]) == expected


def dense_unbalanced(split, files, counts):
    """The definition: every class against every shard, zeros included."""
    problems = []

    def check(values, what):
        n, shards = sum(values), len(values)
        low, high = n // shards, -(-n // shards)
        allowed = f"{low}" if low == high else f"{low} or {high}"
        problems.extend(
            (
                file,
                f"unbalanced: holds {value} {what}; split {split} has {n} {what} in {shards} shards, "
                f"so each must hold {allowed}",
            )
            for file, value in zip(files, values)
            if value not in (low, high)
        )

    check([sum(c.values()) for c in counts], "records")
    for name in sorted(set().union(*counts)):
        check([c.get(name, 0) for c in counts], f"of class {name!r}")
    return problems


def test_sparse_balance_rule_gives_the_dense_messages_in_the_same_order():
    found = 0
    for dense, sparse in random_layouts(2, 300):
        files = [f"s{i}" for i in range(len(dense))]
        expected = dense_unbalanced("t", files, dense)
        found += bool(expected)
        assert unbalanced("t", files, dense) == expected
        assert unbalanced("t", files, sparse) == expected
    assert found > 100  # the random layouts do break the rule, often


def test_sparse_heat_map_is_the_dense_one_binned_or_not():
    import numpy as np

    from prep.report import content

    rng = random.Random(3)
    for trial in range(200):
        classes, shards = rng.randint(1, 40), rng.randint(1, 40)
        matrix = np.array([[rng.choice([0, 0, 1, 2, 5]) for _ in range(shards)] for _ in range(classes)], np.int64)
        if trial % 4 == 0:
            matrix += 1  # no zero cell
        labels = tuple(f"c{i}" for i in range(classes))
        kept = [
            {labels[i]: int(matrix[i, j]) for i in range(classes) if matrix[i, j] or trial % 2} for j in range(shards)
        ]  # sparse, or with the zeros of a version-1 manifest
        manifest = types.SimpleNamespace(
            labels=labels,
            splits={"train": types.SimpleNamespace(shards=[types.SimpleNamespace(class_counts=c) for c in kept])},
        )
        rows, columns = rng.randint(1, 12), rng.randint(1, 12)
        found = content.split_heat_map(manifest, "train", rows, columns)
        expected = content.heat_map(content.count_matrix(manifest, "train"), rows, columns)
        assert np.array_equal(found.heat.cells, expected.cells), trial
        assert found.heat.binned == expected.binned
        assert np.array_equal(found.heat.row_edges, expected.row_edges)
        assert np.array_equal(found.heat.column_edges, expected.column_edges)
        assert (found.classes, found.shards, found.low, found.high) == (classes, shards, matrix.min(), matrix.max())


def small_manifest(per_shard: list[dict[str, int]], labels=("a", "b", "c")):
    from prep.core.manifest import Inputs, Manifest, Run, ShardInfo
    from prep.core.naming import ShardName

    written = []
    for i, counts in enumerate(per_shard):
        name = ShardName("train", i, len(per_shard))
        written.append((name, ShardInfo(name.filename, i, sum(counts.values()), 10, "0" * 64, counts)))
    n = sum(sum(c.values()) for c in per_shard)
    return Manifest.build(labels, {"seed": 0}, written, Inputs(n, n, 0, 0), {"name": "tfrecord-prep"}, Run())


def test_inspect_spreads_count_a_class_a_shard_does_not_name_as_zero():
    from prep.inspect import summary

    dense = [{"a": 2, "b": 1, "c": 0}, {"a": 1, "b": 0, "c": 0}, {"a": 3, "b": 2, "c": 0}]
    sparse = [{k: v for k, v in c.items() if v} for c in dense]
    for counts in (dense, sparse):
        classes = summary(small_manifest(counts), "out")["splits"]["train"]["classes"]
        assert {k: v["per_shard"] for k, v in classes.items()} == {
            "a": {"min": 1, "max": 3},
            "b": {"min": 0, "max": 2},
            "c": {"min": 0, "max": 0},
        }
