"""Pascal VOC and YOLO folders read by many tasks of a Beam pipeline (beam_jobs/list_annotations.py): the same
staged listing as the driver's, the driver's errors, and a DirectRunner conversion that writes the
driver-listed conversion's shards byte for byte."""

from __future__ import annotations

import pytest

from beam_jobs import list_annotations
from prep.core.annotations import per_file
from prep.core.convert_options import build_config
from tests.support import drawn_shapes as ds
from tests.unit.beam_jobs import test_list_annotation_folders as folders
from tests.unit.beam_jobs import test_list_annotations as unit


@pytest.fixture(autouse=True)
def as_pipeline(monkeypatch):
    monkeypatch.setattr(unit, "PIPELINE", True)
    monkeypatch.setattr(per_file, "CHUNK", 3)


def test_a_voc_folder_stages_as_on_the_driver(tmp_path):
    folders.test_a_voc_folder_stages_as_on_the_driver(tmp_path, {"unannotated": "keep"}, splits=False)


def test_a_yolo_folder_stages_as_on_the_driver(tmp_path):
    folders.test_a_yolo_folder_stages_as_on_the_driver(tmp_path, {})


def test_a_file_that_cannot_be_read_gives_the_drivers_error(tmp_path):
    folders.test_a_file_that_cannot_be_read_gives_the_drivers_error(tmp_path, "yolo")
    assert not (tmp_path / "w").exists()  # a failed listing leaves OUTPUT as it found it


@pytest.mark.parametrize("fmt", ["voc", "yolo"])
def test_a_conversion_on_another_runner_writes_the_drivers_shards(tmp_path, monkeypatch, fmt):
    from beam_jobs import convert as conversion
    from tests.support.shards import assert_same_dataset

    classes = ("cat", "dog", "bird")
    images = ds.make_images(8, classes, seed=6, orientations=(1, 6))
    ds.write_images(tmp_path / "images", images, classes)
    if fmt == "voc":
        ds.write_voc(tmp_path / "ann", images)
    else:
        ds.write_yolo(tmp_path / "ann", images, classes)
    (tmp_path / "classes.txt").write_text("\n".join(classes) + "\n")
    options = {"annotations": str(tmp_path / "ann"), "classes": str(tmp_path / "classes.txt"), "num_shards": 2}
    conversion.convert(build_config(str(tmp_path / "images"), str(tmp_path / "driver"), options))
    built: list = []

    def recorded(*args):
        built.append(args)
        return build(*args)

    build = list_annotations.build_listing
    monkeypatch.setattr(list_annotations, "build_listing", recorded)
    config = build_config(str(tmp_path / "images"), str(tmp_path / "workers"), options)
    conversion.convert(config, runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"])
    assert len(built) == 1  # listed on workers
    assert_same_dataset(tmp_path / "workers", tmp_path / "driver", shards=2)
