"""`simfs://`: a simulated object store that counts every request, for tests and bench/scale_sim.py.

Importing this module registers the scheme (Beam finds FileSystem subclasses by their scheme()).

**Source side, virtual.** `simfs://src/<C>x<P>[d<K>]/class-CCCC/img-NNNNNNN.jpg` is one of C classes
of P images each; nothing is on disk: a listing is generated from the name, and each image is a small
JPEG drawn from its (class, number) with a seeded generator, padded with a JPEG comment to IMAGE_BYTES so
that a listing knows every size without drawing anything. Images differ in their pixels (random 8x8
grey blocks; their pHashes are far apart), so dedupe does not group them. With `d<K>`, every K-th image
of a class (number % K == K - 1) repeats the picture of the one before it, byte for byte: an exact
duplicate. The source is read-only.

**Everything else is stored** in a local folder, `$SIMFS_STORE` (default /tmp/simfs-store):
`simfs://out/a/b` is `$SIMFS_STORE/out/a/b`. The semantics are an object store's: no folders
(`mkdirs` does nothing, `exists` is true for objects only, `match` lists keys by prefix), an object
appears whole when its writer closes, and `rename` is a copy and a delete, object by object.

**Counting.** Every request is counted per process by (kind, what, caller): kind is one of KINDS; what
is "src" for a source image, else the key with digit runs and hex tokens replaced by `#` (so that
`chunk-000012-0003.bin` counts as `chunk-#-#.bin`); caller is the first frame of project code
(`prep/`, `beam_jobs/`, `loaders/`) on the stack, as `file:function`, skipping `prep/core/storage.py`
and `beam_jobs/beam_fs.py`, which only pass calls on. Request kinds follow what GCS or S3 would be asked:
a list page per 1,000 keys returned (`list`); `exists`, `size`, `metadata`, `last_updated`, `checksum`
(`stat`); an opened reader's first read, and each read after a seek elsewhere (`read`, a ranged GET);
`create` (`write`, one upload); `copy`; `rename` (one per object; a copy and a delete on a real store,
so two requests in `requests()`); `delete` (one per object). Bytes read and written are counted too.

With `$SIMFS_COUNTS` set to a folder (or `start_counting(folder)`), each process writes its counts to `<folder>/<pid>.json` at most
once a second while it makes requests, at exit, and on `flush()` (call it on Dask workers before they are
closed: `client.run(simfs.flush)`); `load_counts(folder)` sums them. A forked child starts from zero.
`$SIMFS_LATENCY_MS` adds that much sleep to every request, in the process that makes it.
"""

from __future__ import annotations

import atexit
import collections
import functools
import io
import json
import os
import re
import shutil
import sys
import threading
import time
import uuid

import numpy as np
from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, FileSystem

SCHEME = "simfs"
PREFIX = SCHEME + "://"
SOURCE_BUCKET = "src"
IMAGE_BYTES = 2048  # every source image, padded: a listing needs no drawing
IMAGE_SIDE = 64
LIST_PAGE = 1000  # keys per list request, as GCS and S3 return them
KINDS = ("list", "stat", "read", "write", "copy", "rename", "delete")
_SPEC = re.compile(r"(\d+)x(\d+)(?:d(\d+))?")
_IMAGE = re.compile(r"class-(\d{4})/img-(\d{7})\.jpg")
_VARYING = re.compile(r"[0-9a-f]{6,}|\d+")


def source_url(classes: int, per_class: int, duplicate_every: int | None = None) -> str:
    """The SOURCE folder of `classes` x `per_class` generated images (with an exact duplicate every K)."""
    dup = f"d{duplicate_every}" if duplicate_every else ""
    return f"{PREFIX}{SOURCE_BUCKET}/{classes}x{per_class}{dup}"


def store_root() -> str:
    return os.environ.get("SIMFS_STORE", "/tmp/simfs-store")


# ---- the generated source -------------------------------------------------------------------------------

def _parse_source(path: str) -> tuple[str, int, int, int | None, str]:
    """(spec folder URL, classes, per_class, duplicate_every, rest of the key) of a source path."""
    key = path[len(PREFIX) + len(SOURCE_BUCKET) + 1:]
    spec, _, rest = key.partition("/")
    m = _SPEC.fullmatch(spec)
    if not m:
        raise BeamIOError(f"not a simfs source folder: {path}", {})
    dup = int(m.group(3)) if m.group(3) else None
    return f"{PREFIX}{SOURCE_BUCKET}/{spec}", int(m.group(1)), int(m.group(2)), dup, rest


def _source_image(path: str) -> tuple[int, int] | None:
    """(class, number of the picture drawn) of an existing source image, or None."""
    _, classes, per_class, dup, rest = _parse_source(path)
    m = _IMAGE.fullmatch(rest)
    if not m:
        return None
    c, n = int(m.group(1)), int(m.group(2))
    if c >= classes or n >= per_class:
        return None
    if dup and n % dup == dup - 1:
        n -= 1
    return c, n


def source_names(classes: int, per_class: int) -> list[str]:
    """Keys under a source folder, in key order."""
    return [f"class-{c:04d}/img-{n:07d}.jpg" for c in range(classes) for n in range(per_class)]


@functools.lru_cache(maxsize=4096)
def image_bytes(c: int, n: int) -> bytes:
    """The JPEG of picture n of class c: 8x8 random grey blocks, tinted by class, padded to IMAGE_BYTES."""
    from PIL import Image

    rng = np.random.default_rng([c, n, 7919])
    blocks = rng.integers(0, 256, size=(8, 8), dtype=np.uint8)
    grey = np.kron(blocks, np.ones((IMAGE_SIDE // 8, IMAGE_SIDE // 8), dtype=np.uint8))
    tint = np.array([(c * 53) % 256, (c * 97) % 256, (c * 29) % 256], dtype=np.uint16)
    rgb = ((grey[..., None].astype(np.uint16) * 3 + tint) // 4).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(out, "JPEG", quality=90)
    data = out.getvalue()
    pad = IMAGE_BYTES - len(data) - 4  # a COM segment: FF FE, 2-byte length, payload
    if pad < 0:
        raise ValueError(f"image {c}/{n} encodes to {len(data)} bytes, more than IMAGE_BYTES")
    comment = b"\xff\xfe" + (pad + 2).to_bytes(2, "big") + b"\0" * pad
    return data[:2] + comment + data[2:]


# ---- counting ---------------------------------------------------------------------------------------------

_lock = threading.Lock()
_counts: collections.Counter = collections.Counter()  # (kind, what, caller) -> requests
_bytes: collections.Counter = collections.Counter()  # ("read"|"write", what) -> bytes
_last_flush = [0.0]
_SKIP_FILES = ("/prep/core/storage.py", "/beam_jobs/beam_fs.py")
_PROJECT = re.compile(r".*/((?:prep|beam_jobs|loaders)/.*)\.py$")


def _reset_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _counts.clear()
    _bytes.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


@functools.lru_cache(maxsize=None)
def _frame_label(filename: str, name: str) -> str | None:
    if filename.endswith(_SKIP_FILES) or "site-packages" in filename:
        return None
    m = _PROJECT.match(filename)
    return f"{m.group(1)}:{name}" if m else None


def _caller() -> str:
    frame = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            break
        label = _frame_label(frame.f_code.co_filename, frame.f_code.co_name)
        if label:
            return label
        frame = frame.f_back
    return "other"


def what(path: str) -> str:
    """How a request's object is counted: "src", or its key with varying parts as #."""
    if path.startswith(PREFIX + SOURCE_BUCKET + "/"):
        return "src"
    return _VARYING.sub("#", path[len(PREFIX):] if path.startswith(PREFIX) else path)


def _count(kind: str, path: str, n: int = 1, nbytes: int = 0) -> None:
    latency = float(os.environ.get("SIMFS_LATENCY_MS") or 0)
    if latency:
        time.sleep(latency * n / 1000)
    key = (kind, what(path), _caller())
    with _lock:
        _counts[key] += n
        if nbytes:
            _bytes[(kind, key[1])] += nbytes
    if time.monotonic() - _last_flush[0] > 1.0:
        flush()


def _count_bytes(kind: str, path: str, nbytes: int) -> None:
    with _lock:
        _bytes[(kind, what(path))] += nbytes


def flush() -> None:
    """Writes this process's counts to $SIMFS_COUNTS/<pid>.json (if set), replacing its previous ones."""
    folder = os.environ.get("SIMFS_COUNTS")
    _last_flush[0] = time.monotonic()
    if not folder:
        return
    with _lock:
        doc = {"counts": [[*k, v] for k, v in _counts.items()], "bytes": [[*k, v] for k, v in _bytes.items()]}
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.getpid()}.{uuid.uuid4().hex}")
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, os.path.join(folder, f"{os.getpid()}.json"))


atexit.register(flush)


def start_counting(folder: str | None) -> None:
    """From now on, counts start from zero and go to `folder` (None: kept in memory only); for a process
    that outlives one run, such as a Dask worker: `client.run(simfs.start_counting, folder)`."""
    with _lock:
        _counts.clear()
        _bytes.clear()
    if folder is None:
        os.environ.pop("SIMFS_COUNTS", None)
    else:
        os.environ["SIMFS_COUNTS"] = folder


def local_counts() -> tuple[collections.Counter, collections.Counter]:
    """This process's (requests by (kind, what, caller), bytes by (kind, what)), copies."""
    with _lock:
        return collections.Counter(_counts), collections.Counter(_bytes)


def load_counts(folder: str) -> tuple[collections.Counter, collections.Counter]:
    """The counts every process wrote to `folder`, summed."""
    counts: collections.Counter = collections.Counter()
    nbytes: collections.Counter = collections.Counter()
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                doc = json.load(f)
            for kind, obj, caller, n in doc["counts"]:
                counts[(kind, obj, caller)] += n
            for kind, obj, n in doc["bytes"]:
                nbytes[(kind, obj)] += n
    return counts, nbytes


def requests(counts: collections.Counter, kind: str | None = None) -> int:
    """Requests a real object store would serve: a rename is a copy and a delete there."""
    weight = {"rename": 2}
    return sum(n * (weight.get(k, 1) if kind is None else 1) for (k, _, _), n in counts.items()
               if kind is None or k == kind)


# ---- the file system --------------------------------------------------------------------------------------

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
        return path.startswith(PREFIX + SOURCE_BUCKET + "/")

    @staticmethod
    def _local(path: str) -> str:
        key = path[len(PREFIX):]
        if not key or key.startswith(("/", ".")) or "/../" in key:
            raise BeamIOError(f"bad simfs key: {path}", {})
        return os.path.join(store_root(), key)

    # listing
    def _list(self, dir_or_prefix):
        found = self._list_source(dir_or_prefix) if self._is_source(dir_or_prefix) else self._list_store(dir_or_prefix)
        _count("list", dir_or_prefix, max(1, -(-len(found) // LIST_PAGE)))
        return iter(found)

    def _list_source(self, prefix: str) -> list[FileMetadata]:
        folder, classes, per_class, _, _ = _parse_source(prefix.rstrip("/") + "/")
        return [FileMetadata(url, IMAGE_BYTES, 0.0) for url in
                (f"{folder}/{name}" for name in source_names(classes, per_class)) if url.startswith(prefix)]

    def _list_store(self, prefix: str) -> list[FileMetadata]:
        key = prefix[len(PREFIX):]
        base = os.path.join(store_root(), key[:key.rfind("/") + 1] if "/" in key else "")
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
            return _source_image(path) is not None
        return os.path.isfile(self._local(path))

    def _stat(self, path) -> os.stat_result | None:
        if self._is_source(path):
            if _source_image(path) is None:
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
            found = _source_image(path)
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
            found = _source_image(src)
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
