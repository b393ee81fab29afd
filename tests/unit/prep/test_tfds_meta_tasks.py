"""The tfds metadata of each task, as files (`prep.core.tfds_meta`); tensorflow-datasets reading them is
tests/e2e/test_tfds_detection.py."""

import json

from prep.core import tfds_meta
from prep.core.manifest import Manifest
from tests.support import task_datasets as td


def test_each_task_names_its_label_file_and_overwrite_knows_them_all(tmp_path):
    outs = {
        "detection": td.detection_dataset(tmp_path / "det"),
        "segmentation": td.segmentation_dataset(tmp_path / "seg"),
        "multilabel": td.multilabel_dataset(tmp_path / "ml"),
    }
    expected = {
        "detection": "image.object-class.label.labels.txt",  # class/label inside image/object
        "segmentation": "image.segmentation.class.encoded.labels.txt",
        "multilabel": "image.class.label.labels.txt",
    }
    for task, out in outs.items():
        manifest = Manifest.load(str(out))
        files = tfds_meta.files(manifest)
        assert list(files) == [expected[task], tfds_meta.FEATURES_FILE, tfds_meta.INFO_FILE]
        assert tfds_meta.file_names(task) == (tfds_meta.INFO_FILE, tfds_meta.FEATURES_FILE, expected[task])
        assert set(tfds_meta.file_names(task)) <= set(tfds_meta.all_file_names())
        names = files[expected[task]].decode().splitlines()
        assert names == (["background"] if task == "detection" else []) + list(manifest.labels)
        info = json.loads(files[tfds_meta.INFO_FILE])
        assert ("supervisedKeys" in info) == (task != "detection")
    assert tfds_meta.file_names() == (tfds_meta.INFO_FILE, tfds_meta.FEATURES_FILE, "image.class.label.labels.txt")
    assert "image.object.class.label.labels.txt" in tfds_meta.all_file_names()  # an earlier version's, for --overwrite


def test_a_class_called_background_keeps_id_0_apart(tmp_path):
    labels = ["background", "_background", "cat"]
    records = [td.detection_record(0, (20, 20), [(3, (2, 2, 9, 9))], labels)]
    out = td.write(tmp_path / "out", "detection", labels, {"train": records}, 1)
    names = tfds_meta.class_names(Manifest.load(str(out)))
    assert names == ["__background", "background", "_background", "cat"] and len(set(names)) == 4
