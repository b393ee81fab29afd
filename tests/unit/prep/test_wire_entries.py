"""The one-join encoding of single bytes and int features (`prep.core.wire._entry`) against TensorFlow's bytes,
at every length where a header's varint grows a byte."""

import pytest

from prep.core import wire
from prep.core.wire import ByteList, Floats, Ints, encode_example, encode_example_around

# Around 2**7, 2**14 and 2**21: the image's length, its BytesList's and its Feature's headers widen one by one
SIZES = (0, 1, 124, 125, 126, 127, 128, 16379, 16380, 16381, 16383, 16384, 2**21 - 6, 2**21 - 4, 2**21)
INTS = (0, 1, 127, 128, 2**31, 2**63 - 1, -1, -(2**63))


@pytest.mark.parametrize("size", SIZES)
def test_a_bytes_feature_is_what_tensorflow_writes(size):
    import tensorflow as tf

    image = bytes(range(256)) * (size // 256) + bytes(size % 256)
    for key in ("image/encoded", "k" * 120, "k" * 126, "k" * 200):  # an entry's own length past 127 too
        features = {key: image, "a": 7, "z": b"tail", "m": Ints([1, 2]), "b": ByteList([b"x"])}
        data = encode_example(features)
        example = tf.train.Example.FromString(data)
        assert example.SerializeToString(deterministic=True) == data
        assert example.features.feature[key].bytes_list.value == [image]
        head, tail = encode_example_around(features, key)
        assert head + image + tail == data


@pytest.mark.parametrize("value", INTS)
def test_an_int_feature_is_what_tensorflow_writes(value):
    import tensorflow as tf

    for key in ("image/class/label", "k" * 120, "k" * 200):
        data = encode_example({key: value, "image/encoded": b"\xff\xd8", "zz": 3})
        example = tf.train.Example.FromString(data)
        assert example.SerializeToString(deterministic=True) == data
        assert example.features.feature[key].int64_list.value == [value]


def test_a_bool_is_refused_as_before():
    with pytest.raises(TypeError, match="expected bytes, int"):
        encode_example({"flag": True})


LISTS = (
    Ints(),
    Ints([0, 1, 127]),
    Ints([127, 128]),
    Ints([255]),
    Ints([300, 2**63 - 1]),
    Ints([-1, 5]),
    Ints([True, False]),
    Ints(range(200)),  # a body past 127 bytes
    Floats(),
    Floats([0.5, 1.0 / 3.0, -0.0]),
    Floats([0.25] * 40),  # 160 bytes: every length header two bytes
    ByteList(),
    ByteList([b"", b"cat"]),
    ByteList([b"x" * 200, b"y"]),
)


@pytest.mark.parametrize("value", LISTS, ids=[f"{type(v).__name__}{len(v)}-{i}" for i, v in enumerate(LISTS)])
def test_a_list_entry_is_the_nested_fields_bytes_and_what_tensorflow_writes(value):
    import tensorflow as tf

    for key in ("image/object/class/label", "k" * 126, "k" * 200):
        field = wire._key_field(key)
        nested = wire._field(1, field + wire._field(2, wire._feature(key, value)))
        assert wire._entry(key, value) == nested
        data = encode_example({key: value, "image/encoded": b"\xff\xd8"})
        example = tf.train.Example.FromString(data)
        assert example.SerializeToString(deterministic=True) == data


FLOAT_COLUMNS = ([], [0.5], [1.0 / 3.0, -0.0, 7], [0.25] * 31, [0.25] * 32, [0.125] * 40)  # 4n bytes past 127 too
INT_COLUMNS = ([], [0], [1, 127], [128], [5] * 130, [-1, 3], [2**63 - 1], [True, False])


@pytest.mark.parametrize("n", range(len(FLOAT_COLUMNS)))
def test_entries_made_a_kind_at_a_time_are_each_lists_entry(n):
    """`float_entries` packs several lists in one call and `int_entries` writes small ints as bytes: each
    entry must be the bytes `_entry` writes of that one typed list, at every length and value."""
    floats = {f"image/object/f{k}": FLOAT_COLUMNS[(n + k) % len(FLOAT_COLUMNS)] for k in range(4)}
    ints = {f"image/object/i{k}": INT_COLUMNS[(n + k) % len(INT_COLUMNS)] for k in range(len(INT_COLUMNS))}
    got = wire.float_entries(floats) | wire.int_entries(ints)
    assert list(got) == [*floats, *ints]
    for key, values in floats.items():
        assert got[key] == wire._entry(key, Floats(values)) and type(got[key]) is wire.Entry
    for key, values in ints.items():
        assert got[key] == wire._entry(key, Ints(values)) and type(got[key]) is wire.Entry
    texts = ByteList([b"cat", "dög".encode(), b"x" * 200])
    assert wire.list_entry("image/object/class/text", texts) == wire._entry("image/object/class/text", texts)
    plain = {k: Floats(v) for k, v in floats.items()} | {k: Ints(v) for k, v in ints.items()}
    assert encode_example({**got, "image/encoded": b"\xff"}) == encode_example({**plain, "image/encoded": b"\xff"})
