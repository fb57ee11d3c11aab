"""Layer 1, design: the seed design of one setting's runs and the bootstrap over it. Takes trial
records; gives their scores laid out by seed (`layout`: a crossed init x order grid per subsample
seed, or independent runs), resampled seed units (`resample`, `bootstrap_samples`,
`bootstrap_reduced`), each seed axis's share of the variance of a mean with the widening few
seeds call for (`widening`), and a seed grid's mean squares with their df and Satterthwaite's
(`mean_squares`: the one home of the variance model the layers above read). Every interval and
test above resamples or counts these units, never runs as if independent."""

from suite.stats.design.mean_squares import (
    Term,
    crossed_mean_squares,
    crossed_terms,
    effect_sums,
    level_spread,
    pooled_mean_squares,
    satterthwaite,
    term_df,
)
from suite.stats.design.seeds import (
    Z95,
    Layout,
    bootstrap_reduced,
    bootstrap_samples,
    by_setting,
    draw_indices,
    exchangeable,
    kept_scores,
    layout,
    pad_grids,
    resample,
    stacked_terms,
    stacked_widening,
    widening,
)

__all__ = [
    "Z95",
    "Layout",
    "Term",
    "bootstrap_reduced",
    "bootstrap_samples",
    "by_setting",
    "crossed_mean_squares",
    "crossed_terms",
    "draw_indices",
    "effect_sums",
    "exchangeable",
    "kept_scores",
    "layout",
    "level_spread",
    "pad_grids",
    "pooled_mean_squares",
    "resample",
    "satterthwaite",
    "stacked_terms",
    "stacked_widening",
    "term_df",
    "widening",
]
