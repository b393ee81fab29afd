"""`--resume` with other planning options (--num-shards, --shard-size, --split, --seed, --max-per-class,
--empty-classes) plans the prepared images anew without reading them again, and gives exactly what a
fresh conversion with those options gives; shards of the old plan never survive as the new plan's."""

import errno
import json
import os
import shutil

import pytest

from beam_jobs import prepare
from prep.core.run import checkpoints
from prep.core.workdir import WorkDir
from tests.e2e.test_resume import FullDisk, fail_writes
from tests.support.imagegen import write_class_tree, write_dirty_tree
from tests.support.shards import assert_same_dataset, convert_with_cli

# The bundled sample's class sizes (samples/shapes: 204 images in 5 uneven classes).
SHAPES = {"circle": 60, "square": 48, "triangle": 40, "star": 32, "cross": 24}
ARGS = ("--split", "train=0.7,validation=0.3", "--num-shards", 3, "--workers", 2, "--index")
REPLAN_HINT = (
    "the images read so far are kept: run the same command again with the corrected option and --resume "
    "to plan them anew without reading them again"
)


def no_reading(monkeypatch):
    """Makes preparing any image fail: a resumed run that reads an image again cannot succeed."""

    def prepare_batch(*args, **kwargs):
        raise AssertionError("an image was prepared again")

    monkeypatch.setattr(prepare, "prepare_batch", prepare_batch)


def resumed(out) -> dict:
    return json.loads((out / "manifest.json").read_text())["run"]["resumed"]


def spill_files(out) -> dict:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / ".prep-tmp" / "spill").glob("*.bin")}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    write_class_tree(root, SHAPES, size=(24, 18))
    return root


def test_too_many_shards_names_the_command_that_recovers_and_resume_reuses_every_image(
    shapes, tmp_path, run_cli, monkeypatch
):
    out = tmp_path / "out"
    result = run_cli("convert", shapes, out, "--num-shards", 500)
    assert (result.exit_code, result.output) == (
        1,
        f"Error: split 'train' has 204 example(s), fewer than --num-shards 500; use --num-shards 204 or less; "
        f"{REPLAN_HINT}\n",
    )
    assert list(out.glob("*.tfrecord")) == [] and not (out / "manifest.json").exists()
    spills = spill_files(out)
    assert spills

    result = run_cli("convert", shapes, out, "--num-shards", 4)
    assert (result.exit_code, result.output) == (
        1,
        f"Error: OUTPUT {out} holds an unfinished conversion; pass --resume to finish it (same inputs and image "
        "options; the planning options may change) or --overwrite to start over\n",
    )
    result = run_cli("convert", shapes, out, "--num-shards", 4, "--resize", 12, "--resume")
    assert (result.exit_code, result.output) == (
        1,
        "Error: cannot resume: the inputs or options differ from the interrupted run: --resize was unset, now 12; "
        "run with --overwrite instead to start over\n",
    )
    assert spill_files(out) == spills  # refusing changed nothing

    with monkeypatch.context() as patch:
        no_reading(patch)
        real_delete = checkpoints.delete_work
        seen = {}
        patch.setattr(
            checkpoints, "delete_work", lambda work: (seen.update(spills=spill_files(out)), real_delete(work))
        )
        result = run_cli("convert", shapes, out, "--num-shards", 4, "--resume")
    assert result.exit_code == 0, result.output
    assert "resumed: reused 14 of 14 prepared chunks and 0 of 4 shards" in result.output
    assert seen["spills"] == spills  # the same spill files, untouched, and no new one
    reference = convert_with_cli(shapes, tmp_path / "fresh", "--num-shards", 4)
    assert_same_dataset(out, reference, shards=4)


def with_changes(args, changes) -> list:
    """`args` with each option of `changes` ((name, value) or (name, None) to remove it) replaced or added."""
    args, changes = list(args), list(changes)
    for name, value in changes:
        if name in args:
            i = args.index(name)
            del args[i : i + 2]
        if value is not None:
            args += [name, value]
    return args


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("replan-src")
    write_dirty_tree(root, {"ant": 23, "bee": 31, "cat": 12}, size=(14, 10))
    return root


def interrupt(source, out, run_cli, monkeypatch, args=ARGS):
    """Runs a conversion that fails writing its manifest: every chunk prepared, every shard complete."""
    with monkeypatch.context() as patch:
        fail_writes(patch, "manifest.json.", FullDisk)
        result = run_cli("convert", source, out, *args)
    assert result.exit_code == 1 and "No space left on device" in result.output
    assert len(list(out.glob("*.tfrecord"))) == 6


@pytest.fixture(scope="module")
def stopped(source, tmp_path_factory):
    """`interrupt` with ARGS, once for the module: the tests resume copies of it (`interrupted`)."""
    from click.testing import CliRunner

    from prep.cli import main

    out = tmp_path_factory.mktemp("replan-stopped") / "out"
    run = lambda *args: CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)  # noqa: E731
    with pytest.MonkeyPatch.context() as patch:
        interrupt(source, out, run, patch)
    return out


@pytest.fixture(scope="module")
def fresh(source, tmp_path_factory):
    """A fresh conversion of `source` with the given arguments, made once per arguments for the module."""
    made: dict[tuple, object] = {}

    def convert(*args):
        key = tuple(map(str, args))
        if key not in made:
            made[key] = convert_with_cli(source, tmp_path_factory.mktemp("fresh") / "out", *args)
        return made[key]

    return convert


def interrupted(stopped, out):
    """A copy of the module's interrupted conversion at `out` (copy2 keeps the times resume compares)."""
    return shutil.copytree(stopped, out)


@pytest.mark.parametrize(
    "changes, shards, reused",
    [
        ([("--num-shards", 2)], 4, 0),  # the old plan's -of-00003 shards must go
        ([("--seed", 7)], 6, 0),  # same shard names, other members: their sidecars' digests differ
        ([("--max-per-class", 10)], 6, 0),
        ([("--split", "train=0.5,validation=0.5")], 6, 0),
        ([("--num-shards", None), ("--shard-size", "8KiB")], 9, 3),  # validation: 3 shards as before, same members
        ([("--empty-classes", "drop")], 6, 6),  # no class is empty: the same shards, kept
        ([("--seed", 7), ("--num-shards", 1), ("--max-per-class", 20)], 2, 0),
    ],
)
def test_resume_plans_anew_as_a_fresh_conversion_would(
    source, stopped, fresh, tmp_path, run_cli, monkeypatch, changes, shards, reused
):
    out = interrupted(stopped, tmp_path / "out")
    args = with_changes(ARGS, changes)
    with monkeypatch.context() as patch:
        no_reading(patch)
        result = run_cli("convert", source, out, *args, "--resume")
    assert result.exit_code == 0, result.output
    assert resumed(out) == {"chunks": 5, "chunks_reused": 5, "shards": shards, "shards_reused": reused}
    assert_same_dataset(out, fresh(*args), shards=shards)
    assert run_cli("verify", out).exit_code == 0


def test_a_new_seed_needs_every_image_prepared(source, stopped, fresh, tmp_path, run_cli, monkeypatch):
    out = interrupted(stopped, tmp_path / "out")
    os.remove(WorkDir(str(out)).chunk_index(1))  # as if killed while chunk 1 was prepared
    result = run_cli("convert", source, out, *ARGS, "--seed", 7, "--resume")
    assert (result.exit_code, result.output) == (
        1,
        "Error: cannot resume with --seed 7: the interrupted run (--seed 0) had not read every image yet, and the "
        "order of another seed needs them all; resume with --seed 0, or run with --overwrite instead to start "
        "over\n",
    )
    result = run_cli("convert", source, out, *ARGS, "--num-shards", 2, "--resume")  # other options: fine
    assert result.exit_code == 0, result.output
    assert resumed(out)["chunks_reused"] == 4
    assert_same_dataset(out, fresh(*with_changes(ARGS, [("--num-shards", 2)])), shards=4)


def test_a_new_seed_is_refused_when_records_hold_source_ids(source, tmp_path, run_cli, monkeypatch):
    # --target model-garden numbers records by their place in the seed's order as they are prepared, so a
    # resumed run with another seed could not give the bytes of a fresh conversion with that seed.
    out = tmp_path / "out"
    args = (*ARGS, "--target", "model-garden")
    interrupt(source, out, run_cli, monkeypatch, args)
    result = run_cli("convert", source, out, *args, "--seed", 7, "--resume")
    assert (result.exit_code, result.output) == (
        1,
        "Error: cannot resume with --seed 7: with --target model-garden every prepared record holds an "
        "image/source_id from the order of --seed 0; resume with --seed 0, or run with --overwrite instead to "
        "start over\n",
    )
    result = run_cli("convert", source, out, *args, "--num-shards", 2, "--resume")  # other options: fine
    assert result.exit_code == 0, result.output
    reference = convert_with_cli(source, tmp_path / "fresh", *with_changes(args, [("--num-shards", 2)]))
    assert_same_dataset(out, reference, shards=4)


def test_restaged_chunks_are_never_prepared_again(source, stopped, tmp_path, run_cli, monkeypatch):
    """After a new seed restaged the chunks, a chunk's inputs may sit in other chunks' spill files:
    one gone must not be prepared again into files others use."""
    out = interrupted(stopped, tmp_path / "out")
    interrupt(source, out, run_cli, monkeypatch, [*with_changes(ARGS, [("--seed", 7)]), "--resume"])
    spill = sorted((out / ".prep-tmp" / "spill").glob("*.bin"))[0]
    spill.unlink()
    result = run_cli("convert", source, out, *ARGS, "--seed", 7, "--resume")
    assert (result.exit_code, result.output) == (
        1,
        f"Error: cannot resume: images prepared by the interrupted run are missing from {out}/.prep-tmp (its "
        "spill files were changed or deleted); run with --overwrite instead to start over\n",
    )


def test_a_kill_while_restaging_leaves_a_conversion_that_starts_over(
    source, stopped, fresh, tmp_path, run_cli, monkeypatch
):
    out = interrupted(stopped, tmp_path / "out")
    real, calls = checkpoints.write_chunk_index, []

    def write_chunk_index(*args):
        calls.append(args[1])
        if len(calls) == 3:
            raise OSError(errno.EIO, "killed here, in this test")
        real(*args)

    with monkeypatch.context() as patch:
        patch.setattr(checkpoints, "write_chunk_index", write_chunk_index)
        assert run_cli("convert", source, out, *ARGS, "--seed", 7, "--resume").exit_code == 1
    assert not (out / ".prep-tmp" / "run.json").exists()  # two orders of chunks are never left under one record
    args = with_changes(ARGS, [("--seed", 7)])
    result = run_cli("convert", source, out, *args, "--resume")
    assert result.exit_code == 0, result.output
    assert resumed(out)["chunks_reused"] == 0
    assert_same_dataset(out, fresh(*args), shards=6)


def test_planning_options_are_told_apart_from_the_others():
    from prep.core.run_record import RUN_VERSION, differences, replanned

    old = {
        "version": RUN_VERSION,
        "tool": {},
        "labels": ["a"],
        "listing": {},
        "options": {"seed": 0, "num_shards": 3, "resize": None, "split": None},
    }
    new = dict(old, options={"seed": 1, "num_shards": 3, "resize": 8, "split": "a=0.5,b=0.5", "empty_classes": "drop"})
    assert replanned(old, new) == ["--empty-classes", "--seed", "--split"]
    assert differences(old, new, planning=False) == ["--resize was unset, now 8"]
    assert len(differences(old, new)) == 4  # a finished dataset is compared with every option
