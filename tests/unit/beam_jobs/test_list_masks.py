"""A segmentation SOURCE (`--masks`) listed on workers (beam_jobs/list_masks.py) stages exactly what the driver's
listing does: the same chunk files, early rejects and run record, for every kind of file a listing meets; a
SOURCE the workers cannot list gives the driver's error. Here the steps run in this process (`list_here`);
tests/e2e/test_list_masks.py runs them as a pipeline."""

from __future__ import annotations

import os
import pathlib

import pytest

from beam_jobs import list_source
from beam_jobs._execute import list_on_workers
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from prep.core.inputs import list_inputs, segmentation_source
from prep.core.run.start import clear_output, ready_listed, ready_output
from tests.unit.beam_jobs.test_list_annotations import staged

PIPELINE = False  # tests/e2e/test_list_masks.py sets it


def on_workers(source: str, out: str, **options):
    config = build_config(source, out, options)
    src = segmentation_source(config)
    assert src is not None
    clear_output(config)
    summary = list_on_workers(config, src, pipeline=PIPELINE)
    list_source.delete_listed(out)
    return ready_listed(config, summary)


def on_driver(source: str, out: str, **options):
    config = build_config(source, out, options)
    return ready_output(config, list_inputs(config))


def assert_same_staging(source: str, masks: str, tmp_path: pathlib.Path, **options) -> dict[str, object]:
    (tmp_path / "classes.txt").write_text("bg\nfg\n")
    options = {"masks": masks, "classes": str(tmp_path / "classes.txt"), **options}
    workers, driver = str(tmp_path / "w"), str(tmp_path / "d")
    a, b = on_workers(source, workers, **options), on_driver(source, driver, **options)
    assert (a.staged, a.chunk_sizes) == (b.staged, b.chunk_sizes)
    got = staged(workers)
    assert got == staged(driver)
    return got


def _files(root: pathlib.Path, *rels: str) -> None:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"not decoded by a listing")


def write_source(tmp_path: pathlib.Path, masks_inside: bool = False) -> tuple[str, str]:
    """SOURCE and --masks with every kind of file: masked and unmasked images in nested folders, hidden files
    and folders, files of other extensions with and without a mask, two images of one mask, a symlinked
    folder (not entered), a mask of another extension or hidden (no mask), a name that is not UTF-8."""
    src = tmp_path / "src"
    masks = src / "labels" if masks_inside else tmp_path / "masks"
    _files(src, "a.jpg", "a.png", "b.JPG", "c.jpg", "d/e.jpg", "d/f/g.jpeg", "d/f/h.jpg", "z/deep/er/i.png")
    _files(src, ".hidden.jpg", ".dir/j.jpg", "k.tga", "l.tga", "notes.txt", "m.bmp", "n.jpg", "a b é.jpg")
    _files(masks, "a.png", "b.png", "c.PNG", "d/e.png", "d/f/g.png", "z/deep/er/i.png", "k.png", ".dir/j.png")
    _files(masks, "m.txt", "d/.n.png", ".hidden.png", "a b é.png", "unused.png")
    os.symlink(src / "d", src / "linked")  # os.walk does not enter it, on workers neither
    (masks / "linked").symlink_to(masks / "d")
    odd = os.fsencode(str(src)) + b"/q\xff.jpg"
    open(odd, "wb").close()
    open(os.fsencode(str(masks)) + b"/q\xff.png", "wb").close()
    return str(src), str(masks)


@pytest.mark.parametrize("masks_inside", [False, True], ids=["beside", "inside"])
def test_every_kind_of_file_stages_as_on_the_driver(tmp_path, masks_inside):
    source, masks = write_source(tmp_path, masks_inside)
    got = assert_same_staging(source, masks, tmp_path, seed=5)
    rejects = got["files"]["rejects.json"]  # type: ignore[index]
    for needle in (b"missing_mask", b"hidden", b"c.jpg", b".dir/j.jpg", b"n.jpg"):
        assert needle in rejects
    assert b"linked" not in rejects


def test_split_folders_stage_as_on_the_driver(tmp_path):
    src, masks = tmp_path / "src", tmp_path / "masks"
    names = [f"{split}/{i}.jpg" for split in ("train", "validation") for i in range(12)]
    _files(src, *names)
    _files(masks, *(n.replace(".jpg", ".png") for n in names[:-3]))
    got = assert_same_staging(str(src), str(masks), tmp_path, seed=2, num_shards=2)
    assert got["files"]  # type: ignore[index]


def test_no_image_with_a_mask_gives_the_drivers_error(tmp_path):
    src, masks = tmp_path / "src", tmp_path / "masks"
    _files(src, "a.jpg")
    _files(masks, "b.png")
    (tmp_path / "classes.txt").write_text("bg\n")
    options = {"masks": str(masks), "classes": str(tmp_path / "classes.txt")}
    with pytest.raises(SourceError) as driver:
        on_driver(str(src), str(tmp_path / "d"), **options)
    with pytest.raises(SourceError) as workers:
        on_workers(str(src), str(tmp_path / "w"), **options)
    assert str(workers.value) == str(driver.value) and "has a mask" in str(driver.value)
    (src / "a.jpg").unlink()  # an empty SOURCE: nothing found at all
    with pytest.raises(SourceError, match="has a mask"):
        on_workers(str(src), str(tmp_path / "w2"), **options)


def test_the_driver_lists_what_it_cannot_state(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "classes.txt").write_text("bg\n")
    base = {"classes": str(tmp_path / "classes.txt")}
    for options in (
        {"masks": str(tmp_path / "missing")},
        {"masks": str(tmp_path / "classes.txt")},
    ):
        assert (
            segmentation_source(build_config(str(tmp_path / "src"), str(tmp_path / "o"), {**base, **options})) is None
        )
    (tmp_path / "m").mkdir()
    listed = [  # --resume lists on workers too (tests/e2e/test_resume_workers.py)
        segmentation_source(build_config(str(tmp_path / "src"), str(tmp_path / "o"), {**base, **options}))
        for options in ({"masks": str(tmp_path / "m")}, {"masks": str(tmp_path / "m"), "resume": True})
    ]
    assert listed[0] is not None and listed[1] == listed[0]
    with pytest.raises(SourceError, match="inside SOURCE"):
        segmentation_source(build_config(str(tmp_path), str(tmp_path / "o"), {**base, "masks": str(tmp_path)}))


def test_a_remote_source_and_masks_stage_as_on_the_driver(tmp_path):
    from tests.support.testfs import to_url

    source, masks = write_source(tmp_path)
    got = assert_same_staging(to_url(source), to_url(masks), tmp_path, seed=5)
    assert b"missing_mask" in got["files"]["rejects.json"]  # type: ignore[index]
