"""The same input and seed through every runner we can run here give identical shards and manifests."""

import logging
import os

import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from tests.support.imagegen import write_dirty_tree
from tests.support.shards import assert_same_dataset, manifest_without_run, shard_bytes
from tests.support.workers import free_port

DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"
# index: record indexes must be identical through every runner, also for shards written in parts.
OPTIONS = {
    "split": "train=0.7,validation=0.3",
    "num_shards": 2,
    "max_per_class": 30,
    "seed": 5,
    "workers": 2,
    "index": True,
}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("runners-src")
    write_dirty_tree(root, {"ant": 7, "bee": 41, "cat": 18}, size=(14, 10))
    return root


def convert(source, out, runner="local", beam_args=(), group_target=None):
    config = build_config(str(source), str(out), OPTIONS)
    kwargs = {} if group_target is None else {"group_target": group_target}
    conversion.convert(config, list_inputs(config), runner=runner, beam_args=list(beam_args), **kwargs)
    return out


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    out = convert(source, tmp_path_factory.mktemp("ref") / "out")
    manifest = manifest_without_run(out)
    assert manifest["inputs"]["rejected"] == 1 and manifest["inputs"]["capped"] == 11
    assert manifest["inputs"]["converted"] == 1
    return out


def assert_same(out, reference):
    assert_same_dataset(out, reference, shards=4)
    assert len(list(out.glob("*.tfrecord.idx"))) == 4  # compared with the reference's by assert_same_dataset


def test_direct_runner_in_memory(source, reference, tmp_path):
    assert_same(
        convert(source, tmp_path / "out", runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"]),
        reference,
    )


def test_many_rank_tasks_and_multi_part_shards(source, reference, tmp_path):
    assert_same(convert(source, tmp_path / "out", group_target=3), reference)


def test_file_systems_that_return_short_reads(source, reference, tmp_path, monkeypatch):
    # A file system's reader may return less than asked (a raw stream, a network
    # read cut short): entry sections, spilled records and parts are read in full.
    from prep.core import storage

    class Trickle:
        def __init__(self, f):
            self._f = f

        def read(self, size=-1):
            return self._f.read(size if size is None or size < 0 else min(size, 7))

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    real = storage.open_read
    monkeypatch.setattr(storage, "open_read", lambda path: Trickle(real(path)))
    assert_same(convert(source, tmp_path / "out", group_target=3), reference)


def test_direct_runner_multi_processing(source, reference, tmp_path):
    out = convert(
        source,
        tmp_path / "out",
        runner="DirectRunner",
        beam_args=["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        group_target=5,
    )
    assert_same(out, reference)


# portable_services and dask_cluster: tests/e2e/conftest.py (one of each per session).


def test_portable_runner_with_external_worker_pool(source, reference, tmp_path, portable_services):
    job_port, pool_port = portable_services
    out = convert(
        source,
        tmp_path / "out",
        runner="PortableRunner",
        group_target=5,
        beam_args=[
            f"--job_endpoint=localhost:{job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{pool_port}",
        ],
    )
    assert_same(out, reference)


def test_a_job_service_that_does_not_answer_is_one_error_and_resume_finishes_on_the_right_one(
    source, reference, tmp_path, portable_services
):
    from prep.core.errors import RunnerError

    job_port, pool_port = portable_services
    worker = ["--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}"]
    nobody = free_port()
    with pytest.raises(
        RunnerError,
        match=f"^no job service answered at --job_endpoint localhost:{nobody} within "
        "2 s .*; the work done so far is kept: .* --resume to finish$",
    ):
        convert(
            source,
            tmp_path / "out",
            runner="PortableRunner",
            group_target=5,
            beam_args=[f"--job_endpoint=localhost:{nobody}", "--job_server_timeout=2", *worker],
        )
    config = build_config(str(source), str(tmp_path / "out"), dict(OPTIONS, resume=True))
    conversion.convert(
        config,
        list_inputs(config),
        runner="PortableRunner",
        group_target=5,
        beam_args=[f"--job_endpoint=localhost:{job_port}", *worker],
    )
    assert_same(tmp_path / "out", reference)


def test_dask_runner_on_local_cluster(source, reference, tmp_path, dask_cluster):
    out = convert(
        source, tmp_path / "out", runner=DASK, beam_args=[f"--dask_client_address={dask_cluster}"], group_target=5
    )
    assert_same(out, reference)


def test_dask_partitions_follow_the_clusters_task_slots():
    # Beam's Dask translation put every chunk id in one partition: one worker did everything.
    distributed = pytest.importorskip("dask.distributed", reason="pip install -e '.[dask]'")
    from beam_jobs.runners import check_runner_options, dask_partition_args

    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    slots = (os.cpu_count() or 1) + 1  # not this machine's count, which is the answer without a scheduler
    with distributed.LocalCluster(
        n_workers=slots, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        address = f"--dask_client_address={cluster.scheduler_address}"
        assert dask_partition_args(DASK, [address], 40) == [address, f"--dask_npartitions={slots}"]
        assert dask_partition_args(DASK, [address], 1) == [address, "--dask_npartitions=1"]
        for chosen in (["--dask_npartitions=7"], ["--dask_npartitions", "7"], ["--dask_partition_size=3"]):
            assert dask_partition_args(DASK, [address, *chosen], 40) == [address, *chosen]
            # A user's partition option beside a scheduler address is the runner's, not the Client's.
            check_runner_options(DASK, [address, *chosen])
    assert dask_partition_args(DASK, [], 40) == [f"--dask_npartitions={os.cpu_count() or 1}"]
    assert dask_partition_args("local", [], 40) == []


def test_a_bug_in_our_code_keeps_its_traceback_on_in_process_runners(source, tmp_path, monkeypatch):
    # Only failures of runners that submit a job elsewhere become a one-line RunnerError.
    from beam_jobs import prepare

    def broken(self, element):
        raise KeyError("a bug")

    monkeypatch.setattr(prepare.PrepareChunk, "process", broken)
    with pytest.raises(KeyError, match="a bug"):
        convert(source, tmp_path / "out", runner="DirectRunner", beam_args=["--direct_running_mode=in_memory"])


def test_object_store_paths_go_through_beam_filesystems(source, reference, tmp_path):
    from tests.support.testfs import to_url

    labels = tmp_path / "labels.csv"
    rows = ["path,label"] + [f"{p.relative_to(source)},{p.parent.name}" for p in sorted(source.rglob("*.*"))]
    labels.write_text("\n".join(rows) + "\n")
    convert(to_url(str(source)), to_url(str(tmp_path / "out")))
    assert_same(tmp_path / "out", reference)
    config = build_config(str(source), to_url(str(tmp_path / "out2")), dict(OPTIONS, labels=to_url(str(labels))))
    conversion.convert(config, list_inputs(config))
    assert shard_bytes(tmp_path / "out2") == shard_bytes(reference)


# Detection: the same through the runners (records, box notes, label maps, counts of parts).
DETECTION = {"split": "train=0.7,validation=0.3", "num_shards": 2, "seed": 5, "workers": 2, "index": True}


@pytest.fixture(scope="module")
def detection_source(tmp_path_factory):
    from tests.support import drawn_shapes

    root = tmp_path_factory.mktemp("runners-det")
    images, path = drawn_shapes.write_coco_set(root, 30, orientations=(1, 6, 3, 8))
    (root / "images" / "stray.png").write_bytes(drawn_shapes.encode(images[0], ("cat", "dog", "bird")))
    return root


def convert_detection(root, out, runner="local", beam_args=(), group_target=None):
    config = build_config(
        str(root / "images"), str(out), dict(DETECTION, annotations=str(root / "instances.json"), bad_boxes="clip")
    )
    kwargs = {} if group_target is None else {"group_target": group_target}
    conversion.convert(config, list_inputs(config), runner=runner, beam_args=list(beam_args), **kwargs)
    return out


@pytest.fixture(scope="module")
def detection_reference(detection_source, tmp_path_factory):
    out = convert_detection(detection_source, tmp_path_factory.mktemp("det-ref") / "out")
    manifest = manifest_without_run(out)
    assert manifest["task"] == "detection" and manifest["inputs"]["rejected_by_reason"] == {"not_annotated": 1}
    assert {"label_map.pbtxt", "label_map.csv"} <= {p.name for p in out.iterdir()}
    return out


@pytest.mark.parametrize(
    "runner, beam_args, group_target",
    [
        ("local", (), 3),  # many rank tasks, shards written in parts
        ("DirectRunner", ("--direct_running_mode=in_memory",), None),
    ],
)  # detection in worker processes: test_detection_on_the_dask_runner; multi_processing: for classification
def test_detection_through_the_runners(
    detection_source, detection_reference, tmp_path, runner, beam_args, group_target
):
    out = convert_detection(detection_source, tmp_path / "out", runner, beam_args, group_target)
    assert_same(out, detection_reference)


def test_detection_on_the_dask_runner(detection_source, detection_reference, tmp_path, dask_cluster):
    out = convert_detection(detection_source, tmp_path / "out", DASK, [f"--dask_client_address={dask_cluster}"], 5)
    assert_same(out, detection_reference)
