"""A chunk's preparation after its batches (`finish_chunk`), and a whole chunk's in one thread (`prepare_chunk`).

PrepareChunk (beam_jobs/prepare.py) runs a chunk's batches (spill.py, `prepare_batch`) on its thread
pool and then `finish_chunk`; a worker process (chunk_workers.py) runs `prepare_chunk`, the same steps
in one thread. Either way the chunk's spill file, key rows and index (checkpoints.write_chunk_index)
come out byte for byte the same. No Beam here: the worker processes import this module.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Sequence

import numpy as np

from prep.core.content_keys import hash_waiting
from prep.core.listing import InputRef, Reject
from prep.core.run import checkpoints
from prep.core.run.chunk_spill import ChunkSpill, mark_in_flight, unmark_in_flight
from prep.core.run.dedupe_files import item_id, write_chunk_keys
from prep.core.run.key_rows import KEY_ROWS, write_rows
from prep.core.run.spill import Outcome, PrepareOptions, prepare_batch
from prep.core.sources import table_held
from prep.core.sources.held import Held, batches_held
from prep.core.task_inputs import BoxNote, BoxTally, total_tally
from prep.core.workdir import BATCH, WorkDir, spill_id

if typing.TYPE_CHECKING:
    from prep.core.run.sandbox import Sandbox
    from prep.core.run.spill import BatchKeys

OK, REJECT, BOXES = "ok", "reject", "boxes"  # the kinds of outcome a chunk index records

# prepare_batch's answer: (per input, bytes spilled, keys)
BatchDone = tuple[list[Outcome], int, "BatchKeys | None"]


class BoxNotes(typing.NamedTuple):
    """A chunk's detection boxes: the notes of those dropped or clipped, and the tally of all."""

    notes: tuple[BoxNote, ...]
    tally: BoxTally


class PreparedRef(typing.NamedTuple):
    """A checked example whose framed record waits in a spill file.

    References are recorded in their chunk's index (an object of their fields by name, the path as
    text: checkpoints.write_chunk_index) and read back by the planner and the dedupe stage
    (`beam_jobs.prepare.read_prepared`); they never travel between steps as elements.
    """

    path: bytes  # the input's path in UTF-8, undecodable bytes kept (surrogateescape), as image/filename
    label: int
    split: str  # "" when the source names no split
    spill: int  # the batch that prepared it (see spill_id); its chunk's spill file holds the record
    offset: int  # from the start of that spill file
    length: int  # bytes of the framed record, of which length - image are in the spill file at offset
    converted: bool
    cut: int  # where the image goes into the spilled bytes, when it was left in the source
    image: int  # bytes of the image left in the source (0: the whole record is spilled)
    rank: str = ""  # the rank key in its group, hex, when the listing gave one (ordering.rank_key)
    tags: tuple[
        tuple[int, int], ...
    ] = ()  # multilabel, detection, segmentation: ((class id, objects of it), ...) for the counts

    @property
    def place(self) -> tuple[int, int]:
        """(spill, offset): where its record waits, which names it in a chunk's placements (`chunk_counts`,
        dedupe_files.write_groups)."""
        return self.spill, self.offset


class Started(typing.NamedTuple):
    """A chunk whose preparation began (`start_chunk`): its batches, their held bytes, its spill file."""

    batches: list[list[InputRef]]
    held: list[Held | None]
    sink: ChunkSpill


def start_chunk(work: WorkDir, chunk: int) -> Started:
    """Reads the chunk's staged listing, cuts it into batches and records its inputs in flight."""
    refs = checkpoints.read_listing(work, chunk)
    batches = [refs[i : i + BATCH] for i in range(0, len(refs), BATCH)]
    mark_in_flight(work, chunk, [ref.path for ref in refs])
    sink = ChunkSpill(work, chunk, len(batches))
    held = batches_held(work, chunk, refs, BATCH)  # WebDataset members copied by the listing
    if not any(held):  # Parquet rows' images copied by the listing
        held = table_held.batches_held(work, chunk, refs, BATCH)
    return Started(batches, held, sink)


def prepare_chunk(
    work: WorkDir, chunk: int, options: PrepareOptions, label_ids: dict[str, int], sandbox: Sandbox | None
) -> list[tuple[str, object]]:
    """Prepares chunk `chunk` whole in this thread, its batches in order: what PrepareChunk's pool does
    for it (`start_chunk`, `prepare_batch`, `finish_chunk`); returns its outcomes."""
    started = start_chunk(work, chunk)
    try:
        done = [
            prepare_batch(options, started.sink, spill_id(chunk, b), batch, label_ids, sandbox, None, started.held[b])
            for b, batch in enumerate(started.batches)
        ]
    except BaseException:
        started.sink.abort()
        raise
    return finish_chunk(work, chunk, options, label_ids, started, done)


def finish_chunk(
    work: WorkDir,
    chunk: int,
    options: PrepareOptions,
    label_ids: dict[str, int],
    started: Started,
    done: Sequence[BatchDone],
) -> list[tuple[str, object]]:
    """Once the chunk's batches are `done`: completes its spill file, records its keys and its index, and
    returns its outcomes [(kind, Reject, PreparedRef or BoxNotes)] in listing order."""
    try:
        starts, size = started.sink.close()
    except BaseException:
        started.sink.abort()
        raise
    unmark_in_flight(work, chunk)  # its spill file is complete: no input of it is being read
    outcomes: list[tuple[str, object]] = []
    signatures: list[str] = []
    spills = {spill_id(chunk, 0): size}
    # (spill, its first good input's place in the chunk, BatchKeys); good inputs so far
    keyed: list[tuple[int, int, BatchKeys]] = []
    good = 0
    # detection's box notes and tallies: one outcome of the chunk (as `_by_kind` sums them), not one an input
    notes: list[BoxNote] = []
    tallies: list[BoxTally] = []
    for b, (batch, (results, _, keys)) in enumerate(zip(started.batches, done)):
        spill, start = spill_id(chunk, b), starts[b]
        if keys is not None:
            keyed.append((spill, good, keys._replace(offsets=[start + o for o in keys.offsets])))
        for ref, (result, signature, *more) in zip(batch, results):
            signatures.append(signature)
            info = more[0] if more else None
            if info is not None and (info.notes or info.tally is not None):
                notes += info.notes
                tallies.append(info.tally or BoxTally())
            if isinstance(result, Reject):
                outcomes.append((REJECT, result))
                continue
            offset, length, converted, cut, image = result
            outcomes.append(
                (
                    OK,
                    PreparedRef(
                        path=ref.path.encode("utf-8", "surrogateescape"),
                        label=label_ids[ref.label],
                        split=ref.split or "",
                        spill=spill,
                        offset=start + offset,
                        length=length,
                        converted=converted,
                        cut=cut,
                        image=image,
                        rank=ref.key or "",
                        tags=info.tags if info is not None else (),
                    ),
                )
            )
            good += 1
    if tallies:
        outcomes.append((BOXES, BoxNotes(tuple(notes), total_tally(tallies))))
    if options.keys:  # before the index: a chunk with an index has its keys (key_rows.read_rows)
        _record_keys(work, chunk, keyed)
    checkpoints.write_chunk_index(work, chunk, outcomes, spills, signatures)
    return outcomes


def _record_keys(work: WorkDir, chunk: int, keyed: list[tuple[int, int, BatchKeys]]) -> None:
    """Hashes the chunk's waiting images (content_keys.hash_waiting), then records the keys of its good
    inputs in one file (key_rows.write_rows), and their item ids and hashes in the scan's key file
    (dedupe_files.write_chunk_keys)."""
    hash_waiting([(keys.hashes, keys.waiting) for _, _, keys in keyed])
    has = np.concatenate([keys.has for _, _, keys in keyed] or [np.zeros(0, bool)])
    items = np.concatenate(
        [item_id(chunk, first) + np.arange(len(keys.has)) for _, first, keys in keyed] or [np.zeros(0, np.int64)]
    )
    rows = np.zeros(len(has), KEY_ROWS)
    rows["spill"] = np.repeat([spill for spill, _, _ in keyed], [len(keys.has) for _, _, keys in keyed])
    rows["offset"] = [offset for _, _, keys in keyed for offset in keys.offsets]
    rows["sha256"] = np.frombuffer(b"".join(keys.sha256 for _, _, keys in keyed), np.uint8).reshape(-1, 32)
    rows["hashes"] = np.concatenate([keys.hashes for _, _, keys in keyed]) if keyed else 0
    paths = [path for _, _, keys in keyed for path in keys.paths]
    if not has.all():  # an input whose image did not decode again (not expected) is in no duplicate group
        rows, items, paths = rows[has], items[has], list(itertools.compress(paths, has))
    write_rows(work, chunk, rows, paths)
    write_chunk_keys(work, chunk, items, rows["hashes"])
