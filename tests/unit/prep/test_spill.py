"""Spill files: what preparing leaves for the shard writer, and how the writer checks it."""

import os

import pytest

from prep.core import storage
from prep.core.errors import SourceError
from prep.core.image_rules import ImageOptions
from prep.core.listing import InputRef
from prep.core.run.chunk_spill import ChunkSpill
from prep.core.run.spill import PrepareOptions, read_record
from prep.core.run.spill import prepare_batch as _prepare_batch
from prep.core.schema import ImageRecord
from prep.core.tfrecord import frame
from prep.core.workdir import BATCHES_PER_CHUNK, WorkDir
from tests.support.imagegen import image_bytes


def prepare_batch(options, work, spill, refs, label_ids):
    """prepare_batch's batch `spill` alone in its chunk's spill file (the batches before it empty)."""
    chunk, batch = divmod(spill, BATCHES_PER_CHUNK)
    sink = ChunkSpill(work, chunk, batch + 1)
    for before in range(batch):
        sink.put(before, b"")
    out = _prepare_batch(options, sink, spill, refs, label_ids)
    assert sink.close() == ([0] * (batch + 1), out[1])
    return out


@pytest.fixture
def prepared(tmp_path):
    """A pass-through JPEG and a PNG converted to JPEG, prepared into one spill file."""
    src, tmp = tmp_path / "src", str(tmp_path / "tmp")
    (src / "a").mkdir(parents=True)
    (src / "a" / "keep.jpg").write_bytes(image_bytes("JPEG", size=(300, 200)))
    (src / "a" / "convert.png").write_bytes(image_bytes("PNG", size=(300, 200)))
    refs = [InputRef("a/keep.jpg", "a", None), InputRef("a/convert.png", "a", None)]
    options = PrepareOptions(str(src), ImageOptions(image_format="jpeg"))
    results, size, keys = prepare_batch(options, WorkDir(tmp), 7, refs, {"a": 0})
    assert keys is None  # none asked for
    with open(WorkDir(tmp).spill(7), "rb") as f:
        spilled = f.read()
    assert len(spilled) == size
    return src, spilled, [r for r, _ in results]


def _record(src, spilled, result, path):
    offset, length, _, cut, image = result
    return b"".join(read_record(str(src), path.encode(), spilled[offset : offset + length - image], cut, image))


def test_a_kept_image_is_read_again_from_its_source_not_spilled(prepared):
    src, spilled, (keep, convert) = prepared
    jpeg = (src / "a" / "keep.jpg").read_bytes()
    offset, length, converted, cut, image = keep
    assert not converted and image == len(jpeg) and length - image < 400  # the record without its image
    expected = frame(ImageRecord.build(jpeg, "jpeg", 200, 300, 3, 0, "a", "a/keep.jpg").to_bytes())
    assert _record(src, spilled, keep, "a/keep.jpg") == expected
    offset, length, converted, cut, image = convert
    assert converted and (cut, image) == (0, 0)  # a converted image's whole record is spilled
    record = _record(src, spilled, convert, "a/convert.png")
    assert len(record) == length and record == spilled[offset : offset + length]


@pytest.mark.parametrize(
    "change, detail",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-1] + b"\x00"), "its bytes differ"),
        (lambda p: p.write_bytes(p.read_bytes() + b"\x00"), "its bytes differ"),
        (os.remove, "file does not exist"),
    ],
)
def test_a_source_changed_before_its_shard_is_written_is_an_error_not_a_corrupt_record(prepared, change, detail):
    src, spilled, (keep, _) = prepared
    change(src / "a" / "keep.jpg")
    with pytest.raises(SourceError, match=f"input a/keep.jpg changed while it was being converted \\({detail}\\)"):
        _record(src, spilled, keep, "a/keep.jpg")


def _finishes(fn, seconds: float = 10):
    """fn() run on a daemon thread: (True, its result), or (False, None) if it is still blocked after `seconds`."""
    import threading

    out = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    return (True, out[0]) if out else (False, None)


def test_an_input_swapped_for_a_fifo_after_its_stat_is_rejected_not_waited_on(tmp_path, monkeypatch):
    from prep.core.run import spill

    regular = tmp_path / "regular.jpg"
    regular.write_bytes(b"x")
    fifo = tmp_path / "fifo.jpg"
    os.mkfifo(fifo)
    real_stat = os.stat
    # The stat sees a regular file; by the time the file is opened it is a FIFO.
    monkeypatch.setattr(
        spill.os, "stat", lambda p, *a, **k: real_stat(regular) if str(p) == str(fifo) else real_stat(p, *a, **k)
    )
    done, result = _finishes(lambda: spill.read_input(str(fifo)))
    assert done, "reading the FIFO blocked"
    assert result == ("unreadable", "not a regular file (a FIFO)")


def test_a_label_file_that_is_a_fifo_is_an_error_not_a_wait(tmp_path):
    from prep.core.label_file import list_label_file

    os.mkfifo(tmp_path / "labels.csv")

    def listing():
        try:
            list_label_file(str(tmp_path), str(tmp_path / "labels.csv"))
        except SourceError as exc:
            return str(exc)

    assert _finishes(listing) == (True, f"label file {tmp_path}/labels.csv is not a regular file")


def test_two_attempts_of_one_chunk_at_once_both_succeed_and_leave_one_complete_file(tmp_path, monkeypatch):
    # A runner may run a task again while its first attempt still runs (a retry
    # after a lost worker, or speculative execution). With one temporary name per
    # file, the second attempt truncated the first's file, and one rename failed.
    import threading

    from prep.core import storage

    src, tmp = tmp_path / "src", str(tmp_path / "tmp")
    (src / "a").mkdir(parents=True)
    refs = []
    for i in range(4):
        (src / "a" / f"{i}.jpg").write_bytes(image_bytes("JPEG", size=(64 + i, 48)))
        refs.append(InputRef(f"a/{i}.jpg", "a", None))
    real_open, both_open = storage.open_write, threading.Barrier(2, timeout=30)

    def open_write(path):
        handle = real_open(path)
        both_open.wait()  # each attempt holds its temporary file open before either writes
        return handle

    monkeypatch.setattr(storage, "open_write", open_write)
    outcomes = [None, None]

    def attempt(i):
        try:
            outcomes[i] = prepare_batch(PrepareOptions(str(src)), WorkDir(tmp), 3, refs, {"a": 0})
        except Exception as exc:  # noqa: BLE001 (reported by the assertion below)
            outcomes[i] = exc

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not any(isinstance(o, Exception) for o in outcomes), outcomes
    assert outcomes[0] == outcomes[1]
    monkeypatch.setattr(storage, "open_write", real_open)
    alone = prepare_batch(PrepareOptions(str(src)), WorkDir(str(tmp_path / "alone")), 3, refs, {"a": 0})
    assert alone == outcomes[0]
    with open(WorkDir(tmp).spill(3), "rb") as f, open(WorkDir(str(tmp_path / "alone")).spill(3), "rb") as g:
        assert f.read() == g.read()
    assert sorted(os.listdir(os.path.dirname(WorkDir(tmp).spill(3)))) == [os.path.basename(WorkDir(tmp).spill(3))]


def test_temporary_names_are_new_for_each_writer_and_known_as_such():
    from prep.core import storage

    names = {storage.temp_path("/o/manifest.json") for _ in range(50)}
    assert len(names) == 50
    assert all(storage.is_temp_of(os.path.basename(n), "manifest.json") for n in names)
    assert not storage.is_temp_of("manifest.json.part", "manifest.json")
    assert not storage.is_temp_of("manifest.json.0a1b2c3d.part.x", "manifest.json")
    assert not storage.is_temp_of("manifest.jsonx.0a1b2c3d.part", "manifest.json")


def test_a_kept_image_is_read_again_in_full_when_reads_come_short(prepared, monkeypatch):
    read = os.read
    src, spilled, (keep, _) = prepared
    monkeypatch.setattr(os, "read", lambda fd, size: read(fd, min(size, 7)))
    jpeg = (src / "a" / "keep.jpg").read_bytes()
    expected = frame(ImageRecord.build(jpeg, "jpeg", 200, 300, 3, 0, "a", "a/keep.jpg").to_bytes())
    assert _record(src, spilled, keep, "a/keep.jpg") == expected


def test_an_input_read_in_short_pieces_or_grown_is_read_whole(tmp_path, monkeypatch):
    """read_local reads a file with one read of its size and a byte more; a file system that gives
    less at a time, or a file that grew since its stat, is still read to its end; its signature is
    that of storage.signature."""
    from prep.core.run.spill import read_local

    path = tmp_path / "a.jpg"
    path.write_bytes(bytes(range(256)) * 40)
    got, st = read_local(str(path))
    assert got == path.read_bytes() and st is not None
    assert storage.signature_of(st) == storage.signature(str(path))
    read = os.read
    monkeypatch.setattr(os, "read", lambda fd, size: read(fd, min(size, 7)))
    assert read_local(str(path))[0] == path.read_bytes()
    monkeypatch.setattr(os, "fstat", lambda fd, real=os.fstat: os.stat_result((*real(fd)[:6], 5, *real(fd)[7:])))
    assert read_local(str(path))[0] == path.read_bytes()  # larger than its stat said
    assert read_local(str(tmp_path / "none.jpg")) == (("missing", "file does not exist"), None)
    (tmp_path / "d.jpg").mkdir()
    assert read_local(str(tmp_path / "d.jpg"))[0] == ("unreadable", "path is a folder")


def test_a_batch_gives_its_good_inputs_keys_to_its_chunk_and_spills_only_records(tmp_path):
    """With keys, the spill file holds the records alone (as without), and each good input's keys come back
    with its place and path: image_keys' keys of the stored image, a converted one's and a large one's
    included. The chunk's key rows read back, and a chunk prepared without keys is told apart (a resume
    that wants keys refuses it)."""
    import numpy as np

    from prep.core import content_keys as ck
    from prep.core.errors import ResumeError
    from prep.core.run import key_rows

    src, tmp = tmp_path / "src", str(tmp_path / "tmp")
    (src / "a").mkdir(parents=True)
    (src / "a" / "keep.jpg").write_bytes(image_bytes("JPEG", size=(300, 200)))
    (src / "a" / "bad.jpg").write_bytes(b"not a picture")
    (src / "a" / "convert\udcff.png").write_bytes(image_bytes("PNG", size=(90, 60)))
    (src / "a" / "large.png").write_bytes(image_bytes("PNG", size=(2400, 1800)))  # 1/8 of its JPEG: past LARGE
    refs = [InputRef(p, "a", None) for p in ("a/keep.jpg", "a/bad.jpg", "a/convert\udcff.png", "a/large.png")]
    work = WorkDir(tmp)
    results, size, keyed = prepare_batch(
        PrepareOptions(str(src), ImageOptions(image_format="jpeg"), keys=True), work, 3, refs, {"a": 0}
    )
    plain, plain_size, none = prepare_batch(
        PrepareOptions(str(src), ImageOptions(image_format="jpeg")), WorkDir(str(tmp_path / "plain")), 3, refs, {"a": 0}
    )
    assert (results, size, none) == (plain, plain_size, None)  # the same records, nothing after them
    with open(work.spill(3), "rb") as f:
        spilled = f.read()
    assert len(spilled) == size
    keep, bad, convert, large = (r for r, _ in results)
    assert (keyed.paths, keyed.has.tolist()) == (["a/keep.jpg", "a/convert\udcff.png", "a/large.png"], [True] * 3)
    assert keyed.offsets == [keep[0], convert[0], large[0]]
    ck.hash_waiting([(keyed.hashes, keyed.waiting)])
    stored = [(src / "a" / "keep.jpg").read_bytes()]
    for r, name in ((convert, b"a/convert\udcff.png"), (large, b"a/large.png")):
        offset, length, _, cut, image = r
        framed = b"".join(read_record(str(src), name, spilled[offset : offset + length - image], cut, image))
        stored.append(ImageRecord.from_bytes(framed[12:-4]).encoded)
    assert [
        ck.ContentKeys(keyed.sha256[32 * i : 32 * (i + 1)].hex(), tuple(h)) for i, h in enumerate(keyed.hashes.tolist())
    ] == [ck.image_keys(data) for data in stored]

    rows = np.zeros(3, key_rows.KEY_ROWS)
    rows["spill"], rows["offset"], rows["hashes"] = 3, keyed.offsets, keyed.hashes
    key_rows.write_rows(work, 0, rows, keyed.paths)
    got, block = key_rows.read_rows(work, 0)
    assert got.tobytes() == rows.tobytes()
    assert block.split(b"\0") == [p.encode("utf-8", "surrogateescape") for p in keyed.paths]
    assert key_rows.RowTable(work).get(3, keyed.offsets[2]).tobytes() == rows[2].tobytes()
    with pytest.raises(ResumeError, match="without computing their content keys"):
        key_rows.read_rows(work, 1)
