"""Worker processes for the distribution tests: one per replica set or MultiWorkerMirroredStrategy worker,
all started at once (the MWMS workers wait for each other), each writing its findings as JSON."""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys

import pytest

TIMEOUT = 300  # seconds per worker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(script, data, tmp: pathlib.Path, jobs: dict[str, list[str]], env: dict) -> dict[str, dict]:
    """Runs `python script MODE DATA TMP/NAME.json ARGS...` for each job {NAME: [MODE, *ARGS]} at once and
    returns {NAME: its JSON}; fails the test with every worker's log tail if one exits non-zero or hangs."""
    procs = {}
    for name, args in jobs.items():
        with open(tmp / f"{name}.log", "wb") as log:
            procs[name] = subprocess.Popen(
                [sys.executable, str(script), args[0], str(data), str(tmp / f"{name}.json"), *args[1:]],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    failed = []
    try:
        for name, proc in procs.items():
            try:
                if proc.wait(timeout=TIMEOUT) != 0:
                    failed.append(f"{name} exited {proc.returncode}")
            except subprocess.TimeoutExpired:
                failed.append(f"{name} hung for {TIMEOUT} s")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if failed:
        logs = "\n".join(f"--- {name}\n{(tmp / f'{name}.log').read_text()[-3000:]}" for name in jobs)
        pytest.fail("; ".join(failed) + "\n" + logs)
    return {name: json.loads((tmp / f"{name}.json").read_text()) for name in jobs}
