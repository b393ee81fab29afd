"""tfrecord-prep: raw images and labels to balanced, training-ready TFRecord shards.

`prep.core` is the pure core: every decision and convention (planning, naming,
record schema, manifest, listing, image rule, accounting, options, paths). The rest
of `prep` is the `prep` command line and the drivers of `verify` and `inspect`.
Importing `prep` imports neither Beam nor TensorFlow.
"""

__version__ = "0.1.0"
