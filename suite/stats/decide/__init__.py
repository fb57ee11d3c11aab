"""Layer 2, decide: the tests and what they can decide with the runs they have. Takes runs (their
scores, or records paired by seeds); gives p-values only where a test can reach p < 0.05 at these
runs (`verdict`: else "cannot decide with n runs; needs at least m"), exact and permutation tests
with their distribution-free shift intervals (`exact`), and tests whose unit is the seed for runs
that share seeds (`paired`: a crossed grid, several subsample seeds)."""

from suite.stats.decide.decidable import (
    ALPHA,
    fisher_min_p,
    fisher_runs_needed,
    runs_needed,
    signed_rank_min_p,
    text,
    verdict,
)
from suite.stats.decide.exact import (
    RESAMPLES,
    fisher_p,
    mean_shift,
    median_shift,
    moses_interval,
    moses_k,
    permutation_p,
    ranked,
    signed_rank_k,
    signed_rank_p,
    smallest_p,
    split_count,
    spread_shift,
    walsh_interval,
)
from suite.stats.decide.paired import (
    differences,
    failed,
    mean_variance,
    oriented,
    pair_up,
    paired_units,
    t_p,
    unit_grid,
    unit_t,
    unpaired_units,
    welch_t,
)

__all__ = [
    "ALPHA",
    "RESAMPLES",
    "differences",
    "failed",
    "fisher_min_p",
    "fisher_p",
    "fisher_runs_needed",
    "mean_shift",
    "mean_variance",
    "median_shift",
    "moses_interval",
    "moses_k",
    "oriented",
    "pair_up",
    "paired_units",
    "permutation_p",
    "ranked",
    "runs_needed",
    "signed_rank_k",
    "signed_rank_min_p",
    "signed_rank_p",
    "smallest_p",
    "split_count",
    "spread_shift",
    "t_p",
    "text",
    "unit_grid",
    "unit_t",
    "unpaired_units",
    "verdict",
    "walsh_interval",
    "welch_t",
]
