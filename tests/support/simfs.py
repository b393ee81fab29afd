"""`simfs://`: a simulated object store that counts every request, for tests and bench/scale_sim.py.

Importing this module registers the scheme (Beam finds FileSystem subclasses by their scheme()).

**Source side, virtual** (tests/support/simsource.py): `simfs://src/<C>x<P>[d<K>]/class-CCCC/img-NNNNNNN.jpg`,
C classes of P distinct generated JPEGs (every K-th an exact copy of the one before), listed and served
from their names with no disk. The source is read-only.

**Everything else is stored** in a local folder, `$SIMFS_STORE` (default /tmp/simfs-store):
`simfs://out/a/b` is `$SIMFS_STORE/out/a/b`. The semantics are an object store's: no folders
(`mkdirs` does nothing, `exists` is true for objects only, `match` lists keys by prefix), an object
appears whole when its writer closes (`UPLOADS_WHOLE`, as GCS and S3 say), and `rename` is a copy and a
delete, object by object.

**Counting** (tests/support/simcounts.py): every request, by kind (KINDS), key pattern and the calling
function of project code, per process, summed over processes through `$SIMFS_COUNTS`; `$SIMFS_LATENCY_MS`
adds that much sleep to every request. What counts as one request follows what GCS or S3 would be asked:
a list page per 1,000 keys returned (`list`); `exists`, `size`, `metadata`, `last_updated`, `checksum`
(`stat`); an opened reader's first read, and each read after a seek elsewhere (`read`, a ranged GET);
`create` (`write`, one upload); `copy`; `rename` (one per object; a copy and a delete on a real store,
so two in `requests()`); `delete` (one per object).
"""

from __future__ import annotations

import io
import os
import shutil
import uuid

from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, FileSystem

from tests.support.simcounts import KINDS, flush, load_counts, local_counts, requests, start_counting  # noqa: F401
from tests.support.simcounts import count as _count
from tests.support.simcounts import count_bytes as _count_bytes
from tests.support.simsource import IMAGE_BYTES, image_bytes, parse_source, source_image, source_names
from tests.support.simsource import ROOT as SOURCE_ROOT

SCHEME = "simfs"
PREFIX = SCHEME + "://"
LIST_PAGE = 1000  # keys per list request, as GCS and S3 return them


def source_url(classes: int, per_class: int, duplicate_every: int | None = None) -> str:
    """The SOURCE folder of `classes` x `per_class` generated images (with an exact duplicate every K)."""
    dup = f"d{duplicate_every}" if duplicate_every else ""
    return f"{SOURCE_ROOT}/{classes}x{per_class}{dup}"


def store_root() -> str:
    return os.environ.get("SIMFS_STORE", "/tmp/simfs-store")


class _Reader(io.RawIOBase):
    """A seekable reader that counts a ranged GET for its first read and for each read after a seek away."""

    def __init__(self, path: str, inner):
        self._path, self._inner, self._next = path, inner, None  # _next: where a running GET continues

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, b):
        pos = self._inner.tell()
        if pos != self._next:
            _count("read", self._path)
        n = self._inner.readinto(b)
        self._next = pos + n
        _count_bytes("read", self._path, n)
        return n

    def seek(self, offset, whence=io.SEEK_SET):
        return self._inner.seek(offset, whence)

    def tell(self):
        return self._inner.tell()

    def close(self):
        self._inner.close()
        super().close()


class _Writer(io.RawIOBase):
    """Writes to a hidden local file; the object appears under its key when closed (one upload)."""

    def __init__(self, path: str, local: str):
        self._path, self._local = path, local
        incoming = os.path.join(store_root(), ".incoming")
        os.makedirs(incoming, exist_ok=True)
        self._tmp = os.path.join(incoming, uuid.uuid4().hex)
        self._f = open(self._tmp, "wb")
        self._n = 0

    def writable(self):
        return True

    def write(self, b):
        n = self._f.write(b)
        self._n += n
        return n

    def close(self):
        if self.closed:
            return
        self._f.close()
        os.makedirs(os.path.dirname(self._local), exist_ok=True)
        os.replace(self._tmp, self._local)
        _count("write", self._path, nbytes=self._n)
        super().close()


class SimFileSystem(FileSystem):
    """Beam FileSystem for `simfs://` (see the module docstring)."""

    CHUNK_SIZE = 1
    UPLOADS_WHOLE = True  # an object appears when its upload ends, as on GCS and S3 (beam_jobs/beam_fs.py)

    @classmethod
    def scheme(cls):
        return SCHEME

    # paths
    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path):
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def has_dirs(self):
        return False

    def mkdirs(self, path):
        pass  # an object store has no folders

    @staticmethod
    def _is_source(path: str) -> bool:
        return path.startswith(SOURCE_ROOT + "/")

    @staticmethod
    def _local(path: str) -> str:
        key = path[len(PREFIX) :]
        if not key or key.startswith(("/", ".")) or "/../" in key:
            raise BeamIOError(f"bad simfs key: {path}", {})
        return os.path.join(store_root(), key)

    # listing
    def _list(self, dir_or_prefix):
        """Yields the objects under a prefix a page at a time, counting a request per page, as GCS's does:
        the simulator holds no listing of its own beside what its caller keeps."""
        found = self._list_source(dir_or_prefix) if self._is_source(dir_or_prefix) else self._list_store(dir_or_prefix)
        pages = 0
        for n, metadata in enumerate(found):
            if n % LIST_PAGE == 0:
                pages += 1
                _count("list", dir_or_prefix)
            yield metadata
        if not pages:
            _count("list", dir_or_prefix)  # an empty page

    def _list_source(self, prefix: str):
        folder, classes, per_class, _, _ = parse_source(prefix.rstrip("/") + "/")
        return (
            FileMetadata(url, IMAGE_BYTES, 0.0)
            for url in (f"{folder}/{name}" for name in source_names(classes, per_class))
            if url.startswith(prefix)
        )

    def _list_store(self, prefix: str) -> list[FileMetadata]:
        key = prefix[len(PREFIX) :]
        base = os.path.join(store_root(), key[: key.rfind("/") + 1] if "/" in key else "")
        out = []
        for dirpath, _, files in os.walk(base):
            for name in files:
                local = os.path.join(dirpath, name)
                url = PREFIX + os.path.relpath(local, store_root()).replace(os.sep, "/")
                if url.startswith(prefix):
                    st = os.stat(local)
                    out.append(FileMetadata(url, st.st_size, st.st_mtime))
        return sorted(out, key=lambda m: m.path)

    # stat
    def exists(self, path):
        _count("stat", path)
        if self._is_source(path):
            return source_image(path) is not None
        return os.path.isfile(self._local(path))

    def _stat(self, path) -> os.stat_result | None:
        if self._is_source(path):
            if source_image(path) is None:
                raise BeamIOError(f"no such object: {path}", {path: FileNotFoundError(path)})
            return None
        try:
            return os.stat(self._local(path))
        except FileNotFoundError as exc:
            raise BeamIOError(f"no such object: {path}", {path: exc}) from None

    def size(self, path):
        _count("stat", path)
        st = self._stat(path)
        return IMAGE_BYTES if st is None else st.st_size

    def last_updated(self, path):
        _count("stat", path)
        st = self._stat(path)
        return 0.0 if st is None else st.st_mtime

    def checksum(self, path):
        _count("stat", path)
        st = self._stat(path)
        return str(IMAGE_BYTES if st is None else st.st_size)

    def metadata(self, path):
        _count("stat", path)
        st = self._stat(path)
        return FileMetadata(path, IMAGE_BYTES, 0.0) if st is None else FileMetadata(path, st.st_size, st.st_mtime)

    # read and write
    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        if self._is_source(path):
            found = source_image(path)
            if found is None:
                raise BeamIOError(f"no such object: {path}", {path: FileNotFoundError(path)})
            inner = io.BytesIO(image_bytes(*found))
        else:
            try:
                inner = open(self._local(path), "rb")
            except FileNotFoundError as exc:
                raise BeamIOError(f"no such object: {path}", {path: exc}) from None
        return io.BufferedReader(_Reader(path, inner), buffer_size=1 << 20)

    def create(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        if self._is_source(path):
            raise BeamIOError(f"the simfs source is read-only: {path}", {})
        return io.BufferedWriter(_Writer(path, self._local(path)), buffer_size=1 << 20)

    # copy, rename, delete: object by object, as on GCS and S3
    def _copy_one(self, src: str, dst: str) -> None:
        if self._is_source(dst):
            raise BeamIOError(f"the simfs source is read-only: {dst}", {})
        local = self._local(dst)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        if self._is_source(src):
            found = source_image(src)
            if found is None:
                raise FileNotFoundError(src)
            with open(local, "wb") as f:
                f.write(image_bytes(*found))
        else:
            shutil.copyfile(self._local(src), local)

    def _each(self, kind, sources, destinations, action):
        if len(sources) != len(destinations):
            raise BeamIOError(f"{kind}: {len(sources)} sources, {len(destinations)} destinations", {})
        errors = {}
        for src, dst in zip(sources, destinations):
            _count(kind, src)
            try:
                action(src, dst)
            except Exception as exc:  # noqa: BLE001 (Beam reports them together)
                errors[(src, dst)] = exc
        if errors:
            raise BeamIOError(f"{kind} failed", errors)

    def copy(self, source_file_names, destination_file_names):
        self._each("copy", source_file_names, destination_file_names, self._copy_one)

    def rename(self, source_file_names, destination_file_names):
        def move(src, dst):
            if self._is_source(src):
                raise BeamIOError(f"the simfs source is read-only: {src}", {})
            self._copy_one(src, dst)
            os.remove(self._local(src))

        self._each("rename", source_file_names, destination_file_names, move)

    def delete(self, paths):
        errors = {}
        for path in paths:
            _count("delete", path)
            if self._is_source(path):
                errors[path] = BeamIOError(f"the simfs source is read-only: {path}", {})
                continue
            try:
                os.remove(self._local(path))
            except FileNotFoundError as exc:
                errors[path] = exc
        if errors:
            raise BeamIOError("delete failed", errors)
