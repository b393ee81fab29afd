"""Pascal VOC and YOLO folders read by many tasks on workers (beam_jobs/list_annotations.py,
prep/core/annotations/per_file.py) stage exactly what the driver's listing does, for every kind of bad file,
line and box, across several read tasks; a file that cannot be read gives the driver's error. Here the steps
run in this process (`list_here`); tests/e2e/test_list_annotations.py runs them as a pipeline."""

from __future__ import annotations

import pathlib

import pytest

from prep.core.annotations import per_file
from prep.core.convert_options import build_config
from prep.core.errors import SourceError
from prep.core.inputs import detection_source
from tests.unit.beam_jobs import test_list_annotations as unit


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(per_file, "CHUNK", 3)  # several read tasks on a few files


def _images(src: pathlib.Path, *rels: str) -> None:
    for rel in rels:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(b"\xff\xd8 not decoded by a listing")


def _voc(name: str | None, objects: list[tuple[str | None, list[str]]], root: str = "annotation") -> str:
    parts = [f"<{root}>", f"<filename>{name}</filename>" if name is not None else ""]
    parts.append("<size><width>40</width><height>30</height></size>")
    for label, box in objects:
        bnd = "".join(f"<{k}>{v}</{k}>" for k, v in zip(("xmin", "ymin", "xmax", "ymax"), box))
        parts.append(f"<object>{f'<name>{label}</name>' if label else ''}<bndbox>{bnd}</bndbox></object>")
    return "".join(parts) + f"</{root}>"


def write_voc(tmp_path: pathlib.Path, splits: bool = False) -> tuple[str, str]:
    """SOURCE and a VOC folder with every kind of bad file and object."""
    src, ann = tmp_path / "src", tmp_path / "voc" / "Annotations"
    _images(src, "a.jpg", "b.jpg", "c.png", "d.jpg", "d.png", "sub/e.jpg", "f.tga", "g.jpg", "h.jpg", "unnamed.jpg")
    files = {
        "a.xml": _voc("a.jpg", [("cat", ["1", "1", "10", "10"]), ("dog", ["2", "2", "12", "9"])]),
        "b.xml": _voc("b.jpg", [(None, ["1", "1", "5", "5"]), ("cat", ["x", "1", "5", "5"]), ("bird", ["3"] * 4)]),
        "c.xml": _voc("c", [("dog", ["1", "1", "4", "4"])]),  # no extension: c.png by its stem
        "d.xml": _voc(None, [("dog", ["1", "1", "4", "4"])]),  # d.jpg and d.png: two could be meant
        "sub/e.xml": _voc("e.jpg", [("cat", ["1", "1", "4", "4"])]),
        "f.xml": _voc("", [("cat", ["1", "1", "4", "4"])]),  # f.tga, the only file of its stem
        "g.xml": _voc("g.jpg", [("horse", ["1", "1", "4", "4"])]),
        "g2.xml": _voc("g.jpg", [("cat", ["1", "1", "4", "4"])]),  # a second annotation of g.jpg
        "h.xml": "<annotation><filename>h.jpg</filename",  # not XML
        "i.xml": _voc("i.jpg", [], root="notes"),
        "j.xml": _voc("../outside.jpg", [("cat", ["1", "1", "4", "4"])]),
        "k.xml": _voc("k.jpg", [("cat", ["1", "1", "4", "4"])]),  # no such image
        "l.xml": _voc(None, [("cat", ["1", "1", "4", "4"])]),  # no file of stem l
        "notes.txt": "not an annotation",
    }
    for rel, text in files.items():
        (ann / rel).parent.mkdir(parents=True, exist_ok=True)
        (ann / rel).write_text(text)
    if splits:
        main = tmp_path / "voc" / "ImageSets" / "Main"
        main.mkdir(parents=True)
        (main / "train.txt").write_text("a\nb\nc\ng\n")
        (main / "val.txt").write_text("c\nf\n")  # c in two splits; e named by none
    return str(src), str(ann)


def write_yolo(tmp_path: pathlib.Path, names: bool = True) -> tuple[str, str]:
    """SOURCE and a YOLO label folder with every kind of bad file and line."""
    src, labels = tmp_path / "src", tmp_path / "labels"
    _images(src, "a.jpg", "b.jpg", "c.png", "d.jpg", "d.png", "sub/e.jpg", "f.tga", "empty.jpg")
    files = {
        "a.txt": "0 0.5 0.5 0.2 0.2\n1 0.3 0.3 0.1 0.1\n",
        "b.txt": "0 0.5 0.5\n7 0.5 0.5 0.2 0.2\nx 0.1 0.1 0.1 0.1\n1 0.1 0.1 0.2 0.1 0.2 0.2\n0 a b c d\n",
        "c.txt": "2 0.5 0.5 0.9 0.9\n\n",
        "d.txt": "0 0.5 0.5 0.2 0.2\n",  # d.jpg and d.png: two could be meant
        "sub/e.txt": "1 0.5 0.5 0.2 0.2\n",
        "f.txt": "2 0.1 0.1 0.2 0.2\n",
        "empty.txt": "",
        "missing.txt": "0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n",
    }
    for rel, text in files.items():
        (labels / rel).parent.mkdir(parents=True, exist_ok=True)
        (labels / rel).write_text(text)
    if names:
        (labels / "classes.txt").write_text("cat\ndog\nbird\n")
    return str(src), str(labels)


@pytest.mark.parametrize("options", [{}, {"unannotated": "keep"}, {"classes": True, "bad_boxes": "drop"}])
@pytest.mark.parametrize("splits", [False, True], ids=["no-splits", "image-sets"])
def test_a_voc_folder_stages_as_on_the_driver(tmp_path, options, splits):
    source, ann = write_voc(tmp_path, splits)
    if options.get("classes"):
        (tmp_path / "classes.txt").write_text("cat\ndog\n")
        options = {**options, "classes": str(tmp_path / "classes.txt")}
    src = detection_source(build_config(source, str(tmp_path / "o"), {"annotations": ann}))
    assert src is not None and src.files == ()
    if splits and options.get("unannotated") == "keep":  # unannotated images have no split: the driver's error
        with pytest.raises(SourceError) as driver:
            unit.on_driver(source, str(tmp_path / "d"), annotations=ann, **options)
        with pytest.raises(SourceError) as workers:
            unit.on_workers(source, str(tmp_path / "w"), annotations=ann, **options)
        assert str(workers.value) == str(driver.value)
        return
    got = unit.assert_same_staging(source, tmp_path, annotations=ann, seed=4, **options)
    notes = got["files"]["boxes.json"]  # type: ignore[index]
    rejects = got["files"]["rejects.json"]  # type: ignore[index]
    for reason in (b"bad_box",):
        assert reason in notes
    for reason in (b"bad_annotation_file", b"missing_image", b"outside_source", b"duplicate_annotation"):
        assert reason in rejects or reason in notes
    if splits:
        assert b"split_conflict" in rejects + notes and b"no_split" in rejects + notes


@pytest.mark.parametrize("options", [{}, {"classes": True}])
def test_a_yolo_folder_stages_as_on_the_driver(tmp_path, options):
    source, labels = write_yolo(tmp_path)
    if options.get("classes"):
        (tmp_path / "classes.txt").write_text("dog\ncat\n")
        options = {**options, "classes": str(tmp_path / "classes.txt")}
    got = unit.assert_same_staging(source, tmp_path, annotations=labels, seed=4, **options)
    everything = got["files"]["boxes.json"] + got["files"]["rejects.json"]  # type: ignore[index]
    for reason in (b"bad_box", b"unknown_category", b"missing_image"):
        assert reason in everything


def test_split_folders_stage_as_on_the_driver(tmp_path):
    """A folder per split (`--annotations train=A --annotations validation=B`), each read by its tasks."""
    for fmt, write, ext in (("voc", write_voc, ".xml"), ("yolo", write_yolo, ".txt")):
        source, folder = write(tmp_path / fmt)
        other = pathlib.Path(folder + "-validation")
        other.mkdir()
        for f in sorted(pathlib.Path(folder).glob(f"*{ext}"))[::2]:
            if f.name != "classes.txt":
                f.rename(other / f.name)
        if fmt == "yolo":
            (other / "classes.txt").write_text("cat\ndog\nbird\n")
        paths = (f"train={folder}", f"validation={other}")
        (tmp_path / fmt / "classes.txt").write_text("cat\ndog\nbird\n")
        classes = str(tmp_path / fmt / "classes.txt")
        unit.assert_same_staging(source, tmp_path / fmt, annotations=paths, annotation_format=fmt, classes=classes)


@pytest.mark.parametrize("fmt", ["voc", "yolo"])
def test_a_file_that_cannot_be_read_gives_the_drivers_error(tmp_path, fmt):
    source, folder = write_voc(tmp_path) if fmt == "voc" else write_yolo(tmp_path)
    for name in ("b", "zz"):  # the first in the reader's order is the one named
        (pathlib.Path(folder) / f"{name}.{'xml' if fmt == 'voc' else 'txt'}").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(SourceError) as driver:
        unit.on_driver(source, str(tmp_path / "d"), annotations=folder)
    with pytest.raises(SourceError) as workers:
        unit.on_workers(source, str(tmp_path / "w"), annotations=folder)
    assert str(workers.value) == str(driver.value) and "b." in str(driver.value)


def test_a_yolo_folder_without_class_names_gives_the_drivers_error(tmp_path):
    source, labels = write_yolo(tmp_path, names=False)
    with pytest.raises(SourceError) as driver:
        unit.on_driver(source, str(tmp_path / "d"), annotations=labels, annotation_format="yolo")
    with pytest.raises(SourceError) as workers:
        unit.on_workers(source, str(tmp_path / "w"), annotations=labels, annotation_format="yolo")
    assert str(workers.value) == str(driver.value) and "classes.txt" in str(driver.value)


def test_boxes_read_are_written_or_dropped(tmp_path):
    from beam_jobs import list_annotations
    from prep.core.annotations.rows import RowSet

    source, labels = write_yolo(tmp_path)
    src = detection_source(build_config(source, str(tmp_path / "o"), {"annotations": labels}))
    assert src is not None
    planned = list(per_file.plan_reads([labels], None))
    assert sum(isinstance(c, per_file.ReadChunk) for c in planned) == 3  # 8 files, 3 a chunk
    parsed = [f for c in planned if isinstance(c, per_file.ReadChunk) for f in per_file.read_chunk(c)]
    read = list_annotations._folders_read([p for p in planned if isinstance(p, per_file.Planned)] + parsed)
    rows: RowSet = read(source, labels, None, None, str(tmp_path), list_annotations.ObjectStore())
    in_files = sum(
        1
        for p in pathlib.Path(labels).glob("**/*.txt")
        if p.name != "classes.txt"
        for line in p.read_text().splitlines()
        if line.strip()
    )
    kept = sum(len(r.labels) for r in rows.rows)
    lost = sum(p.boxes if p.box is None else 1 for p in rows.problems)
    assert kept + lost == in_files == 13
