"""Beam's FileSystems as `prep.core.storage`'s remote file system (``gs://``, ``s3://``, ...).

`beam_jobs/__init__.py` installs it, so any process that runs our pipeline code (the
driver, and every remote worker that unpickles one of our DoFns) reaches remote paths
the way Beam does. Beam itself is imported only when a remote path is used.
"""

from __future__ import annotations

import io
import os


def file_systems():
    """Beam's FileSystems, with the object stores' file systems that the console script's lean
    import left out loaded (beam_jobs/lean_import.py)."""
    from apache_beam.io.filesystems import FileSystems

    from beam_jobs.lean_import import object_stores

    object_stores()
    return FileSystems


def _uncompressed():
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.UNCOMPRESSED


def configure(beam_args) -> None:
    """Gives Beam's FileSystems the pipeline options of `beam_args` (the words after `--`).

    Beam builds a FileSystem (S3's client, GCS's credentials, ...) from the options it was
    given, and only `Pipeline.__init__` gives them; the driver lists SOURCE and reads
    OUTPUT before any pipeline exists, so without this an S3 store answers
    "Must provide one of client or options".
    """
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(list(beam_args)))


# Object stores whose uploads appear whole when they end, and whose copy replaces its destination. A
# Beam FileSystem may also say so itself with a class attribute UPLOADS_WHOLE (tests/support/simfs.py does).
_OBJECT_STORES = ("gs", "s3")


def _store(path: str):
    """beam_s3 or beam_gcs for a path in S3 or GCS, with their fixes to Beam applied; None for other schemes."""
    if path.startswith("s3://"):
        import beam_jobs.beam_s3 as store
    elif path.startswith("gs://"):
        import beam_jobs.beam_gcs as store  # type: ignore[no-redef]
    else:
        return None
    store.apply()
    return store


def _options(path: str):
    """The pipeline options Beam builds `path`'s FileSystem with (FileSystems.set_options, or a worker's)."""
    fs = file_systems().get_filesystem(path)
    return getattr(fs, "_options", None) or getattr(fs, "_pipeline_options", None)


class BeamFileSystems:
    """`RemoteFileSystem` over `apache_beam.io.filesystems.FileSystems`."""

    def handles(self, path: str) -> bool:
        try:
            file_systems().get_filesystem(path)
        except ValueError:  # no FileSystem registered for the scheme
            return False
        _store(path)  # every process that reaches S3 or GCS (driver or worker) gets the fixes
        return True

    def open_read(self, path: str):
        store = _store(path)
        if store is None:
            return file_systems().open(path, compression_type=_uncompressed())
        options = _options(path)
        return RangeReader(lambda start, end: store.read_range(options, path, start, end), path)

    def open_write(self, path: str):
        if path.startswith("gs://"):
            import beam_jobs.beam_gcs as beam_gcs

            return beam_gcs.open_write(_options(path), path)
        return file_systems().create(path, compression_type=_uncompressed())

    def exists(self, path: str) -> bool:
        return file_systems().exists(path)

    def size(self, path: str) -> int | None:
        matches = file_systems().match([path])[0].metadata_list
        return matches[0].size_in_bytes if matches else None

    def uploads_whole(self, path: str) -> bool:
        fs = file_systems().get_filesystem(path)
        return bool(getattr(fs, "UPLOADS_WHOLE", fs.scheme() in _OBJECT_STORES))

    def rename(self, src: str, dst: str) -> None:
        # An object store's copy replaces `dst`; a file system's rename may refuse an existing one.
        if not self.uploads_whole(dst) and file_systems().exists(dst):
            file_systems().delete([dst])
        file_systems().rename([src], [dst])

    def delete(self, paths: list[str]) -> None:
        if paths and all(p.startswith("gs://") and not p.endswith("/") for p in paths):
            import beam_jobs.beam_gcs as beam_gcs

            beam_gcs.delete(_options(paths[0]), paths)
            return
        file_systems().delete(paths)

    def match(self, pattern: str) -> list[tuple[str, int]]:
        # "**", not "*", from callers: FileSystems built on glob match only files with "*", and leave out
        # names starting with "." (such as .prep-tmp); object stores match across "/" with either.
        return [(m.path, m.size_in_bytes) for m in file_systems().match([pattern])[0].metadata_list]

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))


class RangeReader(io.BufferedIOBase):
    """A reader of one object that asks the store for the bytes each read wants in one request
    (`get(start, end)`, end exclusive or None for the rest), never for its metadata: `read()` is one request
    for the whole object, a `seek` then `read(n)` one for n bytes.

    Smaller reads (headers, lines, small records) read ahead, 256 KiB at first, twice as much each time the
    reads go on where the last one ended, up to 16 MiB (Beam's read buffer): reading a whole file in small
    pieces costs a few requests, a record here and there one each. No request is made until the first read,
    so a missing object is reported there (FileNotFoundError)."""

    _AHEAD, _AHEAD_MAX = 256 << 10, 16 << 20

    def __init__(self, get, path: str):
        self._get, self.name = get, path
        self._pos = 0
        self._ahead, self._ahead_at = b"", 0  # the bytes read ahead, from offset _ahead_at
        self._span = self._AHEAD  # how much the next read ahead asks for
        self._end: int | None = None  # the object's size, once a read came back short

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_END:  # the size is asked only here: one request for metadata
            offset += file_systems().size(self.name)
        elif whence == os.SEEK_CUR:
            offset += self._pos
        if offset < 0:
            raise ValueError(f"negative seek position {offset}")
        self._pos = offset
        return offset

    def read(self, size: int | None = -1) -> bytes:
        held = self._held()
        if self._end is not None and self._pos + len(held) >= self._end:
            data = held if size is None or size < 0 else held[:size]
        elif size is None or size < 0:
            data = held + self._fetch(self._pos + len(held), None)
        elif size <= len(held):
            data = held[:size]
        elif size - len(held) >= self._span:
            data = held + self._fetch(self._pos + len(held), self._pos + size)
        else:
            data = self._read_ahead(held)[:size]
        self._pos += len(data)
        return data

    def read1(self, size: int | None = -1) -> bytes:
        """Up to `size` bytes, from what was read ahead (a TextIOWrapper reads by 8 KiB: not a request each)."""
        held = self._held() or self._read_ahead(b"")
        n = len(held) if size is None or size < 0 else min(size, len(held))
        self._pos += n
        return held[:n]

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def readline(self, size: int | None = -1) -> bytes:
        line = b""
        while size is None or size < 0 or len(line) < size:
            held = self._held() or self._read_ahead(b"")
            if not held:
                break
            cut = held.find(b"\n") + 1 or len(held)
            if size is not None and size >= 0:
                cut = min(cut, size - len(line))
            line += held[:cut]
            self._pos += cut
            if line.endswith(b"\n"):
                break
        return line

    def _read_ahead(self, held: bytes) -> bytes:
        """`held` and the next span of bytes after it, kept as read ahead from the current position."""
        start = self._pos + len(held)
        going_on = bool(self._ahead) and start == self._ahead_at + len(self._ahead)
        self._span = min(2 * self._span, self._AHEAD_MAX) if going_on else self._AHEAD
        self._ahead, self._ahead_at = held + self._fetch(start, start + self._span), self._pos
        return self._ahead

    def _fetch(self, start: int, end: int | None) -> bytes:
        if self._end is not None and start >= self._end:
            return b""
        data = self._get(start, end)
        if end is None or len(data) < end - start:
            self._end = start + len(data)
        return data

    def _held(self) -> bytes:
        """The bytes read ahead from the current position on (none after a seek elsewhere)."""
        start = self._pos - self._ahead_at
        return self._ahead[start:] if 0 <= start < len(self._ahead) else b""
