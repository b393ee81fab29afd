"""Class balance from the manifest's counts: weights for `fit(class_weight=...)` and read-time rebalancing.

Pure Python.
"""

from __future__ import annotations

from typing import Sequence


def balanced_weights(class_counts: Sequence[int]) -> dict[int, float]:
    """The "balanced" class weights: ``w_c = N / (K · n_c)``.

    N is the number of records, K the number of classes that have any, n_c the
    records of class c (scikit-learn's ``class_weight="balanced"``). A weighted
    epoch then gives every present class the same total weight N/K, and the mean
    weight per record is 1. A class with no records gets weight 0.0, so the dict
    still covers every label id.
    """
    total = sum(class_counts)
    present = sum(1 for n in class_counts if n > 0)
    return {label: (total / (present * n) if n > 0 else 0.0) for label, n in enumerate(class_counts)}


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
