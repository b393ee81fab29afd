"""The COCO reader's join of annotations to images, outside memory: an external hash join.

While the file streams by, each annotation is checked as far as it can be alone (its bbox and
segmentation, `coco._shape`) and spilled, as one JSON line, to one of `buckets` files chosen by a hash
of its `image_id`; annotations that name no usable id are Problems at once. Once the images and
categories are known, the buckets are joined one at a time: only one bucket's annotations are in memory
(the file's size over the bucket count, ~BUCKET_BYTES; lines wait up to BUFFER_BYTES before they are
appended to their buckets), and each image's objects go to the set's `FileStore` as they are
made. The images themselves (id, path, size: ~100 bytes each) stay in memory, as the listing holds every
image anyway. A file of one bucket (up to BUCKET_BYTES, or of unknown size) is joined whole, as that one
bucket would be: its records (`spill_record`, what `read_line` would read back) wait in memory and no
line is written or read, which is most of the cost of a small file's listing.

This is the driver's join (the embedded runner, `--resume`): spilling costs one write and one read of the
annotations on local disk, and no runner. On other runners the same join is a shuffle keyed on the image
(`coco_keyed`, beam_jobs/list_annotations.py), which reuses `spill_line`, `read_line` and `image_row`, so
both give the same rows and problems.
"""

from __future__ import annotations

import functools
import json
import os
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from prep.core.annotations.model import Json, Problem
from prep.core.annotations.rows import ImageRow, ObjectStore, columns_text, objects_text

ImageId = int | str  # an image's `id` in the file
# (relative path or None, file_name, width, height, position in 'images')
ImageEntry = tuple[str | None, str, int | None, int | None, int]
Shape = Callable[[Json], "Json | tuple[str, str]"]  # an annotation's object item (to_json, no "i"/"l") or why not
BUCKET_BYTES = 16 << 20
_COMPACT = {
    "separators": (",", ":"),
    "sort_keys": True,
}  # as rows.objects_text writes objects  # about the annotations' bytes per bucket: what one join step holds


MAX_BUCKETS = 4096  # past 64 GiB of annotations, buckets grow instead
BUFFER_BYTES = 32 << 20  # spilled lines held before they are appended to their buckets' files


def bucket_count(file_bytes: int | None) -> int:
    """Buckets for a file of `file_bytes` (None: unknown), so that one holds ~BUCKET_BYTES."""
    return min(MAX_BUCKETS, max(1, (file_bytes or 0) // BUCKET_BYTES + 1))


def _key(iid: object) -> object:
    """The join key of an annotation's image_id: a float with an integer value finds that integer id."""
    return int(iid) if isinstance(iid, float) and iid.is_integer() else iid


def _bucket(key: object, buckets: int) -> int:
    if buckets == 1:
        return 0
    return zlib.crc32(repr(key).encode("utf-8", "surrogatepass")) % buckets


def spill_line(file_name: str, position: int, ann: object, shape: Shape) -> tuple[object, str] | Problem:
    """(join key of its image id, the line it is spilled as) of annotation number `position`, or the Problem
    of one that names no usable image id. The line: its head `[position, image_id, id, category_id]` and
    the object's JSON (`shape`) around its "i" and "l", or the head with (reason, detail) why no object."""
    got = _spilled(file_name, position, ann, shape)
    if isinstance(got, Problem):
        return got
    key, head, made = got
    if isinstance(made, dict):  # the object's JSON around its "i" and "l", which sort between "f" and "p"
        before, after = _around(made)
        return key, f"{_ints(head) or json.dumps(head, **_COMPACT)}\t{before}\t{after}\n"  # type: ignore[arg-type]
    return key, json.dumps([*head, made], **_COMPACT) + "\n"  # type: ignore[arg-type]


def spill_record(file_name: str, position: int, ann: object, shape: Shape) -> tuple[object, list[Any]] | Problem:
    """`spill_line` as `read_line` reads its line back, without the text: (join key, record) or the Problem."""
    got = _spilled(file_name, position, ann, shape)
    if isinstance(got, Problem):
        return got
    key, head, made = got
    if _ints(head) is None:  # its values as the line's JSON gives them back (dict keys sorted, tuples as lists)
        head = json.loads(json.dumps(head, **_COMPACT))  # type: ignore[arg-type]
    if isinstance(made, dict):  # the object itself, not its text: `image_row` writes an image's objects at once
        return key, [*head, made]
    return key, [*head, list(made), []]


def _spilled(
    file_name: str, position: int, ann: object, shape: Shape
) -> tuple[object, list[Any], Json | tuple[str, str]] | Problem:
    """(join key, head, `shape`'s object or (reason, detail)) of an annotation, or the Problem of one that
    names no usable image id."""
    iid = ann.get("image_id") if isinstance(ann, dict) else None
    if iid is None or isinstance(iid, (list, dict, bool)):
        return unknown(file_name, position, ann, iid)
    assert isinstance(ann, dict)  # iid is not None
    return _key(iid), [position, iid, ann.get("id"), ann.get("category_id")], shape(ann)


def _ints(values: list[object]) -> str | None:
    """The compact JSON of a list of ints (not bools), as json.dumps writes it; None for other values."""
    if all(type(v) is int for v in values):
        return "[" + ",".join(map(str, values)) + "]"
    return None


def _number(value: object) -> str:
    """The JSON of a number or text `_num_out` gave: a finite float as json.dumps writes it (its repr)."""
    return float.__repr__(value) if isinstance(value, float) and type(value) is float else json.dumps(value)


def _around(made: Json) -> tuple[str, str]:
    """The object's compact JSON, keys sorted, without its braces, before and after its "i" and "l": the
    keys "a", "b" and "f" before, "p" and "r" after. Per annotation, so by hand for the numbers of "a", "b"
    and "f" (json.dumps' text, a test checks it), json.dumps for the rest."""
    head = []
    if "a" in made:
        head.append('"a":' + _number(made["a"]))
    head.append('"b":[' + ",".join(map(_number, made["b"])) + "]")
    if "f" in made:
        head.append('"f":' + json.dumps(made["f"]))
    if "p" not in made and "r" not in made:
        return ",".join(head), ""
    after = json.dumps({k: made[k] for k in ("p", "r") if k in made}, **_COMPACT)  # type: ignore[arg-type]
    return ",".join(head), after[1:-1]


def read_line(line: str) -> list[Any]:
    """A spilled line as [position, image_id, id, category_id, ..., parts]: parts the object's JSON around
    its "i" and "l" (`spill_line`), or [] for a problem, whose (reason, detail) comes before it."""
    head, *parts = line.rstrip("\n").split("\t")  # JSON text holds no raw tab
    record: list[Any]
    try:  # the usual head, four ints as `_ints` wrote them (never a form int() reads otherwise: "1_0", " 1")
        record = [int(v) for v in head[1:-1].split(",")] if parts else []
    except ValueError:
        record = []
    if len(record) != 4:
        record = json.loads(head)
    record.append(parts)
    return record


class Spill:
    """Annotations spilled to bucket files under `folder` (see the module docstring)."""

    def __init__(self, folder: str, buckets: int, file_name: str):
        self.folder, self.buckets, self.file_name = folder, buckets, file_name
        # One bucket is joined whole, in memory: its records wait there, never written (see the module docstring).
        self._records: list[list[Any]] | None = [] if buckets == 1 else None
        # Lines wait in memory and are appended a bucket at a time: one file open at once, whatever the count.
        self._waiting: dict[int, list[str]] = {}
        self._held = 0
        self.problems: list[Problem] = []  # annotations that name no usable image id, in file order

    def _path(self, bucket: int) -> str:
        return os.path.join(self.folder, f"bucket-{bucket:04d}.jsonl")

    def add(self, position: int, ann: object, shape: Shape) -> None:
        """Spills annotation number `position` of 'annotations' (or makes it a Problem)."""
        if self._records is not None:
            if type(ann) is dict:  # the usual annotation, ids all ints: `spill_record`'s record in fewer calls
                iid, aid, cid = ann.get("image_id"), ann.get("id"), ann.get("category_id")
                if type(iid) is int and type(aid) is int and type(cid) is int:
                    shaped = shape(ann)
                    self._records.append(
                        [position, iid, aid, cid, shaped]
                        if type(shaped) is dict
                        else [position, iid, aid, cid, list(shaped), []]
                    )
                    return
            record = spill_record(self.file_name, position, ann, shape)
            if isinstance(record, Problem):
                self.problems.append(record)
            else:
                self._records.append(record[1])
            return
        made = spill_line(self.file_name, position, ann, shape)
        if isinstance(made, Problem):
            self.problems.append(made)
            return
        key, line = made
        self._waiting.setdefault(_bucket(key, self.buckets), []).append(line)
        self._held += len(line)
        if self._held > BUFFER_BYTES:
            self.flush()

    def flush(self) -> None:
        """Appends the lines waiting in memory to their buckets' files."""
        for bucket, lines in sorted(self._waiting.items()):
            with open(self._path(bucket), "a", encoding="utf-8") as f:
                f.writelines(lines)
        self._waiting, self._held = {}, 0

    def join(
        self, images: dict[ImageId, ImageEntry], names: dict[int, str], store: ObjectStore
    ) -> tuple[list[ImageRow], list[tuple[int, Problem]]]:
        """Rows of the images (those inside SOURCE), and the problems of images and objects, each with
        its image's position in 'images' (which orders equal problems as the file does)."""
        self.flush()
        rows: list[ImageRow] = []
        problems: list[tuple[int, Problem]] = []
        seen: set[ImageId] = set()
        for i in range(self.buckets):
            per_image: dict[Any, list[list[Any]]] = {}  # ImageId -> records; Any: `_key` gives an ImageId here
            for record in self._bucket_records(i):
                iid = record[1]
                if iid not in images:
                    self.problems.append(unknown(self.file_name, record[0], {"id": record[2]}, iid))
                    continue
                per_image.setdefault(iid if type(iid) is int else _key(iid), []).append(record)
            for key, records in per_image.items():
                seen.add(key)
                image_row(key, images[key], records, names, store, rows, problems)
        for iid, entry in images.items():
            if iid not in seen:
                image_row(iid, entry, [], names, store, rows, problems)
        self.problems.sort(key=lambda p: p.box or 0)
        return rows, problems

    def _bucket_records(self, bucket: int) -> Iterator[list[Any]]:
        """The records of `bucket` (`read_line`'s), in file order; its file is removed once read."""
        if self._records is not None:
            records, self._records = self._records, []
            yield from records
            return
        if not os.path.exists(self._path(bucket)):
            return
        with open(self._path(bucket), encoding="utf-8") as f:
            for line in f:
                yield read_line(line)
        os.remove(self._path(bucket))


def unknown(file_name: str, position: int, ann: object, iid: object) -> Problem:
    why = "is not an object with an 'image_id'" if iid is None else f"names image id {iid!r}, not in 'images'"
    ann_id = ann.get("id") if isinstance(ann, dict) else None
    reason = "unknown_image" if iid is not None else "bad_annotation"
    return Problem(file_name, reason, f"annotations[{position}] (id {ann_id!r}) {why}", position)


@functools.lru_cache(maxsize=4096)
def _label_text(name: str) -> str:
    """A category name as JSON text: made once per name, not once per object."""
    return json.dumps(name)


def image_row(
    iid: ImageId,
    entry: ImageEntry,
    records: list[list[Any]],
    names: dict[int, str],
    store: ObjectStore,
    rows: list[ImageRow],
    problems: list[tuple[int, Problem]],
) -> None:
    """The row of one image from its annotations' records (in file order), and its problems."""
    rel, name, width, height, order = entry
    if rel is None:
        detail = f"image id {iid!r}: file_name {name!r} is outside SOURCE"
        problems.append((order, Problem(name, "outside_source", detail, boxes=len(records))))
        return
    objects: list[str] = []
    items: list[Json] = []  # `spill_record`'s objects: one json.dumps of them all, the same text as `objects`'
    labels, masks = [], False
    boxes: list[Any] = []  # and their columns (`rows.objects_text`), made in the same pass
    areas, flags, indices = [], [], []
    for index, record in enumerate(records):
        cid, parts = record[3], record[-1]
        label = None if isinstance(cid, (bool, list, dict)) else names.get(cid)
        if label is None:
            detail = f"annotation id {record[2]!r} names category id {cid!r}, not in 'categories'"
            problems.append((order, Problem(rel, "unknown_category", detail, index)))
        elif type(parts) is dict:  # a one-bucket join's record (`spill_record`): the object itself
            parts["i"], parts["l"] = index, label
            items.append(parts)
            labels.append(label)
            masks = masks or "p" in parts or "r" in parts
            boxes += parts["b"]  # four values: `shape` made it
            areas.append(parts.get("a"))
            flags.append(parts.get("f", 0))
            indices.append(index)
        elif parts:  # a spilled line's (`read_line`): the object's JSON around its "i" and "l"
            before, after = parts
            objects.append(f'{{{before},"i":{index},"l":{_label_text(label)}{"," + after if after else ""}}}')
            labels.append(label)
            masks = masks or bool(after)
        else:
            reason, detail = record[4]
            problems.append((order, Problem(rel, reason, detail, index)))
    assert not (items and objects), "an image's records all come from one join: in memory, or spilled"
    source_id = iid if isinstance(iid, int) else None
    if objects:  # as columns without masks, as a one-bucket join's (`objects_text`): its values from the text
        text = objects_text(json.loads("[" + ",".join(objects) + "]")) if not masks else "[" + ",".join(objects) + "]"
    else:
        text = columns_text(boxes, labels, areas, flags, indices) if items and not masks else objects_text(items)
    at = store.put(text)
    rows.append(ImageRow(rel, width, height, False, tuple(labels), masks, source_id, None, at))
