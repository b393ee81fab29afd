"""TensorFlow Model Garden's own input pipelines read `prep convert --target model-garden` output.

Against the real code of tf-models-official (installed with --no-deps by the
README's test command, as it pins an older TensorFlow): the classification
`Decoder` + `Parser` with its defaults (`decode_jpeg_only=True`), in training
and evaluation, and detection's `TfExampleDecoder()`. A default conversion of
the same images keeps PNGs, which the Parser fails on, and `prep verify
--target model-garden` names exactly those records and the command that fixes
them.
"""

import json
import shlex

import pytest
from click.testing import CliRunner

from prep.cli import main
from prep.core import schema
from tests.support.datasets import convert, copy, records
from tests.support.imagegen import image_bytes, write_class_tree

tf = pytest.importorskip("tensorflow")
# Not importorskip: without Model Garden these tests would pass having checked nothing.
from official.vision.dataloaders import classification_input, tf_example_decoder  # noqa: E402

ARGS = ("--split", "train=0.6,validation=0.4", "--num-shards", 2, "--no-progress")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("mg") / "src"
    write_class_tree(root, {"zebra": 6, "ant": 5, "moth": 4}, size=(40, 30), png_every=2)  # every 2nd a PNG
    # grayscale and RGBA PNGs, a grayscale JPEG: the kinds that become or stay JPEG differently
    (root / "moth" / "gray.png").write_bytes(image_bytes("PNG", size=(33, 21), mode="L", seed=1))
    (root / "moth" / "alpha.png").write_bytes(image_bytes("PNG", size=(21, 33), mode="RGBA", seed=2))
    (root / "ant" / "gray.jpg").write_bytes(image_bytes("JPEG", size=(30, 30), mode="L", seed=3))
    return root


@pytest.fixture(scope="module")
def target(source):
    return convert(source, source.parent / "target", *ARGS, "--target", "model-garden")


@pytest.fixture(scope="module")
def default(source):
    return convert(source, source.parent / "default", *ARGS)


def ours(out, split):
    """Our records of `split`, parsed by our schema, in the order of the input_path glob in docs/other-readers.md."""
    return [
        schema.ImageRecord.from_bytes(r) for path in sorted(out.glob(f"{split}-*-of-*.tfrecord")) for r in records(path)
    ]


def classification(out, split, training):
    """Model Garden's classification input pipeline over `split`, as its config would build it."""
    labels = json.loads((out / "manifest.json").read_text())["labels"]
    files = sorted(str(p) for p in out.glob(f"{split}-*-of-*.tfrecord"))  # input_path: OUT/train-*-of-*.tfrecord
    decoder = classification_input.Decoder()
    parser = classification_input.Parser(output_size=[24, 24], num_classes=len(labels))  # decode_jpeg_only=True
    return tf.data.TFRecordDataset(files).map(decoder.decode).map(parser.parse_fn(is_training=training)).batch(4)


@pytest.mark.parametrize("training", [True, False], ids=["training", "evaluation"])
def test_classification_parser_reads_every_record_with_its_defaults(target, training):
    for split in ("train", "validation"):
        mine = ours(target, split)
        assert mine and {r.format for r in mine} == {"jpeg"}
        images, labels = [], []
        for image, label in classification(target, split, training):
            images.append(image.numpy())
            labels += label.numpy().tolist()
        assert labels == [r.label for r in mine]  # every record parsed, in order, with our label ids
        assert all(i.shape[1:] == (24, 24, 3) and (i == i).all() for i in images)  # no NaN from a bad decode
    assert sorted(set(labels)) == [0, 1, 2]  # ant, moth, zebra: num_classes is the number of labels


def test_the_imagenet_experiment_reads_the_dataset_with_its_defaults_and_our_glob(target):
    """Model Garden's own task and input reader, configured as docs/other-readers.md says."""
    from official.core import exp_factory
    from official.vision import registry_imports  # noqa: F401  registers the vision experiments
    from official.vision.tasks import image_classification

    config = exp_factory.get_exp_config("resnet_imagenet")
    assert config.task.validation_data.decode_jpeg_only  # the default this target exists for
    config.task.model.num_classes = len(json.loads((target / "manifest.json").read_text())["labels"])
    config.task.model.input_size = [24, 24, 3]
    data = config.task.validation_data
    data.input_path, data.global_batch_size, data.drop_remainder = str(target / "validation-*-of-*.tfrecord"), 4, False
    labels = [
        int(x)
        for _, batch in image_classification.ImageClassificationTask(config.task).build_inputs(data)
        for x in batch.numpy()
    ]
    assert sorted(labels) == sorted(r.label for r in ours(target, "validation"))


def test_detection_decoder_reads_every_record_with_its_defaults(target):
    decoder = tf_example_decoder.TfExampleDecoder()  # needs image/source_id unless regenerate_source_id=True
    ids = []
    for split in ("train", "validation"):
        mine = ours(target, split)
        for record, raw in zip(mine, [r for p in sorted(target.glob(f"{split}-*.tfrecord")) for r in records(p)]):
            decoded = decoder.decode(tf.constant(raw))
            assert decoded["source_id"].numpy().decode() == record.source_id
            assert decoded["image"].shape == (record.height, record.width, 3)
            assert (decoded["height"], decoded["width"]) == (record.height, record.width)
            assert decoded["groundtruth_boxes"].shape == (0, 4) and decoded["groundtruth_classes"].shape == (0,)
            ids.append(int(record.source_id))  # detection parsers turn it into an int64 the same way
    assert len(set(ids)) == len(ids) == 18 and min(ids) >= 1  # every record, each its own id


def test_default_conversion_fails_in_the_parser_and_verify_names_its_png_records(default, tmp_path):
    png = [r for r in ours(default, "train") if r.format == "png"]
    assert png, "the fixture must give the default conversion PNG records"
    with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid JPEG data"):
        for _ in classification(default, "train", training=True):
            pass

    result = CliRunner().invoke(main, ["verify", str(default), "--target", "model-garden"])
    assert result.exit_code == 1
    named = [line for line in result.output.splitlines() if "image/encoded is PNG" in line]
    expected = sorted(
        f"{path.name} record {i}"
        for path in default.glob("*.tfrecord")
        for i, r in enumerate(map(schema.ImageRecord.from_bytes, records(path)))
        if r.format == "png"
    )
    assert sorted(line.split(":")[0].strip() for line in named) == expected
    report = json.loads(CliRunner().invoke(main, ["verify", str(default), "--target", "model-garden", "--json"]).output)
    assert report["target"]["by_reason"] == {"not_jpeg": len(expected), "no_source_id": 18}
    fix = report["target"]["fix"]
    assert f"fix: {fix}" in result.output

    # The fix, run as printed (in a copy), gives what --target model-garden gives, and verify passes.
    words = shlex.split(fix.replace(str(default), str(copy(default, tmp_path / "fixed"))))
    assert words[:2] == ["prep", "convert"]
    fixed = CliRunner().invoke(main, words[1:])
    assert fixed.exit_code == 0, fixed.output
    assert sorted(p.read_bytes() for p in (tmp_path / "fixed").glob("*.tfrecord")) == sorted(
        p.read_bytes() for p in default.parent.joinpath("target").glob("*.tfrecord")
    )
    assert CliRunner().invoke(main, ["verify", str(tmp_path / "fixed")]).exit_code == 0
