"""Geometry that keeps annotations true to the pixels: crop windows, box transforms, flips (TensorFlow).

Boxes are float32 ``[n, 4]``, normalised ``[ymin, xmin, ymax, xmax]`` in the frame of the
image they belong to (TensorFlow's and Model Garden's order). A window is int32
``[y, x, height, width]`` in pixels of the stored image, as `loaders.decode` crops it, so the
box transform uses exactly the pixels the decoder keeps.
"""

from __future__ import annotations

import tensorflow as tf

CROP_ATTEMPTS = 50  # sample_distorted_bounding_box tries this many windows, then returns the whole image


def detection_window(height, width, boxes, seed, area_range, aspect_ratio_range, min_object_covered):
    """A random crop window [y, x, h, w] that covers at least `min_object_covered` of some box.

    The SSD sampler's rule (Liu et al. 2016, as TensorFlow's Object Detection API's
    ``ssd_random_crop`` uses it) with one threshold: `sample_distorted_bounding_box` with the
    objects as `bounding_boxes`; a window meets the constraint when it holds that share of
    any one object. After `CROP_ATTEMPTS` failures it returns the whole image, so an image
    whose objects cannot be covered loses nothing. Without objects, the image itself is the box.
    """
    shape = tf.stack([tf.cast(height, tf.int32), tf.cast(width, tf.int32), 3])
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.reshape(boxes, [1, -1, 4]),
        seed=seed,
        min_object_covered=min_object_covered,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=CROP_ATTEMPTS,
        use_image_if_no_bounding_boxes=True,
    )
    return tf.stack([begin[0], begin[1], size[0], size[1]])


def crop_boxes(boxes, window, height, width):
    """Boxes in the window's frame, clipped to it, and the share of each box's area left inside.

    Args:
        boxes: float32 [n, 4], normalised to the whole image.
        window: int32 [y, x, h, w] in pixels.
        height, width: the whole image's size in pixels.

    Returns:
        (boxes [n, 4] clipped to [0, 1] in the window's frame, visible [n]: clipped area / area;
        0 for a box wholly outside the window or of no area).
    """
    size = tf.cast(tf.stack([height, width, height, width]), tf.float32)
    w = tf.cast(window, tf.float32)
    origin = tf.stack([w[0], w[1], w[0], w[1]])
    extent = tf.stack([w[2], w[3], w[2], w[3]])
    pixels = boxes * size  # in the window's scale, so the shares below are true areas
    moved = (pixels - origin) / extent
    clipped = tf.clip_by_value(moved, 0.0, 1.0)
    area = _area(moved)
    visible = tf.math.divide_no_nan(_area(clipped), area)
    return clipped, visible


def _area(boxes):
    return tf.maximum(boxes[:, 2] - boxes[:, 0], 0.0) * tf.maximum(boxes[:, 3] - boxes[:, 1], 0.0)


def flip_boxes(boxes):
    """Boxes of the image mirrored left-right: xmin' = 1 - xmax, xmax' = 1 - xmin."""
    ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=1)
    return tf.stack([ymin, 1.0 - xmax, ymax, 1.0 - xmin], axis=1)


def letterbox_size(height, width, out_size):
    """(h, w) int32 of the image resized to fit `out_size` with its aspect ratio kept (each at least 1)."""
    h, w = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    out_h, out_w = tf.cast(out_size[0], tf.float32), tf.cast(out_size[1], tf.float32)
    scale = tf.minimum(out_h / h, out_w / w)
    nh = tf.clip_by_value(tf.cast(tf.round(h * scale), tf.int32), 1, tf.cast(out_size[0], tf.int32))
    nw = tf.clip_by_value(tf.cast(tf.round(w * scale), tf.int32), 1, tf.cast(out_size[1], tf.int32))
    return nh, nw


def letterbox_boxes(boxes, inner, out_size):
    """Boxes of an image placed at the top left of the output, `inner` = (h, w) of the placed image."""
    sy = tf.cast(inner[0], tf.float32) / tf.cast(out_size[0], tf.float32)
    sx = tf.cast(inner[1], tf.float32) / tf.cast(out_size[1], tf.float32)
    return boxes * tf.stack([sy, sx, sy, sx])


def place(image, window, heads, out_size, method, inner=None, pad_value=0):
    """Crops `image` [h, w, c] to `window`, mirrors it when `heads`, resizes it to `out_size`
    (or to `inner` and pads to `out_size` with `pad_value`, the letterbox). One code path for
    the image's masks, so a mask keeps every pixel in step with the image."""
    if window is not None:
        image = tf.slice(image, tf.stack([window[0], window[1], 0]), tf.stack([window[2], window[3], -1]))
    if heads is not None:
        image = tf.cond(heads, lambda: tf.reverse(image, [1]), lambda: image)
    if inner is None:
        return tf.image.resize(image, out_size, method=method)
    image = tf.image.resize(image, tf.stack(inner), method=method)
    pad = [[0, out_size[0] - inner[0]], [0, out_size[1] - inner[1]], [0, 0]]
    return tf.pad(image, pad, constant_values=tf.cast(pad_value, image.dtype))


def pad_rows(values, keep, length, fill):
    """Rows of `values` where `keep`, the first `length` of them, padded with `fill` to `length` rows.

    Returns:
        (padded [length, ...], count int32): count is the number of real rows.
    """
    kept = tf.boolean_mask(values, keep)[:length]
    count = tf.shape(kept)[0]
    pad = [[0, length - count]] + [[0, 0]] * (len(values.shape) - 1)
    return tf.pad(kept, pad, constant_values=tf.cast(fill, values.dtype)), count
