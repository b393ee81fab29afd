"""A set of WebDataset shards as one SOURCE: which shard gives which split, and what the labels are named.

Both listings use these rules, so that they stage the same bytes: the driver's (`webdataset.list_webdataset`,
for `--resume` and tests) and the workers' (`beam_jobs/list_shards.py`, a listing task per shard, the driver
holding only the shard names, `ShardSource`). A shard under a split folder (`train/`, `validation/`, ...)
gives that split. SOURCE may also be a pattern (`shards/*.tar`, `shards/{00000..00099}.tar`): `split_pattern`
cuts it into the folder it lies under, which stands for SOURCE from then on, and the pattern relative to it,
which `match_shards` applies to that folder's files. Integer labels without `--classes` are class names in
numeric order; with `--classes` that names none of them, they index it (`ClassNames.relabel`), and one past
its end is `unknown_label`.
"""

from __future__ import annotations

import collections
import fnmatch
import os
import re
import typing
from collections.abc import Iterable, Sequence

from prep.core.errors import SourceError
from prep.core.listing import KNOWN_SPLITS

if typing.TYPE_CHECKING:
    from prep.core.layout import PlanOptions

_INT = re.compile(r"-?\d+")
_MAGIC = re.compile(r"[*?[{]")
COMPRESSED = (".tar.gz", ".tgz")  # one gzip stream of a tar: members read in order only
SUFFIXES = (".tar", *COMPRESSED)  # a WebDataset shard's names


class ShardTask(typing.NamedTuple):
    """One listing task: a shard (relative to SOURCE) and the split its folder names."""

    task: int
    shard: str
    split: str | None


class ShardSource(typing.NamedTuple):
    """WebDataset shards to be listed on workers, a task each: all the driver holds is their names."""

    source: str
    tasks: tuple[ShardTask, ...]
    label_key: str | None
    plan: PlanOptions | None = None  # the conversion's: a multi-label dataset's strata are dealt for its layout


class ClassNames(typing.NamedTuple):
    """The class names of the labels found, and how labels become them."""

    names: tuple[str, ...]  # the found classes (after relabel), in class order
    relabel: dict[str, str] | None  # integer label -> its --classes name, when the labels index --classes
    past_end: frozenset[str]  # integer labels past the end of --classes (with relabel)

    def past_end_detail(self, label: str, classes: tuple[str, ...]) -> str:
        return f"label {int(label)} is past the {len(classes)} names of --classes"


def visible(name: str) -> bool:
    return not any(p.startswith(".") for p in name.split("/"))


def is_int(name: str) -> bool:
    return bool(_INT.fullmatch(name))


def shard_tasks(shards: Iterable[str], layout: str) -> tuple[ShardTask, ...]:
    """The visible shards in name order, each with its split (`layout` auto: when every top folder is a
    known split name)."""
    shards = sorted(s for s in shards if visible(s))
    tops = {s.split("/")[0] for s in shards if "/" in s}
    by_split = layout == "splits" or (layout == "auto" and bool(tops) and tops <= KNOWN_SPLITS)
    return tuple(ShardTask(i, s, s.split("/")[0] if by_split and "/" in s else None) for i, s in enumerate(shards))


def class_names(found: Iterable[str], classes: tuple[str, ...] | None) -> ClassNames:
    """The names of the labels `found` (every label of a listed sample) under `--classes`."""
    found = set(found)
    relabel, past_end = None, frozenset[str]()
    ints = bool(found) and all(_INT.fullmatch(n) for n in found)
    if classes is not None and ints and not found & set(classes):
        relabel = {n: classes[int(n)] for n in found if 0 <= int(n) < len(classes)}
        past_end = frozenset(found - set(relabel))
        found = set(relabel.values())
        ints = bool(found) and all(_INT.fullmatch(n) for n in found)
    names = tuple(sorted(found, key=int)) if ints else tuple(sorted(found))
    return ClassNames(names, relabel, past_end)


def no_samples(source: str, shards: int, reasons: collections.Counter[str]) -> SourceError:
    """The error when no sample of any shard has an image and a label."""
    return SourceError(
        f"no sample of the {shards} shard(s) under {source} has an image and a label ("
        + (", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) or "no samples")
        + "); see --label-key"
    )


def split_pattern(source: str) -> tuple[str, str | None]:
    """(the folder SOURCE's pattern lies under, the pattern relative to it), or (source, None) when SOURCE is
    no pattern (no `*`, `?`, `[` or `{`; or a local path that exists under such a name).
    `s3://b/shards/{0..9}.tar` -> (`s3://b/shards`, `{0..9}.tar`)."""
    if "://" not in source and os.path.exists(source):
        return source, None
    scheme, sep, rest = source.rpartition("://")
    head = scheme + sep
    parts = rest.split("/")
    first = next((i for i, part in enumerate(parts) if _MAGIC.search(part)), None)
    if first is None:
        return source, None
    root = "/".join(parts[:first]) or "/"
    return head + root, "/".join(parts[first:])


def match_shards(root: str, pattern: str, files: Sequence[str]) -> list[str]:
    """The shards under `root` (`files`, relative to it) that `pattern` names, in name order.

    Braces expand as webdataset's shard lists do (the `braceexpand` package, which webdataset itself uses:
    `{000..099}` keeps the zero padding, `{a,b}` alternates, braces nest). Each expansion is then a glob
    matched segment by segment (`*` never crosses a `/`), or a name that must exist.

    Raises:
        SourceError: a name that does not exist, a glob that matches nothing, or a match that is no shard.
    """
    import braceexpand  # only for a pattern

    known = set(files)
    found: set[str] = set()
    for name in braceexpand.braceexpand(pattern):
        if not _MAGIC.search(name):
            if name not in known:
                raise SourceError(f"shard {name} of SOURCE pattern {pattern} does not exist under {root}")
            found.add(name)
            continue
        want = name.split("/")
        got = [f for f in files if visible(f) and _segments_match(want, f.split("/"))]
        if not got:
            raise SourceError(f"SOURCE pattern {pattern} matches no file under {root} ({name} matches none)")
        found.update(got)
    bad = sorted(f for f in found if not f.endswith(SUFFIXES))
    if bad:
        raise SourceError(
            f"SOURCE pattern {pattern} matches {bad[0]} under {root}, which is no WebDataset shard "
            f"({', '.join(SUFFIXES)})"
        )
    return sorted(found)


def _segments_match(want: list[str], have: list[str]) -> bool:
    return len(want) == len(have) and all(fnmatch.fnmatchcase(h, w) for w, h in zip(want, have))
