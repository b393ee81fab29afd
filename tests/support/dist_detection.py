"""The detection half of a distribution worker (tests/support/dist_worker.py `--detection DATA`): with the
strategy the worker already built for classification, one detection split read through `loaders.distribute`,
per local replica: batches, batch sizes, file names, boxes per image (and weights) of two training epochs and
a padded evaluation epoch. Sharing the worker saves four TensorFlow processes; tests/e2e/test_distributed.py
asserts on both halves."""

from __future__ import annotations

IMAGE = (24, 24)


def epoch(strategy, dataset, weights: bool = False) -> dict:
    """Per local replica: batches, batch sizes, file names, boxes per image (and weights) of one epoch."""
    local = len(strategy.extended.worker_devices)
    out = {
        "batches": [0] * local,
        "sizes": [[] for _ in range(local)],
        "files": [[] for _ in range(local)],
        "boxes": [[] for _ in range(local)],
        "weights": [[] for _ in range(local)],
    }
    for batch in dataset:
        parts = [
            strategy.experimental_local_results(batch[k]) for k in ("image/filename", "num_boxes", "boxes", "image")
        ]
        ws = strategy.experimental_local_results(batch["weight"]) if weights else [None] * local
        for r, (names, num, boxes, images) in enumerate(zip(*parts)):
            if names.shape[0] == 0:
                continue
            assert tuple(images.shape[1:]) == IMAGE + (3,) and boxes.shape[-1] == 4
            out["batches"][r] += 1
            out["sizes"][r].append(int(names.shape[0]))
            out["files"][r].extend(x.decode() for x in names.numpy())
            out["boxes"][r].extend(int(n) for n in num.numpy())
            if ws[r] is not None:
                out["weights"][r].extend(float(v) for v in ws[r].numpy())
    return out


def checks(strategy, data: str) -> dict:
    import loaders

    batch = 2 * strategy.num_replicas_in_sync
    train = loaders.distribute(strategy, data, "train", batch, IMAGE, output="features")
    evaluation = loaders.distribute(
        strategy, data, "train", batch, IMAGE, training=False, remainder="pad", output="features"
    )
    return {
        "steps": loaders.steps_per_epoch(data, "train", batch, strategy=strategy),
        "pipelines": loaders.num_input_pipelines(strategy),
        "train": [epoch(strategy, train), epoch(strategy, train)],
        "eval": epoch(strategy, evaluation, weights=True),
    }
