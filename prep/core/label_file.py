"""Label files: CSV, TSV or JSONL rows of path, label and an optional split, listed into a `Listing`.

Every row becomes an `InputRef` or a `Reject` with its reason (bad row, empty path or
label, a path outside SOURCE unless allowed, a duplicate path), so counts reconcile.
Paths are normalized relative to SOURCE (`normalize_path`): that is the record's
`image/filename`, which then does not depend on where SOURCE is.

Here the driver reads the whole file (`list_label_file`); on workers it is read in byte ranges
(`prep.core.label_ranges`, `beam_jobs.list_labels`) through the same row parsing (`csv_row`, `jsonl_row`)
and judgement (`judge_row`), duplicates decided by a shuffle on the path, a multi-label file's rows then
finished by the same `finish_multilabel`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import stat
import sys
import typing
from collections.abc import Iterable, Iterator
from typing import Any

from prep.core.errors import SourceError
from prep.core.listing import InputRef, Listing, Reject, finish_listing
from prep.core.storage import is_remote

LABEL_COLUMNS = ("path", "label")
MULTI = "\0multi"  # set in a JSONL row whose label is a list: the file is multi-label
JSON_EXTS = (".jsonl", ".json", ".ndjson")
CSV_EXTS = (".csv", ".tsv", ".txt")
Row = tuple[int, "dict[str, str] | None", "str | None"]  # (line number, values or None, problem or None)


def _label_rows(path: str, data: bytes | None, group_by: str | None = None) -> Iterator[Row]:
    """Yields (line number, dict or None, problem) rows of a CSV, TSV or JSONL file (a CSV or TSV file must
    have the `group_by` column too, when given)."""
    ext = os.path.splitext(path)[1].lower()
    if data is None:
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise SourceError(f"cannot read label file {path}: {exc.strerror}") from None
        if not stat.S_ISREG(mode):  # reading a FIFO would wait for a writer
            raise SourceError(f"label file {path} is not a regular file")
    try:
        # utf-8-sig: a byte-order mark, as spreadsheet programs write, is not part of the first column's name.
        f = (
            open(path, encoding="utf-8-sig", newline="")
            if data is None
            else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", newline="")
        )
    except OSError as exc:
        raise SourceError(f"cannot read label file {path}: {exc.strerror}") from None
    with f:
        try:
            if ext in JSON_EXTS:
                for number, line in enumerate(f, 1):
                    parsed = jsonl_row(number, line)
                    if parsed is not None:
                        yield parsed
                return
            if ext not in CSV_EXTS:
                raise SourceError(f"label file {path} must end in .csv, .tsv or .jsonl")
            reader = csv_reader(f, ext)
            header = check_header(path, next(reader, None), group_by)
            for row in reader:
                parsed = csv_row(reader.line_num, row, header)
                if parsed is not None:
                    yield parsed
        except UnicodeDecodeError:
            raise SourceError(f"label file {path} is not UTF-8 text") from None
        except csv.Error as exc:
            raise SourceError(f"label file {path} is not valid CSV: {exc}") from None


def csv_reader(lines: Iterable[str], ext: str) -> Any:
    """A csv.reader of a label file's lines (a file opened with newline="", or lines split as it splits them)."""
    # skipinitialspace: "cat, a.jpg" names a.jpg; a path is otherwise kept exactly as
    # written (quote it to keep leading spaces): "x.png " is not x.png.
    return csv.reader(lines, delimiter="\t" if ext == ".tsv" else ",", skipinitialspace=True)


def check_header(path: str, header: list[str] | None, group_by: str | None) -> list[str]:
    """A CSV or TSV file's column names, stripped.

    Raises:
        SourceError: the file is empty or lacks a needed column.
    """
    if header is None:
        raise SourceError(f"label file {path} is empty")
    header = [h.strip() for h in header]
    missing = [c for c in (*LABEL_COLUMNS, *([group_by] if group_by else [])) if c not in header]
    if missing:
        raise SourceError(f"label file {path} has no {missing[0]!r} column (columns: {', '.join(header)})")
    return header


def csv_row(number: int, row: list[str], header: list[str]) -> Row | None:
    """A CSV record ending on line `number` as a row, or None for a blank one."""
    if not row or not any(cell.strip() for cell in row):
        return None
    if len(row) != len(header):
        return number, None, f"{len(row)} fields, header has {len(header)}"
    return number, dict(zip(header, row)), None


def jsonl_row(number: int, line: str) -> Row | None:
    """JSONL line `number` as a row, or None for a blank one."""
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return number, None, f"not JSON: {exc.msg}"
    if not isinstance(row, dict):
        return number, None, "not a JSON object"
    values, problem = _json_values(row)
    return number, values, problem


def _json_values(row: dict[str, Any]) -> tuple[dict[str, str] | None, str | None]:
    """A JSONL row's values as text: null is empty, a number or boolean its JSON text
    ("label": 3 is class "3"); a list or object is a problem."""
    values: dict[str, str] = {}
    for key, value in row.items():
        if value is None:
            values[key] = ""
            continue
        if key == "label" and isinstance(value, list):  # multi-label: a list of names
            if not value or not all(isinstance(v, str) and v.strip() and "|" not in v for v in value):
                return None, "'label' list must hold non-empty names without '|'"
            values[key] = "|".join(v.strip() for v in value)
            values[MULTI] = "1"
            continue
        if isinstance(value, (list, dict)):
            return None, f"{key!r} is a JSON {'list' if isinstance(value, list) else 'object'}, not text"
        values[key] = value if isinstance(value, str) else json.dumps(value)
    return values, None


def _text_problem(what: str, text: str, file_name: bool = False) -> str | None:
    """Why `text` from a label file cannot be a path (`file_name`) or a label, or None.

    JSON can spell a NUL or a lone surrogate (\\u0000, \\ud800), which no file name
    holds; a path may keep the lone surrogates (\\udc80-\\udcff) that stand for
    the bytes of a file name that is not UTF-8, as Python writes them.
    """
    if "\x00" in text:
        return f"{what} contains a NUL character"
    try:
        text.encode("utf-8", "surrogateescape" if file_name else "strict")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
        return f"{what} holds a lone surrogate ('{shown}'), not text"
    return None


def normalize_path(root: str, path: str, allow_outside: bool = False) -> str | None:
    """`path` relative to root, '/'-separated, or None if it points outside root.

    With `allow_outside`, a path outside root is returned as written, normalized:
    a relative one then starts with `../`, an absolute path or URL stays as it is.
    That is the record's `image/filename`: it does not depend on where root is.
    """
    path = path.replace("\\", "/") if os.sep == "\\" else path
    if is_remote(path):
        prefix = root.rstrip("/") + "/"
        if not path.startswith(prefix):
            return path if allow_outside else None
        norm = posixpath.normpath(path[len(prefix) :])
    elif is_remote(root):
        norm = posixpath.normpath(path)
    else:
        absolute = os.path.normpath(os.path.join(root, path))  # lexical: "../src/a.jpg" may be inside
        norm = os.path.relpath(absolute, root).replace(os.sep, "/")
        if allow_outside and os.path.isabs(path) and (norm == ".." or norm.startswith("../")):
            return absolute.replace(os.sep, "/")
    if norm == "." or posixpath.isabs(norm):
        return None
    if norm == ".." or norm.startswith("../"):
        return norm if allow_outside else None
    return norm


def list_label_file(
    root: str,
    label_file: str,
    classes: tuple[str, ...] | None = None,
    data: bytes | None = None,
    allow_outside: bool = False,
    group_by: str | None = None,
) -> Listing:
    """Lists the rows of a label file with `path` and `label` (and optional `split`) columns.

    `group_by` (--group-by) names a column whose value is the row's user group (e.g. a patient
    id; `prep.core.groups`): a CSV or TSV file must have it, and an empty value (or a JSONL
    row without it) puts the row in no group.

    `data` holds the label file's bytes when the caller read it (object stores);
    SOURCE is then not checked here. Paths outside SOURCE are rejected unless
    `allow_outside` (see `normalize_path`).

    Raises:
        SourceError: SOURCE or the label file is unusable, a needed column is
            missing, or a class has no rows.
    """
    if data is None and not os.path.isdir(root):
        raise SourceError(f"SOURCE {root} is not a folder" if os.path.exists(root) else f"SOURCE {root} does not exist")
    rules = RowRules(root, os.path.basename(label_file), allow_outside, group_by)
    refs: list[InputRef] = []
    rejects: list[Reject] = []
    first_line: dict[str, int] = {}
    saw_row = multi = False
    for number, row, problem in _label_rows(label_file, data, group_by):
        saw_row = True
        outcome, is_multi = judge_row(rules, number, row, problem)
        multi = multi or is_multi
        if isinstance(outcome, Reject):
            rejects.append(outcome)
        elif outcome.ref.path in first_line:
            rejects.append(duplicate(outcome, first_line[outcome.ref.path]))
        else:
            first_line[outcome.ref.path] = number
            refs.append(outcome.ref)
    if not saw_row:
        raise SourceError(f"label file {label_file} has no rows")
    if refs and len({r.split is None for r in refs}) > 1:
        raise SourceError(f"label file {label_file} gives a split for some rows but not for others")
    if multi:
        return finish_multilabel(refs, rejects, classes, label_file)
    found_classes = tuple(sorted({r.label for r in refs}))
    if not found_classes:
        raise SourceError(f"label file {label_file} has no usable rows")
    return finish_listing(refs, rejects, found_classes, classes, source=label_file)


class RowRules(typing.NamedTuple):
    """What judging a label file's row needs besides the row."""

    root: str  # SOURCE
    name: str  # the label file's base name, which bad rows' rejects are named by
    allow_outside: bool
    group_by: str | None


class Candidate(typing.NamedTuple):
    """A row that becomes an input unless an earlier line lists its path too."""

    line: int
    ref: InputRef


def judge_row(
    rules: RowRules, number: int, row: dict[str, str] | None, problem: str | None
) -> tuple[Candidate | Reject, bool]:
    """Row `number` (as `_label_rows` gives it) as a candidate input or a reject, and whether it is multi-label."""
    if problem is not None:
        return Reject(f"{rules.name}:{number}", "bad_row", problem), False
    assert row is not None  # _label_rows gives each line a row or a problem
    if "path" not in row or "label" not in row:
        return Reject(f"{rules.name}:{number}", "bad_row", "row lacks 'path' or 'label'"), False
    raw_path, label = row["path"], row["label"].strip()
    multi = MULTI in row or "|" in label
    if multi:
        label = "|".join(sorted({name.strip() for name in label.split("|") if name.strip()}))
    problem = (
        _text_problem("path", raw_path, file_name=True)
        or _text_problem("label", label)
        or _text_problem("split", row.get("split") or "")
    )
    if problem is not None:
        return Reject(f"{rules.name}:{number}", "bad_row", problem), multi
    split = (row.get("split") or "").strip() or None
    # One spelling per file name: "\udcc3\udca9" is the bytes of "é", so it becomes "é".
    raw_path = raw_path.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")
    rel = normalize_path(rules.root, raw_path, rules.allow_outside) if raw_path else None
    if not raw_path:
        return Reject(f"{rules.name}:{number}", "bad_row", "empty path"), multi
    if rel is None:
        detail = f"line {number}: path is outside SOURCE (--allow-outside-source accepts it)"
        return Reject(raw_path, "outside_source", detail), multi
    if not label:
        return Reject(rel, "empty_label", f"line {number}: label is empty"), multi
    group = (row.get(rules.group_by) or "").strip() or None if rules.group_by else None
    return Candidate(number, InputRef(rel, sys.intern(label), split and sys.intern(split), group=group)), multi


def duplicate(later: Candidate, first_line: int) -> Reject:
    """The reject of a row whose path line `first_line` listed first."""
    return Reject(later.ref.path, "duplicate", f"line {later.line}: path already listed on line {first_line}")


def finish_multilabel(
    refs: list[InputRef], rejects: list[Reject], classes: tuple[str, ...] | None, label_file: str
) -> Listing:
    """A multi-label file's listing: each ref's label the sorted '|'-joined names, the classes every
    name found (or --classes); a row naming a class not in --classes is rejected (unknown_label).
    `task_inputs.multilabel_listing` then groups the refs in strata."""
    names = classes if classes is not None else tuple(sorted({n for r in refs for n in r.label.split("|")}))
    if not names:
        raise SourceError(f"label file {label_file} has no usable rows")
    known, kept = set(names), []
    for ref in refs:
        unknown = [n for n in ref.label.split("|") if n not in known]
        if unknown:
            rejects.append(Reject(ref.path, "unknown_label", f"label {unknown[0]!r} is not in --classes"))
        else:
            kept.append(ref)
    kept.sort(key=lambda r: r.path)
    rejects.sort(key=lambda r: r.path)
    return Listing(tuple(kept), tuple(rejects), tuple(names), task="multilabel")
