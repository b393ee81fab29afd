"""Class balance from the manifest's counts: weights for `fit(class_weight=...)` (`balanced_weights`, from
`prep.core.class_weights`) and read-time rebalancing.

Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence

from prep.core.class_weights import balanced_weights  # noqa: F401  (re-exported: one definition)


def acceptance_probabilities(class_counts: Sequence[int]) -> list[float]:
    """Probability of keeping a record of each class so the kept stream is class-uniform.

    ``p_c = min_n / n_c`` over the classes present (the rarest class is always
    kept); a class with no records gets 0.0. Used by `rebalance=True`.
    """
    present = [n for n in class_counts if n > 0]
    if not present:
        return [0.0] * len(class_counts)
    rarest = min(present)
    return [rarest / n if n > 0 else 0.0 for n in class_counts]
