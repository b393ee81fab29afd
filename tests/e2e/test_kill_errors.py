"""Failures while a real `prep convert` process runs (tests/support/paused_cli.py pauses it at a step, as in
test_kill.py): a write that fails while preparing, an input changed before its shard is written. Each ends
in one `Error:` line and no manifest. Apart from test_kill.py so that `--dist loadfile` can run the two on
different workers."""

import time

import pytest

from tests.e2e.test_kill import TIMEOUT, names, start, write_source


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_source(tmp_path_factory.mktemp("kill-src"))


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
