"""Layer 3, estimates: the numbers of one study, per (size, setting). Takes its trial records (or
plain scores: independent runs); gives the summary a leaderboard entry carries (`summarize`:
spread, design-aware intervals of the median, mean, std, IQR and failure rate, expected max,
variance components, the seeds a target needs), a reported number against ours like for like
(`gap_to_reported`), how much the settings explain (`hyperparameter_importance`), and what the
small dev set adds to a score's movement (`example_summary`). Every interval is across seeds, never
across the examples of one dev set, and none has zero width where the runs cannot bound it."""

from suite.stats.estimates.components import variance_components, variance_shares
from suite.stats.estimates.coverage import coverage_table, flag_coverage, shape_of
from suite.stats.estimates.example_metrics import PerExample, mean_scores, per_example_scores
from suite.stats.estimates.examples import (
    agreement,
    dev_sampling_error,
    dev_sampling_errors,
    eval_noise,
    example_summary,
    fleiss_kappa,
)
from suite.stats.estimates.expected_maximum import (
    LOWER_BOUND,
    WITH_REPLACEMENT,
    WITHOUT_REPLACEMENT,
    expected_max,
)
from suite.stats.estimates.failed_runs import failed_values, failure_bounds, widened_mean, widened_std
from suite.stats.estimates.failure_rate import failure_interval, least_share, wilson
from suite.stats.estimates.gap import gap_to_reported
from suite.stats.estimates.gap_reference import predictive_draws
from suite.stats.estimates.summary import (
    explained_by_settings,
    failure_breakdown,
    hyperparameter_importance,
    seeds_needed,
    spread,
    summarize,
)
from suite.stats.estimates.uncertainty import (
    Statistic,
    intervals,
    median_interval,
    no_spread,
    reduce,
    stacked_intervals,
)

__all__ = [
    "LOWER_BOUND",
    "WITHOUT_REPLACEMENT",
    "WITH_REPLACEMENT",
    "PerExample",
    "Statistic",
    "agreement",
    "coverage_table",
    "dev_sampling_error",
    "dev_sampling_errors",
    "eval_noise",
    "example_summary",
    "expected_max",
    "explained_by_settings",
    "failed_values",
    "failure_breakdown",
    "failure_bounds",
    "failure_interval",
    "flag_coverage",
    "fleiss_kappa",
    "gap_to_reported",
    "hyperparameter_importance",
    "intervals",
    "least_share",
    "mean_scores",
    "median_interval",
    "no_spread",
    "per_example_scores",
    "predictive_draws",
    "reduce",
    "seeds_needed",
    "shape_of",
    "spread",
    "stacked_intervals",
    "summarize",
    "variance_components",
    "variance_shares",
    "widened_mean",
    "widened_std",
    "wilson",
]
