"""Decoding a batch of parsed records into float32 images (TensorFlow).

Records hold JPEG or PNG (`image/format` says which), 1 or 3 channels; every
output has 3 channels. Crop windows are computed from the stored height and
width, so nothing is decoded to learn an image's size, and for JPEG
`decode_and_crop_jpeg` decodes only the window's blocks. PNG has no partial
decode: it is decoded whole and then cropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

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


class BatchDecode(NamedTuple):
    """A batch's decode in three parts, so that its images can be decoded one element each.

    `split(x, batch_seed=None)`: the batch at once (parse, per-example seeds) -> (per_image, rest),
    each a structure of [batch, ...] tensors; `one(per_image)`: one image's part -> a tuple of
    `signature`'s shapes; `join(outputs, rest)`: the batched outputs and the rest -> the decoded batch.
    """

    split: Callable
    one: Callable
    join: Callable
    signature: tuple


def whole_batch(d: BatchDecode) -> Callable:
    """``decode(x, batch_seed=None)``: a batch decoded in one function, its images by one `map_fn`
    (Grain's batches, aspect buckets, whose batches each have their own size)."""

    def decode(x, batch_seed=None):
        per_image, rest = d.split(x, batch_seed)
        outs = tf.map_fn(d.one, per_image, fn_output_signature=d.signature, parallel_iterations=16)
        return d.join(outs, rest)

    return decode


def image_map(ds, d: BatchDecode, batch_size: int, drop_remainder: bool, deterministic: bool, then: Callable):
    """Batches of (records[, batch seed]) decoded image by image, then `then(decoded batch)`.

    A batch is split at once (one vectorized parse, its seeds), unbatched, each image decoded as one
    element of a parallel map, and batched again. With `deterministic` these are exactly the
    batches `whole_batch` gives; without, images may change batches, as records already do in the
    interleave and shuffle before. A `map_fn` per batch instead ran at 0.4-0.5 of a per-record
    pipeline on a busy machine, on the same CPU per image: tf.data's autotuner parallelizes
    elements, and a batch is one (docs/benchmarks.md, `bench/speed_goals.py --goals loaders`).
    A batch that carries ragged lists (`output="features"`: object texts, multi-label ids) is
    decoded whole: they come out of `unbatch` as plain tensors, and batching them again with
    `ragged_batch` crashed TensorFlow 2.21 (a segmentation fault) on a detection split's partial
    last batch.
    """
    split = ds.map(lambda *x: d.split(*x), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    if any(isinstance(spec, tf.RaggedTensorSpec) for spec in tf.nest.flatten(split.element_spec[1])):
        decode = whole_batch(d)
        return ds.map(lambda *x: then(decode(*x)), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    ds = split.unbatch().map(
        lambda per_image, rest: (_shaped(d.one(per_image), d.signature), rest),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    return ds.map(
        lambda outs, rest: then(d.join(outs, rest)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )


def _shaped(outs, signature):
    """One image's outputs with the static shapes `map_fn` gives them (a plain map infers fewer)."""
    return tuple(tf.ensure_shape(t, spec.shape) for t, spec in zip(outs, signature))


def crop_fn(opts: LoadOptions):
    """f(height, width, seed, bucket) -> window; in bucket mode the aspect range is centred on the bucket's."""
    area, (lo, hi) = opts.area_range, opts.aspect_ratio_range
    if not opts.aspect_buckets:
        return lambda h, w, seed, bucket: random_crop_window(h, w, seed, area, (lo, hi))
    centre = (lo * hi) ** 0.5

    def crop(h, w, seed, bucket):
        branches = [
            lambda a=a: random_crop_window(h, w, seed, area, (lo * a / centre, hi * a / centre))
            for a in opts.aspect_buckets
        ]
        return tf.switch_case(tf.cast(bucket, tf.int32), branches)

    return crop


def example_seeds(records, batch_seed):
    """int64 [batch]: one seed per example, derived from the batch's (zeros when there is none)."""
    if batch_seed is None:
        return tf.zeros(tf.shape(records), tf.int64)
    return tf.random.stateless_uniform(
        tf.shape(records), tf.stack([batch_seed, tf.constant(0, tf.int64)]), minval=None, maxval=None, dtype=tf.int64
    )


def image_one(opts: LoadOptions):
    """One image's decode: ``one((encoded, format, height, width, seed, bucket)) -> (float32 image,)``
    in [0, 255], resized to `image_size` or to its bucket's size.

    Training: the random-resized crop window (`crop_fn`), decoded through `decode_and_crop_jpeg`;
    evaluation: the centre crop (`eval_crop="center"`) or the whole image. A flip (`opts.flip`)
    is done on the uint8 crop, before resizing: flipping the float32 batch cost half as much
    again as decoding on the benchmark. Seeds feed stateless ops, one stream per use."""
    training, flip, eval_crop, central_fraction = opts.training, opts.flip, opts.eval_crop, opts.central_fraction
    bucket_sizes = tf.constant(opts.bucket_sizes() or [opts.image_size], tf.int32)
    crop = crop_fn(opts)

    def one(args):
        enc, f, h, w, seed, bucket = args
        size = tf.gather(bucket_sizes, bucket) if opts.aspect_buckets else tf.constant(opts.image_size, tf.int32)
        if training:
            image = _decode_window(enc, f, crop(h, w, tf.stack([seed, tf.constant(CROP, tf.int64)]), bucket))
        elif eval_crop == "center":
            image = _decode_window(enc, f, center_window(h, w, size, central_fraction))
        else:
            image = _decode_whole(enc, f)
        if flip:
            heads = tf.random.stateless_uniform([], seed=tf.stack([seed, tf.constant(FLIP, tf.int64)])) < 0.5
            image = tf.cond(heads, lambda: tf.reverse(image, [1]), lambda: image)
        return (tf.image.resize(image, size, method="bilinear"),)

    return one


def normalize(images, how: str):
    """[0, 255] float32 to "unit" [0, 1], "symmetric" [-1, 1], or unchanged ("none")."""
    if how == "unit":
        return images * (1.0 / 255.0)
    if how == "symmetric":
        return images * (2.0 / 255.0) - 1.0
    return images
