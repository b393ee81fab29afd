"""Pascal VOC and YOLO folders (a file per image) read by many tasks: the pure parts of
beam_jobs/list_annotations.py, which gives the same AnnotationSet as the driver's `read_voc` / `read_yolo`.

* `plan_reads` (one task): each annotation folder's files in the reader's order (`voc_files`, `yolo_files`),
  cut in `ReadChunk`s of CHUNK files, and a `Planned` per folder so read; YOLO's class names are read here
  once. A PATH of another format (a box CSV, an Ultralytics data.yaml), or one whose format or class names
  cannot be found, is not planned: the staging task reads it whole and raises the driver's error in the
  driver's order.
* `read_chunk` (a task a chunk): each file read and parsed (`parse_voc`, `parse_yolo`), a `Parsed`; a file
  that cannot be read is a Parsed with the reader's error.
* `in_order` (the staging task): a folder's Parsed in the reader's order, for `read_voc(parsed=...)` /
  `read_yolo(parsed=...)`, which match them to the images under SOURCE; raises the first file's error.

What holds what: a read task, one chunk's names and what its files give; the staging task, what the driver's
reader holds (every image's objects).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Iterator, Sequence

from prep.core import storage
from prep.core.annotations.detect import detect_format
from prep.core.annotations.files import read_text
from prep.core.annotations.voc import VocFile, parse_voc, voc_files
from prep.core.annotations.yolo import YoloFile, parse_yolo, yolo_files, yolo_names
from prep.core.errors import SourceError

CHUNK = 256  # files a read task reads: small files, a request each


class Planned(typing.NamedTuple):
    """Annotation PATH number `file` (split order) is read by chunks, in format `fmt` (voc or yolo)."""

    file: int
    fmt: str


class ReadChunk(typing.NamedTuple):
    file: int
    path: str
    fmt: str
    first: int  # the position of rels[0] among the folder's files
    rels: tuple[str, ...]  # relative to path
    names: tuple[str, ...]  # YOLO's class names; () for VOC


class Parsed(typing.NamedTuple):
    file: int
    position: int  # among the folder's files, in the reader's order
    error: str | None  # the reader's error for a file it cannot read
    value: VocFile | YoloFile | None


def plan_reads(paths: Sequence[str], fmt: str | None) -> Iterator[Planned | ReadChunk]:
    """The read tasks of the annotation `paths` (see the module docstring); `fmt`: --annotation-format."""
    for i, path in enumerate(paths):
        names: tuple[str, ...] = ()
        try:
            found = detect_format(path) if fmt is None else fmt
            if found == "voc":
                rels = voc_files(path)
            elif found == "yolo" and not path.lower().endswith((".yaml", ".yml")):
                names = tuple(yolo_names(path))
                rels = yolo_files(path)
            else:
                continue
        except SourceError:
            continue
        yield Planned(i, found)
        for start in range(0, len(rels), CHUNK):
            yield ReadChunk(i, path, found, start, tuple(rels[start : start + CHUNK]), names)


def read_chunk(chunk: ReadChunk) -> Iterator[Parsed]:
    """Each file of the chunk read and parsed."""
    voc = chunk.fmt == "voc"
    what = "Pascal VOC annotation" if voc else "YOLO annotation"
    for k, rel in enumerate(chunk.rels):
        try:
            text = read_text(storage.join(chunk.path, rel), what)
        except SourceError as exc:
            yield Parsed(chunk.file, chunk.first + k, str(exc), None)
            continue
        value = parse_voc(rel, text) if voc else parse_yolo(rel, text, list(chunk.names))
        yield Parsed(chunk.file, chunk.first + k, None, value)


def in_order(parsed: Iterable[Parsed]) -> Iterator[typing.Any]:
    """A folder's files in the reader's order, as its reader takes them.

    Raises:
        SourceError: the first file that could not be read, as the driver's reader says it.
    """
    for p in sorted(parsed, key=lambda p: p.position):
        if p.error is not None:
            raise SourceError(p.error)
        yield p.value
