"""A segmentation SOURCE (`--masks`) listed on workers: the pure parts of beam_jobs/list_masks.py, which stages
what the driver's `task_inputs.list_segmentation` gives, byte for byte.

* `plan_segmentation` (the driver): a stat of SOURCE and of --masks, and a `ListTask` for each (O(1)).
* `list_top` (a task a folder): the files directly in it, each a `Seen` keyed by the mask path it joins on
  (`mask_path` of an image, the path of a mask), and a `ListTask` for each folder in it, walked whole by
  `list_tree` (a task a top folder). A remote folder is listed whole by its top task (an object store lists
  a prefix, not a folder). The walk is `task_inputs.source_files`' (os.walk, symlinked folders not entered),
  cut at the top folders.
* `join_mask` (a task a mask path, after a GroupByKey): each SOURCE file of that path, with whether --masks
  holds it, a `Found`.
* `task_inputs.segmentation_listing` (one task): the listing from every Found in path order, as the driver's.

What holds what: the driver nothing per input; a listing task one name at a time; a join task the files of
one mask path; the staging task, as StageDetection does, a (path, has mask) pair per file of SOURCE (the
image/source_id of an image is its rank among the images, and the chunks are dealt over all of them).
"""

from __future__ import annotations

import os
import typing
from collections.abc import Iterable, Iterator

from prep.core import storage
from prep.core.task_inputs import is_mask, mask_path


class ListTask(typing.NamedTuple):
    """A listing task: the files directly in `start` under `folder` (a top task, "": the folder itself), or every
    file under it (`tree`); a remote folder is listed whole by its top task."""

    masks: bool  # folder is --masks, else SOURCE
    folder: str
    start: str
    tree: bool


class SegmentationSource(typing.NamedTuple):
    """A segmentation SOURCE listed on workers (see the module docstring)."""

    source: str
    masks: str
    classes: tuple[str, ...]
    layout: str

    @property
    def tasks(self) -> tuple[ListTask, ...]:
        """The first pipeline's created elements: the top of SOURCE and of --masks."""
        return (ListTask(False, self.source, "", False), ListTask(True, self.masks, "", False))


class Seen(typing.NamedTuple):
    """A file listed: of SOURCE (`masks` False) or a mask; `key` the mask path it joins on."""

    key: bytes
    masks: bool
    path: str


class Found(typing.NamedTuple):
    """A file of SOURCE, and whether --masks holds its mask."""

    path: str
    has_mask: bool


def plan_segmentation(source: str, masks: str, classes: tuple[str, ...], layout: str) -> SegmentationSource | None:
    """The listing of a segmentation SOURCE on workers, after a stat of SOURCE and --masks; None when a local one
    is no folder (the driver's listing says what is wrong, in its order)."""
    for root in (source, masks):
        if not storage.is_remote(root) and not os.path.isdir(root):
            return None
    return SegmentationSource(source, masks, classes, layout)


def _key(rel: str) -> bytes:
    # bytes: a local name may hold a lone surrogate (os.fsdecode of bytes that are not UTF-8)
    return rel.encode("utf-8", "surrogatepass")


def _seen(task: ListTask, rel: str) -> list[Seen]:
    if not task.masks:
        return [Seen(_key(mask_path(rel)), False, rel)]
    return [Seen(_key(rel), True, rel)] if is_mask(rel) else []


def list_top(task: ListTask) -> Iterator[Seen | ListTask]:
    """The files directly in a top task's folder (all under it, remote) and a tree task per folder in it."""
    if storage.is_remote(task.folder):
        for rel, _ in storage.list_files(task.folder):
            yield from _seen(task, rel)
        return
    try:
        entries = sorted(os.scandir(task.folder), key=lambda e: e.name)
    except OSError:  # os.walk, the driver's walk, skips a folder it cannot list
        return
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if not is_dir:
            yield from _seen(task, entry.name)
        elif not entry.is_symlink():  # os.walk(followlinks=False) does not enter it
            yield ListTask(task.masks, task.folder, entry.name, True)


def list_tree(task: ListTask) -> Iterator[Seen]:
    """Every file under a tree task's folder, as `task_inputs.source_files` walks it."""
    top = os.path.join(task.folder, task.start)
    for folder, dirs, names in os.walk(top, followlinks=False):
        dirs.sort()
        rel_dir = os.path.relpath(folder, task.folder).replace(os.sep, "/")
        for name in names:
            yield from _seen(task, f"{rel_dir}/{name}")


def join_mask(seen: Iterable[Seen]) -> Iterator[Found]:
    """The SOURCE files of one mask path, each with whether --masks holds that path."""
    seen = list(seen)  # read twice: a runner's grouped values may be a one-pass iterable
    has_mask = any(s.masks for s in seen)
    for s in seen:
        if not s.masks:
            yield Found(s.path, has_mask)
