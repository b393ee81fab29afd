"""tensorflow-datasets reads detection, multi-label and segmentation datasets as they are:
`tfds.builder_from_directory(OUTPUT)`, every field of every record equal to what our shards hold.

The box lists are four `Sequence(float32)` features under our (Model Garden's) keys, not a
`BBoxFeature` sequence: tfds would read that from one [ymin, xmin, ymax, xmax] list under one
key, which these records do not have; the last test shows it would then read no boxes at all,
silently, which is why `prep.core.tfds_meta` does not describe them so.
"""

import io
import json

import numpy as np
import pytest
from PIL import Image

from prep.core import schema, tfds_meta
from prep.core.task_record import TaskRecord
from prep.verify import verify
from tests.support import datasets
from tests.support import task_datasets as td

tfds = pytest.importorskip("tensorflow_datasets")
tf = pytest.importorskip("tensorflow")


def ours(out, split, task) -> list[TaskRecord]:
    return [TaskRecord.from_bytes(r, task) for p in sorted(out.glob(f"{split}-*.tfrecord")) for r in datasets.records(p)]


def theirs(out, split) -> list[dict]:
    builder = tfds.builder_from_directory(str(out))
    # One shard at a time, in order (tfds interleaves 16 records from each of 16 files by default).
    read = tfds.ReadConfig(interleave_cycle_length=1)
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False, read_config=read)))


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)))


@pytest.fixture(scope="module")
def detection(tmp_path_factory):
    return td.detection_dataset(tmp_path_factory.mktemp("tfds_det") / "out")


def test_tfds_reads_every_detection_record_with_boxes_classes_and_masks(detection):
    builder = tfds.builder_from_directory(str(detection))
    assert builder.info.features[schema.OBJECT_LABEL].names == ["background", *td.DETECTION_LABELS]
    assert builder.info.splits["train"].shard_lengths == [4, 4, 4]
    total_boxes = 0
    for split in ("train", "validation"):
        mine, read = ours(detection, split, "detection"), theirs(detection, split)
        assert len(read) == len(mine) == builder.info.splits[split].num_examples
        for r, t in zip(mine, read):
            n = len(r.objects)
            total_boxes += n
            assert t[schema.SOURCE_ID] == r.source_id.encode() and t[schema.FILENAME] == r.filename.encode()
            for key, attr in ((schema.OBJECT_XMIN, "xmin"), (schema.OBJECT_YMIN, "ymin"), (schema.OBJECT_XMAX, "xmax"),
                              (schema.OBJECT_YMAX, "ymax"), (schema.OBJECT_AREA, "area")):
                assert t[key].dtype == np.float32 and t[key].shape == (n,)
                np.testing.assert_array_equal(t[key], np.array([getattr(o, attr) for o in r.objects], np.float32))
            assert t[schema.OBJECT_LABEL].tolist() == [o.label for o in r.objects]
            names = builder.info.features[schema.OBJECT_LABEL].names
            assert [names[i] for i in t[schema.OBJECT_LABEL]] == [o.text for o in r.objects]
            assert t[schema.OBJECT_TEXT].tolist() == [o.text.encode() for o in r.objects]
            assert t[schema.OBJECT_CROWD].tolist() == [o.crowd for o in r.objects]
            masks = t[schema.OBJECT_MASK]
            assert masks.shape == ((n, r.height, r.width, 1) if n else (0, 0, 0, 1))  # tfds: an empty image list
            for m, o in zip(masks, r.objects):
                np.testing.assert_array_equal(m[..., 0], pixels(o.mask))
            np.testing.assert_array_equal(t[schema.ENCODED], tf.io.decode_image(r.encoded, channels=3).numpy())
    assert total_boxes == datasets.load(detection)["inputs"]["boxes"]["written"] > 0


def test_features_json_is_what_tfds_itself_writes_for_every_task():
    f = tfds.features
    common = {key: f.Text() for key in (schema.FORMAT, schema.FILENAME, schema.SHA256)}
    common |= {key: f.Scalar(dtype=np.int64) for key in (schema.HEIGHT, schema.WIDTH, schema.CHANNELS)}
    common[schema.ENCODED] = f.Image(shape=(None, None, 3))
    labels = ["a", "b", "c"]
    expected = {
        "multilabel": common | {schema.LABEL: f.Sequence(f.ClassLabel(names=labels)),
                                schema.TEXT: f.Sequence(f.Text())},
        "segmentation": common | {
            schema.SOURCE_ID: f.Text(), schema.SEGMENTATION_FORMAT: f.Text(),
            schema.SEGMENTATION: f.LabeledImage(labels=labels, shape=(None, None, 1), encoding_format="png")},
        "detection": common | {
            schema.SOURCE_ID: f.Text(),
            **{k: f.Sequence(np.float32) for k in (schema.OBJECT_XMIN, schema.OBJECT_YMIN, schema.OBJECT_XMAX,
                                                    schema.OBJECT_YMAX, schema.OBJECT_AREA)},
            schema.OBJECT_LABEL: f.Sequence(f.ClassLabel(names=["background", *labels])),
            schema.OBJECT_TEXT: f.Sequence(f.Text()),
            schema.OBJECT_CROWD: f.Sequence(np.int64), schema.OBJECT_DIFFICULT: f.Sequence(np.int64),
            schema.OBJECT_MASK: f.Sequence(f.Image(shape=(None, None, 1), encoding_format="png"))},
    }
    for task, features in expected.items():
        assert tfds_meta.features_json(labels, task) == f.FeaturesDict(features).to_json(), task


def test_a_detection_dataset_without_masks_reads_with_empty_mask_sequences(tmp_path):
    records = td.detection_records(n=6, masks=False)
    out = td.write(tmp_path / "out", "detection", td.DETECTION_LABELS, {"train": records}, 2)
    assert verify(str(out), deep=True).ok
    read = theirs(out, "train")
    mine = ours(out, "train", "detection")
    assert [t[schema.OBJECT_LABEL].tolist() for t in read] == [[o.label for o in r.objects] for r in mine]
    assert all(t[schema.OBJECT_MASK].shape[0] == 0 for t in read)


def test_tfds_reads_multilabel_and_segmentation_datasets(tmp_path):
    out = td.multilabel_dataset(tmp_path / "ml")
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features[schema.LABEL].feature.names == td.MULTILABEL_LABELS
    mine, read = ours(out, "train", "multilabel"), theirs(out, "train")
    assert [t[schema.LABEL].tolist() for t in read] == [list(r.labels) for r in mine]
    assert any(len(r.labels) > 1 for r in mine) and any(not r.labels for r in mine)
    assert [t[schema.TEXT].tolist() for t in read] == [[x.encode() for x in r.texts] for r in mine]
    pairs = list(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True, shuffle_files=False)))
    assert [p[1].tolist() for p in pairs] == [list(r.labels) for r in mine]

    out = td.segmentation_dataset(tmp_path / "seg")
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features[schema.SEGMENTATION].names == td.SEGMENTATION_LABELS
    mine, read = ours(out, "train", "segmentation"), theirs(out, "train")
    assert len(read) == len(mine) == 8
    for r, t in zip(mine, read):
        assert t[schema.SEGMENTATION].shape == (r.height, r.width, 1)
        np.testing.assert_array_equal(t[schema.SEGMENTATION][..., 0], pixels(r.segmentation))
    assert 255 in np.unique(read[0][schema.SEGMENTATION])  # the ignore value passes through as it is
    image, target = next(iter(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True,
                                                               shuffle_files=False))))
    assert image.shape[-1] == 3 and target.shape[-1] == 1


def test_a_bbox_feature_sequence_would_read_no_boxes_from_these_records(detection, tmp_path):
    """Why the boxes are not a BBoxFeature: tfds looks for one [ymin, xmin, ymax, xmax] list under one key
    and, not finding it, reads every record as having no boxes, without an error."""
    out = datasets.copy(detection, tmp_path / "out")
    features = json.loads((out / tfds_meta.FEATURES_FILE).read_text())["content"]["features"]
    for key in (schema.OBJECT_XMIN, schema.OBJECT_YMIN, schema.OBJECT_XMAX, schema.OBJECT_YMAX):
        del features[key]
    bbox = tfds.features.FeaturesDict({"image/object/bbox": tfds.features.Sequence(tfds.features.BBoxFeature())})
    features |= bbox.to_json()["content"]["features"]
    doc = json.loads((out / tfds_meta.FEATURES_FILE).read_text())
    doc["content"]["features"] = features
    (out / tfds_meta.FEATURES_FILE).write_text(json.dumps(doc))
    read = theirs(out, "train")
    assert sum(len(o.objects) for o in ours(out, "train", "detection")) > 0
    assert all(t["image/object/bbox"].shape == (0, 4) for t in read)  # every box lost, silently
    assert verify(str(out)).problems[0].file == tfds_meta.FEATURES_FILE  # verify names the changed file


def assert_tfds_reads(out, task) -> int:
    """Every record of every split through tfds equals ours; returns the records compared."""
    builder = tfds.builder_from_directory(str(out))
    manifest = datasets.load(out)
    compared = 0
    for split in manifest["splits"]:
        mine, read = ours(out, split, task), theirs(out, split)
        assert len(read) == len(mine) == manifest["splits"][split]["examples"]
        for r, t in zip(mine, read):
            assert t[schema.FILENAME] == r.filename.encode()
            np.testing.assert_array_equal(t[schema.ENCODED], tf.io.decode_image(r.encoded, channels=3).numpy())
            if task == "detection":
                for key, attr in ((schema.OBJECT_XMIN, "xmin"), (schema.OBJECT_YMIN, "ymin"),
                                  (schema.OBJECT_XMAX, "xmax"), (schema.OBJECT_YMAX, "ymax")):
                    np.testing.assert_array_equal(t[key], np.array([getattr(o, attr) for o in r.objects], np.float32))
                assert t[schema.OBJECT_LABEL].tolist() == [o.label for o in r.objects]
                assert len(t[schema.OBJECT_MASK]) == len(r.objects)
                for m, o in zip(t[schema.OBJECT_MASK], r.objects):
                    np.testing.assert_array_equal(m[..., 0], pixels(o.mask))
            elif task == "multilabel":
                assert t[schema.LABEL].tolist() == list(r.labels)
            else:
                np.testing.assert_array_equal(t[schema.SEGMENTATION][..., 0], pixels(r.segmentation))
            compared += 1
    key = {"detection": schema.OBJECT_LABEL, "multilabel": schema.LABEL, "segmentation": schema.SEGMENTATION}[task]
    feature = builder.info.features[key]
    names = feature.feature.names if task == "multilabel" else feature.names
    assert names == (["background"] if task == "detection" else []) + manifest["labels"]
    return compared


def test_tfds_reads_datasets_converted_by_prep_convert(tmp_path):
    """The same through the real converter: the detection sample (masks, EXIF-turned JPEGs, images
    without objects), a --masks segmentation set and a multi-label label file."""
    det = td.converted_detection(tmp_path / "det")
    assert assert_tfds_reads(det, "detection") == 120
    seg = td.converted_segmentation(tmp_path / "seg")
    assert assert_tfds_reads(seg, "segmentation") == 10
    ml = td.converted_multilabel(tmp_path / "ml")
    assert assert_tfds_reads(ml, "multilabel") == datasets.load(ml)["inputs"]["written"] == 18  # 6 empty_label
    for out in (det, seg, ml):
        assert verify(str(out), deep=True).ok
