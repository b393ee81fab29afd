"""Runners whose workers are threads of one process give the embedded runner's bytes: a Dask LocalCluster of
worker threads (`processes=False`), where Beam's ParDo translation shared one receiver and one DoFn between
tasks (beam_jobs/dask_pardo.py), and DirectRunner's multi-threaded mode. Both the listing pipeline (class
folders listed on workers, beam_jobs/list_source.py) and the conversion run there."""

import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from tests.support.imagegen import write_dirty_tree
from tests.support.shards import assert_same_dataset

DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"
# workers: 2 threads a PrepareChunk and WriteParts, besides the runner's; index: record indexes compared too.
OPTIONS = {"split": "train=0.7,validation=0.3", "num_shards": 2, "max_per_class": 30, "seed": 5, "workers": 2}


@pytest.fixture(scope="module")
def threads_cluster():
    """The address of a LocalCluster of 2 workers of 2 threads, all in this process."""
    pytest.importorskip("dask.distributed", reason="pip install -e '.[dask]'")
    from tests.support.services import dask_threads_cluster

    with dask_threads_cluster() as address:
        yield address


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("threads-src")
    write_dirty_tree(root, {"ant": 7, "bee": 41, "cat": 18}, size=(14, 10))  # one undecodable, bee capped
    return root


def convert(source, out, runner="local", beam_args=()):
    """A conversion that lists SOURCE itself: on workers, but on the embedded runner (list_source.py)."""
    config = build_config(str(source), str(out), dict(OPTIONS, index=True))
    conversion.convert(config, None, runner=runner, beam_args=list(beam_args), group_target=5)
    return out


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    return convert(source, tmp_path_factory.mktemp("threads-ref") / "out")


def test_dask_worker_threads_list_and_convert_as_the_embedded_runner(source, reference, tmp_path, threads_cluster):
    # Before: "internal error: the chunks written are not those planned" (each partition's outputs repeated
    # with every later one), or a CancelledError (a task's teardown shut the pool another task was using).
    out = convert(source, tmp_path / "out", DASK, [f"--dask_client_address={threads_cluster}"])
    assert_same_dataset(out, reference, shards=4)


def test_direct_runner_multi_threading(source, reference, tmp_path):
    args = ["--direct_running_mode=multi_threading", "--direct_num_workers=2"]
    assert_same_dataset(convert(source, tmp_path / "out", "DirectRunner", args), reference, shards=4)
