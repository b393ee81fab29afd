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
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import TypeVar

from prep.core.listing import InputRef, Listing

T = TypeVar("T")

# Chunks per listing, about, for small inputs; a chunk holds at most MAX_CHUNK inputs, since
# each chunk ends with a barrier (its index is written once all its images are done).
CHUNKS = 32
MIN_CHUNK = 16
MAX_CHUNK = 1024


def sort_key(seed: int, path: str | bytes, purpose: str = "rank") -> bytes:
    """The seeded hash that orders examples; `purpose` separates independent orders.

    `path` as text, or already encoded as UTF-8 with surrogateescape.
    """
    raw = path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")
    return hashlib.sha256(f"{seed}\0{purpose}\0".encode() + raw).digest()


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


def listing_chunks(listing: Listing, seed: int) -> list[list[InputRef]]:
    """The listing's inputs in the chunks the pipeline prepares, in `listing_order`."""
    return make_chunks(listing_order(listing.refs, seed), chunk_size(len(listing.refs)))
