"""`release_free_memory`: hands the heap's free pages back to the system after a step that made large
temporaries (glibc's malloc_trim; nothing elsewhere).

Why it is needed: glibc raises its mmap threshold each time a large block is freed, so later blocks of
that size (numpy temporaries of a hash scan, a bundle's decoded elements) come from the malloc arenas
instead, and once freed their pages stay resident: the freed memory of one stage adds to the peak of
the next. malloc_trim returns the free pages of every arena, in a few milliseconds.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to call
        return None


def release_free_memory() -> None:
    """Returns the free pages of every malloc arena to the system, where the C library can."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
