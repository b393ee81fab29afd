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

import collections
import concurrent.futures
import functools
import json
import os
import typing

from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue
from threadpoolctl import threadpool_limits

from beam_jobs.pooled import PooledDoFn
from prep.core import storage
from prep.core.image_rules import quiet_pillow
from prep.core.listing import Reject
from prep.core.run import checkpoints
from prep.core.run.checkpoints import StepHook
from prep.core.run.chunk_prepare import BOXES, OK, REJECT, BoxNotes, PreparedRef, Started, finish_chunk, start_chunk
from prep.core.run.chunk_workers import ChunkPool
from prep.core.run.sandbox import Sandbox
from prep.core.run.spill import PrepareOptions, prepare_batch
from prep.core.task_inputs import BoxNote, BoxTally
from prep.core.workdir import WorkDir, spill_id

__all__ = ["BOXES", "OK", "REJECT", "BoxNotes", "PreparedRef"]  # kept here for the steps that read chunks


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


class ReusedChunk(typing.NamedTuple):
    """A chunk that `--resume` found prepared by the interrupted run."""

    chunk: int


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

    With `processes` (the embedded runner, a local OUTPUT and SOURCE, no test hook), whole chunks go to
    `workers` worker processes (prep/core/run/chunk_workers.py), each preparing its chunk as below in one
    thread, `workers` chunks at a time and one more queued: the Python parts of each image's work hold the
    GIL, which threads share (docs/design.md, "Processes for the prepare stage"). The chunk's outputs are
    then read back from its index, as a resumed run's are, and emitted in the order the chunks came.

    Otherwise the chunk's inputs are cut into batches of `BATCH`; each batch is one task
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
    emits, so only runners known to keep it get `lookahead` (and `processes`).

    Images that `--isolate` sends to a sandbox, and `options.suspects` (inputs a killed
    run was reading, see checkpoints.read_in_flight), are prepared in worker
    processes bounded in memory and time (sandbox.py), one per thread (or worker process) at most,
    started on first use and killed in teardown().
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
        processes: bool = False,
    ):
        super().__init__(workers)
        # options.keys: record content keys for the dedupe stage (prep/core/run/dedupe_files.py); with options.task,
        # `labels` are the planner's groups
        self._options = options
        self._work = work
        self._on_step = on_step
        self._labels = labels
        self._label_ids = {name: i for i, name in enumerate(labels)}
        self._reuse = reuse
        self._lookahead = lookahead
        self._processes = processes and on_step is None
        # (chunk, the future of its `_finish`), submitted but not yet emitted
        self._pending: tuple[int, concurrent.futures.Future] | None = None
        self._chunks: ChunkPool | None = None
        self._sent: collections.deque[int] = collections.deque()  # chunks on `_chunks`, not yet emitted
        self._sandbox = None
        self._blas = None
        self._prepared = Metrics.counter("prep", "examples_prepared")
        self._rejected = Metrics.counter("prep", "examples_rejected")

    def setup(self):
        quiet_pillow()
        if self._processes:  # started now: their imports overlap the rest of the pipeline's start
            self._chunks = ChunkPool(self._workers or os.cpu_count() or 1, self._work, self._options, self._labels)
            return
        super().setup()
        self._sandbox = Sandbox(self._workers or os.cpu_count() or 1)
        # The content keys' matrix products (content_keys._low_frequencies) run on this DoFn's threads, a
        # chunk's or a large image's each: BLAS threads of their own would only contend for the same cores
        self._blas = threadpool_limits(limits=1, user_api="blas") if self._options.keys else None

    def teardown(self):
        super().teardown()
        if self._chunks is not None:
            self._chunks.close()
            self._chunks = None
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._blas is not None:
            self._blas.restore_original_limits()
            self._blas = None

    def start_bundle(self):
        self._pending = None
        self._sent.clear()

    def process(self, chunk: int):
        if self._reuse:
            recorded = checkpoints.read_chunk_index(self._work, chunk)
            if recorded is not None:
                yield ReusedChunk(chunk)
                yield from _by_kind(chunk, [(kind, _recorded(kind, f)) for kind, f in recorded.outcomes])
                return
        if self._chunks is not None:
            self._chunks.submit(chunk)
            self._sent.append(chunk)
            while len(self._sent) > self._chunks.size:  # one queued beyond a chunk a worker
                yield from self._read_back(self._sent.popleft())
            return
        if self._on_step is not None:
            self._on_step("chunk")
        submitted = (chunk, self._submit(chunk))
        if not self._lookahead:
            yield from self._complete(*submitted)
            return
        earlier, self._pending = self._pending, submitted
        if earlier is not None:
            yield from self._complete(*earlier)

    def finish_bundle(self):
        outputs = []
        while self._sent:
            outputs += self._read_back(self._sent.popleft())
        if self._pending is not None:
            earlier, self._pending = self._pending, None
            outputs += self._complete(*earlier)
        for output in outputs:
            yield WindowedValue(output, MIN_TIMESTAMP, [GlobalWindow()])

    def _read_back(self, chunk: int) -> list:
        """Waits for a chunk sent to a worker process; its outputs, from the index the worker wrote."""
        assert self._chunks is not None  # made in setup()
        self._chunks.wait(chunk)
        recorded = checkpoints.read_chunk_index(self._work, chunk)
        if recorded is None:
            raise RuntimeError(f"internal error: chunk {chunk} was prepared but its index is incomplete")
        return self._count(chunk, [(kind, _recorded(kind, f)) for kind, f in recorded.outcomes])

    def _submit(self, chunk: int):
        pause = functools.partial(self._on_step, "batch") if self._on_step is not None else None
        assert self._pool is not None  # made in setup()
        started = start_chunk(self._work, chunk)
        tasks = [
            self._pool.submit(
                prepare_batch,
                self._options,
                started.sink,
                spill_id(chunk, b),
                batch,
                self._label_ids,
                self._sandbox,
                pause,
                started.held[b],
            )
            for b, batch in enumerate(started.batches)
        ]
        # Queued after the batches (the pool takes tasks in order), so none of them waits behind it
        return self._pool.submit(self._finish, chunk, started, tasks)

    def _complete(self, chunk: int, finished: concurrent.futures.Future) -> list:
        """Waits for a chunk's `_finish` and returns its outputs."""
        return self._count(chunk, finished.result())

    def _count(self, chunk: int, outcomes: list) -> list:
        """A chunk's outputs from its outcomes, which are counted here: Beam's metrics belong to the runner's
        thread."""
        self._prepared.inc(sum(kind == OK for kind, _ in outcomes))
        self._rejected.inc(sum(kind == REJECT for kind, _ in outcomes))
        return list(_by_kind(chunk, outcomes))

    def _finish(self, chunk: int, started: Started, tasks) -> list:
        """On a pool thread, once the chunk's batch tasks are done: completes its spill file, records its keys
        and index (`finish_chunk`), and returns its outcomes. Not on the runner's thread: there a chunk's
        hashing, key files and index JSON were serial work that more workers could not share
        (docs/benchmarks.md, "Speed goals (issue 36)")."""
        try:
            done = [task.result() for task in tasks]
        except BaseException:
            started.sink.abort()
            raise
        return finish_chunk(self._work, chunk, self._options, self._label_ids, started, done)


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
