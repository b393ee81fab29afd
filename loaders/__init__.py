"""tf.data input pipelines over datasets written by `prep convert`.

    import loaders
    ds = loaders.load("out/shapes", "train", batch_size=32, image_size=(64, 64))
    model.fit(ds, epochs=5, class_weight=loaders.class_weights("out/shapes", "train"))

    dist = loaders.distribute(strategy, "out/shapes", "train", global_batch_size=64, image_size=(64, 64))
    steps = loaders.steps_per_epoch("out/shapes", "train", 64, strategy=strategy)

Importing this package does not import TensorFlow; `load`, `distribute` and
`train_loop` do, when called, and so does a remote path (``gs://``), which is read
with `tf.io.gfile` as tf.data reads it. See docs/loaders.md.
"""

from loaders.api import class_weights, distribute, epoch_size, load, num_input_pipelines, steps_per_epoch
from loaders.epoch import EpochSize
from loaders.gfile_fs import GFileSystem
from loaders.load_options import LoadOptions
from prep.core import storage
from prep.core.errors import LoaderError

# Remote datasets are read as tf.data reads them, unless the process also has Beam's file systems
# (beam_jobs), which know S3 and the object stores' options: they answer first, whatever the import order.
storage.install(GFileSystem(), fallback=True)


def train_loop(*args, **kwargs):
    """A custom training loop over `distribute`'s dataset; see `loaders.loop.train_loop`."""
    from loaders.loop import train_loop as run

    return run(*args, **kwargs)


__all__ = [
    "EpochSize",
    "LoadOptions",
    "LoaderError",
    "class_weights",
    "distribute",
    "epoch_size",
    "load",
    "num_input_pipelines",
    "steps_per_epoch",
    "train_loop",
]
