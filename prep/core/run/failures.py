"""Runner failures as user errors: the one-line `PrepError` behind a runner's exception.

Imports no Beam. In-process runners re-raise our errors; runners with remote workers
report them only as text inside their own exception, which `find_prep_error` parses.
An OSError (disk full, permission denied) becomes an OutputError: inputs that cannot be
read are rejects, so a pipeline's OSError is about OUTPUT.
"""

from __future__ import annotations

import errno
import re

from prep.core import errors
from prep.core.errors import OutputError, PrepError
from prep.core.listing import printable

_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM}
# "prep.core.errors.PlanError: ..." as a remote worker's traceback shows it ("prep.errors." before the core
# moved).
_REMOTE_ERROR = re.compile(r"prep\.(?:core\.)?errors\.(\w+Error): (.*?)(?: \[while running|$)", re.MULTILINE)
_REMOTE_OS_ERROR = re.compile(r"\[Errno (\d+)\] ([^:\n\[]+?)(?:: '([^'\n]*)')?(?: \[while running|$)", re.MULTILINE)


def describe_os_error(exc: OSError, output: str | None = None) -> str:
    """One line for a storage failure: what it is and which file (a failed write
    names no file: then OUTPUT, the only place the pipeline writes)."""
    where = f" {printable(str(exc.filename))}" if exc.filename else f" to OUTPUT {output}" if output else ""
    verb = "write" if exc.errno in _WRITE_ERRNOS or not exc.filename else "access"
    return f"cannot {verb}{where}: {exc.strerror or exc}"


def find_prep_error(exc: BaseException, output: str | None = None) -> PrepError | None:
    """The PrepError behind a runner's exception, if any (see the module docstring)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    os_error: OSError | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PrepError):
            return type(current)(str(current).split(" [while running")[0])
        if isinstance(current, OSError) and os_error is None:
            os_error = current
        current = current.__cause__ or current.__context__
    match = _REMOTE_ERROR.search(str(exc))
    if match:
        kind = getattr(errors, match[1], PrepError)
        return (kind if isinstance(kind, type) and issubclass(kind, PrepError) else PrepError)(match[2])
    if os_error is not None:
        return OutputError(describe_os_error(os_error, output))
    match = _REMOTE_OS_ERROR.search(str(exc))
    if match:
        return OutputError(describe_os_error(OSError(int(match[1]), match[2].strip(), match[3]), output))
    return None


def runner_failure(runner: str, job_endpoint: str | None, job_server_timeout: object, exc: BaseException) -> str:
    """One line for what stopped a run on a runner that submits a job (`runners.submits_job`)."""
    if type(exc).__name__ == "FutureTimeoutError":  # grpc's, while Beam waits for the job service
        where = f" at --job_endpoint {job_endpoint}" if job_endpoint else ""
        return (
            f"no job service answered{where} within {job_server_timeout} s "
            "(--job_server_timeout); is it running and reachable?"
        )
    text = " ".join(str(exc).split())
    return f"the {runner} run failed: {type(exc).__name__}" + (f": {text[:400]}" if text else "")


def with_resume_hint(error: PrepError) -> PrepError:
    """`error` saying that the work done so far is kept for --resume."""
    return type(error)(f"{error}; the work done so far is kept: fix this and run again with --resume to finish")
