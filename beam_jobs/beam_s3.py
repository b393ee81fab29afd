"""Two fixes to Beam's S3 file system (apache_beam.io.aws), applied by `apply()` in every process that
reaches an ``s3://`` path through `beam_jobs.beam_fs`.

- **Small objects in one request, empty ones at all.** Beam's `S3Uploader` opens a multipart upload
  when a file is opened for writing, and uploads its parts of 5 MiB when it is closed. A file written
  with no byte is then a multipart upload of no part, which S3 refuses (MalformedXML): a conversion
  writes empty work files (an empty rejects list, a chunk with nothing to spill). `_Uploader` opens the
  multipart upload only when the first part of 5 MiB is due; a file smaller than that, empty included,
  is one PutObject, not three requests (create, upload part, complete). Its failure is an `OSError`
  naming the object (ENOENT: no such bucket; EACCES: refused), which `prep` reports in one line.
- **One boto3 client per set of options, not per call.** Beam's `S3FileSystem` builds a new `S3IO`, and
  with it a new boto3 session and client, for every call (exists, open, match, ...): ~0.15 s of CPU
  each, most of a conversion's time on a small dataset. `_shared_client` builds Beam's client wrapper
  once per set of S3 options and hands out shallow copies of it: every copy shares the boto3 client
  (thread-safe) and has its own download position (the wrapper keeps one per open file).

Both replace names in Beam's modules (`s3io.S3Uploader`, `boto3_client.Client`) that Beam looks up at
call time; the tests convert to moto's S3 server through them (tests/e2e/test_object_stores.py).
"""

from __future__ import annotations

import copy
import errno
import threading

_applied = False
_lock = threading.Lock()
_templates: dict[tuple, object] = {}
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
    """Installs both fixes, once per process; without Beam's AWS extra (boto3) there is nothing to fix."""
    global _applied
    if _applied:
        return
    with _lock:
        if _applied:
            return
        try:
            from apache_beam.io.aws import s3io
            from apache_beam.io.aws.clients.s3 import boto3_client
        except ImportError:
            _applied = True
            return
        if not s3io.BOTO3_INSTALLED:
            _applied = True
            return
        beam_client = boto3_client.Client
        beam_uploader = s3io.S3Uploader

        def shared_client(options):
            key = _options_key(options)
            with _lock:
                template = _templates.get(key)
                if template is None:
                    template = _templates[key] = beam_client(options=options)
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
                    code = boto3_client.get_http_error_code(exc)
                    kind = {404: errno.ENOENT, 403: errno.EACCES}.get(code, errno.EIO)
                    raise OSError(kind, str(exc), self._path) from exc
                self.buffer = b""

        # names Beam looks up at call time (`s3io.S3IO.__init__`, `s3io.S3IO.open`)
        setattr(boto3_client, "Client", shared_client)  # noqa: B010 - mypy: a class replaced by a factory
        setattr(s3io, "S3Uploader", Uploader)  # noqa: B010
        _applied = True


def _options_key(options) -> tuple:
    if isinstance(options, dict):
        return tuple(repr(options.get(name)) for name in _OPTIONS)
    from apache_beam.options.pipeline_options import S3Options

    s3 = options.view_as(S3Options)
    return tuple(repr(getattr(s3, name, None)) for name in _OPTIONS)
