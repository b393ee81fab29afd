"""A conversion stopped between the dedupe stage's work files (prep/core/run/dedupe_files.py) resumes to the
same bytes: members recorded, lines not; files an earlier, larger run left are never read."""

from __future__ import annotations

import errno
import json
import os
import pathlib

from prep.core import storage
from tests.e2e.test_dedupe_convert import planted_tree
from tests.support import datasets
from tests.support.shards import shard_bytes

ARGS = ("--split", "train=0.5,test=0.5", "--duplicates", "drop", "--workers", "2", "--num-shards", "2")
OUTPUTS = ("duplicates.jsonl", "rejects.jsonl")


def test_resume_after_a_stop_between_the_members_and_the_lines_files(tmp_path, run_cli, monkeypatch):
    src = tmp_path / "src"
    planted_tree(src)
    reference = datasets.convert(src, tmp_path / "ref", *ARGS)
    out = tmp_path / "out"
    real = storage.open_write

    def open_write(path):
        if f"groups{os.sep}lines-" in path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path)

    with monkeypatch.context() as patch:
        patch.setattr(storage, "open_write", open_write)
        result = run_cli("convert", src, out, *ARGS)
    assert result.exit_code == 1 and "No space left on device" in result.output
    groups = out / ".prep-tmp" / "groups"
    members = sorted(groups.glob("members-*.jsonl"))
    assert members and not list(groups.glob("lines-*")) and not (out / "manifest.json").exists()
    for path in members:  # a bundle cut short elsewhere, or an earlier run's: rewritten before it is read
        path.write_bytes(b"stale")
    (groups / "lines-000042.jsonl").write_text('{"members": [{"path": "gone.jpg"}]}\n')
    (groups / "decided-000042.jsonl").write_bytes(b"stale")

    result = run_cli("convert", src, out, *ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert shard_bytes(out) == shard_bytes(reference)
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (reference / name).read_bytes()
    assert _without_run(out) == _without_run(reference)


def _without_run(out: pathlib.Path) -> dict:
    return {k: v for k, v in datasets.load(out).items() if k != "run"}


def test_resume_with_another_seed_finds_the_groups_a_fresh_run_finds(tmp_path, run_cli):
    """PrepareChunk writes each chunk's key file from memory (ids: chunk and place in its index); a resume with
    another seed stages the chunks again in another order, so those files must not be read: the groups, the
    policy rejects and the sidecar are a fresh run's."""
    src = tmp_path / "src"
    planted_tree(src)
    args = ("--split", "train=0.5,test=0.5", "--duplicates", "drop", "--workers", "2")
    out = tmp_path / "out"
    result = run_cli("convert", src, out, *args, "--seed", "1", "--num-shards", "500")
    assert result.exit_code == 1 and "fewer than --num-shards 500" in result.output
    assert list((out / ".prep-tmp" / "groups").glob("keys-*.npy"))  # written while preparing, before the plan failed
    result = run_cli("convert", src, out, *args, "--seed", "2", "--num-shards", "2", "--resume")
    assert result.exit_code == 0, result.output
    assert "resumed" in result.output
    reference = datasets.convert(src, tmp_path / "ref", *args, "--seed", "2", "--num-shards", "2")
    assert shard_bytes(out) == shard_bytes(reference)
    for name in (*OUTPUTS, "content_keys.jsonl"):
        assert (out / name).read_bytes() == (reference / name).read_bytes()
    assert json.loads((out / "duplicates.jsonl").read_text().splitlines()[0])["groups"] == 6
