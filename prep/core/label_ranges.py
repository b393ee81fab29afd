"""A label file read in byte ranges, as Beam's text sources read theirs: the rows of each range, by any task.

A row belongs to the range its first line starts in, so a row split across a range's end is read whole by
exactly one task. Two passes, each a task a range (beam_jobs/list_labels.py):

1. `count_range`: the lines that start in the range (a line ends at "\\r\\n", "\\r" or "\\n", as Python's text
   files with newline="" split them), and, for CSV and TSV, how the range moves the quoting state: a line
   starts either a record or the inside of a quoted field (a record whose quoted field holds a newline), and
   the range's lines map each of those two states to the one its next line starts in. The csv module itself
   decides that map (a range without a `"` keeps its state), so it is exactly what `csv.reader` does.
2. `place`: prefix sums over the ranges (O(ranges)) give each one the line number of its first line and the
   state it starts in; `read_range` then reads the rows that start in the range, numbered as
   `label_file._label_rows` numbers them (a CSV record by the line it ends on), skipping the end of a record
   that started before it.

So the rows, line numbers and rejects are those of the driver's `label_file.list_label_file`
(tests/unit/prep/test_label_ranges.py compares them at every range size). The driver only stats the file:
`label_source`.
"""

from __future__ import annotations

import csv
import os
import re
import stat
import typing
from collections.abc import Iterator
from typing import BinaryIO

from prep.core import storage
from prep.core.config import ConvertConfig
from prep.core.errors import SourceError
from prep.core.label_file import CSV_EXTS, JSON_EXTS, Row, RowRules, check_header, csv_reader, csv_row, jsonl_row
from prep.core.layout import PlanOptions

RANGE_BYTES = 16 << 20  # bytes a listing task reads, about
_BLOCK = 1 << 20
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")
_BOM = b"\xef\xbb\xbf"
_END = re.compile(rb"\r\n|\r|\n")


class BadText(SourceError):
    """The label file's text is not UTF-8 or not valid CSV: a task reports it, and the earliest range's is
    raised (a failing read is raised where it happens, for the runner to retry)."""


class LabelSource(typing.NamedTuple):
    """A label file (single- or multi-label) to be read in ranges on workers."""

    path: str
    ext: str  # its extension, lower case: which of CSV_EXTS or JSON_EXTS
    size: int
    range_bytes: int
    rules: RowRules
    plan: PlanOptions = PlanOptions()  # a multi-label file's strata are dealt for the layout it makes

    @property
    def ranges(self) -> int:
        return -(-self.size // self.range_bytes)

    def bounds(self, index: int) -> tuple[int, int]:
        return index * self.range_bytes, min(self.size, (index + 1) * self.range_bytes)


class RangeCount(typing.NamedTuple):
    """What pass 1 found in a range: where its first line starts (None: no line starts in it), how many
    lines start in it, the quoting state its lines leave for each state they start in (not quoted, quoted),
    and in range 0 of a CSV file, the header or the error it makes."""

    part: int  # the range's number
    first: int | None
    lines: int
    exits: tuple[bool, bool]
    header: list[str] | None = None
    error: str | None = None


class RangeJob(typing.NamedTuple):
    """Pass 2's task: the rows starting in range `part` from `start`, its first line (number `line`),
    which starts in a quoted field or not."""

    part: int  # the range's number
    start: int
    line: int
    quoted: bool
    header: list[str] | None


def label_source(config: ConvertConfig, range_bytes: int = RANGE_BYTES) -> LabelSource | None:
    """The label file of a classification conversion (which its rows may make multi-label), to read on
    workers; None when the driver lists it (no label file, other tasks, or an empty file, whose error the
    driver gives).

    Raises:
        SourceError: SOURCE (local label file) or the label file is unusable, as `list_label_file` says.
    """
    t = config.tasks
    if not config.labels or t.task != "classification" or t.annotations or t.masks:
        return None
    path = config.labels
    if storage.is_remote(path):
        try:
            size = storage.size(path)
        except Exception as exc:  # each file system raises its own types
            raise SourceError(f"cannot read label file {path}: {exc}") from None
        if size is None:
            raise SourceError(f"cannot read label file {path}: no such file")
    else:
        root = config.source
        if not os.path.isdir(root):
            raise SourceError(
                f"SOURCE {root} is not a folder" if os.path.exists(root) else f"SOURCE {root} does not exist"
            )
        try:
            info = os.stat(path)
        except OSError as exc:
            raise SourceError(f"cannot read label file {path}: {exc.strerror}") from None
        if not stat.S_ISREG(info.st_mode):  # reading a FIFO would wait for a writer
            raise SourceError(f"label file {path} is not a regular file")
        size = info.st_size
    ext = os.path.splitext(path)[1].lower()
    if ext not in JSON_EXTS + CSV_EXTS:
        raise SourceError(f"label file {path} must end in .csv, .tsv or .jsonl")
    if not size:
        return None
    rules = RowRules(config.source, os.path.basename(path), config.allow_outside_source, config.dedupe.group_by)
    return LabelSource(path, ext, size, range_bytes, rules, config.plan)


def count_range(src: LabelSource, index: int) -> RangeCount:
    """Pass 1 over range `index` (see the module docstring)."""
    start, end = src.bounds(index)
    with _opened(src.path) as f:
        first, lines, segment = _segment(f, src, start, end)
        header = error = None
        if index == 0 and src.ext in CSV_EXTS:
            try:
                header = check_header(src.path, next(_records(f, src, 0, False), None), src.rules.group_by)
            except SourceError as exc:
                error = str(exc)
    if first is None or src.ext in JSON_EXTS or b'"' not in segment:
        exits = (False, True)  # no quote: each state stays
    else:
        exits = (_ends_quoted(src.ext, segment, False), _ends_quoted(src.ext, segment, True))
    return RangeCount(index, first, lines, exits, header, error)


def place(counts: list[RangeCount]) -> list[RangeJob]:
    """Pass 2's tasks from pass 1's counts, by prefix sums (see the module docstring).

    Raises:
        SourceError: the CSV header is missing a needed column.
    """
    counts = sorted(counts, key=lambda c: c.part)
    if counts and counts[0].error is not None:
        raise SourceError(counts[0].error)
    header = counts[0].header if counts else None
    jobs, line, quoted = [], 1, False
    for c in counts:
        if c.first is None:
            continue
        jobs.append(RangeJob(c.part, c.first, line, quoted, header))
        line += c.lines
        quoted = c.exits[quoted]
    return jobs


def read_range(src: LabelSource, job: RangeJob) -> Iterator[Row]:
    """Pass 2: yields the rows that start in the job's range, as `label_file._label_rows` yields them.

    Raises:
        SourceError: the file is not UTF-8 or not valid CSV, or cannot be read.
    """
    start, end = job.start, src.bounds(job.part)[1]
    with _opened(src.path) as f:
        if src.ext in JSON_EXTS:
            for number, (offset, raw) in enumerate(_lines(f, src, start), job.line):
                if offset >= end:
                    return
                parsed = jsonl_row(number, _decode(src, raw, offset))
                if parsed is not None:
                    yield parsed
            return
        yield from _csv_rows(f, src, job, end)


def _csv_rows(f: BinaryIO, src: LabelSource, job: RangeJob, end: int) -> Iterator[Row]:
    assert job.header is not None  # range 0 of a CSV file holds its header
    at = [job.start]  # where the next line to be read starts
    reader = csv_reader(_texts(f, src, job.start, job.quoted, at), src.ext)
    try:
        if job.quoted or job.start == 0:  # the end of a record an earlier range reads, or the header
            next(reader, None)
        while at[0] < min(end, src.size):
            row = next(reader, None)
            if row is None:
                return
            parsed = csv_row(job.line - 1 + reader.line_num, row, job.header)
            if parsed is not None:
                yield parsed
    except csv.Error as exc:
        raise BadText(f"label file {src.path} is not valid CSV: {exc}") from None


def _opened(path: str) -> BinaryIO:
    try:
        return storage.open_read(path)
    except Exception as exc:  # each file system raises its own types
        raise SourceError(f"cannot read label file {path}: {exc}") from None


def _read(f: BinaryIO, src: LabelSource, size: int) -> bytes:
    try:
        return storage.read_exact(f, size)
    except Exception as exc:  # a read failing part-way: the file named, never rows silently missing
        raise SourceError(f"cannot read label file {src.path}: {exc}") from None


def _lines(f: BinaryIO, src: LabelSource, start: int, block: int = _BLOCK) -> Iterator[tuple[int, bytes]]:
    """(offset, line with its end) from `start`, a line start, to the end of the file."""
    try:
        f.seek(start)
    except Exception as exc:
        raise SourceError(f"cannot read label file {src.path}: {exc}") from None
    buf, offset, left = b"", start, src.size - start
    while True:
        piece = _read(f, src, min(block, left)) if left > 0 else b""
        left -= len(piece)
        eof = not piece
        buf += piece
        used = 0
        for m in _LINE.finditer(buf):
            if m.end() == len(buf) and buf.endswith(b"\r") and not eof:
                break  # its "\n" may come in the next block
            yield offset + used, m.group()
            used = m.end()
        offset += used
        buf = buf[used:]
        if eof:
            if buf:
                yield offset, buf
            return


def _decode(src: LabelSource, raw: bytes, offset: int) -> str:
    if offset == 0 and raw.startswith(_BOM):  # utf-8-sig, as the driver reads the file
        raw = raw[len(_BOM) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadText(f"label file {src.path} is not UTF-8 text") from None


def _texts(f: BinaryIO, src: LabelSource, start: int, quoted: bool, at: list[int]) -> Iterator[str]:
    """The lines from `start` as text for csv.reader (the first one opened by a `"` when it starts inside a
    quoted field), `at[0]` kept at the offset of the next."""
    for offset, raw in _lines(f, src, start):
        at[0] = offset + len(raw)
        text = _decode(src, raw, offset)
        yield '"' + text if quoted and offset == start else text


def _records(f: BinaryIO, src: LabelSource, start: int, quoted: bool) -> Iterator[list[str]]:
    try:
        yield from csv_reader(_texts(f, src, start, quoted, [start]), src.ext)
    except csv.Error as exc:
        raise BadText(f"label file {src.path} is not valid CSV: {exc}") from None


def _segment(f: BinaryIO, src: LabelSource, start: int, end: int) -> tuple[int | None, int, bytes]:
    """The offset of the first line starting in [start, end), the lines starting there, and the bytes from that
    first line to the first line starting at or after `end` (or the file's end)."""
    back = 1 if start else 0
    try:
        f.seek(start - back)
    except Exception as exc:
        raise SourceError(f"cannot read label file {src.path}: {exc}") from None
    data = (b"" if start else b"\n") + _read(f, src, end - start + back)
    # data[i] is the byte at start - 1 + i; a line starts after "\n", or after "\r" not followed by "\n".
    # Counted with bytes.count, not line by line: a "\r\n" is one end, and one ends where data[:-1] does.
    lines = data[:-1].count(b"\n") + data[:-1].count(b"\r") - data.count(b"\r\n")
    if not lines:
        return None, 0, b""
    found = _END.search(data, 0, len(data) - 1)
    assert found is not None  # some line starts in the range
    at = found.end() + 1 if found.group() == b"\r" and data[found.end() : found.end() + 1] == b"\n" else found.end()
    first = start - 1 + at
    tail = b""
    if not data.endswith(b"\n"):  # the line running on past `end`, up to where the next one starts
        raw = next((raw for _, raw in _lines(f, src, end, 1 << 16)), b"")
        if not data.endswith(b"\r"):
            tail = raw
        elif raw == b"\n":  # "\r" then "\n": one line end
            tail = raw
    segment = data[at:] + tail
    return first, lines, segment[len(_BOM) :] if first == 0 and segment.startswith(_BOM) else segment


def _ends_quoted(ext: str, segment: bytes, quoted: bool) -> bool:
    """Whether `segment` (whole lines) leaves csv.reader inside a quoted field, starting inside one or not."""
    lines = [m.group() for m in _LINE.finditer(segment)]
    rest = segment[sum(map(len, lines)) :]
    # surrogateescape: the quoting depends on ASCII bytes only, whether the rest is UTF-8 or not
    texts = [line.decode("utf-8", "surrogateescape") for line in [*lines, *([rest] if rest else [])]]
    if quoted and texts:
        texts[0] = '"' + texts[0]
    feed = _Feed(texts)
    reader = csv_reader(feed, ext)
    try:
        for _ in reader:
            if feed.done:  # the last record ran out of lines: inside a quoted field
                return True
    except csv.Error:  # a field too long: the range that owns it says so in pass 2
        return False
    return False


class _Feed:
    """Lines for csv.reader that say whether it asked for more than there were."""

    def __init__(self, texts: list[str]):
        self._it, self.done = iter(texts), False

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        try:
            return next(self._it)
        except StopIteration:
            self.done = True
            raise
