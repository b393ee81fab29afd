"""Keeps TensorFlow's start-up noise out of the samples' output, so they print only their results.

Without it a CPU-only run prints a dozen lines before the first result: C++ INFO lines
(CPU features, CUDA stubs, TFRecord buffer sizes), a `failed call to cuInit` ERROR line on
a machine without a GPU, absl's "log messages before absl::InitializeLog()" (twice, written
by XLA while TensorFlow is imported, whatever the log level), Keras's warning that
`shuffle=True` is ignored for a tf.data dataset, and `auto_shard` warnings each time
MirroredStrategy distributes a dataset. Set TF_CPP_MIN_LOG_LEVEL=0 to see them all again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings


@contextlib.contextmanager
def _stderr_to_file():
    """Sends file descriptor 2 (where C++ code writes) to a file; replays it if the block fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if failed:  # an import that fails keeps every line that explains why
                capture.seek(0)
                sys.stderr.write(capture.read().decode(errors="replace"))


def import_tensorflow():
    """`import tensorflow`, quietly; returns the module."""
    if os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3") != "3":  # the user asked to see the logs
        import tensorflow as tf

        return tf
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    warnings.filterwarnings("ignore", message=r".*`shuffle=True` was passed, but will be ignored.*")
    with _stderr_to_file():
        import tensorflow as tf
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    from absl import logging as absl_logging  # installed with TensorFlow

    absl_logging.set_verbosity(absl_logging.ERROR)
    return tf


def without_auto_shard(tf, dataset):
    """`dataset` with tf.data's auto-sharding off: under MirroredStrategy on one machine there is
    nothing to shard across workers, and the rewrite only warns about `assert_cardinality`."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)
