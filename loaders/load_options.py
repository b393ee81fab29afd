"""`LoadOptions`: every knob of a loader pipeline, checked once. Pure Python."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Callable

from loaders.epoch import REMAINDERS
from prep.core.errors import LoaderError

ON_CORRUPT = ("error", "skip")

NORMALIZATIONS = ("unit", "symmetric", "none")
EVAL_CROPS = ("center", "resize")
OUTPUTS = ("tuple", "features", "ragged")
TASKS_WITH_TARGETS = ("detection", "segmentation")  # tasks whose annotations follow the pixels


def _pair(value, name: str, low: float, high: float | None = None) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise LoaderError(f"{name} must be a pair of numbers, got {value!r}") from None
    if not low <= a <= b or (high is not None and b > high):
        top = f" <= {high}" if high is not None else ""
        raise LoaderError(f"{name} must satisfy {low} <= low <= high{top}, got {value!r}")
    return a, b


@dataclasses.dataclass(frozen=True)
class LoadOptions:
    """How to read, decode, augment and batch. Defaults depend on `training`: see `resolved`.

    Attributes:
        image_size: output (height, width).
        training: random-resized crop, flip, shuffling, dropped partial batches; False gives a
            deterministic, unshuffled evaluation pipeline.
        seed: seeds the shard order, the record shuffle and the augmentation.
        shuffle_files: reshuffle the shard order every epoch (default: `training`).
        shuffle_buffer: records in the shuffle buffer; 0 disables (default 1024 when training, 0 else).
        deterministic: keep tf.data's element order reproducible (default: not `training`).
        cycle_length: shard ranges read concurrently by `interleave`.
        remainder: "drop" or "pad": how inputs are balanced across pipelines (see `loaders.epoch`);
            "pad" drops nothing and fills every batch, padding with sample weight 0.
        drop_remainder: drop partial batches (default: `training`); needed for static shapes.
            Ignored with remainder="pad", whose batches are all full.
        area_range, aspect_ratio_range: of the training random-resized crop.
        central_fraction: evaluation centre crop, as a fraction of the largest centred box with
            the output's aspect ratio.
        eval_crop: "center" (centre crop then resize) or "resize" (whole image, resized). Default:
            "center" for classification and multi-label, "resize" for detection and segmentation
            (which refuse "center": it would cut boxes and masks).
        letterbox: detection and segmentation evaluation: resize keeping the aspect ratio and pad
            at the bottom and right (images with 0, masks with the ignore value) instead of stretching.
        max_boxes: detection: boxes per image in the padded output (default: the split's
            `max_boxes` from the manifest, so nothing is cut). A smaller value keeps each image's
            first `max_boxes` boxes (record order, after the crop), and `load` logs a warning.
        min_box_visibility: detection training: a box cut by the crop is kept when at least this
            share of its area is left in the crop (clipped to it), else dropped with its mask.
        min_object_covered: detection training: the crop covers at least this share of some object
            (SSD's sampler: `sample_distorted_bounding_box` with the objects as bounding boxes;
            after 50 failed attempts, the whole image). Images without objects: this share of the image.
        flip: random horizontal flip (default: `training`).
        augment: ``f(images, labels) -> (images, labels)`` on a batch of float32 images in
            [0, 255] after crop and flip, before normalisation.
        normalize: "unit" ([0, 1]), "symmetric" ([-1, 1]) or "none" ([0, 255]).
        cache: False, True (memory) or a file name prefix; see `loaders.dataset` for placement.
        rebalance: keep records with probability min_n / n_class so the classes arrive uniformly.
        aspect_buckets: aspect ratios (width / height) to batch by; each batch holds one
            bucket's examples at that bucket's output size (area of `image_size`).
        output: "tuple" for ``(image, label[, weight])`` (detection: ``(image, targets[, weight])``),
            "ragged" (detection: boxes and classes as RaggedTensors) or "features" for a dict.
        threads: size of a private thread pool for this pipeline; 0 uses TensorFlow's shared pool.
        repeat: repeat epochs without end (each with a new shard order and shuffle); use with
            ``fit(steps_per_epoch=loaders.steps_per_epoch(...))``, which Keras needs for a
            distributed dataset to run more than one epoch.
        on_corrupt: "error" (default): a record that fails its CRC stops reading with an error
            naming the shard and the range of records being read (`prep verify` names the record).
            "skip": shards are checked when the
            dataset is built; damaged ones are read from copies of their good records (see
            `loaders.repair`), the skipped records logged per shard, and every pipeline still
            gets an equal share.
    """

    image_size: tuple[int, int] = (224, 224)
    training: bool = True
    seed: int = 0
    shuffle_files: bool | None = None
    shuffle_buffer: int | None = None
    deterministic: bool | None = None
    cycle_length: int = 8
    remainder: str = "drop"
    drop_remainder: bool | None = None
    area_range: tuple[float, float] = (0.08, 1.0)
    aspect_ratio_range: tuple[float, float] = (3 / 4, 4 / 3)
    central_fraction: float = 0.875
    eval_crop: str | None = None
    letterbox: bool = False
    max_boxes: int | None = None
    min_box_visibility: float = 0.3
    min_object_covered: float = 0.5
    flip: bool | None = None
    augment: Callable | None = None
    normalize: str = "unit"
    cache: bool | str = False
    rebalance: bool = False
    aspect_buckets: tuple[float, ...] | None = None
    output: str = "tuple"
    threads: int = 0
    repeat: bool = False
    on_corrupt: str = "error"

    def __post_init__(self):
        self._check_types()
        try:
            h, w = (int(v) for v in self.image_size)
        except (TypeError, ValueError):
            raise LoaderError(f"image_size must be (height, width), got {self.image_size!r}") from None
        if h < 1 or w < 1:
            raise LoaderError(f"image_size must be positive, got {self.image_size!r}")
        object.__setattr__(self, "image_size", (h, w))
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise LoaderError(f"seed must be an int in [0, 2**63), got {self.seed!r}")
        if self.shuffle_buffer is not None and self.shuffle_buffer < 0:
            raise LoaderError(f"shuffle_buffer must be >= 0, got {self.shuffle_buffer}")
        if self.cycle_length < 1:
            raise LoaderError(f"cycle_length must be >= 1, got {self.cycle_length}")
        if self.on_corrupt not in ON_CORRUPT:
            raise LoaderError(f"on_corrupt must be one of {', '.join(ON_CORRUPT)}, got {self.on_corrupt!r}")
        if self.remainder not in REMAINDERS:
            raise LoaderError(f"remainder must be one of {', '.join(REMAINDERS)}, got {self.remainder!r}")
        object.__setattr__(self, "area_range", _pair(self.area_range, "area_range", 1e-6, 1.0))
        object.__setattr__(self, "aspect_ratio_range", _pair(self.aspect_ratio_range, "aspect_ratio_range", 1e-6))
        if not 0 < self.central_fraction <= 1:
            raise LoaderError(f"central_fraction must be in (0, 1], got {self.central_fraction}")
        if self.eval_crop is not None and self.eval_crop not in EVAL_CROPS:
            raise LoaderError(f"eval_crop must be one of {', '.join(EVAL_CROPS)}, got {self.eval_crop!r}")
        if self.augment is not None and not callable(self.augment):
            raise LoaderError(f"augment must be callable, got {self.augment!r}")
        if self.normalize not in NORMALIZATIONS:
            raise LoaderError(f"normalize must be one of {', '.join(NORMALIZATIONS)}, got {self.normalize!r}")
        if self.output not in OUTPUTS:
            raise LoaderError(f"output must be one of {', '.join(OUTPUTS)}, got {self.output!r}")
        if self.max_boxes is not None and self.max_boxes < 1:
            raise LoaderError(f"max_boxes must be >= 1, got {self.max_boxes}")
        if not 0 < self.min_box_visibility <= 1:
            raise LoaderError(f"min_box_visibility must be in (0, 1], got {self.min_box_visibility}")
        if not 0 <= self.min_object_covered <= 1:
            raise LoaderError(f"min_object_covered must be in [0, 1], got {self.min_object_covered}")
        if self.threads < 0:
            raise LoaderError(f"threads must be >= 0, got {self.threads}")
        if self.aspect_buckets is not None:
            try:
                buckets = tuple(float(a) for a in self.aspect_buckets)
            except (TypeError, ValueError):
                buckets = ()
            increasing = list(buckets) == sorted(set(buckets))
            if not buckets or not increasing or any(not math.isfinite(a) or a <= 0 for a in buckets):
                raise LoaderError(f"aspect_buckets must be increasing positive ratios, got {self.aspect_buckets!r}")
            object.__setattr__(self, "aspect_buckets", buckets)
        if self.rebalance and not self.training:
            raise LoaderError("rebalance=True is for training; evaluation reads the split as it is")
        if self.remainder == "pad" and (self.rebalance or self.aspect_buckets):
            raise LoaderError(
                "remainder='pad' reads every record once and fills whole batches; it cannot be "
                "combined with rebalance or aspect_buckets, which choose and group records"
            )

    def _check_types(self) -> None:
        """Flags must be bools and counts ints: `flip="no"` would otherwise be true, and
        `repeat="no"` an endless dataset."""
        for name in ("training", "rebalance", "repeat", "letterbox"):
            if not isinstance(getattr(self, name), bool):
                raise LoaderError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("shuffle_files", "deterministic", "drop_remainder", "flip"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise LoaderError(f"{name} must be True, False or None, got {getattr(self, name)!r}")
        for name, optional in (
            ("cycle_length", False),
            ("threads", False),
            ("shuffle_buffer", True),
            ("max_boxes", True),
        ):
            value = getattr(self, name)
            if not (optional and value is None) and (
                not isinstance(value, numbers.Integral) or isinstance(value, bool)
            ):
                raise LoaderError(f"{name} must be an int{' or None' if optional else ''}, got {value!r}")
        for name in ("central_fraction", "min_box_visibility", "min_object_covered"):
            if not isinstance(getattr(self, name), numbers.Real) or isinstance(getattr(self, name), bool):
                raise LoaderError(f"{name} must be a number, got {getattr(self, name)!r}")
        if not isinstance(self.cache, (bool, str, os.PathLike)):
            raise LoaderError(f"cache must be False, True or a file name prefix, got {self.cache!r}")

    def resolved(self, task: str = "classification") -> LoadOptions:
        """A copy with every None default filled in from `training` (and `eval_crop` from the task)."""
        t = self.training
        targets = task in TASKS_WITH_TARGETS
        return dataclasses.replace(
            self,
            eval_crop=("resize" if targets else "center") if self.eval_crop is None else self.eval_crop,
            shuffle_files=t if self.shuffle_files is None else self.shuffle_files,
            shuffle_buffer=(1024 if t else 0) if self.shuffle_buffer is None else self.shuffle_buffer,
            deterministic=(not t) if self.deterministic is None else self.deterministic,
            drop_remainder=t if self.drop_remainder is None else self.drop_remainder,
            flip=t if self.flip is None else self.flip,
        )

    def check_task(self, task: str) -> None:
        """Raises LoaderError for an option the dataset's task cannot honour."""
        targets = task in TASKS_WITH_TARGETS
        if targets and self.eval_crop == "center":
            raise LoaderError(
                f"eval_crop='center' would cut the {task} targets; use 'resize' (the default) or letterbox=True"
            )
        if self.letterbox and not targets:
            raise LoaderError(f"letterbox is for detection and segmentation, not {task}")
        if self.output == "ragged" and task != "detection":
            raise LoaderError(f"output='ragged' is for detection, not {task}")
        if self.max_boxes is not None and task != "detection":
            raise LoaderError(f"max_boxes is for detection, not {task}")
        if self.rebalance and task != "classification":
            raise LoaderError(
                f"rebalance needs one label per record; a {task} dataset has none (use "
                f"class-aware sampling of your own in `augment`, or weights)"
            )
        if self.aspect_buckets and targets:
            raise LoaderError(f"aspect_buckets is not supported for {task} yet")

    def bucket_sizes(self) -> tuple[tuple[int, int], ...]:
        """Output (height, width) of each aspect bucket: the area of `image_size` at the bucket's ratio."""
        h, w = self.image_size
        area = h * w
        return tuple(
            (max(1, round(math.sqrt(area / ratio))), max(1, round(math.sqrt(area * ratio))))
            for ratio in self.aspect_buckets or ()
        )

    def bucket_boundaries(self) -> tuple[float, ...]:
        """Aspect ratios between neighbouring buckets (geometric means): an example goes to the nearest."""
        b = self.aspect_buckets or ()
        return tuple(math.sqrt(x * y) for x, y in zip(b, b[1:]))
