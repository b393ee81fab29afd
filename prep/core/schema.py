"""The record schema: which features a `tf.train.Example` holds, and their types.

The keys are those of TensorFlow's classic image TFRecords (`build_imagenet_data.py`,
slim), which Model Garden's classification Decoder reads too (its Parser's
defaults also want JPEG images: see `targets`). The writer and `loaders`
both import this module; nothing else spells a feature key.

`ImageRecord.to_bytes` writes the `tf.train.Example` protobuf wire format by
hand, with features in sorted key order. That keeps TensorFlow out of the
workers that write shards (importing it costs seconds and hundreds of MB per
process) and makes the bytes deterministic by construction: protobuf map
serialization order is otherwise unspecified. tests/unit/prep/test_records.py checks the
bytes against TensorFlow's own parser.
"""

from __future__ import annotations

import dataclasses
import hashlib

from prep.core.errors import RecordError

ENCODED = "image/encoded"
FORMAT = "image/format"
HEIGHT = "image/height"
WIDTH = "image/width"
CHANNELS = "image/channels"
LABEL = "image/class/label"
TEXT = "image/class/text"
FILENAME = "image/filename"
SHA256 = "image/key/sha256"
SOURCE_ID = "image/source_id"  # optional: written for --target model-garden (`targets`)

BYTES_FEATURES = (ENCODED, FORMAT, TEXT, FILENAME, SHA256)
INT64_FEATURES = (HEIGHT, WIDTH, CHANNELS, LABEL)
ALL_FEATURES = tuple(sorted(BYTES_FEATURES + INT64_FEATURES))

# Values of `image/format`.
FORMATS = ("jpeg", "png")


@dataclasses.dataclass(frozen=True)
class ImageRecord:
    """One example: an encoded image and what we know about it."""

    encoded: bytes
    format: str
    height: int
    width: int
    channels: int
    label: int
    text: str
    filename: str
    sha256: str
    source_id: str | None = None  # image/source_id, when written

    @classmethod
    def build(cls, encoded: bytes, format: str, height: int, width: int, channels: int,
              label: int, text: str, filename: str, source_id: str | None = None) -> "ImageRecord":
        """Builds a record, computing `sha256` from the encoded bytes."""
        return cls(encoded, format, height, width, channels, label, text, filename,
                   hashlib.sha256(encoded).hexdigest(), source_id)

    def features(self) -> dict[str, bytes | int]:
        optional = {} if self.source_id is None else {SOURCE_ID: self.source_id.encode()}
        return optional | {
            ENCODED: self.encoded,
            FORMAT: self.format.encode(),
            HEIGHT: self.height,
            WIDTH: self.width,
            CHANNELS: self.channels,
            LABEL: self.label,
            TEXT: self.text.encode("utf-8"),
            FILENAME: self.filename.encode("utf-8", "surrogateescape"),
            SHA256: self.sha256.encode(),
        }

    def to_bytes(self) -> bytes:
        """Serializes to `tf.train.Example` wire format, keys sorted."""
        return encode_example(self.features())

    @classmethod
    def from_bytes(cls, data: bytes) -> "ImageRecord":
        """Parses a serialized Example written by `to_bytes` (or any Example with our keys).

        Raises:
            RecordError: the bytes are not an Example, or a key is missing or of the wrong type.
        """
        features = decode_example(data)
        missing = [k for k in ALL_FEATURES if k not in features]
        if missing:
            raise RecordError(f"record lacks feature(s) {', '.join(missing)}")
        values = {}
        for key in ALL_FEATURES:
            kind, items = features[key]
            want = "bytes" if key in BYTES_FEATURES else "int64"
            if kind != want or len(items) != 1:
                raise RecordError(f"feature {key} must hold one {want} value, has {len(items)} {kind}")
            values[key] = items[0]
        source_id = None
        if SOURCE_ID in features:
            kind, items = features[SOURCE_ID]
            if kind != "bytes" or len(items) != 1:
                raise RecordError(f"feature {SOURCE_ID} must hold one bytes value, has {len(items)} {kind}")
            source_id = items[0]
        try:
            return cls(
                encoded=values[ENCODED],
                format=values[FORMAT].decode(),
                height=values[HEIGHT],
                width=values[WIDTH],
                channels=values[CHANNELS],
                label=values[LABEL],
                text=values[TEXT].decode("utf-8"),
                filename=values[FILENAME].decode("utf-8", "surrogateescape"),
                sha256=values[SHA256].decode(),
                source_id=None if source_id is None else source_id.decode("utf-8"),
            )
        except UnicodeDecodeError as exc:
            raise RecordError(f"record holds a text feature that is not UTF-8: {exc}") from None


# --- protobuf wire format -------------------------------------------------------------
# Example  { Features features = 1; }
# Features { map<string, Feature> feature = 1; }   entry { string key = 1; Feature value = 2; }
# Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
# BytesList { repeated bytes value = 1; }  Int64List { repeated int64 value = 1 [packed]; }


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def _varint(value: int) -> bytes:
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
    return _varint(number << 3 | 2) + _varint(length)


def _field(number: int, payload: bytes) -> bytes:
    return _header(number, len(payload)) + payload


def _key_field(key: str) -> bytes:
    """A map entry's key field; our own keys' are computed once."""
    field = _KEY_FIELDS.get(key)
    return field if field is not None else _field(1, key.encode())


_KEY_FIELDS = {key: _field(1, key.encode()) for key in (*ALL_FEATURES, SOURCE_ID)}


def _entry(key: str, value: bytes | int) -> bytes:
    """One map entry of Features: key, and a Feature holding a one-item BytesList or Int64List."""
    if isinstance(value, bytes):
        feature = _field(1, _field(1, value))
    elif isinstance(value, int) and not isinstance(value, bool):
        feature = _field(3, _field(1, _varint(value)))
    else:
        raise TypeError(f"feature {key}: expected bytes or int, got {type(value).__name__}")
    return _field(1, _key_field(key) + _field(2, feature))


def _entries(features: dict[str, bytes | int]) -> bytes:
    """The map entries of `features`, keys sorted: the body of an Example's Features."""
    return b"".join(_entry(key, features[key]) for key in sorted(features))


def encode_example(features: dict[str, bytes | int]) -> bytes:
    """Encodes `{key: bytes | int}` as a serialized `tf.train.Example`, keys sorted."""
    return _field(1, _entries(features))


def encode_example_around(features: dict[str, bytes | int], key: str) -> tuple[bytes, bytes]:
    """(head, tail) such that head + features[key] + tail == encode_example(features).

    Only the length of `features[key]` (bytes) is used, so a writer can put a
    large value, such as the image, between head and tail without building
    the record around it first.
    """
    size = len(features[key])
    value_head = _header(1, size)  # BytesList.value
    feature_head = _header(1, len(value_head) + size)  # Feature.bytes_list
    feature_size = len(feature_head) + len(value_head) + size
    body_head = _key_field(key) + _header(2, feature_size)  # the map entry's key, then its value
    entry_head = _header(1, len(body_head) + feature_size)
    before = _entries({k: v for k, v in features.items() if k < key})
    after = _entries({k: v for k, v in features.items() if k > key})
    total = len(before) + len(entry_head) + len(body_head) + feature_size + len(after)
    return _header(1, total) + before + entry_head + body_head + feature_head + value_head, after


def relabel(data: bytes, label: int) -> bytes:
    """A serialized record of ours with its label id replaced by `label`, every other byte as it was
    (what `to_bytes` gives for the same record with that label).

    Raises:
        RecordError: `data` is not one of our records.
    """
    return dataclasses.replace(ImageRecord.from_bytes(data), label=label).to_bytes()


def relabelled_size(size: int, old: int, new: int) -> int:
    """The size of a serialized record of ours of `size` bytes once its label `old` becomes `new`.

    Only two varints change length: the label's, and the Example's length of its
    Features (the other headers around the label hold lengths under 128).
    """
    for width in range(1, 11):
        body = size - 1 - width  # the Example: tag, varint length, Features
        if body >= 0 and len(_varint(body)) == width:
            break
    else:
        raise ValueError(f"{size} bytes cannot be a serialized Example")
    body += len(_varint(new)) - len(_varint(old))
    return 1 + len(_varint(body)) + body


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
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


def _fields(data: bytes):
    """Yields (field number, wire type, value) of a message; value is bytes or int."""
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise RecordError("length-delimited field runs past the end of the record")
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        else:
            raise RecordError(f"unsupported protobuf wire type {wire}")
        if pos > len(data):
            raise RecordError("field runs past the end of the record")
        yield number, wire, value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode_feature(data: bytes) -> tuple[str, list]:
    kind, items = "empty", []
    for number, wire, value in _fields(data):
        if wire != 2:
            raise RecordError("malformed Feature")
        if number == 1:
            kind, items = "bytes", [v for n, w, v in _fields(value) if n == 1 and w == 2]
        elif number == 2:
            kind, items = "float", []
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
                        item, pos = _read_varint(v, pos)
                        items.append(_signed(item))
    return kind, items


def decode_example(data: bytes) -> dict[str, tuple[str, list]]:
    """Decodes a serialized Example to `{key: (kind, values)}`; kind is bytes, int64, float or empty.

    Raises:
        RecordError: the bytes are not a well-formed Example.
    """
    features = {}
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
