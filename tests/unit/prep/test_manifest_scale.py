"""The manifest at many classes: counts name only what a shard holds, and the checks over them are
sparse yet agree exactly with the dense definitions they replace."""

from __future__ import annotations

import random
import types

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
        dense = [{f"c{c}": (rng.randint(0, 3) if rng.random() < 0.7 else 0) for c in range(classes)}
                 for _ in range(shards)]
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
        as_shards = [[types.SimpleNamespace(class_counts=d, examples=sum(d.values())) for d in counts]
                     for counts in (dense, sparse)]
        expected = dense_deviation(split, examples, as_shards[0])
        assert deviation(split, examples, as_shards[0]) == expected
        assert deviation(split, examples, as_shards[1]) == expected
