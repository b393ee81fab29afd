"""The conversion pipeline: listed inputs -> checked records -> plan -> shards -> manifest.

Design (what each PCollection holds):

    chunks      = Create                 # (chunk id, [InputRef]) ~ up to 256 refs each
    prepared    = ParDo(PrepareChunk)    # PreparedRef(path, label, split, chunk, offset, length)
      .rejects                           # Reject(path, reason, detail)
    tasks       = ToList | FlatMap(plan) # ShardTask(name, [(chunk, offset, length, label)])
      .summary                           # one dict: capped counts, converted count
    results     = Reshuffle | ParDo(WriteShard)   # one shard-result dict per shard
    done        = ToList | FlatMap(finish, rejects, summary as side inputs)

Images are read, checked and converted once, before planning, so the plan
knows exactly which inputs are valid and every shard is balanced over the
examples actually written. Their serialized records go to spill files under
OUTPUT/.prep-tmp; only small references reach the planner, and each shard
writer reads its records back from the spill files. Image bytes never pass
through a shuffle.

Parallelism on one machine comes from a pool of `workers` threads inside
PrepareChunk and WriteShard, working on several elements of a bundle at once:
Pillow releases the GIL while decoding, resizing and encoding, and the local
runner gives each stage a single bundle, so runner-level parallelism alone
would leave cores idle.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import prep
from beam_jobs import dofns, storage
from prep import manifest as manifest_lib
from prep.config import RUNNERS_LOCAL, ConvertConfig
from prep.errors import OutputError, PrepError
from prep.naming import ShardName
from prep.sources import Listing

MAX_CHUNK = 256


def chunk_size(n: int) -> int:
    """Refs per chunk: about 64 chunks for small inputs, at most MAX_CHUNK refs each."""
    return max(8, min(MAX_CHUNK, math.ceil(n / 64)))


def make_chunks(refs, size: int) -> list[tuple[int, list]]:
    return [(i, list(refs[start:start + size])) for i, start in enumerate(range(0, len(refs), size))]


def build(p: beam.Pipeline, config: ConvertConfig, listing: Listing, run_info: dict) -> None:
    """Adds the conversion steps to pipeline `p`."""
    tmp_dir = storage.join(config.output, manifest_lib.TMP_DIR)
    labels = listing.classes
    chunks = make_chunks(listing.refs, chunk_size(len(listing.refs)))
    prepared = (
        p
        | "ListInputs" >> beam.Create(chunks)  # (chunk id, [InputRef])
        | "PrepareImages" >> beam.ParDo(
            dofns.PrepareChunk(config.source, tmp_dir, labels, config.image, config.workers)
        ).with_outputs(dofns.REJECTS_TAG, main="refs")
    )
    planned = (
        prepared.refs  # PreparedRef
        | "CollectRefs" >> beam.combiners.ToList()
        | "PlanShards" >> beam.FlatMap(dofns.plan_shards, labels, config.plan, tmp_dir)
        .with_outputs(dofns.SUMMARY_TAG, main="tasks")
    )
    early = p | "ListingRejects" >> beam.Create(list(listing.rejects))  # Reject
    rejects = (early, prepared[dofns.REJECTS_TAG]) | "AllRejects" >> beam.Flatten()
    (
        planned.tasks  # ShardTask
        | "SpreadShards" >> beam.Reshuffle()
        | "WriteShards" >> beam.ParDo(dofns.WriteShard(config.output, tmp_dir, labels, config.workers))  # shard result dict
        | "CollectShards" >> beam.combiners.ToList()
        | "WriteManifest" >> beam.FlatMap(
            dofns.finish,
            beam.pvalue.AsList(rejects),
            beam.pvalue.AsSingleton(planned[dofns.SUMMARY_TAG]),
            output=config.output, tmp_dir=tmp_dir, labels=labels, options=config.manifest_options(),
            found=listing.found,
            tool={"name": "tfrecord-prep", "version": prep.__version__, "pillow": _pillow_version()},
            run=run_info,
        )
    )


def _pillow_version() -> str:
    import PIL

    return PIL.__version__


def prepare_output(output: str, overwrite: bool) -> None:
    """Refuses a non-empty OUTPUT unless `overwrite`; then clears what an earlier run wrote.

    Raises:
        OutputError: OUTPUT is a file, is not empty, or holds files prep did not write.
    """
    if not storage.is_remote(output) and os.path.exists(output) and not os.path.isdir(output):
        raise OutputError(f"OUTPUT {output} is a file, not a folder")
    names = storage.list_names(output)
    if not names:
        return
    if not overwrite:
        raise OutputError(f"OUTPUT {output} is not empty; pass --overwrite to replace what prep wrote there")
    ours = {manifest_lib.FILENAME, manifest_lib.REJECTS, manifest_lib.TMP_DIR, manifest_lib.FILENAME + ".part",
            manifest_lib.REJECTS + ".part"}
    foreign = [n for n in names if n not in ours and ShardName.parse(n) is None]
    if foreign:
        raise OutputError(f"OUTPUT {output} holds files prep did not write (e.g. {foreign[0]}); "
                          "refusing to delete them with --overwrite")
    # The manifest goes first so that nothing left behind looks finished.
    storage.delete(storage.join(output, manifest_lib.FILENAME))
    for name in names:
        storage.delete(storage.join(output, name))


def pipeline_options(runner: str, workers: int, beam_args: list[str]) -> PipelineOptions:
    options = PipelineOptions(beam_args)
    if runner != RUNNERS_LOCAL:
        options.view_as(beam.options.pipeline_options.StandardOptions).runner = runner
    return options


def _skip_ipython_probe() -> None:
    """Beam asks `is_in_ipython()` for every transform label, which imports IPython
    when it is installed (~0.5 s). If IPython is not imported yet we are not
    inside it, so the answer is known to be False."""
    if "IPython" in sys.modules:
        return
    from apache_beam.utils import interactive_utils

    if hasattr(interactive_utils, "is_in_ipython"):
        interactive_utils.is_in_ipython = lambda: False


def make_runner(runner: str):
    if runner == RUNNERS_LOCAL:
        # The embedded runner, chosen explicitly: DirectRunner would first try to
        # download Prism, so its behaviour would depend on the network.
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return FnApiRunner()
    return None


class _Progress:
    """Polls the temporary folder of a local OUTPUT and drives two progress bars."""

    def __init__(self, config: ConvertConfig, listing: Listing, enabled: bool):
        self._tmp = os.path.join(config.output, manifest_lib.TMP_DIR)
        self._output = config.output
        size = chunk_size(len(listing.refs))
        self._chunk_sizes = [len(c) for _, c in make_chunks(listing.refs, size)]
        self._enabled = enabled and not storage.is_remote(config.output)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._enabled:
            self._thread.join()

    def _loop(self):
        from tqdm import tqdm

        images = tqdm(total=sum(self._chunk_sizes), unit="img", desc="prepare", file=sys.stderr, leave=False)
        shards = None
        while not self._stop.wait(0.25):
            spill = os.path.join(self._tmp, "spill")
            done = [n for n in storage.list_names(spill) if n.endswith(".bin")]
            images.n = sum(self._chunk_sizes[int(n[6:12])] for n in done if int(n[6:12]) < len(self._chunk_sizes))
            images.refresh()
            plan = os.path.join(self._tmp, "plan.json")
            if shards is None and os.path.exists(plan):
                import json

                with open(plan) as f:
                    shards = tqdm(total=json.load(f)["shards"], unit="shard", desc="write", file=sys.stderr,
                                  leave=False)
            if shards is not None:
                shards.n = sum(1 for n in storage.list_names(self._output) if ShardName.parse(n))
                shards.refresh()
        images.close()
        if shards is not None:
            shards.close()


def run_conversion(config: ConvertConfig, listing: Listing, runner: str = RUNNERS_LOCAL,
                   beam_args: list[str] | None = None, progress: bool = False) -> dict:
    """Runs the whole conversion and returns the manifest it wrote.

    Raises:
        PrepError: a user-fixable problem, unwrapped from the runner's exception.
    """
    prepare_output(config.output, config.overwrite)
    _skip_ipython_probe()
    run_info = {"runner": runner, "workers": config.workers, "source": config.source, "started": time.time()}
    options = pipeline_options(runner, config.workers, beam_args or [])
    logging.getLogger("apache_beam").setLevel(logging.ERROR if progress else logging.WARNING)
    try:
        with _Progress(config, listing, progress):
            with beam.Pipeline(runner=make_runner(runner), options=options) as p:
                build(p, config, listing, run_info)
    except Exception as exc:
        error = find_prep_error(exc)
        if error is not None:
            raise error from None
        raise
    return manifest_lib.load(config.output) if not storage.is_remote(config.output) else {}


def find_prep_error(exc: BaseException) -> PrepError | None:
    """The PrepError behind a runner's exception, if any (runners wrap or re-raise them)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, PrepError):
            return type(exc)(str(exc).split(" [while running")[0])
        exc = exc.__cause__ or exc.__context__
    return None
