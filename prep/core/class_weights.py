"""Class weights from a split's counts: what `loaders.class_weights` gives `fit(class_weight=...)` and what
`prep report` shows. Pure Python, here so that both the loaders and the report's edge use one definition."""

from __future__ import annotations

from collections.abc import Sequence


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
