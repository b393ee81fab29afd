"""`prep leakage A B`: the images two converted datasets share, exact and near copies (docs/leakage.md).

The content keys of each dataset come from its sidecar `content_keys.jsonl`
(`prep.core.keys_sidecar`) for every shard whose manifest digest still matches,
and are computed from the shards otherwise: records are read in order and their
images hashed in batches on a pool of processes, at most `PENDING` batches at a
time so memory stays flat. Processes, not threads: Pillow releases the GIL while
it decodes and resizes, but a profile puts that at 46% of the time per image
(record parsing and the hashes' numpy calls hold it), which caps threads below
2x however many cores there are. Below `POOL_FROM` records, or with one worker,
images are hashed in this process: starting workers would cost more. The
sidecar is then rewritten atomically; a folder that cannot be written only
costs the next run the same work (a warning, not an error).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable
from typing import TypeVar

from threadpoolctl import threadpool_limits

from prep.core import content_keys as ck
from prep.core import formats, keys_sidecar, storage
from prep.core.errors import RecordError
from prep.core.formats import ShardFormat
from prep.core.image_rules import DEFAULT_MAX_PIXELS, bomb_limit
from prep.core.keys_sidecar import RecordKeys
from prep.core.leak_pairs import EXACT, NEAR, LeakPairs, leak_pairs, self_pairs
from prep.core.manifest import Manifest
from prep.core.schema import ImageRecord

JSON_VERSION = 1
BATCH = 32  # records per task sent to a worker process
PENDING = 4  # batches in flight per worker: bounds the encoded bytes held in memory
POOL_FROM = 512  # records to hash from which worker processes pay for their start (~0.3 s each)
_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class DatasetKeys:
    """The keys of one dataset's records, and where they came from."""

    output: str
    records: tuple[RecordKeys, ...]
    cached: int  # records whose keys came from the sidecar
    computed: int  # records whose images were decoded and hashed now
    seconds: float
    warning: str | None = None  # the sidecar could not be written

    @property
    def unreadable(self) -> list[RecordKeys]:
        return [r for r in self.records if r.hashes is None]


def _hash_record(data: bytes, split: str, shard: str, digest: str, index: int) -> RecordKeys:
    """The keys of one serialized record.

    Raises:
        RecordError: the record does not parse as our schema.
    """
    record = ImageRecord.from_bytes(data)
    try:
        keys = ck.image_keys(record.encoded)
    except Exception as exc:  # Pillow raises many types on damaged data; the record stays, exact-only
        return RecordKeys(
            split, shard, digest, index, record.filename, record.sha256, None, f"{type(exc).__name__}: {exc}"
        )
    return RecordKeys(split, shard, digest, index, record.filename, keys.sha256, keys.hashes)


Progress = Callable[[int, int], None]  # (records just hashed, records to hash in this dataset)


def _hash_batch(
    batch: list[tuple[int, bytes]], path: str, split: str, shard: str, digest: str, max_pixels: int
) -> list[RecordKeys]:
    """The keys of a batch of (record index, serialized record) of one shard (run in a worker process).

    Pillow's bomb check is set to the dataset's --max-pixels, as `verify --deep` does: every
    image the conversion accepted decodes, whatever limit the calling process had set.

    Raises:
        RecordError: naming the shard and the record that does not parse.
    """
    bomb_limit(max_pixels)
    out = []
    for index, data in batch:
        try:
            out.append(_hash_record(data, split, shard, digest, index))
        except RecordError as exc:
            raise RecordError(f"{path}: record {index}: {exc}") from None
    return out


class _InProcess:
    """An executor that runs each task at once, in this process: for small jobs and one worker."""

    def submit(self, fn: Callable[..., _T], *args: object) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def _executor(workers: int, records: int):
    if workers < 2 or records < POOL_FROM:
        return _InProcess()
    # spawn: a forked child would inherit the locks of threads the caller runs (Beam's, in a test process)
    return concurrent.futures.ProcessPoolExecutor(
        min(workers, -(-records // BATCH)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_one_blas_thread,
    )


def _one_blas_thread() -> None:
    """A hashing process's BLAS uses one thread: the pool already has a process per core, and the
    hashes' matrix products are small (threads of their own would only contend)."""
    threadpool_limits(limits=1, user_api="blas")


def _shard_keys(
    path: str, split: str, shard: str, digest: str, pool, workers: int, max_pixels: int, shard_format: ShardFormat
) -> list[RecordKeys]:
    """Reads one shard and hashes its images on `pool` in batches, in record order.

    Raises:
        RecordError: a damaged record (framing, CRC, schema), naming the shard and record.
        OSError: the shard cannot be read.
    """
    out: list[RecordKeys] = []
    pending: collections.deque[concurrent.futures.Future[list[RecordKeys]]] = collections.deque()
    batch: list[tuple[int, bytes]] = []
    for index, data in enumerate(shard_format.records(path, path)):
        batch.append((index, data))
        if len(batch) == BATCH:
            pending.append(pool.submit(_hash_batch, batch, path, split, shard, digest, max_pixels))
            batch = []
            if len(pending) >= PENDING * workers:
                out.extend(pending.popleft().result())
    if batch:
        pending.append(pool.submit(_hash_batch, batch, path, split, shard, digest, max_pixels))
    while pending:
        out.extend(pending.popleft().result())
    return out


def dataset_keys(output: str, workers: int | None = None, progress: Progress | None = None) -> DatasetKeys:
    """The content keys of every record in the dataset at `output`, from its sidecar where still valid.

    `progress`, if given, is called after each shard hashed.

    Raises:
        ManifestError: the manifest is missing or bad.
        RecordError: a shard holds a damaged record.
        OSError: a shard cannot be read.
    """
    started = time.perf_counter()
    manifest = Manifest.load(output)
    shards = [(split.name, shard.file, shard.sha256, shard.examples) for split, shard in manifest.shards()]
    max_pixels = manifest.options.get("max_pixels") or DEFAULT_MAX_PIXELS
    shard_format = formats.get(manifest.file_format)
    sidecar = storage.join(output, keys_sidecar.FILENAME)
    cached = None
    if storage.exists(sidecar):  # asked first: an object store's reader may not raise FileNotFoundError
        cached = keys_sidecar.loads(storage.read_bytes(sidecar), {file: digest for _, file, digest, _ in shards})

    def usable(split: str, file: str, examples: int) -> list[RecordKeys] | None:
        found = (cached or {}).get(file)
        return found if found is not None and len(found) == examples and all(r.split == split for r in found) else None

    to_hash = sum(examples for split, file, _, examples in shards if usable(split, file, examples) is None)
    records, reused, computed = [], 0, 0
    workers = workers or os.cpu_count() or 1
    with _executor(workers, to_hash) as pool:
        for split, file, digest, examples in shards:
            found = usable(split, file, examples)
            if found is not None:
                records.extend(found)
                reused += len(found)
                continue
            fresh = _shard_keys(
                storage.join(output, file), split, file, digest, pool, workers, max_pixels, shard_format
            )
            records.extend(fresh)
            computed += len(fresh)
            if progress is not None:
                progress(len(fresh), to_hash)
    warning = None
    if computed or cached is None:
        try:
            storage.write_atomic(sidecar, keys_sidecar.dumps(records))
        except Exception as exc:  # noqa: BLE001 - a read-only folder or bucket; each store raises its own types
            reason = getattr(exc, "strerror", None) or exc
            warning = f"could not write {sidecar} ({reason}): the next run will hash the images again"
    return DatasetKeys(output, tuple(records), reused, computed, time.perf_counter() - started, warning)


@dataclasses.dataclass(frozen=True)
class LeakageReport:
    a: DatasetKeys
    b: DatasetKeys
    found: LeakPairs
    seconds: float

    def to_json(self) -> dict:
        """The `--json` document (docs/leakage.md)."""

        def side(d: DatasetKeys) -> dict:
            return {
                "output": d.output,
                "records": len(d.records),
                "keys_cached": d.cached,
                "keys_computed": d.computed,
                "unreadable": [{"file": r.filename, "split": r.split, "error": r.error} for r in d.unreadable],
            }

        return {
            "version": JSON_VERSION,
            "a": side(self.a),
            "b": side(self.b),
            "near_distance": ck.NEAR_DISTANCE,
            "skipped_comparisons": self.found.skipped,
            "pairs": [p.to_json() for p in self.found.pairs],
            "seconds": round(self.seconds, 3),
        }


def compare(
    a: str, b: str, workers: int | None = None, progress: Callable[[str], Progress | None] | None = None
) -> LeakageReport:
    """Every exact and near duplicate pair between the datasets at `a` and `b` (see `dataset_keys`).

    `progress`, if given, makes the progress callback of each dataset from its name ("A" or "B").
    When `a` and `b` are one folder, every pair of two different records of it is listed, each
    once (duplicates across its splits, and inside them).
    """
    started = time.perf_counter()
    keys_a = dataset_keys(a, workers, progress("A") if progress else None)
    if _same_dataset(a, b):
        return LeakageReport(keys_a, keys_a, self_pairs(list(keys_a.records)), time.perf_counter() - started)
    keys_b = dataset_keys(b, workers, progress("B") if progress else None)
    found = leak_pairs(list(keys_a.records), list(keys_b.records))
    return LeakageReport(keys_a, keys_b, found, time.perf_counter() - started)


def _same_dataset(a: str, b: str) -> bool:
    if storage.is_remote(a) or storage.is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.samefile(a, b)


def _keys_line(name: str, d: DatasetKeys) -> str:
    where = (
        "from its content_keys.jsonl"
        if not d.computed
        else f"{d.computed} hashed now" + (f", {d.cached} from its content_keys.jsonl" if d.cached else "")
    )
    return f"{name}: {d.output}: {len(d.records)} records ({where})"


def render_text(report: LeakageReport) -> str:
    """The readable table: one line per pair, then a summary."""
    lines = [_keys_line("A", report.a), _keys_line("B", report.b)]
    pairs = report.found.pairs
    if pairs:
        width_a = max(len("A"), *(len(p.a) for p in pairs))
        width_sa = max(len("split"), *(len(p.split_a) for p in pairs))
        width_sb = max(len("split"), *(len(p.split_b) for p in pairs))
        lines.append("")
        lines.append(f"{'kind':5}  {'bits':>4}  {'split':{width_sa}}  {'A':{width_a}}  {'split':{width_sb}}  B")
        for p in pairs:
            lines.append(
                f"{p.kind:5}  {p.distance:>4}  {p.split_a:{width_sa}}  {p.a:{width_a}}  {p.split_b:{width_sb}}  {p.b}"
            )
        lines.append("")
        kinds = collections.Counter(p.kind for p in pairs)
        by_splits = collections.Counter((p.split_a, p.split_b) for p in pairs)
        lines.append(
            f"{len(pairs)} pair{'s' if len(pairs) != 1 else ''} across A and B: {kinds[EXACT]} exact, "
            f"{kinds[NEAR]} near (at most {ck.NEAR_DISTANCE} of 64 bits apart); by splits: "
            + ", ".join(f"{sa} -> {sb} {n}" for (sa, sb), n in sorted(by_splits.items()))
        )
    else:
        lines.append(
            f"no exact or near duplicates across A and B ({len(report.a.records)} x {len(report.b.records)} records)"
        )
    for name, d in (("A", report.a), ("B", report.b)):
        for r in d.unreadable:
            lines.append(
                f"warning: {name} {r.split} {r.filename}: image does not decode ({r.error}); "
                f"compared by its sha256 only"
            )
    if report.found.skipped:
        lines.append(
            f"warning: {report.found.skipped} comparisons left out in oversized hash buckets "
            f"(near pairs among them may be missing)"
        )
    return "\n".join(lines)
