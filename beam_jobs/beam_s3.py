"""Fixes to Beam's S3 file system (apache_beam.io.aws), applied by `apply()` in every process that
reaches an ``s3://`` path through `beam_jobs.beam_fs`, and reads in one request (`read_range`).

- **Small objects in one request, empty ones at all.** Beam's `S3Uploader` opens a multipart upload
  when a file is opened for writing, and uploads its parts of 5 MiB when it is closed. A file written
  with no byte is then a multipart upload of no part, which S3 refuses (MalformedXML): a conversion
  writes empty work files (an empty rejects list, a chunk with nothing to spill). `_Uploader` opens the
  multipart upload only when the first part of 5 MiB is due; a file smaller than that, empty included,
  is one PutObject, not three requests (create, upload part, complete). Its failure is an `OSError`
  naming the object (ENOENT: no such bucket; EACCES: refused), which `prep` reports in one line.
- **A copy is one CopyObject** (a rename is a copy and a delete): boto3's managed copy, which Beam calls,
  asks for the source's metadata first; it is kept for an object too large for one CopyObject (5 GiB).
- **One boto3 client per set of options, not per call.** Beam's `S3FileSystem` builds a new `S3IO`, and
  with it a new boto3 session and client, for every call (exists, open, match, ...): ~0.15 s of CPU
  each, most of a conversion's time on a small dataset. `_shared_client` builds Beam's client wrapper
  once per set of S3 options and hands out shallow copies of it: every copy shares the boto3 client
  (thread-safe) and has its own download position (the wrapper keeps one per open file).

- **A read is one GetObject.** Beam's `S3Downloader` asks for an object's metadata (HeadObject) before
  every read, to learn a size that a reader of a whole object or of a known range does not need: two
  requests per read. `read_range` is one GetObject (with a Range header for a part); a missing object is
  an `OSError` ENOENT (FileNotFoundError, as Beam's own reader raises), a refused one EACCES.

The fixes replace names in Beam's modules (`s3io.S3Uploader`, `boto3_client.Client`) that Beam looks up at
call time; the tests convert to moto's S3 server through them (tests/e2e/test_object_stores.py).
"""

from __future__ import annotations

import copy
import errno
import threading

_applied = False
_lock = threading.Lock()
_templates: dict[tuple, object] = {}
_keys: dict[int, tuple[object, tuple]] = {}
_OPTIONS = (
    "s3_access_key_id",
    "s3_secret_access_key",
    "s3_session_token",
    "s3_endpoint_url",
    "s3_region_name",
    "s3_api_version",
    "s3_verify",
    "s3_disable_ssl",
)


def apply() -> None:
    """Installs the fixes, once per process; without Beam's AWS extra (boto3) there is nothing to fix."""
    global _applied
    if _applied:
        return
    with _lock:
        if _applied:
            return
        try:
            from apache_beam.io.aws import s3io
            from apache_beam.io.aws.clients.s3 import boto3_client, messages
        except ImportError:
            _applied = True
            return
        if not s3io.BOTO3_INSTALLED:
            _applied = True
            return
        beam_client = boto3_client.Client
        beam_uploader = s3io.S3Uploader

        class Client(beam_client):  # type: ignore[misc, valid-type]
            def copy(self, request):
                # boto3's managed copy asks for the source's metadata first (HeadObject) to choose between
                # one CopyObject and a multipart copy, which only an object over 5 GiB needs
                source = {"Bucket": request.src_bucket, "Key": request.src_key}
                try:
                    self.client.copy_object(CopySource=source, Bucket=request.dest_bucket, Key=request.dest_key)
                except Exception as exc:
                    if getattr(exc, "response", {}).get("Error", {}).get("Code") == "InvalidRequest":
                        super().copy(request)  # too large for one CopyObject
                        return
                    raise messages.S3ClientError(str(exc), boto3_client.get_http_error_code(exc)) from exc

        def shared_client(options):
            key = _options_key(options)
            with _lock:
                template = _templates.get(key)
                if template is None:
                    template = _templates[key] = Client(options=options)
            return copy.copy(template)

        class Uploader(beam_uploader):  # type: ignore[misc, valid-type]
            def _start_upload(self):
                pass  # opened in _write_to_s3, when a part of 5 MiB is due

            def _write_to_s3(self, data):
                if self.upload_id is None:
                    super()._start_upload()
                super()._write_to_s3(data)

            def finish(self):
                if self.upload_id is not None:
                    super().finish()
                    return
                try:
                    self._client.client.put_object(
                        Bucket=self._bucket, Key=self._name, Body=self.buffer, ContentType=self._mime_type
                    )
                except Exception as exc:  # boto3's errors: an OSError, as `prep` reports any file it cannot write
                    raise _os_error(exc, self._path) from exc
                self.buffer = b""

        # names Beam looks up at call time (`s3io.S3IO.__init__`, `s3io.S3IO.open`)
        setattr(boto3_client, "Client", shared_client)  # noqa: B010 - mypy: a class replaced by a factory
        setattr(s3io, "S3Uploader", Uploader)  # noqa: B010
        _applied = True


def read_range(options, path: str, start: int, end: int | None) -> bytes:
    """Bytes `start` to `end` (exclusive; None: to its end) of the object at `path`, in one GetObject.

    Past the end of the object: b"" (S3 answers 416). A read cut short by the connection is asked
    again once, as Beam's own client does (long-lived connections drop).
    """
    apply()
    from apache_beam.io.aws import s3io
    from apache_beam.io.aws.clients.s3 import boto3_client

    if options is None:
        raise ValueError("Must provide one of client or options")  # what Beam's S3IO says (beam_fs.configure)
    client = boto3_client.Client(options=options).client
    bucket, key = s3io.parse_s3_path(path)
    ranged = {"Range": f"bytes={start}-{'' if end is None else end - 1}"} if start or end is not None else {}
    for attempt in (1, 2):
        try:
            return client.get_object(Bucket=bucket, Key=key, **ranged)["Body"].read()
        except Exception as exc:
            code = boto3_client.get_http_error_code(exc)
            if code == 416:
                return b""
            if code is None and attempt == 1:
                continue
            raise _os_error(exc, path) from exc
    raise AssertionError("unreachable")


def _os_error(exc: Exception, path: str) -> OSError:
    """boto3's error as the OSError `prep` reports for any file: ENOENT (missing), EACCES (refused), EIO."""
    from apache_beam.io.aws.clients.s3 import boto3_client

    code = boto3_client.get_http_error_code(exc)
    return OSError({404: errno.ENOENT, 403: errno.EACCES}.get(code, errno.EIO), str(exc), path)


def _options_key(options) -> tuple:
    # Beam hands every call the one options object FileSystems holds: parse it once (view_as parses anew).
    known = _keys.get(id(options))
    if known is not None and known[0] is options:
        return known[1]
    key = _parse_key(options)
    _keys[id(options)] = (options, key)  # the options kept alive: their id stays theirs
    return key


def _parse_key(options) -> tuple:
    if isinstance(options, dict):
        return tuple(repr(options.get(name)) for name in _OPTIONS)
    from apache_beam.options.pipeline_options import S3Options

    s3 = options.view_as(S3Options)
    return tuple(repr(getattr(s3, name, None)) for name in _OPTIONS)
