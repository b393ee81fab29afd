"""The file format owners (`prep.core.formats`): every format writes the framed stream's records
unchanged, reads them back in order and by position, and reports damage naming the record."""

from __future__ import annotations

import hashlib
import random

import pytest

from prep.core import formats
from prep.core.config import ConvertConfig
from prep.core.convert_options import build_config
from prep.core.errors import OptionsError, RecordError
from prep.core.formats.base import FrameSplitter, ScanResult
from prep.core.naming import ShardName, tfds_template
from prep.core.tfrecord import frame

RECORDS = [bytes([i % 251]) * (1 + i * 37 % 5000) for i in range(40)]
STREAM = b"".join(map(frame, RECORDS))


def cuts(data: bytes, seed: int) -> list[bytes]:
    """`data` cut at random places, some pieces empty."""
    rng = random.Random(seed)
    points = sorted(rng.randrange(len(data) + 1) for _ in range(25))
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


@pytest.mark.parametrize("seed", range(5))
def test_frame_splitter_gives_the_records_whatever_the_cuts(seed):
    splitter = FrameSplitter()
    got = [record for piece in cuts(STREAM, seed) for record in splitter.feed(piece)]
    assert got == RECORDS and splitter.pending == 0


def write(shard_format: formats.ShardFormat, path: str, seed: int = 0) -> tuple[int, str]:
    writer = shard_format.open_writer(path)
    for piece in cuts(STREAM, seed):
        writer.write(piece)
    return writer.finish(len(STREAM), hashlib.sha256(STREAM).hexdigest())


@pytest.mark.parametrize("name", formats.NAMES)
def test_every_format_reads_back_what_it_wrote(name, tmp_path):
    shard_format = formats.get(name)
    path = str(tmp_path / ("shard" + shard_format.suffix))
    size, sha = write(shard_format, path)
    data = (tmp_path / ("shard" + shard_format.suffix)).read_bytes()
    assert (size, sha) == (len(data), hashlib.sha256(data).hexdigest())
    assert list(shard_format.records(path, "shard")) == RECORDS
    source = shard_format.open(path)
    try:
        assert len(source) == len(RECORDS) == shard_format.count(path)
        assert [source[i] for i in reversed(range(len(source)))] == RECORDS[::-1]
        assert source.read_range(5, 9) == RECORDS[5:9] and source.read_range(3, 3) == []
        with pytest.raises(IndexError):
            source[len(RECORDS)]
    finally:
        source.close()
    result = ScanResult()
    assert list(shard_format.scan(path, "shard", result)) == list(enumerate(RECORDS))
    assert (result.size, result.sha256, result.records, result.error) == (size, sha, len(RECORDS), None)


def test_a_tfrecord_shard_is_the_framed_stream(tmp_path):
    path = tmp_path / "a.tfrecord"
    assert write(formats.TFRECORD, str(path)) == (len(STREAM), hashlib.sha256(STREAM).hexdigest())
    assert path.read_bytes() == STREAM


def test_array_record_bytes_do_not_depend_on_how_the_stream_was_cut(tmp_path):
    write(formats.ARRAY_RECORD, str(tmp_path / "a.array_record"), seed=1)
    write(formats.ARRAY_RECORD, str(tmp_path / "b.array_record"), seed=2)
    assert (tmp_path / "a.array_record").read_bytes() == (tmp_path / "b.array_record").read_bytes()


def test_a_record_cut_short_is_refused(tmp_path):
    writer = formats.ARRAY_RECORD.open_writer(str(tmp_path / "a.array_record"))
    writer.write(STREAM[:-3])
    with pytest.raises(RuntimeError, match="cut short"):
        writer.finish(0, "")


@pytest.mark.parametrize("name", formats.NAMES)
def test_abort_after_a_failing_write_raises_nothing(name, tmp_path):
    writer = formats.get(name).open_writer(str(tmp_path / ("a" + formats.get(name).suffix)))
    writer.write(STREAM[:100])
    writer.abort()
    writer.abort()


@pytest.mark.parametrize("name", formats.NAMES)
def test_a_damaged_record_is_named(name, tmp_path):
    shard_format = formats.get(name)
    path = tmp_path / ("shard" + shard_format.suffix)
    write(shard_format, str(path))
    data = bytearray(path.read_bytes())
    # The 8th record's bytes: the same value repeated, found where it is stored (uncompressed).
    at = data.find(RECORDS[7])
    assert at > 0
    data[at + 10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RecordError, match=r"record 7\b"):
        list(shard_format.records(str(path), "shard"))
    result = ScanResult()
    assert [i for i, _ in shard_format.scan(str(path), "shard", result)] == list(range(7))
    assert result.error is not None and result.error[0] == 7 and result.records == 7
    assert result.size == len(data) and result.sha256 == hashlib.sha256(data).hexdigest()


def test_a_truncated_array_record_file_is_not_readable(tmp_path):
    path = tmp_path / "shard.array_record"
    write(formats.ARRAY_RECORD, str(path))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(RecordError, match="not a readable ArrayRecord file"):
        list(formats.ARRAY_RECORD.records(str(path), "shard"))
    result = ScanResult()
    assert list(formats.ARRAY_RECORD.scan(str(path), "shard", result)) == []
    assert result.error is not None and result.error[0] == 0


def test_writer_options():
    assert formats.ARRAY_RECORD.check_options(None) == "group_size:1,uncompressed"
    assert formats.ARRAY_RECORD.check_options("group_size:8,zstd:3") == "group_size:8,zstd:3"
    with pytest.raises(ValueError, match="Unknown option bogus"):
        formats.ARRAY_RECORD.check_options("bogus:1")
    assert formats.TFRECORD.check_options(None) is None
    with pytest.raises(ValueError, match="takes no writer options"):
        formats.TFRECORD.check_options("group_size:1")
    with pytest.raises(ValueError, match="not one of tfrecord, array_record"):
        formats.get("parquet")


def test_shard_names_of_each_format():
    name = ShardName("train", 3, 16, ".array_record")
    assert name.filename == "train-00003-of-00016.array_record"
    assert ShardName.parse(name.filename) == name
    assert ShardName.parse("train-00003-of-00016.tfrecord") == ShardName("train", 3, 16)
    assert ShardName.parse("train-00003-of-00016.parquet") is None
    assert tfds_template(".array_record") == "{SPLIT}-{SHARD_X_OF_Y}.array_record"
    with pytest.raises(ValueError, match="suffix"):
        ShardName("train", 0, 1, ".zip")


def test_the_option_and_what_the_manifest_records(tmp_path):
    tf = build_config(str(tmp_path), str(tmp_path / "o"), {})
    assert tf.file_format == "tfrecord" and "file_format" not in tf.manifest_options()
    ar = build_config(str(tmp_path), str(tmp_path / "o"), {"file_format": "array_record"})
    assert ar.manifest_options()["file_format"] == "array_record"
    assert ar.manifest_options()["format_options"] == "group_size:1,uncompressed"
    given = build_config(
        str(tmp_path), str(tmp_path / "o"), {"file_format": "array_record", "array_record_options": "group_size:4"}
    )
    assert given.format_options == "group_size:4"
    for values, message in (
        ({"array_record_options": "group_size:4"}, "applies to --file-format array_record"),
        ({"file_format": "array_record", "array_record_options": "nope:1"}, "Unknown option nope"),
        ({"file_format": "array_record", "index": True}, "--index writes a TFRecord's record index"),
        ({"file_format": "zip"}, "--file-format must be one of"),
    ):
        with pytest.raises(OptionsError, match=message):
            build_config(str(tmp_path), str(tmp_path / "o"), values)
    with pytest.raises(OptionsError):
        ConvertConfig(source="s", output="o", file_format="zip")


def test_a_manifest_names_its_format_and_an_unknown_one_is_refused():
    import json
    import pathlib

    from prep.core.errors import ManifestError
    from prep.core.manifest import FILENAME, Manifest

    v1 = pathlib.Path(__file__).resolve().parents[3] / "data" / "manifest_v1" / FILENAME
    document = json.loads(v1.read_bytes())
    assert Manifest.from_json(json.dumps(document).encode()).file_format == "tfrecord"
    document["options"]["file_format"] = "array_record"
    assert Manifest.from_json(json.dumps(document).encode()).file_format == "array_record"
    document["options"]["file_format"] = "parquet"
    with pytest.raises(ManifestError, match="options.file_format is 'parquet'"):
        Manifest.from_json(json.dumps(document).encode())
