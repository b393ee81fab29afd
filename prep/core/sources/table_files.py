"""Parquet and Arrow files (as Hugging Face `datasets` writes them) read block by block, and one row's image
read back from its input path (`row_path`: `data/train-00000-of-00002.parquet#row=1234`).

A block is a Parquet row group, or a record batch of an Arrow IPC stream (`save_to_disk`'s
`data-00000-of-00001.arrow`; the IPC file format is read too). Only the columns asked for are read, one
block at a time: the listing reads labels and splits, never image bytes. A row is read back by its block
and offset (`read_row`); a block's image column is decoded whole, so each process keeps the last few in a
small cache bounded in bytes (`_CACHE_BYTES`): rows of one block read together cost one decode. A damaged
file or block gives (reason, detail), never an exception.

pyarrow is imported lazily: the pure core imports without it.
"""

from __future__ import annotations

import collections
import json
import os
import posixpath
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prep.core import storage
from prep.core.errors import SourceError

TABLE_SUFFIXES = (".parquet", ".arrow")
_ROW = re.compile(r"^(?P<file>.+\.(?:parquet|arrow))#row=(?P<row>\d+)$", re.S)
_CACHE_BYTES = 256 << 20  # decoded image columns kept per process
_CACHE_BLOCKS = 64
_SIGNATURE_SECONDS = 60.0
_SIGNATURES: dict[str, tuple[float, str]] = {}  # remote file -> (when asked, its signature), `input_signature`


def row_path(file: str, row: int) -> str:
    """An input path: row `row` (counted from 0 over the whole file) of `file`, relative to SOURCE."""
    return f"{file}#row={row}"


def parse_row(path: str) -> tuple[str, int] | None:
    """(file, row) of a row path (`row_path`, possibly under SOURCE), else None.

    SOURCE may be one file: its rows are `name.parquet#row=N` under it, so that `image/filename` names the
    file; the file's path then ends in its own name twice (`d/a.parquet/a.parquet`), which is undone here.
    """
    m = _ROW.match(path)
    if m is None:
        return None
    file = m["file"]
    parent = posixpath.dirname(file)
    if posixpath.basename(parent) == posixpath.basename(file) and storage.is_file(parent):
        file = parent
    return file, int(m["row"])


def input_signature(path: str, data: bytes | None = None) -> str | None:
    """`storage.signature` of the file a row path names; None if `path` is no row path.

    With `data` (the prepare step, which has just read the row), a remote file's signature is reused for
    `_SIGNATURE_SECONDS`: asked for each row it cost 2 requests an image (bench/scale_sim.py --parquet). A
    change inside that window shows at a resume all the same, whose check (no `data`) always asks.
    """
    where = parse_row(path)
    if where is None:
        return None
    file = where[0]
    if data is None or not storage.is_remote(file):
        return storage.signature(file)
    now = time.monotonic()
    known = _SIGNATURES.get(file)
    if known is not None and now - known[0] < _SIGNATURE_SECONDS:
        return known[1]
    if len(_SIGNATURES) >= _CACHE_BLOCKS * 16:
        _SIGNATURES.clear()
    signature = storage.signature(file)
    _SIGNATURES[file] = (now, signature)
    return signature


class TableFile:
    """One open Parquet or Arrow file: its schema and its blocks' row counts, then blocks of columns.

    Raises (on opening):
        OSError, pyarrow.ArrowException: the file cannot be read as Parquet or Arrow.
    """

    def __init__(self, path: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path = path
        self._parquet: Any = None
        self._batches: Any = None  # an Arrow stream: read in order, once
        if storage.is_remote(path):
            self._file: Any = storage.open_read(path)
        else:
            self._file = pa.memory_map(path)  # an Arrow file's batches then cost no copy
        if path.endswith(".parquet"):
            self._parquet = pq.ParquetFile(self._file)
            meta = self._parquet.metadata
            self.schema = self._parquet.schema_arrow
            self.sizes: list[int] | None = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
            return
        try:
            reader = pa.ipc.open_file(self._file)
            self.schema = reader.schema
            self.sizes = None
            self._batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:  # no footer: the stream format, as `save_to_disk` writes it
            self._file.seek(0)
            stream = pa.ipc.open_stream(self._file)
            self.schema, self.sizes, self._batches = stream.schema, None, iter(stream)

    def __enter__(self) -> TableFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def blocks(self, columns: Sequence[str]) -> Iterator[tuple[int, Any]]:
        """(rows in the block, its `columns` as a pyarrow Table or RecordBatch) for each block in order.

        Raises:
            pyarrow.ArrowException, OSError: a block cannot be read; for Parquet, the next call may go on
            at the next block (`block`), an Arrow stream ends there.
        """
        if self._parquet is not None:
            for i, rows in enumerate(self.sizes or ()):
                yield rows, self._parquet.read_row_group(i, columns=list(columns))
            return
        for batch in self._batches:
            yield batch.num_rows, batch.select(list(columns))

    def block(self, index: int, columns: Sequence[str]) -> Any:
        """Parquet only: row group `index`'s `columns`."""
        return self._parquet.read_row_group(index, columns=list(columns))


def image_value(column: Any, offset: int) -> bytes | tuple[str, str]:
    """The image bytes at `offset` of an image column (binary, or the Hugging Face struct {bytes, path})."""
    import pyarrow as pa

    if pa.types.is_struct(column.type):
        value = column[offset]
        if not value.is_valid:
            return "no_image", "the image is null"
        data, where = value.get("bytes"), value.get("path")
        if data is None or not data.is_valid:
            named = where.as_py() if where is not None and where.is_valid else None
            return "no_image", (f"the image has a path ({named}) but no bytes" if named else "the image has no bytes")
        return bytes(data.as_py())
    value = column[offset]
    return bytes(value.as_py()) if value.is_valid else ("no_image", "the image is null")


Key = tuple[str, str, str, int]  # (file, its signature, column, block)
Meta = tuple[list[int], str]  # a Parquet file's row group sizes, and its image column


class _Cache:
    """Decoded image columns of the last blocks read in this process, bounded in bytes, and files' block sizes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocks: collections.OrderedDict[Key, Any] = collections.OrderedDict()
        self._meta: collections.OrderedDict[tuple[str, str, str | None], Meta] = collections.OrderedDict()
        self._bytes = 0

    def get(self, key: Key) -> Any:
        with self._lock:
            found = self._blocks.get(key)
            if found is not None:
                self._blocks.move_to_end(key)
            return found

    def put(self, key: Key, column: Any) -> None:
        with self._lock:
            if key in self._blocks:
                return
            self._blocks[key] = column
            self._bytes += column.nbytes
            while self._blocks and (self._bytes > _CACHE_BYTES or len(self._blocks) > _CACHE_BLOCKS):
                self._bytes -= self._blocks.popitem(last=False)[1].nbytes

    def meta(self, file: tuple[str, str, str | None], found: Meta | None = None) -> Meta | None:
        """A Parquet file's row group sizes and image column, as `found` says (then kept) or as kept before."""
        with self._lock:
            if found is not None:
                self._meta[file] = found
                while len(self._meta) > _CACHE_BLOCKS:
                    self._meta.popitem(last=False)
            return self._meta.get(file)


_CACHE = _Cache()  # a cache only: what it returns is what the file holds (keyed by the file's signature)


def read_row(path: str, column: str | None) -> bytes | tuple[str, str] | None:
    """The image bytes of a row path's row, (reason, detail) if they cannot be read, or None if `path` is no
    row path. `column`: the image column (--image-column), else the one `image_column` finds."""
    where = parse_row(path)
    if where is None:
        return None
    file, row = where
    if not storage.is_remote(file) and not os.path.isfile(file):
        return "missing", f"file {file} does not exist"
    signature = storage.signature(file) if not storage.is_remote(file) else ""
    try:
        found = _find((file, signature, column), row)
    except SourceError as exc:
        return "no_image", str(exc)
    except Exception as exc:  # pyarrow's and each file system's own types
        return "damaged_table", f"row {row} of {file} cannot be read: {exc}"
    if found is None:
        return "missing", f"{file} has no row {row}"
    return image_value(*found)


def _locate(sizes: list[int], row: int) -> tuple[int, int] | None:
    """(block, offset in it) of `row`."""
    start = 0
    for index, rows in enumerate(sizes):
        if row < start + rows:
            return index, row - start
        start += rows
    return None


def _find(file: tuple[str, str, str | None], row: int) -> tuple[Any, int] | None:
    """(the decoded image column of the block holding `row`, the row's offset in it), through the cache."""
    path, signature, wanted = file
    meta = _CACHE.meta(file)
    place = _locate(meta[0], row) if meta is not None else None
    if meta is not None and place is not None:
        hit = _CACHE.get((path, signature, meta[1], place[0]))
        if hit is not None:
            return hit, place[1]
    with TableFile(path) as table:
        column = image_column(table.schema, wanted, path)
        if table.sizes is None:  # Arrow: blocks found by reading them in order (memory-mapped, no copy)
            start = 0
            for rows, batch in table.blocks([column]):
                if row < start + rows:
                    return batch.column(0), row - start
                start += rows
            return None
        _CACHE.meta(file, (table.sizes, column))
        place = _locate(table.sizes, row)
        if place is None:
            return None
        data = table.block(place[0], [column]).column(0).combine_chunks()
        _CACHE.put((path, signature, column, place[0]), data)
        return data, place[1]


IMAGE_NAMES = ("image", "img", "jpg", "jpeg", "png", "webp", "picture", "photo")  # tried when the type does not say


def hf_features(schema: Any) -> dict[str, Any]:
    """The Hugging Face features a file's schema metadata describes (its `huggingface` key), else {}."""
    raw = (schema.metadata or {}).get(b"huggingface")
    try:
        features = json.loads(raw)["info"]["features"] if raw else {}
    except (ValueError, KeyError, TypeError):
        return {}
    return features if isinstance(features, dict) else {}


def describe(schema: Any) -> str:
    """The columns and their types, for an error to list."""
    return ", ".join(f"{field.name} ({field.type})" for field in schema)


def image_column(schema: Any, wanted: str | None, file: str) -> str:
    """The column that holds the images: `wanted` (--image-column), else the one column of the Hugging Face
    `Image` feature, else of the struct {bytes, path} or binary type (one named like an image if several).

    Raises:
        SourceError: none is found, or several, naming the columns.
    """
    import pyarrow as pa

    names = [field.name for field in schema]
    if wanted is not None:
        if wanted not in names:
            raise SourceError(f"--image-column {wanted!r} is not a column of {file} (columns: {describe(schema)})")
        return wanted
    features = hf_features(schema)
    found = [n for n in names if isinstance(features.get(n), dict) and features[n].get("_type") == "Image"]
    if not found:
        binary = (pa.types.is_binary, pa.types.is_large_binary)

        def holds_image(t: Any) -> bool:
            if pa.types.is_struct(t):
                return t.get_field_index("bytes") >= 0 and any(f(t.field("bytes").type) for f in binary)
            return any(f(t) for f in binary)

        found = [field.name for field in schema if holds_image(field.type)]
        named = [n for n in found if n.lower() in IMAGE_NAMES]
        found = named if len(found) > 1 and len(named) == 1 else found
    if len(found) != 1:
        which = f"several image columns ({', '.join(found)})" if found else "no image column"
        raise SourceError(f"{file} has {which}: name one with --image-column (columns: {describe(schema)})")
    return str(found[0])
