"""Runners: checking a runner and its Beam options before OUTPUT is touched, the Dask
partitions, the pipeline options, and the runner object itself (`make_runner`).

`local` is Beam's embedded FnApiRunner, chosen explicitly: DirectRunner would first try
to download Prism, so its behaviour would depend on the network. Staging our code for
runners whose workers do not share this environment is worker_setup.py's.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import sys
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.runners.runner import PipelineRunner, create_runner

from beam_jobs import worker_setup
from prep.core.config import RUNNERS_LOCAL
from prep.core.convert_options import OPTIONS
from prep.core.errors import OptionsError

# Runners that drop the options Beam does not know. Dataflow, Flink and Spark (with
# their uber jar) and Prism hand them to the job instead, where they may mean something.
_DROP_UNKNOWN_OPTIONS = (
    "FnApiRunner",
    "SwitchingDirectRunner",
    "TestDirectRunner",
    "BundleBasedDirectRunner",
    "PortableRunner",
    "DaskRunner",
)


def check_runner_options(runner: str, beam_args: list[str]) -> None:
    """Refuses a runner Beam cannot load, Beam options it would ignore, and options
    the runner's own checks refuse (Dataflow's project, region, temp_location).

    Called before OUTPUT is touched: Beam would stop on a bad runner or refused
    options with a traceback once OUTPUT was readied, and it ignores, with a
    warning at most, an option spelled with dashes (`--direct-num-workers`) and,
    on runners that do not pass options on (`_DROP_UNKNOWN_OPTIONS`), one it
    does not know: `-- --num-shard 3` would change nothing.

    Raises:
        OptionsError: naming the runner or the first option at fault.
    """
    runner_object = None
    if runner != RUNNERS_LOCAL:
        try:
            runner_object = create_runner(runner)  # imports the runner's module, which may define options (Dask)
        except ImportError as exc:
            hint = "; install apache-beam[gcp]" if "dataflow" in runner.lower() else ""
            raise OptionsError(f"--runner {runner} cannot be loaded ({exc}){hint}") from None
        except (ValueError, AttributeError, TypeError):
            pass
        if not isinstance(runner_object, PipelineRunner):
            raise OptionsError(
                f"unknown --runner {runner}: give local, a runner Beam names (DirectRunner, "
                "PortableRunner, DataflowRunner, FlinkRunner, SparkRunner, ...) or the full "
                "name of a PipelineRunner class"
            )
    parsers: list[argparse.ArgumentParser] = []
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # argparse prints its usage, then exits
            PipelineOptions(beam_args).get_all_options(add_extra_args_fn=parsers.append)
    except SystemExit:
        error = said.getvalue().strip().splitlines()[-1:] or ["cannot be parsed"]
        raise OptionsError(f"Beam pipeline options: {error[0].split('error: ', 1)[-1]}") from None
    known = {name for action in parsers[0]._actions for name in action.option_strings}
    drops_unknown = runner_object is None or type(runner_object).__name__ in _DROP_UNKNOWN_OPTIONS
    for arg in beam_args:
        name = arg.split("=", 1)[0]
        if not name.startswith("--") or name in known:
            continue
        spelled = "--" + name[2:].replace("-", "_")
        if spelled in known:
            raise OptionsError(f"Beam pipeline option {name} is spelled {spelled}: Beam ignores it as written")
        if drops_unknown:
            ours = [o.name for o in OPTIONS]
            close = difflib.get_close_matches(name, sorted(known) + ours, n=1)
            hint = (
                ""
                if not close
                else f"; did you mean {close[0]}?"
                + (" (a conversion option; for prep convert it goes before the --)" if close[0] in ours else "")
            )
            raise OptionsError(f"unknown Beam pipeline option {name}{hint}")
    if type(runner_object).__name__ == "DaskRunner":
        client_options = _dask_client_options(beam_args)
        if "address" in client_options or "scheduler_file" in client_options:
            try:
                _dask_slots(client_options)
            except Exception as exc:  # noqa: BLE001 (distributed raises OSError, ValueError, TimeoutError, ...)
                where = client_options.get("address") or client_options.get("scheduler_file")
                raise OptionsError(
                    f"cannot reach the Dask scheduler {where}: {' '.join(str(exc).split()) or type(exc).__name__}"
                ) from None
    if runner_object is not None:  # what Beam checks when the pipeline is made (Dataflow: project, region, ...)
        errors = PipelineOptionsValidator(pipeline_options(runner, beam_args), runner_object).validate()
        if errors:
            raise OptionsError(f"--runner {runner}: " + "; ".join(" ".join(e.split()).rstrip(".") for e in errors))


def _dask_client_options(beam_args: list[str]) -> dict:
    """The Dask client's options among `beam_args`, as the DaskRunner takes them
    (address, scheduler_file, timeout, ...; npartitions and partition_size included)."""
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return PipelineOptions(beam_args).view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)


def _dask_slots(client_options: dict) -> int:
    """How many tasks the Dask cluster named by `client_options` runs at once.

    Raises:
        Exception: whatever `distributed.Client` raises when it cannot connect.
    """
    from distributed import Client

    # The partition options are the DaskRunner's own, not the Client's (it pops them before connecting).
    connect = {k: v for k, v in client_options.items() if k not in ("npartitions", "partition_size")}
    with Client(**connect) as client:
        return sum(client.nthreads().values()) or 1


def dask_partition_args(runner: str, beam_args: list[str], num_chunks: int) -> list[str]:
    """Beam args with `--dask_npartitions` added on the DaskRunner: the cluster's task
    slots (its workers' threads), at most one per chunk, unless the user sets
    `--dask_npartitions` or `--dask_partition_size`. Dask cuts the chunk ids into
    partitions of ceil(chunks / npartitions) ids, so there may be a few fewer
    partitions than slots (32 chunks on 24 slots: 16 partitions of 2).

    Beam's Dask translation puts up to 128 created elements in one partition, and
    its GroupByKey keeps the number of partitions, so without this all chunks run in
    one partition on one worker; every partition also costs a lot on its own, so not
    one per chunk (docs/design.md, bench/runner_scaling.py).
    """
    if worker_setup.runner_class_name(runner) != "DaskRunner":
        return beam_args
    client_options = _dask_client_options(beam_args)
    if "npartitions" in client_options or "partition_size" in client_options:
        return beam_args
    slots = os.cpu_count() or 1  # without a scheduler, the DaskRunner starts a local cluster of this machine
    if "address" in client_options or "scheduler_file" in client_options:
        try:
            slots = _dask_slots(client_options)
        except Exception:  # noqa: BLE001 (checked by check_runner_options; the DaskRunner reports it anyway)
            return beam_args
    return [*beam_args, f"--dask_npartitions={max(1, min(num_chunks, slots))}"]


def pipeline_options(runner: str, beam_args: list[str]) -> PipelineOptions:
    options = PipelineOptions(beam_args)
    if runner != RUNNERS_LOCAL:
        options.view_as(beam.options.pipeline_options.StandardOptions).runner = runner
    return options


def skip_ipython_probe() -> None:
    """Beam asks `is_in_ipython()` for every transform label and once more after a
    run, which imports IPython when it is installed (each time it is not yet
    imported, at a cost: docs/design.md). If IPython is not imported yet we are not inside it, so
    the answer is known to be False."""
    if "IPython" in sys.modules:
        return
    import apache_beam.pipeline
    from apache_beam.utils import interactive_utils

    for module in (interactive_utils, apache_beam.pipeline):
        if hasattr(module, "is_in_ipython"):
            module.is_in_ipython = lambda: False  # type: ignore[attr-defined]  # where hasattr found it


@contextlib.contextmanager
def memoized_introspection() -> Iterator[None]:
    """While a pipeline is built and run in this process, two of Beam's introspections answer from a memo.

    Beam asks `userstate.get_dofn_specs` (a signature for every method of the DoFn) 158 times of 39 DoFns
    in a conversion, and builds a new view of its options (`PipelineOptions.view_as`, an argparse parse)
    168 times: ~0.09 and ~0.05 s of the ~0.3 s of CPU a one-photo conversion spends once its modules are
    imported (docs/benchmarks.md, "Session 25: the serial start and end"). Both answers depend only on
    what the memo keeps alive: the DoFn, whose methods do not change; the options' shared values and
    flags, which a view only reads and writes through (a view made again is made from them alone).
    Restored after, so that nothing else in the process sees the memo.
    """
    from apache_beam.transforms import userstate

    get_dofn_specs, view_as = userstate.get_dofn_specs, PipelineOptions.view_as
    specs: dict[int, tuple] = {}  # id(DoFn) -> (the DoFn, kept so that its id is not reused; its specs)
    views: dict[tuple, tuple] = {}  # ids of (values, flags), class -> (values, flags, the view)

    def dofn_specs(dofn):
        known = specs.get(id(dofn))
        if known is None:
            known = specs[id(dofn)] = (dofn, get_dofn_specs(dofn))
        return known[1]

    def view(options, cls):
        key = (id(options._all_options), id(options._flags), cls)
        known = views.get(key)
        if known is None:
            known = views[key] = (options._all_options, options._flags, view_as(options, cls))
        return known[2]

    userstate.get_dofn_specs, PipelineOptions.view_as = dofn_specs, view  # type: ignore[method-assign]
    try:
        yield
    finally:
        userstate.get_dofn_specs, PipelineOptions.view_as = get_dofn_specs, view_as  # type: ignore[method-assign]


def make_runner(runner: str):
    if runner == RUNNERS_LOCAL:
        # The embedded runner, chosen explicitly: DirectRunner would first try to
        # download Prism, so its behaviour would depend on the network.
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return FnApiRunner()
    if worker_setup.runner_class_name(runner) == "DaskRunner":
        from beam_jobs.dask_groups import cap_group_partitions
        from beam_jobs.dask_pardo import own_pardo_state

        cap_group_partitions()
        own_pardo_state()
    return None


def submits_job(runner: str) -> bool:
    """Whether `runner` hands the pipeline to a job service or a cloud service (Portable,
    Flink, Spark, Prism, Dataflow), rather than running our code where its
    exceptions reach us as they are (local, Direct, Dask): there, an exception that
    is not a PrepError is a bug, and keeps its traceback."""
    return worker_setup.runner_class_name(runner) in worker_setup.STAGING_RUNNERS


def job_service(options: PipelineOptions) -> tuple[str | None, object]:
    """(--job_endpoint, --job_server_timeout) of `options`, for `failures.runner_failure`."""
    portable = options.view_as(PortableOptions)
    return portable.job_endpoint, portable.job_server_timeout
