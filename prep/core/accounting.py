"""The accounting of a conversion: every input found is written, rejected or capped.

`tally` builds the manifest's `inputs` and holds the invariant
``found = written + rejected + capped``; `check_outcome` refuses a conversion that
wrote nothing, or emptied a split SOURCE names, with the reasons counted.
`rejects_jsonl` is the bytes of rejects.jsonl, sorted by path.
"""

from __future__ import annotations

import collections
import json
from typing import Iterable, Sequence

from prep.core.errors import PlanError
from prep.core.listing import Reject
from prep.core.manifest import Inputs


def tally(found: int, written: int, converted: int, rejects: Sequence[Reject],
          capped_by_class: dict[str, int]) -> Inputs:
    """The manifest's `inputs` for the counts of a conversion (`check_outcome` checks them)."""
    capped = sum(capped_by_class.values())
    return Inputs(found=found, written=written, rejected=len(rejects), capped=capped, converted=converted,
                  rejected_by_reason=dict(sorted(collections.Counter(r.reason for r in rejects).items())),
                  capped_by_class=dict(capped_by_class))


def check_outcome(inputs: Inputs, written_splits: Iterable[str], source_splits: Iterable[str],
                  rejects_path: str) -> None:
    """Refuses a conversion that wrote no example, or none in a split that SOURCE names.

    Raises:
        PlanError: naming the reject reasons, or the splits left empty, and `rejects_path`.
        RuntimeError: the counts do not reconcile (a bug: an input went missing).
    """
    if not inputs.written:
        reasons = ", ".join(f"{k} {v}" for k, v in (inputs.rejected_by_reason or {}).items())
        raise PlanError(f"no input could be converted ({reasons}); see {rejects_path}")
    emptied = sorted(set(source_splits) - set(written_splits))
    if emptied:
        many = len(emptied) > 1
        raise PlanError(f"split{'s' if many else ''} {', '.join(map(repr, emptied))} "
                        f"{'have' if many else 'has'} no example left: every input listed in "
                        f"{'them' if many else 'it'} was rejected; see {rejects_path}")
    if not inputs.reconciles:
        raise RuntimeError(f"internal error: counts do not reconcile: {inputs.to_json()}")


def sort_rejects(rejects: Iterable[Reject]) -> list[Reject]:
    return sorted(rejects, key=lambda r: (r.path, r.reason))


def rejects_jsonl(rejects: Iterable[Reject]) -> bytes:
    """rejects.jsonl: one sorted-key JSON object per reject, in the order given."""
    return "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in rejects).encode()
