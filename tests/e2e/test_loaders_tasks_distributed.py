"""`loaders.distribute` on a detection split: equal batches per replica under MirroredStrategy (2 and 3
logical CPUs) and MultiWorkerMirroredStrategy (2 local workers), as for classification
(tests/e2e/test_distributed.py, whose checks this mirrors).

Each configuration is a process running this file as a script (logical devices and TF_CONFIG
must be set before TensorFlow starts); all four start at once. The split has 31 drawn-shape
images in 3 shards, so neither 2 nor 3 divides it and 2 workers share 3 shards.

    python tests/e2e/test_loaders_tasks_distributed.py mirrored DATA OUT.json --devices 3
    python tests/e2e/test_loaders_tasks_distributed.py mwms DATA OUT.json --index 0 --ports 41001,41002
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
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


def worker() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["mirrored", "mwms"])
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--ports", default="")
    args = parser.parse_args()
    if args.mode == "mwms":
        os.environ["TF_CONFIG"] = json.dumps(
            {
                "cluster": {"worker": [f"127.0.0.1:{p}" for p in args.ports.split(",")]},
                "task": {"type": "worker", "index": args.index},
            }
        )
    import tensorflow as tf

    if args.mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.devices)])
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with open(args.out, "w") as f:
        json.dump(checks(strategy, args.data), f)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    worker()
    sys.exit(0)

import pytest  # noqa: E402 (the worker above needs neither pytest nor the test support)

from tests.support.task_records import read_split, write_dataset  # noqa: E402
from tests.support.workers import free_port, run_workers  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist-det")
    data = write_dataset(tmp / "data", "detection", {"train": 31}, {"train": 3}, fmt="jpeg", seed=4)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    ports = f"{free_port()},{free_port()}"
    jobs = {
        "mirrored2": ["mirrored", "--devices", "2"],
        "mirrored3": ["mirrored", "--devices", "3"],
        "mwms0": ["mwms", "--index", "0", "--ports", ports],
        "mwms1": ["mwms", "--index", "1", "--ports", ports],
    }
    results = run_workers(__file__, data, tmp, jobs, env)
    boxes = {r.filename: len(r.objects) for r in read_split(data, "train", "detection")}
    return results, boxes


def check_training(epochs, steps, boxes):
    """Every replica of every worker got `steps` full batches of 2; nothing read twice; files are the split's."""
    files = []
    for e in epochs:
        assert e["batches"] == [steps] * len(e["batches"])
        assert all(sizes == [2] * steps for sizes in e["sizes"])
        files += [f for replica in e["files"] for f in replica]
    assert len(files) == len(set(files)) and set(files) <= set(boxes)
    return files


def check_eval(epochs, boxes, padding, steps):
    """Padded evaluation: equal full batches; every image once with weight 1, with all its boxes."""
    for e in epochs:
        assert e["batches"] == [steps] * len(e["batches"])
    reads = [
        (f, n, w)
        for e in epochs
        for fs, ns, ws in zip(e["files"], e["boxes"], e["weights"])
        for f, n, w in zip(fs, ns, ws)
    ]
    real = {f: n for f, n, w in reads if w == 1.0}
    assert real == boxes  # every image of the split, every box of it
    assert len([w for _, _, w in reads if w == 0.0]) == padding


def test_mirrored_strategy_gives_every_replica_equal_detection_batches(runs):
    results, boxes = runs
    for devices, steps in ((2, 7), (3, 5)):
        r = results[f"mirrored{devices}"]
        assert r["pipelines"] == 1 and r["steps"] == steps
        first = check_training([r["train"][0]], steps, boxes)
        second = check_training([r["train"][1]], steps, boxes)
        assert first != second and len(first) == steps * 2 * devices
        check_eval([r["eval"]], boxes, padding={2: 1, 3: 5}[devices], steps={2: 8, 3: 6}[devices])


def test_multi_worker_strategy_gives_every_worker_equal_detection_batches(runs):
    results, boxes = runs
    workers = [results["mwms0"], results["mwms1"]]
    assert all(w["pipelines"] == 2 and w["steps"] == 7 for w in workers)
    for e in (0, 1):
        assert len(check_training([w["train"][e] for w in workers], 7, boxes)) == 28
    check_eval([w["eval"] for w in workers], boxes, padding=1, steps=8)
