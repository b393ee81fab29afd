"""Ultralytics' dataset layout: `--annotations ds/data.yaml` with SOURCE the dataset root `ds`.

* Classes: the yaml's `names` (a list, or a dict of index: name), as `yolo.read_names`.
* Splits: its `train`, `val` and `test` entries (a string or a list of them), each a
  folder of images (searched recursively), a glob, or a `.txt` list of image paths (one a
  line, relative to the list's folder; `./x` as `x`). An entry is resolved against the
  yaml's `path` (absolute, or relative to the yaml's folder), then SOURCE, then the yaml's
  folder, the first under which it exists; `../x` that exists nowhere is tried as `x`, as
  Ultralytics does for Roboflow's exports. The key is the split's name.
* Labels: Ultralytics' `img2label_paths`: the last `/images/` of an image's full path
  becomes `/labels/` and its extension `.txt` (so SOURCE may also be `ds/images`); lines
  as `yolo` reads them. An image without a label file is an image without objects (a
  background image, as Ultralytics trains it).
* Images are SOURCE-relative: an entry outside SOURCE is a SourceError (give the dataset
  root as SOURCE); an image two splits name is `split_conflict` (its boxes counted); a
  listed image that is not there is left to the listing (`missing_image`).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from typing import Any

from prep.core import storage
from prep.core.annotations.files import IMAGE_EXTENSIONS, files_under, image_path, is_folder, read_text
from prep.core.annotations.model import AnnotationSet, ImageAnnotation, Problem, finish
from prep.core.annotations.yolo import label_objects, read_names
from prep.core.errors import SourceError

SPLIT_KEYS = ("train", "val", "test")


def _load(path: str) -> dict[str, Any]:
    import yaml  # PyYAML, only for a data.yaml

    try:
        doc = yaml.safe_load(read_text(path, "Ultralytics data file"))
    except yaml.YAMLError as exc:
        raise SourceError(f"Ultralytics data file {path} is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise SourceError(f"Ultralytics data file {path} is not a YAML mapping with names and train/val/test")
    return doc


def _bases(source: str, path: str, doc: dict[str, Any]) -> list[str]:
    """The folders an entry may be relative to, in the order they are tried."""
    here = (posixpath if storage.is_remote(path) else os.path).dirname(path)
    bases = []
    root = doc.get("path")
    if isinstance(root, str) and root:
        bases.append(root if os.path.isabs(root) or storage.is_remote(root) else storage.join(here, root))
    return bases + [source, here]


class _Tree:
    """The files under SOURCE, SOURCE-relative, with the folders that hold them."""

    def __init__(self, source: str):
        self.source = source
        self.files = files_under(source)
        self.set = set(self.files)
        self.folders = {posixpath.dirname(f) for f in self.files}
        for folder in list(self.folders):
            while folder:
                folder = posixpath.dirname(folder)
                self.folders.add(folder)

    def locate(self, entry: str, bases: list[str]) -> str | None:
        """The SOURCE-relative path of the first existing resolution of `entry`, or None."""
        tries = [entry] + ([entry[3:]] if entry.startswith("../") else [])
        for candidate in tries:
            for base in bases:
                full = (
                    candidate
                    if os.path.isabs(candidate) or storage.is_remote(candidate)
                    else storage.join(base, candidate)
                )
                norm = posixpath.normpath if storage.is_remote(full) else os.path.normpath
                rel = "" if norm(full) == norm(self.source) else image_path(self.source, full)  # "": SOURCE
                if rel is not None and (rel in self.set or rel in self.folders or _is_glob(rel)):
                    return rel
        return None

    def images(self, rel: str) -> list[str]:
        """The images an entry resolved to `rel` names (its folder's, its glob's, its list's)."""
        if _is_glob(rel):
            return [f for f in self.files if fnmatch.fnmatchcase(f, rel) and _is_image(f)]
        if rel in self.set and rel.lower().endswith(".txt"):
            text = read_text(storage.join(self.source, rel), "Ultralytics image list")
            out = []
            for line in text.splitlines():
                line = line.strip()
                line = line[2:] if line.startswith("./") else line
                if line:
                    listed = image_path(
                        self.source, line if os.path.isabs(line) else posixpath.join(posixpath.dirname(rel), line)
                    )
                    out.append(listed if listed is not None else line)
            return out
        if rel in self.set:
            return [rel]
        return [f for f in self.files if (not rel or f.startswith(rel + "/")) and _is_image(f)]


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _is_image(rel: str) -> bool:
    return posixpath.splitext(rel)[1].lower() in IMAGE_EXTENSIONS


def label_path(image: str) -> tuple[str, str]:
    """Ultralytics' img2label_paths, as (labels folder, path under it): the last /images/ of the image's
    full path becomes /labels/, its extension .txt; with no /images/, the .txt beside the image."""
    s = image.replace("\\", "/")
    i = s.rfind("/images/")
    if i < 0:
        folder, name = posixpath.split(s)
        return folder, posixpath.splitext(name)[0] + ".txt"
    return s[:i] + "/labels", posixpath.splitext(s[i + len("/images/") :])[0] + ".txt"


class _Labels:
    """The label files of images, each labels folder listed once (not one request per image)."""

    def __init__(self) -> None:
        self._listed: dict[str, set[str]] = {}

    def text(self, image: str) -> str | None:
        """The label file's text of the image at full path `image`, or None when it has none."""
        folder, rel = label_path(image)
        if folder not in self._listed:
            self._listed[folder] = set(files_under(folder)) if is_folder(folder) else set()
        if rel not in self._listed[folder]:
            return None
        return read_text(storage.join(folder, rel), "YOLO annotation")


def read_data_yaml(source: str, path: str, classes: tuple[str, ...] | None = None) -> AnnotationSet:
    """Reads an Ultralytics data.yaml and the label files of the images its splits name.

    Raises:
        SourceError: the yaml cannot be read, names no split, or an entry is not under SOURCE.
    """
    doc = _load(path)
    names = read_names(path)
    if not any(doc.get(k) for k in SPLIT_KEYS):
        raise SourceError(f"Ultralytics data file {path} names no split ({', '.join(SPLIT_KEYS)})")
    tree, bases, labels = _Tree(source), _bases(source, path, doc), _Labels()
    problems: list[Problem] = []
    images: dict[str, ImageAnnotation] = {}
    for split in SPLIT_KEYS:
        entries = doc.get(split) or []
        for entry in [entries] if isinstance(entries, str) else entries:
            rel = tree.locate(str(entry), bases) if isinstance(entry, (str, int)) else None
            if rel is None:
                raise SourceError(
                    f"Ultralytics data file {path}: {split} entry {entry!r} is no folder, glob or list file "
                    f"under SOURCE {source} (SOURCE is the dataset root)"
                )
            for image in tree.images(rel):
                text = labels.text(storage.join(source, image)) or ""
                objects = tuple(label_objects(text, image, names, problems))
                if image in images:
                    detail = f"named by split {images[image].split!r} and by split {split!r}"
                    problems.append(Problem(image, "split_conflict", detail, None, len(objects)))
                    continue
                images[image] = ImageAnnotation(image, None, None, True, objects, None, split)
    return finish(images, list(enumerate(names)), classes, problems)
