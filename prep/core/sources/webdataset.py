"""SOURCE as WebDataset tar shards: a folder (or object-store prefix) whose files are all `.tar`.

A sample is the run of consecutive members that share a key, as `webdataset` groups them: the
key is a member's name up to the first dot of its base name (`a/b.c.jpg` -> key `a/b`, suffix
`c.jpg`). Its image is the first member whose suffix is an image kind (IMAGE_SUFFIXES order);
its label comes from `--label-key` (a field of the `json` member), else `cls` (an integer),
else a `label`/`class`/`cls` field of `json`, else `txt`. Integer labels without `--classes`
are class names in numeric order, so label id = `cls` value when they run 0..N-1.

An input's path is `<shard>/<member>#bytes=<offset>+<length>` (`member_path`), relative to
SOURCE: the shard writer reads a kept image again with one ranged read (`read_member`), and
`image/filename` says which shard and member it came from. A shard is listed in one pass
(`list_shard`, one shard in, its refs and rejects out: a listing task per shard later): a local
one header by header (`tar_read.fast_members`, else tarfile), a remote one in one streamed read;
members' data is skipped, never held, except the small label members of the sample at hand.
Damage loses only what is damaged: a bad header is skipped block by block to the next good
one (the bytes between are one `damaged_tar` reject), a member cut short by the shard's end
is `truncated_member`, a sample with no image `no_image`, one without a label `no_label`.
"""

from __future__ import annotations

import collections
import functools
import gzip
import json
import os
import posixpath
import re
import sys
import tarfile
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import BinaryIO

from prep.core import storage
from prep.core.listing import InputRef, Listing, Reject, finish_listing
from prep.core.sources import multilabel, shard_set, tar_read

IMAGE_SUFFIXES = ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm", "pbm")
JSON_KEYS = ("label", "class", "cls")  # fields of the json member tried without --label-key
_MEMBER = re.compile(
    r"^(?P<shard>.+?\.(?:tar|tar\.gz|tgz))/(?P<member>.+)#bytes=(?P<offset>\d+)\+(?P<length>\d+)$", re.S
)
_INT = re.compile(r"-?\d+")
_BLOCK = tar_read.BLOCK
_LABEL_MEMBER_LIMIT = 1 << 20  # a label member bigger than this is not a label


def _visible(name: str) -> bool:
    return not any(p.startswith(".") for p in name.split("/"))


def only_shards(names: Iterable[str]) -> bool:
    """Whether the visible names are some `.tar` files, compressed or not, read up to the first that is not
    (a folder of images is not walked whole)."""
    seen = False
    for name in filter(_visible, names):
        if not name.endswith(shard_set.SUFFIXES):
            return False
        seen = True
    return seen


def is_shard_set(files: Sequence[str]) -> bool:
    """Whether SOURCE's listed files (relative paths) are WebDataset shards: some, all `.tar` (`.tar.gz`)."""
    return only_shards(files)


def member_path(shard: str, member: str, offset: int, length: int) -> str:
    return f"{shard}/{member}#bytes={offset}+{length}"


def parse_member(path: str) -> tuple[str, int, int] | None:
    """(shard path, offset, length) of a member path (`member_path`, possibly under SOURCE), else None."""
    m = _MEMBER.match(path)
    if m is None:
        return None
    return m["shard"], int(m["offset"]), int(m["length"])


def input_signature(path: str, data: bytes | None = None) -> str:
    """`storage.signature` of an input; of a member, its local shard's, or on an object store its length
    (what `storage.signature` gives of a remote input's bytes)."""
    where = parse_member(path)
    if where is None:
        return storage.signature(path, data)
    shard, _, length = where
    return str(length) if storage.is_remote(shard) else storage.signature(shard)


def read_member(path: str) -> bytes | tuple[str, str] | None:
    """The bytes of a member path with one ranged read, (reason, detail) if they cannot be read,
    or None if `path` is no member path."""
    where = parse_member(path)
    if where is None:
        return None
    shard, offset, length = where
    try:
        with storage.open_read(shard) as raw, _opened(shard, raw) as f:
            f.seek(offset)  # in a compressed shard, decompressing up to it: a conversion holds them instead
            data = storage.read_exact(f, length)
    except FileNotFoundError:
        return "missing", f"shard {shard} does not exist"
    except Exception as exc:  # each file system raises its own types
        return "unreadable", f"shard {shard}: {exc}"
    if len(data) != length:
        return "truncated_member", f"shard ends {length - len(data)} bytes before the member's end"
    return data


def compressed(shard: str) -> bool:
    """Whether a shard (or a member path's shard) is one gzip stream: its members are read in order only."""
    return shard.endswith(shard_set.COMPRESSED) or bool(re.search(r"\.(tar\.gz|tgz)/", shard))


def _opened(shard: str, raw: BinaryIO) -> BinaryIO:
    """The tar bytes of a shard's reader: `raw` itself, or decompressed from it (closing it is the caller's)."""
    if not compressed(shard):
        return raw
    return typing.cast(BinaryIO, tar_read.Ended(typing.cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))))


def _drained(f: BinaryIO) -> int:
    """Where a compressed shard's tar bytes end (`tar_read.Ended`): read on from where `f` is."""
    at = f.tell()
    while block := f.read(1 << 20):
        at += len(block)
    return at


def _split_name(name: str) -> tuple[str, str]:
    """(key, suffix) as webdataset's `base_plus_ext` splits a member name."""
    folder, base = posixpath.split(name)
    stem, dot, suffix = base.partition(".")
    return (posixpath.join(folder, stem) if folder else stem), (suffix.lower() if dot else "")


def _label(members: dict[str, bytes], label_key: str | None) -> str | tuple[str, str]:
    """The sample's label as a class name, or (reason, detail)."""
    if label_key is None and "cls" in members:
        text = members["cls"].decode("utf-8", "replace").strip()
        if not _INT.fullmatch(text):
            return "bad_label", f"cls member {text[:40]!r} is not an integer"
        return str(int(text))
    if "json" in members:
        try:
            meta = json.loads(members["json"])
        except ValueError as exc:
            return "bad_label", f"json member is not JSON: {exc}"
        keys = (label_key,) if label_key is not None else JSON_KEYS
        for key in keys:
            if isinstance(meta, dict) and key in meta:
                return _json_label(key, meta[key])
        if label_key is not None:
            return "no_label", f"json member has no field {label_key!r}"
    if label_key is None and "txt" in members:
        text = members["txt"].decode("utf-8", "replace").strip()
        return text if text else ("no_label", "txt member is empty")
    return "no_label", "sample has no cls, txt or json label"


def _json_label(key: str, value: object) -> str | tuple[str, str]:
    """A json field's label: one name, or a list of names (`multilabel.joined`)."""
    values = value if isinstance(value, list) else [value]
    if any(isinstance(v, bool) or not isinstance(v, (int, str)) for v in values):
        bad = next(v for v in values if isinstance(v, bool) or not isinstance(v, (int, str)))
        return "bad_label", f"json field {key!r} holds {type(bad).__name__}, not class names"
    if not isinstance(value, list):
        return str(value).strip()
    return multilabel.joined((str(v) for v in values), f"json field {key!r}")


class _Sample:
    def __init__(self, key: str) -> None:
        self.key = key
        self.image: tuple[str, int, int] | None = None  # (member name, offset, length)
        self.labels: dict[str, bytes] = {}


class _Scan:
    """One shard's listing in progress: its refs and rejects, the sample at hand, where the next header is due."""

    def __init__(self, shard: str, split: str | None, label_key: str | None, size: int) -> None:
        self.shard, self.split, self.label_key, self.size = shard, split, label_key, size
        self.refs: list[InputRef] = []
        self.rejects: list[Reject] = []
        self.sample: _Sample | None = None
        self.expected = 0  # where the next header should start

    def close(self) -> None:
        sample, self.sample = self.sample, None
        if sample is None:
            return
        name = f"{self.shard}/{sample.key}"
        if sample.image is None:
            self.rejects.append(Reject(name, "no_image", "sample has no image member (jpg, jpeg, png, webp, ...)"))
            return
        member, offset, length = sample.image
        path = member_path(self.shard, member, offset, length)
        if offset + length > self.size:
            short = offset + length - self.size
            self.rejects.append(Reject(path, "truncated_member", f"shard ends {short} bytes before the member's end"))
            return
        label = _label(sample.labels, self.label_key)
        if isinstance(label, tuple):
            self.rejects.append(Reject(path, *label))
        else:
            self.refs.append(InputRef(path, label, self.split))

    def damaged(self, end: int, detail: str) -> None:
        """The bytes from where a header was due to `end` are no member: one reject, and the sample ends."""
        self.close()
        self.rejects.append(Reject(f"{self.shard}#bytes={self.expected}+{end - self.expected}", "damaged_tar", detail))
        self.expected = end

    def member(self, tar: tarfile.TarFile, info: tarfile.TarInfo, shift: int) -> None:
        def read() -> bytes:
            data = tar.extractfile(info)
            return data.read() if data is not None else b""

        self.add(info.name, shift + info.offset, shift + info.offset_data, info.size, info.isfile(), read)

    def add(self, name: str, header: int, offset: int, size: int, is_file: bool, read: Callable[[], bytes]) -> None:
        """A member whose header starts at `header` and data at `offset`; `read` gives its data."""
        if header > self.expected:
            self.damaged(header, "bad tar header")
        self.expected = offset + -(-size // _BLOCK) * _BLOCK
        if not is_file:
            return
        key, suffix = _split_name(name)
        if self.sample is None or key != self.sample.key:
            self.close()
            self.sample = _Sample(key)
        sample = self.sample
        if suffix in IMAGE_SUFFIXES:
            if sample.image is None or _rank(suffix) < _rank(_split_name(sample.image[0])[1]):
                sample.image = (name, offset, size)
        elif suffix in _LABELS and size <= _LABEL_MEMBER_LIMIT and offset + size <= self.size:
            sample.labels[suffix] = read()


_LABELS = ("cls", "txt", "json")


def _wanted(name: str, size: int) -> bool:
    """Whether a member's data is read while listing: a sample's small label members."""
    return _split_name(name)[1] in _LABELS and size <= _LABEL_MEMBER_LIMIT


def list_shard(
    source: str, shard: str, split: str | None, label_key: str | None = None, copy: BinaryIO | None = None
) -> tuple[list[InputRef], list[Reject]]:
    """One shard (`shard` relative to SOURCE) in one pass: its samples' refs and rejects.

    A local shard is read header by header, members' data skipped by seeking (reading it all made
    listing 20,000 photos cost more than converting them); a remote one in one streamed read (a seek
    there is one more request; `copy`, when given, gets the bytes it read). Python's tarfile skips a bad
    header block by block (`ignore_zeros`) but gives up on a bad header after a pax header; the pass then
    starts again one block after it.
    """
    full = storage.input_path(source, shard)
    gz = compressed(shard)
    try:
        size = os.path.getsize(full) if not storage.is_remote(full) else storage.size(full)
        if size is None:
            raise OSError("size unknown")
        raw: BinaryIO = storage.open_read(full)
        f = _opened(shard, raw)
        if copy is not None and (gz or storage.is_remote(full)):
            f = typing.cast(BinaryIO, tar_read.Tee(f, copy))
    except Exception as exc:  # each file system raises its own types
        return [], [Reject(shard, "unreadable", f"cannot open shard: {exc}")]
    size = sys.maxsize if gz else size  # a gzip stream's tar bytes: known once read to its end (`_drained`)
    scan = _Scan(shard, split, label_key, size)
    local = not storage.is_remote(full) and not gz
    base = 0
    with raw, f:
        fast = tar_read.fast_members(f, size, _wanted) if local else None
        for name, header, offset, length, is_file, label in fast or ():
            scan.add(name, header, offset, length, is_file, lambda label=label: label)  # type: ignore[misc]
        while fast is None and base < size:
            tar = None
            try:
                if base or local:  # the fast pass may have moved a local reader
                    f.seek(base)
                # a random-access TarFile counts offsets from the file's start, a stream from where it began
                tar = tarfile.open(fileobj=f, mode="r:" if local else "r|", ignore_zeros=True)
                shift = 0 if local else base
                for info in tar:
                    scan.member(tar, info, shift)
                break
            except (tarfile.TarError, OSError, EOFError) as exc:
                # the header that could not be read
                failed = base if tar is None else tar.offset + (0 if local else base)
                if size == sys.maxsize:
                    size = scan.size = _drained(f)
                if failed + _BLOCK >= size or scan.expected >= size:
                    # the shard cut short: a member cut short is its sample's reject (`close`); bytes left
                    # that no header explains are one damaged_tar
                    if scan.expected < size:
                        scan.damaged(size, str(exc))
                    break
                base = max(failed, scan.expected) + _BLOCK  # past the bad block, never back
    scan.close()
    return scan.refs, scan.rejects


def _rank(suffix: str) -> int:
    return IMAGE_SUFFIXES.index(suffix) if suffix in IMAGE_SUFFIXES else len(IMAGE_SUFFIXES)


def list_webdataset(
    source: str,
    shards: Sequence[str],
    layout: str,
    classes: tuple[str, ...] | None,
    label_key: str | None,
    lister: Callable[[str, str, str | None, str | None], tuple[list[InputRef], list[Reject]]] = list_shard,
) -> Listing:
    """Every shard listed on the driver, which then holds one ref per sample (`--resume`, tests); a conversion
    lists them on workers (beam_jobs/list_shards.py), by the same rules (`shard_set`)."""
    refs: list[InputRef] = []
    rejects: list[Reject] = []
    for task in shard_set.shard_tasks(shards, layout):
        got, bad = lister(source, task.shard, task.split, label_key)
        refs += got
        rejects += bad
    if not refs:
        raise shard_set.no_samples(source, len(shards), collections.Counter(r.reason for r in rejects))
    if any(multilabel.is_multi(r.label) for r in refs):
        return multilabel.listing(refs, rejects, classes, functools.partial(shard_set.no_samples, source, len(shards)))
    names = shard_set.class_names((ref.label for ref in refs), classes)
    if names.relabel is not None:
        assert classes is not None  # class_names relabels for --classes only
        rejects += [
            Reject(r.path, "unknown_label", names.past_end_detail(r.label, classes))
            for r in refs
            if r.label in names.past_end
        ]
        refs = [r._replace(label=names.relabel[r.label]) for r in refs if r.label not in names.past_end]
    return finish_listing(refs, rejects, names.names, classes, source=source)
