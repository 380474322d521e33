"""Metrics: Spearman rank correlation, SSDC (and its streaming accumulator), the mean attention distance and
the position probe (the two other lenses, with theirs), robustness and reporting statistics. Pure, typed
functions, tested against scipy, numpy or brute-force loops.

Imports: its own modules.
"""

from peanchor.metrics.attention_distance import AttentionDistanceAccumulator, attention_distance
from peanchor.metrics.bootstrap import GroupBootstrap
from peanchor.metrics.position_probe import PositionProbeAccumulator
from peanchor.metrics.robustness import accuracy, fragility_score
from peanchor.metrics.spearman import rankdata, spearman
from peanchor.metrics.ssdc import SSDCAccumulator, grid_distances, ssdc
from peanchor.metrics.stats import bootstrap_ci, mean_std, paired_bootstrap_diff, permutation_test_spearman

__all__ = [
    "AttentionDistanceAccumulator",
    "GroupBootstrap",
    "PositionProbeAccumulator",
    "SSDCAccumulator",
    "accuracy",
    "attention_distance",
    "bootstrap_ci",
    "fragility_score",
    "grid_distances",
    "mean_std",
    "paired_bootstrap_diff",
    "permutation_test_spearman",
    "rankdata",
    "spearman",
    "ssdc",
]
