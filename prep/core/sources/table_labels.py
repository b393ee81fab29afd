"""The label column of a Parquet or Arrow table, and a row's label from it.

A label column holds integers or strings, or lists of them (a multi-label dataset, `multilabel`). Its class
names come from the schema's Hugging Face metadata: a `ClassLabel` feature, or for a list column a
`Sequence(ClassLabel)` (written `{"_type": "Sequence", "feature": ClassLabel}` by `datasets` before 4,
`{"_type": "List", ...}` since, or `[ClassLabel]` for a Python list in the features). A row's rejects name
file and row: `no_label` (null, Hugging Face's -1), `unknown_label` (an id past the class names), and for a
list `empty_label` (an empty list, an empty name) and `bad_label` (a null in the list, a name with '|').
"""

from __future__ import annotations

from typing import Any

from prep.core.errors import SourceError
from prep.core.listing import Reject
from prep.core.sources import multilabel
from prep.core.sources.table_files import describe, hf_features

LABEL_NAMES = ("label", "labels", "class", "category", "cls", "target", "fine_label")
_LISTS = ("Sequence", "List", "LargeList")


def class_names(feature: Any) -> tuple[str, ...] | None:
    """The class names of a column's Hugging Face feature: a ClassLabel's, or a list of ClassLabels'."""
    if isinstance(feature, list) and len(feature) == 1:  # a Python list in the features: [ClassLabel]
        feature = feature[0]
    elif isinstance(feature, dict) and feature.get("_type") in _LISTS:
        feature = feature.get("feature")
    if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" and feature.get("names"):
        return tuple(str(n) for n in feature["names"])
    return None


def label_column(schema: Any, wanted: str | None, file: str) -> tuple[str, tuple[str, ...] | None]:
    """The label column and its ClassLabel names (None when the metadata gives none).

    Raises:
        SourceError: none is found, or several, or it holds no integers or strings (naming the columns).
    """
    names = [f.name for f in schema]
    features = hf_features(schema)
    if wanted is not None:
        if wanted not in names:
            raise SourceError(f"--label-column {wanted!r} is not a column of {file} (columns: {describe(schema)})")
        found = [wanted]
    else:
        found = [n for n in names if class_names(features.get(n)) is not None]
        if not found:
            usable = {f.name for f in schema if _label_type(f.type)}
            found = [n for n in LABEL_NAMES if n in usable]
    if len(found) != 1:
        which = f"several label columns ({', '.join(found)})" if found else "no label column"
        raise SourceError(f"{file} has {which}: name one with --label-column (columns: {describe(schema)})")
    kind = schema.field(found[0]).type
    if not _label_type(kind):
        raise SourceError(
            f"label column {found[0]!r} of {file} is {kind}: labels are integers or strings, or lists of them"
        )
    return found[0], class_names(features.get(found[0]))


def _label_type(kind: Any) -> bool:
    """Whether a column of this type holds labels: integers or strings (pandas' categoricals too), or lists
    of them."""
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        kind = kind.value_type
    kind = kind.value_type if pa.types.is_dictionary(kind) else kind
    return bool(pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind))


def row_label(path: str, value: object, names: tuple[str, ...] | None) -> str | Reject:
    """A row's class name (a list's: `multilabel.joined`), or its Reject: `names` are the ClassLabel names in
    effect for its file."""
    if value is None or value == "":
        return Reject(path, "no_label", "the label is null")
    if isinstance(value, list):
        return _list_label(path, value, names)
    if isinstance(value, str):
        return value
    if names is None:
        return str(value)
    if value == -1:
        return Reject(path, "no_label", "label -1 (Hugging Face's no label)")
    if not 0 <= int(str(value)) < len(names):
        return Reject(path, "unknown_label", f"label {value} is past the {len(names)} class names")
    return names[int(str(value))]


def _list_label(path: str, values: list[Any], names: tuple[str, ...] | None) -> str | Reject:
    got = []
    for value in values:
        if value is None:
            return Reject(path, "bad_label", "the label list holds a null")
        if isinstance(value, str) or names is None:
            got.append(str(value))
        elif not 0 <= int(value) < len(names):
            return Reject(path, "unknown_label", f"label {value} is past the {len(names)} class names")
        else:
            got.append(names[int(value)])
    label = multilabel.joined(got, "the label list")
    return label if isinstance(label, str) else Reject(path, *label)
