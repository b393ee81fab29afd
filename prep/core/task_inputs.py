"""Listing the inputs of multi-label and segmentation conversions, and what detection's shares.

Each input is an `InputRef` whose `label` is the planner's group and whose `extra` holds
what its record needs beyond the image, as compact JSON:

* detection: {"a": the image's annotation (`ImageAnnotation.to_json`; objects without masks as columns
  under "c", `annotations.rows.objects_text`), "s": image/source_id};
  the group is the image's stratum (`prep.core.annotations.stratify`: its rarest class, or
  NO_STRATUM for an image without objects) and `key` its rank key inside the stratum;
* multilabel: {"l": [label ids]}; group and key as detection;
* segmentation: {"m": the mask's path relative to --masks, "s": image/source_id}; one group
  (ALL): plain balance, no class strata.

Everything that cannot become an example before an image is read is a `Reject` with its
reason (missing_image, not_annotated, missing_mask, hidden, annotation problems), so
``found = len(refs) + len(rejects)`` holds as for classification. Box problems found while
reading the annotations are box notes (`BoxNote`), counted in the manifest's inputs.boxes.
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import typing
from collections.abc import Callable, Collection, Iterable
from typing import Any

from prep.core import storage
from prep.core.errors import SourceError
from prep.core.listing import KNOWN_SPLITS, InputRef, Listing, Reject, printable

if typing.TYPE_CHECKING:
    from prep.core.layout import PlanOptions

NO_STRATUM = "(none)"  # as prep.core.manifest.NO_STRATUM (not imported: manifest imports the schema)
ALL = "(all)"  # segmentation's one group
IMAGE_EXTENSIONS = frozenset(
    {
        ".jpg",
        ".jpeg",
        ".jpe",
        ".jfif",
        ".png",
        ".gif",
        ".bmp",
        ".webp",
        ".tif",
        ".tiff",
        ".ppm",
        ".pgm",
        ".pbm",
        ".pnm",
        ".ico",
        ".mpo",
    }
)
BOX_REJECTED_IMAGE = "image_rejected"  # a box of an image that is not written
# (path, split, label ids from 0, extra, or its JSON text made already): an input before `strata_refs` makes it
# an InputRef
Item = tuple[str, str | None, list[int], dict[str, Any] | str]


class BoxNote(typing.NamedTuple):
    """A box dropped or clipped: a line of rejects.jsonl with a "box" field (its index in the source)."""

    path: str
    box: int
    reason: str
    detail: str
    clipped: bool = False  # written, clipped to the image; else dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "path": printable(self.path),
            "box": self.box,
            "reason": self.reason,
            "detail": printable(self.detail),
            "action": "clipped" if self.clipped else "dropped",
        }


class BoxTally(typing.NamedTuple):
    """Boxes of some images: read = written + dropped (by reason); clipped boxes are written."""

    read: int = 0
    written: int = 0
    clipped: int = 0
    dropped: tuple[tuple[str, int], ...] = ()  # ((reason, count), ...) sorted

    def plus(self, other: BoxTally) -> BoxTally:
        dropped = dict(self.dropped)
        for reason, n in other.dropped:
            dropped[reason] = dropped.get(reason, 0) + n
        return BoxTally(
            self.read + other.read,
            self.written + other.written,
            self.clipped + other.clipped,
            tuple(sorted(dropped.items())),
        )


def total_tally(tallies: list[BoxTally]) -> BoxTally:
    """The sum of `tallies` (`BoxTally.plus` of each in turn): a chunk's, an image each."""
    return functools.reduce(BoxTally.plus, tallies, BoxTally())


def dropped_tally(read: int, reasons: Iterable[str]) -> BoxTally:
    """A tally of `read` boxes none of which was written, dropped for `reasons` (one per box)."""
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return BoxTally(read, 0, 0, tuple(sorted(counts.items())))


def source_files(root: str) -> list[str]:
    """Relative paths ('/'-separated, sorted) of every file under `root`, local or in an object store.

    Raises:
        SourceError: a local `root` that is not a folder.
    """
    if storage.is_remote(root):
        return sorted(rel for rel, _ in storage.list_files(root))
    if not os.path.isdir(root):
        raise SourceError(f"SOURCE {root} is not a folder" if os.path.exists(root) else f"SOURCE {root} does not exist")
    files = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        rel_dir = os.path.relpath(folder, root).replace(os.sep, "/")
        files += [name if rel_dir == "." else f"{rel_dir}/{name}" for name in names]
    return sorted(files)


def is_hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


def image_files(root: str, files: list[str] | None = None) -> tuple[list[str], list[Reject]]:
    """Relative paths of the image files under `root` (by extension), sorted, and hidden files as rejects.

    Files of other kinds (an annotation file, classes.txt) are not inputs and are not listed.
    `files`: `source_files(root)` when the caller has it already.
    """
    images, rejects = [], []
    for rel in source_files(root) if files is None else files:
        if posixpath.splitext(rel)[1].lower() not in IMAGE_EXTENSIONS:
            continue
        if is_hidden(rel):
            rejects.append(Reject(rel, "hidden", "hidden files and folders are not images"))
        else:
            images.append(rel)
    return images, rejects


def folder_split(paths: Collection[str], layout: str) -> dict[str, str] | None:
    """{path: split} when the images sit in split folders (every top folder a split name), else None."""
    if layout == "classes":
        return None
    tops = {p.split("/")[0] for p in paths if "/" in p}
    if not tops or not tops <= KNOWN_SPLITS or any("/" not in p for p in paths):
        return None
    return {p: p.split("/")[0] for p in paths}


def strata_refs(
    items: Iterable[Item],
    classes: tuple[str, ...],
    seed: int,
    plan: PlanOptions | None = None,
    source: str | None = None,
) -> list[InputRef]:
    """[(path, split, label ids from 0, extra)] -> InputRefs grouped by stratum, with their rank keys.

    With `plan` (the conversion's PlanOptions), the keys are dealt for the layout the planner will make
    if no input is rejected (`_locate`); rejected inputs shift the ranks after them, so the balance of
    the other labels is then close rather than exact. The strata themselves are always exact.
    """
    from prep.core.annotations import stratify

    by_split: dict[str | None, list[Item]] = {}
    for item in items:
        by_split.setdefault(item[1], []).append(item)
    refs = []
    for split, members in sorted(by_split.items(), key=lambda kv: kv[0] or ""):
        images = [(path, tuple(sorted(set(ids)))) for path, _, ids, _ in members]
        locate = None if plan is None else _locate(images, split, len(classes), plan, source)
        for (path, _, _, extra), (stratum, key) in zip(members, stratify(images, len(classes), seed, locate)):
            group = NO_STRATUM if stratum is None else classes[stratum]
            text = extra if isinstance(extra, str) else json.dumps(extra, separators=(",", ":"), sort_keys=True)
            refs.append(InputRef(path, group, split, text, key.hex()))
    refs.sort(key=lambda r: r.path)
    return refs


def _locate(
    images: list[tuple[str, tuple[int, ...]]],
    split: str | None,
    num_classes: int,
    plan: PlanOptions,
    source: str | None,
) -> Callable[[int | None, int], tuple[str, int] | None] | None:
    """(stratum, rank) -> (split, shard) as `layout.make_layout` places the strata of `images` (all of
    one split SOURCE gives, or None), or None when no layout can be made yet (the planner says why)."""
    from prep.core.annotations.strata import strata_of
    from prep.core.errors import PlanError
    from prep.core.layout import Group, make_layout

    sizes: dict[Group, int] = {}
    for stratum in strata_of(images, num_classes):
        group = (split, num_classes if stratum is None else stratum)
        sizes[group] = sizes.get(group, 0) + 1
    try:
        layout = make_layout(sizes, num_classes + 1, plan, _mean_size(source, [p for p, _ in images]))
    except PlanError:
        return None
    return lambda stratum, rank: layout.locate((split, num_classes if stratum is None else stratum), rank)


def _mean_size(source: str | None, paths: list[str], sample: int = 256) -> float:
    """About the bytes of a record, for a shard count derived from --shard-size: the mean size of up to
    `sample` of the files (evenly spread), or 1 when they cannot be measured here (an object store)."""
    if source is None or storage.is_remote(source) or not paths:
        return 1.0
    step = max(1, len(paths) // sample)
    sizes = []
    for path in paths[::step]:
        try:
            sizes.append(os.path.getsize(os.path.join(source, path)))
        except OSError:
            continue
    return sum(sizes) / len(sizes) if sizes else 1.0


def mask_path(image: str) -> str:
    """The mask of an image: the same relative path, extension .png."""
    return posixpath.splitext(image)[0] + ".png"


def list_segmentation(source: str, masks: str, classes: tuple[str, ...], layout: str) -> Listing:
    """Lists the images under `source`, each with its mask under `masks` (missing_mask if it has none).

    A file of another extension (`.tga`, `.jp2`, none) is an input when a mask is named for it: the
    image rule, not the extension, decides whether it decodes.

    Raises:
        SourceError: SOURCE or --masks is not a folder, or no image has a mask.
    """
    if not storage.is_remote(masks) and not os.path.isdir(masks):
        raise SourceError(
            f"--masks {masks} is not a folder" if os.path.exists(masks) else f"--masks {masks} does not exist"
        )
    files = source_files(source)
    mask_files = set(image_files(masks)[0])
    return segmentation_listing(source, masks, classes, layout, [(f, mask_path(f) in mask_files) for f in files])


def is_mask(rel: str) -> bool:
    """Whether a file under --masks is a mask an image may name (an image extension, not hidden)."""
    return posixpath.splitext(rel)[1].lower() in IMAGE_EXTENSIONS and not is_hidden(rel)


def segmentation_listing(
    source: str, masks: str, classes: tuple[str, ...], layout: str, files: list[tuple[str, bool]]
) -> Listing:
    """The listing of `list_segmentation` from every file under `source`, sorted by path, each with whether
    --masks holds its `mask_path` (all a listing on workers joins, beam_jobs/list_masks.py).

    Raises:
        SourceError: no image has a mask.
    """
    images: list[tuple[str, bool]] = []
    rejects: list[Reject] = []
    for path, has_mask in files:
        if posixpath.splitext(path)[1].lower() in IMAGE_EXTENSIONS:
            if is_hidden(path):
                rejects.append(Reject(path, "hidden", "hidden files and folders are not images"))
            else:
                images.append((path, has_mask))
        elif has_mask and not is_hidden(path):
            images.append((path, has_mask))
    inside = os.path.realpath(masks).startswith(os.path.realpath(source).rstrip(os.sep) + os.sep)
    if inside:  # masks kept under SOURCE are not images to convert
        prefix = os.path.relpath(os.path.realpath(masks), os.path.realpath(source)).replace(os.sep, "/") + "/"
        images = [p for p in images if not p[0].startswith(prefix)]
    splits = folder_split([p for p, _ in images], layout) or {}
    refs = []
    for i, (path, has_mask) in enumerate(images):
        mask = mask_path(path)
        if not has_mask:
            rejects.append(Reject(path, "missing_mask", f"--masks has no {printable(mask)}"))
            continue
        extra = json.dumps({"m": mask, "s": str(i + 1)}, separators=(",", ":"), sort_keys=True)
        refs.append(InputRef(path, ALL, splits.get(path), extra, None))
    if not refs:
        raise SourceError(f"no image under {source} has a mask under {masks}")
    rejects.sort(key=lambda r: (r.path, r.reason))
    return Listing(tuple(refs), tuple(rejects), tuple(classes), task="segmentation", groups=(ALL,))


def multilabel_listing(
    listing: Listing, seed: int, plan: PlanOptions | None = None, source: str | None = None
) -> Listing:
    """A label file's listing whose labels are '|'-joined names -> a multilabel listing in strata.

    The refs' labels are checked against the classes by the caller (`label_file`).
    """
    ids = {name: i for i, name in enumerate(listing.classes)}
    items = [
        (r.path, r.split, [ids[n] for n in r.label.split("|")], {"l": sorted({ids[n] for n in r.label.split("|")})})
        for r in listing.refs
    ]
    refs = strata_refs(items, listing.classes, seed, plan, source)
    user = {r.path: r.group for r in listing.refs if r.group is not None}  # --group-by
    if user:
        refs = [r._replace(group=user.get(r.path)) for r in refs]
    return Listing(
        tuple(refs), listing.rejects, listing.classes, task="multilabel", groups=listing.classes + (NO_STRATUM,)
    )
