"""Local servers that speak the real object-store protocols, for tests and for trying `prep` by hand:
moto's S3 server (`s3://`) and gcp-storage-emulator (`gs://`), each on a free port of 127.0.0.1.

`start("s3")` / `start("gs")` runs one in a child process and returns a `Store`: the environment and the
Beam options (`beam_args`, the words after `--`) that point `prep` at it, helpers that make buckets and
upload a folder through the stores' own clients, and `requests()`, the requests the server answered,
counted from its own log (one line per request), so a count includes every client's calls.

The environment keeps every client off the network beyond the server: no metadata server probed
(NO_GCE_CHECK, AWS_EC2_METADATA_DISABLED), no background bucket lookups by google-cloud-storage's
telemetry, and a stand-in Google credentials file with a token that never expires. Without that file,
Beam looks for default credentials with 4 retries and backs off 19-26 s per process before it connects
anonymously (Beam's `--no_auth` is not read for gs://); google-cloud-storage sends the stand-in token to
the emulator, which ignores it.

By hand: `python -m tests.support.objstores s3` prints the environment and options, and serves until ^C.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REQUEST_LINE = re.compile(r'"(GET|PUT|POST|DELETE|HEAD|PATCH) (\S+) HTTP/[\d.]+" (\d{3})')
ACCESS_KEY = "testing"  # moto accepts any key pair
FAKE_TOKEN = {
    "type": "authorized_user",
    "client_id": "emulator",
    "client_secret": "emulator",
    "refresh_token": "emulator",
    "token": "emulator",
    "expiry": "2999-01-01T00:00:00Z",
}


def kind(request_line: str) -> str:
    """What a logged request does: list, stat, read, write, copy, delete, batch (GCS's batch of copies or
    deletes) or bucket (a request about a bucket, not an object). A PUT on S3 may be a copy: its log
    does not say (the copy source is a header)."""
    m = REQUEST_LINE.search(request_line)
    if not m:
        return "other"
    method, target = m.group(1), m.group(2)
    path, _, query = target.partition("?")
    if path.startswith(("/storage/", "/upload/", "/download/", "/batch/")):  # GCS's JSON API
        if path.startswith("/batch/"):
            return "batch"
        if path.startswith("/upload/"):
            return "write"
        if path.startswith("/download/") or "alt=media" in query:
            return "read"
        parts = path.split("/")  # ['', 'storage', 'v1', 'b', BUCKET, 'o', NAME...]
        if len(parts) <= 5:
            return "bucket"
        if len(parts) == 6:
            return "list"
        if "/rewriteTo/" in path or "/copyTo/" in path or "/compose" in path:
            return "copy"
        return {"DELETE": "delete", "GET": "stat"}.get(method, "write")
    bucket_only = path.strip("/").count("/") == 0  # S3: /BUCKET or /BUCKET/KEY
    if method == "POST" and "delete" in query:
        return "delete"
    if bucket_only:
        return "list" if method == "GET" else "bucket"
    return {"HEAD": "stat", "GET": "read", "DELETE": "delete"}.get(method, "write")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Store:
    """One running server: `url(...)` names objects in it; `env` and `beam_args` reach it."""

    scheme: str  # "s3" or "gs"
    endpoint: str
    env: dict[str, str]
    beam_args: list[str]
    log: pathlib.Path
    process: subprocess.Popen

    def url(self, bucket: str, path: str = "") -> str:
        return f"{self.scheme}://{bucket}/{path}".rstrip("/")

    def _s3(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=ACCESS_KEY,
        )

    def _gcs(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        # creating a bucket names a project; the emulator takes any
        return storage.Client("test", AnonymousCredentials(), client_options={"api_endpoint": self.endpoint})

    def make_bucket(self, name: str) -> None:
        if self.scheme == "s3":
            self._s3().create_bucket(Bucket=name)
        else:
            self._gcs().create_bucket(name)

    def upload_tree(self, root: pathlib.Path, bucket: str, prefix: str) -> str:
        """Uploads every file under `root` to bucket/prefix/...; returns the prefix's URL."""
        files = sorted(p for p in root.rglob("*") if p.is_file())
        if self.scheme == "s3":
            s3 = self._s3()
            for p in files:
                s3.put_object(Bucket=bucket, Key=f"{prefix}/{p.relative_to(root).as_posix()}", Body=p.read_bytes())
        else:
            gcs = self._gcs().bucket(bucket)
            for p in files:
                gcs.blob(f"{prefix}/{p.relative_to(root).as_posix()}").upload_from_string(p.read_bytes())
        return self.url(bucket, prefix)

    def requests(self) -> collections.Counter:
        """Requests the server has answered so far, by (method, status)."""
        counts: collections.Counter = collections.Counter()
        for line in self.log.read_text(errors="replace").splitlines():
            m = REQUEST_LINE.search(line)
            if m:
                counts[(m.group(1), int(m.group(3)))] += 1
        return counts

    def request_lines(self) -> list[str]:
        return [m.group(0) for m in map(REQUEST_LINE.search, self.log.read_text(errors="replace").splitlines()) if m]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _command(scheme: str, port: int) -> list[str]:
    if scheme == "s3":
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    return [sys.executable, "-m", "gcp_storage_emulator", "start", "--host=127.0.0.1", f"--port={port}", "--in-memory"]


def _ready(scheme: str, endpoint: str) -> bool:
    probe = endpoint + ("/" if scheme == "s3" else "/storage/v1/b")
    try:
        with urllib.request.urlopen(probe, timeout=1):
            return True
    except urllib.error.HTTPError:  # it answers (an S3 server that checks credentials refuses the probe's none)
        return True
    except OSError:
        return False


def start(scheme: str, workdir: pathlib.Path, auth: bool = False, timeout: float = 30.0) -> Store:
    """Starts the server for `scheme` ("s3" or "gs"); raises RuntimeError (with its log) if it does not answer.

    `auth` (S3 only): moto checks credentials, and refuses ours (InvalidAccessKeyId, 403) as it knows no key.
    """
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = workdir / f"{scheme}-server{'-auth' if auth else ''}.log"
    quiet = {**os.environ, "PYTHONUNBUFFERED": "1", **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if auth else {})}
    with open(log, "wb") as out:
        process = subprocess.Popen(_command(scheme, port), stdout=out, stderr=subprocess.STDOUT, env=quiet)
    deadline = time.monotonic() + timeout
    while not _ready(scheme, endpoint):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{scheme} server did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    if scheme == "s3":
        env = {"AWS_EC2_METADATA_DISABLED": "true"}
        beam_args = [
            f"--s3_endpoint_url={endpoint}",
            f"--s3_access_key_id={ACCESS_KEY}",
            f"--s3_secret_access_key={ACCESS_KEY}",
            "--s3_region_name=us-east-1",
        ]
    else:
        token = workdir / "emulator-credentials.json"
        token.write_text(json.dumps(FAKE_TOKEN))
        env = {
            "STORAGE_EMULATOR_HOST": endpoint,
            "GOOGLE_APPLICATION_CREDENTIALS": str(token),
            "GOOGLE_CLOUD_PROJECT": "test",
            "NO_GCE_CHECK": "true",
            "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA": "true",
        }
        beam_args = []
    return Store(scheme, endpoint, env, beam_args, log, process)


if __name__ == "__main__":  # serve one by hand: python -m tests.support.objstores s3|gs
    store = start(sys.argv[1], pathlib.Path(tempfile.mkdtemp()))
    print(" ".join(f"{k}={v}" for k, v in store.env.items()))
    print("beam options after --:", " ".join(store.beam_args))
    try:
        store.process.wait()
    except KeyboardInterrupt:
        store.stop()
