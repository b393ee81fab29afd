"""The order of examples: the seeded sort key, the order the listing is staged in, and its chunks.

The contract, written once here and relied on by `beam_jobs.plan`:

- An example's rank in its group (split given by SOURCE, class) is its place in
  ``(rank_key(seed, path, key), path)`` order: `sort_key` for single-label classification,
  the stratified key of `InputRef.key` for multi-label and detection. The key hashes the path relative to
  SOURCE, so the plan never depends on the order a file system lists files, and
  another seed gives another order.
- The listing is staged in `listing_order`: by (split or "", class, sort key,
  path). So each group's inputs come in rank order, chunk after chunk, and a
  chunk's good inputs of a group hold consecutive ranks: the planner needs only
  per-chunk counts to rank every reference exactly.
- Inside a shard, records are ordered by ``sort_key(seed, path, "order")``.

Chunks of single-label classification (`plan_chunks`) are cut so that a chunk's members can be
found without sorting the whole listing: each group's rank-key space is cut by value into
`buckets_for(count)` buckets of at most about `BUCKET` inputs (rank keys are SHA-256, so uniform), and a
chunk is a run of consecutive (group, bucket) of about `chunk_size` inputs. Bucket order is rank
order, so the contract above holds; the listing on workers (`beam_jobs.listing`) and the driver's
(`listing_chunks`) cut the same chunks. Other tasks' stratified keys are not uniform: their
listing is cut every `chunk_size` inputs.
"""

from __future__ import annotations

import hashlib
import math
import typing
from collections.abc import Iterable, Sequence
from typing import TypeVar

from prep.core.listing import InputRef, Listing

T = TypeVar("T")

# Chunks per listing, about, for small inputs; a chunk holds at most MAX_CHUNK inputs, since
# each chunk ends with a barrier (its index is written once all its images are done).
CHUNKS = 32
MIN_CHUNK = 16
MAX_CHUNK = 1024
BUCKET = 64  # inputs per bucket of a group's rank keys, about (see the module docstring)


def sort_key(seed: int, path: str | bytes, purpose: str = "rank") -> bytes:
    """The seeded hash that orders examples; `purpose` separates independent orders.

    `path` as text, or already encoded as UTF-8 with surrogateescape.
    """
    raw = path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")
    return hashlib.sha256(key_prefix(seed, purpose) + raw).digest()


def key_prefix(seed: int, purpose: str = "rank") -> bytes:
    """What `sort_key` hashes before the path: sha256(key_prefix(seed, purpose) + path) is its key, for a
    caller that hashes many paths (the planner: two keys a reference)."""
    return f"{seed}\0{purpose}\0".encode()


def rank_key(seed: int, path: str | bytes, key: str | None = None) -> bytes:
    """An example's rank key in its group: `sort_key`, or the stratified key the listing gave
    it (multi-label and detection: `prep.core.annotations.stratify`, hex in `InputRef.key`)."""
    return bytes.fromhex(key) if key else sort_key(seed, path)


def listing_order(refs: Sequence[InputRef], seed: int) -> list[InputRef]:
    """The order the listing is staged in: by (split, class, sort key, path).

    Sorted one group at a time, so that sort keys are held for one class, not for every input.
    """
    groups: dict[tuple[str, str], list[InputRef]] = {}
    for r in refs:
        groups.setdefault((r.split or "", r.label), []).append(r)
    ordered = []
    for group in sorted(groups):
        members = groups.pop(group)
        members.sort(key=lambda r: (rank_key(seed, r.path, r.key), r.path))
        ordered += members
    return ordered


def chunk_size(n: int) -> int:
    """Refs per chunk: about `CHUNKS` chunks for small inputs, `MIN_CHUNK` to `MAX_CHUNK` refs each."""
    return max(MIN_CHUNK, min(MAX_CHUNK, math.ceil(n / CHUNKS)))


def make_chunks(refs: Sequence[T], size: int) -> list[list[T]]:
    return [list(refs[start : start + size]) for start in range(0, len(refs), size)]


Group = tuple[str | None, str]  # (split, class) of single-label classification


def group_order(group: Group) -> tuple[str, str]:
    return group[0] or "", group[1]


def buckets_for(count: int) -> int:
    """Buckets a group of `count` inputs is cut into: about `CHUNKS` of `MIN_CHUNK` to `BUCKET` inputs each
    (fine enough to cut a small listing into about `CHUNKS` chunks, as `chunk_size` does)."""
    return max(1, math.ceil(count / max(MIN_CHUNK, min(BUCKET, math.ceil(count / CHUNKS)))))


def bucket_of(key: bytes, buckets: int) -> int:
    """The bucket of rank key `key` among `buckets`: its top 64 bits, scaled (order-preserving)."""
    return (int.from_bytes(key[:8], "big") * buckets) >> 64


class ChunkPlan(typing.NamedTuple):
    """Where each (group, bucket) goes: `chunks[group][bucket]` is its chunk id."""

    chunks: dict[Group, list[int]]
    sizes: list[int]  # inputs per chunk


def plan_chunks(bucket_counts: Iterable[tuple[Group, Sequence[int]]]) -> ChunkPlan:
    """Packs each group's buckets (in group order, then bucket order) into chunks of about `chunk_size`.

    `bucket_counts`: per group, the inputs in each of its `buckets_for(count)` buckets. A chunk starts
    at a bucket that would overflow it, so no chunk is empty and none holds more than `MAX_CHUNK`.

    Raises:
        ValueError: a bucket holds more than `MAX_CHUNK` inputs (with `BUCKET` far below it, only
            for a rank key that is not uniform).
    """
    ordered = sorted(bucket_counts, key=lambda item: group_order(item[0]))
    size = chunk_size(sum(sum(counts) for _, counts in ordered))
    chunks: dict[Group, list[int]] = {}
    sizes: list[int] = []
    for group, counts in ordered:
        ids = chunks[group] = []
        for count in counts:
            if count > MAX_CHUNK:
                raise ValueError(f"a bucket of group {group} holds {count} inputs, more than {MAX_CHUNK}")
            if not sizes or (sizes[-1] and sizes[-1] + count > size):
                sizes.append(0)
            sizes[-1] += count
            ids.append(len(sizes) - 1)
    return ChunkPlan(chunks, sizes)


def classification_chunks(refs: Sequence[InputRef], seed: int) -> list[list[InputRef]]:
    """Single-label classification's chunks (`plan_chunks`) of `refs`, each in `listing_order`."""
    counts: dict[Group, int] = {}
    for r in refs:
        counts[r.split, r.label] = counts.get((r.split, r.label), 0) + 1
    ordered = listing_order(refs, seed)
    per_bucket: dict[Group, list[int]] = {g: [0] * buckets_for(n) for g, n in counts.items()}
    where = []
    for r in ordered:
        buckets = per_bucket[r.split, r.label]
        b = bucket_of(sort_key(seed, r.path), len(buckets))
        buckets[b] += 1
        where.append(b)
    plan = plan_chunks(per_bucket.items())
    chunks: list[list[InputRef]] = [[] for _ in plan.sizes]
    for r, b in zip(ordered, where):
        chunks[plan.chunks[r.split, r.label][b]].append(r)
    return chunks


def listing_chunks(listing: Listing, seed: int) -> list[list[InputRef]]:
    """The listing's inputs in the chunks the pipeline prepares, in `listing_order`."""
    if listing.task == "classification" and all(r.key is None for r in listing.refs):
        return classification_chunks(listing.refs, seed)
    return make_chunks(listing_order(listing.refs, seed), chunk_size(len(listing.refs)))
