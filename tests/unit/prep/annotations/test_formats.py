"""VOC, YOLO and one-box-per-row readers, format detection, and the four formats agreeing."""

import json

import pytest
from PIL import Image

from prep.core.annotations import BoxPolicy, detect_format, place_objects, read_annotations
from prep.core.errors import SourceError

# One dataset: image path -> (size, [(label, (xmin, ymin, xmax, ymax)) in continuous pixels])
DATASET = {
    "a.png": ((40, 30), [("cat", (1, 2, 11, 7)), ("dog", (20, 0, 40, 30)), ("cat", (3, 17, 9, 29))]),
    "sub/b.png": ((25, 50), [("zebra", (0, 10, 5, 49))]),
    "c.png": ((16, 16), []),
}
NAMES = ["cat", "dog", "zebra"]


def make_images(root):
    for rel, (size, _) in DATASET.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size).save(root / rel)


def write_coco(path):
    images, annotations = [], []
    for n, (rel, (size, boxes)) in enumerate(sorted(DATASET.items())):
        images.append({"id": 100 + n, "file_name": rel, "width": size[0], "height": size[1]})
        for label, (x0, y0, x1, y1) in boxes:
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": 100 + n,
                    "category_id": 10 * (NAMES.index(label) + 1),
                    "bbox": [x0, y0, x1 - x0, y1 - y0],
                }
            )
    categories = [{"id": 10 * (i + 1), "name": name} for i, name in enumerate(NAMES)]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))


def write_voc(folder):
    for rel, (size, boxes) in DATASET.items():
        objects = "".join(
            f"<object><name>{label}</name><difficult>0</difficult><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin>"
            f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            for label, (x0, y0, x1, y1) in boxes
        )
        xml = folder / rel.replace(".png", ".xml")
        xml.parent.mkdir(parents=True, exist_ok=True)
        name = rel.split("/")[-1]
        xml.write_text(
            f"<annotation><filename>{name}</filename><size><width>{size[0]}</width>"
            f"<height>{size[1]}</height><depth>3</depth></size>{objects}</annotation>"
        )


def write_yolo(folder, yaml=False):
    for rel, ((w, h), boxes) in DATASET.items():
        txt = folder / rel.replace(".png", ".txt")
        txt.parent.mkdir(parents=True, exist_ok=True)
        txt.write_text(
            "".join(
                f"{NAMES.index(label)} {(x0 + x1) / 2 / w:.9f} {(y0 + y1) / 2 / h:.9f} {(x1 - x0) / w:.9f} "
                f"{(y1 - y0) / h:.9f}\n"
                for label, (x0, y0, x1, y1) in boxes
            )
        )
    if yaml:
        (folder / "data.yaml").write_text("names:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(NAMES)))
    else:
        (folder / "classes.txt").write_text("\n".join(NAMES) + "\n")


def write_csv(path):
    lines = ["path,label,xmin,ymin,xmax,ymax"]
    for rel, (_, boxes) in DATASET.items():
        lines += [f"{rel},{label},{x0},{y0},{x1},{y1}" for label, (x0, y0, x1, y1) in boxes] or [f"{rel},,,,,"]
    path.write_text("\n".join(lines) + "\n")


def write_jsonl(path):
    rows = []
    for rel, (_, boxes) in DATASET.items():
        rows += [
            dict(path=rel, label=label, xmin=x0, ymin=y0, xmax=x1, ymax=y1) for label, (x0, y0, x1, y1) in boxes
        ] or [{"path": rel}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def formats(tmp_path):
    source = tmp_path / "images"
    make_images(source)
    write_coco(tmp_path / "instances.json")
    write_voc(tmp_path / "voc")
    write_yolo(tmp_path / "yolo")
    write_yolo(tmp_path / "yolo_yaml", yaml=True)
    write_csv(tmp_path / "boxes.csv")
    write_jsonl(tmp_path / "boxes.jsonl")
    return source, {
        "coco": tmp_path / "instances.json",
        "voc": tmp_path / "voc",
        "yolo": tmp_path / "yolo",
        "yolo_yaml": tmp_path / "yolo_yaml",
        "csv": tmp_path / "boxes.csv",
        "jsonl": tmp_path / "boxes.jsonl",
    }


def placed(source, path):
    got = read_annotations(str(source), str(path))
    assert got.problems == ()
    out = {}
    for image in got.images:
        size = DATASET[image.path][0]
        p = place_objects(image, size, 1, size, BoxPolicy(), masks=False)
        assert p.dropped == () and p.clipped == ()
        out[image.path] = [
            (o.label, (o.xmin * size[0], o.ymin * size[1], o.xmax * size[0], o.ymax * size[1])) for o in p.objects
        ]
    return got, out


def test_the_four_formats_agree(formats):
    source, paths = formats
    want = {rel: [(label, tuple(float(v) for v in box)) for label, box in boxes] for rel, (_, boxes) in DATASET.items()}
    for name, path in paths.items():
        assert detect_format(str(path)) == name.split("_")[0].replace("jsonl", "csv")
        got, boxes = placed(source, path)
        assert [c.name for c in got.categories] == NAMES, name
        assert sorted(boxes) == sorted(want), name
        for rel in want:
            assert [b[0] for b in boxes[rel]] == [b[0] for b in want[rel]], name
            for (_, g), (_, w) in zip(boxes[rel], want[rel]):
                assert g == pytest.approx(w, abs=1e-6), (name, rel)
    coco = read_annotations(str(source), str(paths["coco"]))
    assert [(c.id, c.source_id) for c in coco.categories] == [(1, 10), (2, 20), (3, 30)]
    yolo = read_annotations(str(source), str(paths["yolo_yaml"]))
    assert [(c.id, c.source_id) for c in yolo.categories] == [(1, 0), (2, 1), (3, 2)]
    assert all(i.normalized and i.width is None for i in yolo.images)
    voc = read_annotations(str(source), str(paths["voc"]))
    assert [(i.path, i.width, i.height) for i in voc.images] == [
        ("a.png", 40, 30),
        ("c.png", 16, 16),
        ("sub/b.png", 25, 50),
    ]


def test_voc_problems(tmp_path):
    make_images(tmp_path / "images")
    folder = tmp_path / "voc"
    write_voc(folder)
    (folder / "broken.xml").write_text("<annotation><filename>")
    (folder / "other.xml").write_text("<notvoc/>")
    (folder / "nofile.xml").write_text(
        "<annotation><object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
        "<xmax>2</xmax><ymax>2</ymax></bndbox></object></annotation>"
    )
    (folder / "sub" / "b.xml").write_text(
        "<annotation><filename>b.png</filename><object><name>cat</name><difficult>1</difficult>"
        "<truncated>1</truncated><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object>"
        "<object><bndbox><xmin>1</xmin></bndbox></object><object><name>dog</name><bndbox><xmin>a</xmin></bndbox>"
        "</object></annotation>"
    )
    got = read_annotations(str(tmp_path / "images"), str(folder))
    assert sorted((p.path, p.reason, p.box) for p in got.problems) == [
        ("broken.xml", "bad_annotation_file", None),
        ("nofile.xml", "missing_image", None),
        ("other.xml", "bad_annotation_file", None),
        ("sub/b.png", "bad_box", 1),
        ("sub/b.png", "bad_box", 2),
    ]
    b = next(i for i in got.images if i.path == "sub/b.png")
    assert (b.width, b.height) == (None, None)
    assert [(o.index, o.box, o.difficult, o.truncated) for o in b.objects] == [(0, (0.0, 0.0, 2.0, 2.0), True, True)]


def test_yolo_problems_and_polygons(tmp_path):
    make_images(tmp_path / "images")
    folder = tmp_path / "labels"
    write_yolo(folder)
    (folder / "a.txt").write_text(
        "0 0.5 0.5 0.2 0.2\n7 0.5 0.5 0.1 0.1\nx 0.1 0.1 0.1 0.1\n0 0.1 0.2\n1 0.1 0.1 0.3 0.1 0.2 0.4\n"
    )
    (folder / "ghost.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    got = read_annotations(str(tmp_path / "images"), str(folder))
    assert sorted((p.path, p.reason, p.box) for p in got.problems) == [
        ("a.png", "bad_box", 3),
        ("a.png", "unknown_category", 1),
        ("a.png", "unknown_category", 2),
        ("ghost.txt", "missing_image", None),
    ]
    a = next(i for i in got.images if i.path == "a.png")
    assert [o.index for o in a.objects] == [0, 4]
    assert a.objects[1].box == pytest.approx((0.1, 0.1, 0.3, 0.4)) and a.objects[1].polygons
    assert next(i for i in got.images if i.path == "c.png").objects == ()


@pytest.mark.parametrize(
    "text, message",
    [
        ("names: 3\n", "'names' is not a list"),
        ("names: {0: a, 2: b}\n", "'names' is not a list"),
        ("names: [a, a]\n", "given twice"),
        ("names: [a\n", "is not YAML"),
    ],
)
def test_yolo_bad_names(tmp_path, text, message):
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "x.txt").write_text("")
    (tmp_path / "labels" / "data.yaml").write_text(text)
    with pytest.raises(SourceError, match=message):
        read_annotations(str(tmp_path), str(tmp_path / "labels"), fmt="yolo")


def test_yolo_needs_class_names(tmp_path):
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(SourceError, match="no classes.txt or data.yaml"):
        read_annotations(str(tmp_path), str(tmp_path), fmt="yolo")


def test_csv_problems(tmp_path):
    (tmp_path / "b.tsv").write_text(
        "path\tlabel\txmin\tymin\txmax\tymax\tsplit\twidth\theight\tcrowd\n"
        "a.png\tcat\t1\t2\t3\t4\ttrain\t40\t30\t1\n"
        "a.png\tcat\t1\t\t3\t4\ttrain\t\t\t\n"
        "a.png\t\t1\t2\t3\t4\ttrain\t\t\t\n"
        "a.png\tdog\t1\t2\t3\t4\ttest\t\t\t\n"
        "../out.png\tcat\t1\t2\t3\t4\t\t\t\t\n"
        "e.png\t\t\t\t\t\tval\t\t\t\n"
    )
    got = read_annotations(str(tmp_path), str(tmp_path / "b.tsv"))
    assert sorted((p.path, p.reason, p.box) for p in got.problems) == [
        ("../out.png", "outside_source", None),
        ("a.png", "bad_box", 1),
        ("a.png", "no_label", 2),
        ("a.png", "split_conflict", None),
    ]
    a, e = got.images
    assert (a.width, a.height, a.split, [o.index for o in a.objects]) == (40, 30, "train", [0, 3])
    assert a.objects[0].crowd and not a.objects[1].crowd
    assert (e.path, e.objects, e.split) == ("e.png", (), "val")


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("b.csv", "path,label,x1,y1,x2,y2\n", "has no 'xmin' column"),
        ("b.csv", "path,label,xmin,ymin,xmax,ymax\na,b,1,2,3,4,5\n", "line 2 has a different number of fields"),
        ("b.jsonl", '{"path": "a"}\n', "has no 'label' column"),
        ("b.jsonl", "{oops\n", "line 1 is not JSON"),
        ("b.jsonl", "[1]\n", "line 1 is not a JSON object"),
    ],
)
def test_csv_malformed(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(SourceError, match=message):
        read_annotations(str(tmp_path), str(tmp_path / name))


def test_detection_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.md").write_text("")
    with pytest.raises(SourceError, match="a folder must hold Pascal VOC"):
        detect_format(str(tmp_path / "empty"))
    with pytest.raises(SourceError, match="a file must end in .json"):
        detect_format(str(tmp_path / "notes.md"))
    with pytest.raises(SourceError, match="--annotation-format must be one of coco, voc, yolo, csv, got 'x'"):
        read_annotations(str(tmp_path), str(tmp_path), fmt="x")


def test_boxes_reconcile_from_file_to_placed(tmp_path):
    """Every annotation in the file is placed or dropped, by the reader or by the policy, with a reason."""
    source = tmp_path / "images"
    make_images(source)
    write_coco(tmp_path / "instances.json")
    doc = json.loads((tmp_path / "instances.json").read_text())
    extra = [
        {"image_id": 100, "category_id": 10, "bbox": [35, 20, 30, 30]},  # clipped
        {"image_id": 100, "category_id": 10, "bbox": [50, 50, 3, 3]},  # wholly outside: dropped
        {"image_id": 100, "category_id": 20, "bbox": [1, 1, 0, 5]},  # degenerate: dropped
        {"image_id": 100, "category_id": 99, "bbox": [1, 1, 2, 2]},  # unknown category: reader
        {"image_id": 7, "category_id": 10, "bbox": [1, 1, 2, 2]},  # unknown image: reader
        {"image_id": 101, "category_id": 30, "bbox": [1, 1, 2], "iscrowd": 1},
    ]  # bad bbox: reader
    doc["annotations"] += [dict(a, id=1000 + k) for k, a in enumerate(extra)]
    (tmp_path / "instances.json").write_text(json.dumps(doc))
    got = read_annotations(str(source), str(tmp_path / "instances.json"))
    placed = dropped = clipped = 0
    reasons = [p.reason for p in got.problems]
    for image in got.images:
        size = DATASET[image.path][0]
        p = place_objects(image, size, 1, size, BoxPolicy(), masks=False)
        placed, dropped, clipped = placed + len(p.objects), dropped + len(p.dropped), clipped + len(p.clipped)
        reasons += [d.reason for d in p.dropped]
    assert placed + dropped + len(got.problems) == len(doc["annotations"])
    assert clipped == 1 and placed == len(doc["annotations"]) - 5
    assert sorted(reasons) == ["bad_box", "box_degenerate", "box_outside", "unknown_category", "unknown_image"]
