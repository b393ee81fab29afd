"""`beam_fs.configure`: Beam's FileSystems on the driver get the options given after `--`."""

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import S3Options

from beam_jobs import beam_fs


@pytest.fixture
def saved_options():
    saved = FileSystems._pipeline_options
    yield
    FileSystems._pipeline_options = saved


def test_configure_gives_beams_file_systems_the_options_after_the_separator(saved_options):
    beam_fs.configure(["--s3_endpoint_url=http://localhost:9000", "--s3_region_name=eu-1"])
    options = FileSystems._pipeline_options.view_as(S3Options)
    assert options.s3_endpoint_url == "http://localhost:9000"
    assert options.s3_region_name == "eu-1"


def test_configure_with_no_options_still_sets_them(saved_options):
    FileSystems._pipeline_options = None
    beam_fs.configure([])
    assert FileSystems._pipeline_options is not None
