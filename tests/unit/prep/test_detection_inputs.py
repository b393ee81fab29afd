"""The detection listing's three contracts (prep/core/detection_inputs.py): nothing to write is a
one-line error that leaves OUTPUT as it was; a named file of any extension is tried, in every
annotation format; every box in the file is counted, whatever becomes of its image."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from prep.core.config import TaskOptions
from prep.core.detection_inputs import list_detection
from prep.core.errors import SourceError


def _image(path, size=(16, 12)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 40, 40)).save(path, format="PNG")


def _coco(path, names, boxes_per_image=2):
    images = [{"id": i + 1, "file_name": n, "width": 16, "height": 12} for i, n in enumerate(names)]
    annotations = [
        {"id": 100 * (i + 1) + k, "image_id": i + 1, "category_id": 1, "bbox": [1, 1, 4, 4]}
        for i in range(len(names))
        for k in range(boxes_per_image)
    ]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "a"}]}))
    return str(path)


def _voc(folder, filename, boxes=2):
    folder.mkdir(parents=True, exist_ok=True)
    objects = "".join(
        "<object><name>a</name><bndbox><xmin>2</xmin><ymin>2</ymin><xmax>6</xmax><ymax>6</ymax></bndbox></object>"
        for _ in range(boxes)
    )
    stem = filename.rsplit(".", 1)[0].rsplit("/", 1)[-1] if filename else "noname"
    (folder / f"{stem}.xml").write_text(f"<annotation><filename>{filename}</filename>{objects}</annotation>")


def _boxes(listing):
    return listing.boxes.read, listing.boxes.written, sum(n for _, n in listing.boxes.dropped)


# --- nothing to write -----------------------------------------------------------------------------


def test_source_one_folder_too_deep_is_one_line_and_output_is_left_as_it_was(tmp_path):
    from click.testing import CliRunner

    from prep.cli import main

    names = [f"train/{i}.png" for i in range(5)]
    for n in names:
        _image(tmp_path / "ds" / n)
    ann = _coco(tmp_path / "instances.json", names)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    # SOURCE one folder too deep: every file_name (train/...) misses
    result = CliRunner().invoke(main, ["convert", str(tmp_path / "ds" / "train"), str(out), "--annotations", ann])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: nothing to write: none of the 5 images")
    assert "(missing_image 5, not_annotated 5); 5 images under SOURCE are not annotated: is SOURCE" in lines[0]
    assert "manifest.json" not in result.output
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]  # no .prep-tmp, nothing cleared


@pytest.mark.parametrize("unannotated", ["skip", "keep"])
def test_no_annotated_image_found_fails_even_when_unannotated_ones_would_be_kept(tmp_path, unannotated):
    _image(tmp_path / "src" / "x.png")
    ann = _coco(tmp_path / "a.json", ["elsewhere/1.png", "../outside.png"])
    with pytest.raises(SourceError) as err:
        list_detection(str(tmp_path / "src"), TaskOptions(ann, unannotated=unannotated), None, "auto", 0)
    assert "none of the 2 images the annotations name can be written (missing_image 1, " in str(err.value)
    assert "outside_source 1" in str(err.value) and "1 image under SOURCE is not annotated" in str(err.value)


def test_every_image_rejected_for_its_own_reason_says_so_without_the_source_hint(tmp_path):
    _image(tmp_path / "src" / "a.png")
    rows = "path,label,xmin,ymin,xmax,ymax,split\na.png,a,1,1,4,4,train\na.png,a,1,1,4,4,test\n"
    (tmp_path / "b.csv").write_text(rows)
    with pytest.raises(SourceError, match=r"^nothing to write: none of the 1 images .* \(split_conflict 1\)$"):
        list_detection(str(tmp_path / "src"), TaskOptions(str(tmp_path / "b.csv")), None, "auto", 0)


# --- files of any extension the annotations name --------------------------------------------------

ODD = ["x.tga", "y.jp2", "z.avif", "w.psd", "noext"]


def _odd_files(src):
    _image(src / "ok.png")
    for name in ODD:
        (src / name).write_bytes(b"not decoded by the listing")


def _listed(listing):
    return {r.path for r in listing.refs}, {r.path: r.reason for r in listing.rejects}


def test_coco_and_csv_name_files_of_any_extension(tmp_path):
    src = tmp_path / "src"
    _odd_files(src)
    coco = _coco(tmp_path / "a.json", ["ok.png", *ODD])
    rows = "".join(f"{n},a,1,1,4,4\n" for n in ["ok.png", *ODD])
    (tmp_path / "b.csv").write_text("path,label,xmin,ymin,xmax,ymax\n" + rows)
    for ann in (coco, str(tmp_path / "b.csv")):
        refs, rejects = _listed(list_detection(str(src), TaskOptions(ann), None, "auto", 0))
        assert refs == {"ok.png", *ODD} and rejects == {}  # the image rule decides what decodes


def test_voc_and_yolo_find_files_of_any_extension(tmp_path):
    src = tmp_path / "src"
    _odd_files(src)
    voc = tmp_path / "voc"
    for name in ["ok.png", *ODD[:-1]]:
        _voc(voc, name)
    _voc(voc, "", boxes=1)  # no <filename>: the image of the XML's stem, "noname"
    (src / "noname.dds").write_bytes(b"x")
    refs, rejects = _listed(list_detection(str(src), TaskOptions(str(voc)), None, "auto", 0))
    assert refs == {"ok.png", *ODD[:-1], "noname.dds"} and rejects == {}  # "noext": named by none, no image kind
    yolo = tmp_path / "labels"
    yolo.mkdir()
    (yolo / "classes.txt").write_text("a\n")
    for name in ["ok.png", *ODD]:
        (yolo / (name.split(".")[0] + ".txt")).write_text("0 0.5 0.5 0.2 0.2\n")
    (src / "notes.txt").write_text("a text file is never an image")
    (yolo / "notes.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    refs, rejects = _listed(list_detection(str(src), TaskOptions(str(yolo)), None, "auto", 0))
    assert refs == {"ok.png", *ODD}
    assert rejects == {"notes.txt": "missing_image"}


def test_a_named_file_that_is_not_there_is_still_missing(tmp_path):
    src = tmp_path / "src"
    _odd_files(src)
    refs, rejects = _listed(
        list_detection(str(src), TaskOptions(_coco(tmp_path / "a.json", ["ok.png", "gone.tga"])), None, "auto", 0)
    )
    assert refs == {"ok.png"} and rejects == {"gone.tga": "missing_image"}


# --- boxes read = boxes in the file ---------------------------------------------------------------


def test_coco_boxes_of_every_rejected_image_are_counted(tmp_path):
    src = tmp_path / "src"
    _image(src / "a.png")
    _image(src / ".hidden" / "h.png")
    ann = _coco(tmp_path / "a.json", ["a.png", "../x.png", "/etc/y.png", "gone.png", ".hidden/h.png"], 3)
    listing = list_detection(str(src), TaskOptions(ann), None, "auto", 0)
    assert {r.path: r.reason for r in listing.rejects} == {
        "../x.png": "outside_source",
        "/etc/y.png": "outside_source",
        "gone.png": "missing_image",
        ".hidden/h.png": "hidden",
    }
    # 15 boxes in the file: a.png's 3 are read with its record, the other 12 here
    assert _boxes(listing) == (12, 0, 12) and listing.boxes.dropped == (("image_rejected", 12),)


def test_csv_voc_and_yolo_boxes_of_rejected_images_are_counted(tmp_path):
    src = tmp_path / "src"
    _image(src / "a.png")
    rows = "a.png,a,1,1,4,4\n../x.png,a,1,1,4,4\n../x.png,a,1,1,4,4\ngone.png,a,1,1,4,4\n../e.png,,,,,\n"
    (tmp_path / "b.csv").write_text("path,label,xmin,ymin,xmax,ymax\n" + rows)
    listing = list_detection(str(src), TaskOptions(str(tmp_path / "b.csv")), None, "auto", 0)
    assert _boxes(listing) == (3, 0, 3)  # 4 boxes in the file, a.png's 1 read with its record
    voc = tmp_path / "voc"
    _voc(voc, "a.png", 2)
    _voc(voc, "../x.png", 3)  # outside_source
    _voc(voc, "gone", 4)  # missing_image
    (voc / "dup.xml").write_text((voc / "a.xml").read_text())  # duplicate_annotation, 2 boxes
    listing = list_detection(str(src), TaskOptions(str(voc)), None, "auto", 0)
    assert sorted(r.reason for r in listing.rejects) == ["duplicate_annotation", "missing_image", "outside_source"]
    assert _boxes(listing) == (9, 0, 9)
    yolo = tmp_path / "labels"
    yolo.mkdir()
    (yolo / "classes.txt").write_text("a\n")
    (yolo / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (yolo / "gone.txt").write_text("0 0.5 0.5 0.2 0.2\n\n0 0.5 0.5 0.2 0.2\n")
    listing = list_detection(str(src), TaskOptions(str(yolo)), None, "auto", 0)
    assert [r.reason for r in listing.rejects] == ["missing_image"] and _boxes(listing) == (2, 0, 2)
