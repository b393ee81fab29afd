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
