"""Every test under tests/e2e/ is marked `slow`: whole conversions through the CLI, subprocesses, kills,
other runners, TensorFlow training. `python -m pytest -m "not slow"` leaves them out of the inner loop;
`python -m pytest` (the README's and CI's command) runs them. A test file added here is marked too."""

import pathlib

import pytest

HERE = pathlib.Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in pathlib.Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)
