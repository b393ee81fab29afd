"""A split of a finished dataset, as its manifest describes it, checked against the files on disk.

Pure Python: reading the manifest goes through `prep.manifest` (format and
version checks), shard names through `prep.naming.ShardName`. Paths with a
scheme (``gs://...``) are read with `tf.io.gfile`, imported only then.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

from prep import manifest as manifest_lib
from prep.manifest_shape import check_shape
from prep.errors import LoaderError, ManifestError
from prep.naming import ShardName


@dataclasses.dataclass(frozen=True)
class SplitSource:
    """The shards of one split, in manifest (index) order.

    Attributes:
        root: the dataset folder (holds manifest.json).
        split: the split's name.
        files: full path of each shard.
        counts: records in each shard.
        labels: class names; a label id is an index here.
        class_counts: records per class over the split, in label order.
    """

    root: str
    split: str
    files: tuple[str, ...]
    counts: tuple[int, ...]
    labels: tuple[str, ...]
    class_counts: tuple[int, ...]

    def __post_init__(self):
        if len(self.files) != len(self.counts) or not self.files:
            raise ValueError(f"need one count per shard file and at least one shard, got {len(self.files)} "
                             f"file(s) and {len(self.counts)} count(s)")
        if len(self.labels) != len(self.class_counts):
            raise ValueError(f"need one count per label, got {len(self.labels)} label(s) and "
                             f"{len(self.class_counts)} count(s)")

    @property
    def records(self) -> int:
        return sum(self.counts)


def _is_remote(path: str) -> bool:
    return "://" in path


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}" if _is_remote(root) else os.path.join(root, name)


def read_manifest(root: str) -> dict:
    """Reads and checks ROOT/manifest.json.

    Raises:
        ManifestError: missing, not ours, of an unknown version, or a field missing or mistyped.
    """
    path = _join(root, manifest_lib.FILENAME)
    if not _is_remote(root):
        manifest = manifest_lib.load(root)
    else:
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            raise ManifestError(f"{path} does not exist: {root} is not a finished dataset")
        with tf.io.gfile.GFile(path, "rb") as f:
            manifest = manifest_lib.loads(f.read(), path)
    check_shape(manifest, path)  # a hand-edited field: a ManifestError naming it, not a KeyError
    return manifest


def manifest_digest(root: str) -> str:
    """SHA-256 of ROOT/manifest.json: a new conversion into `root` changes it (its run.created)."""
    import tensorflow as tf

    with tf.io.gfile.GFile(_join(os.fspath(root), manifest_lib.FILENAME), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _size(path: str) -> int | None:
    if _is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.stat(path).length if tf.io.gfile.exists(path) else None
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def exists(path: str) -> bool:
    """Whether the file `path` exists, local or any path `tf.io.gfile` reads."""
    return _size(path) is not None


def open_read(path: str):
    """`path` opened for binary reading, local or any path `tf.io.gfile` reads."""
    if _is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


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
    splits = manifest["splits"]
    if split not in splits:
        known = ", ".join(sorted(splits)) or "none"
        raise LoaderError(f"split {split!r} is not in {root} (splits: {known})")
    labels = tuple(manifest["labels"])
    info = splits[split]
    files, counts = [], []
    for position, shard in enumerate(info.get("shards", [])):
        name = ShardName.parse(str(shard.get("file", "")))
        if name is None or name.split != split or name.index != position:
            raise ManifestError(f"manifest of {root}: shard {position} of split {split!r} is named "
                                f"{shard.get('file')!r}, not a shard {position} of {split!r}")
        path = _join(root, name.filename)
        if check_files:
            size = _size(path)
            if size is None:
                raise LoaderError(f"shard {path} is missing (listed in {manifest_lib.FILENAME})")
            if size != shard["bytes"]:
                raise LoaderError(f"shard {path} has {size} bytes, but {manifest_lib.FILENAME} records "
                                  f"{shard['bytes']}: it was changed or truncated after conversion")
        files.append(path)
        counts.append(int(shard["examples"]))
    if not files:
        raise ManifestError(f"manifest of {root}: split {split!r} lists no shards")
    class_counts = tuple(int(info["class_counts"].get(name, 0)) for name in labels)
    return SplitSource(root, split, tuple(files), tuple(counts), labels, class_counts)
