"""PrepareChunk's worker processes (prep/core/run/chunk_workers.py) on the embedded runner.

The same SOURCE converted with chunks prepared in worker processes, at several worker counts, and on the
threads (a test hook, `on_step`, keeps a run on them) gives the same shard bytes, rejects and manifest;
classification with bad inputs and detection. A worker killed mid-run ends the conversion with one
`Error:` line pointing to --resume, and --resume finishes it byte for byte.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.run import chunk_workers
from tests.support import drawn_shapes
from tests.support.imagegen import write_dirty_tree
from tests.support.shards import convert_with_cli, manifest_without_run, other_files, shard_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 180  # seconds: generous, for a loaded machine


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("proc-src")
    write_dirty_tree(root, {"ant": 90, "bee": 70, "cat": 45}, size=(40, 30))
    return root, {"num_shards": 4, "split": "train=0.8,validation=0.2", "seed": 5}


@pytest.fixture(scope="module")
def detection(tmp_path_factory):
    root = tmp_path_factory.mktemp("proc-coco")
    _, path = drawn_shapes.write_coco_set(root, 40, ("cat", "dog", "bird"), orientations=(1, 6))
    return root / "images", {"annotations": str(path), "num_shards": 3, "seed": 5, "resize": 24}


@pytest.fixture
def pools(monkeypatch):
    """The worker counts of the ChunkPools the runs made."""
    made: list[int] = []
    real = chunk_workers.ChunkPool.__init__

    def spy(self, size, *args):
        made.append(size)
        real(self, size, *args)

    monkeypatch.setattr(chunk_workers.ChunkPool, "__init__", spy)
    return made


def _convert(source, out, options, workers, threads=False):
    config = build_config(str(source), str(out), {**options, "workers": workers})
    conversion.convert(config, on_step=(lambda step: None) if threads else None)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["folders", "detection"])
def test_processes_give_the_threads_bytes_at_any_worker_count(kind, request, pools, tmp_path):
    source, options = request.getfixturevalue(kind)
    threads = _convert(source, tmp_path / "threads", options, 2, threads=True)
    assert pools == []  # the test hook kept that run on threads
    for workers in (1, 3):
        out = _convert(source, tmp_path / f"processes-{workers}", options, workers)
        assert pools[-1] == workers
        assert shard_bytes(out) == shard_bytes(threads) and shard_bytes(out)
        assert other_files(out) == other_files(threads)
        assert manifest_without_run(out) == manifest_without_run(threads)


def _workers_of(pid: int) -> list[int]:
    """The chunk worker processes among `pid`'s children."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    found = []
    for child in children:
        try:
            if b"chunk_workers" in pathlib.Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
        except OSError:
            pass
    return found


@pytest.mark.slow
def test_a_killed_worker_is_one_error_line_and_resume_finishes(tmp_path, run_cli):
    """The OOM killer picks the largest process, which may be a chunk worker: one `Error:` line and no
    manifest; the inputs it was reading are in flight, and --resume finishes byte for byte."""
    source = tmp_path / "src"
    write_dirty_tree(source, {"ant": 200, "bee": 150, "cat": 100}, size=(480, 360))
    args = ("--num-shards", 4, "--workers", 2, "--resize", 100)  # a chunk takes long enough to be killed in
    reference = convert_with_cli(source, tmp_path / "reference", *args)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        [sys.executable, "-m", "prep.cli", "convert", str(source), str(out), *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        in_flight = out / ".prep-tmp" / "inflight"
        while not any(in_flight.rglob("*.json")):  # a worker is reading a chunk
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no chunk was started"
            time.sleep(0.002)
        workers = _workers_of(proc.pid)
        assert len(workers) == 2
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
        proc.wait()
    lines = stderr.decode().splitlines()
    assert proc.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("Error: a worker process preparing images ended abruptly"), lines
    assert "--resume" in lines[0]
    assert not (out / "manifest.json").exists()
    result = run_cli("convert", source, out, *args, "--resume")
    assert result.exit_code == 0, result.output
    assert shard_bytes(out) == shard_bytes(reference)
    assert manifest_without_run(out) == manifest_without_run(reference)
    resumed = json.loads((out / "manifest.json").read_text())["run"]["resumed"]
    assert resumed["in_flight"]  # the killed workers' marks: their inputs went to the sandbox
