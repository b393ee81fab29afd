"""Every command on `s3://` and `gs://`, against local servers that speak the real protocols: moto's S3
server and gcp-storage-emulator (tests/support/objstores.py), on free ports of 127.0.0.1.

A tiny dataset (2 classes, 15 inputs, one of them undecodable) is uploaded with the stores' own clients,
converted store to store, then read back by verify, inspect, report and leakage, each given Beam's
options after `--` as a user would. The loaders are not run here: TensorFlow's file system has no
S3 and reaches GCS only at Google's own address (docs/loaders.md).
"""

from __future__ import annotations

import collections
import http.server
import json
import threading

import pytest

from tests.support import objstores
from tests.support.imagegen import write_dirty_tree

COUNTS = {"bee": 7, "cat": 6}  # + broken.jpg (rejected) + rgba.png (converted): 15 found, 14 written
WRITTEN = 14
# Requests per input the tiny conversion may make, all told: its per-run and per-chunk files weigh as much
# as its 15 inputs here (at 2,000 inputs it is ~2.4, docs/benchmarks.md). Beam's readers, which asked for
# an object's metadata before every read, made 14.7 (S3) and 21.2 (GCS).
# The listing on workers adds its per-class work files and summary (~1 a input at this size).
REQUESTS_PER_INPUT = 12  # 11.2 on both stores now


@pytest.fixture(scope="module", params=["s3", "gs"])
def store(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"objstore-{request.param}")
    try:
        server = objstores.start(request.param, work)
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"the local {request.param} server did not start: {exc}")
    with pytest.MonkeyPatch.context() as env:
        for name, value in server.env.items():
            env.setenv(name, value)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def converted(store, tmp_path_factory):
    """(store, OUTPUT URL, requests the conversion made per input)."""
    from click.testing import CliRunner

    from prep.cli import main

    root = tmp_path_factory.mktemp(f"objstore-src-{store.scheme}")
    write_dirty_tree(root, COUNTS, size=(14, 10))
    store.make_bucket("raw")
    store.make_bucket("out")
    source = store.upload_tree(root, "raw", "shapes")
    output = store.url("out", "shapes")
    before = len(store.request_lines())
    args = ["convert", source, output, "--num-shards", "2", "--split", "train=0.6,validation=0.4", "--report"]
    result = CliRunner().invoke(main, [*args, "--", *store.beam_args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"written {WRITTEN}  rejected 1" in result.output
    assert f"wrote {output}/report.html" in result.output
    return store, output, store.request_lines()[before:]


def _run(run_cli, store, *args):
    return run_cli(*args, "--", *store.beam_args)


def test_convert_writes_shards_and_manifest_to_the_store(converted):
    from prep.core import storage

    store, output, _ = converted
    names = storage.list_names(output)
    assert "manifest.json" in names and sum(name.endswith(".tfrecord") for name in names) == 4, names


def test_the_conversion_keeps_to_its_request_budget(converted):
    """A read is one request (beam_jobs/beam_s3.py, beam_gcs.py): no metadata asked before it."""
    store, _, lines = converted
    kinds = collections.Counter(objstores.kind(line) for line in lines)
    per_input = len(lines) / (WRITTEN + 1)
    print(f"{store.scheme}: {per_input:.1f} requests per input for the conversion: {dict(kinds)}")  # -s shows it
    assert per_input <= REQUESTS_PER_INPUT, kinds
    inputs = [(objstores.kind(line), line) for line in lines if "/raw/" in line]
    reads = [line for kind, line in inputs if kind == "read"]
    # read to check, read to write; the report reads the rejected one again for its tile
    assert len(reads) <= 2 * (WRITTEN + 1) + 1, collections.Counter(reads)
    stats = [line for kind, line in inputs if kind == "stat"]
    assert all("broken.jpg" in line for line in stats), stats  # the report's size check before its tile


def test_verify_proves_the_remote_dataset(run_cli, converted):
    store, output, _ = converted
    result = _run(run_cli, store, "verify", "--deep", output)
    assert result.exit_code == 0, result.output
    assert f"OK: 4 shards and {WRITTEN} records match the manifest" in result.output


def test_inspect_summarizes_the_remote_dataset(run_cli, converted, tmp_path):
    store, output, _ = converted
    result = _run(run_cli, store, "inspect", "--json", output)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["output"] == output and summary["totals"]["shards"] == 4
    sheet = _run(run_cli, store, "inspect", output, "--contact-sheet", tmp_path / "sheet.png")
    assert sheet.exit_code == 0, sheet.output
    assert (tmp_path / "sheet.png").stat().st_size > 0


def test_report_reads_the_store_and_writes_its_page_there(run_cli, converted, tmp_path):
    from prep.core import storage

    store, output, _ = converted
    local = _run(run_cli, store, "report", output, "--verify", "-o", tmp_path / "page.html")
    assert local.exit_code == 0, local.output
    page = (tmp_path / "page.html").read_text()
    assert "bee" in page and "cat" in page and "broken.jpg" in page
    assert "data:image/jpeg;base64," in page  # sample tiles decoded from the remote shards
    remote = _run(run_cli, store, "report", output)
    assert remote.exit_code == 0, remote.output
    assert f"wrote {output}/report.html" in remote.output
    assert storage.read_bytes(f"{output}/report.html").startswith(b"<!DOCTYPE html>")


def test_leakage_hashes_remote_shards_and_keeps_their_keys_there(run_cli, converted):
    from prep.core import storage

    store, output, _ = converted
    storage.delete(f"{output}/content_keys.jsonl")  # written by the conversion: make leakage hash the shards
    first = _run(run_cli, store, "leakage", "--json", output, output)
    assert first.exit_code == 0, first.output
    side = json.loads(first.output)["a"]
    assert (side["records"], side["keys_computed"]) == (WRITTEN, WRITTEN)
    again = _run(run_cli, store, "leakage", "--json", output, output)
    assert json.loads(again.output)["a"]["keys_cached"] == WRITTEN


def test_empty_and_small_objects_are_one_request_each(converted):
    """Beam's S3 writer made an empty file a multipart upload of no part, which S3 refuses (beam_jobs/beam_s3.py)."""
    from prep.core import storage

    store, output, _ = converted
    before = len(store.request_lines())
    storage.write_atomic(f"{output}/empty", b"")
    storage.write_atomic(f"{output}/small", b"x" * 1000)
    assert storage.read_bytes(f"{output}/empty") == b"" and storage.size(f"{output}/empty") == 0
    assert storage.read_bytes(f"{output}/small") == b"x" * 1000
    if store.scheme == "s3":
        writes = [line for line in store.request_lines()[before:] if '"PUT ' in line]
        # one PutObject each, no multipart upload (and a copy each when uploads go to a temporary name)
        assert len(writes) == (2 if storage.uploads_whole(output) else 4), store.request_lines()[before:]
        assert not any("uploads" in line for line in store.request_lines()[before:])
    storage.delete(f"{output}/empty")
    storage.delete(f"{output}/small")


@pytest.mark.parametrize("command", ["verify", "inspect", "report", "leakage"])
def test_a_missing_bucket_does_not_exist(run_cli, converted, command):
    store, output, _ = converted
    missing = store.url("no-such-bucket", "shapes")
    args = [missing, output] if command == "leakage" else [missing]
    result = _run(run_cli, store, command, *args)
    assert result.exit_code == 2, result.output
    assert f"{missing} does not exist" in result.output
    assert "cannot access" not in result.output


def test_converting_into_a_missing_bucket_is_one_error_line(run_cli, converted, tmp_path):
    store, _, _ = converted
    write_dirty_tree(tmp_path / "src", {"bee": 2, "cat": 2})
    missing = store.url("no-such-bucket", "out")
    result = run_cli("convert", tmp_path / "src", missing, "--", *store.beam_args)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: cannot ") and "no-such-bucket" in result.output


class _Refuse(http.server.BaseHTTPRequestHandler):
    """A store that answers every request 403 Forbidden, as GCS does without permission."""

    def _refuse(self):
        body = b'{"error": {"code": 403, "message": "Forbidden"}}'
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = _refuse

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def refusing(store, tmp_path_factory):
    """(Beam options, environment) that reach a store refusing access. S3: moto checking credentials (it
    knows no key, so refuses ours); GCS: an endpoint answering 403 to every request (the emulator checks none)."""
    if store.scheme == "s3":
        checking = objstores.start("s3", tmp_path_factory.mktemp("refusing"), auth=True)
        yield [a.replace(store.endpoint, checking.endpoint) for a in store.beam_args], {}
        checking.stop()
        return
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield [], {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{server.server_port}"}
    server.shutdown()


@pytest.mark.parametrize("command", ["verify", "inspect", "report", "leakage"])
def test_refused_access_is_not_a_missing_dataset(run_cli, converted, refusing, command, monkeypatch):
    _, output, _ = converted
    beam_args, env = refusing
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = [output, output] if command == "leakage" else [output]
    result = run_cli(command, *args, "--", *beam_args)
    assert result.exit_code == 2, result.output
    what = {"verify": "OUTPUT ", "inspect": "OUTPUT ", "report": "DATASET ", "leakage": ""}[command]
    assert f"Error: cannot access {what}{output}: " in result.output
    assert "403" in result.output or "Forbidden" in result.output or "InvalidAccessKeyId" in result.output
    assert "does not exist" not in result.output


def test_a_read_is_one_request_and_a_missing_object_a_missing_input(converted):
    from beam_jobs import beam_fs
    from prep.core import storage
    from prep.core.run.spill import read_input

    store, output, _ = converted
    beam_fs.configure(store.beam_args)  # as a command does (a test before may have left others)
    manifest = f"{output}/manifest.json"
    data = storage.read_bytes(manifest)
    before = len(store.request_lines())
    with storage.open_read(manifest) as f:
        f.seek(5)
        assert f.read(300_000) == data[5:300_005]  # a ranged read: one request, past the end included
        f.seek(len(data) + 10)
        assert f.read(4) == b""  # the read above came back short: the end is known, nothing asked
    assert [objstores.kind(line) for line in store.request_lines()[before:]] == ["read"]
    with storage.open_read(manifest) as f:
        f.seek(len(data) + 10)
        assert f.read(4) == b""  # past the end: S3 and GCS answer 416
    missing = f"{output}/no-such-image.jpg"
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(missing)
    assert read_input(missing) == ("missing", "file does not exist")


def test_a_refused_read_is_an_unreadable_input_not_a_missing_one(converted, refusing, monkeypatch):
    from beam_jobs import beam_fs
    from prep.core.run.spill import read_input

    store, output, _ = converted
    beam_args, env = refusing
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    beam_fs.configure(beam_args)
    try:
        reason, detail = read_input(f"{output}/manifest.json")
    finally:
        beam_fs.configure(store.beam_args)
    assert reason == "unreadable", detail
    assert "403" in detail or "Forbidden" in detail or "InvalidAccessKeyId" in detail
