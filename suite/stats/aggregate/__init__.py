"""Layer 5, aggregate: one model (or recipe) across tasks, as rliable aggregates (Agarwal et al.,
NeurIPS 2021). Takes leaderboard entries of several tasks; gives each group's normalised IQM, its
performance profile and the average probability of improving on a reference, each with a
stratified-bootstrap interval widened for the few runs a task has (`aggregate`, one per size with
`aggregate_by_size`), and the scale each task is read on (`normalisation`)."""

from suite.stats.aggregate.across_tasks import (
    aggregate,
    aggregate_by_size,
    improvement_probability,
    profile_share,
    weighted_iqm,
)
from suite.stats.aggregate.normalised import normalisation

__all__ = [
    "aggregate",
    "aggregate_by_size",
    "improvement_probability",
    "normalisation",
    "profile_share",
    "weighted_iqm",
]
