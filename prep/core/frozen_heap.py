"""`frozen_heap`: the objects alive when a long step starts are left out of the garbage collector's full
passes while it runs; `collector_paused`: no collection at all while a step runs.

Why: what is alive then (modules, Beam, the pipeline's graph: ~100,000-240,000 objects) outlives the step,
yet every full collection walked it all, holding the GIL that the step's threads want (docs/design.md,
"The heap is frozen while the pipeline runs"). Unfrozen after, so that a caller's garbage (a notebook's, a
test's) is collected again. A heap that a caller has already frozen is left as it is: unfreezing it after
would undo the caller's freeze.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Freezes the heap for the `with` block and unfreezes it after; does nothing if it is frozen already."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The garbage collector off for the `with` block, on again after (if it was on).

    For a step whose objects are trees that references free (a detection listing: the parsed file, the
    annotations' records and columns): the collector's passes only walk them, ~0.015 of the 2,000-image
    set's ~0.17 s listing (docs/benchmarks.md, "Session 25: detection pass-through"). Any cycle made
    meanwhile is collected after."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
