"""COCO annotations streamed and joined by image on workers (beam_jobs/list_annotations.py) stage exactly what
the driver's listing does: the same chunk files, early rejects (reasons, positions), box notes and tally and run
record, for every kind of bad annotation; a file that is no COCO file gives the driver's error. Here the
steps run in this process (`list_here`); tests/e2e/test_list_annotations.py runs them as a pipeline."""

from __future__ import annotations

import json
import pathlib
import typing

import pytest

from beam_jobs import list_source
from beam_jobs._execute import list_on_workers
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from prep.core.inputs import detection_source, list_inputs
from prep.core.run.start import clear_output, ready_listed, ready_output
from tests.unit.prep.annotations.test_coco_stream import crafted

PIPELINE = False  # tests/e2e/test_list_annotations.py sets it


def staged(out: str) -> dict[str, object]:
    """The staged listing's files and the run record's listing, as the pipeline reads them."""
    folder = pathlib.Path(out) / ".prep-tmp" / "listing"
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    record = json.loads((pathlib.Path(out) / ".prep-tmp" / "run.json").read_text())
    return {"files": files, "listing": record["listing"], "labels": record["labels"]}


def on_workers(source: str, out: str, **options):
    config = build_config(source, out, options)
    src = detection_source(config)
    assert src is not None
    clear_output(config)
    summary = list_on_workers(config, src, pipeline=PIPELINE)
    list_source.delete_listed(out)
    return ready_listed(config, summary)


def on_driver(source: str, out: str, **options):
    config = build_config(source, out, options)
    return ready_output(config, list_inputs(config))


def assert_same_staging(source: str, tmp_path: pathlib.Path, **options) -> dict[str, object]:
    workers, driver = str(tmp_path / "w"), str(tmp_path / "d")
    a, b = on_workers(source, workers, **options), on_driver(source, driver, **options)
    assert (a.staged, a.chunk_sizes) == (b.staged, b.chunk_sizes)
    got = staged(workers)
    assert got == staged(driver)
    return got


def write_source(tmp_path: pathlib.Path, order=("images", "annotations", "categories"), name="instances.json"):
    """SOURCE with the crafted document's images (but one, missing), an unannotated image, a hidden one."""
    src = tmp_path / "src"
    for rel in ("a.jpg", "sub/b.jpg", "empty.jpg", "str id.png", "extra.jpg", ".hidden/h.jpg"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(b"\xff\xd8 not decoded by a listing")
    images, anns, cats = crafted()  # c.jpg is named but missing: missing_image
    images.append({"id": 16, "file_name": ".hidden/h.jpg"})
    anns.append({"id": 30, "image_id": 16, "category_id": 3, "bbox": [1, 1, 2, 2]})
    parts = {"images": images, "annotations": anns, "categories": cats}
    path = tmp_path / name
    path.write_text(json.dumps({key: parts[key] for key in order}))
    return str(src), str(path)


@pytest.mark.parametrize(
    "order", [("images", "annotations", "categories"), ("annotations", "categories", "images")], ids=["i-a-c", "a-c-i"]
)
@pytest.mark.parametrize(
    "options",
    [{}, {"unannotated": "keep", "crowd": "drop"}, {"classes": ("dog é", "cat", "horse"), "bad_boxes": "drop"}],
    ids=["defaults", "keep-unannotated", "classes"],
)
def test_every_bad_annotation_stages_as_on_the_driver(tmp_path, order, options):
    source, annotations = write_source(tmp_path, order)
    if "classes" in options:
        (tmp_path / "classes.txt").write_text("\n".join(options["classes"]) + "\n")
        options = {**options, "classes": str(tmp_path / "classes.txt")}
    got = assert_same_staging(source, tmp_path, annotations=annotations, seed=5, **options)
    files = typing.cast(dict, got["files"])
    for reason in (b"missing_image", b"outside_source", b"hidden"):
        assert reason in files["rejects.json"]
    assert (b"not_annotated" in files["rejects.json"]) == (options.get("unannotated") != "keep")
    for reason in (b"unknown_image", b"bad_annotation", b"bad_box", b"bad_segmentation", b"unknown_category"):
        assert reason in files["boxes.json"]


def test_split_files_stage_as_on_the_driver(tmp_path):
    """COCO 2017's layout: a file per split, bare file names of the images in train/ and val/; an image named by
    both files is a split_conflict."""
    src = tmp_path / "src"
    docs = {}
    for split, folder, ids in (("train", "train2017", range(1, 30)), ("validation", "val2017", range(30, 40))):
        (src / folder).mkdir(parents=True)
        images, anns = [], []
        for i in ids:
            (src / folder / f"{i}.jpg").write_bytes(b"x")
            images.append({"id": i, "file_name": f"{i}.jpg", "width": 20, "height": 20})
            anns += [
                {"id": i * 10 + k, "image_id": i, "category_id": 1 + (i + k) % 3, "bbox": [k, k, 5, 5]} for k in (0, 1)
            ]
        if split == "validation":  # 5.jpg of train is named here too (and is not under val2017: a file of train)
            images.append({"id": 99, "file_name": "../train2017/5.jpg"})
        cats = [{"id": c, "name": name} for c, name in ((1, "a"), (2, "b"), (3, "c"))]
        path = tmp_path / f"{split}.json"
        path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
        docs[split] = f"{split}={path}"
    got = assert_same_staging(str(src), tmp_path, annotations=(docs["train"], docs["validation"]), seed=2)
    assert got["files"]  # type: ignore[index]


CAT = {"id": 1, "name": "c"}


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"images": [{"id": 1, "file_name": "a"}, {"id": 2}, {"id": 1, "file_name": "b"}]}, "images[1] has no 'id'"),
        ({"images": [{"id": 1, "file_name": "a"}, {"id": 1, "file_name": "b"}, {"id": 3}]}, "id 1 is given twice"),
        (
            {"images": [{"id": 1, "file_name": "a"}, {"id": 2, "file_name": "./a"}, {"id": 2, "file_name": "c"}]},
            "image ids 1 and 2 both name 'a'",
        ),
        ({"images": [{"id": 1, "file_name": "a"}, {"id": 1, "file_name": "a"}]}, "id 1 is given twice"),
        ({"images": [{"id": "1", "file_name": "a"}, {"id": 1, "file_name": "a"}]}, "ids '1' and 1 both name 'a'"),
        ({"images": [{"id": 1}], "annotations": 5}, "images[0] has no 'id'"),  # images before annotations
        ({"images": [{"id": 1, "file_name": "a"}], "categories": {}}, "'categories' is not a list"),
        ({"images": [{"id": 1}], "categories": [CAT, {"id": 1, "name": "d"}]}, "category id 1 is given twice"),
        ({"images": None}, "no 'images' list"),
        ({"images": [{"id": 1, "file_name": "a"}], "categories": []}, "names no class"),
        ('{"images": [{"id": 1}], "annotations": 5}', "no 'categories' list"),  # categories first
        ('{"images": [], "categories": [{"id": 1, "name": "c"}]}', "no 'annotations' list"),
        ("[]", "not a JSON object"),
        ('{"images": [{"id": 1, "file_name": "a"},\n  {"id": 2 "file_name": "b"}]}', "line 2 column 22"),
        (b'{"images": [{"id": 1, "file_name": "\xff.jpg"}]}', "is not UTF-8 text"),
    ],
)
def test_a_file_that_is_no_coco_file_gives_the_drivers_error(tmp_path, doc, message):
    path = tmp_path / "x.json"
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps({"annotations": [], "categories": [CAT], **doc}))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a").write_bytes(b"x")
    with pytest.raises(SourceError) as driver:
        on_driver(str(tmp_path / "src"), str(tmp_path / "d"), annotations=str(path))
    with pytest.raises(SourceError) as workers:
        on_workers(str(tmp_path / "src"), str(tmp_path / "w"), annotations=str(path))
    assert str(workers.value) == str(driver.value) and message in str(driver.value)


def test_the_driver_lists_what_it_cannot_state(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "a.xml").write_text("<x/>")
    options = {"annotations": str(tmp_path / "missing.json")}
    assert detection_source(build_config(str(tmp_path / "src"), str(tmp_path / "out"), options)) is None
    (tmp_path / "a.json").write_text("{}")
    for resume in (False, True):  # --resume lists on workers too (tests/e2e/test_resume_workers.py)
        options = {"annotations": str(tmp_path / "a.json"), "resume": resume}
        found = detection_source(build_config(str(tmp_path / "src"), str(tmp_path / "out"), options))
        assert found is not None and [f.path for f in found.files] == [str(tmp_path / "a.json")]


def test_other_formats_are_read_by_workers_as_on_the_driver(tmp_path):
    from tests.support import drawn_shapes as ds

    classes = ("cat", "dog", "bird")
    images = ds.make_images(6, classes, seed=9)
    source = tmp_path / "src"
    ds.write_images(source, images, classes)
    ds.write_voc(tmp_path / "voc", images)
    ds.write_yolo(tmp_path / "yolo", images, classes)
    ds.write_box_csv(tmp_path / "boxes.csv", images)
    (tmp_path / "boxes.csv").write_text((tmp_path / "boxes.csv").read_text() + "missing.png,cat,1,1,2,2\n")
    (tmp_path / "classes.txt").write_text("\n".join(classes) + "\n")
    for name in ("voc", "yolo", "boxes.csv"):
        found = detection_source(build_config(str(source), str(tmp_path / "o"), {"annotations": str(tmp_path / name)}))
        assert found is not None and found.files == ()
        options = {"annotations": str(tmp_path / name), "classes": str(tmp_path / "classes.txt"), "seed": 1}
        assert_same_staging(str(source), tmp_path / name.replace(".", "-"), **options)
    with pytest.raises(SourceError) as driver:
        on_driver(str(source), str(tmp_path / "d"), annotations=str(tmp_path / "classes.txt"))
    with pytest.raises(SourceError) as workers:
        on_workers(str(source), str(tmp_path / "w"), annotations=str(tmp_path / "classes.txt"))
    assert str(workers.value) == str(driver.value)


def test_a_remote_source_and_file_stage_as_on_the_driver(tmp_path):
    from tests.support.testfs import to_url

    source, annotations = write_source(tmp_path)
    found = detection_source(
        build_config(to_url(source), to_url(str(tmp_path / "o")), {"annotations": to_url(str(tmp_path / "x.json"))})
    )
    assert found is None  # no such file: the driver's listing says so
    got = assert_same_staging(to_url(source), tmp_path, annotations=to_url(annotations), seed=5)
    assert b"missing_image" in typing.cast(dict, got["files"])["rejects.json"]
