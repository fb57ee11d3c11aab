"""The Multi-Bootstrap (Sellam et al., ICLR 2022, "The MultiBERTs", section 3 and appendix; reference
code: google-research/language, language/multiberts/multibootstrap.py): is B better than A, by how
much, and would other seeds *and another dev set* say the same?

Each replicate resamples the seed units and the dev examples jointly:
- one example index vector per replicate, shared by both arms and by every run in the replicate
  (the runs were scored on the same dev set, so its luck is common to both);
- paired, when both arms ran the same seeds: one draw of the seed units, applied to both arms (the
  seeds' shared effects cancel in the difference); unpaired otherwise: each arm's units drawn on
  their own, the example draw still shared;
- the statistic of an arm: the mean over the drawn seed units of the metric recomputed on the drawn
  examples; the difference is B - A (the reference's L' - L, A = base, B = experiment).

Reported (`multibootstrap`): each arm's mean and percentile interval, the difference with its
percentile interval, the one-sided p = the share of replicates with B - A <= 0 (floored at 1/nboot as
in the reference: a bootstrap cannot see a smaller p), and with a margin P(B - A >= margin). Where the
metric is lower-is-better both read on A - B: p is the share where B is not better, the margin an
improvement.
`estimate` and each arm's `mean` are the full-data values (every run, every example); the
reference prints the replicates' mean instead, kept here as `bootstrap_mean`.

Where this goes beyond the reference, and why:
- Seed units follow the suite's seed design (suite.stats.design.layout), not one `seed`
  column: independent runs are the units (the reference exactly); on a crossed init x order grid a
  replicate draws init seeds (rows) and order seeds (columns) and keeps every cell of the drawn
  rows x columns (never cells one by one: cells of a row share its init effect); subsample seeds
  are a further axis, drawn first, with the init/order (or run) draws made once when every
  subsample shares them and anew within each drawn subsample otherwise. Cells no run filled drop
  out of the mean (the replicate is a mean over the drawn cells that hold a run).
- Draw order: per replicate, for each arm (once when paired): the subsample, row (init or run) and
  column (order) draws, each `choice(m, m)` of a `numpy.random.RandomState(seed)`, skipping
  axes with one level (a draw from one item consumes nothing there anyway); then the example draw.
  On independent runs of one subsample this is the reference's sequence call for call, so the same
  seed gives the reference's replicates (tests/test_multibootstrap.py re-runs its loop). The seeds
  are in sorted order (the reference's unpaired order; its paired order is a set's, which is
  arbitrary).
- Metrics are recomputed per replicate from the runs' stored per-example outcomes
  (`record["per_example"]`), vectorised as weighted sums (an example drawn k times has weight k):
  accuracy, binary/macro F1 and Matthews from the weighted confusion matrix (the same conventions
  as suite.model.metrics, zero_division = 0, F1 binary when num_labels == 2); Pearson from weighted
  moments and Spearman from weighted average-tie ranks (0 when either side is constant, as there);
  QA exact match / F1 as means over questions; NER entity F1, precision and recall from the
  summed per-sentence counts. Left alone: `entity_f1_strict` and per-type F1 (the stored counts
  are the default-mode totals of one sentence, not per type or strict), and any run set without
  per-example outcomes on one common dev set: then only the seeds are resampled, each run keeping
  its stored score (the reference's `sample_examples=False`), and the result's `note` says so.

Measured (tests/test_multibootstrap.py; 1000 simulated studies per figure, nboot 400). Run r gets
dev example j right when arm + seed_r + difficulty_j + noise_rj > 0 (normal effects; A 65.3%, B
68.8% true accuracy over seeds and dev sets, exact; seed sd of one run's accuracy 2.8 points; 16-21%
of examples flip across runs; paired: the arms' seed and run x example effects correlate 0.7):
- coverage of the true B - A at nominal 95%, 8 seeds x 300 examples: paired 95.7%, unpaired 95.3%
  (six reruns with other draws: paired 95.3-96.0%, unpaired 93.3-96.3%); 5 x 300: 94.9% / 93.5%;
  5 x 200: 95.9% / 93.4%; 10 x 500: 95.4% / 93.2%;
- median widths at 8 x 300 (accuracy points): paired difference 3.96, unpaired difference 6.04,
  each arm's own 10.6 and 10.3: the paired interval is 0.38 of an arm's (the paper: about half on
  MNLI); unpaired (independent seeds, the example draw still shared) 0.58;
- where it is off: a percentile bootstrap over few seeds is too narrow when the seed spread
  dominates (seed sd 5 points: 87% paired / 91% unpaired with 5 seeds, 94% / 92% with 10), and the
  joint draw is conservative when the run x example interaction dominates (seed sd 1.6 points, 30%
  flips: 99.4% / 99.6%): its variance counts that interaction about three times (through the seed
  draw, the example draw and both; cf. McCullagh 2000 on resampling crossed arrays). Both are the
  method's, not this code's; no correction is applied, so the figures stay the reference's.
Speed: 20 + 20 paired runs x 10,000 dev examples, nboot 1000: accuracy 0.6 s, F1 / Matthews 2 s,
Pearson 1.8 s, Spearman 17 s (a rank pass per run and replicate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from suite.stats.compare.reference_draws import randint_rows
from suite.stats.decide import pair_up
from suite.stats.design import Layout, layout
from suite.stats.estimates import PerExample, per_example_scores
from suite.study.records import TrialRecord, runs, scored

METHOD = (
    "Multi-Bootstrap (Sellam et al. 2022): seed units and dev examples resampled jointly, one example "
    "draw shared by both arms; percentile interval"
)
SEEDS_ONLY = "seed units resampled, each run keeping its stored score (dev examples not resampled)"
CHUNK = 128  # replicates per block when recomputing metrics (bounds memory at large dev sets)


# ---------------------------------------------------------------------------------------------
# Seed units: the design's cells, and their weights in one replicate
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Units:
    """Where each run sits in its seed design: `lay` (grid of run positions) and `cell` (the flat
    grid cell of each run, in the order of the runs given)."""

    lay: Layout
    cell: np.ndarray

    @classmethod
    def of(cls, seeds: Sequence[dict[str, Any] | None]) -> Units:
        lay = layout([{"seeds": s, "score": float(k)} for k, s in enumerate(seeds)])
        flat = lay.grid.reshape(-1)
        cell = np.empty(len(seeds), dtype=int)
        found = np.flatnonzero(np.isfinite(flat))
        cell[flat[found].astype(int)] = found
        return cls(lay, cell)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.lay.grid.shape


def _choice(rng: np.random.RandomState, m: int) -> np.ndarray:
    """The reference's `_bsample`: m of m with replacement; no draw from a single item. By
    `randint`, which `choice` calls for these arguments (the same draws, at half the cost: a
    grid's 80 blocks make 160,000 of them)."""
    return rng.randint(0, m, size=m) if m > 1 else np.zeros(m, dtype=int)


def draw_cells(rng: np.random.RandomState, units: Units) -> np.ndarray:
    """One replicate's multiplicity of every grid cell (S, A, C): subsample seeds first, then rows
    (init seeds or runs) and columns (order seeds), once when shared, else within each drawn
    subsample seed."""
    lay = units.lay
    n_s, n_a, n_c = units.shape
    if (rows := _independent_rows(units)) is not None:
        return np.bincount(_choice(rng, rows), minlength=n_a).reshape(units.shape)
    s = _choice(rng, n_s)
    weights = np.zeros(units.shape)
    if lay.shared:
        a, c = _choice(rng, n_a), _choice(rng, n_c)
        cs, ca, cc = (np.bincount(x, minlength=m) for x, m in ((s, n_s), (a, n_a), (c, n_c)))
        return cs[:, None, None] * ca[None, :, None] * cc[None, None, :]
    for k in s:
        a, c = _choice(rng, int(lay.a_count[k])), _choice(rng, int(lay.c_count[k]))
        weights[k] += np.outer(np.bincount(a, minlength=n_a), np.bincount(c, minlength=n_c))
    return weights


def _independent_rows(units: Units) -> int | None:
    """Independent runs (one subsample, one column): the runs a replicate draws, the same single
    draw of rows as the general steps of `draw_cells` make; None for any other design."""
    n_s, n_a, n_c = units.shape
    if n_s == n_c == 1:
        return n_a if units.lay.shared else int(units.lay.a_count[0])
    return None


def run_weights(cells: np.ndarray, units: Units) -> np.ndarray:
    """(..., S, A, C) cell multiplicities -> (..., R) run multiplicities."""
    return cells.reshape(*cells.shape[:-3], -1)[..., units.cell]


def draws(
    nboot: int, seed: int, units: Sequence[Units], n_examples: int | None
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Every replicate's draws in the reference's order: the seed units of each entry of `units`
    (one entry when paired, A then B when not), then the example indices (none when `n_examples`
    is None). Returns the run weights (B, R) per entry and the example indices (B, n)."""
    rows = [_independent_rows(u) for u in units]
    if all(r is not None for r in rows):  # one draw of rows per arm and replicate: all at once
        bounds = [*rows, *([n_examples] if n_examples else [])]
        found = randint_rows(seed, bounds, nboot)
        if found is not None:
            counts = [_counts(drawn, u.shape[1])[:, u.cell] for drawn, u in zip(found, units, strict=False)]
            return counts, (found[-1] if n_examples else None)
    rng = np.random.RandomState(seed)
    # Each replicate's cells become run weights at once: (B, R), never (B, S, A, C) beside it
    # (two 800 MB arrays at 1,000 replicates of 100,000 runs, and a gather between them).
    weights = [np.zeros((nboot, len(u.cell))) for u in units]
    examples = np.empty((nboot, n_examples), dtype=np.int64) if n_examples else None
    for b in range(nboot):
        for u, w in zip(units, weights, strict=True):
            w[b] = run_weights(draw_cells(rng, u), u)
        if examples is not None:
            examples[b] = rng.choice(n_examples, size=n_examples, replace=True)
    return weights, examples


def _counts(drawn: np.ndarray, n: int) -> np.ndarray:
    """(B, k) drawn indices -> (B, n) how often each of n is drawn, as floats."""
    rows = len(drawn)
    flat = (drawn + n * np.arange(rows)[:, None]).ravel()
    return np.bincount(flat, minlength=rows * n).reshape(rows, n).astype(float)


def example_weights(indices: np.ndarray, n: int) -> np.ndarray:
    """(..., B, m) indices in [0, n) -> (..., B, n) multiplicities (float)."""
    lead = indices.shape[:-1]
    rows = int(np.prod(lead))
    flat = indices.reshape(rows, -1) + (np.arange(rows) * n)[:, None]
    return np.bincount(flat.ravel(), minlength=rows * n).reshape(*lead, n).astype(float)


def arm_replicates(scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The replicate statistic of one arm: the weighted mean over runs of their metric on the drawn
    examples; scores and weights (..., B, R) -> (..., B); NaN when no drawn cell holds a run."""
    total = weights.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, (weights * scores).sum(-1) / total, np.nan)


def summarise(
    rep_a: np.ndarray,
    rep_b: np.ndarray | None,
    alpha: float = 0.05,
    margin: float | None = None,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """Percentile intervals and bootstrap p of replicates along the last axis (vectorised over
    leading axes): `interval` (..., 2) of B - A (of A alone when rep_b is None), `p_one_sided` the
    share of replicates where B is not better (B - A <= 0; A - B <= 0 where lower is better)
    floored at 1/nboot, `p_margin` P(B better by at least margin)."""
    q = [alpha / 2, 1 - alpha / 2]
    delta = rep_a if rep_b is None else rep_b - rep_a
    gain = delta if higher_is_better else -delta  # B's improvement over A
    nboot = delta.shape[-1]
    out: dict[str, Any] = {
        "interval": np.moveaxis(np.nanquantile(delta, q, axis=-1), 0, -1),
        "bootstrap_mean": np.nanmean(delta, -1),
        "p_one_sided": None,
        "p_margin": None,
    }
    if rep_b is not None:
        valid = np.isfinite(delta)
        out["p_one_sided"] = np.maximum((gain <= 0).sum(-1) / valid.sum(-1), 1 / nboot)
        out["p_at_least_zero"] = np.maximum((gain >= 0).sum(-1) / valid.sum(-1), 1 / nboot)
        out["arm_intervals"] = [np.moveaxis(np.nanquantile(r, q, axis=-1), 0, -1) for r in (rep_a, rep_b)]
        if margin is not None:
            out["p_margin"] = (gain >= margin).sum(-1) / valid.sum(-1)
    return out


# ---------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------


def _stored(records: Sequence[TrialRecord], metric: str) -> np.ndarray:
    """The runs' stored score for `metric` (the main score, or the final epoch's other metrics)."""
    found = [
        r["score"] if metric == r.get("metric", metric) else (r.get("scores") or {}).get(metric)
        for r in records
    ]
    if any(v is None for v in found):
        raise ValueError(f"{metric}: not every run stored it, and it cannot be recomputed per example")
    return np.array(found, dtype=float)


def _metric_of(records: Sequence[TrialRecord], metric: str | None) -> str:
    if metric:
        return metric
    named = {r["metric"] for r in records if r.get("metric")}
    if len(named) != 1:
        raise ValueError(f"name the metric: the records name {sorted(named) or 'none'}")
    return named.pop()


def _scores_for(pe: PerExample | None, stored: np.ndarray, idx: np.ndarray | None, nboot: int) -> np.ndarray:
    """(B, R) each run's metric in each replicate: recomputed on the drawn examples, or stored."""
    if pe is None or idx is None:
        return np.broadcast_to(stored, (nboot, len(stored)))
    return np.concatenate(
        [pe.scores(example_weights(idx[i : i + CHUNK], pe.n)) for i in range(0, nboot, CHUNK)], axis=0
    )


def multibootstrap_replicates(
    a: Sequence[TrialRecord],
    b: Sequence[TrialRecord] | None = None,
    nboot: int = 1000,
    seed: int = 0,
    paired: bool | None = None,
    metric: str | None = None,
    num_labels: int | None = None,
) -> dict[str, Any]:
    """The replicates themselves: `replicates` (nboot, 2) of (A, B) (B's column NaN when b is None),
    `observed` (A, B) on the full data, and what was resampled. See `multibootstrap`."""
    a_runs, b_runs = scored(runs(a)), scored(runs(b)) if b is not None else []
    metric = _metric_of([*a_runs, *b_runs], metric)
    notes: list[str] = []
    pairs = pair_up(a_runs, b_runs) if b is not None else []
    every_run_paired = len(pairs) == len(a_runs) == len(b_runs)
    if paired is None:
        paired = b is not None and len(pairs) >= 2 and every_run_paired
    if paired:
        if b is None or len(pairs) < 2:
            raise ValueError("paired needs at least 2 runs with the same seeds on both sides")
        if not every_run_paired:
            left = len(a_runs) + len(b_runs) - 2 * len(pairs)
            notes.append(f"{left} runs without a partner of the same seeds were left out")
        a_runs, b_runs = [p[0] for p in pairs], [p[1] for p in pairs]
    if not a_runs or (b is not None and not b_runs):
        raise ValueError("a side has no scored runs")

    both = [*a_runs, *b_runs]
    found = per_example_scores(both, metric, num_labels)
    pe = found if isinstance(found, PerExample) else None
    if pe is None:
        notes.append(f"{found}: {SEEDS_ONLY}")
    stored = _stored(both, metric) if pe is None else pe.scores(np.ones((1, pe.n)))[0]

    if paired:
        units = [Units.of([r.get("seeds") for r in a_runs])]
    else:
        units = [Units.of([r.get("seeds") for r in side]) for side in (a_runs, b_runs) if side]
    weights, idx = draws(nboot, seed, units, pe.n if pe else None)
    if paired:
        weights = [weights[0], weights[0]]
    scores = _scores_for(pe, stored, idx, nboot)
    n_a = len(a_runs)
    reps = [arm_replicates(scores[:, :n_a], weights[0])]
    observed = [float(stored[:n_a].mean())]
    if b_runs:
        reps.append(arm_replicates(scores[:, n_a:], weights[1]))
        observed.append(float(stored[n_a:].mean()))
    else:
        reps.append(np.full(nboot, np.nan))
        observed.append(np.nan)
    for side, u in zip("AB" if not paired else "P", units, strict=False):
        if np.prod(u.shape) == 1:
            notes.append(f"{side}: one seed unit, its seed spread is not seen")
    return {
        "replicates": np.stack(reps, -1),
        "observed": observed,
        "paired": bool(paired),
        "units": units,
        "n_examples": pe.n if pe else None,
        "runs": (len(a_runs), len(b_runs)),
        "metric": metric,
        "notes": notes,
    }


def _unit_text(found: dict[str, Any], two: bool) -> str:
    n = found["n_examples"]
    examples = f" x {n} dev examples, one example draw shared by both arms" if n else ""
    if not two:
        return f"{found['runs'][0]} runs ({found['units'][0].lay.unit})" + (
            f" x {n} dev examples" if n else ""
        )
    if found["paired"]:
        return f"{found['runs'][0]} seed-paired runs ({found['units'][0].lay.unit}){examples}"
    (ra, rb), (ua, ub) = found["runs"], found["units"]
    return f"A: {ra} runs ({ua.lay.unit}); B: {rb} runs ({ub.lay.unit}){examples}"


def multibootstrap(
    a: Sequence[TrialRecord],
    b: Sequence[TrialRecord] | None = None,
    nboot: int = 1000,
    seed: int = 0,
    paired: bool | None = None,
    margin: float | None = None,
    alpha: float = 0.05,
    metric: str | None = None,
    num_labels: int | None = None,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """The Multi-Bootstrap comparison of B against A (runs of one task, size and setting each).

    paired: None = automatic, paired when every scored run of each side has a partner with the
    same seeds on the other (at least 2 pairs); True = pair on the seeds both ran (the others are
    left out, as the reference does, and the note counts them); False = unpaired. metric: the
    records' own `metric` when None. num_labels: the task's classes, for F1 (binary when 2, macro
    otherwise) and Matthews; None infers them from the labels and predictions seen, which turns
    macro F1 binary on a dev sample that misses a class. higher_is_better: the metric's direction
    (p and the margin read on B's improvement over A).

    Returns {estimate (B - A on the full data; A's mean when b is None), interval (percentile,
    1 - alpha), p_one_sided (share of replicates where B is not better, at least 1/nboot),
    p_margin (P(B better by >= margin), or None), margin, paired, units (text), n_examples (None:
    examples not resampled), arms {a, b: {mean, interval, runs}}, bootstrap_mean, nboot, alpha,
    metric, higher_is_better, method, note}.
    """
    found = multibootstrap_replicates(a, b, nboot, seed, paired, metric, num_labels)
    reps, observed = found["replicates"], found["observed"]
    two = b is not None
    summary = summarise(reps[:, 0], reps[:, 1] if two else None, alpha, margin, higher_is_better)
    if np.isnan(reps[:, : 1 + two]).any():
        found["notes"].append("some replicates drew no cell holding a run and were left out")

    def arm(k: int) -> dict[str, Any]:
        interval = np.nanquantile(reps[:, k], [alpha / 2, 1 - alpha / 2])
        return {"mean": observed[k], "interval": [float(x) for x in interval], "runs": found["runs"][k]}

    return {
        "estimate": observed[1] - observed[0] if two else observed[0],
        "interval": [float(x) for x in summary["interval"]],
        "p_one_sided": None if summary["p_one_sided"] is None else float(summary["p_one_sided"]),
        "p_two_sided": None
        if summary["p_one_sided"] is None
        else float(min(1.0, 2 * min(summary["p_one_sided"], summary["p_at_least_zero"]))),
        "p_margin": None if summary["p_margin"] is None else float(summary["p_margin"]),
        "margin": margin,
        "paired": found["paired"],
        "units": _unit_text(found, two),
        "n_examples": found["n_examples"],
        "arms": {"a": arm(0), "b": arm(1) if two else None},
        "bootstrap_mean": float(summary["bootstrap_mean"]),
        "nboot": nboot,
        "alpha": alpha,
        "metric": found["metric"],
        "higher_is_better": higher_is_better,
        "method": METHOD if found["n_examples"] else f"Multi-Bootstrap, {SEEDS_ONLY}; percentile interval",
        "note": "; ".join(found["notes"]) or None,
    }
