"""Reads a converted dataset with TensorFlow Model Garden's own classification input pipeline.

    prep convert samples/shapes out/shapes --split train=0.8,validation=0.1,test=0.1 --num-shards 2 \\
        --target model-garden --overwrite
    python samples/model_garden.py out/shapes

The `resnet_imagenet` experiment's config, with its defaults (decode_jpeg_only=True), pointed at our shards
with the keys docs/other-readers.md (Model Garden) names; its task's `build_inputs` builds the tf.data pipeline.
Prints what one epoch of each split gives, or the error Model Garden raises (exit status 1).
Needs tf-models-official (`pip install --no-deps tf-models-official==2.20.0` plus the `test` extra).
"""

import argparse
import json
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from samples.quiet_tf import import_tensorflow  # noqa: E402

tf = import_tensorflow()  # before Model Garden imports it, without its start-up log lines
from official.core import exp_factory  # noqa: E402
from official.vision import registry_imports  # noqa: E402,F401  registers the vision experiments and tasks
from official.vision.tasks import image_classification  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default="out/shapes", help="a folder prep convert wrote")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    manifest = json.load(open(f"{args.output}/manifest.json"))
    config = exp_factory.get_exp_config("resnet_imagenet")
    config.task.model.num_classes = len(manifest["labels"])
    config.task.model.input_size = [64, 64, 3]
    failed = False
    for data, split in ((config.task.train_data, "train"), (config.task.validation_data, "validation")):
        data.input_path = f"{args.output}/{split}-*-of-*.tfrecord"
        data.global_batch_size, data.drop_remainder = args.batch_size, False
        steps = math.ceil(manifest["splits"][split]["examples"] / args.batch_size)  # training repeats: one epoch
        task = image_classification.ImageClassificationTask(config.task)
        mode = "training" if data.is_training else "evaluation"
        read, labels = 0, set()
        try:
            for images, label in task.build_inputs(data).take(steps):
                read += int(images.shape[0])
                labels |= set(label.numpy().tolist())
        except tf.errors.InvalidArgumentError as exc:
            failed = True
            print(
                f"{split} ({mode}, decode_jpeg_only={data.decode_jpeg_only}): failed after {read} records: "
                f"{exc.message.splitlines()[0].split('}} ')[-1]}"
            )
            continue
        total = manifest["splits"][split]["examples"]
        print(
            f"{split} ({mode}, decode_jpeg_only={data.decode_jpeg_only}): {steps} batches, {read} records "
            f"({total} in the split{', repeated' if read > total else ''}), images {list(images.shape[1:])} "
            f"{images.dtype.name}, labels {sorted(labels)}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
