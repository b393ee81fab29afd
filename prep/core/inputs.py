"""Listing SOURCE as a conversion's config says: a label file or class folders, local or remote.

Remote SOURCEs and label files are read through `storage`, whose remote file system an
edge installed (`beam_jobs` installs Beam's). OUTPUT may not lie inside a SOURCE of
class folders: its shards would be listed as inputs on the next run.
"""

from __future__ import annotations

import os

from prep.core import detection_inputs, storage, task_inputs
from prep.core.config import ConvertConfig
from prep.core.errors import SourceError
from prep.core.label_file import list_label_file
from prep.core.listing import Listing, list_folders
from prep.core.sources import webdataset


def output_inside(output: str, source: str) -> bool:
    """Whether folder `output` is `source` or under it (local paths compared after resolving symlinks)."""
    if storage.is_remote(output) or storage.is_remote(source):
        inner, outer = output.rstrip("/") + "/", source.rstrip("/") + "/"
    else:
        inner, outer = os.path.realpath(output) + os.sep, os.path.realpath(source).rstrip(os.sep) + os.sep
    return inner.startswith(outer)


def list_inputs(config: ConvertConfig) -> Listing:
    """Lists SOURCE as the config says: a label file, class folders or WebDataset shards, local or in an object
    store.

    Raises:
        SourceError: SOURCE or the label file cannot be read or used, or OUTPUT is inside SOURCE.
    """
    t = config.tasks
    if t.task != "classification" and output_inside(config.output, config.source):
        raise SourceError(
            f"OUTPUT {config.output} is inside SOURCE {config.source}: its files would be listed as "
            "inputs on the next run; choose an OUTPUT outside SOURCE"
        )
    if t.task == "detection":
        skip: frozenset[str] = frozenset()
        if t.annotations and not storage.is_remote(t.annotations) and output_inside(t.annotations, config.source):
            skip = frozenset({os.path.relpath(t.annotations, config.source).replace(os.sep, "/")})
        return detection_inputs.list_detection(
            config.source, t, config.classes, config.layout, config.plan.seed, skip, config.plan
        )
    if t.masks:  # segmentation
        assert config.classes is not None  # ConvertConfig requires --classes with --masks
        return task_inputs.list_segmentation(config.source, t.masks, config.classes, config.layout)
    if config.labels:
        listing = _list_label_file(config, config.labels)
        if listing.task != "multilabel":
            return listing
        return task_inputs.multilabel_listing(listing, config.plan.seed, config.plan, config.source)
    if output_inside(config.output, config.source):
        raise SourceError(
            f"OUTPUT {config.output} is inside SOURCE {config.source}: its shards would be listed as "
            "inputs (and its folder as a class) on the next run; choose an OUTPUT outside SOURCE"
        )
    if storage.is_remote(config.source):
        try:
            files = storage.list_files(config.source)
        except Exception as exc:
            raise SourceError(f"cannot list SOURCE {config.source}: {exc}") from None
        if not files:
            raise SourceError(f"SOURCE {config.source} holds no files")
        if webdataset.is_shard_set([rel for rel, _ in files]):
            return _list_shards(config, [rel for rel, _ in files])
        _no_label_key(config)
        return list_folders(config.source, config.layout, config.classes, files=files)
    shards = _local_shards(config.source)
    if shards:
        return _list_shards(config, shards)
    _no_label_key(config)
    return list_folders(config.source, config.layout, config.classes)


def _no_label_key(config: ConvertConfig) -> None:
    if config.label_key is not None:
        raise SourceError(
            f"--label-key names a field of WebDataset samples; SOURCE {config.source} holds no .tar shards"
        )


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
    return webdataset.list_webdataset(config.source, shards, config.layout, config.classes, config.label_key)


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
