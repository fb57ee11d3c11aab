"""Layer 4, compare: studies (or the recipes of one study) against each other, per shared (size,
setting) block, never pooled over sizes or settings. Takes the runs of two or more studies; gives
`compare` (every test `suite compare` prints, with the field's verdicts: the Multi-Bootstrap,
P(A > B), almost stochastic order), `compare_matrix` (every pair, Holm over all), `recipe_table`
(each recipe against its reference), the sequential rules that grow a study until it is precise
enough or decided (`precise_enough`, `decided`), and whether a reported number or two leaderboard
entries can be compared at all (`reasons_not_comparable`, `rank_group_key`)."""

from suite.stats.compare.blocks import check_studies, parse_setting, unstated
from suite.stats.compare.comparability import (
    RANK_FIELDS,
    data_digest,
    rank_group_key,
    reasons_not_comparable,
    same_model,
    subsample_note,
    subsample_sd,
)
from suite.stats.compare.field_verdicts import verdict_lines, verdicts
from suite.stats.compare.matrix import compare_matrix, format_matrix
from suite.stats.compare.multi_bootstrap import multibootstrap
from suite.stats.compare.outperform import probability_of_outperforming
from suite.stats.compare.recipes import format_recipe_table, recipe_groups, recipe_of, recipe_table
from suite.stats.compare.sequential import decided, looks, next_look, precise_enough, shift_interval
from suite.stats.compare.stochastic_order import aso, epsilon_min
from suite.stats.compare.studies import (
    block_runs,
    class_count,
    compare,
    compare_block,
    format_comparison,
    hodges_lehmann,
)

__all__ = [
    "RANK_FIELDS",
    "aso",
    "block_runs",
    "check_studies",
    "unstated",
    "class_count",
    "compare",
    "compare_block",
    "compare_matrix",
    "data_digest",
    "decided",
    "epsilon_min",
    "format_comparison",
    "format_matrix",
    "format_recipe_table",
    "hodges_lehmann",
    "looks",
    "multibootstrap",
    "next_look",
    "parse_setting",
    "precise_enough",
    "probability_of_outperforming",
    "rank_group_key",
    "reasons_not_comparable",
    "recipe_groups",
    "recipe_of",
    "recipe_table",
    "same_model",
    "shift_interval",
    "subsample_note",
    "subsample_sd",
    "verdict_lines",
    "verdicts",
]
