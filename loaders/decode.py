"""Decoding a batch of parsed records into float32 images (TensorFlow).

Records hold JPEG or PNG (`image/format` says which), 1 or 3 channels; every
output has 3 channels. Crop windows are computed from the stored height and
width, so nothing is decoded to learn an image's size, and for JPEG
`decode_and_crop_jpeg` decodes only the window's blocks. PNG has no partial
decode: it is decoded whole and then cropped.
"""

from __future__ import annotations

import tensorflow as tf

from loaders.load_options import LoadOptions
from prep.core import schema


def tf_feature_spec() -> dict:
    """The `tf.io.parse_example` feature spec of our records (`prep.core.schema`)."""
    spec = {key: tf.io.FixedLenFeature([], tf.string) for key in schema.BYTES_FEATURES}
    spec.update({key: tf.io.FixedLenFeature([], tf.int64) for key in schema.INT64_FEATURES})
    return spec


_WHOLE = tf.constant([[[0.0, 0.0, 1.0, 1.0]]])  # bounding box covering the image
CROP, FLIP, KEEP = 1, 2, 3  # second half of a stateless seed [element seed, use]: one stream per use


def _decode_window(encoded, fmt, window):
    """Decodes the window [y, x, h, w] of one image, as uint8 with 3 channels."""

    def jpeg():
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=3)

    def png():
        image = tf.io.decode_png(encoded, channels=3)
        return tf.slice(image, tf.stack([window[0], window[1], 0]), tf.stack([window[2], window[3], 3]))

    return tf.cond(tf.equal(fmt, b"jpeg"), jpeg, png)


def _decode_whole(encoded, fmt):
    return tf.cond(
        tf.equal(fmt, b"jpeg"),
        lambda: tf.io.decode_jpeg(encoded, channels=3),
        lambda: tf.io.decode_png(encoded, channels=3),
    )


def random_crop_window(height, width, seed, area_range, aspect_ratio_range):
    """A random-resized-crop window [y, x, h, w] (Inception style) for an image of the given size."""
    shape = tf.stack([tf.cast(height, tf.int32), tf.cast(width, tf.int32), 3])
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=_WHOLE,
        seed=seed,
        min_object_covered=0.1,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    return tf.stack([begin[0], begin[1], size[0], size[1]])


def center_window(height, width, out_size, fraction):
    """The centred window [y, x, h, w] with the output's aspect ratio, `fraction` of the largest such box."""
    h = tf.cast(height, tf.float32)
    w = tf.cast(width, tf.float32)
    out_h, out_w = tf.cast(out_size[0], tf.float32), tf.cast(out_size[1], tf.float32)
    scale = tf.minimum(h / out_h, w / out_w) * fraction
    ch = tf.clip_by_value(tf.cast(tf.round(out_h * scale), tf.int32), 1, tf.cast(height, tf.int32))
    cw = tf.clip_by_value(tf.cast(tf.round(out_w * scale), tf.int32), 1, tf.cast(width, tf.int32))
    y = (tf.cast(height, tf.int32) - ch) // 2
    x = (tf.cast(width, tf.int32) - cw) // 2
    return tf.stack([y, x, ch, cw])


def decode_batch(features, out_size, opts: LoadOptions, *, seeds=None, crop_ranges=None, static_size=None):
    """Decodes, crops and resizes every image of a parsed batch.

    Args:
        features: the output of `tf.io.parse_example` with our feature spec.
        out_size: (height, width), ints or int32 tensors (aspect buckets pick it per batch).
        opts: resolved options (`LoadOptions.resolved`); `training` (random-resized crop versus
            evaluation crop), `flip`, `eval_crop` and `central_fraction` apply here. A flip is
            done per image on the uint8 crop, before resizing: flipping the float32 batch cost
            half as much again as decoding on the benchmark; it needs `seeds`.
        seeds: int64 [batch], one per example, for the crop and the flip (stateless ops).
        crop_ranges: training only: ``f(height, width, seed) -> window [y, x, h, w]``, e.g. a
            `random_crop_window` with the crop's area and aspect ranges bound.
        static_size: (height, width) known in Python, to give the output a static shape.

    Returns:
        float32 [batch, height, width, 3] in [0, 255].
    """
    encoded, fmt = features[schema.ENCODED], features[schema.FORMAT]
    height, width = features[schema.HEIGHT], features[schema.WIDTH]
    size = tf.stack([tf.cast(out_size[0], tf.int32), tf.cast(out_size[1], tf.int32)])
    training, flip, eval_crop, central_fraction = opts.training, opts.flip, opts.eval_crop, opts.central_fraction

    def one(args):
        enc, f, h, w = args[:4]
        if training:
            image = _decode_window(enc, f, crop_ranges(h, w, tf.stack([args[4], tf.constant(CROP, tf.int64)])))
        elif eval_crop == "center":
            image = _decode_window(enc, f, center_window(h, w, size, central_fraction))
        else:
            image = _decode_whole(enc, f)
        if flip:
            heads = tf.random.stateless_uniform([], seed=tf.stack([args[4], tf.constant(FLIP, tf.int64)])) < 0.5
            image = tf.cond(heads, lambda: tf.reverse(image, [1]), lambda: image)
        return tf.image.resize(image, size, method="bilinear")

    elems = (encoded, fmt, height, width) + ((seeds,) if seeds is not None else ())
    shape = [static_size[0], static_size[1], 3] if static_size else [None, None, 3]
    return tf.map_fn(one, elems, fn_output_signature=tf.TensorSpec(shape, tf.float32), parallel_iterations=16)


def normalize(images, how: str):
    """[0, 255] float32 to "unit" [0, 1], "symmetric" [-1, 1], or unchanged ("none")."""
    if how == "unit":
        return images * (1.0 / 255.0)
    if how == "symmetric":
        return images * (2.0 / 255.0) - 1.0
    return images
