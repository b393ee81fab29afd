"""`PrepareChunk`: reading, checking and converting a chunk's images; their records go to spill files.

Each element is a chunk id. The driver staged the chunk's listing in the work
directory (`WorkDir.listing_chunk`), so the pipeline graph holds only chunk ids,
however many inputs there are. A pool of `workers` threads works on the chunk's
images in batches (spill.py); the batches' framed TFRecord bytes go to the chunk's one spill
file (chunk_spill.py), and a small `PreparedRef` (where the record is) per good input goes to the
chunk's index. Only the chunk's counts per (split, class) travel on, to the planner:
the outputs are `ChunkCounts`, `RejectedInputs` and `ReusedChunk`, and for detection `BoxNotes`
(the chunk's dropped and clipped boxes and its box tally). For multi-label, detection and
segmentation (`task`), the groups are the listing's strata (prep/core/task_inputs.py) and each
record is a TaskRecord (task_build.py); a reference then also holds its rank key and `tags`.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import json
import os
import typing

import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue
from threadpoolctl import threadpool_limits

from beam_jobs.pooled import PooledDoFn
from prep.core import storage
from prep.core.content_keys import hash_waiting
from prep.core.image_rules import quiet_pillow
from prep.core.listing import Reject
from prep.core.run import checkpoints
from prep.core.run.checkpoints import StepHook
from prep.core.run.chunk_spill import ChunkSpill, mark_in_flight, unmark_in_flight
from prep.core.run.dedupe_files import item_id, write_chunk_keys
from prep.core.run.key_rows import KEY_ROWS, write_rows
from prep.core.run.sandbox import Sandbox
from prep.core.run.spill import PrepareOptions, prepare_batch
from prep.core.sources import table_held
from prep.core.sources.held import batches_held
from prep.core.task_inputs import BoxNote, BoxTally, total_tally
from prep.core.workdir import BATCH, WorkDir, spill_id

OK, REJECT, BOXES = "ok", "reject", "boxes"  # the kinds of outcome a chunk index records


class GroupCount(typing.NamedTuple):
    """A prepared chunk's good inputs of one (split, class) group."""

    split: str  # "" when the source names no split
    label: int
    refs: int
    bytes: int  # of their framed records
    pin: str = ""  # the split its duplicate or user group is pinned to (prep/core/run/dedupe_files.py), or ""


def plan_group(split: str, label: int, pin: str = "") -> tuple:
    """The planner's group (`prep.core.layout.Group`) of a prepared input: (split or None, label), or
    (None, label, pin) for one pinned to a split by its duplicate or user group."""
    return (None, label, pin) if pin else (split or None, label)


class ChunkCounts(typing.NamedTuple):
    """What the planner needs of a prepared chunk: its good inputs per group, in order of appearance."""

    chunk: int
    counts: tuple[GroupCount, ...]


class RejectedInputs(typing.NamedTuple):
    """A chunk's inputs that cannot become records."""

    rejects: tuple[Reject, ...]


class BoxNotes(typing.NamedTuple):
    """A chunk's detection boxes: the notes of those dropped or clipped, and the tally of all."""

    notes: tuple[BoxNote, ...]
    tally: BoxTally


class ReusedChunk(typing.NamedTuple):
    """A chunk that `--resume` found prepared by the interrupted run."""

    chunk: int


class PreparedRef(typing.NamedTuple):
    """A checked example whose framed record waits in a spill file.

    References are recorded in their chunk's index (an object of their fields by name, the path as
    text: checkpoints.write_chunk_index) and read back by the planner and the dedupe stage
    (`read_prepared`); they never travel between steps as elements.
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
    tags: tuple = ()  # multilabel, detection, segmentation: ((class id, objects of it), ...) for the counts

    @property
    def place(self) -> tuple[int, int]:
        """(spill, offset): where its record waits, which names it in a chunk's placements (`chunk_counts`,
        dedupe_files.write_groups)."""
        return self.spill, self.offset


def read_prepared(work: WorkDir, chunk: int) -> list[PreparedRef]:
    """The PreparedRef of each of a prepared chunk's good inputs, in listing order, from its index.

    The path comes back as bytes (UTF-8, undecodable bytes kept), as Entry.source holds it.
    """
    data = json.loads(storage.read_bytes(work.chunk_index(chunk)))
    checkpoints.check_index_version(data, work.chunk_index(chunk))
    return [_recorded(OK, fields) for kind, fields in data["outcomes"] if kind == OK]


class PrepareChunk(PooledDoFn):
    """chunk id -> `ChunkCounts` of its good inputs and `RejectedInputs` for its bad ones, plus
    `ReusedChunk` when `reuse` finds the chunk complete from an interrupted run. The good
    inputs' references wait in the chunk's index (`read_prepared`).

    The chunk's inputs are cut into batches of `BATCH`; each batch is one task
    on the pool (`prepare_batch`) and appends to the chunk's spill file (`ChunkSpill`), so that
    all per-image work, writing included, runs on the `workers` threads and none
    on the runner's thread. The chunk's inputs are recorded in flight while it is prepared.

    One element per chunk and kind, not one per input: Beam's cost per element
    (coders, several transforms) runs on the runner's thread, outside the pool,
    and would otherwise be a serial cost per image; and the embedded runner
    holds every element between steps in memory. After the spill files are
    complete, the chunk's outcomes are recorded in its index (see
    checkpoints.py), which a resumed run emits instead of reading the images again;
    that too is a pool task (`_finish`, queued after the chunk's batches), as is hashing
    the chunk's small pictures: the runner's thread only reads the chunk's listing,
    submits, and emits what `_finish` returns.
    `on_step("chunk")`, if given, is called before a chunk's images are read (a test hook).

    With `lookahead`, a chunk's outcomes are emitted while the next chunk is
    already on the pool, and the last chunk's from finish_bundle: otherwise
    the workers wait at the end of every chunk while the runner's thread
    handles its outcomes downstream. The DaskRunner drops what finish_bundle
    emits, so only runners known to keep it get `lookahead`.

    Images that `--isolate` sends to a sandbox, and `options.suspects` (inputs a killed
    run was reading, see checkpoints.read_in_flight), are prepared in worker
    processes bounded in memory and time (sandbox.py), one per thread at most,
    started in setup() on first use and killed in teardown().
    """

    def __init__(
        self,
        work: WorkDir,
        labels: tuple[str, ...],
        options: PrepareOptions,
        workers: int | None,
        reuse: bool = False,
        lookahead: bool = False,
        on_step: StepHook | None = None,
    ):
        super().__init__(workers)
        # options.keys: record content keys for the dedupe stage (prep/core/run/dedupe_files.py); with options.task,
        # `labels` are the planner's groups
        self._options = options
        self._work = work
        self._on_step = on_step
        self._label_ids = {name: i for i, name in enumerate(labels)}
        self._reuse = reuse
        self._lookahead = lookahead
        self._pending = None  # the future of a chunk's `_finish`, submitted but not yet emitted
        self._sandbox = None
        self._blas = None
        self._prepared = Metrics.counter("prep", "examples_prepared")
        self._rejected = Metrics.counter("prep", "examples_rejected")

    def setup(self):
        super().setup()
        quiet_pillow()
        self._sandbox = Sandbox(self._workers or os.cpu_count() or 1)
        # The content keys' matrix products (content_keys._low_frequencies) run on this DoFn's threads, a
        # chunk's or a large image's each: BLAS threads of their own would only contend for the same cores
        self._blas = threadpool_limits(limits=1, user_api="blas") if self._options.keys else None

    def teardown(self):
        super().teardown()
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._blas is not None:
            self._blas.restore_original_limits()
            self._blas = None

    def start_bundle(self):
        self._pending = None

    def process(self, chunk: int):
        if self._reuse:
            recorded = checkpoints.read_chunk_index(self._work, chunk)
            if recorded is not None:
                yield ReusedChunk(chunk)
                yield from _by_kind(chunk, [(kind, _recorded(kind, f)) for kind, f in recorded.outcomes])
                return
        if self._on_step is not None:
            self._on_step("chunk")
        submitted = self._submit(chunk)
        if not self._lookahead:
            yield from self._complete(submitted)
            return
        earlier, self._pending = self._pending, submitted
        if earlier is not None:
            yield from self._complete(earlier)

    def finish_bundle(self):
        if self._pending is not None:
            earlier, self._pending = self._pending, None
            for output in self._complete(earlier):
                yield WindowedValue(output, MIN_TIMESTAMP, [GlobalWindow()])

    def _submit(self, chunk: int):
        refs = checkpoints.read_listing(self._work, chunk)
        batches = [refs[i : i + BATCH] for i in range(0, len(refs), BATCH)]
        pause = functools.partial(self._on_step, "batch") if self._on_step is not None else None
        assert self._pool is not None  # made in setup()
        mark_in_flight(self._work, chunk, [ref.path for ref in refs])
        sink = ChunkSpill(self._work, chunk, len(batches))
        held = batches_held(self._work, chunk, refs, BATCH)  # WebDataset members copied by the listing
        if not any(held):  # Parquet rows' images copied by the listing
            held = table_held.batches_held(self._work, chunk, refs, BATCH)
        tasks = [
            self._pool.submit(
                prepare_batch,
                self._options,
                sink,
                spill_id(chunk, b),
                batch,
                self._label_ids,
                self._sandbox,
                pause,
                held[b],
            )
            for b, batch in enumerate(batches)
        ]
        # Queued after the batches (the pool takes tasks in order), so none of them waits behind it
        return self._pool.submit(self._finish, chunk, batches, sink, tasks)

    def _complete(self, finished: concurrent.futures.Future) -> list:
        """Waits for a chunk's `_finish` and returns its outputs. Counted here: Beam's metrics belong to the
        runner's thread."""
        outputs, prepared, rejected = finished.result()
        self._prepared.inc(prepared)
        self._rejected.inc(rejected)
        return outputs

    def _finish(self, chunk: int, batches, sink: ChunkSpill, tasks) -> tuple[list, int, int]:
        """On a pool thread, once the chunk's batch tasks are done: completes its spill file, records its keys
        and index, and returns (its outputs, how many inputs were prepared, how many rejected). Not on the
        runner's thread: there a chunk's hashing, key files and index JSON were serial work that more
        workers could not share (docs/benchmarks.md, "Speed goals (issue 36)")."""
        try:
            done = [task.result() for task in tasks]
            starts, size = sink.close()
        except BaseException:
            sink.abort()
            raise
        unmark_in_flight(self._work, chunk)  # its spill file is complete: no input of it is being read
        outcomes: list[tuple[str, object]] = []  # (kind, Reject, PreparedRef or BoxNotes)
        signatures: list[str] = []
        spills = {spill_id(chunk, 0): size}
        keyed, good = [], 0  # (spill, its first good input's place in the chunk, BatchKeys); good inputs so far
        # detection's box notes and tallies: one outcome of the chunk (as `_by_kind` sums them), not one an input
        notes: list[BoxNote] = []
        tallies: list[BoxTally] = []
        for b, (batch, (results, _, keys)) in enumerate(zip(batches, done)):
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
                            label=self._label_ids[ref.label],
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
        if self._options.keys:  # before the index: a chunk with an index has its keys (key_rows.read_rows)
            self._record_keys(chunk, keyed)
        checkpoints.write_chunk_index(self._work, chunk, outcomes, spills, signatures)
        prepared = sum(kind == OK for kind, _ in outcomes)
        return list(_by_kind(chunk, outcomes)), prepared, sum(kind == REJECT for kind, _ in outcomes)

    def _record_keys(self, chunk: int, keyed) -> None:
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
        write_rows(self._work, chunk, rows, paths)
        write_chunk_keys(self._work, chunk, items, rows["hashes"])


def chunk_counts(refs: typing.Iterable[PreparedRef], placed: dict | None = None) -> tuple[GroupCount, ...]:
    """The PreparedRefs of one chunk -> a `GroupCount` per group, in order of appearance.

    `placed`, if given, says what becomes of a ref in a duplicate or user group (prep/core/run/dedupe_files.py):
    keyed by (spill, offset), None leaves it out, else the split it is pinned to; any other ref gets "".
    """
    counts: dict[tuple, list] = {}
    for r in refs:
        pin = placed.get(r.place, "") if placed else ""
        if pin is None:
            continue
        count = counts.setdefault((r.split, r.label, pin), [0, 0])
        count[0] += 1
        count[1] += r.length
    return tuple(GroupCount(split, label, n, size, pin) for (split, label, pin), (n, size) in counts.items())


def _recorded(kind: str, fields: dict):
    """An outcome as a chunk index records it (an object of its fields by name: checkpoints.write_chunk_index)
    -> as `_complete` made it. A field the index leaves out takes its default (PreparedRef's rank and tags)."""
    if kind == OK:
        return PreparedRef(
            **{
                **fields,
                "path": fields["path"].encode("utf-8", "surrogateescape"),
                "tags": tuple(map(tuple, fields.get("tags", ()))),
            }
        )
    if kind == BOXES:
        tally = fields["tally"]
        return BoxNotes(
            tuple(BoxNote(**n) for n in fields["notes"]),
            BoxTally(**{**tally, "dropped": tuple(map(tuple, tally["dropped"]))}),
        )
    return Reject(**fields)


def _by_kind(chunk: int, outcomes):
    """[(kind, value)] -> `ChunkCounts`, `RejectedInputs` and `BoxNotes`, each only if not empty."""
    good = [value for kind, value in outcomes if kind == OK]
    if good:
        yield ChunkCounts(chunk, chunk_counts(good))
    rejects = tuple(value for kind, value in outcomes if kind == REJECT)
    if rejects:
        yield RejectedInputs(rejects)
    boxes = [value for kind, value in outcomes if kind == BOXES]
    if boxes:
        tally = BoxTally()
        for b in boxes:
            tally = tally.plus(b.tally)
        yield BoxNotes(tuple(n for b in boxes for n in b.notes), tally)
