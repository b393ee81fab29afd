"""tensorflow-datasets reads detection, multi-label and segmentation datasets as they are:
`tfds.builder_from_directory(OUTPUT)`, every field of every record equal to what our shards hold.

Detection objects are one `Sequence` of a `FeaturesDict` (``image/object``) with a real
`BBoxFeature`: tfds reads it from the yxyx list each record holds beside Model Garden's four
lists (`schema.OBJECT_BBOX`), and the boxes it gives are ours, in tfds' order (drawn with
`tf.image.draw_bounding_boxes` they frame our objects). A record without that list would read
as having no boxes, silently: `verify` names every such record.
"""

import dataclasses
import io

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
utils = pytest.importorskip("tensorflow_datasets.core.utils")


def ours(out, split, task) -> list[TaskRecord]:
    return [
        TaskRecord.from_bytes(r, task) for p in sorted(out.glob(f"{split}-*.tfrecord")) for r in datasets.records(p)
    ]


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


def yxyx(record: TaskRecord) -> np.ndarray:
    return np.array([[o.ymin, o.xmin, o.ymax, o.xmax] for o in record.objects], np.float32).reshape(-1, 4)


def assert_objects(t: dict, r: TaskRecord) -> None:
    """tfds' ``image/object`` of one record equals our objects, field by field."""
    objects, n = t[tfds_meta.OBJECTS], len(r.objects)
    assert objects[tfds_meta.BBOX].dtype == np.float32 and objects[tfds_meta.BBOX].shape == (n, 4)
    np.testing.assert_array_equal(objects[tfds_meta.BBOX], yxyx(r))
    assert objects["class/label"].tolist() == [o.label for o in r.objects]
    assert objects["class/text"].tolist() == [o.text.encode() for o in r.objects]
    np.testing.assert_array_equal(objects["area"], np.array([o.area for o in r.objects], np.float32))
    assert objects["is_crowd"].tolist() == [o.crowd for o in r.objects]
    assert objects["difficult"].tolist() == [o.difficult for o in r.objects]


def test_tfds_reads_every_detection_record_with_boxes_classes_and_masks(detection):
    builder = tfds.builder_from_directory(str(detection))
    objects = builder.info.features[tfds_meta.OBJECTS]
    assert isinstance(objects, tfds.features.Sequence)
    assert isinstance(objects.feature[tfds_meta.BBOX], tfds.features.BBoxFeature)
    assert objects.feature[tfds_meta.BBOX].bbox_format.value == "REL_YXYX"  # normalised [ymin, xmin, ymax, xmax]
    labels = objects.feature["class/label"]
    assert isinstance(labels, tfds.features.ClassLabel) and labels.names == ["background", *td.DETECTION_LABELS]
    assert builder.info.splits["train"].shard_lengths == [4, 4, 4]
    total_boxes = 0
    for split in ("train", "validation"):
        mine, read = ours(detection, split, "detection"), theirs(detection, split)
        assert len(read) == len(mine) == builder.info.splits[split].num_examples
        for r, t in zip(mine, read):
            n = len(r.objects)
            total_boxes += n
            assert t[schema.SOURCE_ID] == r.source_id.encode() and t[schema.FILENAME] == r.filename.encode()
            assert_objects(t, r)
            assert [labels.int2str(i) for i in t[tfds_meta.OBJECTS]["class/label"]] == [o.text for o in r.objects]
            masks = t[schema.OBJECT_MASK]
            assert masks.shape == ((n, r.height, r.width, 1) if n else (0, 0, 0, 1))  # tfds: an empty image list
            for m, o in zip(masks, r.objects):
                np.testing.assert_array_equal(m[..., 0], pixels(o.mask))
            np.testing.assert_array_equal(t[schema.ENCODED], tf.io.decode_image(r.encoded, channels=3).numpy())
    assert total_boxes == datasets.load(detection)["inputs"]["boxes"]["written"] > 0


def test_tfds_boxes_frame_our_objects_when_drawn_as_tfds_users_draw_them(detection):
    """The usual tfds detection code: `tf.image.draw_bounding_boxes(image, ex['image/object']['bbox'])`.
    Each box, drawn alone on a blank image of the record's size, outlines our object's box in pixels
    (within a pixel), so the order is tfds' yxyx, not xyxy."""
    read = tfds.builder_from_directory(str(detection)).as_dataset(
        split="train", shuffle_files=False, read_config=tfds.ReadConfig(interleave_cycle_length=1)
    )
    drawn = 0
    for r, t in zip(ours(detection, "train", "detection"), read):
        for o, box in zip(r.objects, t[tfds_meta.OBJECTS][tfds_meta.BBOX]):
            blank = tf.zeros((1, r.height, r.width, 1), tf.float32)
            outline = tf.image.draw_bounding_boxes(blank, box[None, None], [[1.0]])[0, ..., 0].numpy()
            ys, xs = np.nonzero(outline)
            want = (o.xmin * (r.width - 1), o.ymin * (r.height - 1), o.xmax * (r.width - 1), o.ymax * (r.height - 1))
            np.testing.assert_allclose((xs.min(), ys.min(), xs.max(), ys.max()), want, atol=1)
            drawn += 1
    # Some boxes would be drawn elsewhere with x and y swapped, so the order is tested, not assumed.
    assert drawn > 0 and any(
        abs(o.xmin - o.ymin) * r.width > 2 for r in ours(detection, "train", "detection") for o in r.objects
    )


def test_tfds_show_examples_and_the_bbox_thumbnail_work(detection):
    import matplotlib

    matplotlib.use("Agg")
    builder = tfds.builder_from_directory(str(detection))
    ds = builder.as_dataset(split="validation", shuffle_files=False)
    figure = tfds.visualization.show_examples(ds, builder.info, rows=1, cols=2)
    assert len(figure.axes) == 2
    # What tfds.as_dataframe shows for the boxes of a record (it needs pandas, which we do not install).
    boxes = next(b for b in tfds.as_numpy(ds) if len(b[tfds_meta.OBJECTS][tfds_meta.BBOX]))
    html = (
        builder.info.features[tfds_meta.OBJECTS]
        .feature[tfds_meta.BBOX]
        .repr_html_batch(boxes[tfds_meta.OBJECTS][tfds_meta.BBOX])
    )
    assert html.startswith("<img src=\"data:image/png;base64,")


def test_features_json_is_what_tfds_itself_writes_for_every_task():
    f = tfds.features
    common = {key: f.Text() for key in (schema.FORMAT, schema.FILENAME, schema.SHA256)}
    common |= {key: f.Scalar(dtype=np.int64) for key in (schema.HEIGHT, schema.WIDTH, schema.CHANNELS)}
    common[schema.ENCODED] = f.Image(shape=(None, None, 3))
    labels = ["a", "b", "c"]
    expected = {
        "multilabel": common
        | {schema.LABEL: f.Sequence(f.ClassLabel(names=labels)), schema.TEXT: f.Sequence(f.Text())},
        "segmentation": common
        | {
            schema.SOURCE_ID: f.Text(),
            schema.SEGMENTATION_FORMAT: f.Text(),
            schema.SEGMENTATION: f.LabeledImage(labels=labels, shape=(None, None, 1), encoding_format="png"),
        },
        "detection": common
        | {
            schema.SOURCE_ID: f.Text(),
            "image/object": f.Sequence(
                {
                    "bbox/yxyx": f.BBoxFeature(),
                    "class/label": f.ClassLabel(names=["background", *labels]),
                    "class/text": f.Text(),
                    "area": np.float32,
                    "is_crowd": np.int64,
                    "difficult": np.int64,
                }
            ),
            schema.OBJECT_MASK: f.Sequence(f.Image(shape=(None, None, 1), encoding_format="png")),
        },
    }
    for task, features in expected.items():
        features = f.FeaturesDict(features)
        assert tfds_meta.features_json(labels, task) == features.to_json(), task
        # The Example keys tfds parses: for detection the box list written for it, then Model Garden's own keys.
        keys = set(utils.flatten_nest_dict(features.get_serialized_info()))
        assert keys == set(tfds_meta.features_json(labels, task)["content"]["features"]) - {"image/object"} | (
            {
                schema.OBJECT_BBOX,
                schema.OBJECT_LABEL,
                schema.OBJECT_TEXT,
                schema.OBJECT_AREA,
                schema.OBJECT_CROWD,
                schema.OBJECT_DIFFICULT,
            }
            if task == "detection"
            else set()
        ), task


def test_a_detection_dataset_without_masks_reads_with_empty_mask_sequences(tmp_path):
    records = td.detection_records(n=6, masks=False)
    out = td.write(tmp_path / "out", "detection", td.DETECTION_LABELS, {"train": records}, 2)
    assert verify(str(out), deep=True).ok
    read = theirs(out, "train")
    mine = ours(out, "train", "detection")
    for r, t in zip(mine, read):
        assert_objects(t, r)
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
    image, target = next(
        iter(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True, shuffle_files=False)))
    )
    assert image.shape[-1] == 3 and target.shape[-1] == 1


class WithoutTfdsBoxes(TaskRecord):
    """A record written as before image/object/bbox/yxyx existed: Model Garden's four box lists only."""

    def features(self) -> dict:
        return {k: v for k, v in super().features().items() if k != schema.OBJECT_BBOX}


def test_records_without_the_tfds_box_list_read_as_boxless_and_verify_names_each(tmp_path):
    """Why verify insists on image/object/bbox/yxyx: tfds reads the sequence with allow_missing, so a record
    without it reads as having no boxes at all, without an error."""
    records = [
        WithoutTfdsBoxes(**{f.name: getattr(r, f.name) for f in dataclasses.fields(r)})
        for r in td.detection_records(n=6)
    ]
    out = td.write(tmp_path / "out", "detection", td.DETECTION_LABELS, {"train": records}, 2)
    assert sum(len(r.objects) for r in ours(out, "train", "detection")) > 0
    assert all(t[tfds_meta.OBJECTS][tfds_meta.BBOX].shape == (0, 4) for t in theirs(out, "train"))  # lost, silently
    named = {
        (p.file, p.record)
        for p in verify(str(out)).problems
        if p.message == f"{schema.OBJECT_BBOX} is missing: tensorflow-datasets would read this record as "
        "having no boxes"
    }
    assert len(named) == sum(1 for r in records if r.objects) == len(records) - 1  # not the record without objects


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
                assert_objects(t, r)
                assert len(t[schema.OBJECT_MASK]) == len(r.objects)
                for m, o in zip(t[schema.OBJECT_MASK], r.objects):
                    np.testing.assert_array_equal(m[..., 0], pixels(o.mask))
            elif task == "multilabel":
                assert t[schema.LABEL].tolist() == list(r.labels)
            else:
                np.testing.assert_array_equal(t[schema.SEGMENTATION][..., 0], pixels(r.segmentation))
            compared += 1
    features = builder.info.features
    if task == "detection":
        names = features[tfds_meta.OBJECTS].feature["class/label"].names
    else:
        names = features[schema.LABEL].feature.names if task == "multilabel" else features[schema.SEGMENTATION].names
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
