"""Task records (multi-label, detection, segmentation): our bytes against TensorFlow's parser, and back."""

import pytest

from prep.core import schema as s
from prep.core.errors import RecordError
from prep.core.task_record import BoxObject, TaskRecord
from prep.core.wire import decode_example, encode_example

OBJECTS = (
    BoxObject(1, "cat", 0.125, 0.25, 0.5, 0.75, 96.0, 0, 1, b"png-a"),
    BoxObject(3, "dog", 0.0, 0.5, 1.0, 1.0, 1024.0, 1, 0, b"png-b"),
)
COMMON = dict(format="jpeg", height=64, width=32, channels=3, filename="a/b.jpg")


@pytest.mark.parametrize(
    "record",
    [
        TaskRecord.build("detection", b"\xff\xd8jpeg", **COMMON, source_id="17", objects=OBJECTS, masks=True),
        TaskRecord.build(
            "detection",
            b"\xff\xd8jpeg",
            **COMMON,
            source_id="18",
            objects=tuple(o.__class__(**{**o.__dict__, "mask": None}) for o in OBJECTS),
        ),
        TaskRecord.build("detection", b"\xff\xd8jpeg", **COMMON, source_id="19"),  # an image without objects
        TaskRecord.build("multilabel", b"\x89PNG", **COMMON, labels=(0, 4), texts=("a", "é")),
        TaskRecord.build("multilabel", b"\x89PNG", **COMMON),
        TaskRecord.build("segmentation", b"\x89PNG", **COMMON, source_id="3", segmentation=b"\x89PNG mask"),
    ],
    ids=["masks", "boxes", "empty", "multilabel", "no-labels", "segmentation"],
)
def test_round_trip_and_tensorflow_reads_the_same(record):
    import tensorflow as tf

    data = record.to_bytes()
    assert TaskRecord.from_bytes(data, record.task) == record
    example = tf.train.Example.FromString(data)
    assert example.SerializeToString(deterministic=True) == data
    f = example.features.feature
    if record.task == "detection":
        assert list(f[s.OBJECT_LABEL].int64_list.value) == [o.label for o in record.objects]
        assert list(f[s.OBJECT_XMIN].float_list.value) == [o.xmin for o in record.objects]
        # tfds' BBoxFeature layout, the same boxes: [ymin, xmin, ymax, xmax] per object
        assert list(f[s.OBJECT_BBOX].float_list.value) == [
            v for o in record.objects for v in (o.ymin, o.xmin, o.ymax, o.xmax)
        ]
        assert TaskRecord.from_bytes(data, record.task).bbox == record.yxyx()
        assert list(f[s.OBJECT_CROWD].int64_list.value) == [o.crowd for o in record.objects]
        assert (s.OBJECT_MASK in f) == record.masks
        assert f[s.SOURCE_ID].bytes_list.value == [record.source_id.encode()]
    if record.task == "multilabel":
        assert list(f[s.LABEL].int64_list.value) == list(record.labels)
    if record.task == "segmentation":
        assert f[s.SEGMENTATION].bytes_list.value == [record.segmentation]


def test_a_record_whose_object_lists_disagree_is_named():
    features = TaskRecord.build("detection", b"x", **COMMON, objects=OBJECTS).features()
    features[s.OBJECT_YMIN] = s.Floats([0.5])
    with pytest.raises(RecordError, match="differ in length"):
        TaskRecord.from_bytes(encode_example(features), "detection")


def test_a_missing_key_is_named():
    features = TaskRecord.build("segmentation", b"x", **COMMON, segmentation=b"m").features()
    del features[s.SEGMENTATION]
    with pytest.raises(RecordError, match="lacks feature image/segmentation/class/encoded"):
        TaskRecord.from_bytes(encode_example(features), "segmentation")
    assert decode_example(encode_example(features))[s.HEIGHT] == ("int64", [64])


def test_masks_for_some_objects_only_are_refused():
    with pytest.raises(ValueError, match="every object or for none"):
        TaskRecord.build(
            "detection", b"x", **COMMON, objects=(OBJECTS[0], BoxObject(1, "cat", 0, 0, 1, 1, 1.0)), masks=True
        )


def test_a_record_without_the_tfds_box_list_parses_with_bbox_none():
    """Records written before image/object/bbox/yxyx existed still parse (verify names them)."""
    record = TaskRecord.build("detection", b"x", **COMMON, objects=OBJECTS, masks=True)
    features = record.features()
    del features[s.OBJECT_BBOX]
    parsed = TaskRecord.from_bytes(encode_example(features), "detection")
    assert parsed == record and parsed.bbox is None
    features[s.OBJECT_BBOX] = s.Ints([1, 2])
    with pytest.raises(RecordError, match="image/object/bbox/yxyx must hold float values, has int64"):
        TaskRecord.from_bytes(encode_example(features), "detection")


def test_no_record_key_is_a_prefix_of_another():
    """Else Python's protobuf (upb) orders the two map keys unlike C++'s protobuf and our sorted order, and
    the round trip above would fail for that reason: e.g. image/object/bbox beside image/object/bbox/xmin."""
    keys = sorted(v for k, v in vars(s).items() if k.isupper() and isinstance(v, str) and v.startswith("image/"))
    assert s.OBJECT_BBOX in keys and s.OBJECT_XMIN in keys and len(keys) > 15
    assert [(a, b) for a in keys for b in keys if a != b and b.startswith(a)] == []
