"""Detection and segmentation batches: parse, decode, crop, flip, resize, with the targets (TensorFlow).

The same stages as classification (`loaders.dataset`): a batch of serialized records is
parsed at once (`tf.io.parse_example`, object lists as ragged features), then each image is
decoded on its own (`loaders.decode.BatchDecode`: an element of a parallel map, or in Grain an
iteration of a `map_fn`). Training crops are fused with the decode for JPEG
(`decode_and_crop_jpeg` over the window, computed from the stored height and width and,
for detection, the boxes), and the window's pixel coordinates move the boxes
(`loaders.boxes.crop_boxes`) and cut the masks, so targets and pixels stay in step. See
docs/loaders.md for the output contract.
"""

from __future__ import annotations

import logging

import tensorflow as tf

import loaders.boxes as geo
import loaders.decode as images
from loaders.load_options import LoadOptions
from loaders.source import SplitSource
from prep.core import schema as s
from prep.core.errors import LoaderError

log = logging.getLogger(__name__)

BOX_KEYS = (s.OBJECT_YMIN, s.OBJECT_XMIN, s.OBJECT_YMAX, s.OBJECT_XMAX)  # the output's order
TARGETS = ("boxes", "classes", "num_boxes", "masks", "area", "is_crowd", "difficult")
_EXTRA = ((s.OBJECT_AREA, tf.float32), (s.OBJECT_CROWD, tf.int64), (s.OBJECT_DIFFICULT, tf.int64))


def max_boxes(opts: LoadOptions, source: SplitSource) -> int:
    """N of the padded output: the option, else the split's largest object count."""
    if opts.max_boxes is not None:
        if source.max_boxes is not None and opts.max_boxes < source.max_boxes:
            log.warning(
                "max_boxes=%d: images of split %r with more boxes (up to %d) keep only their first %d",
                opts.max_boxes,
                source.split,
                source.max_boxes,
                opts.max_boxes,
            )
        return opts.max_boxes
    if source.max_boxes is None:
        raise LoaderError(
            f"the manifest of {source.root} gives no max_boxes for split {source.split!r}; pass max_boxes="
        )
    return source.max_boxes


def _spec(task: str, features: bool) -> dict:
    spec = {k: tf.io.FixedLenFeature([], tf.string) for k in (s.ENCODED, s.FORMAT)}
    spec.update({k: tf.io.FixedLenFeature([], tf.int64) for k in (s.HEIGHT, s.WIDTH)})
    if features:
        spec.update({k: tf.io.FixedLenFeature([], tf.string) for k in (s.FILENAME, s.SHA256, s.SOURCE_ID)})
    if task == "segmentation":
        spec[s.SEGMENTATION] = tf.io.FixedLenFeature([], tf.string)
        return spec
    spec.update({k: tf.io.RaggedFeature(tf.float32) for k in BOX_KEYS})
    spec[s.OBJECT_LABEL] = tf.io.RaggedFeature(tf.int64)
    if features:
        spec.update({k: tf.io.RaggedFeature(dtype) for k, dtype in _EXTRA})
        spec[s.OBJECT_MASK] = tf.io.RaggedFeature(tf.string)
        spec[s.OBJECT_TEXT] = tf.io.RaggedFeature(tf.string)
    return spec


def _heads(opts: LoadOptions, seed):
    if not opts.flip:
        return None
    return tf.random.stateless_uniform([], seed=tf.stack([seed, tf.constant(images.FLIP, tf.int64)])) < 0.5


def decoder(opts: LoadOptions, source: SplitSource) -> images.BatchDecode:
    """The `decode.BatchDecode` of a batch of records of a detection or segmentation split."""
    features = opts.output == "features"
    spec = _spec(source.task, features)
    size = opts.image_size
    n_out = max_boxes(opts, source) if source.task == "detection" else 0
    ignore = source.ignore_value if source.ignore_value is not None else s.IGNORE_VALUE

    def common(x, batch_seed):
        x = x if isinstance(x, dict) else {"record": x}
        parsed = tf.io.parse_example(x["record"], spec)
        seeds = images.example_seeds(x["record"], batch_seed)
        out = {"weight": x["weight"]} if "weight" in x else {}
        if features:
            out.update({k: parsed[k] for k in (s.FILENAME, s.SHA256, s.SOURCE_ID, s.HEIGHT, s.WIDTH)})
        return parsed, seeds, out

    def window_and_image(enc, fmt, h, w, seed, boxes=None):
        """(window or None, decoded uint8 image, inner letterbox size or None)."""
        if opts.training:
            crop_seed = tf.stack([seed, tf.constant(images.CROP, tf.int64)])
            if boxes is None:
                window = images.random_crop_window(h, w, crop_seed, opts.area_range, opts.aspect_ratio_range)
            else:
                window = geo.detection_window(
                    h, w, boxes, crop_seed, opts.area_range, opts.aspect_ratio_range, opts.min_object_covered
                )
            return window, images._decode_window(enc, fmt, window), None
        inner = geo.letterbox_size(h, w, size) if opts.letterbox else None
        return None, images._decode_whole(enc, fmt), inner

    def segmentation_split(x, batch_seed=None):
        parsed, seeds, out = common(x, batch_seed)
        return tuple(parsed[k] for k in (s.ENCODED, s.FORMAT, s.HEIGHT, s.WIDTH, s.SEGMENTATION)) + (seeds,), out

    def segmentation_one(args):
        enc, fmt, h, w, seg, seed = args
        window, image, inner = window_and_image(enc, fmt, h, w, seed)
        heads = _heads(opts, seed)
        mask = tf.io.decode_png(seg, channels=1)
        mask = geo.place(mask, window, heads, size, "nearest", inner, ignore)
        return geo.place(image, None, heads, size, "bilinear", inner, 0), tf.cast(mask, tf.int32)

    if source.task == "segmentation":
        per_image = (tf.TensorSpec([size[0], size[1], 3], tf.float32), tf.TensorSpec([size[0], size[1], 1], tf.int32))
        return images.BatchDecode(
            segmentation_split,
            segmentation_one,
            lambda outs, rest: {**rest, "image": outs[0], "masks": outs[1]},
            per_image,
        )

    signature: tuple = (
        tf.TensorSpec([size[0], size[1], 3], tf.float32),
        tf.TensorSpec([n_out, 4], tf.float32),
        tf.TensorSpec([n_out], tf.int32),
        tf.TensorSpec([], tf.int32),
    )
    if features:
        signature += (
            tf.TensorSpec([n_out], tf.float32),
            tf.TensorSpec([n_out], tf.int32),
            tf.TensorSpec([n_out], tf.int32),
            tf.TensorSpec([n_out, size[0], size[1]], tf.uint8),
        )

    def detection_split(x, batch_seed=None):
        parsed, seeds, out = common(x, batch_seed)
        boxes = tf.stack([parsed[k].to_tensor() for k in BOX_KEYS], axis=-1)  # [B, M, 4], M: the batch's most
        counts = tf.cast(parsed[s.OBJECT_LABEL].row_lengths(), tf.int32)
        elems = [parsed[k] for k in (s.ENCODED, s.FORMAT, s.HEIGHT, s.WIDTH)]
        elems += [boxes, parsed[s.OBJECT_LABEL].to_tensor(), counts, seeds]
        if features:
            elems += [parsed[k].to_tensor() for k, _ in _EXTRA]
            elems += [parsed[s.OBJECT_MASK].to_tensor(), tf.cast(parsed[s.OBJECT_MASK].row_lengths(), tf.int32)]
            out[s.OBJECT_TEXT] = parsed[s.OBJECT_TEXT]  # as in the record (before crops drop any)
        return tuple(elems), out

    def detection_one(args):
        enc, fmt, h, w, bx, cl, n, seed = args[:8]
        bx, cl = bx[:n], cl[:n]
        window, image, inner = window_and_image(enc, fmt, h, w, seed, bx)
        if window is None:
            keep, visible = tf.ones([n], tf.bool), tf.ones([n], tf.float32)
            crop_hw = tf.cast(tf.stack([h, w]), tf.float32)
        else:
            bx, visible = geo.crop_boxes(bx, window, h, w)
            # a box left with no area is dropped whatever the threshold: it holds no pixel
            keep = (visible >= opts.min_box_visibility) & (visible > 0)
            crop_hw = tf.cast(window[2:], tf.float32)
        heads = _heads(opts, seed)
        if heads is not None:
            bx = tf.cond(heads, lambda: geo.flip_boxes(bx), lambda: bx)
        placed = geo.place(image, None, heads, size, "bilinear", inner, 0)
        if inner is not None:
            bx = geo.letterbox_boxes(bx, inner, size)
        boxes_out, count = geo.pad_rows(bx, keep, n_out, 0.0)
        classes_out, _ = geo.pad_rows(tf.cast(cl, tf.int32), keep, n_out, -1)
        result = (placed, boxes_out, classes_out, count)
        if not features:
            return result
        area, crowd, difficult, pngs, n_masks = args[8:]
        out_hw = tf.cast(tf.stack(inner) if inner is not None else tf.constant(size), tf.float32)
        scale = tf.reduce_prod(out_hw) / tf.reduce_prod(crop_hw)  # output pixels per stored pixel
        area = area[:n] * visible * scale
        masks = tf.cond(
            n_masks > 0,
            lambda: _masks(pngs[:n], window, heads, size, inner),
            lambda: tf.zeros([n, size[0], size[1]], tf.uint8),
        )
        return result + tuple(
            geo.pad_rows(v, keep, n_out, 0)[0]
            for v in (area, tf.cast(crowd[:n], tf.int32), tf.cast(difficult[:n], tf.int32), masks)
        )

    def detection_join(outs, rest):
        names = ("image", "boxes", "classes", "num_boxes", "area", "is_crowd", "difficult", "masks")
        return {**rest, **dict(zip(names, outs))}

    return images.BatchDecode(detection_split, detection_one, detection_join, signature)


def _masks(pngs, window, heads, size, inner):
    """Instance masks, each through the same crop, flip and resize as its image (nearest neighbour)."""

    def one(png):
        mask = tf.io.decode_png(png, channels=1)
        return geo.place(mask, window, heads, size, "nearest", inner, 0)[:, :, 0]

    return tf.map_fn(one, pngs, fn_output_signature=tf.TensorSpec([size[0], size[1]], tf.uint8))


def finisher(opts: LoadOptions, source: SplitSource, padded: bool):
    """``finish(decoded) -> output structure``: the `augment` hook, normalisation, tuple / ragged / features."""
    detection = source.task == "detection"

    def finish(x):
        imgs = x["image"]
        targets = {k: x[k] for k in TARGETS if k in x} if detection else x["masks"]
        if opts.augment is not None:
            imgs, targets = opts.augment(imgs, targets)
        imgs = images.normalize(tf.cast(imgs, tf.float32), opts.normalize)
        if opts.output == "features":
            return {**x, "image": imgs, **(targets if detection else {"masks": targets})}
        if detection:
            targets = {k: targets[k] for k in ("boxes", "classes", "num_boxes")}
            if opts.output == "ragged":
                lengths = targets["num_boxes"]
                targets = {
                    "boxes": tf.RaggedTensor.from_tensor(targets["boxes"], lengths=lengths),
                    "classes": tf.RaggedTensor.from_tensor(targets["classes"], lengths=lengths),
                    "num_boxes": lengths,
                }
        if padded:
            return imgs, targets, x["weight"]
        return imgs, targets

    return finish
