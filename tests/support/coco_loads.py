"""The COCO reader as it was before streaming (json.loads of the whole text): the oracle the streaming
reader (prep/core/annotations/coco.py) is compared with in tests/unit/prep/annotations/test_coco_stream.py.

* Categories: sparse source ids become ids 1..K in ascending source id; each keeps its
  source id.
* `bbox` [x, y, w, h] becomes (x, y, x + w, y + h); `iscrowd`, `area`, polygons
  (`segmentation` as lists of x, y pairs) and RLE (a dict of `counts` and `size`,
  compressed or not) are kept as written.
* Every image is kept, with no objects when no annotation names it.
* An annotation naming an unknown image id is a Problem of the file (`unknown_image`,
  with its position in `annotations`); one naming an unknown category, or with an
  unusable bbox or segmentation, a Problem of its image at its index there.
* A file that is not a COCO instances JSON (not JSON, no `images`, a category or image
  entry without its id, repeated ids) is a SourceError naming the file and the fault.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any, NoReturn

from prep.core.annotations.files import image_path, read_text
from prep.core.annotations.model import AnnotationSet, ImageAnnotation, Json, Obj, Problem, as_float, finish
from prep.core.errors import SourceError

ImageId = int | str  # an image's `id` in the file
ImageEntry = tuple[str | None, str, int | None, int | None]  # (relative path or None, file_name, width, height)


def _fail(path: str, what: str) -> NoReturn:
    raise SourceError(f"COCO annotations {path}: {what}")


def _list(doc: Json, key: str, path: str) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        _fail(path, f"no {key!r} list" if value is None else f"{key!r} is not a list")
    return value


def _size(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _categories(doc: Json, path: str) -> list[tuple[int, str]]:
    found: dict[int, str] = {}
    names: set[str] = set()
    for i, cat in enumerate(_list(doc, "categories", path)):
        cid = cat.get("id") if isinstance(cat, dict) else None
        name = cat.get("name") if isinstance(cat, dict) else None
        if not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(name, str) or not name:
            _fail(path, f"categories[{i}] has no integer 'id' and non-empty 'name'")
        if cid in found:
            _fail(path, f"category id {cid} is given twice")
        if name in names:
            _fail(path, f"category name {name!r} is given twice")
        found[cid] = name
        names.add(name)
    return sorted(found.items())


def _images(doc: Json, path: str, source: str) -> dict[ImageId, ImageEntry]:
    """{image id: (relative path, or the file_name as written when it leaves SOURCE, width, height)}."""
    images: dict[ImageId, ImageEntry] = {}
    paths: dict[str, ImageId] = {}
    for i, img in enumerate(_list(doc, "images", path)):
        iid = img.get("id") if isinstance(img, dict) else None
        name = img.get("file_name") if isinstance(img, dict) else None
        if not isinstance(iid, (int, str)) or isinstance(iid, bool) or not isinstance(name, str) or not name:
            _fail(path, f"images[{i}] has no 'id' and non-empty 'file_name'")
        if iid in images:
            _fail(path, f"image id {iid!r} is given twice")
        rel = image_path(source, name)
        if rel is not None and rel in paths:
            _fail(path, f"image ids {paths[rel]!r} and {iid!r} both name {rel!r}")
        if rel is not None:
            paths[rel] = iid
        images[iid] = (rel, name, _size(img.get("width")), _size(img.get("height")))
    return images


def _segmentation(seg: object) -> tuple[tuple[tuple[float, ...], ...], Json | None, str | None]:
    """(polygons, rle, problem) of a `segmentation` value."""
    if seg is None or seg == []:
        return (), None, None
    if isinstance(seg, list):
        polygons = []
        for k, poly in enumerate(seg):
            values = [as_float(v) for v in poly] if isinstance(poly, list) else [None]
            floats = [v for v in values if v is not None]
            if len(floats) < len(values) or len(values) < 6 or len(values) % 2:
                return (), None, f"polygon {k} is not a list of at least 3 x, y pairs"
            polygons.append(tuple(floats))
        return tuple(polygons), None, None
    if isinstance(seg, dict):
        size, counts = seg.get("size"), seg.get("counts")
        if not (isinstance(size, list) and len(size) == 2 and all(_size(v) for v in size)):
            return (), None, "RLE 'size' is not [height, width]"
        if not (
            isinstance(counts, str)
            or (
                isinstance(counts, list)
                and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
            )
        ):
            return (), None, "RLE 'counts' is neither a string nor a list of counts"
        return (), {"size": list(size), "counts": counts}, None
    return (), None, f"segmentation is a {type(seg).__name__}, not polygons or RLE"


def _object(ann: Json, index: int, label: str) -> Obj | tuple[str, str]:
    """The object of one annotation of a known image and category, or (reason, detail) why not."""
    bbox = ann.get("bbox")
    values = [as_float(v) for v in bbox] if isinstance(bbox, list) else []
    floats = [v for v in values if v is not None]
    if len(values) != 4 or len(floats) < len(values):
        return "bad_box", f"annotation id {ann.get('id')!r}: bbox {bbox!r} is not [x, y, width, height]"
    polygons, rle, problem = _segmentation(ann.get("segmentation"))
    if problem:
        return "bad_segmentation", f"annotation id {ann.get('id')!r}: {problem}"
    x, y, w, h = floats
    crowd = ann.get("iscrowd", 0)
    area = as_float(ann.get("area"))
    return Obj(index, label, (x, y, x + w, y + h), crowd=crowd in (1, True), area=area, polygons=polygons, rle=rle)


def _id(ann: object) -> object:
    return ann.get("id") if isinstance(ann, dict) else None


def read_coco(source: str, path: str, classes: tuple[str, ...] | None = None) -> AnnotationSet:
    """Reads a COCO instances JSON whose `file_name`s are relative to SOURCE.

    Raises:
        SourceError: the file cannot be read or is not a COCO instances JSON.
    """
    text = read_text(path, "COCO annotations")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(path, f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    if not isinstance(doc, dict):
        _fail(path, "not a JSON object with 'images', 'annotations' and 'categories'")
    problems: list[Problem] = []
    found = _categories(doc, path)
    names = dict(found)
    images = _images(doc, path, source)
    annotations = _list(doc, "annotations", path)
    file_name = posixpath.basename(path.replace("\\", "/"))
    per_image: dict[ImageId, list[Json]] = {iid: [] for iid in images}
    for position, ann in enumerate(annotations):
        iid = ann.get("image_id") if isinstance(ann, dict) else None
        if iid is None or isinstance(iid, (list, dict, bool)) or iid not in images:
            why = "is not an object with an 'image_id'" if iid is None else f"names image id {iid!r}, not in 'images'"
            problems.append(
                Problem(
                    file_name,
                    "unknown_image" if iid is not None else "bad_annotation",
                    f"annotations[{position}] (id {_id(ann)!r}) {why}",
                    position,
                )
            )
            continue
        per_image[iid].append(ann)
    result: dict[str, ImageAnnotation] = {}
    for iid, (rel, name, width, height) in images.items():
        if rel is None:
            detail = f"image id {iid!r}: file_name {name!r} is outside SOURCE"
            problems.append(Problem(name, "outside_source", detail, boxes=len(per_image[iid])))
            continue
        objects = []
        for index, ann in enumerate(per_image[iid]):
            cid = ann.get("category_id")
            if isinstance(cid, bool) or cid not in names:
                problems.append(
                    Problem(
                        rel,
                        "unknown_category",
                        f"annotation id {ann.get('id')!r} names category id {cid!r}, not in 'categories'",
                        index,
                    )
                )
                continue
            made = _object(ann, index, names[cid])
            if isinstance(made, Obj):
                objects.append(made)
            else:
                problems.append(Problem(rel, *made, index))
        source_id = iid if isinstance(iid, int) else None
        result[rel] = ImageAnnotation(rel, width, height, False, tuple(objects), source_id, None)
    return finish(result, found, classes, problems)
