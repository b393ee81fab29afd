"""`loaders.epoch_size`'s keywords (docs/loaders.md): every documented one is taken and used, any other
refused as Python refuses an unknown keyword."""

import json

import pytest

from tests.support.imagegen import write_class_tree


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from click.testing import CliRunner

    from prep.cli import main

    src = tmp_path_factory.mktemp("epoch-src")
    write_class_tree(src, {"a": 12, "b": 9}, size=(16, 12))
    out = tmp_path_factory.mktemp("epoch") / "out"
    result = CliRunner().invoke(main, ["convert", str(src), str(out), "--num-shards", "2", "--split", "train=1"])
    assert result.exit_code == 0, result.output
    return out


def test_every_documented_keyword_is_used(dataset):
    import loaders
    from loaders import epoch

    records = json.loads((dataset / "manifest.json").read_text())["splits"]["train"]["examples"]
    assert records == 21
    size = loaders.epoch_size(
        dataset,
        "train",
        4,
        num_pipelines=2,
        num_replicas=2,
        training=False,
        remainder="drop",
        drop_remainder=False,
        aspect_buckets=None,
        on_corrupt="error",
    )
    assert size == epoch.epoch_size(records, 2, 2, 1, False, "drop")
    assert loaders.epoch_size(dataset, "train", 4, remainder="pad") == epoch.epoch_size(records, 4, 1, 1, True, "pad")
    assert loaders.epoch_size(dataset, "train", 4, training=False).steps == 6  # partial batch kept
    assert loaders.epoch_size(dataset, "train", 4, training=False, drop_remainder=True).steps == 5
    bucketed = loaders.steps_per_epoch(dataset, "train", 4, aspect_buckets=(0.5, 2.0), on_corrupt="skip")
    assert bucketed == epoch.bucketed_steps(records, 4, 2, 1) == 4  # one batch fewer than without buckets


def test_other_keywords_are_refused(dataset):
    import loaders
    from prep.core.errors import LoaderError

    with pytest.raises(TypeError, match=r"epoch_size\(\) got an unexpected keyword argument 'seed'"):
        loaders.epoch_size(dataset, "train", 4, seed=0)
    with pytest.raises(LoaderError, match="on_corrupt must be one of"):
        loaders.steps_per_epoch(dataset, "train", 4, on_corrupt="ignore")
