"""Class folders listed on workers (beam_jobs/list_source.py) stage exactly what the driver's listing does:
the same chunk files, early rejects and run record, so shards are byte-identical; what a task cannot
decide alone falls back to the driver; a remote listing that fails is an error naming the prefix."""

from __future__ import annotations

import gc
import json
import os
import pathlib

import pytest

from beam_jobs import list_source
from beam_jobs._execute import list_on_workers
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from prep.core.inputs import folder_source, list_inputs
from prep.core.run import checkpoints
from prep.core.run.start import clear_output, ready_listed, ready_output
from prep.core.workdir import WorkDir
from tests.support.imagegen import write_class_tree


def staged(out: str) -> dict[str, object]:
    """The staged listing's files and the run record's listing, as the pipeline reads them."""
    folder = pathlib.Path(out) / ".prep-tmp" / "listing"
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    record = json.loads((pathlib.Path(out) / ".prep-tmp" / "run.json").read_text())
    return {"files": files, "listing": record["listing"], "labels": record["labels"]}


@pytest.fixture(params=[True, False], ids=["pipeline", "in-process"], autouse=True)
def as_pipeline(request, monkeypatch):
    """Each test twice: the listing as a Beam pipeline (embedded runner), and its steps run in this process."""
    monkeypatch.setattr("tests.e2e.test_list_source.PIPELINE", request.param)


PIPELINE = True


def on_workers(source: str, out: str, **options):
    config = build_config(source, out, options)
    folders = folder_source(config)
    assert folders is not None
    clear_output(config)
    summary = list_on_workers(config, folders, pipeline=PIPELINE)
    list_source.delete_listed(out)
    if summary["fallback"] is not None:
        return summary["fallback"]
    ready = ready_listed(config, summary)
    assert not (pathlib.Path(out) / ".prep-tmp" / "listed").exists()
    return ready


def on_driver(source: str, out: str, **options):
    config = build_config(source, out, options)
    return ready_output(config, list_inputs(config))


def assert_same_staging(source: str, tmp_path, driver_source: str | None = None, **options):
    """Staging `source` on workers and (`driver_source`, else the same) on the driver gives the same files."""
    workers, driver = str(tmp_path / "w"), str(tmp_path / "d")
    a, b = on_workers(source, workers, **options), on_driver(driver_source or source, driver, **options)
    assert (a.staged, a.chunk_sizes) == (b.staged, b.chunk_sizes)
    assert staged(workers) == staged(driver)
    return a


@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    """Class folders with nested folders, hidden files and folders, a stray top-level file."""
    root = tmp_path_factory.mktemp("messy")
    write_class_tree(root, {"ant": 40, "bee": 130, "cat": 3}, size=(6, 5))
    (root / "bee" / "sub").mkdir()
    (root / "bee" / "sub" / "deep.png").write_bytes(next((root / "ant").iterdir()).read_bytes())
    (root / "cat" / ".DS_Store").write_bytes(b"junk")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_bytes(b"ref")
    (root / "README.txt").write_text("stray")
    return root


def test_class_folders_stage_as_on_the_driver(messy, tmp_path):
    ready = assert_same_staging(str(messy), tmp_path, seed=3)
    assert len(ready.chunk_sizes) > 3 and sum(ready.chunk_sizes) == 174
    rejects = checkpoints.read_listing_rejects(WorkDir(str(tmp_path / "w")))
    assert {(r.path, r.reason) for r in rejects} == {
        (".git/HEAD", "hidden"),
        ("README.txt", "no_class"),
        ("cat/.DS_Store", "hidden"),
    }


def test_classes_option_rejects_other_folders_and_keeps_empty_names(messy, tmp_path):
    classes = tmp_path / "classes.txt"
    classes.write_text("cat\nbee\ndog\n")
    assert_same_staging(str(messy), tmp_path, classes=str(classes), empty_classes="keep")


def test_split_folders_stage_as_on_the_driver(tmp_path):
    root = tmp_path / "src"
    for split, n in (("train", 25), ("validation", 7)):
        write_class_tree(root / split, {"ant": n, "bee": n + 2}, size=(5, 5))
    (root / "train" / "loose.png").write_bytes(b"x")
    ready = assert_same_staging(str(root), tmp_path)
    assert ready.staged.splits == ("train", "validation")


def test_a_remote_source_stages_as_on_the_local_driver_listing(messy, tmp_path):
    from tests.support.testfs import to_url

    ready = assert_same_staging(to_url(str(messy)), tmp_path, driver_source=str(messy), seed=5)
    assert ready.staged.classes == ("ant", "bee", "cat")


def test_the_simulated_store_stages_as_on_the_driver(tmp_path, monkeypatch):
    from tests.support import simfs

    monkeypatch.setenv("SIMFS_STORE", str(tmp_path / "store"))
    ready = assert_same_staging(simfs.source_url(4, 150), tmp_path, split="train=0.9,validation=0.1")
    assert sum(ready.chunk_sizes) == 600 and len(ready.chunk_sizes) > 8


def test_a_symlinked_folder_inside_a_class_is_left_to_the_driver(tmp_path):
    root = tmp_path / "src"
    write_class_tree(root, {"ant": 3, "bee": 3}, size=(5, 5))
    os.symlink(root / "ant", root / "bee" / "also-ant")
    assert on_workers(str(root), str(tmp_path / "w")) == "a symlinked folder, bee/also-ant"
    assert not (tmp_path / "w" / ".prep-tmp" / "listed").exists()


def test_a_listing_that_fails_part_way_names_the_prefix(messy, tmp_path, monkeypatch):
    from tests.support.testfs import TestFileSystem, to_url

    def failing(self, prefix):
        yield from list(TestFileSystem.__mro__[1]._list(self, prefix.replace("testfs://", "")))[:5]
        raise OSError("connection reset")

    monkeypatch.setattr(TestFileSystem, "_list", failing)
    source = to_url(str(messy))
    with pytest.raises(SourceError, match=f"cannot list SOURCE {source}/: connection reset"):
        on_workers(source, str(tmp_path / "w"))


def test_no_class_with_images_is_the_drivers_error(tmp_path):
    root = tmp_path / "src"
    (root / "ant").mkdir(parents=True)
    (root / "bee").mkdir()
    (root / "bee" / ".hidden.png").write_bytes(b"x")
    with pytest.raises(SourceError) as driver:
        on_driver(str(root), str(tmp_path / "d"))
    with pytest.raises(SourceError) as workers:
        on_workers(str(root), str(tmp_path / "w"))
    assert str(workers.value) == str(driver.value)


def test_the_listing_in_process_runs_with_the_heap_frozen(messy, tmp_path, monkeypatch):
    """Beam is imported by then: its objects are left out of the full collections the listing sets off
    (beam_jobs/_execute.py), and the collector is unfrozen again after, for a caller in process."""
    frozen = []
    list_here = list_source.list_here
    monkeypatch.setattr(list_source, "list_here", lambda *a: frozen.append(gc.get_freeze_count()) or list_here(*a))
    config = build_config(str(messy), str(tmp_path / "w"), {})
    folders = folder_source(config)
    assert folders is not None
    clear_output(config)
    list_on_workers(config, folders, pipeline=False)
    assert len(frozen) == 1 and frozen[0] > 0
    assert gc.get_freeze_count() == 0
