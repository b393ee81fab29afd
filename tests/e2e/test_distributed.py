"""`loaders.distribute` under MirroredStrategy (2 and 3 logical CPUs) and MultiWorkerMirroredStrategy (2 workers),
for a classification split and a detection split (equal batches per replica, every box of every image).

Each configuration runs in its own processes (tests/support/dist_worker.py): logical
devices and TF_CONFIG must be set before TensorFlow starts. All four processes
start at once and a timeout turns a hang into a failure; each reads both splits with
one strategy (TensorFlow's start is most of a process's time). Each split has 31
records in 3 shards, so neither 2 nor 3 divides it and 2 workers share 3 shards.
Training and the detection split go through 2 replicas and the MWMS workers: with 3 replicas the
process checks the classification split's batches alone (what the replica count changes), which
saves a third of the file's CPU.
"""

import importlib.util
import json
import os
import pathlib
from collections import Counter

import pytest

from tests.support.imagegen import write_class_tree
from tests.support.task_records import read_split, write_dataset
from tests.support.workers import free_port, run_workers

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "support" / "dist_worker.py"
COUNTS = {"a": 13, "b": 11, "c": 7}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from click.testing import CliRunner

    from prep.cli import main

    tmp = tmp_path_factory.mktemp("dist")
    write_class_tree(tmp / "src", COUNTS)
    data = tmp / "data"
    result = CliRunner().invoke(main, ["convert", str(tmp / "src"), str(data), "--num-shards", "3", "--no-progress"])
    assert result.exit_code == 0, result.output
    detection = write_dataset(tmp / "detection", "detection", {"train": 31}, {"train": 3}, fmt="jpeg", seed=4)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    ports = f"{free_port()},{free_port()}"
    jobs = {
        "mirrored2": ["mirrored", "--devices", "2"],
        "mwms0": ["mwms", "--index", "0", "--ports", ports],
        "mwms1": ["mwms", "--index", "1", "--ports", ports],
    }
    jobs = {name: [*args, "--detection", str(detection)] for name, args in jobs.items()}
    jobs["mirrored3"] = ["mirrored", "--devices", "3", "--no-training"]
    results = run_workers(WORKER, data, tmp, jobs, env)
    manifest = json.loads((data / "manifest.json").read_text())
    split = {p.relative_to(tmp / "src").as_posix() for p in (tmp / "src").rglob("*.*")}
    assert len(split) == manifest["splits"]["train"]["examples"] == 31
    boxes = {r.filename: len(r.objects) for r in read_split(detection, "train", "detection")}
    return results, split, boxes


@pytest.fixture(scope="module")
def detection_runs(runs):
    results, _, boxes = runs
    return {name: r["detection"] for name, r in results.items() if "detection" in r}, boxes


def check_training_epoch(epochs, steps, per_replica_batch, split, max_dropped):
    """Every replica of every worker got `steps` full batches; what they read is part of the split, once."""
    files = []
    for e in epochs:
        assert e["batches"] == [steps] * len(e["batches"])
        assert all(sizes == [per_replica_batch] * steps for sizes in e["sizes"])
        files += [f for replica in e["files"] for f in replica]
    assert len(files) == len(set(files)), Counter(files).most_common(3)
    assert set(files) <= split
    assert 0 <= len(split) - len(files) <= max_dropped
    return files


def check_padded_eval(epochs, split, padding, steps, per_replica_batch=2):
    """Evaluation with remainder='pad': full batches, as many on every replica; the union is the whole split;
    duplicates are exactly the weight-0 padding."""
    for e in epochs:
        assert e["batches"] == [steps] * len(e["batches"])
        assert all(sizes == [per_replica_batch] * steps for sizes in e["sizes"])
    reads = [(f, w) for e in epochs for names, ws in zip(e["files"], e["weights"]) for f, w in zip(names, ws)]
    assert {f for f, _ in reads} == split
    zero = [f for f, w in reads if w == 0.0]
    assert len(zero) == padding
    counts = Counter(f for f, _ in reads)
    assert sorted(f for f, n in counts.items() for _ in range(n - 1)) == sorted(zero)


@pytest.mark.parametrize("devices, steps", [(2, 7), (3, 5)])
def test_mirrored_strategy_balances_replicas(runs, devices, steps):
    results, split, _ = runs
    r = results[f"mirrored{devices}"]
    assert r["pipelines"] == 1 and r["steps"] == steps  # 31 // (2 per replica x devices)
    first = check_training_epoch([r["train"][0]], steps, 2, split, max_dropped=31 - steps * 2 * devices)
    second = check_training_epoch([r["train"][1]], steps, 2, split, max_dropped=31 - steps * 2 * devices)
    assert first != second  # a new order every epoch
    # one pipeline: pad to whole steps of 2 x devices: 32 = 31 + 1 (2 devices), 36 = 31 + 5 (3 devices)
    check_padded_eval([r["eval"]], split, padding={2: 1, 3: 5}[devices], steps={2: 8, 3: 6}[devices])
    assert r["uneven_batch_error"] == (
        f"global_batch_size {devices + 1} is not a multiple of the {devices} replicas in sync"
    )


def test_mirrored_strategy_fits(runs):
    r = runs[0]["mirrored2"]
    assert len(r["fit_distribute_losses"]) == 2 and all(loss > 0 for loss in r["fit_distribute_losses"])
    assert r["fit_load_loss"] > 0
    assert len(r["loop_losses"]) == 1 and r["loop_losses"][0] > 0
    assert r["fit_load_steps"] == 7


def test_multi_worker_strategy_balances_workers_and_trains(runs):
    results, split, _ = runs
    workers = [results["mwms0"], results["mwms1"]]
    for w in workers:
        assert w["pipelines"] == 2 and w["steps"] == 7  # each worker: 31 // 2 = 15 records, 7 batches of 2
    for epoch in (0, 1):
        files = check_training_epoch([w["train"][epoch] for w in workers], 7, 2, split, max_dropped=3)
        assert len(files) == 28
    check_padded_eval([w["eval"] for w in workers], split, padding=1, steps=8)  # 2 x 16 = 32 = 31 + 1
    assert all(len(w["loop_losses"]) == 2 and min(w["loop_losses"]) > 0 for w in workers)
    assert workers[0]["loop_losses"] == workers[1]["loop_losses"]  # one synchronous model
    # find_spec, not an import: importing tf_keras here would start TensorFlow in the test process for nothing
    if importlib.util.find_spec("tf_keras") is not None:
        assert all(len(w["tf_keras_losses"]) == 2 and min(w["tf_keras_losses"]) > 0 for w in workers)
    else:
        assert all(w["tf_keras_losses"] is None for w in workers)
    # docs/training.md says Keras 3 fit fails under MultiWorkerMirroredStrategy; if this starts passing, update it.
    assert all("PerReplica" in (w["keras3_fit_error"] or "") for w in workers), workers[0]["keras3_fit_error"]


# Detection (the checks above, for a split whose records carry boxes).


def check_detection_training(epochs, steps, boxes):
    """Every replica of every worker got `steps` full batches of 2; nothing read twice; files are the split's."""
    files = []
    for e in epochs:
        assert e["batches"] == [steps] * len(e["batches"])
        assert all(sizes == [2] * steps for sizes in e["sizes"])
        files += [f for replica in e["files"] for f in replica]
    assert len(files) == len(set(files)) and set(files) <= set(boxes)
    return files


def check_detection_eval(epochs, boxes, padding, steps):
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


def test_mirrored_strategy_gives_every_replica_equal_detection_batches(detection_runs):
    results, boxes = detection_runs
    r = results["mirrored2"]  # 3 replicas: test_mirrored_strategy_balances_replicas
    assert r["pipelines"] == 1 and r["steps"] == 7
    first = check_detection_training([r["train"][0]], 7, boxes)
    second = check_detection_training([r["train"][1]], 7, boxes)
    assert first != second and len(first) == 7 * 2 * 2
    check_detection_eval([r["eval"]], boxes, padding=1, steps=8)


def test_multi_worker_strategy_gives_every_worker_equal_detection_batches(detection_runs):
    results, boxes = detection_runs
    workers = [results["mwms0"], results["mwms1"]]
    assert all(w["pipelines"] == 2 and w["steps"] == 7 for w in workers)
    for e in (0, 1):
        assert len(check_detection_training([w["train"][e] for w in workers], 7, boxes)) == 28
    check_detection_eval([w["eval"] for w in workers], boxes, padding=1, steps=8)
