"""beam_jobs.spread: Reshuffles on runners that spread work, none on the embedded runner; the same elements."""

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs.spread import create, embedded, spread


def _graph(p: beam.Pipeline) -> beam.PCollection:
    return spread(create(p, "Values", [3, 1, 2]), "Spread") | "Double" >> beam.Map(lambda v: 2 * v)


def _names(p: beam.Pipeline) -> list[str]:
    return [t.unique_name for t in p.to_runner_api().components.transforms.values()]


def _shuffles(p: beam.Pipeline) -> int:
    transforms = p.to_runner_api().components.transforms.values()
    return sum(t.spec.urn == "beam:transform:group_by_key:v1" for t in transforms)


def test_the_embedded_runner_has_no_reshuffle_and_the_same_elements():
    p = beam.Pipeline(runner=FnApiRunner())
    assert embedded(p)
    doubled = _graph(p)
    assert _shuffles(p) == 0
    assert "Spread" not in _names(p)
    assert_that(doubled, equal_to([2, 4, 6]))
    p.run().wait_until_finish()


def test_other_runners_keep_both_reshuffles():
    p = beam.Pipeline(runner="DirectRunner")
    assert not embedded(p)
    _graph(p)
    names = _names(p)
    assert "Spread" in names
    assert "Values/MaybeReshuffle/Reshuffle" in names
    assert _shuffles(p) == 2
