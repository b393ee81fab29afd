"""Record format: our Example bytes and TFRecord framing against TensorFlow's own readers."""

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prep.core.errors import RecordError
from prep.core.schema import (
    ALL_FEATURES,
    ENCODED,
    ByteList,
    Floats,
    ImageRecord,
    Ints,
    decode_example,
    encode_example,
    encode_example_around,
)
from prep.core.tfrecord import frame, frame_around, framed_around_matches, read_records

records = st.builds(
    ImageRecord.build,
    encoded=st.binary(max_size=300),
    format=st.sampled_from(["jpeg", "png"]),
    height=st.integers(1, 2**31),
    width=st.integers(1, 2**31),
    channels=st.sampled_from([1, 3]),
    label=st.integers(-(2**63), 2**63 - 1),
    text=st.text(max_size=20),
    filename=st.text(max_size=40),
)


@settings(max_examples=200, deadline=None)
@given(records)
def test_record_round_trip(record):
    assert ImageRecord.from_bytes(record.to_bytes()) == record


@settings(max_examples=200, deadline=None)
@given(records, st.integers(0, 70_000))
def test_a_record_built_around_its_image_is_the_same_record(record, size):
    # Pass-through images are not copied into spill files: the writer puts the
    # source file's bytes between a head and a tail made from the rest.
    image = bytes(range(256)) * (size // 256) + bytes(size % 256)
    features = dict(
        ImageRecord.build(
            image,
            record.format,
            record.height,
            record.width,
            record.channels,
            record.label,
            record.text,
            record.filename,
        ).features()
    )
    head, tail = encode_example_around(features, ENCODED)
    assert head + image + tail == encode_example(features)
    before, after = frame_around(head, image, tail)
    assert before + image + after == frame(head + image + tail)
    assert framed_around_matches(before, image, after)
    if size:
        changed = bytearray(image)
        changed[size // 2] ^= 1
        assert not framed_around_matches(before, bytes(changed), after)  # the source changed since
    assert not framed_around_matches(before, image + b"x", after)


def test_tensorflow_parses_our_examples_identically():
    import tensorflow as tf

    from loaders.decode import tf_feature_spec

    record = ImageRecord.build(b"\xff\xd8 bytes", "jpeg", 375, 500, 3, 4, "château", "chats/ch\u00e2teau 1.jpg")
    data = record.to_bytes()
    parsed = tf.io.parse_single_example(data, tf_feature_spec())
    assert parsed["image/encoded"].numpy() == record.encoded
    assert parsed["image/format"].numpy() == b"jpeg"
    assert (parsed["image/height"].numpy(), parsed["image/width"].numpy()) == (375, 500)
    assert parsed["image/channels"].numpy() == 3
    assert parsed["image/class/label"].numpy() == 4
    assert parsed["image/class/text"].numpy().decode() == "château"
    assert parsed["image/filename"].numpy().decode() == "chats/château 1.jpg"
    assert parsed["image/key/sha256"].numpy().decode() == record.sha256
    # Byte-identical to what tf.train.Example writes deterministically.
    example = tf.train.Example.FromString(data)
    assert example.SerializeToString(deterministic=True) == data
    assert sorted(example.features.feature) == list(ALL_FEATURES)


def test_tensorflow_writes_the_same_bytes_for_every_varint_width():
    import tensorflow as tf

    for value in (0, 1, 127, 128, 300, 16383, 16384, 2**31, 2**63 - 1, -1, -128, -(2**63)):
        record = ImageRecord.build(bytes(value % 251 + 100), "png", 2**21 + value % 7, 127, 1, value, "c", "f.png")
        data = record.to_bytes()
        example = tf.train.Example.FromString(data)
        assert example.features.feature["image/class/label"].int64_list.value == [value]
        assert example.SerializeToString(deterministic=True) == data


list_features = st.dictionaries(
    st.sampled_from(["image/object/bbox/xmin", "image/object/class/label", "image/object/class/text", "a", "z"]),
    st.one_of(
        st.builds(Floats, st.lists(st.floats(width=32, allow_nan=False), max_size=8)),
        st.builds(Ints, st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8)),
        st.builds(ByteList, st.lists(st.binary(max_size=12), max_size=8)),
    ),
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(list_features)
def test_typed_lists_are_what_tensorflow_writes(features):
    # Detection records hold per-object lists, empty ones included: TensorFlow's parser needs
    # an empty list's kind to match its spec, so each list says its kind.
    import tensorflow as tf

    data = encode_example(features)
    example = tf.train.Example.FromString(data)
    assert example.SerializeToString(deterministic=True) == data
    kinds = {Floats: ("float", "float_list"), Ints: ("int64", "int64_list"), ByteList: ("bytes", "bytes_list")}
    decoded = decode_example(data)
    for key, value in features.items():
        kind, field = kinds[type(value)]
        assert example.features.feature[key].WhichOneof("kind") == field
        assert decoded[key] == (kind, list(value))


def test_tfrecord_framing_read_by_tensorflow():
    import tensorflow as tf

    payloads = [b"", b"a", b"x" * 70000]
    blob = b"".join(frame(p) for p in payloads)
    with io.BytesIO(blob) as f:
        assert [d for _, _, d in read_records(f)] == payloads
    path = pytest.importorskip("tempfile").mktemp(suffix=".tfrecord")
    with open(path, "wb") as f:
        f.write(blob)
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == payloads


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:-1], "truncated record"),
        (lambda b: b[:5], "truncated header"),
        (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], "data CRC mismatch"),
        (lambda b: bytes([b[0] ^ 4]) + b[1:], "length CRC mismatch"),
    ],
)
def test_corrupt_framing_is_named(damage, message):
    blob = frame(b"hello world, a record") + frame(b"second")
    with pytest.raises(RecordError, match=f"shard.tfrecord: record 0 at byte 0: {message}"):
        list(read_records(io.BytesIO(damage(frame(b"hello world, a record"))), "shard.tfrecord"))
    assert len(list(read_records(io.BytesIO(blob)))) == 2


def test_decode_rejects_garbage():
    with pytest.raises(RecordError):
        ImageRecord.from_bytes(b"\x0a\x05abc")
    with pytest.raises(RecordError, match="lacks feature"):
        ImageRecord.from_bytes(b"")
    assert decode_example(b"") == {}
