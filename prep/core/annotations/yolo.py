"""The YOLO reader: a folder of `.txt` files, one per image, and the class names.

* Class names: `classes.txt` (one per line) or `data.yaml` `names` (a list, or a dict of
  index: name), in PATH or its parent. Index i is category i + 1, source_id i.
* Each line is `class cx cy w h`, normalised to the displayed image:
  the box (cx - w/2, cy - h/2, cx + w/2, cy + h/2), `normalized`. A line of more
  values (`class x1 y1 x2 y2 ...`, YOLO's segmentation form) is a polygon, its box
  the polygon's bounds.
* PATH may be an Ultralytics data.yaml instead, naming the splits' images (prep.core.annotations.ultralytics).
* `labels/train/x.txt` is the annotation of the image `train/x.*` under SOURCE (the
  same relative path but for the extension). An empty file: an image with no objects.
* A line that is not numbers, or names a class index out of range, is a Problem of its
  image (`bad_box`, `unknown_category`) at its index (its place among the file's lines).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import NamedTuple

from prep.core import storage
from prep.core.annotations.detect import CLASS_FILES, yolo_class_file
from prep.core.annotations.files import StemIndex, files_under, read_text, strip_ext
from prep.core.annotations.model import AnnotationSet, ImageAnnotation, Obj, Problem, as_float, finish
from prep.core.errors import SourceError


def read_names(path: str) -> list[str]:
    """The class names of a classes.txt or data.yaml.

    Raises:
        SourceError: no such file, or `names` is missing or not a list or index dict.
    """
    text = read_text(path, "YOLO class names")
    if not path.endswith((".yaml", ".yml")):
        return [line.strip() for line in text.splitlines() if line.strip()]
    import yaml  # PyYAML, only for a data.yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SourceError(f"YOLO data file {path} is not YAML: {str(exc).splitlines()[0]}") from None
    names = doc.get("names") if isinstance(doc, dict) else None
    if isinstance(names, dict) and all(isinstance(k, int) for k in names) and sorted(names) == list(range(len(names))):
        names = [names[i] for i in range(len(names))]
    if not isinstance(names, list) or not names or not all(isinstance(n, (str, int)) for n in names):
        raise SourceError(
            f"YOLO data file {path}: 'names' is not a list of class names or a dict {{0: name, 1: name, ...}}"
        )
    names = [str(n) for n in names]
    if len(set(names)) != len(names):
        raise SourceError(f"YOLO data file {path}: a class name is given twice")
    return names


def label_objects(text: str, rel: str, names: list[str], problems: list[Problem]) -> list[Obj]:
    """The objects of a label file's lines; a line that cannot be used is a Problem at its index."""
    objects = []
    lines = [line for line in text.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        fields = line.split()
        read = [as_float(f) for f in fields[1:]]
        values = [v for v in read if v is not None]
        cls = fields[0]
        if len(read) < 4 or (len(read) > 4 and (len(read) % 2 or len(read) < 6)) or len(values) < len(read):
            problems.append(
                Problem(
                    rel,
                    "bad_box",
                    f"line {line.strip()!r} is not 'class cx cy w h' (or 'class x1 y1 x2 y2 ...')",
                    index,
                )
            )
            continue
        if not cls.isdigit() or int(cls) >= len(names):
            problems.append(
                Problem(
                    rel, "unknown_category", f"class {cls!r} is not an index of the {len(names)} class names", index
                )
            )
            continue
        if len(values) == 4:
            cx, cy, w, h = values
            objects.append(Obj(index, names[int(cls)], (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)))
        else:
            xs, ys = values[0::2], values[1::2]
            objects.append(Obj(index, names[int(cls)], (min(xs), min(ys), max(xs), max(ys)), polygons=(tuple(values),)))
    return objects


class YoloFile(NamedTuple):
    """What one label file gives before it is matched to an image under SOURCE (`parse_yolo`): its lines'
    problems name no image yet (path "")."""

    rel: str  # relative to PATH
    boxes: int  # its non-empty lines, which a missing_image problem keeps from the records
    objects: tuple[Obj, ...]
    problems: tuple[Problem, ...]


def parse_yolo(txt: str, text: str, names: list[str]) -> YoloFile:
    """The label file at `txt` (under PATH), whose text is `text`, against the class `names`."""
    problems: list[Problem] = []
    objects = tuple(label_objects(text, "", names, problems))
    # each non-empty line is an object or a problem: boxes is the file's non-empty lines
    return YoloFile(txt, len(objects) + len(problems), objects, tuple(problems))


def yolo_files(path: str) -> list[str]:
    """The label files under PATH, in the order `read_yolo` reads them."""
    return [f for f in files_under(path) if f.lower().endswith(".txt") and posixpath.basename(f) != "classes.txt"]


def yolo_names(path: str) -> list[str]:
    """The class names of the YOLO label folder PATH.

    Raises:
        SourceError: no class names file, or one that cannot be read.
    """
    names_file = yolo_class_file(path)
    if names_file is None:
        raise SourceError(f"YOLO annotations {path}: no {' or '.join(CLASS_FILES)} in it or its parent folder")
    return read_names(names_file)


def read_yolo(
    source: str, path: str, classes: tuple[str, ...] | None = None, parsed: Iterable[YoloFile] | None = None
) -> AnnotationSet:
    """Reads every `.txt` under PATH (but classes.txt) against the images under SOURCE.

    `parsed`: the files `parse_yolo` made of them, in `yolo_files` order (a listing on workers parses them in
    many tasks, beam_jobs/list_annotations.py); None reads them here.

    Raises:
        SourceError: no class names file, or one that cannot be read; a label file that cannot be read or is
            not UTF-8 (the first in that order).
    """
    names = yolo_names(path)
    stems = StemIndex(source)
    if parsed is None:
        parsed = (parse_yolo(f, read_text(storage.join(path, f), "YOLO annotation"), names) for f in yolo_files(path))
    problems: list[Problem] = []
    images: dict[str, ImageAnnotation] = {}
    for txt in parsed:
        match = stems.find(strip_ext(txt.rel))
        if match[0] is None:
            problems.append(Problem(txt.rel, "missing_image", match[1], None, txt.boxes))
            continue
        rel = match[0]
        problems += [p._replace(path=rel) for p in txt.problems]
        images[rel] = ImageAnnotation(rel, None, None, True, txt.objects)
    return finish(images, list(enumerate(names)), classes, problems)
