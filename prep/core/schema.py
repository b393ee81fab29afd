"""The record schema: which features a `tf.train.Example` holds, and their types.

The keys are those of TensorFlow's classic image TFRecords (`build_imagenet_data.py`,
slim), which Model Garden's classification Decoder reads too (its Parser's
defaults also want JPEG images: see `targets`); the per-object and segmentation
keys are those Model Garden's `tf_example_decoder.py` and the Object Detection
API's decoder parse. The writer, `verify` and `loaders` all import this module;
nothing else spells a feature key.

`ImageRecord.to_bytes` writes the `tf.train.Example` wire format by hand
(`prep.core.wire`), features in sorted key order.

The tasks (`TASKS`, the manifest's `task`):
* classification: one `image/class/label` (ids from 0, indexing the manifest's labels).
* multilabel: `image/class/label` and `image/class/text` as lists (ids from 0), any length.
* detection: `image/object/...` lists, one item per object; class ids from 1 (0 is
  background), id i naming the manifest's labels[i - 1]; boxes normalised to [0, 1]
  in the stored image's frame, as four lists and as `OBJECT_BBOX` (four items per
  object, yxyx); `image/source_id` always, a decimal string.
* segmentation: `image/segmentation/class/encoded`, a single-channel PNG the size of
  the stored image whose value v is labels[v]; `IGNORE_VALUE` marks pixels to ignore.
"""

from __future__ import annotations

import dataclasses
import hashlib

from prep.core.errors import RecordError
from prep.core.wire import ByteList, Floats, Ints, decode_example, encode_example, encode_example_around, varint  # noqa: F401 (re-exported)

ENCODED = "image/encoded"
FORMAT = "image/format"
HEIGHT = "image/height"
WIDTH = "image/width"
CHANNELS = "image/channels"
LABEL = "image/class/label"
TEXT = "image/class/text"
FILENAME = "image/filename"
SHA256 = "image/key/sha256"
SOURCE_ID = "image/source_id"  # written for --target model-garden (`targets`) and for detection

# Detection (lists, one item per object, in the same order).
OBJECT_XMIN = "image/object/bbox/xmin"  # Floats, normalised to [0, 1]
OBJECT_YMIN = "image/object/bbox/ymin"
OBJECT_XMAX = "image/object/bbox/xmax"
OBJECT_YMAX = "image/object/bbox/ymax"
# The same boxes once more, as one Floats of [ymin, xmin, ymax, xmax] per object: the layout of
# tensorflow-datasets' BBoxFeature, which reads a box from one key (`prep.core.tfds_meta`). Model
# Garden and the Object Detection API read the four lists above and ignore it. Not "image/object/bbox":
# no key may be a prefix of another, as Python's protobuf (upb) then orders map keys unlike C++'s and
# our sorted order, and records would no longer be protobuf's deterministic serialization.
OBJECT_BBOX = "image/object/bbox/yxyx"
OBJECT_LABEL = "image/object/class/label"  # Ints, ids from 1
OBJECT_TEXT = "image/object/class/text"  # ByteList, class names in UTF-8
OBJECT_AREA = "image/object/area"  # Floats, in pixels of the stored image (the mask's, else the box's)
OBJECT_CROWD = "image/object/is_crowd"  # Ints, 0 or 1
OBJECT_DIFFICULT = "image/object/difficult"  # Ints, 0 or 1
OBJECT_MASK = "image/object/mask"  # ByteList: one single-channel PNG per object, 0/1, the stored image's size
# Semantic segmentation.
SEGMENTATION = "image/segmentation/class/encoded"  # bytes: single-channel PNG of class values
SEGMENTATION_FORMAT = "image/segmentation/class/format"  # b"png"
IGNORE_VALUE = 255

TASKS = ("classification", "multilabel", "detection", "segmentation")

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
    def build(
        cls, encoded: bytes, format: str, height: int, width: int, channels: int, label: int, text: str, filename: str
    ) -> ImageRecord:
        """Builds a record, computing `sha256` from the encoded bytes; without image/source_id
        (`dataclasses.replace(record, source_id=...)` adds one)."""
        return cls(encoded, format, height, width, channels, label, text, filename, hashlib.sha256(encoded).hexdigest())

    def features(self) -> dict[str, bytes | int]:
        optional: dict[str, bytes | int] = {} if self.source_id is None else {SOURCE_ID: self.source_id.encode()}
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
    def from_bytes(cls, data: bytes) -> ImageRecord:
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
        if body >= 0 and len(varint(body)) == width:
            break
    else:
        raise ValueError(f"{size} bytes cannot be a serialized Example")
    body += len(varint(new)) - len(varint(old))
    return 1 + len(varint(body)) + body
