"""Runner failures become the user's one-line errors: a remote worker's PrepError is found in its text."""

import errno

import pytest

from prep.core.errors import OutputError, PlanError, SourceError
from prep.core.run.failures import find_prep_error


@pytest.mark.parametrize("module", ["prep.core.errors", "prep.core.errors"])  # this version's workers, and older ones
def test_a_remote_prep_error_is_found_in_the_runner_message(module):
    exc = RuntimeError(f"Traceback ...\n{module}.PlanError: split 'b' gets no examples [while running 'Layout']")
    error = find_prep_error(exc)
    assert type(error) is PlanError and str(error) == "split 'b' gets no examples"


def test_an_in_process_prep_error_is_returned_as_it_is():
    try:
        try:
            raise SourceError("input a.jpg changed while it was being converted")
        except SourceError as inner:
            raise RuntimeError("bundle failed") from inner
    except RuntimeError as exc:
        error = find_prep_error(exc)
    assert type(error) is SourceError and str(error) == "input a.jpg changed while it was being converted"


def test_a_full_disk_is_an_output_error_naming_output():
    error = find_prep_error(OSError(errno.ENOSPC, "No space left on device"), "/out")
    assert type(error) is OutputError and str(error) == "cannot write to OUTPUT /out: No space left on device"
    assert find_prep_error(ValueError("a bug")) is None
