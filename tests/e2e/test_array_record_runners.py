"""`--file-format array_record` through the other runners: the same bytes as the embedded runner's. Apart from
test_array_record.py so that `--dist loadfile` can run the two on different workers (these three conversions
start processes: Beam's multi-processing workers, a Dask cluster, a job service and worker pool)."""

from __future__ import annotations

import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from tests.e2e.test_array_record import AR, ARGS, write_source
from tests.support.shards import convert_with_cli


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_source(tmp_path_factory.mktemp("ar-src"))


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    """The embedded runner's ArrayRecord conversion of `source`."""
    return convert_with_cli(source, tmp_path_factory.mktemp("ar-out") / "ar", *ARGS, *AR)


@pytest.mark.parametrize("runner", ["multi_processing", "dask", "portable"])
def test_other_runners_write_the_same_array_record_bytes(source, reference, tmp_path, runner, request):
    """ArrayRecord files are as deterministic as TFRecords: the same bytes from any runner and worker
    count, and from shards written in parts (group_target)."""
    options = {"split": "train=0.7,validation=0.3", "num_shards": 3, "workers": 2, "file_format": "array_record"}
    config = build_config(str(source), str(tmp_path / "out"), options)
    if runner == "dask":
        args = [f"--dask_client_address={request.getfixturevalue('dask_cluster')}"]
        conversion.convert(
            config,
            list_inputs(config),
            runner="apache_beam.runners.dask.dask_runner.DaskRunner",
            beam_args=args,
            group_target=5,
        )
    elif runner == "portable":  # Beam's job service and an external worker pool: the path Flink and Spark take
        job_port, pool_port = request.getfixturevalue("portable_services")
        args = [
            f"--job_endpoint=localhost:{job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{pool_port}",
        ]
        conversion.convert(config, list_inputs(config), runner="PortableRunner", beam_args=args, group_target=5)
    else:
        args = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
        conversion.convert(config, list_inputs(config), runner="DirectRunner", beam_args=args, group_target=5)
    written = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.array_record")}
    assert written == {p.name: p.read_bytes() for p in reference.glob("*.array_record")} and len(written) == 6
