"""Shapes pycocotools must not be given, semantic class maps, and the label maps (parsed by protobuf)."""

import csv
import io

import numpy as np
import pytest
from PIL import Image

from prep.core.annotations import Category, prepare_mask
from prep.core.annotations.label_map import label_map_csv, label_map_pbtxt
from prep.core.annotations.masks import BadPolygon, BadRle, instance_mask
from prep.core.annotations.orient import METHODS
from prep.core.image_rules import ImageRejected


@pytest.mark.parametrize(
    "rle, message",
    [
        ({"size": [2, 2], "counts": [1, 2]}, "runs add up to 3 pixels, size 2x2 has 4"),
        ({"size": [2, 2], "counts": [5, -1]}, "negative"),
        ({"size": [2, 2], "counts": "~~"}, "not a character"),
        ({"size": [2, 2], "counts": "1o"}, "end inside a number"),
    ],
)
def test_bad_rle(rle, message):
    # pycocotools would decode [1, 2] with its fourth pixel uninitialised: checked first.
    with pytest.raises(BadRle, match=message):
        instance_mask((), rle, (2, 2))


@pytest.mark.parametrize(
    "polygon, message",
    [
        ([1, 1, 5, 1], "at least 3"),
        ([1, 1, 5, 1, 3], "at least 3"),
        ([1, 1, 5, float("nan"), 3, 4], "not finite"),
        ([1, 1, 5, 1, 3, 1e12], "more than 10 px outside the 10x8 frame"),
    ],
)
def test_bad_polygon(polygon, message):
    with pytest.raises(BadPolygon, match=message):
        instance_mask([polygon], None, (10, 8))


def png(array, mode="L"):
    buffer = io.BytesIO()
    Image.fromarray(array.astype(np.uint8), mode).save(buffer, format="PNG")
    return buffer.getvalue()


def class_map(w=12, h=8):
    a = np.zeros((h, w), dtype=np.uint8)
    a[1:4, 2:9] = 2
    a[5:, :3] = 255
    a[0, 0] = 1
    return a


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_semantic_mask_turned_and_resized(orientation):
    stored = class_map()
    method = METHODS.get(orientation)
    shown = Image.fromarray(stored).transpose(method) if method else Image.fromarray(stored)
    final = (shown.size[0] // 2, shown.size[1] // 2)
    want = np.asarray(shown.resize(final, Image.Resampling.NEAREST))
    # given in the stored frame (turned with the pixels when that is not the displayed size) ...
    if orientation in (6, 8):
        got = prepare_mask(png(stored), (12, 8), orientation, final, num_classes=3)
        assert (np.asarray(Image.open(io.BytesIO(got))) == want).all()
    # ... or in the displayed frame
    got = Image.open(io.BytesIO(prepare_mask(png(np.asarray(shown)), (12, 8), orientation, final, 3)))
    assert got.mode == "L" and got.size == final and (np.asarray(got) == want).all()


def test_palette_mask_values_are_indices():
    img = Image.fromarray(class_map(), "L").convert("P")
    buffer = io.BytesIO()
    img.save(buffer, format="PNG")
    got = np.asarray(Image.open(io.BytesIO(prepare_mask(buffer.getvalue(), (12, 8), 1, (12, 8), 3))))
    assert (got == np.asarray(img)).all()


@pytest.mark.parametrize(
    "data, stored, num_classes, reason, detail",
    [
        (png(class_map()), (12, 8), 2, "bad_mask", "value 2: classes are 0..1 and 255"),
        (png(np.zeros((8, 12, 3)), "RGB"), (12, 8), 3, "bad_mask", "mode RGB"),
        (b"not a png", (12, 8), 3, "bad_mask", "cannot be decoded"),
        (png(class_map()), (12, 9), 3, "mask_size_mismatch", "the mask is 12x8, the image 12x9"),
    ],
)
def test_bad_semantic_masks(data, stored, num_classes, reason, detail):
    with pytest.raises(ImageRejected) as err:
        prepare_mask(data, stored, 1, stored, num_classes)
    assert err.value.reason == reason and detail in err.value.detail


CATEGORIES = (Category(1, "cat", 17), Category(2, "it's \"odd\", \\ x", None), Category(3, "über\nline", 5))


def label_map_message():
    """StringIntLabelMap as the Object Detection API defines it (string_int_label_map.proto)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(
        name="label_map_test.proto", package="object_detection.protos", syntax="proto2"
    )
    item = f.message_type.add(name="StringIntLabelMapItem")
    item.field.add(name="name", number=1, type=9, label=1)
    item.field.add(name="id", number=2, type=5, label=1)
    item.field.add(name="display_name", number=3, type=9, label=1)
    top = f.message_type.add(name="StringIntLabelMap")
    top.field.add(name="item", number=1, type=11, label=3, type_name=".object_detection.protos.StringIntLabelMapItem")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("object_detection.protos.StringIntLabelMap"))


def test_label_map_pbtxt_parses_as_the_od_api_proto():
    from google.protobuf import text_format

    text = label_map_pbtxt(CATEGORIES)
    assert text.startswith("item {\n  id: 1\n  name: 'cat'\n}\n")
    parsed = text_format.Parse(text, label_map_message()())
    assert [(i.id, i.name) for i in parsed.item] == [(c.id, c.name) for c in CATEGORIES]


def test_label_map_csv():
    text = label_map_csv(CATEGORIES)
    assert text.splitlines()[:2] == ["id,name", "1,cat"]
    assert list(csv.reader(io.StringIO(text))) == [["id", "name"]] + [[str(c.id), c.name] for c in CATEGORIES]
