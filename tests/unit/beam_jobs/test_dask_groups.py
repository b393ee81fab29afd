"""The DaskRunner's Flatten and GroupByKey stay at --dask_npartitions partitions (beam_jobs/dask_groups.py)."""

import pytest

db = pytest.importorskip("dask.bag", reason="pip install -e '.[dask]'")


def translations():
    from apache_beam.runners.dask import transform_evaluator
    from apache_beam.runners.dask.overrides import _Flatten, _GroupByKeyOnly

    from beam_jobs.runners import make_runner

    make_runner("DaskRunner")  # what a conversion on the DaskRunner does before its pipeline is translated
    return transform_evaluator.TRANSLATIONS[_Flatten], transform_evaluator.TRANSLATIONS[_GroupByKeyOnly]


def bags():
    return [db.from_sequence([(i % 5, (b, i)) for i in range(12)], npartitions=3) for b in range(4)]


def grouped(bag):
    return sorted((k, sorted(v)) for k, v in bag.compute(scheduler="sync"))


def test_a_flatten_then_a_group_keep_the_clusters_width_and_the_same_groups():
    flatten, group = translations()
    flat = flatten(None, bag_kwargs={"npartitions": 2}).apply(bags())
    assert flat.npartitions == 2  # Beam's concat alone: 12
    assert sorted(flat.compute(scheduler="sync")) == sorted(x for b in bags() for x in b.compute(scheduler="sync"))
    wide = flatten(None, bag_kwargs={}).apply(bags())
    assert wide.npartitions == 12
    capped = group(None, bag_kwargs={"npartitions": 2}).apply(wide)
    assert capped.npartitions == 2
    assert grouped(capped) == grouped(group(None, bag_kwargs={}).apply(wide))
    assert [(k, len(v)) for k, v in grouped(capped)] == [(0, 12), (1, 12), (2, 8), (3, 8), (4, 8)]
