"""Listing the inputs of a detection conversion: the images its annotations name under SOURCE.

Each input is an `InputRef` as prep.core.task_inputs describes (extra: the image's
annotation and image/source_id; group: its stratum). Invariants:

* ``found = len(refs) + len(rejects)``: an image the annotations name is an input or a
  Reject with its reason (missing_image when no such file is under SOURCE, hidden,
  outside_source, and the readers' others); an image under SOURCE they do not name is
  `not_annotated` unless --unannotated keep.
* A file the annotations name is tried whatever its extension (`.tga`, `.jp2`, none):
  the image rule decides what decodes. Files under SOURCE nobody names are inputs only
  with an image extension (annotation files, classes.txt are not images).
* Boxes: every box the annotations hold is read, and each one no record will hold is
  dropped with its reason (a box note) or, for an image-level reject, as
  `image_rejected`: boxes read = the boxes in the file = written + dropped.
* A listing with no annotated image left to write is a SourceError that says why in one
  line (counts by reason, the likely cause), raised before OUTPUT is touched.
"""

from __future__ import annotations

import os
import tempfile
import typing

from prep.core import storage
from prep.core.annotations.rows import listing_extra
from prep.core.errors import SourceError
from prep.core.frozen_heap import collector_paused, frozen_heap
from prep.core.listing import Listing, Reject, printable
from prep.core.manifest_parts import Category
from prep.core.split_annotations import ReadRows, read_split_annotations
from prep.core.task_inputs import (
    BOX_REJECTED_IMAGE,
    NO_STRATUM,
    BoxNote,
    BoxTally,
    Item,
    dropped_tally,
    folder_split,
    image_files,
    is_hidden,
    source_files,
    strata_refs,
)

if typing.TYPE_CHECKING:
    from prep.core.annotations.coco_keyed import CocoFile
    from prep.core.annotations.rows import ObjectStore, RowSet
    from prep.core.config import TaskOptions
    from prep.core.layout import PlanOptions

NOT_FOUND = ("missing_image", "outside_source")  # reasons that say SOURCE is not where the paths lead


def _lost(boxes: int) -> BoxTally:
    """The tally of `boxes` boxes of an image that is not written."""
    return dropped_tally(boxes, [BOX_REJECTED_IMAGE] * boxes)


def list_detection(
    source: str,
    options: TaskOptions,
    classes: tuple[str, ...] | None,
    layout: str,
    seed: int,
    skip: frozenset[str] = frozenset(),
    plan: PlanOptions | None = None,
    read: ReadRows | None = None,
) -> Listing:
    """Lists the images of `options.annotations` under `source`, read as `options.annotation_format`,
    with the images they do not name as `options.unannotated` says.

    With `options.split_annotations`, one annotation file per split (`read_split_annotations`).
    `skip` holds files under SOURCE that are not inputs (the annotation file itself); `plan`: see
    `task_inputs.strata_refs`; `read`: the reader of an annotation file (default `read_rows`; a listing on
    workers gives the rows its shuffle joined, beam_jobs/list_annotations.py). The listing holds the box
    notes of annotation problems and the tally of the boxes not written because of them or of their
    image's reject (`box_notes`, `boxes`).

    Raises:
        SourceError: SOURCE or the annotations cannot be read, they name no class, or no image
            they name is left to write.
    """
    from prep.core.annotations.rows import FileStore

    read = read_rows if read is None else read
    files = [f for f in source_files(source) if f not in skip]
    fmt = options.annotation_format
    # A COCO file's annotations are spilled and every image's objects wait here until its ref is made.
    # the objects alive before the listing (the console script imports Beam first) are left out of the
    # collector's full passes, which the listing's few objects per annotation would set off; and while the
    # annotations are read, the collector is off (`collector_paused`)
    with frozen_heap(), collector_paused(), tempfile.TemporaryDirectory(prefix="prep-annotations-") as folder:
        store = FileStore(os.path.join(folder, "objects.jsonl"))
        try:
            if options.split_annotations:
                spill = (folder, store, read)
                found = read_split_annotations(source, options.split_annotations, (fmt, classes), files, spill)
                where = " ".join(f"{split}={path}" for split, path in options.split_annotations)
            else:
                assert options.annotations is not None  # the caller lists detection only with --annotations
                found = read(source, options.annotations, fmt, classes, folder, store)
                where = options.annotations
            if not found.categories:
                raise SourceError(f"--annotations {where} names no class")
            return _listing(source, found, files, options.unannotated, layout, seed, plan, _tip(options))
        finally:
            store.close()


class DetectionSource(typing.NamedTuple):
    """A detection SOURCE listed on workers (beam_jobs/list_annotations.py) by `list_detection`: its COCO files
    streamed and joined to their images by a shuffle, or (no `files`) its annotations of another format: VOC
    and YOLO folders read by many tasks, a chunk of files each, others by one task with the driver's readers."""

    source: str
    options: TaskOptions
    classes: tuple[str, ...] | None
    layout: str
    skip: frozenset[str]  # as `list_detection`'s
    plan: PlanOptions
    files: tuple[CocoFile, ...]  # none: read whole by one task

    @property
    def tasks(self) -> tuple[CocoFile | None, ...]:
        """The first pipeline's created elements: a COCO file each, or one task that reads them all."""
        return self.files or (None,)


def coco_files(source: str, options: TaskOptions) -> tuple[CocoFile, ...] | None:
    """The COCO files of `options` to stream on workers, after a stat of SOURCE and of each (O(files)); ()
    for annotations of another format (or one said only by looking into a folder), which workers read;
    None when the driver lists them: a path that cannot be stated (the driver's listing says what is wrong,
    in its order).
    """
    from prep.core.annotations.coco_keyed import CocoFile

    given: list[str | None] = [path for _, path in options.split_annotations] or [options.annotations]
    paths = [p for p in given if p is not None]
    if not paths or len(paths) < len(given) or not (storage.is_remote(source) or os.path.isdir(source)):
        return None
    if options.annotation_format not in (None, "coco"):
        return ()
    if options.annotation_format is None and not all(p.lower().endswith(".json") for p in paths):
        return ()  # detect_format, on the worker, says which format (looking into a folder) or what is wrong
    for path in paths:
        try:
            if storage.is_remote(path) and storage.size(path) is None:
                return None
            if not storage.is_remote(path) and not os.path.isfile(path):
                return None
        except Exception:  # each file system raises its own types; the driver's listing says what is wrong
            return None
    return tuple(CocoFile(i, p, source) for i, p in enumerate(paths))


def read_rows(
    source: str,
    path: str,
    fmt: str | None,
    classes: tuple[str, ...] | None,
    folder: str,
    store: ObjectStore | None = None,
) -> RowSet:
    """The annotations at PATH as rows (`prep.core.annotations.rows`): a COCO file streamed, its objects
    on disk under `folder` (or in `store`); other formats read whole, their objects in `store`.

    Raises:
        SourceError: PATH cannot be read or is not of the format.
    """
    from prep.core.annotations import detect_format, read_annotations
    from prep.core.annotations.coco import read_coco_rows
    from prep.core.annotations.rows import rows_of

    fmt = detect_format(path) if fmt is None else fmt
    if fmt == "coco":
        return read_coco_rows(source, path, classes, folder, store)
    return rows_of(read_annotations(source, path, fmt, classes), store)


def _tip(options: TaskOptions) -> str:
    """What to try instead when nothing is found: a YOLO label folder beside Ultralytics' data.yaml."""
    from prep.core.annotations.detect import yolo_class_file

    path = options.annotations
    if path is None or path.lower().endswith((".yaml", ".yml", ".json", ".csv", ".tsv", ".jsonl")):
        return ""
    yaml = yolo_class_file(path)
    if yaml is None or not yaml.endswith((".yaml", ".yml")):
        return ""
    return f" Or, for Ultralytics' layout: --annotations {yaml} with SOURCE the dataset root"


def _listing(
    source: str,
    found: RowSet,
    files: list[str],
    unannotated: str,
    layout: str,
    seed: int,
    plan: PlanOptions | None,
    tip: str = "",
) -> Listing:
    """The listing of the annotations `found` for `files`, those under `source` (see `list_detection`);
    `tip` ends the error when nothing is left to write."""
    names = tuple(c.name for c in found.categories)
    ids = {name: i for i, name in enumerate(names)}
    on_disk, rejects = image_files(source, files)
    exists, hidden = set(files), {r.path for r in rejects}
    notes: list[BoxNote] = []
    tally = BoxTally()
    for p in found.problems:
        if p.box is None:
            rejects.append(Reject(p.path, p.reason, p.detail))
            tally = tally.plus(_lost(p.boxes))
        else:
            notes.append(BoxNote(p.path, p.box, p.reason, p.detail))
            tally = tally.plus(dropped_tally(1, [p.reason]))
    problem_images = {p.path for p in found.problems if p.box is None}
    annotated = {a.path for a in found.rows}
    ids_used = [a.source_id for a in found.rows if isinstance(a.source_id, int)]
    next_id = max(max(ids_used, default=0), len(found.rows)) + 1  # after every COCO id and every index
    items: list[Item] = []
    splits = folder_split(sorted(annotated | (set(on_disk) if unannotated == "keep" else set())), layout)
    for i, ann in enumerate(found.rows):
        if ann.path in problem_images:  # rejected above for its own reason; its boxes are not written
            tally = tally.plus(_lost(len(ann.labels)))
            continue
        if ann.path not in exists or is_hidden(ann.path):
            if ann.path not in hidden:
                rejects.append(_unusable(ann.path, ann.path in exists))
            tally = tally.plus(_lost(len(ann.labels)))
            continue
        source_id = ann.source_id if isinstance(ann.source_id, int) else i + 1
        split = ann.split or (splits or {}).get(ann.path)
        objects = [ids[label] for label in ann.labels if label in ids]
        # its extra's text made here (`rows.listing_extra`): no dict of every object held
        items.append((ann.path, split, objects, listing_extra(ann, found.store, str(source_id))))
    kept = len(items)
    for path in on_disk:
        if path in annotated or path in problem_images:
            continue
        if unannotated == "keep":
            empty = {"p": path, "o": []}
            items.append((path, (splits or {}).get(path), [], {"a": empty, "s": str(next_id)}))
            next_id += 1
        else:
            detail = "the annotations do not name this image (--unannotated keep writes it without objects)"
            rejects.append(Reject(path, "not_annotated", detail))
    if not kept:
        unannotated_images = len(on_disk) - len(annotated & set(on_disk))
        raise SourceError(nothing_to_write(source, found, rejects, unannotated_images) + tip)
    if len({split is None for _, split, _, _ in items}) > 1:
        raise SourceError("--annotations gives a split for some images but not for others")
    refs = strata_refs(sorted(items, key=lambda item: item[0]), names, seed, plan, source)
    rejects.sort(key=lambda r: (r.path, r.reason))
    return Listing(
        tuple(refs),
        tuple(rejects),
        names,
        task="detection",
        groups=names + (NO_STRATUM,),
        categories=tuple(Category(c.id, c.name, c.source_id) for c in found.categories),
        box_notes=tuple(notes),
        boxes=tally,
        masks=any(a.masks for a in found.rows),
    )


def _unusable(path: str, exists: bool) -> Reject:
    if exists:
        return Reject(path, "hidden", "hidden files and folders are not images")
    return Reject(path, "missing_image", f"the annotations name {printable(path)}, which is not under SOURCE")


def nothing_to_write(source: str, found: RowSet, rejects: list[Reject], unannotated: int) -> str:
    """The one-line error of a detection listing in which no annotated image is left to write."""
    named = len(found.rows) + sum(1 for p in found.problems if p.box is None and p.reason in NOT_FOUND)
    if not named:
        return f"nothing to write: the annotations name no image (SOURCE {source})"
    counts: dict[str, int] = {}
    for r in rejects:
        counts[r.reason] = counts.get(r.reason, 0) + 1
    by_reason = ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    head = f"nothing to write: none of the {named} images the annotations name can be written ({by_reason})"
    if not any(counts.get(reason) for reason in NOT_FOUND):
        return head
    images = f"{unannotated} image{'s' if unannotated != 1 else ''} under SOURCE {'are' if unannotated != 1 else 'is'}"
    return (
        f"{head}; {images} not annotated: is SOURCE ({source}) the folder the annotations' image paths are relative to?"
    )
