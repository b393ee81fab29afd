"""Fewer requests and less set-up for Beam's GCS file system (apache_beam.io.gcp), applied by `apply()`
in every process that reaches a ``gs://`` path through `beam_jobs.beam_fs`.

- **A read is one media download.** Beam's `BeamBlobReader` reloads an object's metadata (a GET) before
  every read, to learn a size that a reader of a whole object or of a known range does not need: two
  requests per read. `read_range` is one download (with a Range header for a part); a missing object is
  an `OSError` ENOENT (FileNotFoundError), a refused one EACCES.
- **A small write is one request.** Beam's `BeamBlobWriter` always opens a resumable upload: two requests
  (open, send) for an object of a few bytes. `open_write` holds up to 8 MiB and sends that in one
  multipart upload when closed; a larger object goes on through Beam's writer as before.
- **One storage client per thread and set of options.** Beam's `GCSFileSystem` builds a new `GcsIO`,
  and with it a storage client, credentials and a connection pool, for every call, and parses its
  options each time. `apply` makes it reuse one `GcsIO` per thread (a client's connection pool is not
  shared across threads here) for the options object FileSystems hands it; the client is made by
  Beam's own `gcsio.create_storage_client`, so credentials are found as Beam finds them.
"""

from __future__ import annotations

import errno
import io
import threading
from typing import Any

_MULTIPART_LIMIT = 8 << 20  # google-cloud-storage's own bound for a one-request (multipart) upload
_local = threading.local()
_lock = threading.Lock()
_applied = False


def apply() -> None:
    """Makes Beam's GCSFileSystem reuse `_gcsio(options)`, once per process."""
    global _applied
    if _applied:
        return
    with _lock:
        if not _applied:
            from apache_beam.io.gcp import gcsfilesystem

            setattr(gcsfilesystem.GCSFileSystem, "_gcsIO", lambda fs: _gcsio(fs._pipeline_options))  # noqa: B010
            _applied = True


def _gcsio(options):
    """This thread's GcsIO for `options` (the object itself: FileSystems hands every call the same one)."""
    from apache_beam.io.gcp import gcsio
    from apache_beam.options.pipeline_options import PipelineOptions

    cache = _local.__dict__.setdefault("gcsio", {})
    found = cache.get(id(options))
    if found is None or found[0] is not options:
        parsed = PipelineOptions.from_dictionary(options) if isinstance(options, dict) else options
        found = cache[id(options)] = (options, gcsio.GcsIO(pipeline_options=parsed))  # options kept: id stays
    return found[1]


def _blob(options, path: str):
    from apache_beam.io.gcp import gcsio

    bucket, name = gcsio.parse_gcs_path(path)
    return _gcsio(options).client.bucket(bucket).blob(name)


def read_range(options, path: str, start: int, end: int | None) -> bytes:
    """Bytes `start` to `end` (exclusive; None: to its end) of the object at `path`, in one download.

    Raw bytes, as Beam reads them (no decompressive transcoding); past the end of the object: b"".
    """
    blob = _blob(options, path)
    try:
        return blob.download_as_bytes(
            start=start or None, end=None if end is None else end - 1, raw_download=True, retry=_retry(options)
        )
    except Exception as exc:
        if getattr(exc, "code", None) == 416:  # a range past the end, or any range of an empty object
            return b""
        raise _os_error(exc, path) from exc


def open_write(options, path: str, mime_type: str = "application/octet-stream"):
    """A writer of the object at `path`: one multipart upload when closed, or Beam's resumable one past 8 MiB."""
    return _SmallFirst(options, path, mime_type)


class _SmallFirst(io.RawIOBase):
    def __init__(self, options, path: str, mime_type: str):
        self._options, self._path, self._mime_type = options, path, mime_type
        self._held: bytearray | None = bytearray()
        self._beam: Any = None  # Beam's writer, once the object outgrows one request

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if self._beam is None and len(self._held or b"") + len(b) > _MULTIPART_LIMIT:
            self._beam = _gcsio(self._options).open(self._path, "wb", mime_type=self._mime_type)
            self._beam.write(bytes(self._held or b""))
            self._held = None
        if self._beam is not None:
            return self._beam.write(b)
        assert self._held is not None
        self._held += b
        return len(b)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._beam is not None:
                self._beam.close()
            elif self._held is not None:
                try:
                    _blob(self._options, self._path).upload_from_string(
                        bytes(self._held), content_type=self._mime_type, retry=_retry(self._options)
                    )
                except Exception as exc:
                    raise _os_error(exc, self._path) from exc
        finally:
            self._held = None
            super().close()


def _retry(options):
    return _gcsio(options)._storage_client_retry


def _os_error(exc: Exception, path: str) -> OSError:
    """google-cloud-storage's error as the OSError `prep` reports for any file: ENOENT, EACCES or EIO."""
    kinds = {404: errno.ENOENT, 403: errno.EACCES, 401: errno.EACCES}
    return OSError(kinds.get(getattr(exc, "code", 0), errno.EIO), str(exc), path)


def delete(options, paths: list[str]) -> None:
    """Deletes objects by name, 100 to a batch request; a missing one is no error.

    Beam's delete first matches every path (a metadata GET each) to expand patterns; the paths given
    here are names, so a name with "*" in it is that object, not a pattern.
    """
    failed = [(path, code) for path, code in _gcsio(options).delete_batch(list(paths)) if code is not None]
    if failed:
        path, code = failed[0]
        kind = errno.EACCES if code in (401, 403) else errno.EIO
        raise OSError(kind, f"cannot delete {len(failed)} of {len(paths)} objects (HTTP {code})", path)
