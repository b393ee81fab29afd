"""Write failures and `--resume`, in-process: a failed run leaves no manifest and a clear
one-line error; `--resume` finishes it byte-identically, reusing what is complete, and
refuses when the inputs or options differ. Kills of real processes: tests/e2e/test_kill.py.
"""

import errno
import hashlib
import json
import os
import re
import shutil

import pytest

from beam_jobs import convert as conversion
from prep.core import keys_sidecar, storage, tfds_meta
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from tests.support.imagegen import image_bytes, write_dirty_tree
from tests.support.shards import assert_same_dataset, convert_with_cli

# --index: resumed runs must leave every shard's record index too, also for reused and multi-part shards.
ARGS = ("--split", "train=0.7,validation=0.3", "--num-shards", 3, "--workers", 2, "--index")
OPTIONS = {"split": "train=0.7,validation=0.3", "num_shards": 3, "workers": 2, "index": True}
HINT = "; the work done so far is kept: fix this and run again with --resume to finish"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume-src")
    write_dirty_tree(root, {"ant": 23, "bee": 31, "cat": 12}, size=(14, 10))
    (root / "cat" / ".DS_Store").write_bytes(b"junk")
    return root


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    return convert_with_cli(source, tmp_path_factory.mktemp("resume-ref") / "out", *ARGS)


def assert_same(out, reference):
    assert_same_dataset(out, reference, shards=6)
    indexes = [p.name + ".idx" for p in out.glob("*.tfrecord")]
    assert sorted(p.name for p in out.iterdir() if not p.name.endswith(".tfrecord")) == sorted(
        [
            "manifest.json",
            "shard_counts.jsonl",
            "rejects.jsonl",
            keys_sidecar.FILENAME,
            *tfds_meta.file_names(),
            *indexes,
        ]
    )


def resumed(out) -> dict:
    return json.loads((out / "manifest.json").read_text())["run"]["resumed"]


class FullDisk:
    """A file that takes half of the first write and then reports a full disk, as the OS would."""

    def __init__(self, path):
        self._file = open(path, "wb")

    def write(self, data):
        self._file.write(data[: len(data) // 2])
        self._file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


def fail_writes(monkeypatch, where, make):
    """Makes storage.open_write fail for paths containing `where`: `make(path)` is raised or returned."""
    real = storage.open_write

    def open_write(path):
        if where not in path:
            return real(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        result = make(path)
        if isinstance(result, BaseException):
            raise result
        return result

    monkeypatch.setattr(storage, "open_write", open_write)


def test_differences_name_each_change_in_the_users_terms():
    from prep.core.run_record import RUN_VERSION, differences, listing_change

    old = {
        "version": RUN_VERSION,
        "tool": {"version": "0.1.0", "pillow": "12.3.0"},
        "labels": ["a", "b"],
        "options": {"seed": 0, "split": None, "label_file": "l.csv"},
        "listing": {"sha256": "x"},
    }
    new = dict(old, options={"seed": 0, "split": "train=0.5,test=0.5", "label_file": "m.csv"})
    assert differences(old, old) == []
    assert differences(old, new) == [
        "--labels was \"l.csv\", now \"m.csv\"",
        "--split was unset, now \"train=0.5,test=0.5\"",
    ]
    assert differences(old, dict(old, labels=["b", "a"], listing={"sha256": "y"})) == [
        "the classes were a, b, now b, a",
        "SOURCE lists other inputs",
    ]
    assert differences({"version": 0}, new) == ["the interrupted run was recorded by another version of tfrecord-prep"]
    assert (
        differences(dict(old, version=1), new)[0]
        == "the interrupted run was recorded by another version of tfrecord-prep"
    )
    assert listing_change(
        [("a/1.jpg", "a", None), ("a/2.jpg", "a", None)], [("a/1.jpg", "b", None), ("a/3.jpg", "a", None)]
    ) == ("a/3.jpg is new; a/2.jpg is gone; a/1.jpg is listed with another label, split or reason")


def test_disk_full_while_writing_shards_then_resume(source, reference, tmp_path, run_cli, monkeypatch):
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        fail_writes(patch, f"{os.sep}.prep-tmp{os.sep}shards{os.sep}", FullDisk)
        result = run_cli("convert", source, out, *ARGS)
    assert result.exit_code == 1
    assert result.output == f"Error: cannot write to OUTPUT {out}: No space left on device{HINT}\n"
    assert not (out / "manifest.json").exists()
    assert list(out.glob("*.tfrecord")) == []  # the half-written shard never got its final name
    assert list((out / ".prep-tmp" / "shards").iterdir())  # it is there, under its temporary name

    result = run_cli("convert", source, out, *ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert "resumed: reused 5 of 5 prepared chunks and 0 of 6 shards" in result.output
    assert resumed(out) == {"chunks": 5, "chunks_reused": 5, "shards": 6, "shards_reused": 0}
    assert_same(out, reference)


def test_permission_denied_while_preparing_is_one_line_and_no_manifest(source, tmp_path, run_cli, monkeypatch):
    out = tmp_path / "out"
    fail_writes(monkeypatch, "/spill/", lambda path: PermissionError(errno.EACCES, os.strerror(errno.EACCES), path))
    result = run_cli("convert", source, out, *ARGS)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot write {out}/.prep-tmp/spill/")
    assert re.search(r"-chunk-0000\d\d\.bin\.[0-9a-f]{8}\.part: Permission denied", result.output), result.output
    assert result.output.endswith(f"Permission denied{HINT}\n") and result.output.count("\n") == 1
    assert not (out / "manifest.json").exists()


def test_output_below_a_regular_file_is_one_line(source, tmp_path, run_cli):
    (tmp_path / "file").write_text("not a folder")
    result = run_cli("convert", source, tmp_path / "file" / "out", *ARGS)
    assert result.exit_code == 1
    assert result.output == f"Error: cannot access {tmp_path}/file/out: Not a directory\n"


@pytest.fixture
def interrupted(source, tmp_path, run_cli, monkeypatch):
    """OUTPUT of a run that failed writing its manifest (disk full): every chunk and shard complete."""
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        fail_writes(patch, "manifest.json.", FullDisk)
        result = run_cli("convert", source, out, *ARGS)
    assert result.exit_code == 1
    assert result.output == f"Error: cannot write to OUTPUT {out}: No space left on device{HINT}\n"
    assert not (out / "manifest.json").exists() and len(list(out.glob("*.tfrecord"))) == 6
    return out


def test_resume_refuses_what_would_not_give_the_same_output(source, reference, interrupted, tmp_path, run_cli):
    out = interrupted
    expect = {
        (): f"Error: OUTPUT {out} holds an unfinished conversion; pass --resume to finish it (same inputs and "
        "image options; the planning options may change) or --overwrite to start over",
        ("--resume", "--overwrite"): "Error: --resume finishes the conversion in OUTPUT and --overwrite starts it "
        "over: pass one of them",
        # --seed alone would be accepted (a planning option: tests/test_replan.py); --quality is not.
        ("--resume", "--seed", 1, "--quality", 90, "--resize", 8): "Error: cannot resume: the inputs or options "
        "differ from the interrupted run: --quality was 95, now 90; --resize was unset, now 8; run with "
        "--overwrite instead to start over",
    }
    for extra, message in expect.items():
        result = run_cli("convert", source, out, *ARGS, *extra)
        assert (result.exit_code, result.output) == (1, message + "\n")

    (source / "ant" / "new.jpg").write_bytes(image_bytes())
    (source / "bee" / "ant_0000.jpg").write_bytes(image_bytes())
    try:
        result = run_cli("convert", source, out, *ARGS, "--resume")
    finally:
        (source / "ant" / "new.jpg").unlink()
        (source / "bee" / "ant_0000.jpg").unlink()
    assert (result.exit_code, result.output) == (
        1,
        "Error: cannot resume: the inputs or options differ from the "
        "interrupted run: SOURCE lists other inputs (ant/new.jpg and 1 more are new); run with --overwrite "
        "instead to start over\n",
    )

    changed = source / "cat" / "cat_0003.jpg"
    before = os.stat(changed)
    os.utime(changed, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # same bytes, touched
    try:
        result = run_cli("convert", source, out, *ARGS, "--resume")
    finally:
        os.utime(changed, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (result.exit_code, result.output) == (
        1,
        "Error: cannot resume: input cat/cat_0003.jpg changed since "
        "the interrupted run (size, modification time or permissions); run with --overwrite instead to start over\n",
    )

    assert not (out / "manifest.json").exists()  # refusing changed nothing: the resume still works
    inodes = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("*.tfrecord")}
    result = run_cli("convert", source, out, *ARGS, "--resume", "--workers", 1)
    assert result.exit_code == 0, result.output
    assert resumed(out) == {"chunks": 5, "chunks_reused": 5, "shards": 6, "shards_reused": 6}
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("*.tfrecord")} == inodes
    assert_same(out, reference)

    result = run_cli("convert", source, out, *ARGS, "--resume")
    assert (result.exit_code, result.output) == (
        1,
        f"Error: OUTPUT {out} holds a finished dataset (manifest.json): nothing to resume\n",
    )
    result = run_cli("convert", source, tmp_path / "empty", *ARGS, "--resume")
    assert (result.exit_code, result.output) == (
        1,
        f"Error: nothing to resume: OUTPUT {tmp_path}/empty holds no "
        "interrupted conversion (no .prep-tmp folder); run without --resume\n",
    )


def test_damaged_or_missing_shards_are_rewritten_multi_part_too(source, reference, tmp_path, monkeypatch):
    """group_target=3 cuts every shard into parts: parts and shards are both checked on resume."""
    out = tmp_path / "out"
    config = build_config(str(source), str(out), OPTIONS)
    with monkeypatch.context() as patch:
        fail_writes(patch, "manifest.json.", FullDisk)
        with pytest.raises(Exception, match="No space left on device"):
            conversion.convert(config, list_inputs(config), group_target=3)
    assert list((out / ".prep-tmp" / "parts").iterdir())
    shards = sorted(out.glob("*.tfrecord"))
    damaged = bytearray(shards[0].read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    shards[0].write_bytes(bytes(damaged))
    shards[3].unlink()
    resume = build_config(str(source), str(out), dict(OPTIONS, resume=True))
    manifest = conversion.convert(resume, list_inputs(resume), group_target=3)
    assert manifest.run.resumed.to_json() == {"chunks": 5, "chunks_reused": 5, "shards": 6, "shards_reused": 4}
    assert_same(out, reference)


def test_resume_of_a_run_killed_while_staging_starts_over(source, reference, tmp_path, run_cli):
    out = tmp_path / "out"
    (out / ".prep-tmp" / "listing").mkdir(parents=True)
    (out / ".prep-tmp" / "listing" / "chunk-000000.json.0a1b2c3d.part").write_text('[["ant/ant_0')
    result = run_cli("convert", source, out, *ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert resumed(out) == {"chunks": 5, "chunks_reused": 0, "shards": 6, "shards_reused": 0}
    assert_same(out, reference)


def test_resume_that_starts_over_clears_what_an_earlier_run_left(source, reference, tmp_path, run_cli):
    # A run killed while --overwrite deleted an older dataset (manifest first), then
    # a run killed while staging: old shards must not stay next to the new manifest.
    out = tmp_path / "out"
    (out / ".prep-tmp" / "listing").mkdir(parents=True)
    (out / "train-00011-of-00012.tfrecord").write_bytes(b"an older dataset's shard")
    result = run_cli("convert", source, out, *ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert not (out / "train-00011-of-00012.tfrecord").exists()
    assert_same(out, reference)


def test_resume_checks_a_finished_dataset_against_its_manifest_when_run_json_is_gone(
    source, reference, tmp_path, run_cli
):
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    (out / ".prep-tmp").mkdir()  # a kill after deleting .prep-tmp's last file, run.json, before the folder
    result = run_cli("convert", source, out, *[2 if a == 3 else a for a in ARGS], "--resume")  # --num-shards 2
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: cannot resume: the inputs or options differ from the interrupted run: "
        "--num-shards was 3, now 2; run with --overwrite instead to start over"
    )
    result = run_cli("convert", source, out, *ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert not (out / ".prep-tmp").exists()
    assert_same(out, reference)


def test_resume_after_the_manifest_was_published_only_cleans_up(source, reference, tmp_path, run_cli, monkeypatch):
    out = tmp_path / "out"
    real = storage.delete

    def delete(path):
        if path.endswith(".prep-tmp/spill"):  # .prep-tmp is deleted file by file, run.json last
            raise OSError(errno.EIO, "killed here, in this test")
        real(path)

    with monkeypatch.context() as patch:
        patch.setattr(storage, "delete", delete)
        assert run_cli("convert", source, out, *ARGS).exit_code == 1
    assert (out / "manifest.json").exists() and (out / ".prep-tmp" / "run.json").exists()  # finished, with litter
    result = run_cli("convert", source, out, *ARGS, "--resume")
    assert result.exit_code == 0, result.output
    assert not (out / ".prep-tmp").exists()
    assert_same(out, reference)


def test_resume_on_object_store_paths(source, reference, tmp_path, monkeypatch):
    from tests.support.testfs import to_url

    out = tmp_path / "out"
    config = build_config(to_url(str(source)), to_url(str(out)), OPTIONS)
    with monkeypatch.context() as patch:
        real = storage.open_write
        patch.setattr(
            storage,
            "open_write",
            lambda p: (
                (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
                if storage.is_temp_of(os.path.basename(p), "manifest.json")
                else real(p)
            ),
        )
        with pytest.raises(Exception, match="No space left on device"):
            conversion.convert(config, list_inputs(config))
    shutil.rmtree(out / ".prep-tmp" / "done")  # no sidecars: every shard is written again
    resume = build_config(to_url(str(source)), to_url(str(out)), dict(OPTIONS, resume=True))
    manifest = conversion.convert(resume, list_inputs(resume))
    assert manifest.run.resumed.to_json() == {"chunks": 5, "chunks_reused": 5, "shards": 6, "shards_reused": 0}
    assert_same(out, reference)


def test_the_listing_digest_adds_up_over_chunks_and_sees_every_input(tmp_path):
    from prep.core.listing import InputRef, Listing, Reject
    from prep.core.ordering import listing_chunks
    from prep.core.run import checkpoints
    from prep.core.run.start import digest_listing, stage_listing
    from prep.core.run_record import listing_digest
    from prep.core.workdir import WorkDir

    refs = tuple(InputRef(f"c/{i}.jpg", "c", None if i % 3 else "train") for i in range(50))
    listing = Listing(refs, (Reject("x.txt", "not_image", "d"),), ("c",))
    chunks = listing_chunks(listing, 0)
    work = WorkDir(str(tmp_path))
    stage_listing(work, chunks, listing.rejects)
    rejects = (tmp_path / ".prep-tmp" / "listing" / "rejects.json").read_bytes()
    whole = digest_listing(listing, chunks)
    one = sum(int(hashlib.sha256(json.dumps(r.fields()).encode()).hexdigest(), 16) for r in refs) % 2**256
    assert whole.sha256 == listing_digest(["c"], [one], hashlib.sha256(rejects).hexdigest())
    # Not the order or the chunks: a resumed run may change the seed that orders them.
    assert digest_listing(listing, listing_chunks(listing, 5)) == whole
    assert (whole.inputs, whole.rejected) == (50, 1)
    assert sorted(r.path for c in range(len(chunks)) for r in checkpoints.read_listing(work, c)) == sorted(
        r.path for r in refs
    )
    moved = Listing(refs[:49] + (InputRef("c/49.jpg", "c", "test"),), listing.rejects, ("c",))
    assert digest_listing(moved, listing_chunks(moved, 0)).sha256 != whole.sha256
