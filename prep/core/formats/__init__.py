"""Shard file formats: one owner per container (`ShardFormat`), registered here by name.

The writer, `verify`, `inspect`, `report`, `leakage` and the loaders ask `get(name)` for the
format a manifest names (`Manifest.file_format`) and never read a container themselves. A new
format is one module implementing `ShardFormat` and one line in `FORMATS`.
"""

from __future__ import annotations

from prep.core.errors import OptionsError
from prep.core.formats.array_record_format import ARRAY_RECORD
from prep.core.formats.base import RecordSource, ScanResult, ShardFormat, ShardWriter
from prep.core.formats.tfrecord_format import TFRECORD

FORMATS: dict[str, ShardFormat] = {f.name: f for f in (TFRECORD, ARRAY_RECORD)}
NAMES = tuple(FORMATS)
DEFAULT = TFRECORD.name
SUFFIXES = tuple(f.suffix for f in FORMATS.values())


def get(name: str) -> ShardFormat:
    """The owner of format `name`; ValueError naming the known ones if there is none."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"file format {name!r} is not one of {', '.join(NAMES)}") from None


__all__ = [
    "ARRAY_RECORD",
    "DEFAULT",
    "FORMATS",
    "NAMES",
    "SUFFIXES",
    "TFRECORD",
    "RecordSource",
    "ScanResult",
    "ShardFormat",
    "ShardWriter",
    "get",
]


def checked_options(file_format: str, given: str | None) -> str | None:
    """The writer options of `file_format` (`--array-record-options`), checked, its default filled in.

    Raises:
        OptionsError: options given for a format that takes none, or options the format refuses.
    """
    if file_format not in NAMES:
        return None  # ConvertConfig names the bad format
    if given is not None and file_format != ARRAY_RECORD.name:
        raise OptionsError(f"--array-record-options applies to --file-format array_record, not {file_format}")
    try:
        return get(file_format).check_options(given)
    except ValueError as exc:
        raise OptionsError(str(exc)) from None
