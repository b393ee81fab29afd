"""What `prep report` reads from a dataset (a folder, or a remote prefix through `prep.core.storage`):
the manifest, records from the shards, rejects.

The manifest is the typed `prep.core.manifest.Manifest`; the report reads its attributes
(`manifest.labels`, `split.shards`, `shard.class_counts`, `manifest.inputs.found`,
`manifest.run.source`, ...). Reading is
tolerant: a shard that is missing or damaged, or a rejects file that is not there,
becomes a note on the page (`prep verify` says exactly what is wrong), never a failed report.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json

from prep.core import formats, storage
from prep.core.errors import PrepError
from prep.core.manifest import REJECTS, Manifest
from prep.core.schema import ImageRecord


def load_manifest(output: str) -> Manifest:
    """The manifest of OUTPUT (`prep.core.manifest.Manifest`), with every shard's counts (the heat maps
    and the balance verdict read them).

    Raises:
        ManifestError: missing, not ours, of an unknown version, or malformed (its shard counts too).
    """
    return Manifest.load(output, shard_counts=True)


@dataclasses.dataclass(frozen=True)
class Samples:
    """Records picked per label id for the sample grid, and what got in the way of reading them."""

    picked: dict[int, list[ImageRecord]]
    records_read: int
    notes: tuple[str, ...]


def read_samples(manifest, output: str, wanted: dict[int, int], max_records: int) -> Samples:
    """The first records of each label in `wanted` (label id -> how many), reading shards
    of the largest split first, in index order, until every label has its count or
    `max_records` records were read. Records inside a shard are in seeded shuffled order,
    so the first ones are a fair sample; on a balanced dataset the first shard has them all.
    """
    picked: dict[int, list[ImageRecord]] = {label: [] for label in wanted}
    missing = sum(wanted.values())
    read, notes = 0, []
    splits = sorted(manifest.splits.values(), key=lambda s: -s.examples)
    shard_format = formats.get(manifest.file_format)
    for shard in itertools.chain.from_iterable(s.shards for s in splits):
        if not missing or read >= max_records:
            break
        path = storage.join(output, shard.file)
        try:
            for data in shard_format.records(path, shard.file):
                read += 1
                record = ImageRecord.from_bytes(data)
                bucket = picked.get(record.label)
                if bucket is not None and len(bucket) < wanted[record.label]:
                    bucket.append(record)
                    missing -= 1
                if not missing or read >= max_records:
                    break
        except OSError as exc:  # a damaged dataset still gets its page
            notes.append(f"{shard.file}: {exc.strerror or exc}")
        except PrepError as exc:  # names the shard and record already
            notes.append(str(exc))
    if missing and read >= max_records:
        notes.append(f"stopped after reading {read} records; some classes have fewer samples than asked")
    return Samples(picked, read, tuple(notes))


@dataclasses.dataclass(frozen=True)
class Reject:
    """One line of rejects.jsonl: the input's path as recorded, its reason and detail."""

    path: str
    reason: str
    detail: str
    raw_path: bytes | None = None  # the exact bytes of a name that is not UTF-8 (`path_hex`)


@dataclasses.dataclass(frozen=True)
class Rejects:
    """Rejects per reason: the total and the first `limit` of each, in file order (sorted by path)."""

    counts: dict[str, int]
    listed: dict[str, list[Reject]]
    note: str | None = None  # why none could be read


def read_rejects(output: str, limit: int) -> Rejects:
    counts: dict[str, int] = {}
    listed: dict[str, list[Reject]] = {}
    path = storage.join(output, REJECTS)
    try:
        if storage.is_remote(path) and not storage.exists(path):  # a store's reader may not say FileNotFound
            raise FileNotFoundError(path)
        with io.TextIOWrapper(storage.open_read(path), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    reject = Reject(
                        str(row["path"]),
                        str(row["reason"]),
                        str(row.get("detail") or ""),
                        bytes.fromhex(row["path_hex"]) if "path_hex" in row else None,
                    )
                except (ValueError, KeyError, TypeError):
                    return Rejects(counts, listed, f"{REJECTS} line {number} is not a reject record")
                counts[reject.reason] = counts.get(reject.reason, 0) + 1
                shown = listed.setdefault(reject.reason, [])
                if len(shown) < limit:
                    shown.append(reject)
    except FileNotFoundError:
        return Rejects(counts, listed, f"{REJECTS} is not in {output}")
    except (OSError, UnicodeDecodeError) as exc:
        return Rejects(counts, listed, f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
    return Rejects(counts, listed)
