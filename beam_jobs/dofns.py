"""The pipeline's DoFns and step functions. Each is picklable and holds no hidden global state."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import time
import typing

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_jobs import storage
from prep import manifest as manifest_lib
from prep.images import ImageOptions, ImageRejected, prepare_image
from prep.naming import ShardName
from prep.plan import Example, PlanOptions, make_plan
from prep.schema import ImageRecord
from prep.sources import InputRef, Reject
from prep.tfrecord import frame

REJECTS_TAG = "rejects"
SUMMARY_TAG = "summary"


class PreparedRef(typing.NamedTuple):
    """A checked example whose serialized record waits in a spill file.

    A NamedTuple, not a dataclass: Beam's coder encodes it field by field,
    many times faster than pickling a dataclass, which matters at millions of refs.
    """

    path: str
    label: int
    split: str | None
    chunk: int
    offset: int
    length: int
    converted: bool


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One shard to write: its name and, in write order, (chunk, offset, length, label) of each record."""

    name: ShardName
    entries: tuple[tuple[int, int, int, int], ...]


def spill_path(tmp_dir: str, chunk: int) -> str:
    return storage.join(tmp_dir, "spill", f"chunk-{chunk:06d}.bin")


def _read_and_prepare(source: str, ref: InputRef, label: int, options: ImageOptions):
    """Reads one input and returns its serialized record, or a Reject. Runs in a thread."""
    try:
        data = storage.read_bytes(storage.join(source, ref.path))
    except FileNotFoundError:
        return Reject(ref.path, "missing", "file does not exist")
    except IsADirectoryError:
        return Reject(ref.path, "unreadable", "path is a folder")
    except OSError as exc:
        reason = "symlink_loop" if exc.errno == 40 else "unreadable"
        return Reject(ref.path, reason, exc.strerror or str(exc))
    try:
        image = prepare_image(data, options)
    except ImageRejected as exc:
        return Reject(ref.path, exc.reason, exc.detail)
    record = ImageRecord.build(image.encoded, image.format, image.height, image.width, image.channels,
                               label, ref.label, ref.path)
    return record.to_bytes(), image.converted


class _Concurrent(beam.DoFn):
    """A DoFn whose work runs on a pool of `workers` threads, several elements at once.

    `process` submits the element and emits the results of the oldest
    finished work once more than 2 x workers are in flight; `finish_bundle`
    emits the rest. The local runner hands a whole stage to one bundle, so
    this is what spreads the work over the cores; on a cluster each worker
    does the same with its own bundles. Outputs are computed by pure
    functions of their inputs, so their bytes never depend on scheduling.
    """

    def __init__(self, workers: int):
        self._workers = workers
        self._pool = None
        self._pending = collections.deque()

    def setup(self):
        self._pool = concurrent.futures.ThreadPoolExecutor(self._workers, thread_name_prefix=type(self).__name__)

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def start_bundle(self):
        self._pending = collections.deque()

    def work(self, element) -> list:
        """Runs in a pool thread; returns the outputs for `element`."""
        raise NotImplementedError

    def process(self, element):
        self._pending.append(self._pool.submit(self.work, element))
        while len(self._pending) > 2 * self._workers:
            yield from self._pending.popleft().result()

    def finish_bundle(self):
        while self._pending:
            for output in self._pending.popleft().result():
                if isinstance(output, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(output.tag, _windowed(output.value))
                else:
                    yield _windowed(output)


def _windowed(value):
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.windowed_value import WindowedValue
    from apache_beam.utils.timestamp import MIN_TIMESTAMP

    return WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()])


class PrepareChunk(_Concurrent):
    """(chunk id, [InputRef]) -> PreparedRef per good input, and Reject (tagged) per bad one.

    Reads, checks and converts a chunk's images and writes their records, in
    input order, to the chunk's spill file. Chunks run `workers` at a time;
    Pillow releases the GIL while decoding, resizing and encoding.
    """

    def __init__(self, source: str, tmp_dir: str, labels: tuple[str, ...], options: ImageOptions, workers: int):
        super().__init__(workers)
        self._source = source
        self._tmp_dir = tmp_dir
        self._label_ids = {name: i for i, name in enumerate(labels)}
        self._options = options
        self._prepared = Metrics.counter("prep", "examples_prepared")
        self._rejected = Metrics.counter("prep", "examples_rejected")

    def work(self, element) -> list:
        chunk, refs = element
        path = spill_path(self._tmp_dir, chunk)
        outputs, offset = [], 0
        with storage.open_write(path + ".part") as f:
            for ref in refs:
                label = self._label_ids[ref.label]
                result = _read_and_prepare(self._source, ref, label, self._options)
                if isinstance(result, Reject):
                    outputs.append(beam.pvalue.TaggedOutput(REJECTS_TAG, result))
                    continue
                data, converted = result
                f.write(data)
                outputs.append(PreparedRef(ref.path, label, ref.split, chunk, offset, len(data), converted))
                offset += len(data)
        storage.rename(path + ".part", path)
        rejected = sum(isinstance(o, beam.pvalue.TaggedOutput) for o in outputs)
        self._rejected.inc(rejected)
        self._prepared.inc(len(outputs) - rejected)
        return outputs


def plan_shards(prepared: list[PreparedRef], labels: tuple[str, ...], options: PlanOptions, tmp_dir: str):
    """[PreparedRef] -> ShardTask per shard, and one summary dict (tagged)."""
    prepared = sorted(prepared, key=lambda p: p.path)
    examples = [Example(p.path, p.label, p.split, p.length) for p in prepared]
    if not examples:
        from prep.errors import PlanError

        raise PlanError("no input could be converted; see the rejects for why")
    plan = make_plan(examples, len(labels), options)
    storage.write_atomic(storage.join(tmp_dir, "plan.json"), json.dumps({"shards": len(plan.shards)}).encode())
    for shard in plan.shards:
        entries = tuple((prepared[m].chunk, prepared[m].offset, prepared[m].length, prepared[m].label)
                        for m in shard.members)
        yield ShardTask(shard.name, entries)
    capped_by_class = collections.Counter(labels[prepared[i].label] for i in plan.capped)
    yield beam.pvalue.TaggedOutput(SUMMARY_TAG, {
        "capped": len(plan.capped),
        "capped_by_class": {name: capped_by_class.get(name, 0) for name in labels},
        "converted": sum(p.converted for p in prepared),
    })


class WriteShard(_Concurrent):
    """ShardTask -> shard result dict, after writing OUTPUT/<shard file> atomically.

    Reads each record from its spill file and frames it; image bytes never pass
    through a shuffle.
    """

    def __init__(self, output: str, tmp_dir: str, labels: tuple[str, ...], workers: int):
        super().__init__(workers)
        self._output = output
        self._tmp_dir = tmp_dir
        self._labels = labels
        self._written = Metrics.counter("prep", "examples_written")
        self._bytes = Metrics.counter("prep", "bytes_written")

    def work(self, task: ShardTask) -> list:
        final = storage.join(self._output, task.name.filename)
        tmp = storage.join(self._tmp_dir, "shards", task.name.filename + ".part")
        digest, size = hashlib.sha256(), 0
        counts = collections.Counter()
        handles = collections.OrderedDict()
        try:
            with storage.open_write(tmp) as out:
                for chunk, offset, length, label in task.entries:
                    handle = handles.pop(chunk, None) or storage.open_read(spill_path(self._tmp_dir, chunk))
                    handles[chunk] = handle
                    if len(handles) > 16:
                        handles.popitem(last=False)[1].close()
                    handle.seek(offset)
                    data = handle.read(length)
                    if len(data) != length:
                        raise OSError(f"spill file for chunk {chunk} is short: {task.name.filename} cannot be written")
                    record = frame(data)
                    out.write(record)
                    digest.update(record)
                    size += len(record)
                    counts[self._labels[label]] += 1
        finally:
            for handle in handles.values():
                handle.close()
        storage.rename(tmp, final)
        self._written.inc(len(task.entries))
        self._bytes.inc(size)
        return [manifest_lib.shard_result(task.name, len(task.entries), size, digest.hexdigest(),
                                          {name: counts.get(name, 0) for name in self._labels})]


def finish(shard_results, rejects, summary, *, output, tmp_dir, labels, options, found, tool, run):
    """Writes rejects.jsonl, removes the temporary folder, then writes manifest.json last."""
    rejects = sorted(rejects, key=lambda r: (r.path, r.reason))
    written = sum(r["examples"] for r in shard_results)
    by_reason = collections.Counter(r.reason for r in rejects)
    accounting = {
        "found": found, "written": written, "rejected": len(rejects), "capped": summary["capped"],
        "converted": summary["converted"], "rejected_by_reason": dict(sorted(by_reason.items())),
        "capped_by_class": summary["capped_by_class"],
    }
    if found != written + len(rejects) + summary["capped"]:
        raise RuntimeError(f"internal error: counts do not reconcile: {accounting}")
    lines = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in rejects)
    storage.write_atomic(storage.join(output, manifest_lib.REJECTS), lines.encode())
    run = dict(run, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               seconds=round(time.time() - run["started"], 3))
    manifest = manifest_lib.build(labels, options, shard_results, accounting, tool, run)
    # Write under a temporary name first, drop the temporary folder, then publish.
    staged = storage.join(output, manifest_lib.FILENAME + ".part")
    with storage.open_write(staged) as f:
        f.write(manifest_lib.dumps(manifest))
    storage.delete(tmp_dir)
    storage.rename(staged, storage.join(output, manifest_lib.FILENAME))
    yield written
