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


@pytest.fixture(autouse=True)
def _pillow_bomb_limit():
    """prepare_image sets Pillow's process-wide bomb limit from its options (one set per run in the
    product); a test with a small --max-pixels must not leave it to the tests after it."""
    from PIL import Image

    saved = Image.MAX_IMAGE_PIXELS
    yield
    Image.MAX_IMAGE_PIXELS = saved
