"""Reshuffles where they spread work, none on the embedded runner: `spread`, `create`.

A Reshuffle (a random key, a GroupByKey, the key dropped) lets a distributed runner hand the
elements after it to many workers rather than to the one that made them; `beam.Create` of more
than one value adds one of its own. On the embedded runner (`runners.make_runner`'s
FnApiRunner) the one worker is this process, whose parallelism comes from thread pools
(pooled.py), so a Reshuffle there spreads nothing and only costs: five steps and a GroupByKey
each to build, translate and run. A conversion of 20 images had 25 such steps of its 86, a
quarter of the CPU it spent in Beam (docs/benchmarks.md, "A conversion's fixed cost"). The
order of elements may differ without them; nothing depends on it (the same bytes on any runner).
"""

from __future__ import annotations

import apache_beam as beam


def embedded(p: beam.Pipeline) -> bool:
    """Whether `p` runs on the embedded runner (not DirectRunner, which may hand it to other runners)."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return isinstance(p.runner, FnApiRunner)


def spread(pcoll: beam.PCollection, label: str) -> beam.PCollection:
    """`pcoll | label >> beam.Reshuffle()`, or on the embedded runner `pcoll` itself."""
    return pcoll if embedded(pcoll.pipeline) else pcoll | label >> beam.Reshuffle()


def create(p: beam.Pipeline, label: str, values: list) -> beam.PCollection:
    """`p | label >> beam.Create(values)`, without Create's own Reshuffle on the embedded runner."""
    return p | label >> beam.Create(values, reshuffle=not embedded(p))
