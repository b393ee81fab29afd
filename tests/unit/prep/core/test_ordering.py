"""Single-label chunks (prep/core/ordering.py): runs of rank-key buckets that keep the listing order's contract."""

from __future__ import annotations

import pytest

from prep.core.listing import InputRef
from prep.core.ordering import (
    MAX_CHUNK,
    bucket_of,
    buckets_for,
    chunk_size,
    classification_chunks,
    listing_order,
    plan_chunks,
    sort_key,
)


@pytest.mark.parametrize("sizes", [{"a": 5}, {"a": 40, "b": 130, "c": 3}, {"a": 2000, "b": 1}, {"a": 30000}])
def test_chunks_concatenate_to_the_listing_order_and_are_bounded(sizes):
    refs = [InputRef(f"{c}/{i}.jpg", c, "train" if i % 4 else None) for c, n in sizes.items() for i in range(n)]
    chunks = classification_chunks(refs, seed=9)
    assert [r for chunk in chunks for r in chunk] == listing_order(refs, 9)
    assert all(0 < len(chunk) <= MAX_CHUNK for chunk in chunks)


def test_small_groups_share_a_chunk_and_a_large_one_is_cut_near_the_chunk_size():
    plan = plan_chunks([((None, "a"), [3]), ((None, "b"), [4]), ((None, "c"), [20] * 96)])
    assert plan.chunks[None, "a"] == plan.chunks[None, "b"] == [0]
    size = chunk_size(1927)  # 61: a chunk takes the buckets that fit, three of 20
    assert plan.sizes == [7 + 40] + [60] * 31 + [20] and size == 61


def test_a_bucket_over_the_chunk_limit_is_refused():
    with pytest.raises(ValueError, match="more than"):
        plan_chunks([((None, "a"), [MAX_CHUNK + 1])])


def test_buckets_keep_rank_order():
    keys = sorted(sort_key(1, f"x/{i}") for i in range(500))
    buckets = buckets_for(500)
    assert [bucket_of(k, buckets) for k in keys] == sorted(bucket_of(k, buckets) for k in keys)
    assert {bucket_of(k, buckets) for k in keys} == set(range(buckets))
