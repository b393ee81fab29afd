"""The box geometry of the detection loader (loaders/boxes.py) and the task checks of `LoadOptions`."""

import numpy as np
import pytest

from loaders.load_options import LoadOptions
from prep.core.errors import LoaderError

tf = pytest.importorskip("tensorflow")
geo = pytest.importorskip("loaders.boxes")


def test_crop_moves_clips_and_measures_what_is_left():
    # a 100 x 200 image; window y=10, x=50, h=40, w=100
    boxes = tf.constant(
        [
            [0.2, 0.3, 0.4, 0.5],  # inside: y 20..40, x 60..100
            [0.0, 0.0, 0.2, 0.3],  # y 0..20, x 0..60: 10 of 20 rows, 10 of 60 cols inside
            [0.8, 0.8, 0.9, 0.9],
        ]
    )  # y 80..90: outside
    out, visible = geo.crop_boxes(boxes, tf.constant([10, 50, 40, 100]), 100, 200)
    np.testing.assert_allclose(
        out.numpy(), [[0.25, 0.1, 0.75, 0.5], [0.0, 0.0, 0.25, 0.1], [1.0, 1.0, 1.0, 1.0]], atol=1e-6
    )
    np.testing.assert_allclose(visible.numpy(), [1.0, (10 * 10) / (20 * 60), 0.0], atol=1e-6)


def test_crop_of_a_degenerate_box_leaves_nothing_visible():
    _, visible = geo.crop_boxes(tf.constant([[0.5, 0.5, 0.5, 0.7]]), tf.constant([0, 0, 10, 10]), 10, 10)
    assert visible.numpy().tolist() == [0.0]


def test_flip_mirrors_x_and_is_its_own_inverse():
    boxes = tf.constant([[0.1, 0.2, 0.3, 0.6]])
    np.testing.assert_allclose(geo.flip_boxes(boxes).numpy(), [[0.1, 0.4, 0.3, 0.8]], atol=1e-6)
    np.testing.assert_allclose(geo.flip_boxes(geo.flip_boxes(boxes)).numpy(), boxes.numpy(), atol=1e-6)


def test_letterbox_keeps_the_aspect_and_scales_boxes_to_the_placed_image():
    nh, nw = geo.letterbox_size(50, 100, (64, 64))
    assert (int(nh), int(nw)) == (32, 64)
    out = geo.letterbox_boxes(tf.constant([[0.0, 0.0, 1.0, 1.0]]), (nh, nw), (64, 64))
    np.testing.assert_allclose(out.numpy(), [[0.0, 0.0, 0.5, 1.0]])
    image = geo.place(tf.ones([50, 100, 1], tf.uint8), None, None, (64, 64), "nearest", (nh, nw), 255)
    assert image.shape == (64, 64, 1)
    assert set(np.unique(image[:32].numpy())) == {1} and set(np.unique(image[32:].numpy())) == {255}


def test_detection_window_covers_an_object_or_is_the_whole_image():
    boxes = tf.constant([[0.4, 0.4, 0.5, 0.5]])
    for seed in range(20):
        y, x, h, w = geo.detection_window(
            200, 200, boxes, tf.constant([seed, 1], tf.int64), (0.05, 1.0), (0.5, 2.0), 0.9
        ).numpy()
        _, visible = geo.crop_boxes(boxes, tf.constant([y, x, h, w]), 200, 200)
        assert visible.numpy()[0] >= 0.9 - 1e-6
    # an impossible constraint (an object larger than any window of the area range): the whole image
    whole = geo.detection_window(
        100, 100, tf.constant([[0.0, 0.0, 1.0, 1.0]]), tf.constant([3, 1], tf.int64), (0.05, 0.1), (0.5, 2.0), 1.0
    )
    assert whole.numpy().tolist() == [0, 0, 100, 100]


def test_pad_rows_keeps_the_chosen_rows_first_and_pads():
    values = tf.constant([[1.0], [2.0], [3.0]])
    padded, count = geo.pad_rows(values, tf.constant([True, False, True]), 4, -1.0)
    assert padded.numpy().ravel().tolist() == [1.0, 3.0, -1.0, -1.0] and int(count) == 2
    cut, count = geo.pad_rows(values, tf.constant([True, True, True]), 2, 0.0)
    assert cut.numpy().ravel().tolist() == [1.0, 2.0] and int(count) == 2


@pytest.mark.parametrize(
    "task, kwargs, message",
    [
        ("detection", {"eval_crop": "center"}, "eval_crop='center' would cut the detection targets"),
        ("segmentation", {"eval_crop": "center"}, "eval_crop='center' would cut the segmentation targets"),
        ("classification", {"letterbox": True}, "letterbox is for detection and segmentation, not classification"),
        ("segmentation", {"output": "ragged"}, "output='ragged' is for detection, not segmentation"),
        ("multilabel", {"max_boxes": 3}, "max_boxes is for detection, not multilabel"),
        ("multilabel", {"rebalance": True}, "rebalance needs one label per record"),
        ("detection", {"aspect_buckets": (1.0,)}, "aspect_buckets is not supported for detection"),
    ],
)
def test_options_a_task_cannot_honour_are_refused(task, kwargs, message):
    with pytest.raises(LoaderError) as info:
        LoadOptions(**kwargs).check_task(task)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_boxes": 0}, "max_boxes must be >= 1, got 0"),
        ({"max_boxes": 2.0}, "max_boxes must be an int or None, got 2.0"),
        ({"min_box_visibility": 0}, "min_box_visibility must be in (0, 1], got 0"),
        ({"min_object_covered": 1.5}, "min_object_covered must be in [0, 1], got 1.5"),
        ({"letterbox": "yes"}, "letterbox must be True or False, got 'yes'"),
    ],
)
def test_bad_task_options_name_the_value(kwargs, message):
    with pytest.raises(LoaderError) as info:
        LoadOptions(**kwargs)
    assert message in str(info.value)


def test_evaluation_crop_defaults_follow_the_task():
    opts = LoadOptions(training=False)
    assert opts.resolved().eval_crop == "center" and opts.resolved("multilabel").eval_crop == "center"
    assert opts.resolved("detection").eval_crop == "resize" == opts.resolved("segmentation").eval_crop
