"""beam_jobs.runners.memoized_introspection: Beam's DoFn specs and option views from a memo, for one block."""

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TypeOptions
from apache_beam.transforms import userstate

from beam_jobs.runners import memoized_introspection

_COUNT = userstate.CombiningValueStateSpec("count", sum)
_STATE = beam.DoFn.StateParam(_COUNT)  # Beam's idiom is the call in the default; ruff's B008 wants it here


class _Keyed(beam.DoFn):
    def process(self, element, count=_STATE):
        yield element


def test_a_dofns_specs_are_computed_once_and_are_beams_answer():
    dofn, other = _Keyed(), _Keyed()
    expected = userstate.get_dofn_specs(dofn)
    with memoized_introspection():
        first = userstate.get_dofn_specs(dofn)
        assert userstate.get_dofn_specs(dofn) is first
        assert first == expected and first[0]  # the state spec is found
        assert userstate.is_stateful_dofn(dofn) and userstate.is_stateful_dofn(other)
        assert userstate.get_dofn_specs(other) is not first  # another DoFn: its own answer
    assert userstate.get_dofn_specs(dofn) is not first  # restored


def test_a_view_is_made_once_and_reads_and_writes_through_as_a_new_one_would():
    options = PipelineOptions(["--runner=FnApiRunner", "--no_pipeline_type_check"])
    with memoized_introspection():
        view = options.view_as(StandardOptions)
        assert options.view_as(StandardOptions) is view
        assert view.view_as(StandardOptions) is view  # a view of the view: the same values and flags
        assert view.runner == "FnApiRunner" and not options.view_as(TypeOptions).pipeline_type_check
        view.runner = "DirectRunner"
        assert options.view_as(StandardOptions).runner == "DirectRunner"
        other = PipelineOptions(["--runner=DaskRunner"])
        assert other.view_as(StandardOptions).runner == "DaskRunner"  # other options: their own view
    assert options.view_as(StandardOptions) is not view  # restored
    assert options.view_as(StandardOptions).runner == "DirectRunner"
