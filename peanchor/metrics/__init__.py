"""Metrics: Spearman rank correlation, SSDC (and its streaming accumulator), robustness and
reporting statistics. Pure, typed functions, tested against scipy.

Imports: its own modules.
"""

from peanchor.metrics.robustness import accuracy, fragility_score
from peanchor.metrics.spearman import rankdata, spearman
from peanchor.metrics.ssdc import SSDCAccumulator, grid_distances, ssdc
from peanchor.metrics.stats import bootstrap_ci, mean_std, paired_bootstrap_diff, permutation_test_spearman

__all__ = [
    "SSDCAccumulator",
    "accuracy",
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
