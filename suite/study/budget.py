"""How many optimizer steps each planned setting trains, against a cited floor: `plan` prints the
table and `run` one line, each with a warning below the floor, before any trial trains
(docs/sweeps.md, Budgets for small data).

Why a floor: a small training set at a fixed epoch budget trains a handful of steps (16/class
on a 2-class task at batch 16 and 3 epochs: 6 steps), and the runs that then fail say nothing
of the recipe. Splinter's few-shot recipe trains 10 epochs or 200 steps, whichever is more (Ram
et al. 2021, s4); LM-BFF trains 1,000 steps at K = 16 (Gao et al. 2021, s6); too few iterations
cause failed runs (Mosbach et al. 2021, s5; Zhang et al. 2021, s6). A setting's `min_steps`
lifts it to a floor; this module only counts and warns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from suite.config.sweep import HParams
from suite.config.task import size_order
from suite.training.trial_plan import TrialPlan

STEPS_FLOOR = 200  # Splinter's 200 steps: the smaller of the two cited budgets
LISTED = 6  # settings a run's one line names; past this it gives the range


@dataclass
class Budget:
    """One (size, setting) of the plan: its training examples (features: a long QA context is
    several), its optimizer steps per trial (the fewest over its subsamples) and its trials."""

    size: str
    setting: str
    n_train: int
    steps: int
    trials: int


def steps_of(h: HParams, n_train: int) -> int:
    """Optimizer steps of one trial: epochs (stretched by `min_steps`) x batches per epoch."""
    return h.epochs_for(n_train) * math.ceil(n_train / h.batch_size)


def values_text(values: dict[str, Any]) -> str:
    """Hyperparameter values as `plan` writes them (floats to 3 significant digits); "" for none."""
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def setting_label(h: HParams, space: Any) -> str:
    """A setting as `plan` names it: its recipe, then its searched values; "(fixed)" for none."""
    text = values_text({k: getattr(h, k) for k in space})
    return ", ".join(part for part in (h.recipe or "", text) if part) or "(fixed)"


def train_counts(data: Any, plans: list[TrialPlan]) -> dict[tuple[str, int], int]:
    """(size, subsample seed) -> training examples as the trials see them (features: a long QA
    context is several), each featurized once, from the feature cache the trials read."""
    counts: dict[tuple[str, int], int] = {}
    for p in plans:
        where = (str(p.size), p.seeds.subsample)
        if where not in counts:
            counts[where] = len(data.features("train", data.train_indices(p.size, p.seeds.subsample)))
    return counts


def budgets(
    data: Any, space: Any, plans: list[TrialPlan], counts: dict[tuple[str, int], int] | None = None
) -> list[Budget]:
    """One `Budget` per (size, setting), in size order; `data` is the prepared task's data, and
    `counts` its `train_counts` where the caller has them."""
    counts = counts if counts is not None else train_counts(data, plans)
    rows: dict[tuple[str, str], Budget] = {}
    for p in plans:
        n = counts[str(p.size), p.seeds.subsample]
        steps = steps_of(p.hparams, n)
        key = (str(p.size), setting_label(p.hparams, space))
        row = rows.setdefault(key, Budget(*key, n_train=n, steps=steps, trials=0))
        row.trials += 1
        if steps < row.steps:
            row.n_train, row.steps = n, steps
    return sorted(rows.values(), key=lambda b: size_order(b.size))  # settings in plan order


def steps_line(rows: list[Budget]) -> str:
    """`run`'s one line: each setting's steps per size, or their range past `LISTED` settings."""
    parts = []
    for size in dict.fromkeys(b.size for b in rows):
        here = [b for b in rows if b.size == size]
        if len(here) <= LISTED:
            parts.append(f"size {size}: " + ", ".join(f"{b.setting} {b.steps}" for b in here))
        else:
            low, high = min(b.steps for b in here), max(b.steps for b in here)
            parts.append(f"size {size}: {low}-{high} over {len(here)} settings")
    return "optimizer steps per trial: " + "; ".join(parts)


def floor_warning(rows: list[Budget], floor: int = STEPS_FLOOR) -> str | None:
    """One line naming the settings under the floor (None when none is), and what lifts them."""
    under = [b for b in rows if b.steps < floor]
    if not under:
        return None
    named = ", ".join(f"size {b.size} {b.setting}: {b.steps}" for b in under[:LISTED])
    more = f" and {len(under) - LISTED} more" if len(under) > LISTED else ""
    return (
        f"warning: {len(under)} of {len(rows)} setting(s) train fewer than {floor} optimizer steps, "
        f"where small sets under-train and runs fail for it: {named}{more}; "
        f"`--set sweep.hparams.min_steps={floor}` trains at least {floor} "
        "(docs/sweeps.md#budgets-for-small-data)"
    )
