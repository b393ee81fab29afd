"""`--resume` of a SOURCE listed on workers, on a runner other than the embedded one (DirectRunner, in
process): SOURCE is listed again by the listing pipeline (never by the driver), and the run finishes with
the bytes of an uninterrupted one; a changed input is refused with the driver path's error, word for word.
Class folders, a label file, WebDataset shards, COCO annotations and segmentation masks."""

from __future__ import annotations

import os
import pathlib
import shutil
import typing

import pytest

from beam_jobs import convert as conversion
from beam_jobs import list_annotations, list_labels, list_masks, list_shards, list_source
from prep.core.convert_options import build_config
from prep.core.errors import ResumeError
from prep.core.inputs import list_inputs
from tests.support import drawn_shapes
from tests.support.imagegen import write_class_tree
from tests.support.shards import assert_same_dataset, other_files, shard_bytes
from tests.support.wds_data import labelled, write_shards

RUNNER: dict[str, typing.Any] = {"runner": "DirectRunner", "beam_args": ["--direct_running_mode=in_memory"]}


class Kind(typing.NamedTuple):
    source: pathlib.Path
    options: dict[str, object]
    lister: typing.Any  # the beam_jobs module whose pipeline lists this SOURCE on workers
    shards: int
    touched: pathlib.Path  # an input file, to change in place
    add: typing.Callable[[], typing.Callable[[], None]]  # adds an input to SOURCE; returns what takes it out


def folders(root: pathlib.Path) -> Kind:
    paths = write_class_tree(root / "src", {"ant": 9, "bee": 7, "cat": 5}, size=(6, 5))
    options = {"split": "train=0.7,validation=0.3", "seed": 3, "num_shards": 2}
    return Kind(root / "src", options, list_source, 4, paths[0], lambda: added(paths[1], "extra.png"))


def added(like: pathlib.Path, name: str) -> typing.Callable[[], None]:
    """Copies `like` to `name` beside it; returns what deletes the copy."""
    copy = like.with_name(name)
    shutil.copy(like, copy)
    return copy.unlink


def label_file(root: pathlib.Path) -> Kind:
    paths = write_class_tree(root / "src", {"ant": 9, "bee": 7, "cat": 5}, size=(6, 5))
    rows = [f"{p.relative_to(root / 'src')},{p.parent.name}" for p in paths]
    labels = root / "labels.csv"
    labels.write_text("path,label\n" + "\n".join([*rows[1:], "bad,row,here", "cat/none.png,cat"]) + "\n")
    options = {"labels": str(labels), "seed": 3, "num_shards": 3}

    def add() -> typing.Callable[[], None]:
        text = labels.read_text()
        labels.write_text(text + rows[0] + "\n")
        return lambda: labels.write_text(text)

    return Kind(root / "src", options, list_labels, 3, paths[1], add)


def webdataset(root: pathlib.Path) -> Kind:
    write_shards(root / "src", {f"{i:05d}.tar": labelled(10, 3, start=10 * i, size=(4, 3)) for i in range(3)})
    touched = root / "src" / "00001.tar"
    return Kind(
        root / "src", {"seed": 3, "num_shards": 3}, list_shards, 3, touched, lambda: added(touched, "00003.tar")
    )


def coco(root: pathlib.Path) -> Kind:
    _, path = drawn_shapes.write_coco_set(root, 8, ("cat", "dog", "bird"), orientations=(1, 6))
    images = root / "images"
    first = sorted(images.rglob("*.*"))[0]
    add = lambda: added(first, "unannotated" + first.suffix)  # noqa: E731
    return Kind(images, {"annotations": str(path), "seed": 3, "num_shards": 2}, list_annotations, 2, first, add)


def segmentation(root: pathlib.Path) -> Kind:
    classes = ("background", "cat", "dog")
    images = drawn_shapes.make_images(10, classes[1:], seed=4, orientations=(1, 6), jpeg_every=0)
    drawn_shapes.write_images(root / "images" / "train", images[:6], classes)
    drawn_shapes.write_images(root / "images" / "validation", images[6:], classes)
    for split, part in (("train", images[:6]), ("validation", images[6:])):
        (root / "masks" / split).mkdir(parents=True)
        for img in part[1:]:  # the first of each split has no mask: missing_mask
            mask = root / "masks" / split / (img.path.rsplit(".", 1)[0] + ".png")
            drawn_shapes.class_map(img, classes).save(mask)
    (root / "classes.txt").write_text("\n".join(classes) + "\n")
    options = {"masks": str(root / "masks"), "classes": str(root / "classes.txt"), "seed": 3, "num_shards": 2}
    first = sorted((root / "images" / "train").rglob("*.*"))[-1]
    add = lambda: added(first, "unmasked" + first.suffix)  # noqa: E731
    return Kind(root / "images", options, list_masks, 4, first, add)


KINDS = {"folders": folders, "label-file": label_file, "webdataset": webdataset, "coco": coco, "masks": segmentation}


def convert(kind: Kind, out: pathlib.Path, resume: bool = False, on_step=None, **runner):
    options = dict(kind.options, resume=True) if resume else kind.options
    return conversion.convert(build_config(str(kind.source), str(out), options), on_step=on_step, **runner)


def stop_at_shard(point: str) -> None:
    if point == "shard":  # after the first shard is complete: chunks prepared, shards partly written
        raise RuntimeError("stopped here")


def interrupted(kind: Kind, out: pathlib.Path, **runner) -> None:
    with pytest.raises(Exception, match="stopped here"):
        convert(kind, out, on_step=stop_at_shard, **runner)
    assert (out / ".prep-tmp" / "run.json").exists() and not (out / "manifest.json").exists()


def listed_on_workers(monkeypatch, kind: Kind) -> list[str]:
    """Records the OUTPUT each listing pipeline of `kind` lists into; the driver's listing fails the test."""
    outputs: list[str] = []
    build = kind.lister.build_listing

    def recorded(*args):
        outputs.append(args[-1])
        return build(*args)

    def on_driver(config):
        raise AssertionError(f"SOURCE {config.source} listed on the driver")

    monkeypatch.setattr(kind.lister, "build_listing", recorded)
    monkeypatch.setattr(conversion, "list_inputs", on_driver)
    return outputs


class Interrupted(typing.NamedTuple):
    kind: Kind
    reference: pathlib.Path  # an uninterrupted conversion
    out: pathlib.Path  # a conversion stopped after its first shard: copy it before resuming


@pytest.fixture(scope="module", params=list(KINDS))
def stopped(request, tmp_path_factory) -> Interrupted:
    """Each kind's SOURCE converted whole, and stopped, on the embedded runner: its staging is the workers'
    (tests/e2e/test_list_*.py), and the resume on the DirectRunner lists SOURCE again to compare with it."""
    root = tmp_path_factory.mktemp(request.param)
    kind = KINDS[request.param](root)
    convert(kind, root / "reference")
    interrupted(kind, root / "stopped")
    return Interrupted(kind, root / "reference", root / "stopped")


def test_resume_lists_on_workers_and_gives_the_bytes_of_an_uninterrupted_run(stopped, tmp_path, monkeypatch):
    kind, out = stopped.kind, tmp_path / "out"
    shutil.copytree(stopped.out, out)
    outputs = listed_on_workers(monkeypatch, kind)
    manifest = convert(kind, out, resume=True, **RUNNER)
    assert outputs == [str(out / ".prep-tmp" / "relisted")]
    resumed = manifest.run.resumed.to_json()
    assert resumed["chunks_reused"] == resumed["chunks"] and resumed["shards_reused"] >= 1
    assert_same_dataset(out, stopped.reference, shards=kind.shards)


@pytest.mark.parametrize("change", ["touched", "added"])
def test_a_changed_input_is_refused_with_the_drivers_error(stopped, change, tmp_path, monkeypatch):
    kind, out, driver = stopped.kind, tmp_path / "out", tmp_path / "driver"
    shutil.copytree(stopped.out, out)
    shutil.copytree(stopped.out, driver)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    if change == "touched":
        then = kind.touched.stat()
        os.utime(kind.touched, ns=(then.st_atime_ns, then.st_mtime_ns + 10**9))
        undo = lambda: os.utime(kind.touched, ns=(then.st_atime_ns, then.st_mtime_ns))  # noqa: E731
    else:
        undo = kind.add()
    try:
        config = build_config(str(kind.source), str(driver), dict(kind.options, resume=True))
        with pytest.raises(ResumeError) as on_driver:
            conversion.convert(config, list_inputs(config), **RUNNER)
        with monkeypatch.context() as patch:
            outputs = listed_on_workers(patch, kind)
            with pytest.raises(ResumeError) as on_workers:
                convert(kind, out, resume=True, **RUNNER)
    finally:  # SOURCE as the other tests of its kind find it (signatures: same inode, size and time)
        undo()
    assert outputs == [str(out / ".prep-tmp" / "relisted")]
    assert str(on_workers.value) == str(on_driver.value)
    assert ("changed since" if change == "touched" else "SOURCE lists other inputs (") in str(on_workers.value)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # refusing changed nothing


def test_remote_shards_resume_from_the_members_the_interrupted_run_copied(tmp_path, monkeypatch):
    """A remote SOURCE's listing copies the shards' members into the work directory (sources/held.py); the
    listing again copies them beside it, and the resumed run reads the interrupted run's, which it keeps."""
    from tests.support import simfs  # noqa: F401  (registers simfs://)

    store = tmp_path / "store"
    monkeypatch.setenv("SIMFS_STORE", str(store))
    write_shards(store / "wds", {f"{i}.tar": labelled(10, 3, start=10 * i, size=(4, 3)) for i in range(3)})
    options = {"seed": 3, "num_shards": 3}
    conversion.convert(build_config("simfs://wds", "simfs://reference", options))
    with pytest.raises(Exception, match="stopped here"):
        conversion.convert(build_config("simfs://wds", "simfs://out", options), on_step=stop_at_shard)
    members = {p: p.stat().st_mtime_ns for p in (store / "out" / ".prep-tmp" / "members").iterdir()}
    assert members
    seen: list[str] = []
    read = list_shards.list_here

    def listed(*args):
        seen.append(args[-1])
        read(*args)
        assert {p.name for p in (store / "out" / ".prep-tmp" / "relisted" / ".prep-tmp" / "members").iterdir()} == {
            p.name for p in members
        }

    monkeypatch.setattr(list_shards, "list_here", listed)
    monkeypatch.setattr(conversion, "list_inputs", lambda config: pytest.fail("listed on the driver"))
    manifest = conversion.convert(build_config("simfs://wds", "simfs://out", dict(options, resume=True)))
    assert seen == ["simfs://out/.prep-tmp/relisted"]
    assert manifest.run.resumed.to_json()["chunks_reused"] == manifest.run.resumed.to_json()["chunks"]
    assert shard_bytes(store / "out") == shard_bytes(store / "reference") and len(shard_bytes(store / "out")) == 3
    assert other_files(store / "out") == other_files(store / "reference")
    assert not [p for p in (store / "out" / ".prep-tmp").rglob("*") if p.is_file()]  # objects; folders linger


@pytest.mark.parametrize("stopped", ["label-file"], indirect=True)  # decided alike for every kind (convert.py)
def test_a_resume_of_a_run_that_staged_nothing_starts_over_on_workers(stopped, tmp_path, monkeypatch):
    """Killed before its run record (resume.FRESH): OUTPUT is cleared as --overwrite would, and SOURCE listed
    on workers as by a fresh run; the manifest says the run was resumed, with nothing reused."""
    kind, out = stopped.kind, tmp_path / "out"
    shutil.copytree(stopped.out, out)
    (out / ".prep-tmp" / "run.json").unlink()
    outputs = listed_on_workers(monkeypatch, kind)
    manifest = convert(kind, out, resume=True, **RUNNER)
    assert outputs == [str(out)]
    assert manifest.run.resumed.to_json()["chunks_reused"] == 0
    assert_same_dataset(out, stopped.reference, shards=kind.shards)
