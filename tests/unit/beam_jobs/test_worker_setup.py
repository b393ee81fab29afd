"""Remote workers get our code: a generated setup.py that builds an sdist of our packages."""

import shutil
import subprocess
import sys
import tarfile

import pytest

from beam_jobs.worker_setup import needs_staging, staging_args, write_setup_folder


@pytest.mark.parametrize(
    "runner, args, expected",
    [
        ("DataflowRunner", ["--project=p", "--region=r"], True),
        ("FlinkRunner", ["--flink_master=host:8081"], True),
        ("SparkRunner", [], True),
        ("PortableRunner", ["--job_endpoint=localhost:8099", "--environment_type=DOCKER"], True),
        (
            "PortableRunner",
            ["--job_endpoint=localhost:8099", "--environment_type=EXTERNAL", "--environment_config=localhost:50000"],
            False,
        ),
        ("PortableRunner", ["--environment_type", "LOOPBACK"], False),
        ("DataflowRunner", ["--setup_file=./setup.py"], False),
        ("DataflowRunner", ["--extra_package=dist/x.whl"], False),
        ("DataflowRunner", ["--sdk_container_image=gcr.io/p/img"], False),
        ("local", [], False),
        ("DirectRunner", [], False),
        ("apache_beam.runners.dask.dask_runner.DaskRunner", [], False),
        # The names Beam's create_runner also accepts.
        ("dataflow", [], True),
        ("flink", [], True),
        ("portable", [], True),
        ("sparkrunner", [], True),
        ("Direct", [], False),
    ],
)
def test_needs_staging(runner, args, expected):
    assert needs_staging(runner, args) is expected


def test_generated_setup_builds_an_sdist_with_our_packages(tmp_path):
    setup_py = write_setup_folder(str(tmp_path))
    subprocess.run(
        [sys.executable, setup_py, "-q", "sdist", "--dist-dir", str(tmp_path / "dist")],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    names = tarfile.open(sdist).getnames()
    for module in ("prep/core/layout.py", "prep/core/image_rules.py", "beam_jobs/graph.py", "beam_jobs/prepare.py"):
        assert any(n.endswith(module) for n in names), module
    assert not any("__pycache__" in n for n in names)
    assert "pillow" in (tmp_path / "setup.py").read_text()


def test_staging_args_adds_setup_file_once():
    args, folder = staging_args("DataflowRunner", ["--project=p"])
    assert folder is not None and args[-1] == f"--setup_file={folder}/setup.py"
    assert staging_args("DataflowRunner", args) == (args, None)
    shutil.rmtree(folder)
