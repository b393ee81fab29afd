"""The DaskRunner's ParDo with its receiver and its DoFn made per partition, so that no two tasks share them.

Beam's translation (`apache_beam.runners.dask.transform_evaluator.ParDo`, Beam 2.77) makes one output
receiver and holds one DoFn when it translates a step, and hands both to the task of every partition. Where
Dask runs tasks without serializing them (worker threads of one process, `LocalCluster(processes=False)`;
its threaded and synchronous schedulers), every partition then appends to the same list and returns all
of it: a partition's outputs come out again with each later partition of the step (the listing's
"the chunks written are not those planned"; counts that do not reconcile). Threads also ran `setup`,
bundles and `teardown` of one DoFn object at once, one thread's `teardown` closing what another used.
Process workers hid both: each task unpickles its own copy.

Here each partition copies the DoFn and its arguments, as a process worker's unpickling does, and makes
its own receiver. Its outputs are taken after `finish_bundle`, not before: Beam's translation dropped
what a DoFn emits there.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any


@dataclasses.dataclass(frozen=True)
class _Step:
    """What every partition of a ParDo copies before it runs (an object, not a tuple: Dask looks into those)."""

    fn: Any  # the DoFn
    args: list
    kwargs: dict
    window_fn: Any


def _run_bundle(items, step: _Step, side_inputs, label: str):
    """Dask's task for one partition of a ParDo."""
    from apache_beam import DoFn
    from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, _OutputHandler
    from apache_beam.runners.dask.transform_evaluator import OneReceiver

    own = copy.deepcopy(step)
    fn, args, kwargs, window_fn = own.fn, own.args, own.kwargs, own.window_fn
    receivers = OneReceiver()
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(fn),
        _OutputHandler(
            window_fn=window_fn,
            main_receivers=receivers[None],
            tagged_receivers=receivers,
            per_element_output_counter=None,
            output_batch_converter=None,
            process_yields_batches=False,
            process_batch_yields_elements=False,
        ),
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(item)
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return [v.value for v in receivers.values]


@functools.cache
def own_pardo_state() -> None:
    """Replace, once per process, the translation Beam's DaskRunner uses for ParDo."""
    import apache_beam as beam
    from apache_beam.runners.dask import transform_evaluator

    class PartitionParDo(transform_evaluator.ParDo):
        def apply(self, input_bag, side_inputs=None):
            transform = self.transform
            args, kwargs = transform.raw_side_inputs
            main_input = next(iter(self.applied.main_inputs.values()))
            window_fn = getattr(getattr(main_input, "windowing", None), "windowfn", None)
            step = _Step(transform.fn, list(args), kwargs, window_fn)
            return input_bag.map(transform_evaluator.get_windowed_value, window_fn).map_partitions(
                _run_bundle, step, side_inputs, transform.label
            )

    transform_evaluator.TRANSLATIONS[beam.ParDo] = PartitionParDo
