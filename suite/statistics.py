"""Statistics of a study's scores (numpy/scipy only; no plotting). Definitions in DESIGN.md s4.

Every interval here is *across seeds/runs*: it says how much a re-run of the study would move,
not the per-example sampling error of one run's dev score. The design-aware machinery (which
units a bootstrap resamples, intervals, variance components) is in suite/uncertainty.py.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import gammaln

from suite.components import variance_components
from suite.records import counts, outcome, runs
from suite.uncertainty import by_setting, intervals, layout, predictive_draws

WITHOUT_REPLACEMENT = "unbiased, without replacement (Tang et al. 2020)"
WITH_REPLACEMENT = "with replacement (Dodge et al. 2019)"


def _finite(scores: Sequence[float | None]) -> np.ndarray:
    return np.asarray([s for s in scores if s is not None and np.isfinite(s)], dtype=float)


def spread(scores: Sequence[float | None]) -> dict[str, float | int]:
    """n, median, IQR, mean, std (ddof=1), min, max of the finite scores."""
    x = _finite(scores)
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


def bootstrap_ci(
    scores: Sequence[float | None],
    statistic: str = "median",
    level: float = 0.95,
    seed: int = 0,
    resamples: int = 5000,
) -> tuple[float, float] | None:
    """Seeded percentile-bootstrap CI of the median or mean over exchangeable runs (one subsample,
    independent seeds). For crossed grids use suite.uncertainty.intervals, which resamples seeds."""
    x = _finite(scores)
    if x.size < 2:
        return None
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    fn = {"median": np.median, "mean": np.mean}[statistic]
    result = stats.bootstrap(
        (x,),
        fn,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _tang_weights(big_n: int, n: int) -> np.ndarray:
    """P(the max of n runs drawn without replacement from N is the i-th smallest) = C(i-1, n-1) / C(N, n)."""
    i = np.arange(1, big_n + 1)
    w = np.zeros(big_n)
    ok = i >= n
    log_c = gammaln(big_n + 1) - gammaln(n + 1) - gammaln(big_n - n + 1)
    w[ok] = np.exp(gammaln(i[ok]) - gammaln(n) - gammaln(i[ok] - n + 1) - log_c)
    return w


def _dodge_weights(big_n: int, n: int) -> np.ndarray:
    """P(the max of n runs drawn with replacement from N is the i-th smallest) = (i/N)^n - ((i-1)/N)^n."""
    i = np.arange(1, big_n + 1)
    return (i / big_n) ** n - ((i - 1) / big_n) ** n


def expected_max(
    scores: Sequence[float | None], n_max: int | None = None, method: str = "auto"
) -> list[dict[str, Any]]:
    """Expected maximum validation performance of n = 1..n_max runs (default N, the runs we
    have), with its std (the band) and the estimator used, per point {n, mean, std, estimator}.

    method "without_replacement" (Tang et al. 2020, arXiv 2004.13705): sum_i v(i) C(i-1, n-1) /
    C(N, n), the exact mean over all n-subsets of our runs: unbiased for the expected max of n
    fresh runs, defined for n <= N only. "with_replacement" (Dodge et al. 2019, arXiv
    1909.03004): sum_i v(i) ((i/N)^n - ((i-1)/N)^n); it redraws the same runs, so it is biased
    low, but it extends beyond N. "auto": the unbiased one up to N, Dodge's beyond (labelled).
    v sorted ascending; at n = 1 both are the mean, and neither exceeds our max.
    """
    v = np.sort(_finite(scores))
    big_n = v.size
    out: list[dict[str, Any]] = []
    for n in range(1, (big_n if n_max is None else n_max) + 1):
        unbiased = method == "without_replacement" or (method == "auto" and n <= big_n)
        if big_n == 0 or (unbiased and n > big_n):
            break
        weights = _tang_weights(big_n, n) if unbiased else _dodge_weights(big_n, n)
        mean = float(weights @ v)
        var = max(float(weights @ v**2) - mean**2, 0.0)
        out.append(
            {
                "n": n,
                "mean": mean,
                "std": var**0.5,
                "estimator": WITHOUT_REPLACEMENT if unbiased else WITH_REPLACEMENT,
            }
        )
    return out


def failure_breakdown(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Failed runs by kind: trivial baseline, threshold, divergence (errored trials are not runs)."""
    kinds: dict[str, int] = defaultdict(int)
    for r in runs(records):
        if outcome(r) == "failed":
            kinds[r.get("failure") or "baseline"] += 1
    return dict(kinds)


def summarize(records: Sequence[dict[str, Any]], seed: int = 0, resamples: int = 2000) -> dict[str, Any]:
    """Spread, intervals and expected max over the runs, failed runs included (as scored; a
    diverged run has no score) and excluded. Errored and pruned trials are not runs: counted
    apart here, and nowhere else. Intervals resample the units of the seed design, per setting.

    Shape: {runs, failed, failure_rate, failure_kinds, pruned, errored,
      "all" | "excluding_failed": {n, median, iqr, mean, std, min, max, ci95_median, ci95_mean,
          expected_max: {"1"|"5"|"10"|"20" (<= n): value}, expected_max_std (its band),
          expected_max_estimator, unit (what the intervals resample)},
      "excluding_failed"["intervals"]: {median, mean, std, iqr},
      "intervals": {median, mean, std, iqr, failure_rate}, each {estimate, ci95, unit, method},
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
    for name, exclude in (("all", False), ("excluding_failed", True)):
        values = [r.get("score") for r in records if not (exclude and outcome(r) == "failed")]
        block: dict[str, Any] = dict(spread(values))
        found = intervals(records, resamples, seed, exclude_failed=exclude)
        block["ci95_median"], block["ci95_mean"] = found["median"]["ci95"], found["mean"]["ci95"]
        curve = expected_max(values)
        block["expected_max"] = {str(p["n"]): p["mean"] for p in curve if p["n"] in (1, 5, 10, 20)}
        # Its band: the std of the max of n runs drawn from ours (the curve's +-1 std).
        block["expected_max_std"] = {str(p["n"]): p["std"] for p in curve if p["n"] in (1, 5, 10, 20)}
        block["expected_max_estimator"] = WITHOUT_REPLACEMENT
        block["unit"] = found["median"]["unit"]
        if exclude:
            block["intervals"] = found
        else:
            out["intervals"] = found
        out[name] = block
    out["seeds_needed"] = seeds_needed(records, median=out["intervals"]["median"]) if one_setting else None
    out["variance_components"] = (
        variance_components(records, resamples, seed) if one_setting and records else None
    )
    return out


def seeds_needed(
    records: Sequence[dict[str, Any]],
    resamples: int = 2000,
    seed: int = 0,
    median: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Runs needed to pin ONE setting's median within +-0.5 and +-1 point (x100 scale), i.e. a 95%
    half-width below 0.005 / 0.01, extrapolated from the current bootstrap half-width h (before
    the few-seed widening of `intervals`, which fades as seeds are added).

    Independent runs: h ~ 1/sqrt(runs). Crossed grids: h ~ 1/sqrt(seeds per axis) on a square
    grid, which is conservative: the init and order effects average out only over their own
    seeds, so runs = seeds^2 buy less than independent runs would. Subsample seeds stay as they
    are (their effect does not shrink with more init or order seeds). None for several settings
    or fewer than 2 scored runs. `median`: an interval already computed by `intervals`."""
    if len(by_setting(records)) > 1:
        return None
    median = median or intervals(records, resamples, seed)["median"]
    if median["ci95"] is None:
        return None
    lay = layout(records)
    n = int(np.isfinite(lay.grid).sum())
    half = (median["ci95"][1] - median["ci95"][0]) / 2 / median.get("widening", 1.0)
    n_s = lay.grid.shape[0]
    side = float(np.sqrt(lay.a_count * lay.c_count).mean())
    targets = {}
    for label, target in (("0.5", 0.005), ("1", 0.01)):
        factor = (half / target) ** 2
        if lay.design == "crossed":
            per_axis = max(math.ceil(side * factor), 2)
            need = {"runs_needed": per_axis**2 * n_s, "seeds_per_axis_needed": per_axis}
        else:
            need = {"runs_needed": max(math.ceil(n * factor), 2)}
        targets[label] = {"half_width": target, **need, "have": bool(half <= target)}
    scaling = "1/sqrt(seeds per axis), square grid" if lay.design == "crossed" else "1/sqrt(runs)"
    return {
        "median_ci95_half_width": half,
        "unit": median["unit"],
        "runs": n,
        "scaling": scaling,
        "targets": targets,
    }


def gap_to_reported(
    records_or_scores: Sequence[dict[str, Any]] | Sequence[float | None],
    reported: float,
    statistic: str,
    n_runs: int | None = None,
    seed: int = 0,
    resamples: int = 4000,
) -> dict[str, Any]:
    """A reported number (0-100 scale) against ours (natural scale, x100 here), like for like
    (DESIGN.md s4), never against the CI of our N-run median (it shrinks with N):
    - median or mean of k runs: against that statistic of k runs drawn from ours
      (`uncertainty.predictive_draws`: design-aware, our own uncertainty included);
    - max of k runs: against our expected max at k (`expected_max`, estimator named), with an
      exact rank test: under exchangeability P(max of k new runs < our j+1-th smallest) =
      C(j + k, k) / C(N + k, k) (a bootstrap cannot reach above our largest run);
    - a single run (or a test-server score): the same rank test at k = 1.
    Pass the runs (records) of one setting for the design-aware draw; plain scores are taken as
    independent runs. k unknown (n_runs None) -> no same-n comparison, and the note says so.

    Shape: {statistic, k, n, reported, our_value, gap (ours - reported), percentile (of the
    reported value in the reference), p_two_sided (2 min(P(<=), P(>=)), capped at 1), reference
    (what it was compared with), estimator (max only), p_single_run_below {"1", "3"} (share of
    our runs more than 1 or 3 points below it), note (when no comparison was made)}.
    """
    records = [r if isinstance(r, dict) else {"score": r} for r in records_or_scores]
    x = 100.0 * _finite([r.get("score") for r in records])
    k = 1 if statistic in ("single", "test_server") else n_runs
    out: dict[str, Any] = {"statistic": statistic, "k": k, "n": int(x.size), "reported": reported}
    if x.size == 0:
        return {**out, "note": "no scored runs"}
    out["p_single_run_below"] = {str(d): float(np.mean(x < reported - d)) for d in (1, 3)}
    out["percentile"] = out["p_two_sided"] = out["reference"] = None
    if statistic in ("median", "mean"):
        out["our_value"] = float(np.median(x) if statistic == "median" else np.mean(x))
    elif statistic in ("single", "test_server"):
        out["our_value"] = float(np.median(x))  # a typical single run of ours
    elif statistic == "max" and k is not None:
        point = expected_max(x / 100.0, n_max=k)[-1]
        out["our_value"], out["estimator"] = 100.0 * point["mean"], point["estimator"]
    elif statistic != "max":
        return {**out, "note": f"statistic {statistic!r} has no like-for-like comparison"}
    if k is None:
        out["note"] = f"the number of runs behind the reported {statistic} is unknown: no same-n comparison"
    elif statistic in ("median", "mean"):
        draws = 100.0 * predictive_draws(records, k, statistic, resamples, seed)
        draws = draws[np.isfinite(draws)]
        out["percentile"] = float(100 * (np.mean(draws < reported) + 0.5 * np.mean(draws == reported)))
        le, ge = (draws <= reported).sum(), (draws >= reported).sum()
        out["p_two_sided"] = float(min(1.0, 2 * min(le + 1, ge + 1) / (draws.size + 1)))
        out["reference"] = f"{statistic} of {k} runs drawn from ours (design bootstrap, predictive)"
    else:
        total = math.comb(x.size + k, k)
        p_le = math.comb(int((x <= reported).sum()) + k, k) / total
        p_ge = 1 - math.comb(int((x < reported).sum()) + k - 1, k) / total
        out["percentile"] = float(100 * (p_le + 1 - p_ge) / 2)
        out["p_two_sided"] = float(min(1.0, 2 * min(p_le, p_ge)))
        what = "one run" if k == 1 else f"the max of {k} runs"
        out["reference"] = f"{what} exchangeable with ours (exact rank test; ignores the seed design)"
    if "our_value" in out:
        out["gap"] = out["our_value"] - reported
    return out


def hyperparameter_importance(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """How much of the score variance the hyperparameters explain, and which ones.

    Shape: {"explained_fraction": f (omega^2 of a one-way ANOVA over settings: the between-setting
    share of variance, corrected for the chance spread of setting means; None when every setting
    ran once, since settings and seeds are then confounded), "omega2": the raw omega^2,
    "truncated_at_0": bool (a negative omega^2 is reported as 0), "r2": between-setting R^2
    (biased up: ~(g-1)/(N-1) by chance alone), "p_settings_differ": one-way ANOVA F test,
    "importances": fANOVA (Optuna) importances scaled to sum to f (to 1 when f is None),
    "unexplained (seeds, noise)": 1 - f, "settings", "runs"}; {} when no parameter varies.
    Seeds are not parameters: what the settings leave unexplained is theirs and noise's.
    """
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    scored = [r for r in records if r.get("score") is not None and np.isfinite(r["score"])]
    keys = sorted({k for r in scored for k in r["hparams"]} | {"size"})
    values = {k: sorted({_param(r, k) for r in scored}, key=str) for k in keys}
    varying = [k for k in keys if len(values[k]) > 1]
    if not varying or len(scored) < 4 or np.ptp([r["score"] for r in scored]) == 0:
        return {}
    groups: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        groups[repr([_param(r, k) for k in varying])].append(r["score"])
    explained = explained_by_settings(list(groups.values()))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for r in scored:
        study.add_trial(
            optuna.trial.create_trial(
                params={k: _param(r, k) for k in varying},
                distributions={k: CategoricalDistribution(values[k]) for k in varying},
                value=r["score"],
            )
        )
    try:
        raw = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed))
    except RuntimeError:  # fANOVA finds no variance its trees can split on
        raw = {}
    f = explained["explained_fraction"]
    scale = 1.0 if f is None else f
    return {
        **explained,
        "importances": {k: scale * float(v) for k, v in raw.items()},
        "unexplained (seeds, noise)": None if f is None else 1.0 - f,
        "settings": len(groups),
        "runs": len(scored),
    }


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
