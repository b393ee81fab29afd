"""A COCO instances JSON joined to its images by a shuffle keyed on the image: the pure parts of
beam_jobs/list_annotations.py, which gives the same RowSet as the driver's `coco.read_coco_rows`.

* `stream_file` (a worker task a file): streams the file (`coco.scan`) in bounded memory, yielding each
  image as an `ImageSeen` and each annotation as an `AnnotationSeen` (its spilled line, `coco_join.spill_line`),
  both keyed by the image id (`join_key`), an annotation that names no usable id as a `FileProblem`, a
  malformed image entry as an `ImageFault`, and last the file's `FileRead` (its categories, or why it is no
  COCO file).
* `join_image` (a task a key, after a GroupByKey): the image's row and its objects' JSON (`Joined`, made by
  `coco_join.image_row`), its problems (`ImageProblem`, with their place in the file), or the annotations'
  `unknown_image` problems when no image has the id; an id given twice is an `ImageFault`.
* `claimed_twice` (a task a path, after a GroupByKey): two image ids that name one path, an `ImageFault`.
* `file_rows`: the RowSet of a file from all of that, raising the first fault as the driver's reader does
  (categories, then images in file order, then annotations), problems in the reader's order.

The driver's reader checks images one by one and stops at the first fault; here each fault is found on
its own and the one at the lowest position wins (at one position: a malformed entry, then a repeated id,
then a repeated path, the reader's order), which is the same fault: every image before it is sound.
"""

from __future__ import annotations

import posixpath
import typing
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from prep.core.annotations import coco
from prep.core.annotations.coco_join import ImageEntry, ImageId, image_row, read_line, spill_line, unknown
from prep.core.annotations.model import Problem
from prep.core.annotations.rows import ImageRow, ObjectStore, RowSet, finish_rows
from prep.core.errors import SourceError

MALFORMED, REPEATED_ID, REPEATED_PATH = 0, 1, 2  # a fault's rank among those at one position


class CocoFile(typing.NamedTuple):
    """An --annotations COCO file to stream on a worker: `file`, its number among the conversion's files."""

    file: int
    path: str
    source: str  # the folder its file_names are relative to (SOURCE)

    @property
    def file_name(self) -> str:
        return posixpath.basename(self.path.replace("\\", "/"))


class ImageSeen(typing.NamedTuple):
    file: int
    iid: ImageId
    entry: ImageEntry  # (relative path or None, file_name, width, height, position in 'images')


class AnnotationSeen(typing.NamedTuple):
    file: int
    position: int
    key: bytes  # `join_key` of its image id
    line: str  # as spilled (`coco_join.spill_line`)


class FileProblem(typing.NamedTuple):
    """A problem of the file, not of an image (`unknown_image`, `bad_annotation`): its box is its position."""

    file: int
    problem: Problem


class ImageFault(typing.NamedTuple):
    """A fault that makes the file no COCO file, at `position` in 'images'."""

    file: int
    position: int
    rank: int  # MALFORMED, REPEATED_ID or REPEATED_PATH
    detail: str


class FileRead(typing.NamedTuple):
    """What streaming a file found besides its images and annotations."""

    file: int
    early: str | None  # the error before any image's fault: unreadable, not JSON, categories
    images: str | None  # the 'images' section's fault (not a list)
    annotations: str | None  # the 'annotations' section's fault (not a list)
    categories: tuple[tuple[int, str], ...]  # (source id, name) in id order


class Joined(typing.NamedTuple):
    file: int
    order: int  # the image's position in 'images'
    row: ImageRow  # its `at` means nothing: the objects are `text`
    text: str


class ImageProblem(typing.NamedTuple):
    file: int
    order: int  # its image's position in 'images'
    seq: int  # its place among the image's problems
    problem: Problem


def join_key(iid: object) -> bytes:
    """The shuffle key of an image id (an image's, or an annotation's after `coco_join._key`): 1 and "1"
    differ, as in the reader's dict; bytes, since an id may hold a lone surrogate."""
    return repr(iid).encode("utf-8", "surrogatepass")


def path_key(rel: str) -> bytes:
    return rel.encode("utf-8", "surrogatepass")


def stream_file(f: CocoFile) -> Iterator[ImageSeen | AnnotationSeen | FileProblem | ImageFault | FileRead]:
    """Every image and annotation of the file as it streams by, then its FileRead (see the module docstring)."""
    checks = coco.Checks(f.path, f.source)
    counts: dict[str, int] = {}
    images = annotations = 0
    found: list[tuple[int, str]] = []
    early = None
    try:
        for key, item in coco.scan(f.path, counts):
            if key == "annotations":
                yield _annotation(f, annotations, item)
                annotations += 1
            elif key == "images":
                entry = coco.image_entry(f.source, images, item)
                yield (
                    ImageFault(f.file, images, MALFORMED, entry)
                    if isinstance(entry, str)
                    else ImageSeen(f.file, *entry)
                )
                images += 1
            else:
                checks.categories.append(item)
        found = coco.settle(checks, counts)
    except SourceError as exc:
        early = str(exc)
    faults = checks.faults
    if early is None and "categories" in faults:
        early = f"COCO annotations {f.path}: {faults['categories']}"
    yield FileRead(f.file, early, faults.get("images"), faults.get("annotations"), tuple(found))


def _annotation(f: CocoFile, position: int, item: object) -> AnnotationSeen | FileProblem:
    made = spill_line(f.file_name, position, item, coco.shape)
    if isinstance(made, Problem):
        return FileProblem(f.file, made)
    key, line = made
    return AnnotationSeen(f.file, position, join_key(key), line)


def keyed(item: ImageSeen | AnnotationSeen) -> tuple[tuple[int, bytes], ImageSeen | AnnotationSeen]:
    """((file, image key), item): what the join's shuffle carries."""
    if isinstance(item, ImageSeen):
        return (item.file, join_key(item.iid)), item
    return (item.file, item.key), item


def join_image(
    file_name: str, items: Iterable[ImageSeen | AnnotationSeen], names: dict[int, str]
) -> Iterator[Joined | ImageProblem | FileProblem | ImageFault]:
    """The items of one image key: its row and problems (see the module docstring). `names`: the file's
    categories by source id."""
    items = list(items)  # read twice: a runner's grouped values may be a one-pass iterable
    images = sorted((i for i in items if isinstance(i, ImageSeen)), key=lambda i: i.entry[4])
    seen = sorted((a for a in items if isinstance(a, AnnotationSeen)), key=lambda a: a.position)
    records = [read_line(a.line) for a in seen]
    if not images:
        for record in records:
            yield FileProblem(seen[0].file, unknown(file_name, record[0], {"id": record[2]}, record[1]))
        return
    first = images[0]
    if len(images) > 1:
        yield ImageFault(first.file, images[1].entry[4], REPEATED_ID, f"image id {images[1].iid!r} is given twice")
    store = ObjectStore()
    rows: list[ImageRow] = []
    problems: list[tuple[int, Problem]] = []
    image_row(first.iid, first.entry, records, names, store, rows, problems)
    for seq, (order, problem) in enumerate(problems):
        yield ImageProblem(first.file, order, seq, problem)
    for row in rows:
        yield Joined(first.file, first.entry[4], row, store.get(row.at))


def claimed_twice(rel: str, images: Iterable[ImageSeen]) -> Iterator[ImageFault]:
    """The fault of two image ids that name path `rel`, if they do."""
    ordered = sorted(images, key=lambda i: i.entry[4])
    if len(ordered) > 1:
        first, second = ordered[:2]
        detail = f"image ids {first.iid!r} and {second.iid!r} both name {rel!r}"
        yield ImageFault(first.file, second.entry[4], REPEATED_PATH, detail)


class FileParts(typing.NamedTuple):
    """What the join gave of one file, gathered: rows (objects in `spool`), problems, faults."""

    read: FileRead
    rows: list[tuple[int, ImageRow]]  # (position in 'images', row whose `at` is in the spool)
    problems: list[FileProblem | ImageProblem]
    faults: list[ImageFault]


def file_rows(
    path: str, parts: FileParts, classes: Sequence[str] | None, spool: ObjectStore, store: ObjectStore
) -> RowSet:
    """The RowSet `coco.read_coco_rows` gives of the file at `path`, its objects put in `store`.

    Raises:
        SourceError: the file is no COCO instances JSON, the first fault as the driver's reader says it.
    """
    read = parts.read
    if read.early is not None:
        raise SourceError(read.early)
    faults = [f"COCO annotations {path}: {read.images}"] if read.images else []
    if parts.faults:
        first = min(parts.faults, key=lambda f: (f.position, f.rank))
        faults.append(f"COCO annotations {path}: {first.detail}")
    if read.annotations:
        faults.append(f"COCO annotations {path}: {read.annotations}")
    if faults:
        raise SourceError(faults[0])
    rows = [row._replace(at=store.put(spool.get(row.at))) for _, row in sorted(parts.rows, key=lambda r: r[0])]
    of_file = sorted((p.problem for p in parts.problems if isinstance(p, FileProblem)), key=lambda p: p.box or 0)
    of_images = sorted((p for p in parts.problems if isinstance(p, ImageProblem)), key=lambda p: (p.order, p.seq))
    found: Any = list(read.categories)
    chosen = None if classes is None else tuple(classes)
    return finish_rows(rows, found, chosen, of_file + [p.problem for p in of_images], store)
