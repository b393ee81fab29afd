"""Listing inputs: class folders, split folders, or a label file. Pure (file system only).

The result is a `Listing`: one `InputRef` per candidate image (relative path,
class name, split or None), the class names, and a `Reject` for every entry
that cannot become an example before any image is read (hidden files, files
outside a class folder, bad label-file rows, unknown labels, duplicates,
paths outside SOURCE). `found = len(refs) + len(rejects)`.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
import os
import posixpath
import stat
import sys
import typing
from typing import Iterable

from prep.errors import SourceError
from prep.naming import check_split_name

LAYOUTS = ("auto", "classes", "splits")
KNOWN_SPLITS = frozenset({"train", "validation", "val", "valid", "test", "eval", "dev"})
LABEL_COLUMNS = ("path", "label")


class InputRef(typing.NamedTuple):
    """A candidate example: where it is (relative to SOURCE) and what it is.

    A NamedTuple: cheaper for Beam to pickle than a dataclass.
    """

    path: str
    label: str
    split: str | None


class Reject(typing.NamedTuple):
    """An input that was not written, and why. `reason` is a short code."""

    path: str
    reason: str
    detail: str

    def to_json(self) -> dict:
        """The line of rejects.jsonl: valid UTF-8 JSON even for a non-UTF-8 file name,
        whose exact bytes then also go in `path_hex`."""
        out = {"path": printable(self.path), "reason": self.reason, "detail": printable(self.detail)}
        if out["path"] != self.path:
            out["path_hex"] = self.path.encode("utf-8", "surrogateescape").hex()
        return out


def printable(text: str) -> str:
    """`text` as valid Unicode: bytes of a non-UTF-8 file name (which Python
    holds as lone surrogates) are shown as \\xNN."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


@dataclasses.dataclass(frozen=True)
class Listing:
    refs: tuple[InputRef, ...]
    rejects: tuple[Reject, ...]
    classes: tuple[str, ...]

    @property
    def found(self) -> int:
        return len(self.refs) + len(self.rejects)


def read_class_file(path: str) -> tuple[str, ...]:
    """Reads `--classes FILE`: one class name per line, in label-id order."""
    try:
        with open(path, encoding="utf-8-sig") as f:  # a byte-order mark is not part of the first name
            names = [line.strip() for line in f if line.strip()]
    except OSError as exc:
        raise SourceError(f"cannot read --classes file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SourceError(f"--classes file {path} is not UTF-8 text") from None
    if not names:
        raise SourceError(f"--classes file {path} names no classes")
    seen = set()
    for name in names:
        if name in seen:
            raise SourceError(f"--classes file {path} names class {name!r} twice")
        seen.add(name)
    return tuple(names)


def _walk(root: str) -> Iterable[tuple[str, str | None]]:
    """Yields (relative path, problem) for each file under root, following
    directory symlinks once; problem is None for a readable-looking file.

    Symlinked folders are walked after every real one, so a folder's files are
    listed under its real path, with its class, whatever a symlink elsewhere
    calls it; a symlink to a folder already walked is one `symlink_loop`.
    """
    seen_dirs = set()
    stack, linked = [""], collections.deque()
    while stack or linked:
        rel_dir = stack.pop() if stack else linked.popleft()
        full_dir = os.path.join(root, rel_dir)
        real = os.path.realpath(full_dir)
        if real in seen_dirs:
            yield rel_dir, "symlink_loop"
            continue
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(full_dir), key=lambda e: e.name)
        except OSError as exc:
            yield rel_dir, f"unreadable:cannot list folder: {exc.strerror}"
            continue
        for entry in entries:
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            if is_dir:
                (linked if entry.is_symlink() else stack).append(rel)
            else:
                yield rel, None


def _local_dirs(root: str) -> list[str]:
    """Relative paths of the non-hidden folders one and two levels under root."""
    def is_dir(entry):
        try:
            return entry.is_dir()
        except OSError:  # a symlink loop: rejected later, when the files are walked
            return False

    def subdirs(path):
        return sorted(e.name for e in os.scandir(path) if not e.name.startswith(".") and is_dir(e))
    try:
        top = subdirs(root)
        return top + [f"{d}/{c}" for d in top for c in subdirs(os.path.join(root, d))]
    except OSError as exc:
        raise SourceError(f"cannot list {printable(exc.filename or root)}: {exc.strerror}") from None


def detect_layout(dirs: Iterable[str]) -> str:
    """`splits` when every top-level folder has a known split name, else `classes`."""
    top = {d.split("/")[0] for d in dirs}
    return "splits" if top and top <= KNOWN_SPLITS else "classes"


def list_folders(root: str, layout: str = "auto", classes: tuple[str, ...] | None = None,
                 files: list[tuple[str, str | None]] | None = None) -> Listing:
    """Lists `root/<class>/...` or `root/<split>/<class>/...`.

    Args:
        root: SOURCE.
        layout: auto, classes or splits.
        classes: fixed class order (from --classes), or None for sorted folder names.
        files: for object stores, (relative path, None) of every file under root,
            listed by the caller; None walks the local folder (empty class
            folders then count as classes).

    Raises:
        SourceError: root is missing or not a folder, it holds no class folders,
            or a class has no files.
    """
    if layout not in LAYOUTS:
        raise SourceError(f"--layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if files is None:
        if not os.path.isdir(root):
            raise SourceError(f"SOURCE {root} is not a folder" if os.path.exists(root)
                              else f"SOURCE {root} does not exist")
        dirs, files = _local_dirs(root), _walk(root)
    else:
        dirs = sorted({"/".join(rel.split("/")[:n]) for rel, _ in files for n in (1, 2)
                       if rel.count("/") >= n and not any(p.startswith(".") for p in rel.split("/")[:n])})
    if layout == "auto":
        layout = detect_layout(dirs)
    depth = 1 if layout == "classes" else 2
    refs, rejects = [], []
    for rel, problem in files:
        parts = rel.split("/")
        if problem is not None:
            reason, _, detail = problem.partition(":")
            rejects.append(Reject(rel, reason, detail or "folder already listed under another path (a loop, or a symlink to it)"))
        elif any(p.startswith(".") for p in parts):
            rejects.append(Reject(rel, "hidden", "hidden files and folders are not images"))
        elif len(parts) <= depth:
            where = "a class folder" if layout == "classes" else "a <split>/<class> folder"
            rejects.append(Reject(rel, "no_class", f"file is not inside {where}"))
        else:
            split = sys.intern(parts[0]) if layout == "splits" else None
            refs.append(InputRef(rel, sys.intern(parts[depth - 1]), split))  # one string per class, not per input
    folder_classes = {d.split("/")[depth - 1] for d in dirs if d.count("/") == depth - 1}
    if not folder_classes:
        raise SourceError(f"SOURCE {root} has no class folders (expected {root}/<class>/<image>)")
    for name in sorted(folder_classes):
        if printable(name) != name:
            raise SourceError(f"class folder name {printable(name)!r} is not UTF-8; class names go into records "
                              "and the manifest as text: rename the folder")
    return _finish(refs, rejects, tuple(sorted(folder_classes)), classes, source=root)


def _finish(refs, rejects, found_classes, classes, source) -> Listing:
    """Checks labels against the class list, and that some class has examples (what becomes of a
    class with none is for `--empty-classes` to say, once the images are read)."""
    label_names = classes if classes is not None else found_classes
    known = set(label_names)
    kept = []
    for ref in refs:
        if ref.label in known:
            kept.append(ref)
        else:
            rejects.append(Reject(ref.path, "unknown_label", f"label {ref.label!r} is not in --classes"))
    counts = {name: 0 for name in label_names}
    for ref in kept:
        counts[ref.label] += 1
    empty = [name for name, n in counts.items() if n == 0]
    if empty and len(empty) == len(counts):  # some empty: --empty-classes says what becomes of them
        raise SourceError(f"class {empty[0]!r} has no images in {source}"
                          + (f" (and {len(empty) - 1} more empty)" if len(empty) > 1 else ""))
    for ref in kept:
        if ref.split is not None:
            try:
                check_split_name(ref.split)
            except ValueError as exc:
                raise SourceError(f"{printable(ref.path)}: {exc}") from None
    by_case: dict[str, str] = {}
    for split in sorted({ref.split for ref in kept if ref.split is not None}):
        other = by_case.setdefault(split.lower(), split)
        if other != split:
            raise SourceError(f"splits {other!r} and {split!r} differ only in case: their shard files would "
                              "overwrite each other on a file system that ignores case (macOS, Windows); "
                              "rename one")
    kept.sort(key=lambda r: r.path)
    rejects.sort(key=lambda r: r.path)
    return Listing(tuple(kept), tuple(rejects), tuple(label_names))


def _label_rows(path: str, data: bytes | None):
    """Yields (line number, dict or None, problem) rows of a CSV, TSV or JSONL file."""
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
        f = open(path, encoding="utf-8-sig", newline="") if data is None else io.TextIOWrapper(
            io.BytesIO(data), encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise SourceError(f"cannot read label file {path}: {exc.strerror}") from None
    with f:
        try:
            if ext in (".jsonl", ".json", ".ndjson"):
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        yield number, None, f"not JSON: {exc.msg}"
                        continue
                    if not isinstance(row, dict):
                        yield number, None, "not a JSON object"
                        continue
                    values, problem = _json_values(row)
                    yield number, values, problem
                return
            if ext not in (".csv", ".tsv", ".txt"):
                raise SourceError(f"label file {path} must end in .csv, .tsv or .jsonl")
            # skipinitialspace: "cat, a.jpg" names a.jpg; a path is otherwise kept exactly as
            # written (quote it to keep leading spaces): "x.png " is not x.png.
            reader = csv.reader(f, delimiter="\t" if ext == ".tsv" else ",", skipinitialspace=True)
            header = next(reader, None)
            if header is None:
                raise SourceError(f"label file {path} is empty")
            header = [h.strip() for h in header]
            missing = [c for c in LABEL_COLUMNS if c not in header]
            if missing:
                raise SourceError(f"label file {path} has no {missing[0]!r} column (columns: {', '.join(header)})")
            for row in reader:
                if not row or not any(cell.strip() for cell in row):
                    continue
                if len(row) != len(header):
                    yield reader.line_num, None, f"{len(row)} fields, header has {len(header)}"
                    continue
                yield reader.line_num, dict(zip(header, row)), None
        except UnicodeDecodeError:
            raise SourceError(f"label file {path} is not UTF-8 text") from None
        except csv.Error as exc:
            raise SourceError(f"label file {path} is not valid CSV: {exc}") from None


def _json_values(row: dict) -> tuple[dict | None, str | None]:
    """A JSONL row's values as text: null is empty, a number or boolean its JSON text
    ("label": 3 is class "3"); a list or object is a problem."""
    values = {}
    for key, value in row.items():
        if value is None:
            values[key] = ""
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
    if "://" in path:
        prefix = root.rstrip("/") + "/"
        if not path.startswith(prefix):
            return path if allow_outside else None
        norm = posixpath.normpath(path[len(prefix):])
    elif "://" in root:
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


def list_label_file(root: str, label_file: str, classes: tuple[str, ...] | None = None,
                    data: bytes | None = None, allow_outside: bool = False) -> Listing:
    """Lists the rows of a label file with `path` and `label` (and optional `split`) columns.

    `data` holds the label file's bytes when the caller read it (object stores);
    SOURCE is then not checked here. Paths outside SOURCE are rejected unless
    `allow_outside` (see `normalize_path`).

    Raises:
        SourceError: SOURCE or the label file is unusable, a needed column is
            missing, or a class has no rows.
    """
    if data is None and not os.path.isdir(root):
        raise SourceError(f"SOURCE {root} is not a folder" if os.path.exists(root) else f"SOURCE {root} does not exist")
    refs, rejects, first_line = [], [], {}
    saw_row = False
    for number, row, problem in _label_rows(label_file, data):
        saw_row = True
        where = f"line {number}"
        if problem is not None:
            rejects.append(Reject(f"{os.path.basename(label_file)}:{number}", "bad_row", problem))
            continue
        if "path" not in row or "label" not in row:
            rejects.append(Reject(f"{os.path.basename(label_file)}:{number}", "bad_row", "row lacks 'path' or 'label'"))
            continue
        raw_path, label = row["path"], row["label"].strip()
        problem = _text_problem("path", raw_path, file_name=True) or _text_problem("label", label) \
            or _text_problem("split", row.get("split") or "")
        if problem is not None:
            rejects.append(Reject(f"{os.path.basename(label_file)}:{number}", "bad_row", problem))
            continue
        split = (row.get("split") or "").strip() or None
        # One spelling per file name: "\udcc3\udca9" is the bytes of "é", so it becomes "é".
        raw_path = raw_path.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")
        rel = normalize_path(root, raw_path, allow_outside) if raw_path else None
        if not raw_path:
            rejects.append(Reject(f"{os.path.basename(label_file)}:{number}", "bad_row", "empty path"))
        elif rel is None:
            rejects.append(Reject(raw_path, "outside_source",
                                  f"{where}: path is outside SOURCE (--allow-outside-source accepts it)"))
        elif not label:
            rejects.append(Reject(rel, "empty_label", f"{where}: label is empty"))
        elif rel in first_line:
            rejects.append(Reject(rel, "duplicate", f"{where}: path already listed on line {first_line[rel]}"))
        else:
            first_line[rel] = number
            refs.append(InputRef(rel, sys.intern(label), split and sys.intern(split)))
    if not saw_row:
        raise SourceError(f"label file {label_file} has no rows")
    if refs and len({r.split is None for r in refs}) > 1:
        raise SourceError(f"label file {label_file} gives a split for some rows but not for others")
    found_classes = tuple(sorted({r.label for r in refs}))
    if not found_classes:
        raise SourceError(f"label file {label_file} has no usable rows")
    return _finish(refs, rejects, found_classes, classes, source=label_file)
