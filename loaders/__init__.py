"""tf.data input pipelines over datasets written by `prep convert`."""
