import logging

import pytest
from click.testing import CliRunner

from prep.cli import main


@pytest.fixture
def run_cli():
    """Runs `prep ...` in-process; returns the click Result."""
    def run(*args):
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return run


@pytest.fixture(autouse=True)
def _quiet_beam():
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
