"""The files `tfds.builder_from_directory(OUTPUT)` reads, as pure functions of the manifest.

tensorflow-datasets rebuilds a dataset without its generation code from three
kinds of files in the folder (`tfds.core.read_only_builder`):

- ``dataset_info.json``: the `DatasetInfo` proto in proto3's JSON mapping
  (camelCase names, int64 values as strings): name, version, file format,
  supervised keys, and per split its shard lengths, bytes and file-name
  template. The template (`naming.TFDS_TEMPLATE`) lets tfds find our shard
  names as they are.
- ``features.json``: `FeaturesDict.to_json()` of our record schema, one entry
  per key of `schema`, so tfds parses and decodes every field we write.
- ``image.class.label.labels.txt``: the class names, in label-id order.
  `ClassLabel.load_metadata` reads ``{feature name, '/' as '.'}.labels.txt``.

Everything is derived from the parts of the manifest that do not change between
runs, and serialized with sorted keys, so the files are byte-identical for the
same input and options. Nothing here imports tensorflow-datasets.
"""

from __future__ import annotations

import json

from prep.core import schema
from prep.core.manifest import Manifest
from prep.core.naming import TFDS_TEMPLATE

NAME = "tfrecord_prep"  # fixed, not the folder's name: the bytes must not depend on where OUTPUT is
VERSION = "1.0.0"
INFO_FILE = "dataset_info.json"
FEATURES_FILE = "features.json"
DESCRIPTION = ("Images and labels converted by tfrecord-prep; manifest.json in this folder describes "
               "the inputs, options and every shard.")

_FEATURES = "tensorflow_datasets.core.features."


def labels_file() -> str:
    """Where tfds looks for the label feature's class names."""
    return schema.LABEL.replace("/", ".") + ".labels.txt"


def file_names() -> tuple[str, ...]:
    """The names of every file `files` returns, for `--overwrite` and `verify`."""
    return INFO_FILE, FEATURES_FILE, labels_file()


def _feature(key: str, num_classes: int) -> dict:
    """The `to_json()` entry of one record key: what tfds decodes it to."""
    if key == schema.ENCODED:
        # Three channels, as `loaders` gives: tfds decodes with decode_image(channels=3), which turns
        # our one-channel JPEGs and PNGs into RGB, so every example has the same shape.
        return {"pythonClassName": _FEATURES + "image_feature.Image",
                "image": {"shape": {"dimensions": ["-1", "-1", "3"]}, "dtype": "uint8"}}
    if key == schema.LABEL:
        return {"pythonClassName": _FEATURES + "class_label_feature.ClassLabel",
                "classLabel": {"numClasses": str(num_classes)}}
    if key in schema.INT64_FEATURES:
        return {"pythonClassName": _FEATURES + "scalar.Scalar",
                "tensor": {"shape": {}, "dtype": "int64", "encoding": "none"}}
    if key in schema.BYTES_FEATURES:
        return {"pythonClassName": _FEATURES + "text_feature.Text", "text": {}}
    raise ValueError(f"no tfds feature for record key {key!r}")


def features_json(labels: list[str]) -> dict:
    """`FeaturesDict.to_json()` of the record schema (keys as stored, e.g. ``image/encoded``)."""
    return {
        "type": _FEATURES + "features_dict.FeaturesDict",
        "content": {"features": {key: _feature(key, len(labels)) for key in schema.ALL_FEATURES}},
        "proto_cls": "tensorflow_datasets.FeaturesDict",
    }


def dataset_info_json(manifest: Manifest) -> dict:
    """The `DatasetInfo` proto, as JSON, of a dataset described by `manifest`."""
    splits = []
    for name, info in sorted(manifest.splits.items()):
        splits.append({
            "name": name,
            "numBytes": str(info.bytes),
            "shardLengths": [str(shard.examples) for shard in info.shards],
            "filepathTemplate": TFDS_TEMPLATE,
        })
    return {
        "name": NAME,
        "version": VERSION,
        "description": DESCRIPTION,
        "fileFormat": "tfrecord",
        "splits": splits,
        # as_supervised=True gives (image, label) pairs, read by these keys of the flat feature dict.
        "supervisedKeys": {"tuple": {"items": [{"featureKey": schema.ENCODED}, {"featureKey": schema.LABEL}]}},
    }


def _dumps(value: dict) -> bytes:
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=True) + "\n").encode()


def files(manifest: Manifest) -> dict[str, bytes]:
    """``{file name: bytes}`` of the tfds metadata for `manifest`, in the order to write them."""
    labels = list(manifest.labels)
    return {
        labels_file(): "".join(name + "\n" for name in labels).encode("utf-8"),
        FEATURES_FILE: _dumps(features_json(labels)),
        INFO_FILE: _dumps(dataset_info_json(manifest)),
    }
