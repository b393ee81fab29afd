"""COCO annotations listed on workers as a Beam pipeline (beam_jobs/list_annotations.py): the same staged
listing as the driver's for every kind of bad annotation and for split files, the driver's errors, and a
DirectRunner conversion that writes the driver-listed conversion's shards byte for byte."""

from __future__ import annotations

import json

import pytest

from beam_jobs import list_annotations
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from tests.support import drawn_shapes as ds
from tests.unit.beam_jobs import test_list_annotations as unit


@pytest.fixture(autouse=True)
def as_pipeline(monkeypatch):
    monkeypatch.setattr(unit, "PIPELINE", True)


def test_every_bad_annotation_stages_as_on_the_driver(tmp_path):
    source, annotations = unit.write_source(tmp_path, ("annotations", "categories", "images"))
    got = unit.assert_same_staging(source, tmp_path, annotations=annotations, seed=5, unannotated="keep")
    assert b"unknown_category" in got["files"]["boxes.json"]  # type: ignore[index]


def test_split_files_stage_as_on_the_driver(tmp_path):
    unit.test_split_files_stage_as_on_the_driver(tmp_path)


@pytest.mark.parametrize(
    "doc",
    [
        {"images": [{"id": 1, "file_name": "a"}, {"id": 1, "file_name": "a"}, {"id": 3}]},
        {"images": [{"id": 1, "file_name": "a"}, {"id": 2, "file_name": "./a"}]},
        {"images": [{"id": 1, "file_name": "a"}], "categories": []},
    ],
)
def test_a_file_that_is_no_coco_file_gives_the_drivers_error(tmp_path, doc):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"annotations": [], "categories": [unit.CAT], **doc}))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a").write_bytes(b"x")
    with pytest.raises(SourceError) as driver:
        unit.on_driver(str(tmp_path / "src"), str(tmp_path / "d"), annotations=str(path))
    with pytest.raises(SourceError) as workers:
        unit.on_workers(str(tmp_path / "src"), str(tmp_path / "w"), annotations=str(path))
    assert str(workers.value) == str(driver.value)
    assert not (tmp_path / "w").exists()  # a failed listing leaves OUTPUT as it found it


def test_a_conversion_on_another_runner_writes_the_drivers_shards(tmp_path, monkeypatch):
    from beam_jobs import convert as conversion
    from tests.support.shards import assert_same_dataset

    root = tmp_path / "shapes"
    root.mkdir()
    _, path = ds.write_coco_set(root, 8, ("cat", "dog", "bird"), orientations=(1, 6))
    options = {"annotations": str(path), "seed": 3, "num_shards": 2}
    conversion.convert(build_config(str(root / "images"), str(tmp_path / "driver"), options))
    built: list = []

    def recorded(*args):
        built.append(args)
        return build(*args)

    build = list_annotations.build_listing
    monkeypatch.setattr(list_annotations, "build_listing", recorded)
    config = build_config(str(root / "images"), str(tmp_path / "workers"), options)
    conversion.convert(config, runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"])
    assert len(built) == 1  # listed on workers
    assert_same_dataset(tmp_path / "workers", tmp_path / "driver", shards=2)


def test_other_formats_are_read_by_workers_as_on_the_driver(tmp_path):
    unit.test_other_formats_are_read_by_workers_as_on_the_driver(tmp_path)
