"""A local file for readers that take only local paths (ArrayRecord's C++ reader, random access).

A remote shard is copied through `prep.core.storage` into the system's temporary folder, hashed
on the way when asked, and deleted when done.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator

from prep.core import storage

BLOCK = 8 << 20


def fetch(path: str, on_block: Callable[[bytes], None] | None = None) -> str:
    """A temporary local copy of remote `path` (the caller deletes it), each block passed to `on_block`."""
    handle, local = tempfile.mkstemp(prefix="prep-shard-", suffix=os.path.basename(path)[-40:])
    try:
        with storage.open_read(path) as src, os.fdopen(handle, "wb") as dst:
            while block := src.read(BLOCK):
                if on_block is not None:
                    on_block(block)
                dst.write(block)
    except BaseException:
        os.unlink(local)
        raise
    return local


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[str]:
    """`path` itself if local, else a temporary local copy, deleted on exit."""
    if not storage.is_remote(path):
        yield path
        return
    local = fetch(path)
    try:
        yield local
    finally:
        os.unlink(local)


def upload(local: str, path: str) -> tuple[int, str]:
    """Copies local file `local` to `path` (local or remote); returns its (bytes, sha256)."""
    digest, size = hashlib.sha256(), 0
    with open(local, "rb") as src, storage.open_write(path) as dst:
        while block := src.read(BLOCK):
            digest.update(block)
            size += len(block)
            dst.write(block)
    return size, digest.hexdigest()


def temp_file(name: str) -> str:
    """A new empty local file in the system's temporary folder, for a shard `name` to be uploaded."""
    handle, local = tempfile.mkstemp(prefix="prep-shard-", suffix=os.path.basename(name)[-40:])
    os.close(handle)
    return local


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
