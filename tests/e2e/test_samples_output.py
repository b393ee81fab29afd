"""The sample scripts print what a user needs and nothing of TensorFlow's start-up logs."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOISE = (
    "absl::InitializeLog",
    "cuInit",
    "cudart_stub",
    "auto_shard",
    "cpu_feature_guard",
    "shuffle=True",
    "I0000",
    "W0000",
    "E0000",
)


def _run(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)


def test_train_sample_prints_only_its_results(tmp_path, run_cli):
    data = tmp_path / "shapes"
    assert (
        run_cli(
            "convert",
            ROOT / "samples" / "shapes",
            data,
            "--split",
            "train=0.8,validation=0.1,test=0.1",
            "--num-shards",
            "2",
            "--no-progress",
        ).exit_code
        == 0
    )
    result = _run(ROOT / "samples" / "train.py", "--data", data, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    assert [line for line in lines if any(word in line for word in NOISE)] == []
    assert lines[0] == "2 replicas, 5 steps per epoch of 32; 21 validation and 20 test images"
    assert lines[-1].startswith("trained 1 epochs in ")
    assert len(lines) == 3  # and Keras's one line for the epoch


def test_model_garden_sample_prints_only_its_results(tmp_path, run_cli):
    pytest.importorskip("official", reason="tf-models-official is not installed (the README's test command does)")
    data = tmp_path / "shapes"
    assert (
        run_cli(
            "convert",
            ROOT / "samples" / "shapes",
            data,
            "--split",
            "train=0.8,validation=0.1,test=0.1",
            "--num-shards",
            "2",
            "--target",
            "model-garden",
            "--no-progress",
        ).exit_code
        == 0
    )
    result = _run(ROOT / "samples" / "model_garden.py", data)
    assert result.returncode == 0, result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    assert [line for line in lines if any(word in line for word in NOISE)] == []
    assert [line.split(":")[0] for line in lines] == [
        "train (training, decode_jpeg_only=True)",
        "validation (evaluation, decode_jpeg_only=True)",
    ]
