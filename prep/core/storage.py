"""Local and remote paths, for every layer: the one place that tells them apart.

A path with a scheme (``gs://``, ``s3://``, ``testfs://``) is remote (`is_remote`);
anything else is a local path and is handled here with the standard library. The core
cannot import Beam or TensorFlow, so remote paths go through a `RemoteFileSystem` that
an edge installs: `beam_jobs` installs Beam's FileSystems when it is imported, `loaders`
installs `tf.io.gfile`. Of the installed file systems, the newest that `handles` a path
serves it; with none installed, a remote path is an `OSError` that says so.

Writes go to a temporary name and are renamed into place (`write_atomic`), so a reader
never sees a half-written file under its final name. Each writer has a temporary name of
its own (`temp_path`): a runner may run two attempts of one task at once (a retry, or
speculative execution); both write the same bytes, each to its own file, and both
renames succeed.

`uploads_whole` is the one property that tells an object store (GCS, S3, and `simfs://`
in tests) from a file system: there an object appears under its name only once its
upload ends, whole, so `write_atomic` uploads bytes it holds under the final name at
once. A rename there is a copy and a delete, so each one saved is two requests (docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import secrets
import shutil
from collections.abc import Iterable
from typing import BinaryIO, Protocol

SCHEME_SEPARATOR = "://"


class RemoteFileSystem(Protocol):
    """What an edge provides for remote paths (Beam's FileSystems, tf.io.gfile, ...)."""

    def handles(self, path: str) -> bool: ...

    def open_read(self, path: str) -> BinaryIO: ...

    def open_write(self, path: str) -> BinaryIO: ...

    def exists(self, path: str) -> bool: ...

    def size(self, path: str) -> int | None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def uploads_whole(self, path: str) -> bool:
        """Whether an object written to `path` appears only once its writer closes, whole (an object store)."""
        ...

    def delete(self, paths: list[str]) -> None: ...

    def match(self, pattern: str) -> list[tuple[str, int]]:
        """(path, size) of every file matching a glob pattern (``prefix/**``)."""
        ...


_installed: list[RemoteFileSystem] = []


def install(fs: RemoteFileSystem, fallback: bool = False) -> None:
    """Makes `fs` serve the remote paths it `handles`, before those installed earlier; a `fallback`
    serves them only when no other installed file system does, whenever it was installed."""
    if fs not in _installed:
        _installed.insert(0 if fallback else len(_installed), fs)


def _remote(path: str) -> RemoteFileSystem:
    for fs in reversed(_installed):
        if fs.handles(path):
            return fs
    if _installed:  # none claims the scheme: the newest reports it in its own words
        return _installed[-1]
    raise OSError(f"no file system is installed for {path} (import beam_jobs or loaders first)")


def is_remote(path: str) -> bool:
    """Whether `path` names an object in a remote file system (it has a scheme)."""
    return SCHEME_SEPARATOR in path


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def input_path(source: str, path: str) -> str:
    """Where an input is: `path` relative to SOURCE, or, for paths outside SOURCE
    (`--allow-outside-source`), an absolute path or URL, or a relative one
    starting with `../`."""
    if is_remote(path) or (not is_remote(source) and os.path.isabs(path)):
        return path
    if is_remote(source) and path.startswith("../"):
        scheme, _, rest = source.partition(SCHEME_SEPARATOR)
        return f"{scheme}{SCHEME_SEPARATOR}{posixpath.normpath(posixpath.join(rest, path))}"
    return join(source, path)


def read_bytes(path: str) -> bytes:
    with open_read(path) as f:
        return f.read()


def open_read(path: str) -> BinaryIO:
    if not is_remote(path):
        return open(path, "rb")
    return _remote(path).open_read(path)


def read_exact(f: BinaryIO, size: int) -> bytes:
    """`size` bytes from `f`, fewer only at its end: a file system's reader may return
    less than asked at a time (a raw stream, a network read cut short)."""
    pieces: list[bytes] = []
    left = size
    while left > 0:
        piece = f.read(left)
        if not piece:
            break
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


def open_write(path: str) -> BinaryIO:
    """Opens `path` for writing, creating parent folders (local)."""
    if not is_remote(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return open(path, "wb")
    return _remote(path).open_write(path)


def uploads_whole(path: str) -> bool:
    """Whether a file written to `path` appears under its name only when complete (an object store's
    upload): a local path, or a remote file system that does not say so, may show a partial file."""
    return is_remote(path) and _remote(path).uploads_whole(path)


def rename(src: str, dst: str) -> None:
    """Moves `src` to `dst`, replacing `dst` if it exists."""
    if not is_remote(src):
        os.replace(src, dst)
    else:
        _remote(src).rename(src, dst)


_TEMP = re.compile(r"\.[0-9a-f]{8}\.part")


def temp_path(path: str) -> str:
    """A temporary sibling of `path` to write it under, then rename: a new name for every call."""
    return f"{path}.{secrets.token_hex(4)}.part"


def is_temp_of(name: str, final: str) -> bool:
    """Whether file name `name` is a `temp_path` of file name `final`."""
    return name.startswith(final) and _TEMP.fullmatch(name, len(final)) is not None


def write_atomic(path: str, data: bytes) -> None:
    """Writes `data` to `path` via a temporary sibling (`temp_path`) and a rename, or, where an upload
    appears whole (`uploads_whole`), in one upload under its name: one request instead of four."""
    if uploads_whole(path):
        with open_write(path) as f:
            f.write(data)
        return
    write_streamed(path, (data,))


def write_streamed(path: str, pieces: Iterable[bytes]) -> None:
    """Writes `pieces` to `path` as they come, via a temporary sibling (`temp_path`) and a rename."""
    tmp = temp_path(path)
    try:
        with open_write(tmp) as f:
            for piece in pieces:
                f.write(piece)
        rename(tmp, path)
    except BaseException:
        delete(tmp)  # a full disk or an interrupt leaves no half-written sibling behind
        raise


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    return _remote(path).exists(path)


def is_file(path: str) -> bool:
    """Whether `path` is a file (local: not a folder; remote: an object by that name)."""
    if not is_remote(path):
        return os.path.isfile(path)
    return _remote(path).exists(path)


def size(path: str) -> int | None:
    """The size of a file in bytes, or None if it does not exist."""
    if not is_remote(path):
        try:
            return os.path.getsize(path)
        except OSError:
            return None
    return _remote(path).size(path)


def signature(path: str, data: bytes | None = None) -> str:
    """A short string that changes when the file at `path` changes; "" if it cannot be found.

    Local files: size, modification time, inode and mode. Object stores give no
    cheap modification time, so there it is the size (taken from `data`, the
    bytes just read, when given).
    """
    if not is_remote(path):
        try:
            return signature_of(os.stat(path))
        except OSError:
            return ""
    if data is not None:
        return str(len(data))
    try:
        found = size(path)
    except Exception:  # each file system raises its own types
        return ""
    return "" if found is None else str(found)


def signature_of(st: os.stat_result) -> str:
    """`signature` of a local file from its stat (one taken while reading it, say)."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_mode:o}"


def sha256_file(path: str) -> tuple[int, str]:
    """(bytes, hex SHA-256) of a file, read in blocks."""
    digest, total = hashlib.sha256(), 0
    with open_read(path) as f:
        while block := f.read(8 << 20):
            digest.update(block)
            total += len(block)
    return total, digest.hexdigest()


def delete(path: str) -> None:
    """Deletes a file, or a folder (every object under the prefix), if it exists."""
    if not is_remote(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)
        return
    fs = _remote(path)
    under = [p for p, _ in fs.match(path.rstrip("/") + "/**")]
    if fs.exists(path):
        under.append(path)
    if under:
        fs.delete(under)


def delete_file(path: str) -> None:
    """Deletes the file `path` if it exists; remote, one request (`delete` lists a prefix first)."""
    if not is_remote(path):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        return
    fs = _remote(path)
    try:
        fs.delete([path])
    except Exception:  # each file system raises its own types; a missing file is not an error here
        if fs.exists(path):
            raise


def list_names(folder: str) -> list[str]:
    """Names of the entries directly in `folder` (empty if it does not exist)."""
    if not is_remote(folder):
        try:
            return sorted(os.listdir(folder))
        except FileNotFoundError:
            return []
    prefix = folder.rstrip("/") + "/"
    matches = _remote(folder).match(prefix + "**")
    return sorted({p[len(prefix) :].split("/")[0] for p, _ in matches if p.startswith(prefix)})


def list_files(root: str) -> list[tuple[str, None]]:
    """(path relative to root, None) for every object under a remote root, as `listing.list_folders` takes."""
    prefix = root.rstrip("/") + "/"
    matches = _remote(root).match(prefix + "**")
    return sorted((p[len(prefix) :], None) for p, _ in matches if p.startswith(prefix) and p != prefix)
