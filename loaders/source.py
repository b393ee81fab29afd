"""A split of a finished dataset, as its manifest describes it, checked against the files on disk.

Pure Python: the manifest is read as a `prep.core.manifest.Manifest` (format, version
and shape checked), shard names through `prep.core.naming.ShardName`, files through
`prep.core.storage` (remote paths with `tf.io.gfile`, see gfile_fs.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

from prep.core import formats, storage
from prep.core.errors import LoaderError, ManifestError
from prep.core.manifest import FILENAME, Manifest
from prep.core.naming import ShardName


@dataclasses.dataclass(frozen=True)
class SplitSource:
    """The shards of one split, in manifest (index) order.

    Attributes:
        root: the dataset folder (holds manifest.json).
        split: the split's name.
        files: full path of each shard.
        counts: records in each shard.
        labels: class names; a label id is an index here.
        class_counts: records per class over the split, in label order (multi-label and
            detection: images containing the class).
        task: the manifest's task (`prep.core.schema.TASKS`).
        max_boxes: detection: the most objects one image of the split holds.
        ignore_value: segmentation: the mask value of pixels to ignore.
        file_format: the shards' container (`prep.core.formats`), which its owner reads.
    """

    root: str
    split: str
    files: tuple[str, ...]
    counts: tuple[int, ...]
    labels: tuple[str, ...]
    class_counts: tuple[int, ...]
    task: str = "classification"
    max_boxes: int | None = None
    ignore_value: int | None = None
    file_format: str = formats.DEFAULT

    def __post_init__(self):
        if len(self.files) != len(self.counts) or not self.files:
            raise ValueError(
                f"need one count per shard file and at least one shard, got {len(self.files)} "
                f"file(s) and {len(self.counts)} count(s)"
            )
        if len(self.labels) != len(self.class_counts):
            raise ValueError(
                f"need one count per label, got {len(self.labels)} label(s) and {len(self.class_counts)} count(s)"
            )

    @property
    def records(self) -> int:
        return sum(self.counts)


def read_manifest(root: str) -> Manifest:
    """Reads and checks ROOT/manifest.json (local, or remote through `storage`).

    Raises:
        ManifestError: missing, not ours, of an unknown version, or a field missing or mistyped.
    """
    if not storage.is_remote(root):
        return Manifest.load(root)
    path = storage.join(root, FILENAME)
    if not storage.exists(path):
        raise ManifestError(f"{path} does not exist: {root} is not a finished dataset")
    return Manifest.from_json(storage.read_bytes(path), path)


def manifest_digest(root: str) -> str:
    """SHA-256 of ROOT/manifest.json: a new conversion into `root` changes it (its run.created)."""
    return hashlib.sha256(storage.read_bytes(storage.join(os.fspath(root), FILENAME))).hexdigest()


def open_split(root: str, split: str, check_files: bool = True) -> SplitSource:
    """The shards of `split` in the dataset at `root`, checked against the manifest.

    Args:
        root: a folder written by `prep convert` (local, or any path `tf.io.gfile` reads).
        split: a split the manifest lists.
        check_files: check that every shard exists with the size the manifest records.

    Raises:
        ManifestError: no manifest, an unknown version, or a shard entry that does not fit.
        LoaderError: unknown split; a shard missing or of the wrong size.
    """
    root = os.fspath(root)
    manifest = read_manifest(root)
    splits = manifest.splits
    if split not in splits:
        known = ", ".join(sorted(splits)) or "none"
        raise LoaderError(f"split {split!r} is not in {root} (splits: {known})")
    labels = manifest.labels
    info = splits[split]
    files, counts = [], []
    for position, shard in enumerate(info.shards):
        name = ShardName.parse(shard.file)
        if name is None or name.split != split or name.index != position:
            raise ManifestError(
                f"manifest of {root}: shard {position} of split {split!r} is named "
                f"{shard.file!r}, not a shard {position} of {split!r}"
            )
        path = storage.join(root, name.filename)
        if check_files:
            size = storage.size(path)
            if size is None:
                raise LoaderError(f"shard {path} is missing (listed in {FILENAME})")
            if size != shard.bytes:
                raise LoaderError(
                    f"shard {path} has {size} bytes, but {FILENAME} records "
                    f"{shard.bytes}: it was changed or truncated after conversion"
                )
        files.append(path)
        counts.append(shard.examples)
    if not files:
        raise ManifestError(f"manifest of {root}: split {split!r} lists no shards")
    class_counts = tuple(info.class_counts.get(name, 0) for name in labels)
    return SplitSource(
        root,
        split,
        tuple(files),
        tuple(counts),
        labels,
        class_counts,
        manifest.task,
        info.max_boxes,
        manifest.ignore_value,
        manifest.file_format,
    )
