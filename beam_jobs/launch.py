"""`convert`: a whole conversion, or with `--resume` the end of an interrupted one.

The order is the point: a runner other than the local one, or Beam options, are
checked first, before OUTPUT is touched (`runners.check_runner_options`, which imports
Beam); then OUTPUT is readied and the listing staged (stage.py, no Beam); then the
listing is let go of, and only then is the pipeline imported and run (execute.py).
A caller that keeps no reference to the listing frees its memory before the
pipeline's is allocated: `prep convert` peaks at the larger of the two, not their sum.
"""

from __future__ import annotations

from beam_jobs.checkpoints import StepHook
from beam_jobs.stage import ready_output
from prep.core.config import RUNNERS_LOCAL, ConvertConfig
from prep.core.listing import Listing
from prep.core.manifest import Manifest


def convert(config: ConvertConfig, listing: Listing, runner: str = RUNNERS_LOCAL,
            beam_args: list[str] | None = None, progress: bool = False, group_target: int | None = None,
            on_step: StepHook | None = None) -> Manifest:
    """Runs the conversion and returns the manifest it wrote (see the module docstring).

    `group_target`: see `execute.execute`; `on_step`: the test hook of checkpoints.py.

    Raises:
        PrepError: a user-fixable problem (OptionsError, PlanError, ResumeError, OutputError, ...).
    """
    if runner != RUNNERS_LOCAL or beam_args:
        from beam_jobs.runners import check_runner_options

        check_runner_options(runner, list(beam_args or []))
    ready = ready_output(config, listing)
    del listing  # the staged chunk files stand for it from here on
    if ready.finished is not None:
        return ready.finished
    from beam_jobs.execute import execute

    more = {} if group_target is None else {"group_target": group_target}
    return execute(config, ready, runner, beam_args, progress, on_step=on_step, **more)
