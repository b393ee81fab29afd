"""beam_jobs.lean_import: Beam imported without its unused optional clients, which stay importable after."""

import importlib.util
import subprocess
import sys

import pytest

from beam_jobs.lean_import import UNUSED, _Refuse


def test_refuses_the_named_modules_and_their_submodules_only():
    refuse = _Refuse(("pandas", "google.cloud.bigquery"))
    for name in ("pandas", "pandas.core", "google.cloud.bigquery", "google.cloud.bigquery.job"):
        with pytest.raises(ModuleNotFoundError, match=name):
            refuse.find_spec(name)
    for name in ("pandasx", "google.cloud.storage", "google.cloud.bigquery_storage_v1", "numpy"):
        assert refuse.find_spec(name) is None


_CHILD = """
import sys
from beam_jobs.lean_import import UNUSED, import_beam
import_beam()
import apache_beam
print(apache_beam.Pipeline.__name__, sorted(n for n in UNUSED if n in sys.modules))
import pandas
print(pandas.__name__)
"""


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed")
def test_a_fresh_process_imports_beam_without_them_and_pandas_after():
    # a fresh interpreter: this one may have imported Beam and pandas already
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["Pipeline []", "pandas"]
    assert "IPython" in UNUSED


_STORES = """
import sys
from beam_jobs.lean_import import OBJECT_STORES, import_beam
import_beam()
print(sorted(n for n in OBJECT_STORES if n in sys.modules))
from beam_jobs.beam_fs import file_systems
print(type(file_systems().get_filesystem("gs://bucket/a.jpg")).__name__)
print(type(file_systems().get_filesystem("s3://bucket/a.jpg")).__name__)
"""


def test_object_stores_are_left_out_of_the_import_and_loaded_on_a_remote_paths_first_use():
    done = subprocess.run([sys.executable, "-c", _STORES], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:3] == ["[]", "GCSFileSystem", "S3FileSystem"]


_RETRY = """
import sys
from beam_jobs.lean_import import import_beam, object_stores
import_beam()
from apache_beam.utils import retry
print(retry.HttpError, retry.GoogleAPICallError, "apitools" in sys.modules)
object_stores()
print(retry.HttpError.__name__, retry.GoogleAPICallError.__name__)
"""


@pytest.mark.skipif(importlib.util.find_spec("apitools") is None, reason="apitools is not installed")
def test_beams_retry_filters_get_their_error_classes_back_with_the_object_stores():
    done = subprocess.run([sys.executable, "-c", _RETRY], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["None None False", "HttpError GoogleAPICallError"]
