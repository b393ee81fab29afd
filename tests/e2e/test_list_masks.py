"""A segmentation SOURCE listed on workers as a Beam pipeline (beam_jobs/list_masks.py): the same staged listing
as the driver's for every kind of file, the driver's error, and a DirectRunner conversion that writes the
driver-listed conversion's shards byte for byte."""

from __future__ import annotations

import pytest

from beam_jobs import list_masks
from prep.core.convert_options import build_config
from tests.support import drawn_shapes as ds
from tests.unit.beam_jobs import test_list_masks as unit


@pytest.fixture(autouse=True)
def as_pipeline(monkeypatch):
    monkeypatch.setattr(unit, "PIPELINE", True)


def test_every_kind_of_file_stages_as_on_the_driver(tmp_path):
    unit.test_every_kind_of_file_stages_as_on_the_driver(tmp_path, masks_inside=True)


def test_no_image_with_a_mask_gives_the_drivers_error(tmp_path):
    unit.test_no_image_with_a_mask_gives_the_drivers_error(tmp_path)
    assert not (tmp_path / "w").exists()  # a failed listing leaves OUTPUT as it found it


def test_a_conversion_on_another_runner_writes_the_drivers_shards(tmp_path, monkeypatch):
    from beam_jobs import convert as conversion
    from tests.support.shards import assert_same_dataset

    classes = ("background", "cat", "dog")
    images = ds.make_images(10, classes[1:], seed=4, orientations=(1, 6), jpeg_every=0)
    root = tmp_path / "seg"
    ds.write_images(root / "images" / "train", images[:6], classes)
    ds.write_images(root / "images" / "validation", images[6:], classes)
    for split, part in (("train", images[:6]), ("validation", images[6:])):
        (root / "masks" / split).mkdir(parents=True)
        for img in part[1:]:  # the first of each split has no mask: missing_mask
            ds.class_map(img, classes).save(root / "masks" / split / (img.path.rsplit(".", 1)[0] + ".png"))
    (root / "classes.txt").write_text("\n".join(classes) + "\n")
    options = {"masks": str(root / "masks"), "classes": str(root / "classes.txt"), "seed": 3, "num_shards": 2}
    conversion.convert(build_config(str(root / "images"), str(tmp_path / "driver"), options))
    built: list = []

    def recorded(*args):
        built.append(args)
        return build(*args)

    build = list_masks.build_listing
    monkeypatch.setattr(list_masks, "build_listing", recorded)
    config = build_config(str(root / "images"), str(tmp_path / "workers"), options)
    conversion.convert(config, runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"])
    assert len(built) == 1  # listed on workers
    assert_same_dataset(tmp_path / "workers", tmp_path / "driver", shards=4)
