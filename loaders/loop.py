"""A custom training loop over `loaders.distribute`: what works under MultiWorkerMirroredStrategy with Keras 3.

Keras 3's `model.fit` fails under MultiWorkerMirroredStrategy (keras-team/keras
#20585); `strategy.run` over a distributed dataset does not. The model and
optimizer may be Keras 3 objects, created under ``strategy.scope()``.
"""

from __future__ import annotations

import tensorflow as tf


def make_train_step(strategy, model, optimizer, loss_fn, global_batch_size: int):
    """A `tf.function` running one synchronous step on every replica; returns the global mean loss.

    Args:
        loss_fn: ``f(labels, predictions) -> per-example losses`` (no reduction), e.g.
            ``keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)``.
        global_batch_size: the batch over all replicas, to average the loss correctly.
    """

    # Create the optimizer's slots now, under the strategy: created lazily inside the first traced
    # step, they break MirroredStrategy with several local replicas ("must feed a value for placeholder").
    if not getattr(optimizer, "built", True):
        with strategy.scope():
            optimizer.build(model.trainable_variables)

    def replica_step(batch):
        images, labels = batch[0], batch[1]
        weights = batch[2] if len(batch) > 2 else None  # remainder="pad": padding has weight 0
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            per_example = loss_fn(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example, sample_weight=weights, global_batch_size=global_batch_size)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step(iterator):
        per_replica = strategy.run(replica_step, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return step


def train_loop(
    strategy, model, optimizer, loss_fn, dataset, steps_per_epoch: int, global_batch_size: int, epochs: int = 1
) -> list[float]:
    """Trains for `epochs` epochs of `steps_per_epoch` steps over `dataset` (from `loaders.distribute`).

    Every worker must call this with the same arguments; each epoch iterates the
    dataset anew (a new shard order when training). Returns the mean loss per epoch.
    """
    step = make_train_step(strategy, model, optimizer, loss_fn, global_batch_size)
    history = []
    for _ in range(epochs):
        iterator = iter(dataset)
        total = 0.0
        for _ in range(steps_per_epoch):
            total += float(step(iterator))
        history.append(total / steps_per_epoch)
    return history
