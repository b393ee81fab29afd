"""The Pascal VOC reader: a folder of XML files, one per image.

* The image is `<filename>` beside the XML's relative folder (under SOURCE); a filename
  without an extension, or none, names the image under SOURCE with that stem.
* VOC boxes are 1-based pixel indices, both ends included: the continuous box is
  (xmin - 1, ymin - 1, xmax, ymax).
* `<size>` gives the frame (a zero or missing width or height: unknown).
* `difficult` and `truncated` are kept; categories are the names found, sorted (VOC has
  no ids: source_id None).
* An XML that cannot be parsed is a Problem of the file (`bad_annotation_file`); an
  object without a name or a numeric box one of its image (`bad_box`).
* Splits: when `ImageSets/Main/{train,val,test}.txt` sit beside PATH (VOCdevkit's
  layout, PATH its `Annotations`), each lists the ids (XML stems) of its split; an
  image none of them lists is a Problem `no_split`, one two of them list `split_conflict`.
"""

from __future__ import annotations

import os
import posixpath
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import NamedTuple

from prep.core import storage
from prep.core.annotations.files import StemIndex, files_under, image_path, is_folder, read_text, strip_ext
from prep.core.annotations.model import AnnotationSet, ImageAnnotation, Obj, Problem, as_float, finish


def _text(node: ET.Element, tag: str) -> str | None:
    found = node.find(tag)
    return None if found is None or found.text is None else found.text.strip()


def _flag(node: ET.Element, tag: str) -> bool:
    return _text(node, tag) in ("1", "true", "True")


def _size(node: ET.Element, tag: str) -> int | None:
    value = as_float(_text(node, f"size/{tag}") or "")
    return int(value) if value is not None and value == int(value) and value > 0 else None


def _objects(root: ET.Element, rel: str, problems: list[Problem]) -> list[Obj]:
    objects = []
    for index, node in enumerate(root.findall("object")):
        name = _text(node, "name")
        values = [as_float(_text(node, f"bndbox/{k}") or "") for k in ("xmin", "ymin", "xmax", "ymax")]
        if not name:
            problems.append(Problem(rel, "bad_box", "object has no <name>", index))
        elif any(v is None for v in values):
            problems.append(
                Problem(rel, "bad_box", f"object {name!r}: <bndbox> lacks a numeric xmin, ymin, xmax or ymax", index)
            )
        else:
            x0, y0, x1, y1 = [v for v in values if v is not None]  # all four are
            objects.append(
                Obj(
                    index,
                    name,
                    (x0 - 1, y0 - 1, x1, y1),
                    difficult=_flag(node, "difficult"),
                    truncated=_flag(node, "truncated"),
                )
            )
    return objects


SPLIT_LISTS = ("train", "val", "test")  # ImageSets/Main/<split>.txt; trainval.txt is their union


def split_lists(path: str) -> dict[str, list[str]] | None:
    """{id: [splits listing it]} from the ImageSets/Main beside PATH, or None when it has no split list."""
    parent = (posixpath if storage.is_remote(path) else os.path).dirname(path.rstrip("/\\"))
    main = storage.join(storage.join(parent, "ImageSets"), "Main")
    names = set(storage.list_names(main)) if is_folder(main) else set()
    found: dict[str, list[str]] = {}
    for split in SPLIT_LISTS:
        if f"{split}.txt" in names:
            for line in read_text(storage.join(main, f"{split}.txt"), "VOC split list").splitlines():
                if line.split():
                    found.setdefault(line.split()[0], []).append(split)
    return found if any(f"{s}.txt" in names for s in SPLIT_LISTS) else None


def _with_splits(
    images: dict[str, ImageAnnotation], ids: dict[str, str], lists: dict[str, list[str]], problems: list[Problem]
) -> dict[str, ImageAnnotation]:
    """`images` in the splits `lists` give their ids; the ones listed in none or in two are Problems."""
    out = {}
    for rel, ann in images.items():
        splits = lists.get(ids[rel], [])
        if len(splits) == 1:
            out[rel] = ann._replace(split=splits[0])
            continue
        reason = "no_split" if not splits else "split_conflict"
        detail = (
            f"ImageSets/Main lists id {ids[rel]!r} in no split ({', '.join(s + '.txt' for s in SPLIT_LISTS)})"
            if not splits
            else f"ImageSets/Main lists id {ids[rel]!r} in {' and '.join(s + '.txt' for s in splits)}"
        )
        problems.append(Problem(rel, reason, detail, None, len(ann.objects)))
    return out


class VocFile(NamedTuple):
    """What one XML gives before it is matched to an image under SOURCE (`parse_voc`): its objects' problems
    name no image yet (path "")."""

    rel: str  # relative to PATH
    problem: Problem | None  # bad_annotation_file: the file gives nothing else
    name: str  # <filename>
    boxes: int  # its <object>s, which an image-level problem keeps from the records
    size: tuple[int | None, int | None]
    objects: tuple[Obj, ...]
    problems: tuple[Problem, ...]


def parse_voc(xml_rel: str, text: str) -> VocFile:
    """The XML at `xml_rel` (under PATH), whose text is `text`."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        return VocFile(xml_rel, Problem(xml_rel, "bad_annotation_file", f"not XML: {exc}"), "", 0, (None, None), (), ())
    if root.tag != "annotation":
        problem = Problem(xml_rel, "bad_annotation_file", f"root element <{root.tag}>, not <annotation>")
        return VocFile(xml_rel, problem, "", 0, (None, None), (), ())
    problems: list[Problem] = []
    objects = tuple(_objects(root, "", problems))
    size = (_size(root, "width"), _size(root, "height"))
    return VocFile(
        xml_rel, None, _text(root, "filename") or "", len(root.findall("object")), size, objects, tuple(problems)
    )


def voc_files(path: str) -> list[str]:
    """The XML files under PATH, in the order `read_voc` reads them."""
    return [f for f in files_under(path) if f.lower().endswith(".xml")]


def read_voc(
    source: str, path: str, classes: tuple[str, ...] | None = None, parsed: Iterable[VocFile] | None = None
) -> AnnotationSet:
    """Reads every `.xml` under PATH, in the splits of the ImageSets/Main beside it if there is one.

    `parsed`: the files `parse_voc` made of them, in `voc_files` order (a listing on workers parses them in
    many tasks, beam_jobs/list_annotations.py); None reads them here.

    Raises:
        SourceError: an XML cannot be read or is not UTF-8 (the first in that order).
    """
    if parsed is None:
        parsed = (parse_voc(f, read_text(storage.join(path, f), "Pascal VOC annotation")) for f in voc_files(path))
    problems: list[Problem] = []
    images: dict[str, ImageAnnotation] = {}
    ids: dict[str, str] = {}  # image path -> VOC id (its XML's stem)
    stems = None
    for xml in parsed:
        if xml.problem is not None:
            problems.append(xml.problem)
            continue
        xml_rel, name, boxes = xml.rel, xml.name, xml.boxes
        written = posixpath.join(posixpath.dirname(xml_rel), name)
        if name and posixpath.splitext(name)[1]:
            rel = image_path(source, written)
            if rel is None:
                problems.append(
                    Problem(xml_rel, "outside_source", f"<filename> {name!r} is outside SOURCE", None, boxes)
                )
                continue
        else:
            stems = stems or StemIndex(source)
            match = stems.find(strip_ext(written) if name else strip_ext(xml_rel))
            if match[0] is None:
                problems.append(Problem(xml_rel, "missing_image", match[1], None, boxes))
                continue
            rel = match[0]
        if rel in images:
            detail = f"a second annotation of {rel!r}; the first one read is used"
            problems.append(Problem(xml_rel, "duplicate_annotation", detail, None, boxes))
            continue
        problems += [p._replace(path=rel) for p in xml.problems]
        images[rel] = ImageAnnotation(rel, *xml.size, False, xml.objects)
        ids[rel] = posixpath.basename(strip_ext(xml_rel))
    lists = split_lists(path)
    if lists is not None:
        images = _with_splits(images, ids, lists, problems)
    found = sorted({o.label for a in images.values() for o in a.objects})
    return finish(images, [(None, n) for n in found], classes, problems)
