"""SIGKILL a real `prep convert` process at several points, then `--resume`.

Promises checked after each kill: no manifest.json, and nothing under a final name
that is not complete (every shard file present is byte-identical to the clean run's).
Then `--resume` ends byte-identical to an uninterrupted run (shards, manifest
without "run", rejects.jsonl), and reused what was complete: prepared chunks and
shard files, whose inode and mtime show they were not written again.

To hit each point on a machine of any speed, the child runs the CLI through
tests/support/paused_cli.py, which injects a step hook (`prep.core.run.checkpoints.StepHook`)
that sleeps at that point as PREP_TEST_PAUSE says; the test waits for the file-system
state it wants, then kills.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from prep.core import keys_sidecar, storage, tfds_meta
from tests.support.imagegen import write_dirty_tree
from tests.support.shards import convert_with_cli, manifest_without_run, other_files, shard_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARGS = ("--num-shards", 6, "--workers", 2)
SHARDS = 6
TIMEOUT = 180  # seconds for a state to appear: generous, for a loaded machine


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill-src")
    write_dirty_tree(root, {"ant": 70, "bee": 55, "cat": 35}, size=(40, 30))
    return root


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    return convert_with_cli(source, tmp_path_factory.mktemp("kill-ref") / "out", *ARGS)


def start(source, out, pause: str) -> subprocess.Popen:
    # Beam's own temporary folder (Pipeline.local_tempdir) outlives a SIGKILL: keep it out of the real /tmp.
    tmp = pathlib.Path(out).parent / "killed-tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(
        os.environ,
        PREP_TEST_PAUSE=pause,
        TMPDIR=str(tmp),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.paused_cli", "convert", str(source), str(out), *map(str, ARGS)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def kill_when(proc: subprocess.Popen, ready) -> None:
    """Polls until `ready()`, then SIGKILLs the process."""
    deadline = time.monotonic() + TIMEOUT
    try:
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"prep convert ended ({proc.returncode}) before the kill point: {proc.stderr.read()!r}")
            if time.monotonic() > deadline:
                pytest.fail(f"the kill point did not come within {TIMEOUT} s")
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def names(folder: pathlib.Path, suffix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if n.endswith(suffix))
    except FileNotFoundError:
        return []


def chunk_indexes(out):
    return names(out / ".prep-tmp" / "spill", ".json")


def sidecars(out):
    return names(out / ".prep-tmp" / "done", ".json")


# point: (PREP_TEST_PAUSE, when to kill)
POINTS = {
    "before_any_chunk": ("chunk=60", lambda out: (out / ".prep-tmp" / "run.json").exists()),
    "after_some_chunks": ("chunk=0.4", lambda out: len(chunk_indexes(out)) >= 2),
    "after_some_shards": ("shard=1.5", lambda out: len(sidecars(out)) >= 1),
    "during_manifest_write": (
        "manifest=60",
        lambda out: out.exists() and any(storage.is_temp_of(p.name, "manifest.json") for p in out.iterdir()),
    ),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_killed_conversion_looks_unfinished_and_resume_finishes_it(point, source, reference, tmp_path, run_cli):
    out = tmp_path / "out"
    pause, ready = POINTS[point]
    kill_when(start(source, out, pause), lambda: ready(out))

    # Nothing looks finished: no manifest, and every file under a final name is complete.
    assert not (out / "manifest.json").exists()
    present = shard_bytes(out)
    expected = shard_bytes(reference)
    assert all(data == expected[name] for name, data in present.items())
    allowed = {".prep-tmp", "rejects.jsonl", "shard_counts.jsonl", keys_sidecar.FILENAME, *tfds_meta.file_names()}
    assert {p.name for p in out.iterdir() if not storage.is_temp_of(p.name, "manifest.json")} - set(present) <= allowed
    chunks_done, shards_done = chunk_indexes(out), sidecars(out)
    before = {n: (os.stat(out / n).st_ino, os.stat(out / n).st_mtime_ns) for n in present}
    if point == "before_any_chunk":
        assert chunks_done == [] and present == {}
    elif point == "after_some_chunks":
        assert present == {}
    elif point == "after_some_shards":
        assert 1 <= len(present) < SHARDS and (out / ".prep-tmp").exists()
    else:
        assert len(present) == SHARDS

    if point == "after_some_shards":
        result = run_cli("convert", source, out, *ARGS)  # a plain run refuses, and says why
        assert result.exit_code == 1 and "holds an unfinished conversion; pass --resume" in result.output

    result = run_cli("convert", source, out, *ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert shard_bytes(out) == expected
    assert manifest_without_run(out) == manifest_without_run(reference)
    assert other_files(out) == other_files(reference)
    assert sorted(p.name for p in out.iterdir() if not p.name.endswith(".tfrecord")) == sorted(
        ["manifest.json", "shard_counts.jsonl", "rejects.jsonl", keys_sidecar.FILENAME, *tfds_meta.file_names()]
    )

    resumed = json.loads((out / "manifest.json").read_text())["run"]["resumed"]
    total = resumed["chunks"]
    assert resumed["chunks_reused"] == len(chunks_done)
    assert resumed["shards"] == SHARDS
    assert resumed["shards_reused"] == len(shards_done)
    if point == "after_some_chunks":
        assert 2 <= len(chunks_done) < total
    if point in ("after_some_shards", "during_manifest_write"):
        assert len(chunks_done) == total
    if point == "during_manifest_write":
        assert len(shards_done) == SHARDS
    if point in ("after_some_shards", "during_manifest_write"):
        reused = [n for n in before if f"{n}.json" in shards_done]
        assert reused  # and they were not written again:
        assert {n: (os.stat(out / n).st_ino, os.stat(out / n).st_mtime_ns) for n in reused} == {
            n: before[n] for n in reused
        }


def test_a_real_write_failure_while_preparing_is_one_line_and_no_manifest(source, tmp_path):
    """An OSError in a pool thread writing a spill file reaches the user as one `Error:`
    line. The spill folder is made impossible (a file takes its name) while the
    conversion waits before its first chunk."""
    out = tmp_path / "out"
    proc = start(source, out, "chunk=2")
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (out / ".prep-tmp" / "run.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the conversion never staged its listing"
            time.sleep(0.01)
        (out / ".prep-tmp" / "spill").write_text("not a folder")
        _, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    lines = stderr.decode().splitlines()
    assert proc.returncode == 1
    assert len(lines) == 1 and lines[0].startswith(f"Error: cannot access {out}/.prep-tmp/spill"), lines
    assert "--resume" in lines[0]
    assert not (out / "manifest.json").exists()


def test_an_input_changed_before_its_shard_is_written_is_one_line_and_no_manifest(source, tmp_path):
    """Kept images are read again when their shard is written: every input is
    rewritten while the conversion waits after its first shard, and the next
    shard's first kept image stops the run with an `Error:` naming it."""
    import shutil

    src, out = tmp_path / "src", tmp_path / "out"
    shutil.copytree(source, src, symlinks=True)
    proc = start(src, out, "shard=3")
    try:
        deadline = time.monotonic() + TIMEOUT
        while not names(out, ".tfrecord"):
            assert proc.poll() is None and time.monotonic() < deadline, "no shard was written"
            time.sleep(0.01)
        for path in src.rglob("*"):
            if path.is_file() and not path.is_symlink():
                path.write_bytes(path.read_bytes() + b"\0")
        _, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    lines = stderr.decode().splitlines()
    assert proc.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("Error: input "), lines
    assert "changed while it was being converted (its bytes differ); convert again" in lines[0]
    assert not (out / "manifest.json").exists()
