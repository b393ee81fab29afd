"""The DaskRunner's GroupByKey and Flatten with their partitions capped at `--dask_npartitions`.

Beam's Dask translation makes a Flatten a `dask.bag.concat`, whose partitions are the sum of its inputs',
and a GroupByKey a `Bag.groupby` that keeps its input's partitions. A pipeline of many Flattens (the
dedupe steps join a dozen) then grows from 2 partitions at the listing to hundreds, and the graph to tens
of thousands of tasks whatever the data's size: 35,759 for a 78-image conversion, most of its Dask time
spent in the scheduler. Grouping into at most `--dask_npartitions` partitions (the cluster's task slots,
`runners.dask_partition_args`), and merging a Flatten's partitions down to it, keeps every step at the
cluster's width. Which partition holds
a key changes nothing we write: every step that orders output sorts it.
"""

from __future__ import annotations

import functools


@functools.cache
def cap_group_partitions() -> None:
    """Replace, once per process, the translations Beam's DaskRunner uses for GroupByKey and Flatten."""
    from apache_beam.runners.dask import transform_evaluator
    from apache_beam.runners.dask.overrides import _Flatten, _GroupByKeyOnly

    class CappedGroupByKey(transform_evaluator.GroupByKey):
        def apply(self, input_bag, side_inputs=None):
            cap = self.bag_kwargs.get("npartitions")
            if not cap or input_bag.npartitions <= cap:
                return super().apply(input_bag, side_inputs)

            def key(item):
                return item[0]

            def value(item):
                k, v = item
                return k, [transform_evaluator.defenestrate(elm[1]) for elm in v]

            return input_bag.groupby(key, npartitions=cap).map(value)

    class CappedFlatten(transform_evaluator.Flatten):
        def apply(self, input_bag, side_inputs=None):
            bag = super().apply(input_bag, side_inputs)
            cap = self.bag_kwargs.get("npartitions")
            return bag.repartition(npartitions=cap) if cap and bag.npartitions > cap else bag

    transform_evaluator.TRANSLATIONS[_GroupByKeyOnly] = CappedGroupByKey
    transform_evaluator.TRANSLATIONS[_Flatten] = CappedFlatten
