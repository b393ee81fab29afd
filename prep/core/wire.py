"""The `tf.train.Example` protobuf wire format, written and read by hand.

Writing it here keeps TensorFlow out of the workers that write shards (importing it
costs seconds and hundreds of MB per process) and makes the bytes deterministic by
construction: features go in sorted key order, where protobuf's own map serialization
order is unspecified. tests/unit/prep/test_records.py checks the bytes against
TensorFlow's own parser.

A feature value is one of: `bytes` or `int` (a one-item BytesList or Int64List, as the
classification records hold), or a typed list, `ByteList`, `Ints` or `Floats`, for the
per-object features of detection records. A list's type is explicit because an empty
list must still say which kind it is: TensorFlow's parser refuses a feature whose kind
differs from its spec even when it holds no value. Floats are stored as float32. An `Entry` is a
feature's map entry encoded already (`float_entries`, `int_entries`, `list_entry`: the same bytes as its
typed list), which a detection record uses for its per-object lists.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, cast

from prep.core.errors import RecordError

# Example  { Features features = 1; }
# Features { map<string, Feature> feature = 1; }   entry { string key = 1; Feature value = 2; }
# Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
# BytesList { repeated bytes value = 1; }  Int64List { repeated int64 value = 1 [packed]; }
# FloatList { repeated float value = 1 [packed]; }


class ByteList(tuple[bytes, ...]):
    """A BytesList of any length."""


class Ints(tuple[int, ...]):
    """An Int64List of any length."""


class Floats(tuple[float, ...]):
    """A FloatList of any length (float32)."""


class Entry(bytes):
    """A feature's whole map entry (its key's field and its Feature), encoded already by `float_entries`,
    `int_entries` or `list_entry`: the encoders put it at its key's turn as it is."""


Value = bytes | int | ByteList | Ints | Floats | Entry  # a feature's value (the module docstring says which is which)
Features = Mapping[str, Value]
# A field's value: an int for wire type 0 (varint), else bytes. Any: callers check the wire type, then use it as such
Field = tuple[int, int, Any]


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _header(number: int, length: int) -> bytes:
    return varint(number << 3 | 2) + varint(length)


def _field(number: int, payload: bytes) -> bytes:
    return _header(number, len(payload)) + payload


_KEY_FIELDS: dict[str, bytes] = {}


def _key_field(key: str) -> bytes:
    """A map entry's key field, computed once per key."""
    field = _KEY_FIELDS.get(key)
    if field is None:
        field = _KEY_FIELDS[key] = _field(1, key.encode())
    return field


def _feature(key: str, value: Value) -> bytes:
    """The Feature message of one value (see the module docstring for the kinds)."""
    if isinstance(value, bytes):
        return _field(1, _field(1, value))
    if isinstance(value, int) and not isinstance(value, bool):
        return _field(3, _field(1, varint(value)))
    if isinstance(value, ByteList):
        return _field(1, b"".join(_field(1, v) for v in value))
    if isinstance(value, Ints):  # packed; an empty list has no value field, as TensorFlow writes it
        return _field(3, _field(1, b"".join(varint(int(v)) for v in value)) if value else b"")
    if isinstance(value, Floats):
        return _field(2, _field(1, struct.pack(f"<{len(value)}f", *value)) if value else b"")
    raise TypeError(f"feature {key}: expected bytes, int, ByteList, Ints or Floats, got {type(value).__name__}")


def _entry(key: str, value: Value) -> bytes:
    """One map entry of Features: key, and its Feature.

    A single bytes or int value, every record's, is one join of its headers, their lengths added up (the
    same bytes as the nested `_field`s below, which copy each level's payload once more, and cost a
    classification record ~3x the Python)."""
    kind = type(value)
    if kind is Entry:  # a detection record's per-object lists, encoded a kind at a time (`float_entries`)
        return cast(Entry, value)
    key_field = _key_field(key)
    if kind is bytes:  # entry { key, value: Feature { bytes_list: BytesList { value } } }
        size = len(cast(bytes, value))
        value_size = varint(size)
        list_size = 1 + len(value_size) + size
        list_head = varint(list_size)
        feature_size = varint(1 + len(list_head) + list_size)
        body = len(key_field) + 2 + len(feature_size) + len(list_head) + list_size
        head = b"\n" + list_head + b"\n" + value_size
        return b"".join((b"\n", varint(body), key_field, b"\x12", feature_size, head, cast(bytes, value)))
    if kind is int:  # entry { key, value: Feature { int64_list: Int64List { packed value } } }: all under 128 bytes
        item = varint(cast(int, value))
        tail = b"\x1a" + _ONE_BYTE[2 + len(item)] + b"\n" + _ONE_BYTE[len(item)] + item
        return b"\n" + varint(len(key_field) + 2 + len(tail)) + key_field + b"\x12" + _ONE_BYTE[len(tail)] + tail
    if kind is Floats or kind is Ints or kind is ByteList:
        return _list_entry(key_field, cast(ByteList | Ints | Floats, value))
    return _field(1, key_field + _field(2, _feature(key, value)))


def _small_ints(value: Sequence[int]) -> bytes | None:
    """The packed varints of ints all in 0..127, each its own one byte: bytes() writes them at once."""
    try:
        return bytes(value) if min(value) >= 0 and max(value) < 0x80 else None
    except TypeError:  # not ints (int() takes them)
        return None


def _list_entry(key_field: bytes, value: ByteList | Ints | Floats) -> bytes:
    """`_entry` of a typed list in one join, its lengths added up (the nested `_field`s' bytes): the Feature
    `tag` + size + list body (a packed value field, none when empty; a field per item for bytes). Lengths
    under 128 are one byte (`_ONE_BYTE`), a detection record's usual case, without a call to `varint`."""
    if type(value) is Floats:
        n = len(value)
        packed = struct.pack(f"<{n}f", *value)
        tag, body = b"\x12", (b"\n" + _size(4 * n) + packed) if n else b""
    elif type(value) is Ints:
        tag, body = b"\x1a", b""
        if value:
            packed = _small_ints(value) or b"".join([varint(int(v)) for v in value])
            body = b"\n" + _size(len(packed)) + packed
    else:
        items = cast(ByteList, value)
        tag, body = (
            b"\n",
            b"".join([b"\n" + (_ONE_BYTE[len(v)] if len(v) < 0x80 else varint(len(v))) + v for v in items]),
        )
    feature_size = _size(len(body))
    value_size = 1 + len(feature_size) + len(body)
    value_head = _size(value_size)
    size = _size(len(key_field) + 1 + len(value_head) + value_size)
    return b"".join((b"\n", size, key_field, b"\x12", value_head, tag, feature_size, body))


def list_entry(key: str, value: ByteList | Ints | Floats) -> Entry:
    """The map entry of one typed list, as `encode_example` writes it."""
    return Entry(_list_entry(_key_field(key), value))


# (key, kind, items) -> an entry's bytes before its packed values: they depend on the number of items only
_HEADS: dict[tuple[str, type, int], bytes] = {}


def _head(key: str, kind: type[Floats] | type[Ints], n: int) -> bytes:
    """The bytes of a FloatList's entry of n items before its packed floats (4n bytes), or of an Int64List's
    of n ints in 0..127 before its n bytes."""
    head = _HEADS.get((key, kind, n))
    if head is None:
        value = Floats([0.0] * n) if kind is Floats else Ints([0] * n)
        entry = _list_entry(_key_field(key), value)
        head = _HEADS[(key, kind, n)] = entry[: len(entry) - (4 * n if kind is Floats else n)]
    return head


def float_entries(columns: Mapping[str, Sequence[float]]) -> dict[str, Entry]:
    """The entries of several FloatLists, packed in one call: each the bytes `encode_example` writes of
    `{key: Floats(values)}` (a detection record's six float lists, per record written)."""
    packed = struct.pack(f"<{sum(map(len, columns.values()))}f", *chain.from_iterable(columns.values()))
    out: dict[str, Entry] = {}
    at = 0
    for key, values in columns.items():
        n = len(values)
        if not n:  # an empty list has no value field (`_list_entry`)
            out[key] = list_entry(key, Floats())
            continue
        end = at + 4 * n
        out[key] = Entry(_head(key, Floats, n) + packed[at:end])
        at = end
    return out


def int_entries(columns: Mapping[str, Sequence[int]]) -> dict[str, Entry]:
    """The entries of several Int64Lists: each the bytes `encode_example` writes of `{key: Ints(values)}`;
    a list of ints in 0..127 (class ids, flags) is its bytes after a head made once per length."""
    out: dict[str, Entry] = {}
    for key, values in columns.items():
        small = _small_ints(values) if values else None
        out[key] = Entry(_head(key, Ints, len(values)) + small) if small is not None else list_entry(key, Ints(values))
    return out


def _size(n: int) -> bytes:
    """A length's varint (n >= 0)."""
    return _ONE_BYTE[n] if n < 0x80 else varint(n)


def _entries(features: Features) -> bytes:
    """The map entries of `features`, keys sorted: the body of an Example's Features."""
    return b"".join([_entry(key, features[key]) for key in sorted(features)])


def encode_example(features: Features) -> bytes:
    """Encodes `{key: value}` as a serialized `tf.train.Example`, keys sorted."""
    return _field(1, _entries(features))


def encode_example_around(features: Features, key: str) -> tuple[bytes, bytes]:
    """(head, tail) such that head + features[key] + tail == encode_example(features).

    Only the length of `features[key]` (bytes) is used, so a writer can put a
    large value, such as the image, between head and tail without building
    the record around it first.
    """
    size = len(cast(bytes, features[key]))  # the caller's promise: features[key] is bytes
    value_head = _header(1, size)  # BytesList.value
    feature_head = _header(1, len(value_head) + size)  # Feature.bytes_list
    feature_size = len(feature_head) + len(value_head) + size
    body_head = _key_field(key) + _header(2, feature_size)  # the map entry's key, then its value
    entry_head = _header(1, len(body_head) + feature_size)
    keys = sorted(features)
    before = b"".join([_entry(k, features[k]) for k in keys if k < key])
    after = b"".join([_entry(k, features[k]) for k in keys if k > key])
    total = len(before) + len(entry_head) + len(body_head) + feature_size + len(after)
    return _header(1, total) + before + entry_head + body_head + feature_head + value_head, after


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise RecordError("truncated or overlong varint in record")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _fields(data: bytes) -> Iterator[Field]:
    """Yields (field number, wire type, value) of a message; value is bytes or int."""
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 2:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise RecordError("length-delimited field runs past the end of the record")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        else:
            raise RecordError(f"unsupported protobuf wire type {wire}")
        if pos > len(data):
            raise RecordError("field runs past the end of the record")
        yield number, wire, value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _floats(number: int, wire: int, value: bytes) -> list[float]:
    if number != 1:
        return []
    if wire == 5:
        return [struct.unpack("<f", value)[0]]
    if wire == 2 and len(value) % 4 == 0:
        return list(struct.unpack(f"<{len(value) // 4}f", value))
    raise RecordError("malformed FloatList")


def _decode_feature(data: bytes) -> tuple[str, list[Any]]:
    kind: str = "empty"
    items: list[Any] = []  # bytes, float or int, as `kind` says
    for number, wire, value in _fields(data):
        if wire != 2:
            raise RecordError("malformed Feature")
        if number == 1:
            kind, items = "bytes", [v for n, w, v in _fields(value) if n == 1 and w == 2]
        elif number == 2:
            kind, items = "float", [f for n, w, v in _fields(value) for f in _floats(n, w, v)]
        elif number == 3:
            kind, items = "int64", []
            for n, w, v in _fields(value):
                if n != 1:
                    continue
                if w == 0:
                    items.append(_signed(v))
                else:
                    pos = 0
                    while pos < len(v):
                        item, pos = read_varint(v, pos)
                        items.append(_signed(item))
    return kind, items


def decode_example(data: bytes) -> dict[str, tuple[str, list[Any]]]:
    """Decodes a serialized Example to `{key: (kind, values)}`; kind is bytes, int64, float or empty.

    Raises:
        RecordError: the bytes are not a well-formed Example.
    """
    features: dict[str, tuple[str, list[Any]]] = {}
    for number, wire, value in _fields(data):
        if number != 1 or wire != 2:
            raise RecordError("not a tf.train.Example: unexpected top-level field")
        for n, w, entry in _fields(value):
            if n != 1 or w != 2:
                raise RecordError("not a tf.train.Example: unexpected Features field")
            key, feature = None, b""
            for en, ew, ev in _fields(entry):
                if en == 1 and ew == 2:
                    key = ev
                elif en == 2 and ew == 2:
                    feature = ev
            if key is None:
                raise RecordError("feature map entry without a key")
            try:
                features[key.decode()] = _decode_feature(feature)
            except UnicodeDecodeError:
                raise RecordError("feature key is not UTF-8") from None
    return features
