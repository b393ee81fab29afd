"""Which annotation format PATH holds, from what PATH is (`--annotation-format` overrides).

* a `.json` file: COCO;
* a `.csv`, `.tsv` or `.jsonl` file: one box per row (`csv`);
* a `.yaml` or `.yml` file: an Ultralytics data.yaml (`yolo`);
* a folder: Pascal VOC if it holds `.xml` files; YOLO if it holds `.txt` files and a
  `classes.txt` or `data.yaml` (in it or its parent, where YOLO exports put it).
"""

from __future__ import annotations

import os
import posixpath

from prep.core import storage
from prep.core.annotations.files import files_under, is_folder
from prep.core.errors import SourceError

FORMATS = ("coco", "voc", "yolo", "csv")
CLASS_FILES = ("classes.txt", "data.yaml", "data.yml")


def yolo_class_file(path: str) -> str | None:
    """The classes.txt or data.yaml of a YOLO label folder: in it, else in its parent."""
    parent = (posixpath if storage.is_remote(path) else os.path).dirname(path.rstrip("/\\"))
    for folder in (path, parent):
        if not folder:
            continue
        names = storage.list_names(folder)
        for name in CLASS_FILES:
            if name in names:
                return storage.join(folder, name)
    return None


def detect_format(path: str) -> str:
    """The format of PATH, one of FORMATS.

    Raises:
        SourceError: PATH does not exist or is none of them.
    """
    lower = path.lower().rstrip("/")
    if lower.endswith(".json"):
        return "coco"
    if lower.endswith((".csv", ".tsv", ".jsonl")):
        return "csv"
    if lower.endswith((".yaml", ".yml")):
        return "yolo"  # an Ultralytics data.yaml
    if not is_folder(path):
        if storage.exists(path):
            raise SourceError(
                f"--annotations {path}: a file must end in .json (COCO), .yaml (Ultralytics data.yaml) or .csv, "
                ".tsv, .jsonl (one box per row); give --annotation-format to read it otherwise"
            )
        raise SourceError(f"--annotations {path} does not exist")
    files = files_under(path)
    if any(f.lower().endswith(".xml") for f in files):
        return "voc"
    if (
        any(f.lower().endswith(".txt") and posixpath.basename(f) != "classes.txt" for f in files)
        and yolo_class_file(path) is not None
    ):
        return "yolo"
    raise SourceError(
        f"--annotations {path}: a folder must hold Pascal VOC .xml files, or YOLO .txt files with "
        "a classes.txt or data.yaml; give --annotation-format to say which"
    )
