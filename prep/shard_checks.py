"""Reading one shard once: its size and sha256, and every record checked on the way.

`verify` must stay I/O-bound, so a shard is read once by its format's owner
(`ShardFormat.scan`, `prep.core.formats`): a TFRecord in big blocks, each hashed as
it arrives while its records are framed from the same blocks in memory
(`HashingReader`). A damaged byte anywhere changes the sha256; inside a record it
also breaks a CRC (an ArrayRecord: a chunk's hash), reported with the record's index.

Issues are `(record index or None, message)` pairs; `prep.verify` names the file.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import io
from collections.abc import Callable

from prep import task_checks
from prep.core import formats, targets
from prep.core.errors import RecordError
from prep.core.formats.tfrecord_format import HashingReader  # noqa: F401 (re-exported)
from prep.core.image_rules import DEFAULT_MAX_PIXELS
from prep.core.schema import FORMATS, ImageRecord
from prep.core.task_record import TaskRecord

CHANNELS = (1, 3)
PENDING = 64  # --deep decodes in flight at most, which bounds the records held in memory

Issue = tuple["int | None", str]


@dataclasses.dataclass(frozen=True)
class ShardScan:
    """What one shard file holds, as read."""

    size: int
    sha256: str
    records: int  # records with valid framing, read before any framing error
    class_counts: dict[str, int]  # by class name, from image/class/label
    complete: bool  # False if a framing error stopped the read before the end
    issues: tuple[Issue, ...]
    record_sizes: tuple[int, ...] = ()  # framed size of each record with valid framing, in file order
    target_failures: dict[str, int] = dataclasses.field(default_factory=dict)  # records per prep.core.targets reason
    target_records: int = 0  # records that fail the target's default readers for any reason
    tally: task_checks.Tally | None = None  # multilabel, detection, segmentation: what the records hold


def common_issues(record: ImageRecord | TaskRecord) -> list[str]:
    """What is wrong with the image fields every record has, without decoding the image."""
    issues = []
    if record.format not in FORMATS:
        issues.append(f"image/format is {record.format!r}, not one of {', '.join(FORMATS)}")
    if record.height < 1 or record.width < 1:
        issues.append(f"image size is {record.width}x{record.height}")
    if record.channels not in CHANNELS:
        issues.append(f"image/channels is {record.channels}, not 1 or 3")
    return issues


def record_issues(record: ImageRecord, labels: tuple[str, ...] | list[str]) -> list[str]:
    """What is wrong with a parsed record's fields, without decoding the image."""
    issues = common_issues(record)
    if not 0 <= record.label < len(labels):
        issues.append(f"image/class/label {record.label} is not an index into the manifest's {len(labels)} labels")
    elif labels[record.label] != record.text:
        issues.append(f"image/class/text is {record.text!r} but label {record.label} is {labels[record.label]!r}")
    return issues


def image_issues(record: ImageRecord | TaskRecord, max_pixels: int) -> list[str]:
    """Decodes the image fully and compares it with the record's stored fields (for --deep).

    Like `prep convert`, it checks the pixel count against the dataset's
    `--max-pixels`, before decoding, with Pillow's bomb check tied to it.
    """
    from PIL import Image

    from prep.core.headers import read_header
    from prep.core.image_rules import bomb_limit

    bomb_limit(max_pixels)
    try:
        with Image.open(io.BytesIO(record.encoded)) as img:
            if img.width * img.height > max_pixels:
                return [f"image has {img.width}x{img.height} pixels, more than the dataset's max_pixels {max_pixels}"]
            img.load()
            found = ((img.format or "unknown").lower(), img.size[1], img.size[0], len(img.getbands()))
    except Image.DecompressionBombError as exc:
        header = read_header(record.encoded)  # stored images are JPEG or PNG
        size = f"{header.width}x{header.height} pixels" if header else f"more pixels ({exc})"
        return [f"image has {size}, more than the dataset's max_pixels {max_pixels}"]
    except Exception as exc:  # Pillow raises many types on damaged data
        return [f"image does not decode: {type(exc).__name__}: {exc}"]
    issues = []
    if found[0] != record.format:
        issues.append(f"image/format is {record.format!r} but the bytes are {found[0]}")
    if found[1:] != (record.height, record.width, record.channels):
        issues.append(
            f"stored height {record.height}, width {record.width}, channels {record.channels}; "
            f"the image decodes to height {found[1]}, width {found[2]}, channels {found[3]}"
        )
    if hashlib.sha256(record.encoded).hexdigest() != record.sha256:
        issues.append("image/key/sha256 is not the sha256 of image/encoded")
    return issues


def _label_name(label: int, labels) -> str:
    return labels[label] if 0 <= label < len(labels) else f"<label {label}>"


def _task_deep(record: TaskRecord, max_pixels: int, num_classes: int, ignore_value: int | None):
    """--deep for a task record: its image, then its masks; (issues, segmentation classes present)."""
    issues = image_issues(record, max_pixels)
    more, present = task_checks.mask_issues(record, num_classes, ignore_value)
    return issues + more, present


def _task_target_failures(target: str, record: TaskRecord) -> list[str]:
    """What `target`'s default readers fail on. Model Garden reads detection with TfExampleDecoder and
    segmentation with segmentation_input.Decoder, which decode PNG and JPEG alike (tf.io.decode_image), so
    only the classification Parser's JPEG rule is left out; detection still needs a decimal source_id."""
    if record.task == "multilabel":
        return targets.record_failures(target, record.encoded, record.source_id)
    failed = targets.record_failures(target, record.encoded, record.source_id)
    return [f for f in failed if f == targets.NO_SOURCE_ID and record.task == "detection"]


@dataclasses.dataclass(frozen=True)
class ScanOptions:
    """What `scan_shard` checks in every shard of a dataset: the manifest's, and `verify`'s flags.

    Attributes:
        labels: the manifest's class names; a record's label indexes them.
        task: the manifest's task: records are parsed and checked as that task's (`prep.task_checks`).
        deep: also decode every image and compare it with its fields; and every mask.
        max_pixels: with `deep`, images with more pixels are reported, not decoded.
        target: also report each record that this target's default readers would fail on.
        ignore_value: segmentation: the class-map value of ignored pixels (None: schema.IGNORE_VALUE).
        file_format: the shards' container, which its owner reads and checks.
    """

    labels: tuple[str, ...]
    task: str = "classification"
    deep: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    target: str = targets.NONE
    ignore_value: int | None = None
    file_format: str = formats.DEFAULT  # the manifest's (`prep.core.formats`)


def scan_shard(
    path: str,
    name: str,
    options: ScanOptions,
    pool: concurrent.futures.Executor | None = None,
    on_block: Callable[[int], None] | None = None,
) -> ShardScan:
    """Reads the shard at `path` once and checks framing, CRCs, schema and (if `options.deep`) images.

    Args:
        path: the shard file.
        name: the file name used in framing error messages.
        options: what to check (`ScanOptions`).
        pool: runs the image decodes of `deep` concurrently (Pillow releases the GIL).
        on_block: called with the byte count of each block read, for progress.

    Raises:
        OSError: the file cannot be opened or read.
    """
    labels, task, deep, max_pixels = options.labels, options.task, options.deep, options.max_pixels
    target, ignore_value = options.target, options.ignore_value
    issues: list[Issue] = []
    counts: collections.Counter[str] = collections.Counter()
    failures: collections.Counter[str] = collections.Counter()
    tally = None if task == "classification" else task_checks.Tally()
    failing = 0
    first_without_id = None  # a missing image/source_id is one issue per shard: a conversion writes all or none
    bad_ids, first_bad_id = 0, None  # task records without a decimal image/source_id, likewise
    pending: collections.deque = collections.deque()  # (index, record, future) of --deep decodes, oldest first

    def collect(index, record, result):
        if record is None:
            issues.extend((index, message) for message in result)
            return
        found, present = result
        issues.extend((index, message) for message in found)
        if record is not _NO_TALLY:
            tally.add(record, labels, present)

    def check_deep(index, record, work, *args):
        if pool is None:
            collect(index, record, work(*args))
        else:
            pending.append((index, record, pool.submit(work, *args)))
            if len(pending) > PENDING:
                collect(*_done(pending.popleft()))

    read = formats.ScanResult()
    for index, data in formats.get(options.file_format).scan(path, name, read, on_block):
        try:
            record = ImageRecord.from_bytes(data) if tally is None else TaskRecord.from_bytes(data, task)
        except RecordError as exc:
            schema = "an Example of our schema" if tally is None else f"a {task} record"
            issues.append((index, f"does not parse as {schema}: {exc}"))
            continue
        if tally is None:
            assert isinstance(record, ImageRecord)  # parsed as one without a tally, above
            counts[_label_name(record.label, labels)] += 1
            issues.extend((index, message) for message in record_issues(record, labels))
            failed = targets.record_failures(target, record.encoded, record.source_id)
        else:
            assert isinstance(record, TaskRecord)
            issues.extend((index, m) for m in common_issues(record) + task_checks.record_issues(record, labels))
            if not task_checks.source_id_ok(record):
                bad_ids += 1
                first_bad_id = index if first_bad_id is None else first_bad_id
            failed = _task_target_failures(target, record)
            if not (deep and task == "segmentation"):
                tally.add(record, labels, None)
        if failed:
            failing += 1
            failures.update(failed)
            if targets.NOT_JPEG in failed:
                issues.append((index, targets.not_jpeg_message(record.encoded)))
            if targets.NO_SOURCE_ID in failed and first_without_id is None:
                first_without_id = index
        if deep and tally is None:
            check_deep(index, None, image_issues, record, max_pixels)
        elif deep:
            check_deep(
                index,
                record if task == "segmentation" else _NO_TALLY,
                _task_deep,
                record,
                max_pixels,
                len(labels),
                ignore_value,
            )
    for item in pending:
        collect(*_done(item))
    count = read.records
    if read.error is not None:
        issues.append(read.error)
    if failures[targets.NO_SOURCE_ID]:
        assert first_without_id is not None  # set with the first NO_SOURCE_ID failure
        issues.append((None, targets.no_source_id_message(failures[targets.NO_SOURCE_ID], count, first_without_id)))
    if bad_ids:
        issues.append(
            (
                None,
                f"{bad_ids} of {count} {task} records have no decimal image/source_id, which every "
                f"{task} record carries (the first is record {first_bad_id})",
            )
        )
    issues.sort(key=lambda issue: -1 if issue[0] is None else issue[0])
    return ShardScan(
        size=read.size,
        sha256=read.sha256,
        records=count,
        class_counts=dict(counts) if tally is None else dict(tally.images),
        complete=read.error is None,
        issues=tuple(issues),
        record_sizes=tuple(read.record_sizes),
        target_failures=dict(failures),
        target_records=failing,
        tally=tally,
    )


class _NoTally:
    """Marks a --deep result whose record was already counted (only its issues are collected)."""


_NO_TALLY = _NoTally()


def _done(item):
    index, record, future = item
    return index, record, future.result()
