"""The files `tfds.builder_from_directory(OUTPUT)` reads, as pure functions of the manifest.

tensorflow-datasets rebuilds a dataset without its generation code from three
kinds of files in the folder (`tfds.core.read_only_builder`):

- ``dataset_info.json``: the `DatasetInfo` proto in proto3's JSON mapping
  (camelCase names, int64 values as strings): name, version, file format,
  supervised keys, and per split its shard lengths, bytes and file-name
  template. The template (`naming.tfds_template`) lets tfds find our shard
  names as they are, in either file format (`prep.core.formats`).
- ``features.json``: `FeaturesDict.to_json()` of our record schema, one entry
  per key of `schema`, so tfds parses and decodes every field we write.
- ``image.class.label.labels.txt``: the class names, in label-id order.
  `ClassLabel.load_metadata` reads ``{feature name, '/' as '.'}.labels.txt`` (see
  detection for a nested feature's name).

The other tasks (`schema.TASKS`) name their features by the keys Model Garden reads (a
top-level name such as ``image/class/label`` is the Example key as it is; a nested one is
its parent's name, '/', its own):

- multilabel: ``image/class/label`` a `Sequence(ClassLabel)` (names in the same
  labels file as classification), ``image/class/text`` a `Sequence(Text)`.
- detection: one `Sequence` named ``image/object`` of a `FeaturesDict` per object:
  ``bbox/yxyx`` a `BBoxFeature`, ``class/label`` a `ClassLabel`, ``class/text``, ``area``,
  ``is_crowd`` and ``difficult``. tfds flattens a nested name with '/' into the Example
  key, so these are read from ``image/object/bbox/yxyx`` (`schema.OBJECT_BBOX`, written for
  tfds: a `BBoxFeature` is one [ymin, xmin, ymax, xmax] list, where Model Garden reads four
  lists, which tfds is not told about) and from Model Garden's own keys for the rest. The
  ClassLabel has len(labels) + 1 names, as ids start at 1: name 0 is the background; its
  names file is ``image.object-class.label.labels.txt`` (tfds names a nested feature's file
  {parent, '/' as '.'}-{name, '/' as '.'}). ``image/object/mask`` is a separate
  `Sequence(Image)` of single-channel PNGs: a dataset written without masks reads as an
  empty sequence there, which inside ``image/object`` would disagree with the boxes' count.
- segmentation: ``image/segmentation/class/encoded`` is a `LabeledImage` (the
  class map, one channel, names in ``image.segmentation.class.encoded.labels.txt``).

Everything is derived from the parts of the manifest that do not change between
runs, and serialized with sorted keys, so the files are byte-identical for the
same input and options. Nothing here imports tensorflow-datasets.
"""

from __future__ import annotations

import json
from typing import Any

from prep.core import formats, schema
from prep.core.manifest import Manifest
from prep.core.naming import tfds_template

NAME = "tfrecord_prep"  # fixed, not the folder's name: the bytes must not depend on where OUTPUT is
VERSION = "1.0.0"
INFO_FILE = "dataset_info.json"
FEATURES_FILE = "features.json"
DESCRIPTION = (
    "Images and labels converted by tfrecord-prep; manifest.json in this folder describes "
    "the inputs, options and every shard."
)

_FEATURES = "tensorflow_datasets.core.features."


BACKGROUND = "background"  # detection: the name of class id 0, which no object has
OBJECTS = "image/object"  # detection: the Sequence of objects; its features' Example keys start with this + '/'
BBOX = schema.OBJECT_BBOX.removeprefix(OBJECTS + "/")  # detection: the BBoxFeature's name in OBJECTS

# The feature whose class names the labels file holds, per task: its path of names in the FeaturesDict.
_LABELLED = {
    "classification": (schema.LABEL,),
    "multilabel": (schema.LABEL,),
    "detection": (OBJECTS, schema.OBJECT_LABEL.removeprefix(OBJECTS + "/")),
    "segmentation": (schema.SEGMENTATION,),
}


def labels_file(task: str = "classification") -> str:
    """Where tfds looks for the class names of `task`'s label feature: the names of the path with '/'
    as '.', joined by '-' (`tfds.features.feature.convert_feature_name_to_filename`)."""
    return "-".join(name.replace("/", ".") for name in _LABELLED[task]) + ".labels.txt"


def file_names(task: str = "classification") -> tuple[str, ...]:
    """The names of every file `files` returns for a dataset of `task`, for `verify` and tests."""
    return INFO_FILE, FEATURES_FILE, labels_file(task)


# Written by an earlier version (detection's names file when the boxes were four lists of floats).
_FORMER_NAMES = ("image.object.class.label.labels.txt",)


def all_file_names() -> tuple[str, ...]:
    """Every name `files` can write, whatever the task, and that earlier versions wrote (what
    `--overwrite` may delete)."""
    return tuple(dict.fromkeys([name for task in schema.TASKS for name in file_names(task)] + list(_FORMER_NAMES)))


def class_names(manifest: Manifest) -> list[str]:
    """The names in the labels file: the labels, and for detection first a name for id 0 that no
    label has (ids start at 1)."""
    labels = list(manifest.labels)
    if manifest.task != "detection":
        return labels
    background = BACKGROUND
    while background in labels:
        background = "_" + background
    return [background] + labels


def _feature(key: str, num_classes: int) -> dict[str, Any]:
    """The `to_json()` entry of one record key: what tfds decodes it to."""
    if key == schema.ENCODED:
        # Three channels, as `loaders` gives: tfds decodes with decode_image(channels=3), which turns
        # our one-channel JPEGs and PNGs into RGB, so every example has the same shape.
        return {
            "pythonClassName": _FEATURES + "image_feature.Image",
            "image": {"shape": {"dimensions": ["-1", "-1", "3"]}, "dtype": "uint8"},
        }
    if key == schema.LABEL:
        return {
            "pythonClassName": _FEATURES + "class_label_feature.ClassLabel",
            "classLabel": {"numClasses": str(num_classes)},
        }
    if key in schema.INT64_FEATURES:
        return {
            "pythonClassName": _FEATURES + "scalar.Scalar",
            "tensor": {"shape": {}, "dtype": "int64", "encoding": "none"},
        }
    if key in schema.BYTES_FEATURES:
        return {"pythonClassName": _FEATURES + "text_feature.Text", "text": {}}
    raise ValueError(f"no tfds feature for record key {key!r}")


_TEXT = {"pythonClassName": _FEATURES + "text_feature.Text", "text": {}}


def _tensor(dtype: str) -> dict[str, Any]:
    return {
        "pythonClassName": _FEATURES + "tensor_feature.Tensor",
        "tensor": {"shape": {}, "dtype": dtype, "encoding": "none"},
    }


def _class_label(num_classes: int) -> dict[str, Any]:
    return {
        "pythonClassName": _FEATURES + "class_label_feature.ClassLabel",
        "classLabel": {"numClasses": str(num_classes)},
    }


def _sequence(feature: dict[str, Any]) -> dict[str, Any]:
    return {
        "pythonClassName": _FEATURES + "sequence_feature.Sequence",
        "sequence": {"feature": feature, "length": "-1"},
    }


def _bbox() -> dict[str, Any]:
    return {
        "pythonClassName": _FEATURES + "bounding_boxes.BBoxFeature",
        "boundingBox": {"shape": {"dimensions": ["4"]}, "dtype": "float32", "bboxFormat": "REL_YXYX"},
    }


def _png(extra: dict[str, Any] | None = None, name: str = "image_feature.Image") -> dict[str, Any]:
    return {
        "pythonClassName": _FEATURES + name,
        "image": {
            "shape": {"dimensions": ["-1", "-1", "1"]},
            "dtype": "uint8",
            "encodingFormat": "png",
            **(extra or {}),
        },
    }


def _task_features(task: str, num_classes: int) -> dict[str, Any]:
    """The entries of the keys only `task`'s records hold (`schema`)."""
    if task == "multilabel":
        return {schema.LABEL: _sequence(_class_label(num_classes)), schema.TEXT: _sequence(_TEXT)}
    common = {schema.SOURCE_ID: _TEXT}
    if task == "segmentation":
        return common | {
            schema.SEGMENTATION: _png(
                {"useColormap": True, "label": {"numClasses": str(num_classes)}}, "labeled_image.LabeledImage"
            ),
            schema.SEGMENTATION_FORMAT: _TEXT,
        }
    objects = {
        schema.OBJECT_BBOX: _bbox(),
        schema.OBJECT_LABEL: _class_label(num_classes + 1),  # 0: background
        schema.OBJECT_TEXT: _TEXT,
        schema.OBJECT_AREA: _tensor("float32"),
        schema.OBJECT_CROWD: _tensor("int64"),
        schema.OBJECT_DIFFICULT: _tensor("int64"),
    }
    nested = {key.removeprefix(OBJECTS + "/"): feature for key, feature in sorted(objects.items())}
    return common | {
        OBJECTS: _sequence(
            {"pythonClassName": _FEATURES + "features_dict.FeaturesDict", "featuresDict": {"features": nested}}
        ),
        schema.OBJECT_MASK: _sequence(_png()),
    }


def features_json(labels: list[str], task: str = "classification") -> dict[str, Any]:
    """`FeaturesDict.to_json()` of the record schema of `task` (keys as stored, e.g. ``image/encoded``)."""
    if task == "classification":
        features = {key: _feature(key, len(labels)) for key in schema.ALL_FEATURES}
    else:
        common = [k for k in schema.ALL_FEATURES if k not in (schema.LABEL, schema.TEXT)]
        features = {key: _feature(key, len(labels)) for key in common} | _task_features(task, len(labels))
    return {
        "type": _FEATURES + "features_dict.FeaturesDict",
        "content": {"features": dict(sorted(features.items()))},
        "proto_cls": "tensorflow_datasets.FeaturesDict",
    }


def dataset_info_json(manifest: Manifest) -> dict[str, Any]:
    """The `DatasetInfo` proto, as JSON, of a dataset described by `manifest`."""
    shard_format = formats.get(manifest.file_format)
    splits = []
    for name, info in sorted(manifest.splits.items()):
        splits.append(
            {
                "name": name,
                "numBytes": str(info.bytes),
                "shardLengths": [str(shard.examples) for shard in info.shards],
                "filepathTemplate": tfds_template(shard_format.suffix),
            }
        )
    return {
        "name": NAME,
        "version": VERSION,
        "description": DESCRIPTION,
        "fileFormat": shard_format.tfds_format,
        "splits": splits,
    } | _supervised(manifest.task)


def _supervised(task: str) -> dict[str, Any]:
    """as_supervised=True gives (image, target) pairs, read by these keys of the flat feature dict;
    detection has no single target (as tfds' own coco), so none."""
    target = {"classification": schema.LABEL, "multilabel": schema.LABEL, "segmentation": schema.SEGMENTATION}
    if task not in target:
        return {}
    return {"supervisedKeys": {"tuple": {"items": [{"featureKey": schema.ENCODED}, {"featureKey": target[task]}]}}}


def _dumps(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=True) + "\n").encode()


def files(manifest: Manifest) -> dict[str, bytes]:
    """``{file name: bytes}`` of the tfds metadata for `manifest`, in the order to write them."""
    labels = list(manifest.labels)
    return {
        labels_file(manifest.task): "".join(name + "\n" for name in class_names(manifest)).encode("utf-8"),
        FEATURES_FILE: _dumps(features_json(labels, manifest.task)),
        INFO_FILE: _dumps(dataset_info_json(manifest)),
    }
