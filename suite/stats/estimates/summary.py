"""Statistics of a study's scores (numpy/scipy only; no plotting).

Every interval here is *across seeds/runs*: it says how much a re-run of the study would move,
not the per-example sampling error of one run's dev score. The design-aware machinery (which
units a bootstrap resamples, intervals, variance components) is in uncertainty.py, components.py
and suite.stats.design.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from suite.stats.design import Z95, Layout, by_setting, layout
from suite.stats.estimates.components import variance_components
from suite.stats.estimates.coverage import flag_coverage
from suite.stats.estimates.expected_maximum import WITHOUT_REPLACEMENT, expected_max
from suite.stats.estimates.gap_reference import our_variance
from suite.stats.estimates.uncertainty import intervals, median_interval
from suite.study.records import TrialRecord, counts, finite_scores, outcome, runs, scored

CONFIDENCE = 0.9  # seeds_needed: one-sided confidence of "at least m runs"
SHOWN = (1, 5, 10, 20)  # the expected-max points a summary keeps


def spread(scores: Sequence[float | None]) -> dict[str, float | int]:
    """n, median, IQR, mean, std (ddof=1), min, max of the finite scores."""
    x = finite_scores(scores)
    if x.size == 0:
        return {"n": 0}
    q1, median, q3 = np.percentile(x, [25, 50, 75])
    return {
        "n": int(x.size),
        "median": float(median),
        "iqr": float(q3 - q1),
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "min": float(x.min()),
        "max": float(x.max()),
    }


def failure_breakdown(records: Sequence[TrialRecord]) -> dict[str, int]:
    """Failed runs by kind: trivial baseline, threshold, divergence (errored trials are not runs)."""
    kinds: dict[str, int] = defaultdict(int)
    for r in runs(records):
        if outcome(r) == "failed":
            kinds[r.get("failure") or "baseline"] += 1
    return dict(kinds)


def summarize(records: Sequence[TrialRecord], seed: int = 0, resamples: int = 2000) -> dict[str, Any]:
    """Spread, intervals and expected max over the runs, failed runs included (as scored; a
    diverged run has no score) and excluded. Errored and pruned trials are not runs: counted
    apart here, and nowhere else. Intervals resample the units of the seed design, per setting.

    Shape: {runs, failed, failure_rate (None where any run's outcome is unknown, with `unknown`: how
      many), failure_kinds, pruned, errored,
      "all" | "excluding_failed": {n, median, iqr, mean, std, min, max, ci95_median, ci95_mean,
          expected_max: {"1"|"5"|"10"|"20" (<= n): value}, expected_max_std (its band: the
          spread of the max of n of our runs, 0 at n = N), expected_max_ci95: {same keys: [low,
          high] | None} (an interval for the estimate), expected_max_estimator, unit (what the
          intervals resample)},
      "excluding_failed"["intervals"]: {median, mean, std, iqr},
      "intervals": {median, mean, std, iqr, failure_rate}, each {estimate, ci95, unit, method}
          (ci95 None and method "cannot bound: ..." where the runs cannot bound it, with `tied`
          where they all tie: `uncertainty.intervals`; never a zero-width interval; the mean and
          std, where runs can fail, stated for any failure rate with `widened`: failed_runs.py;
          `coverage` {shape, measured, source} where its coverage at the entry's shape reaches
          below 93% over the processes measured, here and in excluding_failed: coverage.py),
      "seeds_needed": `seeds_needed` (None over several settings or < 2 scored runs),
      "variance_components": uncertainty.variance_components (None over several settings)}
    """
    tally = counts(records)
    records = runs(records)
    one_setting = len(by_setting(records)) == 1
    out: dict[str, Any] = {
        "runs": len(records),
        "failed": tally["failed"],
        "failure_kinds": failure_breakdown(records),
        "pruned": tally["pruned"],
        "errored": tally["errored"],
    }
    out["failure_rate"] = out["failed"] / len(records) if records else 0.0
    if tally["unknown"]:  # runs imported without the failure rule's baseline: no rate to state
        out["unknown"], out["failure_rate"] = tally["unknown"], None
    succeeded = intervals(records, resamples, seed, exclude_failed=True)
    for name, exclude in (("all", False), ("excluding_failed", True)):
        kept = [r for r in records if not (exclude and outcome(r) == "failed")]
        block: dict[str, Any] = dict(spread([r.get("score") for r in kept]))
        found = succeeded if exclude else intervals(records, resamples, seed, succeeded=succeeded)
        block["ci95_median"], block["ci95_mean"] = found["median"]["ci95"], found["mean"]["ci95"]
        curve = expected_max(kept, resamples=min(resamples, 1000), seed=seed, at=SHOWN)
        block["expected_max"] = {str(p["n"]): p["mean"] for p in curve}
        # Its band: the std of the max of n runs drawn from ours (the curve's +-1 std).
        block["expected_max_std"] = {str(p["n"]): p["std"] for p in curve}
        block["expected_max_ci95"] = {str(p["n"]): p["ci95"] for p in curve}
        block["expected_max_estimator"] = WITHOUT_REPLACEMENT
        block["unit"] = found["median"]["unit"]
        if exclude:
            if one_setting and records:  # the succeeded runs' own intervals: their shape's range
                flag_coverage(found, records, layout(records).design, succeeded=True)
            block["intervals"] = found
        else:
            if one_setting and records:  # the shape's coverage range, where it reaches below 93%
                flag_coverage(found, records, layout(records).design)
            out["intervals"] = found
            if tally["unknown"]:
                found["failure_rate"] = unknown_failure_rate(tally["unknown"], found["failure_rate"]["unit"])
        out[name] = block
    out["seeds_needed"] = seeds_needed(records, median=out["intervals"]["median"]) if one_setting else None
    out["variance_components"] = (
        variance_components(records, resamples, seed) if one_setting and records else None
    )
    return out


def unknown_failure_rate(unknown: int, unit: str) -> dict[str, Any]:
    """The failure-rate interval of runs whose outcome is unknown (imported without the failure
    rule's baseline): no estimate, and why, rather than a rate of 0 that no run was judged by."""
    return {
        "estimate": None,
        "ci95": None,
        "unit": unit,
        "method": f"unknown: {unknown} runs have no outcome (imported without the failure rule's baseline; "
        "give --baseline)",
    }


def seeds_needed(
    records: Sequence[TrialRecord],
    resamples: int = 2000,
    seed: int = 0,
    median: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Runs needed to pin ONE setting's median within +-0.5 and +-1 point (x100 scale), i.e. a 95%
    half-width below 0.005 / 0.01, as a LOWER BOUND: "at least m runs", at one-sided 90%
    confidence (`stacked_runs_needed`). Why a bound and not a forecast: from 3 runs the variance
    is known only up to a chi-square with 2 df, so no point forecast falls within a factor 2 of
    the truth in more than 47% of studies (the old one: 36%, median 18 where 55 were needed).
    runs_needed_estimate is the point forecast, for scale only. While our own interval (`median`,
    as computed by `intervals`) is wider than the target (have False) both are at least N + 1.

    Shape: {median_ci95_half_width, unit, runs, scaling, bound, confidence, targets: {"0.5" |
    "1": {half_width, runs_needed (at least), runs_needed_estimate, have, and on crossed grids
    seeds_per_axis_needed (at least) and seeds_per_axis_estimate}}}. None for several settings,
    fewer than 2 scored runs or no spread."""
    if len(by_setting(records)) > 1:
        return None
    median = median or median_interval(records, resamples, seed)
    if median["ci95"] is None:
        return None
    lay = layout(records)
    half = (median["ci95"][1] - median["ci95"][0]) / 2
    have_runs = int(np.isfinite(lay.grid).sum())
    n_s, crossed = lay.grid.shape[0], lay.design == "crossed"
    targets = {}
    for label, target in (("0.5", 0.005), ("1", 0.01)):
        have = bool(half <= target)
        least = 0 if have else have_runs + 1  # our own interval is still too wide: more runs
        bound, estimate = (max(int(v[0]), least) for v in stacked_runs_needed(lay, lay.grid[None], target))
        need: dict[str, Any] = {"runs_needed": bound, "runs_needed_estimate": estimate}
        if crossed:
            # A grid already as wide as the bound still needs more seeds while our interval is too wide.
            side = int(max(lay.a_count.max(), lay.c_count.max()))
            per_axis = max(math.ceil(math.sqrt(bound / n_s)), 0 if have else side + 1)
            need = {
                "runs_needed": per_axis**2 * n_s,
                "seeds_per_axis_needed": per_axis,
                "runs_needed_estimate": estimate,
                "seeds_per_axis_estimate": math.ceil(math.sqrt(estimate / n_s)),
            }
        targets[label] = {"half_width": target, **need, "have": have}
    scaling = "1/sqrt(seeds per axis), square grid" if crossed else "1/sqrt(runs)"
    return {
        "median_ci95_half_width": half,
        "unit": median["unit"],
        "runs": have_runs,
        "scaling": scaling + " (estimate); the bound: every run as independent",
        "bound": f"at least: {CONFIDENCE:.0%} one-sided confidence on the design variance",
        "confidence": CONFIDENCE,
        "targets": targets,
    }


def stacked_runs_needed(lay: Layout, grids: np.ndarray, target: float) -> tuple[np.ndarray, np.ndarray]:
    """(T,) lower bounds and (T,) point forecasts of the runs a median needs for a 95% half-width
    of `target`, for T studies of one layout (`grids` (T, S, A, C)).

    V: the design variance of our median, normal theory (`gap.our_variance`: the design terms
    of `intervals`' floor, pi/2 for the median's efficiency; skewed and collapsing runs make the
    median less efficient still, which keeps the bound low). Its lower confidence bound
    V df / chi2(0.9, df), with Satterthwaite df, and the fastest shrinkage any design allows
    (1/runs, as if every run were independent; a crossed grid's seed effects shrink slower) give
    runs >= N V_low (z / target)^2.
    Measured share of studies whose true need is at least the bound (1000 studies each): normal
    runs N = 3, 5, 10: 90%; 3 x 3 grid 9x%; 40% collapsed runs 9x%.
    The forecast: V unbounded; independent runs N V (z / target)^2, crossed grids 1/sqrt(seeds per
    axis) on a square grid (conservative: init and order effects shrink only with their seeds)."""
    variance, df = our_variance(lay, grids, "median")
    big_n = int(np.isfinite(grids[0]).sum())
    with np.errstate(all="ignore"):
        low = np.nan_to_num(variance * df / stats.chi2.ppf(CONFIDENCE, df))
    scale = (Z95 / target) ** 2
    bound = np.maximum(np.ceil(big_n * low * scale), 2)
    if lay.design == "crossed":
        side = float(np.sqrt(lay.a_count * lay.c_count).mean())
        estimate = np.maximum(np.ceil(side * variance * scale), 2) ** 2 * grids.shape[1]
    else:
        estimate = np.maximum(np.ceil(big_n * variance * scale), 2)
    return bound, estimate


def hyperparameter_importance(records: Sequence[TrialRecord], seed: int = 0) -> dict[str, Any]:
    """How much of the score variance the hyperparameters explain, and which ones.

    Shape: {"explained_fraction": f (omega^2 of a one-way ANOVA over settings: the between-setting
    share of variance, corrected for the chance spread of setting means; None when every setting
    ran once, since settings and seeds are then confounded), "omega2": the raw omega^2,
    "truncated_at_0": bool (a negative omega^2 is reported as 0), "r2": between-setting R^2
    (biased up: ~(g-1)/(N-1) by chance alone), "p_settings_differ": one-way ANOVA F test,
    "importances": fANOVA (Optuna) importances scaled to sum to f (to 1 when f is None), one per
    factor (`collinear_factors`), "factors": {factor: the parameters it stands for} where one
    stands for several, "unexplained (seeds, noise)": 1 - f, "settings", "runs"}; {} when no
    parameter varies. Seeds are not parameters: what the settings leave unexplained is theirs
    and noise's.
    """
    kept = scored(records)
    keys = sorted({k for r in kept for k in r["hparams"]} | {"size"})
    values = {k: sorted({_param(r, k) for r in kept}, key=str) for k in keys}
    varying = [k for k in keys if len(values[k]) > 1]
    if not varying or len(kept) < 4 or np.ptp([r["score"] for r in kept]) == 0:
        return {}
    groups: dict[str, list[float]] = defaultdict(list)
    for r in kept:
        groups[repr([_param(r, k) for k in varying])].append(r["score"])
    explained = explained_by_settings(list(groups.values()))
    factors = collinear_factors(kept, varying)
    levels = [{f: repr([_param(r, k) for k in members]) for f, members in factors.items()} for r in kept]
    import optuna  # here, past the early return: fANOVA imports scikit-learn and pandas (~1 s)
    from optuna.distributions import CategoricalDistribution
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    choices = {f: CategoricalDistribution(sorted({lv[f] for lv in levels})) for f in factors}
    for r, lv in zip(kept, levels, strict=True):
        study.add_trial(optuna.trial.create_trial(params=lv, distributions=choices, value=r["score"]))
    try:
        raw = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed))
    except RuntimeError:  # fANOVA finds no variance its trees can split on
        raw = {}
    f = explained["explained_fraction"]
    scale = 1.0 if f is None else f
    return {
        **explained,
        "importances": {k: scale * float(v) for k, v in raw.items()},
        "factors": {k: m for k, m in factors.items() if len(m) > 1},
        "unexplained (seeds, noise)": None if f is None else 1.0 - f,
        "settings": len(groups),
        "runs": len(kept),
    }


def collinear_factors(kept: Sequence[TrialRecord], varying: Sequence[str]) -> dict[str, list[str]]:
    """The varying parameters as factors the runs can tell apart: a parameter that another
    determines (one value of it wherever the other has one value: lr, adapter and lora_r under a
    recipe) moves with it, and no importance can split their effect, so they are one factor,
    named `recipe` where it is one of them, else by the parameter with the most values. Without
    this, fANOVA split one recipe effect over four names. {factor: its parameters}."""
    cells = {k: [_param(r, k) for r in kept] for k in varying}

    def determines(a: str, b: str) -> bool:
        seen: dict[str, Any] = {}
        return all(seen.setdefault(repr(x), y) == y for x, y in zip(cells[a], cells[b], strict=True))

    owner = {k: k for k in varying}  # union-find over "one determines the other"

    def root(k: str) -> str:
        while owner[k] != k:
            k = owner[k]
        return k

    for i, a in enumerate(varying):
        for b in varying[i + 1 :]:
            if determines(a, b) or determines(b, a):
                owner[root(b)] = root(a)
    found: dict[str, list[str]] = defaultdict(list)
    for k in varying:
        found[root(k)].append(k)
    named = {}
    for members in found.values():
        name = (
            "recipe" if "recipe" in members else max(members, key=lambda k: len({repr(v) for v in cells[k]}))
        )
        named[name] = [name, *(k for k in members if k != name)]
    return named


def explained_by_settings(groups: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Between-setting share of score variance: omega^2 = (SS_b - (g-1) MS_w) / (SS_t + MS_w),
    which, unlike R^2, is ~0 when settings do not matter however many of them ran."""
    y = np.concatenate([np.asarray(v, dtype=float) for v in groups])
    big_n, g = y.size, len(groups)
    ss_t = float(((y - y.mean()) ** 2).sum())
    ss_b = float(sum(len(v) * (np.mean(v) - y.mean()) ** 2 for v in groups))
    out = {"r2": ss_b / ss_t if ss_t > 0 else 0.0, "p_settings_differ": None}
    if big_n == g or ss_t == 0:  # one run per setting (confounded with seeds), or no variance at all
        return {"explained_fraction": None, "omega2": None, "truncated_at_0": False, **out}
    ms_w = (ss_t - ss_b) / (big_n - g)
    omega = (ss_b - (g - 1) * ms_w) / (ss_t + ms_w)
    p = float(stats.f_oneway(*groups).pvalue) if ms_w > 0 else None
    return {
        "explained_fraction": max(omega, 0.0),
        "omega2": omega,
        "truncated_at_0": omega < 0,
        **out,
        "p_settings_differ": p,
    }


def _param(record: dict[str, Any], key: str) -> Any:
    return record["size"] if key == "size" else record["hparams"].get(key)
