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

Labels: integers are ClassLabel names by id (-1, Hugging Face's "no label", is `no_label`), or without
names class names in numeric order (indexing `--classes` when given); strings are class names. Rejects name
file and row: `no_label`, `unknown_label`; `damaged_table` for the rows of a block that cannot be read, or
one reject for a file whose rows cannot be counted (no footer) or the rest of an Arrow stream cut short.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from typing import Any

from prep.core import storage
from prep.core.config import TableColumns
from prep.core.errors import SourceError
from prep.core.listing import KNOWN_SPLITS, InputRef, Listing, Reject, finish_listing
from prep.core.sources.table_files import (
    TABLE_SUFFIXES,
    TableFile,
    describe,
    hf_features,
    image_column,
    row_path,
)

METADATA = frozenset({"dataset_info.json", "state.json", "dataset_dict.json", "README.md"})  # beside the tables
LABEL_NAMES = ("label", "labels", "class", "category", "cls", "target", "fine_label")
_SHARD = re.compile(r"^(?P<split>[A-Za-z0-9_]+?)-\d+-of-\d+$")  # Hugging Face's train-00000-of-00002
_INT = re.compile(r"-?\d+")


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


def _label_column(schema: Any, wanted: str | None, file: str) -> tuple[str, tuple[str, ...] | None]:
    """The label column and its ClassLabel names (None when the metadata gives none)."""

    names = [f.name for f in schema]
    features = hf_features(schema)

    def class_names(column: str) -> tuple[str, ...] | None:
        feature = features.get(column)
        if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" and feature.get("names"):
            return tuple(str(n) for n in feature["names"])
        return None

    if wanted is not None:
        if wanted not in names:
            raise SourceError(f"--label-column {wanted!r} is not a column of {file} (columns: {describe(schema)})")
        found = [wanted]
    else:
        found = [n for n in names if class_names(n) is not None]
        if not found:
            usable = {f.name for f in schema if _label_type(f.type)}
            found = [n for n in LABEL_NAMES if n in usable]
    if len(found) != 1:
        which = f"several label columns ({', '.join(found)})" if found else "no label column"
        raise SourceError(f"{file} has {which}: name one with --label-column (columns: {describe(schema)})")
    kind = schema.field(found[0]).type
    if not _label_type(kind):
        raise SourceError(f"label column {found[0]!r} of {file} is {kind}: labels are integers or strings")
    return found[0], class_names(found[0])


def _label_type(kind: Any) -> bool:
    """Whether a column of this type holds labels: integers or strings (pandas' categoricals too)."""
    import pyarrow as pa

    kind = kind.value_type if pa.types.is_dictionary(kind) else kind
    return bool(pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _split_column(schema: Any, wanted: str | None, file: str) -> str | None:
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


class _Rows:
    """The listing in progress: refs, rejects, and the class names a ClassLabel gives."""

    def __init__(self, columns: TableColumns) -> None:
        self.columns = columns
        self.refs: list[InputRef] = []
        self.rejects: list[Reject] = []
        self.names: tuple[str, ...] | None = None
        self.image: str | None = None  # the image column, the same in every file

    def label(self, path: str, value: object, names: tuple[str, ...] | None) -> str | None:
        """The row's class name, or None after rejecting it."""
        if value is None or value == "":
            self.rejects.append(Reject(path, "no_label", "the label is null"))
        elif isinstance(value, str):
            return value
        elif names is None:
            return str(value)
        elif value == -1:
            self.rejects.append(Reject(path, "no_label", "label -1 (Hugging Face's no label)"))
        elif not 0 <= int(str(value)) < len(names):
            self.rejects.append(Reject(path, "unknown_label", f"label {value} is past the {len(names)} class names"))
        else:
            return names[int(str(value))]
        return None

    def add_file(self, full: str, rel: str, split: str | None) -> None:
        """One file's rows, block by block."""
        try:
            table = TableFile(full)
        except Exception as exc:  # pyarrow's and each file system's own types
            detail = f"cannot read {rel} as Parquet or Arrow ({exc}): its rows cannot be counted"
            self.rejects.append(Reject(rel, "damaged_table", detail))
            return
        with table:
            image = image_column(table.schema, self.columns.image, rel)
            if self.image is not None and image != self.image:
                raise SourceError(f"{rel}'s images are in column {image!r}, other files' in {self.image!r}")
            self.image = image
            label, names = _label_column(table.schema, self.columns.label, rel)
            if names is not None and self.names is not None and names != self.names:
                raise SourceError(f"{rel}'s class names differ from other files': {list(names)} vs {list(self.names)}")
            self.names = names if names is not None else self.names
            splits = _split_column(table.schema, self.columns.split, rel)
            wanted = [label] if splits is None else [label, splits]
            self._rows(table, rel, wanted, split)

    def _rows(self, table: TableFile, rel: str, wanted: list[str], split: str | None) -> None:
        start = 0
        blocks = table.blocks(wanted)
        for index in range(len(table.sizes)) if table.sizes is not None else itertools.count():
            rows = table.sizes[index] if table.sizes is not None else 0
            try:
                if table.sizes is None:  # an Arrow stream: read until it ends
                    rows, block = next(blocks)
                else:
                    block = table.block(index, wanted)
            except StopIteration:
                return
            except Exception as exc:  # pyarrow's types
                if table.sizes is None:
                    detail = f"{rel} cannot be read past row {start} ({exc}): its remaining rows cannot be counted"
                    self.rejects.append(Reject(f"{rel}#row={start}", "damaged_table", detail))
                    return
                detail = f"row group {index} of {rel} cannot be read ({exc})"
                self.rejects += [Reject(row_path(rel, start + i), "damaged_table", detail) for i in range(rows)]
                start += rows
                continue
            labels = block.column(0).to_pylist()
            row_splits = block.column(1).to_pylist() if len(wanted) > 1 else [split] * rows
            for i, (value, row_split) in enumerate(zip(labels, row_splits)):
                path = row_path(rel, start + i)
                name = self.label(path, value, self.names)
                if name is None:
                    continue
                if len(wanted) > 1 and not row_split:
                    self.rejects.append(Reject(path, "no_split", f"the {wanted[1]!r} column is null"))
                    continue
                self.refs.append(InputRef(path, name, str(row_split) if row_split is not None else None))
            start += rows


def list_tables(
    source: str, files: Sequence[str], layout: str, classes: tuple[str, ...] | None, columns: TableColumns
) -> Listing:
    """Every row of `files` (relative to SOURCE; SOURCE itself when it is one file), listed on the driver.

    Raises:
        SourceError: a column cannot be found or is ambiguous, files disagree, no row has a usable label.
    """
    single = len(files) == 1 and storage.is_file(source)
    visible = sorted(f for f in files if _visible(f))
    folders = _dataset_dict_splits(source) if not single else frozenset()
    splits = {f: (file_split(f, folders) if layout != "classes" else None) for f in visible}
    if len(set(splits.values())) > 1 and None in splits.values():
        named = sorted(f for f, s in splits.items() if s is not None)[0]
        other = sorted(f for f, s in splits.items() if s is None)[0]
        raise SourceError(f"{named} names a split and {other} does not: put every file in a split, or none")
    rows = _Rows(columns)
    for rel in visible:
        rows.add_file(source if single else storage.input_path(source, rel), rel, splits[rel])
    refs, rejects = rows.refs, rows.rejects
    found = {ref.label for ref in refs}
    if rows.names is None and classes is not None and found and all(_INT.fullmatch(n) for n in found):
        kept = []
        for ref in refs:  # integer labels index --classes
            if 0 <= int(ref.label) < len(classes):
                kept.append(ref._replace(label=classes[int(ref.label)]))
            else:
                rejects.append(Reject(ref.path, "unknown_label", f"label {ref.label} is past the {len(classes)} names"))
        refs = kept
    if rows.names is not None:
        names = rows.names
    elif found and all(_INT.fullmatch(n) for n in found):
        names = tuple(sorted(found, key=int))
    else:
        names = tuple(sorted({ref.label for ref in refs}))
    if not refs:
        reasons = collections.Counter(r.reason for r in rejects)
        raise SourceError(
            f"no row of the {len(visible)} file(s) under {source} has an image and a usable label ("
            + (", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) or "no rows")
            + "); see --label-column"
        )
    return finish_listing(refs, rejects, names, classes, source=source)


def _dataset_dict_splits(source: str) -> frozenset[str]:
    """The splits a `save_to_disk` DatasetDict names (its dataset_dict.json), whatever they are called."""
    path = storage.join(source, "dataset_dict.json")
    try:
        splits = json.loads(storage.read_bytes(path)).get("splits", []) if storage.exists(path) else []
    except (OSError, ValueError, AttributeError):
        return frozenset()
    return frozenset(s for s in splits if isinstance(s, str))
