"""File access for the pipeline: local paths directly, `gs://`, `s3://` and other
schemes through Beam's FileSystems. Writes go to a temporary name and are
renamed into place, so a reader never sees a half-written file under its final name.
Each writer has a temporary name of its own (`temp_path`): a runner may run two
attempts of one task at once (a retry while the first attempt still runs, or
speculative execution), and both then write the same bytes, each to its own
file, and both renames succeed.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import secrets
import shutil


def is_remote(path: str) -> bool:
    return "://" in path


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def input_path(source: str, path: str) -> str:
    """Where an input is: `path` relative to SOURCE, or, for paths outside SOURCE
    (`--allow-outside-source`), an absolute path or URL, or a relative one
    starting with `../`."""
    if "://" in path or (not is_remote(source) and os.path.isabs(path)):
        return path
    if is_remote(source) and path.startswith("../"):
        scheme, _, rest = source.partition("://")
        return f"{scheme}://{posixpath.normpath(posixpath.join(rest, path))}"
    return join(source, path)


def _fs():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def read_bytes(path: str) -> bytes:
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    from apache_beam.io.filesystem import CompressionTypes

    with _fs().open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def open_read(path: str):
    if not is_remote(path):
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes

    return _fs().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_exact(f, size: int) -> bytes:
    """`size` bytes from `f`, fewer only at its end: a file system's reader may return
    less than asked at a time (a raw stream, a network read cut short)."""
    pieces, left = [], size
    while left > 0:
        piece = f.read(left)
        if not piece:
            break
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


def open_write(path: str):
    """Opens `path` for writing, creating parent folders (local)."""
    if not is_remote(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return open(path, "wb")
    from apache_beam.io.filesystem import CompressionTypes

    return _fs().create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def rename(src: str, dst: str) -> None:
    if not is_remote(src):
        os.replace(src, dst)
    else:
        if exists(dst):
            _fs().delete([dst])
        _fs().rename([src], [dst])


_TEMP = re.compile(r"\.[0-9a-f]{8}\.part")


def temp_path(path: str) -> str:
    """A temporary sibling of `path` to write it under, then rename: a new name for every call."""
    return f"{path}.{secrets.token_hex(4)}.part"


def is_temp_of(name: str, final: str) -> bool:
    """Whether file name `name` is a `temp_path` of file name `final`."""
    return name.startswith(final) and _TEMP.fullmatch(name, len(final)) is not None


def write_atomic(path: str, data: bytes) -> None:
    """Writes `data` to `path` via a temporary sibling (`temp_path`) and a rename."""
    tmp = temp_path(path)
    with open_write(tmp) as f:
        f.write(data)
    rename(tmp, path)


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    return _fs().exists(path)


def size(path: str) -> int | None:
    """The size of a file in bytes, or None if it does not exist."""
    if not is_remote(path):
        try:
            return os.path.getsize(path)
        except OSError:
            return None
    matches = _fs().match([path])[0].metadata_list
    return matches[0].size_in_bytes if matches else None


def signature(path: str, data: bytes | None = None) -> str:
    """A short string that changes when the file at `path` changes; "" if it cannot be found.

    Local files: size, modification time, inode and mode. Object stores give no
    cheap modification time, so there it is the size (taken from `data`, the
    bytes just read, when given).
    """
    if not is_remote(path):
        try:
            st = os.stat(path)
        except OSError:
            return ""
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_mode:o}"
    if data is not None:
        return str(len(data))
    try:
        found = size(path)
    except Exception:  # each FileSystem raises its own types
        return ""
    return "" if found is None else str(found)


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
    under = [m.path for m in _fs().match([path.rstrip("/") + "/**"])[0].metadata_list]
    if exists(path):
        under.append(path)
    if under:
        _fs().delete(under)


def list_names(folder: str) -> list[str]:
    """Names of the entries directly in `folder` (empty if it does not exist)."""
    if not is_remote(folder):
        try:
            return sorted(os.listdir(folder))
        except FileNotFoundError:
            return []
    prefix = folder.rstrip("/") + "/"
    # "**", not "*": FileSystems built on glob match only files with "*", and leave out names
    # starting with "." (such as .prep-tmp); object stores match across "/" with either.
    matches = _fs().match([prefix + "**"])[0].metadata_list
    return sorted({m.path[len(prefix):].split("/")[0] for m in matches if m.path.startswith(prefix)})


def list_files(root: str) -> list[tuple[str, None]]:
    """(path relative to root, None) for every object under a remote root, as `prep.sources` expects."""
    prefix = root.rstrip("/") + "/"
    matches = _fs().match([prefix + "**"])[0].metadata_list
    return sorted((m.path[len(prefix):], None) for m in matches if m.path.startswith(prefix) and m.path != prefix)
