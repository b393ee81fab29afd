"""SOURCE as Parquet or Arrow tables: one file, a folder or object-store prefix of them, a Hugging Face
dataset's Parquet export (`data/train-00000-of-00002.parquet`, ...) or a `save_to_disk` folder (Arrow
streams, split folders of a DatasetDict).

Each row is one input, `file#row=N` (`table_files.row_path`, N counted over the file), read back by its
block and offset. The listing reads the label and split columns block by block, never the images (so the
driver holds no image bytes; it does hold one ref per row, as for folders). Which column is which:
`--image-column`, `--label-column`, `--split-column`, else the Hugging Face features in the schema's
metadata (`Image`, `ClassLabel` with its names), else the column types and names (`table_files.image_column`,
`_label_column`); a column named `split` gives the splits, else the files' names or folders
(`train-00000-of-00002.parquet`, `train/`, a DatasetDict's split folders).

Labels (`table_labels`): integers are ClassLabel names by id (-1, Hugging Face's "no label", is `no_label`),
or without names class names in numeric order (indexing `--classes` when given); strings are class names; a
list column (`Sequence(ClassLabel)`, a list of strings) makes a multi-label dataset (`multilabel`). Rejects
name file and row: `no_label`, `unknown_label`, `empty_label`, `bad_label`; `damaged_table` for the rows of a
block that cannot be read, or one reject for a file whose rows cannot be counted (no footer) or the rest of
an Arrow stream cut short.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import os
import posixpath
import re
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from prep.core import storage
from prep.core.config import TableColumns
from prep.core.errors import SourceError
from prep.core.listing import KNOWN_SPLITS, InputRef, Listing, Reject, finish_listing
from prep.core.sources import multilabel
from prep.core.sources.table_files import (
    TABLE_SUFFIXES,
    TableFile,
    describe,
    image_column,
    image_value,
    row_path,
)
from prep.core.sources.table_labels import label_column, row_label

if typing.TYPE_CHECKING:
    from prep.core.layout import PlanOptions

METADATA = frozenset({"dataset_info.json", "state.json", "dataset_dict.json", "README.md"})  # beside the tables
_SHARD = re.compile(r"^(?P<split>[A-Za-z0-9_]+?)-\d+-of-\d+$")  # Hugging Face's train-00000-of-00002
INT = re.compile(r"-?\d+")


def _visible(name: str) -> bool:
    return not any(p.startswith(".") for p in name.split("/"))


def only_tables(names: Iterable[str]) -> bool:
    """Whether the visible names are some Parquet or Arrow files (and a dataset's metadata files), read up to
    the first that is not (a folder of images is not walked whole)."""
    seen = False
    for name in filter(_visible, names):
        if name.endswith(TABLE_SUFFIXES):
            seen = True
        elif posixpath.basename(name) not in METADATA:
            return False
    return seen


def local_tables(source: str) -> list[str]:
    """SOURCE's table files relative to it if SOURCE is one table file or a folder of them, else []."""
    if os.path.isfile(source):
        return [os.path.basename(source)] if source.endswith(TABLE_SUFFIXES) else []
    if not os.path.isdir(source):
        return []
    files = []
    for top, dirs, names in os.walk(source):
        dirs.sort()
        for name in sorted(names):
            rel = os.path.relpath(os.path.join(top, name), source).replace(os.sep, "/")
            if not _visible(rel):
                continue
            if not rel.endswith(TABLE_SUFFIXES) and name not in METADATA:
                return []  # a folder of images: stop at its first one
            files.append(rel)
    return [f for f in files if f.endswith(TABLE_SUFFIXES)]


def remote_table(source: str) -> list[str]:
    """[its name] when a remote SOURCE is one Parquet or Arrow object, else [] (one request, for such a name)."""
    if storage.is_remote(source) and source.endswith(TABLE_SUFFIXES) and storage.is_file(source):
        return [posixpath.basename(source)]
    return []


def split_column(schema: Any, wanted: str | None, file: str) -> str | None:
    names = [f.name for f in schema]
    if wanted is not None and wanted not in names:
        raise SourceError(f"--split-column {wanted!r} is not a column of {file} (columns: {describe(schema)})")
    return wanted if wanted is not None else ("split" if "split" in names else None)


def file_split(rel: str, split_folders: frozenset[str]) -> str | None:
    """The split a file's path names: a split folder (`train/`, a DatasetDict's), a Hugging Face shard name
    (`train-00000-of-00002.parquet`; not `save_to_disk`'s `data-...`), or a split's name alone (`test.parquet`)."""
    parts = rel.split("/")
    for folder in reversed(parts[:-1]):
        if folder in KNOWN_SPLITS or folder in split_folders:
            return folder
    stem = parts[-1].rsplit(".", 1)[0]
    m = _SHARD.match(stem)
    if m is not None and m["split"] != "data":
        return m["split"]
    return stem if stem in KNOWN_SPLITS else None


class FileColumns(typing.NamedTuple):
    """A file's columns of images, labels and splits, and the ClassLabel names its labels are read by (its
    own, else the last earlier file's: as one pass over the files in name order would have them)."""

    image: str
    label: str
    split: str | None
    names: tuple[str, ...] | None


class TableTask(typing.NamedTuple):
    """One file to list (relative to SOURCE), the split its path names, and its columns; or why it cannot be
    read (`damaged`: its rows cannot be counted, one reject)."""

    task: int
    file: str
    split: str | None
    columns: FileColumns | None
    damaged: str | None = None


class TableSource(typing.NamedTuple):
    """Parquet or Arrow files to list, a task each, from their schemas only (`plan_tables`): all the driver
    holds is their names and columns."""

    source: str
    single: bool  # SOURCE is one file (its task's file is its name)
    tasks: tuple[TableTask, ...]
    names: tuple[str, ...] | None  # the ClassLabel names, when the schemas give them
    plan: PlanOptions | None = None  # the conversion's: a multi-label dataset's strata are dealt for its layout

    def path(self, task: TableTask) -> str:
        return self.source if self.single else storage.input_path(self.source, task.file)

    @property
    def splits(self) -> bool:
        """Whether the files or a split column name splits."""
        return any(t.split is not None or (t.columns and t.columns.split) for t in self.tasks)


def plan_tables(source: str, files: Sequence[str], layout: str, columns: TableColumns) -> TableSource:
    """The listing tasks of `files` (relative to SOURCE; SOURCE itself when it is one file), from each file's
    schema (a Parquet footer, an Arrow stream's first message): which column is which, and their splits.

    Raises:
        SourceError: a column cannot be found or is ambiguous, files disagree on columns or class names, or
            some files name a split and others do not.
    """
    single = len(files) == 1 and storage.is_file(source)
    visible = sorted(f for f in files if _visible(f))
    folders = _dataset_dict_splits(source) if not single else frozenset()
    splits = {f: (file_split(f, folders) if layout != "classes" else None) for f in visible}
    if len(set(splits.values())) > 1 and None in splits.values():
        named = sorted(f for f, s in splits.items() if s is not None)[0]
        other = sorted(f for f, s in splits.items() if s is None)[0]
        raise SourceError(f"{named} names a split and {other} does not: put every file in a split, or none")
    tasks, image, names = [], None, None
    for i, rel in enumerate(visible):
        try:
            table = TableFile(source if single else storage.input_path(source, rel))
        except Exception as exc:  # pyarrow's and each file system's own types
            detail = f"cannot read {rel} as Parquet or Arrow ({exc}): its rows cannot be counted"
            tasks.append(TableTask(i, rel, splits[rel], None, detail))
            continue
        with table:
            found = image_column(table.schema, columns.image, rel)
            if image is not None and found != image:
                raise SourceError(f"{rel}'s images are in column {found!r}, other files' in {image!r}")
            image = found
            label, own = label_column(table.schema, columns.label, rel)
            if own is not None and names is not None and own != names:
                raise SourceError(f"{rel}'s class names differ from other files': {list(own)} vs {list(names)}")
            names = own if own is not None else names
            split = split_column(table.schema, columns.split, rel)
        tasks.append(TableTask(i, rel, splits[rel], FileColumns(image, label, split, names)))
    return TableSource(source, single, tuple(tasks), names)


class Listed(typing.NamedTuple):
    """A file's rows listed: refs and rejects in row order; with a copy, each ref's image bytes' length in
    it (-1: not copied, the prepare step reads the row itself and says why it cannot)."""

    refs: list[InputRef]
    rejects: list[Reject]
    lengths: list[int]


def list_file(src: TableSource, task: TableTask, copy: typing.BinaryIO | None = None) -> Listed:
    """A task's rows, block by block: labels and splits, and with `copy` the images of the rows listed,
    appended to it in row order (one block's image column held at a time)."""
    out = Listed([], [], [])
    if task.columns is None:
        out.rejects.append(Reject(task.file, "damaged_table", task.damaged or "cannot be read"))
        return out
    try:
        table = TableFile(src.path(task))
    except Exception as exc:  # changed since it was planned: as the planning pass says a damaged file is told
        detail = f"cannot read {task.file} as Parquet or Arrow ({exc}): its rows cannot be counted"
        out.rejects.append(Reject(task.file, "damaged_table", detail))
        return out
    with table:
        _list_rows(table, task, out, copy)
    return out


def _list_rows(table: TableFile, task: TableTask, out: Listed, copy: typing.BinaryIO | None) -> None:
    cols = task.columns
    assert cols is not None  # list_file's
    rel, wanted = task.file, [cols.label] if cols.split is None else [cols.label, cols.split]
    stream = table.sizes is None
    blocks = table.blocks(wanted + [cols.image] if copy is not None else wanted)
    start = 0
    for index in range(len(table.sizes)) if table.sizes is not None else itertools.count():
        rows = table.sizes[index] if table.sizes is not None else 0
        try:
            if stream:  # an Arrow stream: read until it ends
                rows, block = next(blocks)
            else:
                block = table.block(index, wanted)
        except StopIteration:
            return
        except Exception as exc:  # pyarrow's types
            if stream:
                detail = f"{rel} cannot be read past row {start} ({exc}): its remaining rows cannot be counted"
                out.rejects.append(Reject(f"{rel}#row={start}", "damaged_table", detail))
                return
            detail = f"row group {index} of {rel} cannot be read ({exc})"
            out.rejects.extend(Reject(row_path(rel, start + i), "damaged_table", detail) for i in range(rows))
            start += rows
            continue
        labels = block.column(0).to_pylist()
        row_splits = block.column(1).to_pylist() if cols.split is not None else [task.split] * rows
        listed = []
        for i, (value, row_split) in enumerate(zip(labels, row_splits)):
            path = row_path(rel, start + i)
            name = row_label(path, value, cols.names)
            if isinstance(name, Reject):
                out.rejects.append(name)
            elif cols.split is not None and not row_split:
                out.rejects.append(Reject(path, "no_split", f"the {cols.split!r} column is null"))
            else:
                out.refs.append(InputRef(path, name, str(row_split) if row_split is not None else None))
                listed.append(i)
        if copy is not None:
            images = block.column(len(wanted)) if stream else _image_block(table, index, cols.image)
            for i in listed:
                data = image_value(images, i) if images is not None else None
                out.lengths.append(len(data) if isinstance(data, bytes) else -1)
                if isinstance(data, bytes):
                    copy.write(data)
        start += rows


def _image_block(table: TableFile, index: int, column: str) -> Any:
    """A Parquet row group's image column, or None when it cannot be read (the prepare step then reads
    each of its rows itself, and rejects them with the reason)."""
    try:
        return table.block(index, [column]).column(0)  # indexed as it is: no copy of the column
    except Exception:  # pyarrow's types
        return None


def list_tables(
    source: str, files: Sequence[str], layout: str, classes: tuple[str, ...] | None, columns: TableColumns
) -> Listing:
    """Every row of `files` (relative to SOURCE; SOURCE itself when it is one file), listed on the driver.

    Raises:
        SourceError: a column cannot be found or is ambiguous, files disagree, no row has a usable label.
    """
    src = plan_tables(source, files, layout, columns)
    refs: list[InputRef] = []
    rejects: list[Reject] = []
    for task in src.tasks:
        listed = list_file(src, task)
        refs += listed.refs
        rejects += listed.rejects
    if any(multilabel.is_multi(r.label) for r in refs):
        none = functools.partial(no_rows, source, len(src.tasks))
        return multilabel.listing(refs, rejects, classes if classes is not None else src.names, none)
    found = {ref.label for ref in refs}
    if src.names is None and classes is not None and found and all(INT.fullmatch(n) for n in found):
        kept = []
        for ref in refs:  # integer labels index --classes
            if 0 <= int(ref.label) < len(classes):
                kept.append(ref._replace(label=classes[int(ref.label)]))
            else:
                rejects.append(Reject(ref.path, "unknown_label", past_end(ref.label, classes)))
        refs = kept
    names = found_names(src.names, found)
    if not refs:
        raise no_rows(source, len(src.tasks), collections.Counter(r.reason for r in rejects))
    return finish_listing(refs, rejects, names, classes, source=source)


def past_end(label: str, classes: tuple[str, ...]) -> str:
    return f"label {label} is past the {len(classes)} names"


def found_names(names: tuple[str, ...] | None, found: set[str]) -> tuple[str, ...]:
    """The class names: the ClassLabel names, else the labels found (integers in numeric order)."""
    if names is not None:
        return names
    if found and all(INT.fullmatch(n) for n in found):
        return tuple(sorted(found, key=int))
    return tuple(sorted(found))


def no_rows(source: str, files: int, reasons: collections.Counter[str]) -> SourceError:
    return SourceError(
        f"no row of the {files} file(s) under {source} has an image and a usable label ("
        + (", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) or "no rows")
        + "); see --label-column"
    )


def _dataset_dict_splits(source: str) -> frozenset[str]:
    """The splits a `save_to_disk` DatasetDict names (its dataset_dict.json), whatever they are called."""
    path = storage.join(source, "dataset_dict.json")
    try:
        splits = json.loads(storage.read_bytes(path)).get("splits", []) if storage.exists(path) else []
    except (OSError, ValueError, AttributeError):
        return frozenset()
    return frozenset(s for s in splits if isinstance(s, str))
