"""TensorFlow Model Garden's own decoders and parsers read our detection and segmentation records.

Against the real code of tf-models-official (installed with --no-deps, see
tests/e2e/test_model_garden.py): `TfExampleDecoder(include_mask=True)` gives, for every
record, the boxes in its [ymin, xmin, ymax, xmax] order, classes, areas, crowd flags and
masks equal to ours; Mask R-CNN's Parser turns the decoded records, images without objects
and crowds included, into a training batch and an evaluation batch; the segmentation
Decoder and Parser read the class maps. The checks can fail: a record whose box lists are
swapped, or one without image/source_id, does not pass them.
"""

import dataclasses
import io

import numpy as np
import pytest
from PIL import Image

from prep.core.task_record import TaskRecord
from prep.verify import verify
from tests.support import datasets
from tests.support import task_datasets as td

tf = pytest.importorskip("tensorflow")
# Not importorskip: without Model Garden these tests would pass having checked nothing.
from official.vision.dataloaders import maskrcnn_input, segmentation_input, tf_example_decoder  # noqa: E402


@pytest.fixture(scope="module")
def detection(tmp_path_factory):
    return td.detection_dataset(tmp_path_factory.mktemp("mg_det") / "out")


def shards(out, split):
    return sorted(str(p) for p in out.glob(f"{split}-*-of-*.tfrecord"))  # input_path: OUT/train-*-of-*.tfrecord


def ours(out, split, task):
    return [TaskRecord.from_bytes(r, task) for p in shards(out, split) for r in datasets.records(out / p)]


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)))


def assert_decoded_equals(decoded: dict, record: TaskRecord, area_is_mask: bool = True) -> None:
    """What Model Garden decoded from one record is what the record holds, in Model Garden's conventions."""
    objects = record.objects
    assert decoded["source_id"].numpy() == record.source_id.encode()
    assert (decoded["height"].numpy(), decoded["width"].numpy()) == (record.height, record.width)
    assert decoded["image"].shape == (record.height, record.width, 3)
    boxes = np.array([[o.ymin, o.xmin, o.ymax, o.xmax] for o in objects], np.float32).reshape(-1, 4)
    np.testing.assert_array_equal(decoded["groundtruth_boxes"].numpy(), boxes)
    assert decoded["groundtruth_classes"].numpy().tolist() == [o.label for o in objects]
    np.testing.assert_array_equal(decoded["groundtruth_area"].numpy(), np.array([o.area for o in objects], np.float32))
    assert decoded["groundtruth_is_crowd"].numpy().tolist() == [bool(o.crowd) for o in objects]
    masks = decoded["groundtruth_instance_masks"].numpy()
    assert masks.shape == (len(objects), record.height, record.width)
    for mask, o in zip(masks, objects):
        np.testing.assert_array_equal(mask, pixels(o.mask).astype(np.float32))
        if area_is_mask:  # the test datasets' area is the mask's, in pixels of the stored image
            assert mask.sum() == o.area


def test_tf_example_decoder_gives_our_boxes_classes_areas_crowds_and_masks(detection):
    decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)  # regenerate_source_id=False: required
    seen = 0
    for split in ("train", "validation"):
        mine = ours(detection, split, "detection")
        decoded = list(tf.data.TFRecordDataset(shards(detection, split)).map(decoder.decode))
        assert len(decoded) == len(mine)
        for d, r in zip(decoded, mine):
            assert_decoded_equals(d, r)
            seen += len(r.objects)
    assert seen == datasets.load(detection)["inputs"]["boxes"]["written"]


def test_swapped_box_lists_or_a_missing_source_id_do_not_pass(detection, tmp_path):
    """The checks above can fail: a writer that put x where y belongs, or left out image/source_id."""
    decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)
    record = next(
        r for r in ours(detection, "train", "detection") if r.objects and any(o.xmin != o.ymin for o in r.objects)
    )
    swapped = dataclasses.replace(
        record,
        objects=tuple(
            dataclasses.replace(o, xmin=o.ymin, ymin=o.xmin, xmax=o.ymax, ymax=o.xmax) for o in record.objects
        ),
    )
    with pytest.raises(AssertionError):
        assert_decoded_equals(decoder.decode(tf.constant(swapped.to_bytes())), record)
    nameless = dataclasses.replace(record, source_id=None)
    with pytest.raises(tf.errors.InvalidArgumentError, match="image/source_id"):
        decoder.decode(tf.constant(nameless.to_bytes()))
    # verify --target model-garden names such a dataset before training does.
    records = td.detection_records(n=6)
    records[2] = dataclasses.replace(records[2], source_id=None)
    out = td.write(tmp_path / "out", "detection", td.DETECTION_LABELS, {"train": records}, 2)
    report = verify(str(out), target="model-garden")
    assert report.target.by_reason == {"no_source_id": 1} and report.target.records == 1
    assert not report.ok


@pytest.mark.parametrize("training", [True, False], ids=["training", "evaluation"])
def test_mask_rcnn_parser_makes_a_batch_of_our_records(detection, training):
    decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)
    parser = maskrcnn_input.Parser(
        output_size=[64, 64],
        min_level=3,
        max_level=5,
        num_scales=1,
        aspect_ratios=[1.0],
        anchor_size=3,
        include_mask=True,
        mask_crop_size=16,
        max_num_instances=8,
    )
    mine = ours(detection, "train", "detection")
    assert any(not r.objects for r in mine) and any(o.crowd for r in mine for o in r.objects)
    dataset = (
        tf.data.TFRecordDataset(shards(detection, "train"))
        .map(decoder.decode)
        .map(parser.parse_fn(is_training=training))
        .batch(4)
    )
    batches = list(dataset)
    assert len(batches) == 3
    images, labels = batches[0]
    assert images.shape == (4, 64, 64, 3) and bool(tf.reduce_all(tf.math.is_finite(images)))
    if training:
        assert labels["gt_boxes"].shape == (4, 8, 4) and labels["gt_masks"].shape == (4, 8, 16, 16)
        kept = [[o.label for o in r.objects if not o.crowd] for r in mine[:4]]  # crowds skipped in training
        got = labels["gt_classes"].numpy().tolist()
        assert [row[: len(k)] for row, k in zip(got, kept)] == kept
    else:
        truth = labels["groundtruths"]
        assert truth["source_id"].numpy().tolist() == [int(r.source_id) for r in mine[:4]]
        assert truth["num_detections"].numpy().tolist() == [len(r.objects) for r in mine[:4]]


def test_segmentation_decoder_and_parser_read_our_class_maps(tmp_path):
    out = td.segmentation_dataset(tmp_path / "seg")
    mine = ours(out, "train", "segmentation")
    decoder = segmentation_input.Decoder()
    decoded = list(tf.data.TFRecordDataset(shards(out, "train")).map(decoder.decode))
    assert len(decoded) == len(mine) == 8
    for d, r in zip(decoded, mine):
        assert (d["image/height"].numpy(), d["image/width"].numpy()) == (r.height, r.width)
        label = tf.io.decode_image(d["image/segmentation/class/encoded"], channels=1).numpy()[..., 0]
        np.testing.assert_array_equal(label, pixels(r.segmentation))
    parser = segmentation_input.Parser(output_size=[32, 32], ignore_label=255)
    for training in (True, False):
        dataset = (
            tf.data.TFRecordDataset(shards(out, "train"))
            .map(decoder.decode)
            .map(parser.parse_fn(is_training=training))
            .batch(4)
        )
        image, labels = next(iter(dataset))
        assert image.shape == (4, 32, 32, 3)
        values = set(np.unique(labels["masks"].numpy()).tolist())
        assert values <= {0, 1, 2, 3, 255} and {1, 255} <= values


def test_model_garden_reads_datasets_converted_by_prep_convert(tmp_path):
    """The same through the real converter: the detection sample (polygons as masks, EXIF-turned JPEGs,
    images without objects) and a --masks segmentation set."""
    out = td.converted_detection(tmp_path / "det")
    assert verify(str(out), deep=True, target="model-garden").ok
    decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)
    seen = 0
    for split in ("train", "validation"):
        mine = ours(out, split, "detection")
        decoded = list(tf.data.TFRecordDataset(shards(out, split)).map(decoder.decode))
        assert len(decoded) == len(mine)
        for d, r in zip(decoded, mine):
            assert_decoded_equals(d, r, area_is_mask=False)
            seen += len(r.objects)
    assert seen == datasets.load(out)["inputs"]["boxes"]["written"] == 288
    parser = maskrcnn_input.Parser(
        output_size=[64, 64],
        min_level=3,
        max_level=5,
        num_scales=1,
        aspect_ratios=[1.0],
        anchor_size=3,
        include_mask=True,
        mask_crop_size=16,
    )
    batch = next(
        iter(
            tf.data.TFRecordDataset(shards(out, "train"))
            .map(decoder.decode)
            .map(parser.parse_fn(is_training=True))
            .batch(8)
        )
    )
    assert batch[0].shape == (8, 64, 64, 3)

    seg = td.converted_segmentation(tmp_path / "seg")
    decoder = segmentation_input.Decoder()
    mine = ours(seg, "train", "segmentation")
    decoded = list(tf.data.TFRecordDataset(shards(seg, "train")).map(decoder.decode))
    for d, r in zip(decoded, mine):
        label = tf.io.decode_image(d["image/segmentation/class/encoded"], channels=1).numpy()[..., 0]
        np.testing.assert_array_equal(label, pixels(r.segmentation))
    assert len(decoded) == len(mine) == 10


def test_png_detection_records_decode_and_pass_the_target(tmp_path):
    """Detection's decoder reads PNG (tf.io.decode_image), so --target model-garden has no JPEG rule for it."""
    records = td.detection_records(n=8, png_every=2)
    assert {r.format for r in records} == {"jpeg", "png"}
    out = td.write(tmp_path / "out", "detection", td.DETECTION_LABELS, {"train": records}, 2)
    report = verify(str(out), deep=True, target="model-garden")
    assert report.ok and report.target.records == 0
    decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)
    decoded = list(tf.data.TFRecordDataset(shards(out, "train")).map(decoder.decode))
    for d, r in zip(decoded, ours(out, "train", "detection")):
        assert_decoded_equals(d, r)
        if r.format == "png":  # lossless: the same pixels (JPEG decoders may differ by a level)
            np.testing.assert_array_equal(
                d["image"].numpy(), np.asarray(Image.open(io.BytesIO(r.encoded)).convert("RGB"))
            )
