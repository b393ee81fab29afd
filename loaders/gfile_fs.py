"""`tf.io.gfile` as `prep.core.storage`'s remote file system, for the loaders.

The loaders read shards with tf.data, which reaches remote paths through TensorFlow's
file systems; reading the manifest and checking shards through the same keeps one
notion of which paths exist. TensorFlow is imported only when a remote path is used.
"""

from __future__ import annotations


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


class GFileSystem:
    """`RemoteFileSystem` over `tf.io.gfile`, for the schemes TensorFlow registers."""

    def handles(self, path: str) -> bool:
        scheme = path.partition("://")[0]
        return scheme in _gfile().get_registered_schemes()

    def open_read(self, path: str):
        return _gfile().GFile(path, "rb")

    def open_write(self, path: str):
        return _gfile().GFile(path, "wb")

    def exists(self, path: str) -> bool:
        return _gfile().exists(path)

    def size(self, path: str) -> int | None:
        gfile = _gfile()
        return gfile.stat(path).length if gfile.exists(path) else None

    def rename(self, src: str, dst: str) -> None:
        _gfile().rename(src, dst, overwrite=True)

    def uploads_whole(self, path: str) -> bool:
        return False  # the loaders write nothing large; a rename keeps every TensorFlow file system safe

    def delete(self, paths: list[str]) -> None:
        for path in paths:
            _gfile().remove(path)

    def match(self, pattern: str) -> list[tuple[str, int]]:
        gfile = _gfile()
        if pattern.endswith("/**"):  # everything under a prefix, at any depth
            root = pattern[:-3]
            found = [f"{folder.rstrip('/')}/{name}" for folder, _, names in gfile.walk(root) for name in names]
        else:
            found = gfile.glob(pattern)
        return [(path, gfile.stat(path).length) for path in found]

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))
