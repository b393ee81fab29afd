"""`loaders.grain_plan`: each epoch a seeded permutation of the whole split, cut into equal shares per
process, and batch k a pure function of k (what makes a Grain iterator's state one index)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from loaders.epoch import epoch_size
from loaders.grain_plan import EpochPlan, SplitRecords
from loaders.source import SplitSource
from prep.core import formats
from prep.core.tfrecord import frame


def plan(records: int, batch: int, pipeline: int = 0, pipelines: int = 1, seed: int = 0) -> EpochPlan:
    size = epoch_size(records, batch, pipelines, 1, True)
    return EpochPlan(records, size.per_pipeline, batch, size.batches_per_pipeline, pipeline, seed)


@pytest.mark.parametrize("records,pipelines,batch", [(103, 1, 10), (103, 4, 5), (7, 3, 2), (64, 2, 32)])
def test_every_process_reads_an_equal_disjoint_share_of_each_epoch(records, pipelines, batch):
    plans = [plan(records, batch, i, pipelines) for i in range(pipelines)]
    for epoch in range(3):
        shares = [np.concatenate([p.positions(epoch * p.batches + b)[1] for b in range(p.batches)]) for p in plans]
        assert len({len(s) for s in shares}) == 1 and len(shares[0]) == plans[0].batches * batch
        every = np.concatenate(shares)
        assert len(set(every.tolist())) == len(every) and every.min() >= 0 and every.max() < records


def test_each_epoch_is_a_new_permutation_the_same_in_every_process():
    p = plan(1000, 10)
    orders = [p.order(e) for e in range(3)]
    assert all(sorted(o.tolist()) == list(range(1000)) for o in orders)
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])
    assert np.array_equal(pickle.loads(pickle.dumps(p)).order(2), orders[2])
    assert not np.array_equal(plan(1000, 10, seed=1).order(0), orders[0])


def test_a_batch_depends_on_its_index_only():
    p = plan(50, 8)
    assert p.batches == 6
    epoch, positions = p.positions(13)
    assert epoch == 2 and np.array_equal(positions, p.order(2)[8:16])
    evaluation = EpochPlan(50, 50, 8, 7, fixed=np.arange(50)[::-1])
    assert evaluation.positions(6)[1].tolist() == [1, 0]  # the partial last batch
    assert np.array_equal(evaluation.positions(7)[1], np.arange(50)[::-1][:8])


@pytest.mark.parametrize("name", formats.NAMES)
def test_split_records_reads_across_shards_in_any_format(name, tmp_path):
    owner = formats.get(name)
    shards = [[f"{s}-{i}".encode() * 10 for i in range(n)] for s, n in enumerate((3, 5, 2))]
    files = []
    for s, records in enumerate(shards):
        path = str(tmp_path / f"train-{s:05d}-of-00003{owner.suffix}")
        writer = owner.open_writer(path)
        writer.write(b"".join(map(frame, records)))
        writer.finish(0, "")
        files.append(path)
    source = SplitSource(str(tmp_path), "train", tuple(files), (3, 5, 2), ("a",), (10,), file_format=name)
    records = SplitRecords(source)
    flat = [r for shard in shards for r in shard]
    assert len(records) == 10 and records.read([9, 0, 3, 7]) == [flat[9], flat[0], flat[3], flat[7]]
    copy = pickle.loads(pickle.dumps(records))  # as a Grain worker gets it: opens its own shards
    assert [copy[i] for i in range(10)] == flat
    with pytest.raises(IndexError):
        records[10]
    records.close()
    copy.close()
