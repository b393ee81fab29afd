"""`ConvertConfig`: every option of a conversion, checked once, shared by the CLI and Beam entry points."""

from __future__ import annotations

import dataclasses
import os
from fractions import Fraction
from typing import Any

from prep.core import formats, targets
from prep.core.errors import OptionsError
from prep.core.groups import DedupeOptions
from prep.core.image_rules import ImageOptions
from prep.core.layout import PlanOptions
from prep.core.sources.shard_set import split_pattern

RUNNERS_LOCAL = "local"
ANNOTATION_FORMATS = ("coco", "voc", "yolo", "csv")
BOX_POLICIES = ("clip", "drop", "reject-image")
CROWD_POLICIES = ("keep", "drop", "reject-image")
UNANNOTATED = ("skip", "keep")


def split_source(source: str) -> tuple[str, str | None]:
    """(`ConvertConfig.source`, `ConvertConfig.shard_pattern`) of SOURCE as given (`shard_set.split_pattern`)."""
    return split_pattern(source)


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """What makes a conversion detection (`annotations`) or segmentation (`masks`), and how their
    inputs are judged. Multi-label needs none: its label file says it (`prep.core.label_file`)."""

    annotations: str | None = None  # COCO JSON, VOC or YOLO folder or data.yaml, or CSV/TSV/JSONL of boxes
    # --annotations SPLIT=PATH, repeated (COCO 2017's train and val files): ((split, path), ...)
    split_annotations: tuple[tuple[str, str], ...] = ()
    annotation_format: str | None = None  # None: detected from what `annotations` is
    bad_boxes: str = "clip"
    crowd: str = "keep"
    skip_empty: bool = False  # leave out images without objects
    unannotated: str = "skip"  # images under SOURCE the annotations never name
    masks: str | None = None  # folder of single-channel PNG class maps

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("annotation-format", self.annotation_format, ANNOTATION_FORMATS),
            ("bad-boxes", self.bad_boxes, BOX_POLICIES),
            ("crowd", self.crowd, CROWD_POLICIES),
            ("unannotated", self.unannotated, UNANNOTATED),
        ):
            if value is not None and value not in allowed:
                raise OptionsError(f"--{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.annotations is not None and self.split_annotations:
            raise OptionsError("--annotations is one PATH, or SPLIT=PATH given once per split; not both")
        if self.task == "detection" and self.masks is not None:
            raise OptionsError(
                "--annotations (detection) and --masks (segmentation) make different datasets: pass one of them"
            )
        if self.task != "detection":
            changed = [
                f"--{name}"
                for name, value, default in (
                    ("annotation-format", self.annotation_format, None),
                    ("bad-boxes", self.bad_boxes, "clip"),
                    ("crowd", self.crowd, "keep"),
                    ("skip-empty", self.skip_empty, False),
                    ("unannotated", self.unannotated, "skip"),
                )
                if value != default
            ]
            if changed:
                raise OptionsError(f"{changed[0]} applies to detection: it needs --annotations")

    @property
    def task(self) -> str:
        """The task these options make, or "classification" (which a label file may make multilabel)."""
        if self.annotations or self.split_annotations:
            return "detection"
        return "segmentation" if self.masks else "classification"

    def manifest_options(self) -> dict[str, Any]:
        """The options recorded in the manifest: none for classification, whose manifest stays as it was."""
        if self.task == "detection":
            return {
                "annotations": os.path.basename(self.annotations.rstrip("/"))
                if self.annotations
                else [f"{split}={os.path.basename(path.rstrip('/'))}" for split, path in self.split_annotations],
                "annotation_format": self.annotation_format,
                "bad_boxes": self.bad_boxes,
                "crowd": self.crowd,
                "skip_empty": self.skip_empty,
                "unannotated": self.unannotated,
            }
        if self.masks:
            return {"masks": os.path.basename(self.masks.rstrip("/"))}
        return {}


@dataclasses.dataclass(frozen=True)
class TableColumns:
    """A Parquet or Arrow SOURCE's columns of images, labels and splits (None: found; prep.core.sources.parquet)."""

    image: str | None = None
    label: str | None = None
    split: str | None = None


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    """A conversion: what to read, how to plan and transform, where to write."""

    source: str
    output: str
    labels: str | None = None  # label file; None: class folders
    classes: tuple[str, ...] | None = None  # fixed label order from --classes
    layout: str = "auto"
    label_key: str | None = None  # WebDataset shards: the json member's field that holds the label
    # SOURCE given as a pattern of WebDataset shards: the pattern relative to `source`, the folder it lies
    # under (`shard_set.split_pattern`)
    shard_pattern: str | None = None
    columns: TableColumns = TableColumns()  # Parquet and Arrow SOURCEs: --image-column, --label-column, ...
    plan: PlanOptions = PlanOptions()
    image: ImageOptions = ImageOptions()
    workers: int | None = None  # threads per pipeline worker; None: all cores of that worker
    overwrite: bool = False
    resume: bool = False  # finish the interrupted conversion in OUTPUT
    allow_outside_source: bool = False  # label-file paths may point outside SOURCE
    index: bool = False  # write a record index (DALI's "offset size" lines) next to each shard
    target: str = targets.NONE  # a consumer whose default pipeline must read every record (`targets`)
    tasks: TaskOptions = TaskOptions()
    dedupe: DedupeOptions = DedupeOptions()  # duplicate and user groups (prep.core.groups)
    file_format: str = formats.DEFAULT  # the shards' container (`prep.core.formats`)
    format_options: str | None = None  # its writer's options, checked (`ShardFormat.check_options`)

    def __post_init__(self) -> None:
        if self.file_format not in formats.NAMES:
            raise OptionsError(f"--file-format must be one of {', '.join(formats.NAMES)}, got {self.file_format!r}")
        if self.index and self.file_format != formats.TFRECORD.name:
            raise OptionsError(
                f"--index writes a TFRecord's record index; --file-format {self.file_format} is read by position"
            )
        wanted = targets.get(self.target).image_format
        if wanted is not None and self.image.image_format != wanted:
            raise OptionsError(
                f"--target {self.target} stores every image as {wanted}, not --image-format {self.image.image_format}"
            )
        if self.workers is not None and self.workers < 1:
            raise OptionsError(f"--workers must be >= 1, got {self.workers}")
        if self.resume and self.overwrite:
            raise OptionsError(
                "--resume finishes the conversion in OUTPUT and --overwrite starts it over: pass one of them"
            )
        task = self.tasks.task
        if self.shard_pattern is not None and (task != "classification" or self.labels is not None):
            raise OptionsError(
                f"SOURCE pattern {self.shard_pattern} selects WebDataset shards, whose samples hold their labels: "
                "--labels, --annotations and --masks need a SOURCE folder"
            )
        if task != "classification":
            flag = "--annotations" if task == "detection" else "--masks"
            if self.labels is not None:
                raise OptionsError(f"{flag} names the images; --labels cannot be used with it")
            if self.plan.empty_classes != "keep":
                raise OptionsError(
                    f"--empty-classes {self.plan.empty_classes} applies to single-label "
                    f"classification; {task} keeps every class and its id"
                )
            if self.plan.max_per_class is not None:
                raise OptionsError(f"--max-per-class applies to single-label classification, not {task}")
        if self.dedupe.group_by is not None and self.labels is None:
            raise OptionsError(
                f"--group-by {self.dedupe.group_by!r} names a column of the label file: it needs "
                "--labels (--group-pattern groups by path)"
            )
        if task == "segmentation" and self.classes is None:
            raise OptionsError("--masks needs --classes FILE naming the mask values 0, 1, ... in order")

    def manifest_options(self) -> dict[str, Any]:
        """The options that decide the output bytes, as recorded in the manifest."""
        split = self.plan.split_fractions
        return {
            "seed": self.plan.seed,
            "num_shards": self.plan.num_shards,
            "shard_size": self.plan.shard_size,
            "split": None if split is None else ",".join(f"{n}={fraction_text(f)}" for n, f in split),
            "max_per_class": self.plan.max_per_class,
            "resize": self.image.resize,
            "max_side": self.image.max_side,
            "image_format": self.image.image_format,
            "quality": self.image.quality,
            "max_pixels": self.image.max_pixels,
            # These decide which inputs are rejected (image_memory, image_timeout), hence the output.
            "max_image_memory": self.image.max_image_memory,
            "image_timeout": self.image.image_timeout,
            "isolate": self.image.isolate,
            "layout": self.layout if self.labels is None else "label_file",
            "label_file": None if self.labels is None else os.path.basename(self.labels),
            "classes_fixed": self.classes is not None,
            "allow_outside_source": self.allow_outside_source,
            "index": self.index,
            "target": self.target,
            # Only when not the default, so that every manifest written before the option stays as it was.
            **({} if self.plan.empty_classes == "keep" else {"empty_classes": self.plan.empty_classes}),
            **self.tasks.manifest_options(),
            **self.dedupe.manifest_options(),
            **self.format_manifest_options(),
        }

    def format_manifest_options(self) -> dict[str, Any]:
        """The file format and its options; none for TFRecord, whose manifests stay as they were."""
        if self.file_format == formats.DEFAULT:
            return {}
        return {"file_format": self.file_format, "format_options": self.format_options}


def fraction_text(f: Fraction) -> str:
    """`f` exactly: as a decimal when it has one ("0.8", "0.125"), else as "p/q" ("1/3").

    The manifest and `--resume` compare it: "%g" made 1/3 and 0.3333333 both "0.333333",
    which plan differently.
    """
    rest, digits = f.denominator, 0
    for prime in (2, 5):
        count = 0
        while rest % prime == 0:
            rest //= prime
            count += 1
        digits = max(digits, count)
    if rest != 1:
        return f"{f.numerator}/{f.denominator}"
    if digits == 0:
        return str(f.numerator)
    scaled = str(f.numerator * 10**digits // f.denominator).rjust(digits + 1, "0")
    return f"{scaled[:-digits]}.{scaled[-digits:]}"
