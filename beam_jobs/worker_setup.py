"""Getting our code onto remote workers without manual steps.

Runners whose workers do not share this Python environment (Dataflow, and
Flink, Spark or a portable job service with Docker or process environments)
get a generated `--setup_file`: a temporary folder holding copies of the
installed `prep`, `beam_jobs` and `loaders` packages and a setup.py listing
what the workers need (Pillow, crc32c, numpy; not TensorFlow, which
only the loaders use). Beam builds an sdist from it, stages it, and workers
install it at start-up. Nothing is added when the user already passes
`--setup_file`, `--extra_package(s)`, `--requirements_file` or
`--sdk_container_image`, or when workers share our environment
(`--environment_type=EXTERNAL` or `LOOPBACK`).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import prep

WORKER_REQUIREMENTS = ("pillow>=10", "crc32c>=2.3", "numpy>=1.24")
PACKAGES = ("prep", "beam_jobs", "loaders")  # copied whole, subpackages included
SETUP_PACKAGES = ("prep", "prep.core", "beam_jobs", "loaders")  # what setup.py installs from the copies
STAGING_RUNNERS = ("DataflowRunner", "FlinkRunner", "SparkRunner", "PortableRunner", "PrismRunner")

SETUP_PY = '''import setuptools

setuptools.setup(
    name="tfrecord-prep-worker",
    version={version!r},
    packages={packages!r},
    install_requires={requirements!r},
)
'''


def runner_class_name(runner: str) -> str:
    """The class name Beam resolves `runner` to: it also takes "dataflow", "flink", "portable" and
    other case and "Runner"-suffix variants (apache_beam.runners.runner.create_runner)."""
    name = runner.split(".")[-1]
    for known in STAGING_RUNNERS:
        if name.lower() in (known.lower(), known.lower().removesuffix("runner")):
            return known
    return name


def needs_staging(runner: str, beam_args: list[str]) -> bool:
    """Whether workers of `runner` need our code staged, given the user's Beam options."""
    from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, SetupOptions, WorkerOptions

    if runner_class_name(runner) not in STAGING_RUNNERS:
        return False
    options = PipelineOptions(beam_args)
    setup = options.view_as(SetupOptions)
    if setup.setup_file or setup.extra_packages or setup.requirements_file:
        return False
    if options.view_as(WorkerOptions).sdk_container_image:
        return False
    return (options.view_as(PortableOptions).environment_type or "").upper() not in ("EXTERNAL", "LOOPBACK")


def write_setup_folder(folder: str) -> str:
    """Copies our packages into `folder` with a setup.py; returns the setup.py path."""
    for name in PACKAGES:
        init = __import__(name).__file__
        assert init is not None  # our packages are regular ones, each with its __init__.py
        source = os.path.dirname(init)
        shutil.copytree(source, os.path.join(folder, name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    path = os.path.join(folder, "setup.py")
    with open(path, "w") as f:
        f.write(
            SETUP_PY.format(
                version=prep.__version__, packages=list(SETUP_PACKAGES), requirements=list(WORKER_REQUIREMENTS)
            )
        )
    return path


def staging_args(runner: str, beam_args: list[str]) -> tuple[list[str], str | None]:
    """Beam args with a generated `--setup_file` added when needed, and the folder to delete after."""
    if not needs_staging(runner, beam_args):
        return beam_args, None
    folder = tempfile.mkdtemp(prefix="tfrecord-prep-stage-")
    return [*beam_args, f"--setup_file={write_setup_folder(folder)}"], folder
