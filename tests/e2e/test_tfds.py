"""tensorflow-datasets reads `prep convert` output as it is: `tfds.builder_from_directory(OUTPUT)`.

Every record through tfds must equal what our shards hold: each field, the
decoded image (RGB and grayscale JPEG, RGB and grayscale PNG, all as 3 channels),
the labels in the manifest's order, split sizes and shard lengths.
"""

import json

import numpy as np
import pytest

from prep.core import schema, tfds_meta
from prep.core.naming import TFDS_TEMPLATE, ShardName
from prep.verify import verify
from tests.support.datasets import copy
from tests.support.imagegen import image_bytes, write_class_tree
from tests.support.shards import convert_with_cli, read_dataset

tfds = pytest.importorskip("tensorflow_datasets")
tf = pytest.importorskip("tensorflow")

# (Pillow mode, format, stored image/format, channels): every kind of image the writer stores.
CASES = [("RGB", "JPEG", "jpeg", 3), ("L", "JPEG", "jpeg", 1), ("RGB", "PNG", "png", 3), ("L", "PNG", "png", 1)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfds")
    write_class_tree(root / "src", {"zebra": 6, "ant": 4, "moth": 3}, size=(18, 12), png_every=2)
    for i, (mode, fmt, _, _) in enumerate(CASES):
        ext = "png" if fmt == "PNG" else "jpg"
        (root / "src" / "moth" / f"{mode}_{i}.{ext}").write_bytes(image_bytes(fmt, size=(15, 9), mode=mode, seed=i))
    return convert_with_cli(
        root / "src", root / "out", "--split", "train=0.6,validation=0.4", "--num-shards", 2, "--no-progress"
    )


def test_every_record_reads_back_through_tfds(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    builder = tfds.builder_from_directory(str(dataset))
    assert builder.info.features[schema.LABEL].names == manifest["labels"] == ["ant", "moth", "zebra"]
    seen = set()
    for split, shards in read_dataset(dataset).items():
        info = builder.info.splits[split]
        assert info.shard_lengths == [s["examples"] for s in manifest["splits"][split]["shards"]]
        assert info.num_examples == manifest["splits"][split]["examples"]
        ours = [record for shard in shards for record in shard]
        theirs = list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))
        assert len(theirs) == len(ours)
        for mine, read in zip(ours, theirs):
            for key in schema.ALL_FEATURES:
                if key != schema.ENCODED:
                    assert read[key] == mine[key], key
            decoded = tf.io.decode_image(mine[schema.ENCODED], channels=3).numpy()
            assert read[schema.ENCODED].dtype == np.uint8 and read[schema.ENCODED].shape[-1] == 3
            np.testing.assert_array_equal(read[schema.ENCODED], decoded)
            seen.add((mine[schema.FORMAT].decode(), int(mine[schema.CHANNELS])))
    assert seen == {(fmt, channels) for _, _, fmt, channels in CASES}  # every kind of image we write


def test_as_supervised_gives_image_label_pairs(dataset):
    builder = tfds.builder_from_directory(str(dataset))
    pairs = list(tfds.as_numpy(builder.as_dataset(split="validation", as_supervised=True, shuffle_files=False)))
    records = [r for shard in read_dataset(dataset)["validation"] for r in shard]
    assert [int(label) for _, label in pairs] == [r[schema.LABEL] for r in records]
    assert all(image.ndim == 3 and image.shape[-1] == 3 for image, _ in pairs)


def test_features_json_is_what_tfds_itself_writes(dataset):
    """Our generated description equals tfds's own serialization of the same features."""
    labels = json.loads((dataset / "manifest.json").read_text())["labels"]
    features = {key: tfds.features.Text() for key in schema.BYTES_FEATURES}
    features.update({key: tfds.features.Scalar(dtype=np.int64) for key in schema.INT64_FEATURES})
    features[schema.ENCODED] = tfds.features.Image(shape=(None, None, 3))
    features[schema.LABEL] = tfds.features.ClassLabel(names=labels)
    assert json.loads((dataset / tfds_meta.FEATURES_FILE).read_text()) == tfds.features.FeaturesDict(features).to_json()


@pytest.mark.parametrize("count", [1, 3, 16, 99_999])
def test_tfds_template_gives_our_shard_names(count):
    for index in {0, count // 2, count - 1}:
        template = tfds.core.ShardedFileTemplate(data_dir="/d", template=TFDS_TEMPLATE, split="train")
        assert (
            template.sharded_filepath(shard_index=index, num_shards=count).name
            == ShardName("train", index, count).filename
        )


def test_metadata_is_written_before_the_manifest_and_verified(dataset, tmp_path):
    names = set(tfds_meta.file_names())
    assert names <= {p.name for p in dataset.iterdir()}
    manifest_time = (dataset / "manifest.json").stat().st_mtime_ns
    assert all((dataset / name).stat().st_mtime_ns <= manifest_time for name in names)
    out = copy(dataset, tmp_path / "out")
    info = json.loads((out / tfds_meta.INFO_FILE).read_text())
    info["splits"][0]["shardLengths"][0] = "1000"
    (out / tfds_meta.INFO_FILE).write_text(json.dumps(info))
    assert [str(p) for p in verify(str(out)).problems] == [
        "dataset_info.json: differs from the tfds metadata of this manifest, so tensorflow-datasets would read "
        "other splits, shard lengths or labels"
    ]
