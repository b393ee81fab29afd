"""The COCO instances JSON reader, streamed: memory bounded whatever the file's size.

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
  entry without its id, repeated ids) is a SourceError naming the file and the fault; of
  several faults, the first of categories, then images, then annotations.

The file is read once as a stream (`json_stream`, ijson), its arrays in any order (one that fits
one bucket of the join, in one pass held whole: `json_stream.read_arrays`); the
annotations are joined to their images bucket by bucket on local disk (`coco_join`), and
each image's objects wait in a file (`rows.FileStore`) until the listing takes them.
`read_coco_rows` gives that form; `read_coco` the whole `AnnotationSet` in memory. `scan`, `settle`,
`image_entry` and `shape` are also the steps of the join on workers (`coco_keyed`).
"""

from __future__ import annotations

import math
import os
import posixpath
import tempfile
import typing
from array import array
from collections.abc import Iterator
from typing import Any, NoReturn

from prep.core import storage
from prep.core.annotations.coco_join import ImageEntry, ImageId, Spill, bucket_count
from prep.core.annotations.files import image_path
from prep.core.annotations.json_stream import StreamError, first_byte, iter_arrays, read_arrays, value_of
from prep.core.annotations.model import AnnotationSet, Json, as_float
from prep.core.annotations.rows import FileStore, ObjectStore, RowSet, annotation_set, finish_rows
from prep.core.errors import SourceError

SECTIONS = ("categories", "images", "annotations")
_NUMBER = (int, float)  # the types of a JSON number as the parser gives it (a bool is neither)
_NO_BOX: tuple[Any, ...] = (None,) * 4


def _fail(path: str, what: str) -> NoReturn:
    raise SourceError(f"COCO annotations {path}: {what}")


def _size(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class Checks:
    """The first fault of each section, found while the file streams by; raised in SECTIONS' order."""

    def __init__(self, path: str, source: str):
        self.path, self.source = path, source
        self.faults: dict[str, str] = {}
        self.categories: list[Any] = []
        self.images: dict[ImageId, ImageEntry] = {}
        self._paths: dict[str, ImageId] = {}
        self._count = 0

    def image(self, img: object) -> None:
        i = self._count
        self._count += 1
        if "images" in self.faults:
            return
        made = image_entry(self.source, i, img)
        if isinstance(made, str):
            self.faults["images"] = made
            return
        iid, entry = made
        if iid in self.images:
            self.faults["images"] = f"image id {iid!r} is given twice"
            return
        rel = entry[0]
        if rel is not None and rel in self._paths:
            self.faults["images"] = f"image ids {self._paths[rel]!r} and {iid!r} both name {rel!r}"
            return
        if rel is not None:
            self._paths[rel] = iid
        self.images[iid] = entry

    def section(self, key: str, counts: dict[str, int]) -> None:
        """Checks that `key` is a list (an array with no items is looked at again, whole)."""
        if counts[key] or key in self.faults:
            return
        values = value_of(self.path, key)
        value = values[-1] if values else None  # a repeated key: the last, as json.loads
        if not isinstance(value, list):
            self.faults[key] = f"no {key!r} list" if value is None else f"{key!r} is not a list"

    def raise_first(self) -> None:
        for key in SECTIONS:
            if key in self.faults:
                _fail(self.path, self.faults[key])


def image_entry(source: str, i: int, img: object) -> tuple[ImageId, ImageEntry] | str:
    """(id, entry) of images[i], or the fault that makes it no image entry."""
    iid = img.get("id") if isinstance(img, dict) else None
    name = img.get("file_name") if isinstance(img, dict) else None
    if not isinstance(iid, (int, str)) or isinstance(iid, bool) or not isinstance(name, str) or not name:
        return f"images[{i}] has no 'id' and non-empty 'file_name'"
    assert isinstance(img, dict)  # it has an id
    return iid, (image_path(source, name), name, _size(img.get("width")), _size(img.get("height")), i)


def _categories(cats: list[Any], path: str) -> list[tuple[int, str]]:
    found: dict[int, str] = {}
    names: set[str] = set()
    for i, cat in enumerate(cats):
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


def _floats(poly: object) -> list[float] | None:
    """The values of a polygon as floats, each as `as_float` reads it; None if one is not a number."""
    if not isinstance(poly, list):
        return None
    if bool not in set(map(type, poly)):  # the fast path: array('d') would read True as 1.0
        try:
            return array("d", poly).tolist()
        except TypeError:  # a string (as_float reads "1.5") or another value
            pass
    values = [as_float(v) for v in poly]
    return None if any(v is None for v in values) else typing.cast(list[float], values)


def _segmentation(seg: object) -> tuple[list[list[float]], Json | None, str | None]:
    """(polygons, rle, problem) of a `segmentation` value."""
    if seg is None or seg == []:
        return [], None, None
    if isinstance(seg, list):
        polygons = []
        for k, poly in enumerate(seg):
            floats = _floats(poly)
            if floats is None or len(floats) < 6 or len(floats) % 2:
                return [], None, f"polygon {k} is not a list of at least 3 x, y pairs"
            polygons.append(floats)
        return polygons, None, None
    if isinstance(seg, dict):
        size, counts = seg.get("size"), seg.get("counts")
        if not (isinstance(size, list) and len(size) == 2 and all(_size(v) for v in size)):
            return [], None, "RLE 'size' is not [height, width]"
        if not (
            isinstance(counts, str)
            or (
                isinstance(counts, list)
                and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
            )
        ):
            return [], None, "RLE 'counts' is neither a string nor a list of counts"
        return [], {"size": list(size), "counts": counts}, None
    return [], None, f"segmentation is a {type(seg).__name__}, not polygons or RLE"


def shape(ann: Json) -> Json | tuple[str, str]:
    """The object of one annotation as `ImageAnnotation.to_json` writes it, but for its index and label
    (known at the join), or (reason, detail) why it cannot be one."""
    # Run for every annotation of the file: the usual case (four numbers, finite) in as few calls as it takes.
    bbox = ann.get("bbox")
    x, y, w, h = bbox if type(bbox) is list and len(bbox) == 4 else _NO_BOX
    if type(x) in _NUMBER and type(y) in _NUMBER and type(w) in _NUMBER and type(h) in _NUMBER:
        x, y, w, h = float(x), float(y), float(w), float(h)  # as `as_float` reads them
    else:
        values = [as_float(v) for v in bbox] if isinstance(bbox, list) else []
        floats = [v for v in values if v is not None]
        if len(values) != 4 or len(floats) < len(values):
            return "bad_box", f"annotation id {ann.get('id')!r}: bbox {bbox!r} is not [x, y, width, height]"
        x, y, w, h = floats
    seg = ann.get("segmentation")
    polygons, rle = None, None
    if seg is not None:
        polygons, rle, problem = _segmentation(seg)
        if problem:
            return "bad_segmentation", f"annotation id {ann.get('id')!r}: {problem}"
    x1, y1 = x + w, y + h
    # A sum of finite values can only overflow to inf: then each is judged alone, as for NaN and inf.
    box = [x, y, x1, y1] if math.isfinite(x + y + x1 + y1) else [_num_out(v) for v in (x, y, x1, y1)]
    item: Json = {"b": box}
    if ann.get("iscrowd", 0) in (1, True):
        item["f"] = 1
    given = ann.get("area")
    area = float(given) if type(given) in _NUMBER else as_float(given)  # type: ignore[arg-type]  # as `as_float`
    if area is not None:
        item["a"] = area if math.isfinite(area) else _num_out(area)
    if polygons:
        item["p"] = polygons
    if rle is not None:
        item["r"] = rle
    return item


def _num_out(value: float) -> float | str:
    return value if math.isfinite(value) else repr(float(value))  # as ImageAnnotation.to_json writes it


def read_coco_rows(
    source: str, path: str, classes: tuple[str, ...] | None, folder: str, store: ObjectStore | None = None
) -> RowSet:
    """Reads a COCO instances JSON whose `file_name`s are relative to SOURCE, as a stream; spills its
    annotations under `folder` (local, removed by the caller) and puts its images' objects in `store`
    (None: a FileStore there).

    Raises:
        SourceError: the file cannot be read or is not a COCO instances JSON.
    """
    file_name = posixpath.basename(path.replace("\\", "/"))
    checks = Checks(path, source)
    spill = Spill(folder, bucket_count(_file_size(path)), file_name)
    position = 0
    counts: dict[str, int] = {}
    for key, item in scan(path, counts, whole=spill.buckets == 1):
        if key == "annotations":
            spill.add(position, item, shape)
            position += 1
        elif key == "images":
            checks.image(item)
        else:
            checks.categories.append(item)
    found = settle(checks, counts)
    checks.raise_first()
    store = FileStore(os.path.join(folder, "objects.jsonl")) if store is None else store
    rows, problems = spill.join(checks.images, dict(found), store)
    problems.sort(key=lambda pair: pair[0])  # equal problems (path, box, reason) in the file's order
    return finish_rows(rows, found, classes, spill.problems + [p for _, p in problems], store)


def scan(path: str, counts: dict[str, int], whole: bool = False) -> Iterator[tuple[str, Any]]:
    """The items of the file's SECTIONS as (key, item), streamed (`json_stream.iter_arrays`); `counts` gets
    how many of each. `whole`: a file of one bucket, held whole anyway (`coco_join`), is read in one pass
    (`json_stream.read_arrays`), its items in file order, or streamed when that pass cannot say.

    Raises:
        SourceError: the file cannot be read, is not UTF-8 or not JSON, or is not a JSON object.
    """
    try:
        first = first_byte(path)
        held = read_arrays(path, SECTIONS) if whole else None
        if held is not None:
            counts.update(held[1])
            yield from held[0]
        else:
            yield from iter_arrays(path, SECTIONS, counts)
        if first != b"{":
            _fail(path, "not a JSON object with 'images', 'annotations' and 'categories'")
    except OSError as exc:
        raise SourceError(f"cannot read COCO annotations {path}: {exc.strerror or exc}") from None
    except StreamError as exc:
        if not exc.utf8:
            raise SourceError(f"COCO annotations {path} is not UTF-8 text ({exc})") from None
        _fail(path, f"not JSON ({exc})")


def settle(checks: Checks, counts: dict[str, int]) -> list[tuple[int, str]]:
    """Once the file has streamed by (`scan`): each section's fault if it is no list, and the categories
    ((source id, name) in id order; none when their section is faulty).

    Raises:
        SourceError: the file cannot be read again, or a category is faulty.
    """
    try:
        for key in SECTIONS:
            checks.section(key, counts)
    except OSError as exc:
        raise SourceError(f"cannot read COCO annotations {checks.path}: {exc.strerror or exc}") from None
    return [] if "categories" in checks.faults else _categories(checks.categories, checks.path)


def _file_size(path: str) -> int | None:
    try:
        return storage.size(path)
    except Exception:  # each file system raises its own types; the read says what is wrong
        return None


def read_coco(source: str, path: str, classes: tuple[str, ...] | None = None) -> AnnotationSet:
    """Reads a COCO instances JSON whose `file_name`s are relative to SOURCE, every object in memory
    (a listing uses `read_coco_rows`, which keeps them on disk).

    Raises:
        SourceError: the file cannot be read or is not a COCO instances JSON.
    """
    with tempfile.TemporaryDirectory(prefix="prep-coco-") as folder:
        found = read_coco_rows(source, path, classes, folder)
        try:
            return annotation_set(found)
        finally:
            found.store.close()
