"""Listing SOURCE as a conversion's config says: a label file or class folders, local or remote.

`folder_source` is the driver's part of listing class folders on workers (beam_jobs/list_source.py): the
top of SOURCE only, O(classes). Remote SOURCEs and label files are read through `storage`, whose remote file system an
edge installed (`beam_jobs` installs Beam's). OUTPUT may not lie inside a SOURCE of
class folders: its shards would be listed as inputs on the next run.
"""

from __future__ import annotations

import os
import typing

from prep.core import detection_inputs, segmentation_inputs, storage, task_inputs
from prep.core.config import ConvertConfig, TableColumns
from prep.core.errors import SourceError
from prep.core.label_file import list_label_file
from prep.core.listing import LAYOUTS, Listing, detect_layout, folder_classes, list_folders, local_dirs
from prep.core.sources import parquet, shard_set, webdataset
from prep.core.sources.parquet import TableSource
from prep.core.sources.shard_set import ShardSource


def output_inside(output: str, source: str) -> bool:
    """Whether folder `output` is `source` or under it (local paths compared after resolving symlinks)."""
    if storage.is_remote(output) or storage.is_remote(source):
        inner, outer = output.rstrip("/") + "/", source.rstrip("/") + "/"
    else:
        inner, outer = os.path.realpath(output) + os.sep, os.path.realpath(source).rstrip(os.sep) + os.sep
    return inner.startswith(outer)


def list_inputs(config: ConvertConfig) -> Listing:
    """Lists SOURCE as the config says: a label file, class folders, WebDataset shards or Parquet/Arrow tables,
    local or in an object store.

    Raises:
        SourceError: SOURCE or the label file cannot be read or used, or OUTPUT is inside SOURCE.
    """
    t = config.tasks
    if t.task != "classification":
        _check_task_output(config)
    if t.task == "detection":
        return detection_inputs.list_detection(
            config.source, t, config.classes, config.layout, config.plan.seed, _annotations_inside(config), config.plan
        )
    if t.masks:  # segmentation
        assert config.classes is not None  # ConvertConfig requires --classes with --masks
        return task_inputs.list_segmentation(config.source, t.masks, config.classes, config.layout)
    if config.labels:
        listing = _list_label_file(config, config.labels)
        if listing.task != "multilabel":
            return listing
        return task_inputs.multilabel_listing(listing, config.plan.seed, config.plan, config.source)
    _check_source(config)
    if config.shard_pattern is not None:
        return _list_shards(config, pattern_shards(config))
    if parquet.remote_table(config.source):
        return _list_tables(config, parquet.remote_table(config.source))
    if storage.is_remote(config.source):
        try:
            files = storage.list_files(config.source)
        except Exception as exc:
            raise SourceError(f"cannot list SOURCE {config.source}: {exc}") from None
        if not files:
            raise SourceError(f"SOURCE {config.source} holds no files")
        if webdataset.is_shard_set([rel for rel, _ in files]):
            return _list_shards(config, [rel for rel, _ in files])
        if parquet.only_tables(rel for rel, _ in files):
            return _list_tables(config, [rel for rel, _ in files])
        _no_label_key(config)
        return list_folders(config.source, config.layout, config.classes, files=files)
    tables = parquet.local_tables(config.source)
    if tables:
        return _list_tables(config, tables)
    shards = _local_shards(config.source)
    if shards:
        return _list_shards(config, shards)
    _no_label_key(config)
    return list_folders(config.source, config.layout, config.classes)


def _check_task_output(config: ConvertConfig) -> None:
    if output_inside(config.output, config.source):
        raise SourceError(
            f"OUTPUT {config.output} is inside SOURCE {config.source}: its files would be listed as "
            "inputs on the next run; choose an OUTPUT outside SOURCE"
        )


def _annotations_inside(config: ConvertConfig) -> frozenset[str]:
    """The annotation file as a file under SOURCE that is no input, if it is one."""
    t = config.tasks
    if t.annotations and not storage.is_remote(t.annotations) and output_inside(t.annotations, config.source):
        return frozenset({os.path.relpath(t.annotations, config.source).replace(os.sep, "/")})
    return frozenset()


def detection_source(config: ConvertConfig) -> detection_inputs.DetectionSource | None:
    """A detection SOURCE whose COCO files are streamed and joined on workers (beam_jobs/list_annotations.py),
    the driver stating SOURCE and the files only; None when the driver lists it (`list_inputs`): other tasks
    and formats, or a path it cannot state.

    Raises:
        SourceError: OUTPUT is inside SOURCE.
    """
    t = config.tasks
    if t.task != "detection":
        return None
    files = detection_inputs.coco_files(config.source, t)
    if files is None:
        return None
    _check_task_output(config)
    plan, skip = config.plan, _annotations_inside(config)
    return detection_inputs.DetectionSource(config.source, t, config.classes, config.layout, skip, plan, files)


def segmentation_source(config: ConvertConfig) -> segmentation_inputs.SegmentationSource | None:
    """A segmentation SOURCE (--masks) whose files are listed and joined to the masks on workers
    (beam_jobs/list_masks.py), the driver stating SOURCE and --masks only; None when the driver lists it
    (`list_inputs`): other tasks, or a local SOURCE or --masks that is no folder.

    Raises:
        SourceError: OUTPUT is inside SOURCE.
    """
    t = config.tasks
    if not t.masks or t.task != "segmentation":
        return None
    assert config.classes is not None  # ConvertConfig requires --classes with --masks
    src = segmentation_inputs.plan_segmentation(config.source, t.masks, config.classes, config.layout)
    if src is not None:
        _check_task_output(config)
    return src


def _no_label_key(config: ConvertConfig) -> None:
    if config.label_key is not None:
        raise SourceError(
            f"--label-key names a field of WebDataset samples; SOURCE {config.source} holds no .tar shards"
        )
    if config.columns != TableColumns():
        raise SourceError(
            f"--image-column, --label-column and --split-column name columns of Parquet or Arrow "
            f"files; SOURCE {config.source} holds none"
        )


def _list_tables(config: ConvertConfig, files: list[str]) -> Listing:
    if config.label_key is not None:
        raise SourceError(f"--label-key names a field of WebDataset samples; SOURCE {config.source} holds tables")
    listing = parquet.list_tables(config.source, files, config.layout, config.classes, config.columns)
    if listing.task != "multilabel":
        return listing
    return task_inputs.multilabel_listing(listing, config.plan.seed, config.plan, config.source)


def pattern_shards(config: ConvertConfig) -> list[str]:
    """The shards SOURCE's pattern names (`shard_set.match_shards`), relative to the folder it lies under.

    Raises:
        SourceError: that folder cannot be listed, or as `match_shards`.
    """
    assert config.shard_pattern is not None  # callers ask only of a pattern
    root = config.source
    if not storage.is_remote(root) and not os.path.isdir(root):
        raise SourceError(f"SOURCE pattern {config.shard_pattern}: {root} is no folder")
    try:
        if storage.is_remote(root):
            files = [rel for rel, _ in storage.list_files(root)]
        else:
            files = [
                os.path.relpath(os.path.join(top, name), root).replace(os.sep, "/")
                for top, _, names in os.walk(root)
                for name in names
            ]
    except Exception as exc:  # each file system raises its own types
        raise SourceError(f"cannot list {root} for SOURCE pattern {config.shard_pattern}: {exc}") from None
    return shard_set.match_shards(root, config.shard_pattern, files)


def _local_shards(source: str) -> list[str]:
    """SOURCE's files relative to it if they are WebDataset shards (all `.tar`), else []."""
    if not os.path.isdir(source):
        return []
    files = []
    for top, _, names in os.walk(source):
        for name in names:
            rel = os.path.relpath(os.path.join(top, name), source).replace(os.sep, "/")
            if not rel.endswith((".tar", ".tar.gz", ".tgz")) and not any(p.startswith(".") for p in rel.split("/")):
                return []  # a folder of images: stop at its first one, rather than walk it twice
            files.append(rel)
    return files if webdataset.is_shard_set(files) else []


def _list_shards(config: ConvertConfig, shards: list[str]) -> Listing:
    listing = webdataset.list_webdataset(config.source, shards, config.layout, config.classes, config.label_key)
    if listing.task != "multilabel":
        return listing
    return task_inputs.multilabel_listing(listing, config.plan.seed, config.plan, config.source)


def _list_label_file(config: ConvertConfig, labels: str) -> Listing:
    data = None
    if storage.is_remote(labels):
        try:
            data = storage.read_bytes(labels)
        except Exception as exc:  # each file system raises its own types
            raise SourceError(f"cannot read label file {labels}: {exc}") from None
    return list_label_file(
        config.source,
        labels,
        config.classes,
        data=data,
        allow_outside=config.allow_outside_source,
        group_by=config.dedupe.group_by,
    )


def _check_source(config: ConvertConfig) -> None:
    if output_inside(config.output, config.source):
        raise SourceError(
            f"OUTPUT {config.output} is inside SOURCE {config.source}: its shards would be listed as "
            "inputs (and its folder as a class) on the next run; choose an OUTPUT outside SOURCE"
        )


class FolderTask(typing.NamedTuple):
    """A listing task on workers: the files under `start` (relative to SOURCE; "" is SOURCE itself), or only
    those directly in it unless `recursive`. Remote: one task lists every object under SOURCE."""

    task: int
    start: str
    recursive: bool


class FolderSource(typing.NamedTuple):
    """Class folders (or split/class folders) of a classification SOURCE, to be listed on workers."""

    source: str
    layout: str  # classes, splits, or auto: the remote task decides from what it lists
    classes: tuple[str, ...] | None  # the class folders' names; None for a remote SOURCE (its task finds them)
    tasks: tuple[FolderTask, ...]


def folder_source(config: ConvertConfig) -> FolderSource | None:
    """The listing tasks of a SOURCE of class folders, from its top only (O(classes) on the driver); None when
    the driver lists SOURCE itself (`list_inputs`): a label file, other tasks, WebDataset shards, or a
    symlinked class or split folder (which may name a folder listed elsewhere).

    Raises:
        SourceError: SOURCE is missing, not a folder, or holds no class folders; OUTPUT is inside it.
    """
    t = config.tasks
    if t.annotations or t.masks or config.labels or t.task != "classification":
        return None
    if config.shard_pattern is not None:  # WebDataset shards: `shard_source`
        return None
    if config.layout not in LAYOUTS:
        raise SourceError(f"--layout must be one of {', '.join(LAYOUTS)}, got {config.layout!r}")
    _check_source(config)
    root = config.source
    if parquet.remote_table(root):  # one Parquet or Arrow object: `table_source`
        return None
    if storage.is_remote(root):
        return FolderSource(root, config.layout, None, (FolderTask(0, "", True),))
    if os.path.isfile(root) and parquet.local_tables(root):  # one Parquet or Arrow file
        return None
    if not os.path.isdir(root):
        raise SourceError(f"SOURCE {root} is not a folder" if os.path.exists(root) else f"SOURCE {root} does not exist")
    if _local_shards(root) or parquet.local_tables(root):  # shards: `shard_source`; tables: `table_source`
        return None
    dirs = local_dirs(root)
    layout = detect_layout(dirs) if config.layout == "auto" else config.layout
    classes = folder_classes(root, dirs, layout)
    starts: list[tuple[str, bool]] = [("", False)]
    for top in _subfolders(root, ""):
        if layout == "classes" or top.startswith("."):
            starts.append((top, True))
        else:
            starts += [(top, False), *((f"{top}/{c}", True) for c in _subfolders(root, top))]
    for start, _ in starts:
        if start and os.path.islink(os.path.join(root, start)):
            return None
    return FolderSource(root, layout, classes, tuple(FolderTask(i, s, r) for i, (s, r) in enumerate(starts)))


def shard_source(config: ConvertConfig) -> ShardSource | None:
    """The listing tasks of a SOURCE of WebDataset shards, a task a shard (O(shards) on the driver); None when
    SOURCE is no shard set, or the driver lists it (`folder_source`'s cases). A remote SOURCE is asked after
    its listing on workers found only shards.

    Raises:
        SourceError: SOURCE cannot be listed, or holds compressed shards.
    """
    t = config.tasks
    if t.annotations or t.masks or config.labels or t.task != "classification":
        return None
    _check_source(config)
    if config.shard_pattern is not None:
        shards = pattern_shards(config)
    elif storage.is_remote(config.source):
        try:
            shards = [rel for rel, _ in storage.list_files(config.source)]
        except Exception as exc:  # each file system raises its own types
            raise SourceError(f"cannot list SOURCE {config.source}: {exc}") from None
        shards = shards if webdataset.is_shard_set(shards) else []
    else:
        shards = _local_shards(config.source)
    if not shards:
        return None
    return ShardSource(config.source, shard_set.shard_tasks(shards, config.layout), config.label_key, config.plan)


def table_source(config: ConvertConfig) -> TableSource | None:
    """The listing tasks of a SOURCE of Parquet or Arrow files, a task a file, from their schemas only
    (`parquet.plan_tables`); None when SOURCE holds no tables only, or the driver lists it (`folder_source`'s
    cases).

    Raises:
        SourceError: SOURCE cannot be listed, or its columns cannot be found or disagree (`plan_tables`).
    """
    t = config.tasks
    if t.annotations or t.masks or config.labels or t.task != "classification":
        return None
    _check_source(config)
    if storage.is_remote(config.source):
        files = parquet.remote_table(config.source)
        try:
            files = files or [rel for rel, _ in storage.list_files(config.source)]
        except Exception as exc:  # each file system raises its own types
            raise SourceError(f"cannot list SOURCE {config.source}: {exc}") from None
        files = files if parquet.only_tables(files) else []
    else:
        files = parquet.local_tables(config.source)
    if not files:
        return None
    if config.label_key is not None:
        raise SourceError(f"--label-key names a field of WebDataset samples; SOURCE {config.source} holds tables")
    return parquet.plan_tables(config.source, files, config.layout, config.columns)._replace(plan=config.plan)


def _subfolders(root: str, rel: str) -> list[str]:
    """Names of the folders directly in root/rel, hidden ones too."""
    try:
        entries = sorted(os.scandir(os.path.join(root, rel)), key=lambda e: e.name)
    except OSError as exc:
        raise SourceError(f"cannot list {os.path.join(root, rel)}: {exc.strerror}") from None
    found = []
    for e in entries:
        try:
            if e.is_dir():
                found.append(e.name)
        except OSError:  # a symlink loop: the walk rejects it
            continue
    return found
