"""Listing inputs: what a `Listing` is, and class folders or split folders listed into one.

A `Listing` holds one `InputRef` per candidate image (relative path, class name,
split or None), the class names, and a `Reject` for every entry that cannot become
an example before any image is read (hidden files, files outside a class folder,
unknown labels; `label_file` adds bad rows, duplicates, paths outside SOURCE).
Invariant: ``found = len(refs) + len(rejects)``, refs and rejects sorted by path.
Local folders are walked here; object stores are listed by the caller (`inputs`).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import sys
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from prep.core.errors import SourceError
from prep.core.manifest_parts import Category
from prep.core.naming import check_split_name

LAYOUTS = ("auto", "classes", "splits")
KNOWN_SPLITS = frozenset({"train", "validation", "val", "valid", "test", "eval", "dev"})


class InputRef(typing.NamedTuple):
    """A candidate example: where it is (relative to SOURCE) and what it is.

    A NamedTuple: cheaper for Beam to pickle than a dataclass.
    """

    path: str
    label: str  # the class; for multilabel, detection and segmentation the planner's group (`task_inputs`)
    split: str | None
    extra: str | None = None  # those tasks: what the record needs beyond the image, as JSON (`task_inputs`)
    key: str | None = None  # those tasks: the rank key in the group, hex (`ordering.rank_key`)
    group: str | None = None  # its user group from the label file's --group-by column (prep.core.groups)

    def fields(self) -> list[str | None]:
        """The fields to stage and hash: a classification input's three, as before these tasks and groups."""
        if self.group is not None:
            return list(self)
        return list(self[:5]) if self.extra is not None or self.key is not None else list(self[:3])


def fields_json(fields: list[str | None]) -> str:
    """`json.dumps(fields)` of a reference's staged fields (`InputRef.fields`: text or None), in one join: a
    listing's group-file line (beam_jobs/list_source.py), whose bytes are then staged and hashed as they
    are. json.dumps's own Python calls cost more than encoding the strings with its C encoder."""
    try:  # the C encoder refuses what is not text, as json.dumps would encode it otherwise
        return "[" + ", ".join(["null" if f is None else _encode(f) for f in fields]) + "]"
    except TypeError:
        return json.dumps(fields)


_encode = json.encoder.encode_basestring_ascii  # what json.dumps encodes a string with (ensure_ascii)


def lines_sum(lines: Iterable[bytes]) -> int:
    """`run_record.refs_sum` of the references whose staged fields are these lines (`fields_json`'s)."""
    return sum(int.from_bytes(hashlib.sha256(line).digest(), "big") for line in lines) % 2**256


class Reject(typing.NamedTuple):
    """An input that was not written, and why. `reason` is a short code."""

    path: str
    reason: str
    detail: str

    def to_json(self) -> dict[str, str]:
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
    task: str = "classification"  # one of schema.TASKS
    groups: tuple[str, ...] | None = None  # the planner's groups (InputRef.label) when not the classes
    categories: tuple[Category, ...] = ()  # detection: manifest Categories, in id order
    # Any: task_inputs' types, and task_inputs imports this module
    box_notes: tuple[Any, ...] = ()  # detection: boxes the annotations hold but no record will (task_inputs.BoxNote)
    boxes: Any = None  # detection: their tally (task_inputs.BoxTally), or None
    masks: bool = False  # detection: the annotations hold polygons or RLE, so records get instance masks

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


class LinkedFolder(Exception):
    """A symlinked folder, met by a walk that may not follow it (`walk` with `links=False`)."""


def walk(root: str, start: str = "", recursive: bool = True, links: bool = True) -> Iterable[tuple[str, str | None]]:
    """Yields (relative path, problem) for each file under root (under `root/start`; only those directly in it
    unless `recursive`), following directory symlinks once; problem is None for a readable-looking file.

    Symlinked folders are walked after every real one, so a folder's files are
    listed under its real path, with its class, whatever a symlink elsewhere
    calls it; a symlink to a folder already walked is one `symlink_loop`. A walk of part of root
    cannot tell: with `links=False` it raises `LinkedFolder` at a symlinked folder instead.
    """
    seen_dirs: set[str] = set()
    stack = [start]
    linked: collections.deque[str] = collections.deque()
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
        # posixpath.join(rel_dir, name) for a name without "/", without its call per file
        prefix = rel_dir if not rel_dir or rel_dir.endswith("/") else rel_dir + "/"
        for entry in entries:
            rel = prefix + entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            if is_dir and not recursive:
                continue
            if is_dir:
                if entry.is_symlink() and not links:
                    raise LinkedFolder(rel)
                (linked if entry.is_symlink() else stack).append(rel)
            else:
                yield rel, None


def local_dirs(root: str) -> list[str]:
    """Relative paths of the non-hidden folders one and two levels under root."""

    def is_dir(entry: os.DirEntry[str]) -> bool:
        try:
            return entry.is_dir()
        except OSError:  # a symlink loop: rejected later, when the files are walked
            return False

    def subdirs(path: str) -> list[str]:
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


def list_folders(
    root: str,
    layout: str = "auto",
    classes: tuple[str, ...] | None = None,
    files: Sequence[tuple[str, str | None]] | None = None,
) -> Listing:
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
            raise SourceError(
                f"SOURCE {root} is not a folder" if os.path.exists(root) else f"SOURCE {root} does not exist"
            )
        dirs, listed = local_dirs(root), walk(root)
    else:
        dirs = sorted(
            {
                "/".join(rel.split("/")[:n])
                for rel, _ in files
                for n in (1, 2)
                if rel.count("/") >= n and not any(p.startswith(".") for p in rel.split("/")[:n])
            }
        )
        listed = files
    if layout == "auto":
        layout = detect_layout(dirs)
    refs: list[InputRef] = []
    rejects: list[Reject] = []
    for rel, problem in listed:
        entry = entry_of(rel, problem, layout)
        if isinstance(entry, InputRef):
            refs.append(entry)
        else:
            rejects.append(entry)
    return finish_listing(refs, rejects, folder_classes(root, dirs, layout), classes, source=root)


def entry_of(rel: str, problem: str | None, layout: str) -> InputRef | Reject:
    """What a listed file of a `layout` (classes or splits) SOURCE is: an input of its folder's class, or a reject."""
    parts = rel.split("/")
    depth = 1 if layout == "classes" else 2
    if problem is not None:
        reason, _, detail = problem.partition(":")
        return Reject(rel, reason, detail or "folder already listed under another path (a loop, or a symlink to it)")
    if rel.startswith(".") or "/." in rel:  # a part of it starts with "."
        return Reject(rel, "hidden", "hidden files and folders are not images")
    if len(parts) <= depth:
        where = "a class folder" if layout == "classes" else "a <split>/<class> folder"
        return Reject(rel, "no_class", f"file is not inside {where}")
    split = sys.intern(parts[0]) if layout == "splits" else None
    return InputRef(rel, sys.intern(parts[depth - 1]), split)  # one string per class, not per input


def folder_classes(root: str, dirs: Iterable[str], layout: str) -> tuple[str, ...]:
    """The class names of SOURCE's folders `dirs` (one and two levels down, hidden ones left out), sorted.

    Raises:
        SourceError: there are none, or one is not UTF-8.
    """
    depth = 1 if layout == "classes" else 2
    names = {d.split("/")[depth - 1] for d in dirs if d.count("/") == depth - 1}
    if not names:
        raise SourceError(f"SOURCE {root} has no class folders (expected {root}/<class>/<image>)")
    for name in sorted(names):
        if printable(name) != name:
            raise SourceError(
                f"class folder name {printable(name)!r} is not UTF-8; class names go into records "
                "and the manifest as text: rename the folder"
            )
    return tuple(sorted(names))


def check_some_listed(counts: dict[str, int], source: str) -> None:
    """Raises SourceError if no class of `counts` (inputs listed per class) has any (if only some have none,
    --empty-classes says what becomes of them)."""
    empty = [name for name, n in counts.items() if n == 0]
    if empty and len(empty) == len(counts):
        raise SourceError(
            f"class {empty[0]!r} has no images in {source}"
            + (f" (and {len(empty) - 1} more empty)" if len(empty) > 1 else "")
        )


def check_splits(firsts: dict[str, str]) -> None:
    """Checks the split names SOURCE gives; `firsts` names an input of each, for the error.

    Raises:
        SourceError: a split name is unusable, or two differ only in case.
    """
    for split, path in firsts.items():
        try:
            check_split_name(split)
        except ValueError as exc:
            raise SourceError(f"{printable(path)}: {exc}") from None
    by_case: dict[str, str] = {}
    for split in sorted(firsts):
        other = by_case.setdefault(split.lower(), split)
        if other != split:
            raise SourceError(
                f"splits {other!r} and {split!r} differ only in case: their shard files would "
                "overwrite each other on a file system that ignores case (macOS, Windows); "
                "rename one"
            )


def finish_listing(
    refs: list[InputRef],
    rejects: list[Reject],
    found_classes: tuple[str, ...],
    classes: tuple[str, ...] | None,
    source: str,
) -> Listing:
    """Checks labels against the class list, and that some class has examples (what becomes of a class
    with none is for `--empty-classes` to say, once the images are read); sorts refs and rejects by path.

    Raises:
        SourceError: no class has examples, a split name is unusable, or two splits differ only in case.
    """
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
    check_some_listed(counts, source)
    firsts: dict[str, str] = {}  # split -> the first input of it
    for ref in kept:
        if ref.split is not None:
            firsts.setdefault(ref.split, ref.path)
    check_splits(firsts)
    kept.sort(key=lambda r: r.path)
    rejects.sort(key=lambda r: r.path)
    return Listing(tuple(kept), tuple(rejects), tuple(label_names))
