"""A plain tensorflow-datasets builder over class folders: what a tfds user writes first.

    python -m bench.baselines.tfds_builder SOURCE OUTPUT

A `GeneratorBasedBuilder` whose `_generate_examples` yields each file's path and its folder's
label; `tfds.features.Image(encoding_format="jpeg")` reads the bytes and copies them into
the record: nothing is decoded or checked. One split ("train"), tfds's own shard count and
writer (one process). Statistics are not computed (`ComputeStatsMode.SKIP`): that would read
every record back, which `prep convert` does not, so leaving it out only makes this baseline
faster.
"""

from __future__ import annotations

import argparse
import os
import pathlib

import tensorflow_datasets as tfds


class ClassFolders(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """SOURCE/<class>/<image>: one example per image file, labelled by its folder."""

    VERSION = tfds.core.Version("1.0.0")
    SOURCE = ""  # set by main() before the builder is made

    def _classes(self) -> list[str]:
        return sorted(p.name for p in pathlib.Path(self.SOURCE).iterdir() if p.is_dir())

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(encoding_format="jpeg"),
                    "label": tfds.features.ClassLabel(names=self._classes()),
                    "filename": tfds.features.Text(),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for label in self._classes():
            for path in sorted(pathlib.Path(self.SOURCE, label).iterdir()):
                rel = f"{label}/{path.name}"
                yield rel, {"image": path, "label": label, "filename": rel}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("output")
    args = parser.parse_args(argv)
    tfds.disable_progress_bar()
    ClassFolders.SOURCE = os.path.abspath(args.source)
    builder = ClassFolders(data_dir=args.output)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(compute_stats=tfds.download.ComputeStatsMode.SKIP)
    )
    written = builder.info.splits["train"].num_examples
    print(written)
    return written


if __name__ == "__main__":
    # tfds looks for files beside the builder's module, which must be a package's, not __main__
    from bench.baselines.tfds_builder import main as package_main

    package_main()
