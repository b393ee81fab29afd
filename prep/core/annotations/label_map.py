"""The label maps written beside detection shards: `label_map.pbtxt` (Object Detection API's
StringIntLabelMap) and `label_map.csv` (`id,name`, Model Garden)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Protocol


class Category(Protocol):
    """A class as a label map needs it: the annotations' `Category` or the manifest's."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...


def _quoted(name: str) -> str:
    # A text-format string literal: backslash, quote and control characters escaped.
    out = []
    for ch in name:
        if ch in ("\\", "'", '"'):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def label_map_pbtxt(categories: Sequence[Category]) -> str:
    """`item { id: 1 name: 'cat' }` for each category, in id order (ids from 1)."""
    return "".join(f"item {{\n  id: {c.id}\n  name: {_quoted(c.name)}\n}}\n" for c in categories)


def label_map_csv(categories: Sequence[Category]) -> str:
    """`id,name` and a row per category, in id order, quoted as CSV needs."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", "name"])
    for c in categories:
        writer.writerow([c.id, c.name])
    return buffer.getvalue()
