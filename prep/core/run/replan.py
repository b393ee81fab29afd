"""`--resume` with other planning options: plan the prepared images anew instead of reading them again.

The planning options (`prep.core.run_record.PLANNING_OPTIONS`) act after every image is
prepared: `layout_tasks` and `rank_task` (plan.py) read only the chunk
indexes. So a resumed run that changes them needs only a new run record; the
entries are planned again by every run, and a shard the old plan completed
is reused only if its sidecar's digest of planned entries is the new plan's
(checkpoints.py), while shards the new plan does not name are deleted before
the manifest (`output_dir.delete_unplanned_shards`).

The seed is the exception: the listing is staged in the seed's order
(`prep.core.ordering.listing_order`), which the planner relies on. With another seed the
staged chunks are written again in the new order, each chunk's index made of
the recorded outcomes of its inputs: references to spill files stay as they
are (a chunk's inputs may now have been prepared in other chunks' spill
files), and no image is read. That needs every chunk of the interrupted run
prepared: otherwise the new seed is refused. Groups (split, class) come in the
same order under any seed, so only about one group's outcomes are held at once.

Crash safety: run.json is deleted first and written last, so a kill in
between leaves a work directory that `--resume` starts over from (no run.json:
resume.FRESH), never chunks of two orders under one record. The new record
says `restaged`: resume.py then refuses to prepare any chunk again, since
preparing writes the chunk's own spill files, which other chunks may now use.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prep.core import storage, targets
from prep.core.errors import ResumeError
from prep.core.listing import InputRef
from prep.core.run import checkpoints, dedupe_files
from prep.core.workdir import WorkDir


def all_prepared(work: WorkDir, num_chunks: int) -> bool:
    """Whether every chunk has a complete index (and all its spill files)."""
    return all(checkpoints.read_chunk_index(work, chunk) is not None for chunk in range(num_chunks))


def replan(
    work: WorkDir,
    old: dict[str, Any],
    record: dict[str, Any],
    staged: Sequence[list[InputRef]],
    chunks: Sequence[list[InputRef]],
) -> None:
    """Makes the work directory plan as `record` says: `staged` are the interrupted run's chunks,
    `chunks` this run's.

    Raises:
        ResumeError: the seed changed but not every image was prepared yet.
    """

    then, now = old["options"]["seed"], record["options"]["seed"]
    if then == now:
        checkpoints.write_run(work, dict(record, restaged=bool(old.get("restaged"))))
        return
    target = record["options"].get("target", targets.NONE)
    if targets.get(target).source_id:
        # Prepared records carry an image/source_id from their place in the old seed's order; the
        # new seed's fresh conversion would number them otherwise, and its bytes must be the same.
        raise ResumeError(
            f"cannot resume with --seed {now}: with --target {target} every prepared record "
            f"holds an image/source_id from the order of --seed {then}; resume with --seed {then}, "
            "or run with --overwrite instead to start over"
        )
    if not all_prepared(work, len(staged)):
        raise ResumeError(
            f"cannot resume with --seed {now}: the interrupted run (--seed {then}) had not read "
            "every image yet, and the order of another seed needs them all; resume with "
            f"--seed {then}, or run with --overwrite instead to start over"
        )
    storage.delete(work.run_record)
    dedupe_files.forget_chunk_keys(work)  # their item ids name the chunks of the old order
    restage(work, staged, chunks)
    checkpoints.write_run(work, dict(record, restaged=True))


def restage(work: WorkDir, staged: Sequence[list[InputRef]], chunks: Sequence[list[InputRef]]) -> None:
    """Writes `chunks` (the same inputs as `staged`, in another order) as the staged listing, each
    with an index of its inputs' outcomes taken from the indexes of `staged`."""
    # input -> [(outcome as an index holds it, signature, {spill: bytes})], read but not placed yet
    waiting: dict[tuple[object, ...], list[tuple[Any, str, dict[int, int]]]] = {}
    read = 0

    def read_next() -> None:
        nonlocal read
        data = json.loads(storage.read_bytes(work.chunk_index(read)))
        spills = dict(data["spills"])
        for ref, outcome, signature in zip(staged[read], data["outcomes"], data["inputs"]):
            waiting.setdefault(tuple(ref), []).append((outcome, signature, spills))
        read += 1

    for chunk, refs in enumerate(chunks):
        # Chunk `chunk`'s own files are about to be replaced: read them first.
        while read <= chunk or any(tuple(r) not in waiting for r in refs):
            read_next()
        outcomes: list[Any] = []
        signatures: list[str] = []
        spills: dict[int, int] = {}
        for ref in refs:
            found = waiting[tuple(ref)]
            outcome, signature, chunk_spills = found.pop(0)
            if not found:
                del waiting[tuple(ref)]
            outcomes.append(outcome)
            signatures.append(signature)
            spills.update(chunk_spills)
        checkpoints.write_listing(work, chunk, refs)
        checkpoints.write_chunk_index(work, chunk, outcomes, spills, signatures)
    if waiting:
        raise RuntimeError(f"internal error: {len(waiting)} prepared inputs were not staged again")
    stale = len(chunks)  # the old order's chunks past the new one's count: a later resume counts chunk files
    while storage.exists(work.listing_chunk(stale)):
        storage.delete_file(work.listing_chunk(stale))
        stale += 1
