"""One annotation file per split, read as one dataset (`--annotations train=A --annotations validation=B`).

COCO 2017 ships `annotations/instances_{train,val}2017.json` whose `file_name`s are bare names
of the images in `train2017/` and `val2017/`. Each file is read against SOURCE; when its paths
are found more often in one folder just under SOURCE (its split's image folder) than in SOURCE
itself, they are taken as relative to that folder. Every image of a file gets the file's split.

The files are one dataset: they must name the same classes (or --classes picks them), and the
images of all of them are balanced, deduplicated and counted together. An image named by two
files is rejected `split_conflict` (its boxes counted), as a box file's row giving two splits.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Sequence

from prep.core.errors import OptionsError, SourceError
from prep.core.naming import check_split_name
from prep.core.storage import is_remote

if typing.TYPE_CHECKING:
    from prep.core.annotations import Problem
    from prep.core.annotations.rows import ImageRow, ObjectStore, RowSet

# (source, PATH, format, --classes, spill folder, store) -> the file's RowSet (`detection_inputs.read_rows`)
ReadRows = Callable[[str, str, "str | None", "tuple[str, ...] | None", str, "ObjectStore"], "RowSet"]


def image_folder(paths: Sequence[str], files: set[str]) -> str:
    """The folder just under SOURCE ('' for SOURCE itself) under which most of `paths` are files.

    SOURCE wins a tie, then the first folder by name: the choice never depends on listing order.
    """
    best, hits = "", sum(p in files for p in paths)
    for folder in sorted({f.split("/", 1)[0] for f in files if "/" in f}):
        n = sum(f"{folder}/{p}" in files for p in paths)
        if n > hits:
            best, hits = folder, n
    return best


def _moved(found: RowSet, folder: str, split: str) -> RowSet:
    """`found` with its image paths under `folder` and every image in `split`."""
    paths = {a.path for a in found.rows}

    def move(path: str) -> str:
        return f"{folder}/{path}" if folder and path in paths else path

    return found._replace(
        rows=tuple(a._replace(path=move(a.path), split=split) for a in found.rows),
        problems=tuple(p._replace(path=move(p.path)) for p in found.problems),
    )


def read_split_annotations(
    source: str,
    by_split: Sequence[tuple[str, str]],
    options: tuple[str | None, tuple[str, ...] | None],
    files: Sequence[str],
    spill: tuple[str, ObjectStore, ReadRows],
) -> RowSet:
    """The annotations of every (split, PATH) as one set, image paths relative to SOURCE.

    `options`: the format (None: detected) and --classes; `files`: the files under SOURCE (relative
    paths), where each file's image folder is looked for; `spill`: a local folder for the readers'
    spills, the store every file's objects go to, and the reader.

    Raises:
        SourceError: a file cannot be read, or two files name different classes.
    """
    from prep.core.annotations.rows import RowSet

    fmt, classes = options
    folder_of, store, read = spill
    present = set(files)
    sets = []
    for i, (split, path) in enumerate(by_split):
        work = os.path.join(folder_of, f"split-{i}")
        os.makedirs(work, exist_ok=True)
        found = read(source, path, fmt, classes, work, store)
        folder = image_folder([a.path for a in found.rows], present)
        sets.append((split, path, _moved(found, folder, split)))
    first_split, first_path, first = sets[0]
    images: dict[str, ImageRow] = {}
    problems: list[Problem] = []
    for split, path, found in sets:
        if [(c.name, c.source_id) for c in found.categories] != [(c.name, c.source_id) for c in first.categories]:
            raise SourceError(
                f"--annotations {split}={path} names other classes than {first_split}={first_path}: the splits of "
                "one dataset share their classes (--classes FILE keeps the ones named in it)"
            )
        problems += found.problems
        for ann in found.rows:
            if ann.path in images:
                other = images[ann.path].split
                detail = f"named by the annotations of split {other!r} and of split {split!r}"
                problems.append(_conflict(ann, detail))
                continue
            images[ann.path] = ann
    return RowSet(tuple(images[p] for p in sorted(images)), first.categories, tuple(problems), store)


def _conflict(ann: ImageRow, detail: str) -> Problem:
    from prep.core.annotations import Problem

    return Problem(ann.path, "split_conflict", detail, None, len(ann.labels))


def parse_annotations(value: str | Sequence[str] | None) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The --annotations values: (PATH, ()) for one PATH, (None, ((split, PATH), ...)) for SPLIT=PATH ones.

    Raises:
        OptionsError: several values not all SPLIT=PATH, a bad split name, or a split given twice.
    """
    values = [value] if isinstance(value, str) else list(value or ())
    pairs = [_split_path(v) for v in values]
    if not pairs:
        return None, ()
    if len(pairs) == 1 and pairs[0][0] is None:
        return values[0], ()
    by_split: dict[str, str] = {}
    for given, (split, path) in zip(values, pairs):
        if split is None:
            raise OptionsError(
                f"--annotations given more than once must each be SPLIT=PATH (train=a.json), got {given!r}"
            )
        if split in by_split:
            raise OptionsError(f"--annotations gives split {split!r} twice")
        by_split[split] = path
    return None, tuple(by_split.items())


def _split_path(value: str) -> tuple[str | None, str]:
    """(split, path) of SPLIT=PATH, or (None, value) when value is a path (one that exists keeps its '=')."""
    split, sep, path = value.partition("=")
    if not sep or not path or "/" in split or "\\" in split or is_remote(value) or os.path.exists(value):
        return None, value
    try:
        return check_split_name(split), path
    except ValueError as exc:
        raise OptionsError(f"--annotations {value!r}: {exc}") from None
