"""Reading annotation files and folders, local or remote, with one-line SourceErrors."""

from __future__ import annotations

import os
import posixpath

from prep.core import storage
from prep.core.errors import SourceError
from prep.core.label_file import normalize_path

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".mpo")
# Annotation and list files, never an image a label file or XML means.
NOT_IMAGES = (".txt", ".xml", ".json", ".yaml", ".yml", ".csv", ".tsv", ".jsonl", ".cache")


def read_text(path: str, what: str) -> str:
    """The UTF-8 text of `path` (a byte-order mark dropped).

    Raises:
        SourceError: the file cannot be read or is not UTF-8.
    """
    try:
        data = storage.read_bytes(path)
    except OSError as exc:
        raise SourceError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SourceError(f"{what} {path} is not UTF-8 text") from None


def is_folder(path: str) -> bool:
    if storage.is_remote(path):
        return bool(storage.list_names(path))
    return os.path.isdir(path)


def files_under(root: str) -> list[str]:
    """Paths relative to `root` ('/'-separated, sorted) of every file under it."""
    if storage.is_remote(root):
        return [p for p, _ in storage.list_files(root)]
    out = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(folder, root)
        for name in files:
            out.append(name if rel == "." else os.path.join(rel, name).replace(os.sep, "/"))
    return sorted(out)


def image_path(source: str, written: str) -> str | None:
    """An image path from an annotation, relative to SOURCE, or None if it points outside."""
    # Most names are relative and already normal ("img/0001.jpg"): `normalize_path` gives them back as they are,
    # whatever SOURCE is, after a join, a normpath and a relpath per image of every listing
    if os.sep == "/" and written[:1] != "/" and not storage.is_remote(written):
        if posixpath.normpath(written) == written and written not in (".", "..") and not written.startswith("../"):
            return written
    return normalize_path(source, written)


class StemIndex:
    """Finds the image of an annotation file that names none: the file under SOURCE with the
    same relative path but for the extension, preferring image extensions.

    A file of another extension (`.tga`, `.jp2`, none) is taken when it is the only one of
    its stem, but for annotation kinds (`.txt`, `.xml`, ...): the image rule, not the
    extension, decides whether it decodes.
    """

    def __init__(self, source: str):
        self._by_stem: dict[str, list[str]] = {}
        self._other: dict[str, list[str]] = {}
        for rel in files_under(source):
            stem, ext = posixpath.splitext(rel)
            if ext.lower() in IMAGE_EXTENSIONS:
                self._by_stem.setdefault(stem, []).append(rel)
            elif ext.lower() not in NOT_IMAGES:
                self._other.setdefault(stem, []).append(rel)

    def find(self, stem: str) -> tuple[str, None] | tuple[None, str]:
        """(image path, None), or (None, why not) when there is none or more than one."""
        found = self._by_stem.get(stem) or self._other.get(stem, [])
        if len(found) == 1:
            return found[0], None
        if not found:
            return None, f"no file {stem}.* under SOURCE"
        return None, f"{len(found)} images could be meant: {', '.join(found)}"


def strip_ext(rel: str) -> str:
    return posixpath.splitext(rel)[0]
