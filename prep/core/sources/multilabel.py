"""Multi-label samples of WebDataset shards and Parquet/Arrow tables: a label of several names, and the
listing such samples make.

A source's lister gives a sample with a list of labels the label `MULTI` + its sorted names '|'-joined
(`joined`), or a reject with its reason (`empty_label`, `bad_label`); a sample with one label keeps it plain.
When any listed label is a list, the source is a multi-label dataset (`named`, `listing`): a sample with one
name is an image of that one class, a name not in --classes is `unknown_label`; the classes are --classes,
else every name found (in numeric order when all are integers). Both listings build it here, the driver's
(`webdataset.list_webdataset`, `parquet.list_tables`) and the workers' (`beam_jobs/list_pieces.py`), so that
they stage the same bytes; `task_inputs.multilabel_listing` then deals the samples in strata.
"""

from __future__ import annotations

import collections
import typing
from collections.abc import Callable, Iterable

from prep.core.errors import SourceError
from prep.core.listing import InputRef, Listing, Reject
from prep.core.sources import shard_set

MULTI = "\x1f"  # starts the label of a sample with a list of labels (never in a name: names are printable)


def is_multi(label: str) -> bool:
    return label.startswith(MULTI)


def joined(names: Iterable[str], where: str) -> str | tuple[str, str]:
    """A list of class names as one label (`MULTI` and the sorted names, '|'-joined), or (reason, detail):
    `where` says what held the list ("json field 'tags'", "column 'labels'")."""
    found = sorted({n.strip() for n in names})
    if not found:
        return "empty_label", f"{where} is an empty list"
    if "" in found:
        return "empty_label", f"{where} names ''"
    if any("|" in n for n in found):
        return "bad_label", f"{where}: a class name holds '|'"
    return MULTI + "|".join(found)


class Named(typing.NamedTuple):
    """A multi-label source's samples named: the classes, the samples kept (their labels '|'-joined names,
    in path order) and those with a name not in --classes."""

    classes: tuple[str, ...]
    kept: list[InputRef]
    unknown: list[Reject]


def named(refs: Iterable[InputRef], classes: tuple[str, ...] | None) -> Named:
    """The samples of a multi-label source (their labels plain names or `joined` lists) under --classes."""
    split = [(r, r.label.removeprefix(MULTI).split("|")) for r in refs]
    found = {n for _, names in split for n in names}
    ints = all(shard_set.is_int(n) for n in found)
    names = classes if classes is not None else tuple(sorted(found, key=int) if ints else sorted(found))
    known = set(names)
    kept, unknown = [], []
    for ref, labels in split:
        missing = [n for n in labels if n not in known]
        if missing:
            unknown.append(Reject(ref.path, "unknown_label", f"label {missing[0]!r} is not in --classes"))
        else:
            kept.append(ref._replace(label="|".join(labels)))
    return Named(names, sorted(kept, key=lambda r: r.path), unknown)


def listing(
    refs: Iterable[InputRef],
    rejects: list[Reject],
    classes: tuple[str, ...] | None,
    none_kept: Callable[[collections.Counter[str]], SourceError],
) -> Listing:
    """The listing of a multi-label source's samples (`named`) and its rejects, before its strata.

    Raises:
        SourceError: `none_kept(reasons)`, when no sample is kept.
    """
    got = named(refs, classes)
    every = rejects + got.unknown
    if not got.kept:
        raise none_kept(collections.Counter(r.reason for r in every))
    return Listing(tuple(got.kept), tuple(sorted(every, key=lambda r: r.path)), got.classes, task="multilabel")
