"""tfrecord-prep: raw images and labels to balanced, training-ready TFRecord shards.

The `prep` package is the pure core (sources, planning, record schema, manifest,
image handling) plus the `prep` command line. It imports neither Beam nor
TensorFlow at module level.
"""

__version__ = "0.1.0"
