"""Annotations in (COCO, Pascal VOC, YOLO, one box per row), checked and placed on the stored image.

Pure (no Beam, no TensorFlow). The public surface the pipeline calls (the issue-18
contract): `read_annotations`, `BoxPolicy`, `place_objects`, `prepare_mask`,
`label_map_pbtxt`, `label_map_csv`, `stratify`, and the types they take and return.
"""

from __future__ import annotations

from prep.core.annotations.box_csv import read_box_csv
from prep.core.annotations.coco import read_coco
from prep.core.annotations.detect import FORMATS, detect_format
from prep.core.annotations.label_map import label_map_csv, label_map_pbtxt
from prep.core.annotations.masks import prepare_mask
from prep.core.annotations.model import AnnotationSet, Category, ImageAnnotation, Obj, Problem
from prep.core.annotations.place import BoxPolicy, Placed, PlacedObject, PlainBoxes, place_objects, place_plain
from prep.core.annotations.strata import stratify
from prep.core.annotations.ultralytics import read_data_yaml
from prep.core.annotations.voc import read_voc
from prep.core.annotations.yolo import read_yolo
from prep.core.errors import SourceError

__all__ = [
    "AnnotationSet",
    "BoxPolicy",
    "Category",
    "FORMATS",
    "ImageAnnotation",
    "Obj",
    "Placed",
    "PlacedObject",
    "PlainBoxes",
    "Problem",
    "detect_format",
    "label_map_csv",
    "label_map_pbtxt",
    "place_objects",
    "place_plain",
    "prepare_mask",
    "read_annotations",
    "stratify",
]

_READERS = {"coco": read_coco, "voc": read_voc, "yolo": read_yolo, "csv": read_box_csv}


def read_annotations(
    source: str, path: str, fmt: str | None = None, classes: tuple[str, ...] | None = None
) -> AnnotationSet:
    """Reads the annotations at PATH for the images under SOURCE.

    Args:
        source: SOURCE, the folder image paths are relative to.
        path: the annotation file or folder.
        fmt: one of FORMATS, or None to detect it from what PATH is.
        classes: --classes: exactly these categories, in this order; objects of
            other labels become `unknown_class` problems.

    Raises:
        SourceError: PATH cannot be read or is not of the format.
    """
    fmt = detect_format(path) if fmt is None else fmt
    if fmt not in FORMATS:
        raise SourceError(f"--annotation-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "yolo" and path.lower().endswith((".yaml", ".yml")):  # Ultralytics' data.yaml
        return read_data_yaml(source, path, classes)
    return _READERS[fmt](source, path, classes)
