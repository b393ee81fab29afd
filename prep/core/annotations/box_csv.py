"""The one-box-per-row reader: CSV, TSV or JSONL with `path,label,xmin,ymin,xmax,ymax`.

* Coordinates are pixels of the displayed image, continuous (a W-wide image spans
  [0, W]). Optional columns: `split`, `width` and `height` (the frame), `crowd`,
  `difficult`.
* Rows of one path make one image, objects indexed in row order. A row whose four box
  fields are empty is an image with no objects (its label may be empty too).
* A row that cannot be used is a Problem of its image at its index: `bad_box`
  (some box fields empty or not numbers), `no_label`; a path outside SOURCE is
  `outside_source`; a path given two splits is `split_conflict` (the first is kept).
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
from collections.abc import Collection, Iterator

from prep.core.annotations.files import image_path, read_text
from prep.core.annotations.model import AnnotationSet, ImageAnnotation, Obj, Problem, as_float, finish
from prep.core.errors import SourceError

COLUMNS = ("path", "label", "xmin", "ymin", "xmax", "ymax")


def _rows(path: str) -> Iterator[tuple[int, dict[str, str]]]:
    """Yields (line number, {column: text}) of the file."""
    text = read_text(path, "box file")
    name = path.lower()
    if name.endswith((".jsonl", ".ndjson", ".json")):
        seen: set[str] = set()  # keys may be left out of a row (an image with no box), not out of all
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceError(f"box file {path} line {number} is not JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise SourceError(f"box file {path} line {number} is not a JSON object")
            seen.update(row)
            yield number, {k: "" if v is None else v if isinstance(v, str) else json.dumps(v) for k, v in row.items()}
        _check_columns(path, seen)
        return
    try:
        reader = csv.DictReader(
            io.StringIO(text, newline=""), delimiter="\t" if name.endswith(".tsv") else ",", skipinitialspace=True
        )
        _check_columns(path, [c.strip() for c in reader.fieldnames or ()])
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise SourceError(
                    f"box file {path} line {reader.line_num} has a different number of fields than the header"
                )
            yield reader.line_num, {k.strip(): v for k, v in row.items()}
    except csv.Error as exc:
        raise SourceError(f"box file {path} is not valid CSV: {exc}") from None


def _check_columns(path: str, columns: Collection[str]) -> None:
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise SourceError(f"box file {path} has no {missing[0]!r} column (it needs {', '.join(COLUMNS)})")


def _flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes")


def read_box_csv(source: str, path: str, classes: tuple[str, ...] | None = None) -> AnnotationSet:
    """Reads a CSV, TSV or JSONL of one box per row.

    Raises:
        SourceError: the file cannot be read, lacks a column, or a row is malformed.
    """
    problems: list[Problem] = []
    rows: dict[str, list[Obj | None]] = {}  # None: a row that gives no object, still numbered
    frame: dict[str, tuple[int, int]] = {}
    splits: dict[str, str | None] = {}
    file_name = posixpath.basename(path.replace("\\", "/"))
    for number, row in _rows(path):
        written = row.get("path", "").strip()
        rel = image_path(source, written) if written else None
        if rel is None:
            problems.append(
                Problem(
                    written or file_name,
                    "outside_source" if written else "bad_row",
                    f"line {number}: " + ("the path is outside SOURCE" if written else "no path"),
                    None,
                    int(any(row.get(k, "").strip() for k in COLUMNS[2:])),  # the row's box, not written
                )
            )
            continue
        index = len(rows.setdefault(rel, []))
        split = row.get("split", "").strip() or None
        if rel in splits and splits[rel] != split:
            problems.append(
                Problem(
                    rel,
                    "split_conflict",
                    f"line {number} gives split {split!r}, an earlier row {splits[rel]!r}; the first is kept",
                )
            )
        splits.setdefault(rel, split)
        w, h = (as_float(row.get(k, "")) for k in ("width", "height"))
        if w and h and w > 0 and h > 0 and w == int(w) and h == int(h):
            frame.setdefault(rel, (int(w), int(h)))
        fields = [row.get(k, "").strip() for k in COLUMNS[2:]]
        label = row.get("label", "").strip()
        if not any(fields):
            continue  # the image, with no objects
        read = [as_float(f) for f in fields]
        values = [v for v in read if v is not None]
        if len(values) < len(read):
            problems.append(Problem(rel, "bad_box", f"line {number}: box {fields} is not four numbers", index))
            rows[rel].append(None)
        elif not label:
            problems.append(Problem(rel, "no_label", f"line {number}: a box without a label", index))
            rows[rel].append(None)
        else:
            rows[rel].append(
                Obj(
                    index,
                    label,
                    tuple(values),
                    crowd=_flag(row.get("crowd", "")),
                    difficult=_flag(row.get("difficult", "")),
                )
            )
    images = {}
    for rel, objects in rows.items():
        w, h = frame.get(rel, (None, None))
        images[rel] = ImageAnnotation(
            rel, w, h, False, tuple(o for o in objects if o is not None), None, splits.get(rel)
        )
    found = sorted({o.label for a in images.values() for o in a.objects})
    return finish(images, [(None, n) for n in found], classes, problems)
