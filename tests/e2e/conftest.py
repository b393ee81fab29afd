"""Every test under tests/e2e/ is marked `slow`: whole conversions through the CLI, subprocesses, kills,
other runners, TensorFlow training. `python -m pytest -m "not slow"` leaves them out of the inner loop;
`python -m pytest` (the README's and CI's command) runs them. A test file added here is marked too.

The quick loop's `-m "not slow"` does not even import the files here: each of its workers would otherwise
import them (TensorFlow Datasets, Dask, ...) only to deselect every test in them."""

import pathlib

import pytest

HERE = pathlib.Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path, config):
    if (
        " ".join(config.getoption("markexpr").split()) == "not slow"
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
    ):
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in pathlib.Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def dask_cluster():
    """The scheduler address of a Dask LocalCluster (2 processes of 1 thread) that the session's Dask tests
    share (tests/support/services.py says why); skips when Dask is not installed."""
    pytest.importorskip("dask.distributed", reason="pip install -e '.[dask]'")
    from tests.support.services import dask_cluster

    with dask_cluster() as address:
        yield address


@pytest.fixture(scope="session")
def portable_services(tmp_path_factory):
    """(job port, pool port): Beam's local job service and an external worker pool, shared by the session."""
    from tests.support.services import portable_services

    with portable_services(tmp_path_factory.mktemp("worker-pool")) as ports:
        yield ports
