"""The DaskRunner's ParDo gives each partition its own receiver and DoFn (beam_jobs/dask_pardo.py), so that
tasks run without serializing (Dask's synchronous and threaded schedulers, worker threads of one process)
neither repeat each other's outputs nor share a DoFn's setup and teardown."""

import threading

import pytest

db = pytest.importorskip("dask.bag", reason="pip install -e '.[dask]'")
beam = pytest.importorskip("apache_beam")

from apache_beam.transforms.window import GlobalWindow  # noqa: E402
from apache_beam.utils.windowed_value import WindowedValue  # noqa: E402

SET_UP: list = []  # the DoFn object of each setup() call, held: a freed object's id() is reused
LOCK = threading.Lock()


class Tens(beam.DoFn):
    """x -> 10 x, and one "end" from finish_bundle; fails where another task tore its DoFn down under it."""

    def setup(self):
        with LOCK:
            SET_UP.append(self)
        self.open = True

    def process(self, x):
        assert self.open, "torn down by another task"
        yield 10 * x

    def finish_bundle(self):
        yield WindowedValue("end", 0, (GlobalWindow(),))

    def teardown(self):
        self.open = False


def translated(scheduler: str, partitions: int = 4) -> list:
    from apache_beam.runners.dask import transform_evaluator

    from beam_jobs.runners import make_runner

    make_runner("DaskRunner")  # what a conversion on the DaskRunner does before its pipeline is translated
    step = beam.Pipeline() | beam.Create([0]) | "Tens" >> beam.ParDo(Tens())
    op = transform_evaluator.TRANSLATIONS[beam.ParDo](step.producer, bag_kwargs={})
    bag = db.from_sequence(range(20), npartitions=partitions)
    return op.apply(bag).compute(scheduler=scheduler)


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_each_partition_gives_its_own_outputs_once(scheduler):
    # Beam's translation: one receiver for all partitions, so the sync scheduler returned 50 values for 20.
    out = translated(scheduler)
    assert sorted(x for x in out if x != "end") == [10 * x for x in range(20)]
    assert out.count("end") == 4  # finish_bundle's output, which Beam's translation dropped


def test_each_partition_sets_up_a_dofn_of_its_own():
    # Beam's translation set up and tore down one DoFn object in every partition, threads sharing it.
    SET_UP.clear()
    translated("sync", partitions=5)
    assert len(SET_UP) == 5 and len({id(dofn) for dofn in SET_UP}) == 5
