"""Named exceptions for the failures users meet.

The CLI turns every `PrepError` into a one-line `Error: ...` and a non-zero exit.
"""


class PrepError(Exception):
    """Base class of every error a user can cause and fix."""


class OptionsError(PrepError):
    """An option value is out of range or options contradict each other."""


class SourceError(PrepError):
    """SOURCE, a label file or a class list cannot be used as given."""


class PlanError(PrepError):
    """The examples cannot be split and sharded as asked."""


class OutputError(PrepError):
    """OUTPUT cannot be written as asked."""


class RunnerError(PrepError):
    """A runner other than the local one failed: its job service could not be reached, or its job failed."""


class ManifestError(PrepError):
    """A manifest is missing, unreadable, of an unknown version or inconsistent."""


class RecordError(PrepError):
    """A TFRecord file is corrupt: bad framing, bad CRC or truncated."""


class ResumeError(PrepError):
    """`--resume` cannot finish the interrupted conversion in OUTPUT as asked."""


class LoaderError(PrepError):
    """A dataset cannot be read as asked: unknown split, missing or altered shard, batch too large."""
