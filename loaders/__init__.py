"""tf.data input pipelines over datasets written by `prep convert`.

    import loaders
    ds = loaders.load("out/shapes", "train", batch_size=32, image_size=(64, 64))
    model.fit(ds, epochs=5, class_weight=loaders.class_weights("out/shapes", "train"))

    dist = loaders.distribute(strategy, "out/shapes", "train", global_batch_size=64, image_size=(64, 64))
    steps = loaders.steps_per_epoch("out/shapes", "train", 64, strategy=strategy)

Importing this package does not import TensorFlow; `load`, `distribute` and
`train_loop` do, when called. See docs/loaders.md.
"""

from prep.errors import LoaderError
from loaders.api import class_weights, distribute, epoch_size, load, num_input_pipelines, steps_per_epoch
from loaders.options import LoadOptions
from loaders.plan import EpochSize


def train_loop(*args, **kwargs):
    """A custom training loop over `distribute`'s dataset; see `loaders.loop.train_loop`."""
    from loaders.loop import train_loop as run

    return run(*args, **kwargs)


__all__ = ["EpochSize", "LoadOptions", "LoaderError", "class_weights", "distribute", "epoch_size", "load",
           "num_input_pipelines", "steps_per_epoch", "train_loop"]
