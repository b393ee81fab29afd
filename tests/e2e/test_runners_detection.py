"""Detection through every runner we can run here: identical shards (records, box notes, label maps, counts of
parts) and manifests. Apart from test_runners.py (classification) so that `--dist loadfile` can run the two on
different workers: each file is several conversions on runners that start processes."""

import pytest

from beam_jobs import convert as conversion
from prep.core.convert_options import build_config
from prep.core.inputs import list_inputs
from tests.e2e.test_runners import DASK, assert_same
from tests.support.shards import manifest_without_run

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
        ("DirectRunner", ("--direct_running_mode=multi_processing", "--direct_num_workers=2"), 5),
    ],
)
def test_detection_through_the_runners(
    detection_source, detection_reference, tmp_path, runner, beam_args, group_target
):
    out = convert_detection(detection_source, tmp_path / "out", runner, beam_args, group_target)
    assert_same(out, detection_reference)


def test_detection_on_the_dask_runner(detection_source, detection_reference, tmp_path, dask_cluster):
    out = convert_detection(detection_source, tmp_path / "out", DASK, [f"--dask_client_address={dask_cluster}"], 5)
    assert_same(out, detection_reference)
