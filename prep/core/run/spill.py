"""Spill files: the work of one pool task of PrepareChunk (read, check and convert a batch of
inputs, and hand their framed records to the chunk's spill file, prep/core/run/chunk_spill.py), and
reading a record back for the shard writer (`read_record`).

No per-image work is left to the runner's thread. Tasks take and return plain values.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
import typing
from collections.abc import Callable, Iterable

import numpy as np

from prep.core import storage, targets
from prep.core.content_keys import KeyBatch, Waiting
from prep.core.errors import SourceError
from prep.core.headers import predictable
from prep.core.image_rules import EncodeBuffer, ImageOptions, ImageRejected, PreparedImage, prepare_image
from prep.core.listing import InputRef, Reject, printable
from prep.core.run.task_build import TaskInfo, TaskSpec, build_record, rejected_info
from prep.core.schema import ENCODED, ImageRecord
from prep.core.sources import table_files, webdataset
from prep.core.sources.held import Held, read_held
from prep.core.task_record import TaskRecord
from prep.core.tfrecord import frame, frame_around, framed_around_matches
from prep.core.wire import encode_example_around
from prep.core.workdir import BATCH, BATCHES_PER_CHUNK

if typing.TYPE_CHECKING:
    from prep.core.config import ConvertConfig
    from prep.core.run.chunk_spill import ChunkSpill
    from prep.core.run.sandbox import Sandbox

Spilled = tuple[bytes, int, int, bool]  # read_and_prepare's (spilled bytes, cut, image bytes, converted)
Prepared = tuple[int, int, bool, int, int]  # prepare_batch's (offset, length, converted, cut, image)
# prepare_batch's per input: (Prepared or Reject, input signature), the TaskInfo third when there is a task
Outcome = tuple[Prepared | Reject, str] | tuple[Prepared | Reject, str, TaskInfo | None]
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def read_input(path: str, column: str | None = None) -> bytes | tuple[str, str]:
    """The bytes of one input, or (reason, detail) if it cannot be read.

    Only regular files are opened: reading a FIFO or a device named like an
    image would block or never end. A WebDataset member (`webdataset.member_path`) is one ranged read; a
    Parquet or Arrow row (`table_files.row_path`) is read from its block, in image column `column` if given.
    """
    member = webdataset.read_member(path)
    if member is None:
        member = table_files.read_row(path, column)
    if member is not None:
        return member
    if not storage.is_remote(path):
        return read_local(path)[0]
    try:
        return storage.read_bytes(path)
    except FileNotFoundError:
        return "missing", "file does not exist"
    except IsADirectoryError:
        return "unreadable", "path is a folder"
    except OSError as exc:
        return "unreadable", exc.strerror or str(exc)


def plain_local(path: str) -> bool:
    """Whether `path` is a local file read whole (`read_local`): no URL, WebDataset member or table row."""
    return not storage.is_remote(path) and webdataset.parse_member(path) is None and table_files.parse_row(path) is None


def read_local(path: str) -> tuple[bytes | tuple[str, str], os.stat_result | None]:
    """A local file's bytes, or (reason, detail) if it cannot be read (see `read_input`); and the stat
    of what was read (None when nothing was found), whose `storage.signature_of` is the input's signature.

    Stated by path first, so that a FIFO or a device is never opened; then opened without blocking and
    stated again by its descriptor, since the file may have been swapped for a FIFO in between: that
    second stat, taken before the read, is the signature's, so no third stat is needed for it. Read with
    one `os.read` of its size and a byte more, which shows that it ended: 5 system calls an input where
    `open(...).read()` and a separate signature took 12, each letting go of the GIL the pool's other
    threads then hold (docs/benchmarks.md, "Speed goals (issue 36)").
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return ("broken_symlink", "symlink points to a file that does not exist"), None
        return ("missing", "file does not exist"), None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return ("symlink_loop", exc.strerror or "too many levels of symbolic links"), None
        return ("unreadable", exc.strerror or str(exc)), None
    if stat.S_ISDIR(st.st_mode):
        return ("unreadable", "path is a folder"), st
    if not stat.S_ISREG(st.st_mode):
        return ("unreadable", f"not a regular file ({_KINDS.get(stat.S_IFMT(st.st_mode), 'special file')})"), st
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return ("missing", "file does not exist"), st
    except OSError as exc:
        return ("symlink_loop" if exc.errno == errno.ELOOP else "unreadable", exc.strerror or str(exc)), st
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            kind = _KINDS.get(stat.S_IFMT(opened.st_mode), "folder or special file")
            return ("unreadable", f"not a regular file ({kind})"), opened
        return _read_fd(fd, opened.st_size), opened
    except OSError as exc:
        return ("unreadable", exc.strerror or str(exc)), st
    finally:
        os.close(fd)


def _read_fd(fd: int, size: int) -> bytes:
    """The rest of open file `fd`, expected to hold `size` bytes: one read, more if it changed size."""
    data = os.read(fd, size + 1)
    if len(data) == size:  # a byte more was asked for: none means the end
        return data
    pieces = [data]
    while piece := os.read(fd, max(size, 1 << 16)):
        pieces.append(piece)
    return b"".join(pieces)


@dataclasses.dataclass(frozen=True)
class PrepareOptions:
    """What preparing an input needs of the conversion, the same for every input of the run: made once
    from the ConvertConfig (`from_config`), carried by PrepareChunk to its pool's tasks."""

    source: str
    image: ImageOptions = ImageOptions()
    source_ids: bool = False  # write image/source_id from the input's place (--target model-garden)
    task: TaskSpec | None = None  # None: single-label classification; else the record is a TaskRecord
    keys: bool = False  # hash the content keys of good inputs, for the dedupe stage (prep/core/run/dedupe_files.py)
    suspects: frozenset[str] = frozenset()  # inputs a killed run was reading: prepared in the sandbox only
    image_column: str | None = None  # a Parquet or Arrow SOURCE's, when --image-column names it

    @classmethod
    def from_config(
        cls, config: ConvertConfig, task: TaskSpec | None = None, suspects: Iterable[str] = frozenset()
    ) -> PrepareOptions:
        """`config`'s (a prep.core.config.ConvertConfig), for the listing's `task` and a resumed run's `suspects`."""
        return cls(
            config.source,
            config.image,
            targets.get(config.target).source_id,
            task,
            config.dedupe.keys,
            frozenset(suspects),
            config.columns.image,
        )


def _prepare(
    data: bytes,
    options: ImageOptions,
    buffer: EncodeBuffer | None,
    sandbox: Sandbox | None,
    suspect: bool,
    keys: bool = False,
) -> PreparedImage:
    """prepare_image, in the calling thread or in `sandbox` (see prep/core/run/sandbox.py): there go
    suspects of a killed run, and under --isolate auto every input whose header does not promise
    a decode within the bounds (`predictable`), under --isolate all every input. `keys`: see
    prepare_image (a sandbox's image comes without its gray pixels)."""
    if sandbox is not None and (
        suspect or options.isolate == "all" or (options.isolate == "auto" and not predictable(data, options))
    ):
        return sandbox.prepare(data, options)[0]
    return prepare_image(data, options, buffer, keys)


def input_signature(path: str, data: bytes | None = None) -> str:
    """`storage.signature` of an input; of a WebDataset member or a table row, of its shard or file."""
    found = table_files.input_signature(path, data)
    return found if found is not None else webdataset.input_signature(path, data)


def read_and_prepare(
    options: PrepareOptions,
    ref: InputRef,
    label: int,
    buffer: EncodeBuffer | None = None,
    source_id: str | None = None,
    sandbox: Sandbox | None = None,
    keys: KeyBatch | None = None,
    data: bytes | None = None,
) -> tuple[Spilled | Reject, str, TaskInfo | None]:
    """Reads one input; returns ((spilled bytes, cut, image bytes, converted) or a Reject, input signature,
    TaskInfo or None).

    A converted image's whole framed record is spilled (cut = image bytes = 0).
    An image kept as it is (`converted` False) is not: the spilled bytes are
    its framed record without the image, which belongs at `cut`; the shard
    writer reads the image from the source again (`read_record`). That halves
    what a pass-through conversion writes, and the record's CRC, spilled with
    it, shows whether the source changed in between. A remote WebDataset
    member's is spilled whole, as a converted one's.

    `buffer` is this thread's, for re-encoding (see prep.core.image_rules.EncodeBuffer).
    `source_id`, when given, is written as image/source_id (--target model-garden);
    `sandbox`: see `_prepare`. With `options.task` (multi-label, detection, segmentation),
    the record is a TaskRecord (prep/core/run/task_build.py) and the TaskInfo gives its counts.
    `keys`, when given, gets the prepared image added (content_keys.KeyBatch). `data`: the input's bytes when
    they were read already (a WebDataset member held in the work directory, prep/core/sources/held.py).
    """
    task = options.task
    path = storage.input_path(options.source, ref.path)
    # A plain local file (no member, row or URL: the usual input) needs none of the path tests below
    plain = data is None and plain_local(path)
    if plain:  # its signature from the stat read_local takes before reading
        got, st = read_local(path)
        sig: str | None = "" if st is None else storage.signature_of(st)
    else:
        sig = None if storage.is_remote(path) else input_signature(path)  # before reading: a change shows
        got = read_input(path, options.image_column) if data is None else data
    if isinstance(got, tuple):
        return Reject(ref.path, *got), sig or "", task and rejected_info(task, ref)
    data = got
    sig = sig if sig is not None else input_signature(path, data)
    try:
        image = _prepare(data, options.image, buffer, sandbox, ref.path in options.suspects, keys is not None)
    except ImageRejected as exc:
        return Reject(ref.path, exc.reason, exc.detail), sig, task and rejected_info(task, ref)
    info = None
    record: ImageRecord | TaskRecord
    if task is None:
        record = ImageRecord.build(
            image.encoded, image.format, image.height, image.width, image.channels, label, ref.label, ref.path
        )
        if source_id is not None:
            record = dataclasses.replace(record, source_id=source_id)
    else:
        built, info = build_record(task, ref, image, read_input)
        if isinstance(built, Reject):
            return built, sig, info
        record = built
    if keys is not None:
        keys.add(image.encoded, image.gray, record.sha256)  # the record hashed the same bytes
    # A table's row is spilled whole: read again, its block would be decoded once per record (bench/parquet_read.py)
    if image.converted or (not plain and table_files.parse_row(path) is not None):
        return (frame(record.to_bytes()), 0, 0, image.converted), sig, info
    head, tail = encode_example_around(record.features(), ENCODED)
    before, after = frame_around(head, image.encoded, tail)
    if (
        not plain
        and (storage.is_remote(path) or webdataset.compressed(path))
        and webdataset.parse_member(path) is not None
    ):
        # A remote tar member is spilled whole: read again it would cost the writer a request per image
        # (docs/benchmarks.md, WebDataset), a compressed one decompressing its shard up to it. A local one is
        # read again by range, from the page cache: writing it to the spill cost more (20,000 photos
        # pass-through, bench/wds_bench.py).
        return (before + image.encoded + after, 0, 0, False), sig, info
    return (before + after, len(before), len(image.encoded), False), sig, info


class BatchKeys(typing.NamedTuple):
    """The content keys of a batch's good inputs, for its chunk's key rows (beam_jobs/prepare.py), as
    columns: one object a batch, not one an image, for the runner's thread to gather."""

    offsets: list[int]  # where each one's record is in the spill file
    paths: list[str]
    sha256: bytes  # 32 bytes each
    hashes: np.ndarray  # (inputs, hashes) uint64; the rows of `waiting` are zeros until content_keys.hash_waiting
    has: np.ndarray  # whether each has keys (one whose image did not decode again has none)
    waiting: list[Waiting]  # KeyBatch.take()'s: the small images' pixels, hashed with the chunk's


def read_record(source: str, path: bytes, spilled: bytes, cut: int, image: int) -> list[bytes]:
    """A framed record, in pieces to join, from its spilled bytes, with the image read
    from the source when `image` bytes of it were left there (see read_and_prepare).

    Raises:
        SourceError: the input changed (or went) since it was prepared.
    """
    if not image:
        return [spilled]
    name = path.decode("utf-8", "surrogateescape")
    data = _read_again(storage.input_path(source, name), image)
    before, after = spilled[:cut], spilled[cut:]
    if isinstance(data, str) or not framed_around_matches(before, data, after):
        raise changed(path, data if isinstance(data, str) else "its bytes differ")
    return [before, data, after]


def changed(path: bytes, why: str) -> SourceError:
    """The error of an input (its `Entry.source` path) that changed since it was prepared, and why."""
    name = printable(path.decode("utf-8", "surrogateescape"))
    return SourceError(f"input {name} changed while it was being converted ({why}); convert again")


def _read_again(path: str, size: int) -> bytes | str:
    """The `size` bytes of an input read before, or why they cannot be."""
    if storage.is_remote(path) or webdataset.parse_member(path) is not None:
        data = read_input(path)
        return data[1] if isinstance(data, tuple) else data
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never blocks, should it now be a FIFO
    except FileNotFoundError:
        return "file does not exist"
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return "its bytes differ"
        data = _read_fd(fd, size)
    finally:
        os.close(fd)
    return data if len(data) == size else "its bytes differ"


def prepare_batch(
    options: PrepareOptions,
    sink: ChunkSpill,
    spill: int,
    refs: list[InputRef],
    label_ids: dict[str, int],
    sandbox: Sandbox | None = None,
    pause: Callable[[], object] | None = None,
    held: Held | None = None,
) -> tuple[list[Outcome], int, BatchKeys | None]:
    """Prepares `refs` in order and hands what each record needs to `sink`, its chunk's spill file, as batch
    `spill` (a spill id: `workdir.spill_id`).

    Returns, per input, ((offset, length, converted, cut, image) or a Reject, input
    signature), with the input's TaskInfo third when there is a `task`; the batch's spilled bytes; and with
    `keys`, the good inputs' `BatchKeys` (else None), some of their hashes still to compute. `length` is
    the framed record's, of which `length - image` bytes were spilled at `offset`, counted from the start
    of this batch's bytes (see read_and_prepare; ChunkSpill.close gives where they start in the file).
    `options` (PrepareOptions) holds `task`, `keys`, `source_ids` and `suspects`.
    With `source_ids`, each record gets an image/source_id from its input's place:
    `spill * BATCH + i` is unique, as a spill id is unique and a batch holds at
    most BATCH inputs, and it depends on nothing but the listing and seed.
    `suspects`, inputs in flight when an earlier run was killed (`chunk_spill.mark_in_flight`), go to `sandbox`.
    `pause`, a test hook, is called first. With `keys`, the good inputs' keys are hashed
    together (content_keys.KeyBatch) and returned, for PrepareChunk to record a chunk's at once.
    `held`: where the batch's WebDataset members' bytes are held, read at once (prep/core/sources/held.py).
    """
    if pause is not None:
        pause()
    results: list[Outcome] = []
    offset = 0
    task, keys = options.task, options.keys
    batch = KeyBatch() if keys else None
    offsets: list[int] = []  # with `keys`, of the good inputs
    names: list[str] = []
    keyed = None
    pieces: list[bytes] = []  # a batch's bytes: at most BATCH records
    datas: list[bytes | None] = [None] * len(refs)
    if held is not None:
        datas = list(read_held(held) or datas)
    with EncodeBuffer() as buffer:
        for i, ref in enumerate(refs):
            sid = targets.source_id(spill * BATCH + i) if options.source_ids and task is None else None
            result, signature, info = read_and_prepare(
                options, ref, label_ids[ref.label], buffer, sid, sandbox, batch, datas[i]
            )
            outcome: Prepared | Reject
            if isinstance(result, Reject):
                outcome = result
            else:
                if keys:
                    offsets.append(offset)
                    names.append(ref.path)
                data, cut, image, converted = result
                pieces.append(data)
                outcome = (offset, len(data) + image, converted, cut, image)
                offset += len(data)
            results.append((outcome, signature) if task is None else (outcome, signature, info))
    sink.put(spill % BATCHES_PER_CHUNK, b"".join(pieces))
    if batch is not None:  # `keys`; an input without keys (it did not decode again: not expected) is in no group
        digests, hashes, has, waiting = batch.take()
        keyed = BatchKeys(offsets, names, bytes.fromhex("".join(digests)), hashes, has, waiting)
    return results, offset, keyed
