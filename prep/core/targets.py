"""Targets: a consumer whose default input pipeline must read every record (`--target`).

Pure: no TensorFlow. A target decides what a conversion writes (`Target`) and,
for `prep verify --target`, which records that consumer's defaults would fail
on (`record_failures`), and the command that fixes them (`fix_command`).

`model-garden` is TensorFlow Model Garden (tf-models-official): checked against
its `official/vision/dataloaders`, tested in tests/e2e/test_model_garden.py.
- `classification_input.Parser` defaults to `decode_jpeg_only=True`: it reads
  the image with `tf.image.extract_jpeg_shape` and `decode_and_crop_jpeg`, so a
  PNG record fails ("Invalid JPEG data"). Every record is stored as JPEG.
- `classification_input.Decoder` reads `image/encoded` and `image/class/label`
  (int64, used as an index below `num_classes`): our keys and 0-based label ids
  already are that, so `num_classes` is the number of labels.
- `tf_example_decoder.TfExampleDecoder` (detection's) parses `image/source_id`
  as a required string unless `regenerate_source_id=True`, and its detection
  parsers turn it into an int64 (`tf.strings.to_number`): each record gets a
  decimal id, unique in the dataset. Its box keys are variable-length: absent
  keys read as empty lists, which is what a classification record holds.
"""

from __future__ import annotations

import dataclasses

from prep.core.errors import OptionsError
from prep.core.manifest import Manifest

NONE = "none"
MODEL_GARDEN = "model-garden"
TARGETS = (NONE, MODEL_GARDEN)  # od-api joins when detection records exist

JPEG_MAGIC = b"\xff\xd8\xff"

# Reasons a record fails a target's defaults: (key, text for the summary).
NOT_JPEG = "not_jpeg"
NO_SOURCE_ID = "no_source_id"
REASONS = {
    NOT_JPEG: "not JPEG, for the classification Parser",
    NO_SOURCE_ID: "without image/source_id, for TfExampleDecoder",
}


@dataclasses.dataclass(frozen=True)
class Target:
    """What a target makes a conversion write."""

    name: str
    image_format: str | None  # every image stored in this format; None: as --image-format says
    source_id: bool  # write image/source_id, a decimal id unique in the dataset
    reader: str  # whose default input pipeline reads it, for messages
    promise: str  # what every record then is, for messages

    def __post_init__(self) -> None:
        if self.name not in TARGETS:
            raise OptionsError(f"--target must be one of {', '.join(TARGETS)}, got {self.name!r}")


_TARGETS = {
    NONE: Target(NONE, None, False, "", ""),
    MODEL_GARDEN: Target(
        MODEL_GARDEN, "jpeg", True, "Model Garden's default decoders", "every record is JPEG with an image/source_id"
    ),
}


def get(name: str) -> Target:
    """The target called `name`.

    Raises:
        OptionsError: `name` is not a target.
    """
    if name not in _TARGETS:
        raise OptionsError(f"--target must be one of {', '.join(TARGETS)}, got {name!r}")
    return _TARGETS[name]


def image_format(target: str, asked: str | None) -> str:
    """The --image-format a conversion uses: `asked` (None: not given) reconciled with `target`.

    Raises:
        OptionsError: `asked` contradicts the target (--target model-garden --image-format png).
    """
    wanted = get(target).image_format
    if wanted is None:
        return asked or "keep"
    if asked not in (None, wanted):
        raise OptionsError(
            f"--target {target} stores every image as {wanted.upper()} (Model Garden's "
            f"classification Parser decodes only JPEG by default), so --image-format {asked} "
            f"contradicts it: leave --image-format out"
        )
    return wanted


def source_id(position: int) -> str:
    """image/source_id of the record of the input at `position` (unique in a conversion, >= 0).

    Decimal, from 1, as Model Garden's detection parsers turn it into an int64.
    """
    return str(position + 1)


def record_failures(target: str, encoded: bytes, source_id: str | None) -> list[str]:
    """The `REASONS` keys for which `target`'s default readers would fail on a record."""
    if target != MODEL_GARDEN:
        return []
    failures = []
    if not encoded.startswith(JPEG_MAGIC):
        failures.append(NOT_JPEG)
    if source_id is None or not source_id.isascii() or not source_id.isdigit():
        failures.append(NO_SOURCE_ID)
    return failures


def not_jpeg_message(encoded: bytes) -> str:
    """Why Model Garden's classification Parser cannot read a record's image."""
    kind = "PNG" if encoded.startswith(b"\x89PNG") else f"not JPEG (starts with {encoded[:4].hex(' ')})"
    return (
        f"image/encoded is {kind}: Model Garden's classification Parser (decode_jpeg_only=True, its default) "
        "decodes only JPEG"
    )


def no_source_id_message(missing: int, records: int, first: int) -> str:
    """Why Model Garden's TfExampleDecoder cannot read `missing` of a shard's `records` records."""
    return (
        f"{missing} of {records} records have no decimal image/source_id, which Model Garden's "
        f"TfExampleDecoder() requires (the first is record {first})"
    )


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def fix_command(manifest: Manifest, output: str, target: str) -> str:
    """The `prep convert` command that rewrites the dataset in `output` for `target`.

    Rebuilt from the manifest's options. Two are recorded only in part: --labels
    by its base name (give its path if it is not in the current folder) and
    --classes by a flag (CLASSES stands for the file).
    """
    options = manifest.options
    source = manifest.run.source or "SOURCE"
    words = ["prep", "convert", _quote(str(source)), _quote(output)]

    def add(flag: str, value: object) -> None:
        words.extend([flag, _quote(str(value))])

    if options.get("label_file"):
        add("--labels", options["label_file"])
    elif options.get("layout") not in (None, "auto"):
        add("--layout", options["layout"])
    if options.get("classes_fixed"):
        add("--classes", "CLASSES")
    if options.get("split"):
        add("--split", options["split"])
    if options.get("num_shards") is not None:
        add("--num-shards", options["num_shards"])
    elif options.get("shard_size") not in (None, 128 << 20):
        add("--shard-size", options["shard_size"])
    from prep.core.image_rules import DEFAULT_MAX_PIXELS  # Pillow: not at import, `prep --help` stays light

    defaults = {"seed": 0, "quality": 95, "max_pixels": DEFAULT_MAX_PIXELS}
    for key in ("max_per_class", "seed", "resize", "max_side", "quality", "max_pixels"):
        if options.get(key) is not None and options.get(key) != defaults.get(key):
            add("--" + key.replace("_", "-"), options[key])
    for flag in ("allow_outside_source", "index"):
        if options.get(flag):
            words.append("--" + flag.replace("_", "-"))
    words += ["--target", target, "--overwrite"]
    return " ".join(words)
