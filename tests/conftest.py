import contextlib
import fcntl
import json
import logging
import os
import pathlib
import resource
import tempfile
import time

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, settings

from prep.cli import main

# Hypothesis times its input generation and each example; on a shared 2-core machine (CI, 5 sessions at once)
# a slow draw failed test_leak_pairs's round trip with FailedHealthCheck (too_slow) though nothing was wrong.
# What the tests check does not depend on speed: timing checks are off for every property test.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

MAX_WORKERS = 4  # each worker imports TensorFlow and Beam (~1 GB); some tests start 4 TensorFlow processes more


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): a worker a core, at most MAX_WORKERS, or PYTEST_XDIST_AUTO_NUM_WORKERS;
    none when the arguments name a single test file: `--dist loadfile` runs a file on one worker anyway, so
    workers would only add their start-up to `python -m pytest tests/unit/prep/test_plan.py`."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    files = {pathlib.Path(arg.split("::")[0]).resolve() for arg in config.args}
    if len(files) == 1 and next(iter(files)).is_file():
        return 0
    return max(
        1, min(MAX_WORKERS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    )


@contextlib.contextmanager
def _alone(exclusive: bool):
    """Under xdist: a test marked `alone` runs while no other worker runs a test; the others wait for it.
    A readers-writer lock on files the run's workers share (flock): a test holds `lock` shared, an `alone`
    test exclusive; `turn` keeps tests from starting while an `alone` test waits for the running ones."""
    base = pathlib.Path(tempfile.gettempdir()) / f"tfrecord-prep-tests-{os.environ['PYTEST_XDIST_TESTRUNUID']}"
    with open(f"{base}.turn", "a") as turn, open(f"{base}.lock", "a") as lock:
        fcntl.flock(turn, fcntl.LOCK_EX)
        if not exclusive:
            fcntl.flock(turn, fcntl.LOCK_UN)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if exclusive:
            fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@contextlib.contextmanager
def _cpu_logged(item):
    """With PREP_TEST_CPU=PREFIX: a line per test in PREFIX.<xdist worker>.jsonl, its CPU seconds (the worker's
    threads and the child processes it reaped) and wall seconds, setup and teardown included. On a machine
    that others share, CPU seconds compare two checkouts where wall seconds do not;
    `python -m tests.support.suite_cpu PREFIX [PREFIX]` sums them by file."""
    prefix = os.environ.get("PREP_TEST_CPU")
    if not prefix:
        yield
        return
    cpu, wall = _cpu_seconds(), time.monotonic()
    try:
        yield
    finally:
        line = {"id": item.nodeid, "cpu": _cpu_seconds() - cpu, "wall": time.monotonic() - wall}
        with open(f"{prefix}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    parallel = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) >= 2 and "PYTEST_XDIST_TESTRUNUID" in os.environ
    alone = _alone(item.get_closest_marker("alone") is not None) if parallel else contextlib.nullcontext()
    with alone, _cpu_logged(item):
        yield


@pytest.fixture
def run_cli():
    """Runs `prep ...` in-process; returns the click Result."""

    def run(*args):
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)

    return run


@pytest.fixture(autouse=True)
def _quiet_beam():
    logging.getLogger("apache_beam").setLevel(logging.ERROR)


@pytest.fixture(autouse=True)
def _pillow_bomb_limit():
    """prepare_image sets Pillow's process-wide bomb limit from its options (one set per run in the
    product); a test with a small --max-pixels must not leave it to the tests after it."""
    from PIL import Image

    saved = Image.MAX_IMAGE_PIXELS
    yield
    Image.MAX_IMAGE_PIXELS = saved
