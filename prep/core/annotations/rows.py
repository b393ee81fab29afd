"""Annotation sets whose objects wait in a store: what a detection listing reads, in bounded memory.

An `ImageRow` is an image's annotation without its objects' geometry: those are one compact JSON text
(the `"o"` list of `ImageAnnotation.to_json`, keys sorted) in an `ObjectStore`, in memory for small
readers or in a file beside the COCO reader's spill (`FileStore`). `RowSet` is `AnnotationSet` in that
form: rows sorted by path, categories in id order, problems in the readers' stable order.

An image's objects without masks are held as columns (`objects_text`): one list per field, not an object
per box, so that neither the listing nor the record of the image makes a Python object per box.

`listing_extra` builds the listing's `InputRef.extra` of a row: the same text as
`json.dumps({"a": annotation.to_json(), "s": source_id}, separators=(",", ":"), sort_keys=True)`, but for
objects held as columns, which go under "c" instead of "o" (`model.objects_json` reads either).
"""

from __future__ import annotations

import json
import os
import typing
from array import array
from collections.abc import Iterable, Sequence

from prep.core.annotations.model import (
    AnnotationSet,
    Category,
    ImageAnnotation,
    Problem,
    choose_categories,
    objects_json,
)

_COMPACT = {"separators": (",", ":"), "sort_keys": True}
# json.dumps' text with _COMPACT: an encoder made once, not by each call (per image of a listing)
_encode = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


class ImageRow(typing.NamedTuple):
    """One image's annotation; its objects are `store.get(at)`."""

    path: str
    width: int | None
    height: int | None
    normalized: bool
    labels: tuple[str, ...]  # each object's label, in the objects' order
    masks: bool  # an object has polygons or RLE
    source_id: int | None
    split: str | None
    at: int


class ObjectStore:
    """Objects' JSON texts kept in memory."""

    def __init__(self) -> None:
        self._texts: list[str] = []

    def put(self, text: str) -> int:
        self._texts.append(text)
        return len(self._texts) - 1

    def get(self, at: int) -> str:
        return self._texts[at]

    def close(self) -> None:
        """Lets go of what the store holds (a file store's file)."""


class FileStore(ObjectStore):
    """Objects' JSON texts appended to a file (UTF-8), read back by position: memory O(rows)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._file = open(path, "w+b")  # noqa: SIM115  # closed by `close`, with the spill it belongs to
        self._starts = array("q", [0])
        self._at_end = True  # no `get` moved the file's position since the last `put`

    def put(self, text: str) -> int:
        # A listing puts every image's text, then gets them: a seek (and the buffer's flush) only after a get
        if not self._at_end:
            self._file.seek(0, os.SEEK_END)
            self._at_end = True
        data = text.encode("utf-8")
        self._file.write(data)
        self._starts.append(self._starts[-1] + len(data))
        return len(self._starts) - 2

    def get(self, at: int) -> str:
        self._at_end = False
        self._file.seek(self._starts[at])
        return self._file.read(self._starts[at + 1] - self._starts[at]).decode("utf-8")

    def close(self) -> None:
        self._file.close()


class RowSet(typing.NamedTuple):
    """What a reader found, objects in `store`: rows sorted by path, categories in id order, problems."""

    rows: tuple[ImageRow, ...]
    categories: tuple[Category, ...]
    problems: tuple[Problem, ...]
    store: ObjectStore


_PLAIN_KEYS = frozenset("abfil")  # an object of these keys only (no mask) can be held in columns


def objects_text(items: list[dict[str, typing.Any]]) -> str:
    """The stored text of an image's objects (`ImageAnnotation.to_json`'s "o" items): their columns' compact
    JSON, {"b": the boxes one after the other, "l": labels, "a": areas (null: none given), "f": flags, "i":
    indices}, "a", "f" and "i" left out when no object has an area, no flag is set and the indices count
    from 0; or the items' own when there is none, or one has a mask or is not four numbers."""
    boxes: list[typing.Any] = []
    labels, areas, flags, indices = [], [], [], []
    for item in items:  # per box of every image listed
        box = item["b"]
        if len(box) != 4 or not _PLAIN_KEYS.issuperset(item):
            return json.dumps(items, **_COMPACT)  # type: ignore[arg-type]
        boxes += box
        labels.append(item["l"])
        areas.append(item.get("a"))
        flags.append(item.get("f", 0))
        indices.append(item["i"])
    return columns_text(boxes, labels, areas, flags, indices) if items else "[]"


def columns_text(
    boxes: list[typing.Any], labels: list[str], areas: list[typing.Any], flags: list[int], indices: list[int]
) -> str:
    """`objects_text` of plain objects given as their columns (areas None where none is given)."""
    columns: dict[str, list[typing.Any]] = {"b": boxes, "l": labels}
    if areas.count(None) < len(areas):
        columns["a"] = areas
    if any(flags):
        columns["f"] = flags
    if indices != list(range(len(indices))):
        columns["i"] = indices
    return _encode(columns)


def objects_of(text: str) -> list[dict[str, typing.Any]]:
    """The "o" items of an image's stored objects (`objects_text`)."""
    got = json.loads(text)
    return got if isinstance(got, list) else objects_json({"c": got})


def row_of(ann: ImageAnnotation, store: ObjectStore) -> ImageRow:
    """The row of `ann`, its objects put in `store`."""
    masks = any(o.polygons or o.rle is not None for o in ann.objects)
    at = store.put(objects_text(ann.to_json()["o"]))
    labels = tuple(o.label for o in ann.objects)
    return ImageRow(ann.path, ann.width, ann.height, ann.normalized, labels, masks, ann.source_id, ann.split, at)


def rows_of(found: AnnotationSet, store: ObjectStore | None = None) -> RowSet:
    """`found` as a RowSet whose objects go to `store` (a new one in memory if None)."""
    store = ObjectStore() if store is None else store
    return RowSet(tuple(row_of(a, store) for a in found.images), found.categories, found.problems, store)


def annotation(row: ImageRow, store: ObjectStore) -> ImageAnnotation:
    """The ImageAnnotation of `row`."""
    return ImageAnnotation.from_json({**_small(row), "o": objects_of(store.get(row.at))})


def annotation_set(found: RowSet) -> AnnotationSet:
    """`found` with every object in memory (`AnnotationSet`)."""
    return AnnotationSet(tuple(annotation(r, found.store) for r in found.rows), found.categories, found.problems)


def listing_extra(row: ImageRow, store: ObjectStore, source_id: str) -> str:
    """The listing's extra of `row`: {"a": its annotation, "s": image/source_id} as compact sorted JSON, its
    objects under "c" when they are columns (`objects_text`)."""
    text = store.get(row.at)
    # "c" is the first key, "o" sorts after "h" and "n", whose values are numbers: the first '"c":0' or '"o":0'
    # is the placeholder.
    key = '"c"' if text.startswith("{") else '"o"'
    head = _encode({"a": {**_small(row), key[1]: 0}, "s": source_id})
    return head.replace(key + ":0", key + ":" + text, 1)


def _small(row: ImageRow) -> dict[str, typing.Any]:
    """`ImageAnnotation.to_json` of `row` without "o"."""
    out: dict[str, typing.Any] = {"p": row.path}
    for key, value in (("w", row.width), ("h", row.height), ("s", row.source_id), ("t", row.split)):
        if value is not None:
            out[key] = value
    if row.normalized:
        out["n"] = 1
    return out


def finish_rows(
    rows: Iterable[ImageRow],
    found: Sequence[tuple[int | str | None, str]],
    classes: tuple[str, ...] | None,
    problems: list[Problem],
    store: ObjectStore,
) -> RowSet:
    """`model.finish` for rows: categories (or --classes, whose unknown labels become Problems), rows
    sorted by path, problems in a stable order."""
    categories = choose_categories(found, classes)
    kept = list(rows)
    if classes is not None:
        known = {c.name for c in categories}
        kept = [_keep_known(r, known, problems, store) for r in kept]
    kept.sort(key=lambda r: r.path)
    ordered = sorted(problems, key=lambda p: (p.path, -1 if p.box is None else p.box, p.reason))
    return RowSet(tuple(kept), tuple(categories), tuple(ordered), store)


def _keep_known(row: ImageRow, known: set[str], problems: list[Problem], store: ObjectStore) -> ImageRow:
    """`model.keep_known` for a row."""
    if all(label in known for label in row.labels):
        return row
    kept = []
    for item in objects_of(store.get(row.at)):
        if item["l"] in known:
            kept.append(item)
        else:
            detail = f"label {item['l']!r} is not one of the classes (--classes)"
            problems.append(Problem(row.path, "unknown_class", detail, item["i"]))
    masks = any("p" in item or "r" in item for item in kept)
    labels = tuple(item["l"] for item in kept)
    return row._replace(labels=labels, masks=masks, at=store.put(objects_text(kept)))
