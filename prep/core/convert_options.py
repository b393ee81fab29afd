"""The conversion options: one table (`OPTIONS`) for `prep convert` (click) and
`python -m beam_jobs.convert` (argparse), and the one way values become a `ConvertConfig`.

The table is plain data; `prep.cli_kit` turns it into click options and `add_arguments`
into argparse ones, so both entry points take the same names, defaults and help.
"""

from __future__ import annotations

import argparse
import dataclasses
import decimal
import os
import re
from collections.abc import Sequence
from typing import Any

from prep.core import config, formats, targets
from prep.core.config import ANNOTATION_FORMATS, BOX_POLICIES, CROWD_POLICIES, UNANNOTATED, ConvertConfig, TaskOptions
from prep.core.errors import OptionsError
from prep.core.groups import CONFLICTS, CONFLICTS_DEFAULT, CROSS_SPLIT, DUPLICATES, NEAR, DedupeOptions
from prep.core.image_rules import DEFAULT_IMAGE_TIMEOUT, DEFAULT_MAX_PIXELS, IMAGE_FORMATS, ISOLATE, ImageOptions
from prep.core.layout import EMPTY_CLASSES, PlanOptions, parse_split_fractions
from prep.core.listing import LAYOUTS, read_class_file
from prep.core.split_annotations import parse_annotations
from prep.core.storage import is_remote


@dataclasses.dataclass(frozen=True)
class Option:
    name: str  # e.g. "--num-shards"
    help: str
    type: type = str
    default: object = None
    choices: tuple[str, ...] | None = None
    flag: bool = False
    metavar: str | None = None
    multiple: bool = False  # may be given more than once: its value is a tuple

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


OPTIONS = (
    Option(
        "--labels", "CSV, TSV or JSONL label file with path,label[,split]; paths relative to SOURCE.", metavar="FILE"
    ),
    Option("--classes", "File with one class name per line: fixes label ids in that order.", metavar="FILE"),
    Option(
        "--layout",
        "SOURCE/<class>/... or SOURCE/<split>/<class>/...; auto picks splits when every top "
        "folder is a split name (train, validation, val, valid, test, eval, dev).",
        default="auto",
        choices=LAYOUTS,
    ),
    Option("--label-key", "WebDataset shards: the json member's field of labels (default: found).", metavar="FIELD"),
    Option("--image-column", "Parquet or Arrow SOURCE: the column of images (default: found).", metavar="NAME"),
    Option("--label-column", "Parquet or Arrow SOURCE: the column of labels (default: found).", metavar="NAME"),
    Option("--split-column", "Parquet or Arrow SOURCE: the column of splits (default: split).", metavar="NAME"),
    Option(
        "--split",
        "Stratified split when SOURCE names none, e.g. train=0.8,validation=0.1,test=0.1.",
        metavar="NAME=FRAC,...",
    ),
    Option("--num-shards", "Shards per split (default: derived from --shard-size).", int),
    Option("--shard-size", "Target bytes per shard when --num-shards is not given.", default="128MiB"),
    Option("--max-per-class", "Keep at most N examples of each class (deterministic).", int),
    Option(
        "--empty-classes",
        "A class left with no example (its folder empty, or every input of it rejected): "
        "keep it and its label id (a warning names it), drop it (later classes' ids move down by one), or "
        "fail before any shard is written (the images read are kept for --resume).",
        default="keep",
        choices=EMPTY_CLASSES,
    ),
    Option("--seed", "Seed for split assignment and record order.", int, 0),
    Option("--resize", "Downscale so the shorter side is N pixels.", int),
    Option("--max-side", "Downscale so the longer side is at most N pixels.", int),
    Option(
        "--image-format",
        "Stored format; keep: JPEG and PNG keep their format, others become PNG. "
        "Default: keep, or what --target needs (jpeg for model-garden).",
        choices=IMAGE_FORMATS,
    ),
    Option("--quality", "JPEG quality when an image is re-encoded.", int, 95),
    Option(
        "--max-pixels",
        "Reject images with more pixels than this, also inside containers (ICO, ICNS, TIFF, animated frames).",
        int,
        DEFAULT_MAX_PIXELS,
    ),
    Option(
        "--max-image-memory",
        "Reject (image_memory) an image whose decoding needs more memory than this.",
        default="2GiB",
    ),
    Option(
        "--image-timeout",
        "Reject (image_timeout) a sandboxed image not prepared within this many seconds of CPU time.",
        float,
        DEFAULT_IMAGE_TIMEOUT,
    ),
    Option(
        "--isolate",
        "Which images are decoded in a worker process bounded by --max-image-memory and "
        "--image-timeout; auto: all but JPEGs and PNGs whose header promises a decode within them.",
        default="auto",
        choices=ISOLATE,
    ),
    Option(
        "--workers",
        "Threads that read, convert and write in each pipeline worker (default: all cores of that worker).",
        int,
    ),
    Option(
        "--allow-outside-source",
        "Accept label-file paths outside SOURCE (../x.jpg, absolute paths); "
        "their image/filename is the path as written, normalized.",
        bool,
        False,
        flag=True,
    ),
    Option(
        "--index",
        "Also write each shard's record index, SHARD.idx ('offset size' per record), for "
        "NVIDIA DALI's TFRecord reader and the tfrecord package's readers.",
        bool,
        False,
        flag=True,
    ),
    Option(
        "--target",
        "Guarantee that this consumer's default input pipeline reads every record: model-garden "
        "stores every image as JPEG (Model Garden's classification Parser has decode_jpeg_only=True) and "
        "adds image/source_id (its TfExampleDecoder needs it); none: no such guarantee.",
        default=targets.NONE,
        choices=targets.TARGETS,
    ),
    Option(
        "--annotations",
        "Detection: a COCO instances JSON, a folder of Pascal VOC XML or YOLO txt, an Ultralytics data.yaml, "
        "or a CSV/TSV/JSONL with path,label,xmin,ymin,xmax,ymax (pixels); image paths relative to SOURCE. "
        "SPLIT=PATH, once per split, reads one file per split (COCO's instances_train2017.json, ...).",
        metavar="[SPLIT=]PATH",
        multiple=True,
    ),
    Option(
        "--annotation-format",
        "Format of --annotations (default: detected from what PATH is).",
        choices=ANNOTATION_FORMATS,
    ),
    Option(
        "--bad-boxes",
        "A box partly outside its image: clip it (clip), drop it (drop), or reject the image "
        "(reject-image); a degenerate or NaN box is dropped (reject-image: rejects the image).",
        default="clip",
        choices=BOX_POLICIES,
    ),
    Option(
        "--crowd",
        "Crowd annotations (iscrowd 1): keep them with is_crowd 1, drop them, or reject the image.",
        default="keep",
        choices=CROWD_POLICIES,
    ),
    Option(
        "--skip-empty",
        "Leave out images without objects (rejected, reason no_objects); they are kept by default.",
        bool,
        False,
        flag=True,
    ),
    Option(
        "--unannotated",
        "Images under SOURCE that the annotations never name: skip them (rejected, reason "
        "not_annotated), or keep them as images without objects.",
        default="skip",
        choices=UNANNOTATED,
    ),
    Option(
        "--masks",
        "Semantic segmentation: a folder of single-channel PNG class maps, one per image with the "
        "image's relative path and stem; --classes names the values 0, 1, ...; 255 is ignore.",
        metavar="DIR",
    ),
    Option(
        "--duplicates",
        "Exact and near-duplicate images (found while converting; a group always goes to one "
        "split): keep them all, drop all but the first by path (rejected, reason duplicate_of), or off (no "
        "content keys computed, no duplicate groups).",
        default="keep",
        choices=DUPLICATES,
    ),
    Option(
        "--near",
        "Near duplicates (re-encodes, resizes, crops: perceptual hashes within a distance) as well as exact "
        "ones, or off: exact duplicates only (same stored bytes), grouped by a shuffle on their sha256, whose "
        "work grows as the images and not as their square (for billions of images; docs/leakage.md).",
        default="on",
        choices=NEAR,
    ),
    Option(
        "--conflicts",
        "A duplicate group whose images carry different labels: reject-exact rejects the images whose "
        "exact duplicates (same stored bytes) carry another label (label_conflict, naming them) and only "
        "reports conflicts that near matches make (duplicates.jsonl and a warning), since false near "
        "matches grow with the square of the images; reject rejects every member of any such group, "
        "exact or near; keep only reports.",
        default=CONFLICTS_DEFAULT,
        choices=CONFLICTS,
    ),
    Option(
        "--cross-split",
        "Duplicates across the splits SOURCE gives (leakage): report them (duplicates.jsonl "
        "and a warning), or also remove them from the evaluation splits (cross_split_duplicate; train and "
        "then the first split by name keep theirs).",
        default="report",
        choices=CROSS_SPLIT,
    ),
    Option(
        "--group-pattern",
        "Images whose paths give the same match of REGEX (its first group, or the whole "
        "match; e.g. a patient or video id) go to the same split when --split makes the splits.",
        metavar="REGEX",
    ),
    Option(
        "--group-by",
        "Rows of the --labels file with the same value in COLUMN (e.g. a patient id) go to the "
        "same split when --split makes the splits; a row with an empty value is in no group.",
        metavar="COLUMN",
    ),
    Option(
        "--file-format",
        "Container of the shards: tfrecord (read in order: tf.data, DALI), or array_record (read by "
        "position: Grain, tfds' as_data_source); the same records in the same order either way.",
        default=formats.DEFAULT,
        choices=formats.NAMES,
    ),
    Option(
        "--array-record-options",
        "ArrayRecord writer options, e.g. group_size:1,zstd:3 (default: group_size:1,uncompressed, "
        "one record a chunk, for random access).",
        metavar="OPTIONS",
    ),
    Option("--overwrite", "Replace a dataset prep wrote earlier in OUTPUT.", bool, False, flag=True),
    Option(
        "--resume",
        "Finish an interrupted or failed conversion in OUTPUT, reusing its completed work. The "
        "planning options (--num-shards, --shard-size, --split, --seed, --max-per-class, --empty-classes) may "
        "change; it refuses if the inputs or image options differ.",
        bool,
        False,
        flag=True,
    ),
)

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_MAX_SIZE = 1 << 62
_UNITS = {
    "": 1,
    "B": 1,
    "K": 1000,
    "KB": 1000,
    "KIB": 1024,
    "M": 1000**2,
    "MB": 1000**2,
    "MIB": 1024**2,
    "G": 1000**3,
    "GB": 1000**3,
    "GIB": 1024**3,
    "T": 1000**4,
    "TB": 1000**4,
    "TIB": 1024**4,
}


def parse_size(text: str, flag: str = "--shard-size") -> int:
    """Parses '128MiB', '64MB', '1.5GiB' or a byte count."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise OptionsError(f"{flag} {text!r} is not a size such as 128MiB or 64MB")
    unit = (match[2] or "").upper()
    unit = unit + "B" if unit.endswith("I") else unit  # "128Mi" is 128MiB
    size = decimal.Decimal(match[1]) * _UNITS[unit]
    if size > _MAX_SIZE:
        raise OptionsError(
            f"{flag} {text!r} is larger than any {'shard' if flag == '--shard-size' else 'memory'} could be"
        )
    return int(size)


def check_beam_args(beam_args: Sequence[str]) -> None:
    """Refuses Beam arguments that are ours or no option at all: Beam ignores what it cannot
    parse, so `-- --num-shards 3` or a stray `3` would otherwise change nothing, silently.

    Raises:
        OptionsError: naming the argument.
    """
    ours = {o.name for o in OPTIONS}
    if beam_args and not beam_args[0].startswith("-"):
        raise OptionsError(
            f"unexpected argument {beam_args[0]!r}: Beam pipeline options start with -- "
            "(for prep convert, after a lone --)"
        )
    for arg in beam_args:
        if not arg.startswith("--"):
            continue
        name = "--" + arg[2:].split("=", 1)[0].replace("_", "-")
        if name in ours:
            raise OptionsError(
                f"{arg.split('=', 1)[0]} is a conversion option, not a Beam pipeline option: "
                f"write it as {name}, before any Beam options (for prep convert, before the --)"
            )


def build_config(source: str, output: str, values: dict[str, Any]) -> ConvertConfig:
    """A checked ConvertConfig from option values keyed by `Option.dest`.

    Raises:
        OptionsError, SourceError: a bad value or an unreadable --classes file.
    """
    v: dict[str, Any] = {o.dest: o.default for o in OPTIONS} | {k: val for k, val in values.items() if val is not None}
    for name in ("split", "labels", "classes", "annotations", "masks"):
        given = v[name] if isinstance(v[name], (list, tuple)) else [v[name]]
        if any(isinstance(g, str) and not g.strip() for g in given):  # e.g. --split "$SPLITS" with SPLITS unset
            raise OptionsError(f"--{name} is empty; leave the option out instead")
    annotations, split_annotations = parse_annotations(v["annotations"])
    root, shard_pattern = config.split_source(_absolute(source))  # `shards/*.tar`: WebDataset shards
    return ConvertConfig(
        file_format=v["file_format"],
        format_options=formats.checked_options(v["file_format"], v["array_record_options"]),
        source=root,
        shard_pattern=shard_pattern,
        output=_absolute(output),
        labels=v["labels"],
        classes=read_class_file(v["classes"]) if v["classes"] else None,
        layout=v["layout"],
        label_key=v["label_key"],
        columns=config.TableColumns(v["image_column"], v["label_column"], v["split_column"]),
        plan=PlanOptions(
            seed=v["seed"],
            num_shards=v["num_shards"],
            shard_size=parse_size(v["shard_size"]),
            split_fractions=parse_split_fractions(v["split"]) if v["split"] else None,
            max_per_class=v["max_per_class"],
            empty_classes=v["empty_classes"],
        ),
        image=ImageOptions(
            resize=v["resize"],
            max_side=v["max_side"],
            image_format=targets.image_format(v["target"], v["image_format"]),
            quality=v["quality"],
            max_pixels=v["max_pixels"],
            max_image_memory=parse_size(v["max_image_memory"], "--max-image-memory"),
            image_timeout=v["image_timeout"],
            isolate=v["isolate"],
        ),
        workers=v["workers"],
        overwrite=bool(v["overwrite"]),
        resume=bool(v["resume"]),
        allow_outside_source=bool(v["allow_outside_source"]),
        index=bool(v["index"]),
        target=v["target"],
        tasks=TaskOptions(
            annotations=_absolute(annotations) if annotations else None,
            split_annotations=tuple((split, _absolute(path)) for split, path in split_annotations),
            annotation_format=v["annotation_format"],
            bad_boxes=v["bad_boxes"],
            crowd=v["crowd"],
            skip_empty=bool(v["skip_empty"]),
            unannotated=v["unannotated"],
            masks=_absolute(v["masks"]) if v["masks"] else None,
        ),
        dedupe=DedupeOptions(
            duplicates=v["duplicates"],
            near=v["near"],
            conflicts=v["conflicts"],
            cross_split=v["cross_split"],
            group_pattern=v["group_pattern"],
            group_by=v["group_by"],
        ),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the options to an argparse parser (Beam's idiom)."""
    for o in OPTIONS:
        if o.flag:
            parser.add_argument(o.name, action="store_true", help=o.help)
        elif o.multiple:
            parser.add_argument(o.name, action="append", type=o.type, metavar=o.metavar, help=o.help)
        else:
            parser.add_argument(
                o.name, type=o.type, default=o.default, choices=o.choices, metavar=o.metavar, help=o.help
            )


def _absolute(path: str) -> str:
    """Local paths become absolute, so that pipeline workers in other folders find them."""
    return path if is_remote(path) else os.path.abspath(path)
