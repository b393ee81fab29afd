"""The shard writer reads kept images again straight into their records' places, and checks them as
`spill.read_record` does: a source changed since it was prepared is an error, never a corrupt record."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import os
import random
import threading

import pytest

from beam_jobs.plan import Entry
from prep.core.errors import SourceError
from prep.core.run import shard_copy
from prep.core.run.spill import read_record
from prep.core.tfrecord import HEADER, frame
from prep.core.workdir import WorkDir


def _kept(path: bytes, image: bytes, rng: random.Random) -> tuple[Entry, bytes]:
    """A kept image's planned entry (its spilled bytes carried, `Entry.rest`) and its whole framed record."""
    head, tail = rng.randbytes(rng.randrange(20, 300)), rng.randbytes(rng.randrange(0, 40))
    framed = frame(head + image + tail)
    cut = HEADER + len(head)
    rest = framed[:cut] + framed[cut + len(image) :]
    return Entry(rng.randbytes(32), 0, 0, len(framed), 0, False, path, cut, len(image), rest=rest), framed


@pytest.fixture
def kept(tmp_path):
    """Kept images of many sizes under SOURCE (a name that is not UTF-8 among them) and one outside it,
    named by its absolute path (--allow-outside-source); with their entries and records."""
    rng = random.Random(5)
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    entries, records = [], []
    for i in range(60):
        name = f"a/{i}.jpg".encode() if i != 7 else b"a/caf\xe9.jpg"
        path = os.path.join(os.fsencode(src), name) if i != 9 else os.fsencode(tmp_path / "outside.jpg")
        image = rng.randbytes(rng.choice([1, 900, 5000, 20000]))
        with open(path, "wb") as f:
            f.write(image)
        entry, framed = _kept(name if i != 9 else path, image, rng)
        entries.append(entry)
        records.append(framed)
    return src, entries, records


@pytest.mark.parametrize("threads", [0, 2])
def test_kept_images_are_read_into_their_records_in_order(kept, tmp_path, monkeypatch, threads):
    """On the writer's thread alone or read ahead on a pool: the same bytes as `read_record` gives, the
    stream's SHA-256, and a record larger than a block in a block (and a buffer) of its own."""
    src, entries, records = kept
    monkeypatch.setattr(shard_copy, "_BLOCK", 8192)
    expected = b"".join(records)
    assert expected == b"".join(
        b"".join(read_record(str(src), e.source, e.rest, e.cut, e.image)) for e in entries
    )  # the fixture's records are what the single-record reader checks and gives
    out = io.BytesIO()
    with concurrent.futures.ThreadPoolExecutor(max(threads, 1)) as pool:
        size, sha = shard_copy.copy_records(
            entries, out, WorkDir(str(tmp_path / "work")), str(src), pool if threads else None
        )
    assert out.getvalue() == expected
    assert (size, sha) == (len(expected), hashlib.sha256(expected).hexdigest())


def test_a_read_that_comes_short_is_read_on_to_the_end(kept, tmp_path, monkeypatch):
    src, entries, records = kept
    readv = os.readv
    monkeypatch.setattr(os, "readv", lambda fd, buffers: readv(fd, [buffers[0][:7]]))
    out = io.BytesIO()
    shard_copy.copy_records(entries, out, WorkDir(str(tmp_path / "work")), str(src))
    assert out.getvalue() == b"".join(records)


def _replace_with_fifo(path):
    os.remove(path)
    os.mkfifo(path)


def _replace_with_folder(path):
    os.remove(path)
    os.mkdir(path)


@pytest.mark.parametrize(
    "change, detail",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-1] + b"\x00"), "its bytes differ"),
        (lambda p: p.write_bytes(p.read_bytes()[:-1]), "its bytes differ"),
        (lambda p: p.write_bytes(p.read_bytes() + b"\x00"), "its bytes differ"),
        (os.remove, "file does not exist"),
        (_replace_with_fifo, "its bytes differ"),
        (_replace_with_folder, "its bytes differ"),
    ],
)
def test_a_source_changed_before_its_shard_is_written_is_an_error(kept, tmp_path, change, detail):
    """Named as `spill.read_record` names it; a FIFO is not waited on."""
    src, entries, _ = kept
    change(src / "a" / "3.jpg")
    errors: list[Exception] = []

    def copy():
        try:
            shard_copy.copy_records(entries, io.BytesIO(), WorkDir(str(tmp_path / "work")), str(src))
        except SourceError as exc:
            errors.append(exc)

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "reading the changed input blocked"
    assert [str(e) for e in errors] == [f"input a/3.jpg changed while it was being converted ({detail}); convert again"]


def test_an_input_that_is_not_a_local_file_is_read_by_read_record(tmp_path):
    """Remote objects and WebDataset members go through `spill.read_record`; local files are read in place."""
    source = shard_copy._Source(str(tmp_path))
    assert source.local(b"a/1.jpg") and source.local(b"/elsewhere/1.jpg")
    assert not source.local(b"shards/0.tar/k.jpg#bytes=512+100")
    assert not source.local(b"gs://bucket/a/1.jpg")
    assert not shard_copy._Source("gs://bucket/src").local(b"a/1.jpg")
