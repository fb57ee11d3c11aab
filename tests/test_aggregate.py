"""Aggregates across tasks (suite.stats.aggregate.across_tasks) on synthetic leaderboard entries: the
normalisation, the task-weighted IQM, the performance profile and the average probability of
improvement, cross-checked against `rliable` (Agarwal et al. 2021) where it is importable."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from suite.errors import SuiteError
from suite.stats.aggregate import aggregate, aggregate_by_size, normalisation, weighted_iqm

TASKS = {"cola": 0.0, "mrpc": 0.68, "rte": 0.53}  # task -> baseline (best constant prediction)
MEDIANS = {"cola": 59.1, "mrpc": 89.5, "rte": 70.0}  # comparable reported medians, 0-100
RUNS = 8  # per task and model: 3 x 8 = 24 runs, a multiple of 4 (rliable's IQM trims whole runs)


def _reported(value: float, comparable: bool = True, statistic: str = "median") -> dict:
    return {
        "model": "m",
        "value": value,
        "metric": "m",
        "statistic": statistic,
        "source": "paper",
        "comparable": comparable,
        "reasons": [] if comparable else ["model: other"],
    }


def _entry(
    task: str,
    model: str,
    scores,
    *,
    size=1000,
    baseline: float | None = None,
    reported: list[dict] | None = None,
    failed=None,
    higher: bool = True,
    rank: int = 1,
    recipe: str | None = None,
    eval_limit: int | None = None,
) -> dict:
    """A leaderboard entry with the fields the aggregate reads; failed runs default to those at or
    below the baseline; a score of None is a diverged (failed) run."""
    base = TASKS.get(task, 0.5) if baseline is None else baseline
    runs = []
    for i, s in enumerate(scores):
        bad = (s is None or s <= base) if failed is None else bool(failed[i])
        runs.append(
            {"key": f"{model}|{i}", "score": s, "failed": bad, "outcome": "failed" if bad else "succeeded"}
        )
    return {
        "task": task,
        "model": model,
        "size": size,
        "rank": rank,
        "metric": "m",
        "higher_is_better": higher,
        "setting": {"lr": 2e-5, **({"recipe": recipe} if recipe else {})},
        "baseline": {"value": base, "rule": "best constant prediction on the evaluation set"},
        "reported": reported if reported is not None else [_reported(MEDIANS.get(task, 80.0))],
        "rank_group": {"task": task, "size": size, "metric": "m", "eval_limit": eval_limit},
        "runs": runs,
    }


def _fixture(shifts: dict[str, float], seed: int = 21) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Entries of models on the three tasks (scores around a shared level plus the model's
    shift, some runs collapsed to the baseline), and their normalised runs x tasks matrices."""
    rng = np.random.default_rng(seed)
    entries, matrices = [], {}
    for model, shift in shifts.items():
        columns = []
        for task, base in TASKS.items():
            one = MEDIANS[task] / 100
            level = base + (one - base) * (0.8 + shift)
            x = level + rng.normal(0, 0.25 * (one - base), RUNS)
            x[rng.random(RUNS) < 0.2] = base  # collapsed runs: the constant prediction
            x = np.round(x, 4)
            entries.append(_entry(task, model, x.tolist()))
            columns.append((x - base) / (one - base))
        matrices[model] = np.column_stack(columns)
    return entries, matrices


@pytest.fixture(scope="module")
def fixture() -> tuple[list[dict], dict[str, np.ndarray]]:
    return _fixture({"base": 0.0, "better": 0.15, "worse": -0.2})


@pytest.fixture(scope="module")
def result(fixture) -> dict:
    entries, _ = fixture
    return aggregate(entries, reference="base", nboot=2000, seed=0)


@pytest.fixture(scope="module")
def percentile(fixture) -> dict:
    """The same aggregate with rliable's own (percentile) intervals."""
    entries, _ = fixture
    return aggregate(entries, reference="base", nboot=2000, seed=0, intervals="percentile")


# --- rliable cross-checks ---------------------------------------------------------------------


def _rliable_metrics():
    pytest.importorskip("rliable")
    from rliable import metrics

    return metrics


def _rliable_library():
    """rliable's bootstrap, or a skip: rliable 1.2.0 pins arch < 8; arch 7.x does not import with
    pandas 3 and arch 8 no longer takes rliable's `random_state`."""
    pytest.importorskip("rliable")
    try:
        from rliable import library

        library.get_interval_estimates({"x": np.ones((4, 2))}, lambda x: np.array([x.mean()]), reps=10)
    except Exception as err:  # noqa: BLE001 (any incompatibility of its dependencies)
        pytest.skip(f"rliable's bootstrap does not run here: {type(err).__name__}: {err}")
    return library


def test_point_estimates_match_rliable(fixture, result) -> None:
    metrics = _rliable_metrics()
    _, matrices = fixture
    for model, matrix in matrices.items():
        group = result["groups"][model]
        assert group["normalisation"] == dict.fromkeys(TASKS, "reported median")
        assert group["iqm"]["estimate"] == pytest.approx(metrics.aggregate_iqm(matrix), rel=1e-12, abs=1e-12)
        taus = np.array(group["profile"]["taus"])
        theirs = np.array([np.mean(matrix > tau) for tau in taus])  # rliable's run_score_deviation
        np.testing.assert_allclose(group["profile"]["share"], theirs, rtol=0, atol=1e-12)
    for model in ("better", "worse"):
        theirs = metrics.probability_of_improvement(matrices[model], matrices["base"])
        assert result["improvement"][model]["estimate"] == pytest.approx(theirs, abs=1e-12)
        assert result["improvement"][model]["vs"] == "base"


def test_profile_point_estimate_matches_rliable_library(fixture, result) -> None:
    library = _rliable_library()
    _, matrices = fixture
    taus = np.array(result["groups"]["base"]["profile"]["taus"])
    assert np.all(
        library.score_distributions(matrices["base"], taus) == result["groups"]["base"]["profile"]["share"]
    )


def _close(ours: list[float], theirs: np.ndarray, tolerance: float) -> None:
    np.testing.assert_allclose(ours, np.ravel(theirs), rtol=0, atol=tolerance)


def test_intervals_match_rliable(fixture, percentile) -> None:
    """With `intervals="percentile"`, rliable's method: same data, different random draws, the
    intervals agree within the Monte Carlo error (over 10 seeds of both sides: IQM endpoints differ
    by 0.008 on average, at most 0.025, of widths ~0.38; improvement at most 0.013 of ~0.31;
    profile bands at most one step, 1/24). The default widens them (see the coverage tests)."""
    result = percentile
    library = _rliable_library()
    metrics = _rliable_metrics()
    _, matrices = fixture
    np.random.seed(0)  # rliable's StratifiedBootstrap draws from numpy's global state
    _, iqm = library.get_interval_estimates(
        matrices, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=5000
    )
    for model in matrices:
        ours = result["groups"][model]["iqm"]["interval"]
        assert ours[1] - ours[0] > 0.1
        _close(ours, iqm[model], 0.04)

    pairs = {m: [matrices[m], matrices["base"]] for m in ("better", "worse")}
    _, poi = library.get_interval_estimates(
        pairs, lambda x, y: np.array([metrics.probability_of_improvement(x, y)]), reps=2000
    )
    for model in pairs:
        _close(result["improvement"][model]["interval"], poi[model], 0.04)

    every = slice(None, None, 4)  # a quarter of the grid: rliable's profile bootstrap is slow
    taus = np.array(result["groups"]["base"]["profile"]["taus"])[every]
    _, bands = library.create_performance_profile(matrices, taus, reps=2000)
    for model in matrices:
        profile = result["groups"][model]["profile"]
        # a share moves in steps of 1/24 runs: a percentile may sit one step off
        _close(profile["lower"][every], bands[model][0], 1 / 24 + 0.02)
        _close(profile["upper"][every], bands[model][1], 1 / 24 + 0.02)


# --- the method itself (no rliable needed) -----------------------------------------------------


def test_iqm_is_scipy_trim_mean_at_equal_weights() -> None:

    x = np.random.default_rng(1).normal(size=(5, 24))
    np.testing.assert_allclose(weighted_iqm(x, np.ones(24)), stats.trim_mean(x, 0.25, axis=1), atol=1e-12)
    # N = 10: a quarter of the weight is 2.5 runs; the edge runs count half
    y = np.arange(10.0)
    assert weighted_iqm(y, np.ones(10)) == pytest.approx((0.5 * 2 + 3 + 4 + 5 + 6 + 0.5 * 7) / 5)


def test_normalisation_maps_baseline_to_zero_and_reported_median_to_one() -> None:
    entries = []
    for task, base in TASKS.items():
        entries.append(_entry(task, "at-baseline", [base] * 4))
        entries.append(_entry(task, "at-median", [MEDIANS[task] / 100] * 4))
        entries.append(_entry(task, "halfway", [(base + MEDIANS[task] / 100) / 2] * 4))
    out = aggregate(entries, nboot=50)
    for task in TASKS:
        scale = out["normalisation"][task]
        assert scale["kind"] == "reported median"
        assert scale["zero"] == TASKS[task] and scale["one"] == pytest.approx(MEDIANS[task] / 100)
    for model, level in (("at-baseline", 0.0), ("at-median", 1.0), ("halfway", 0.5)):
        group = out["groups"][model]
        assert group["iqm"]["estimate"] == pytest.approx(level)
        assert group["iqm"]["interval"] is None  # 12 tied runs cannot bound a 13th: no [level, level]
    # tau = 0: the share of runs better than the constant prediction (1 - the failure rate)
    at_zero = out["groups"]["at-baseline"]["profile"]["taus"].index(0.0)
    assert out["groups"]["at-baseline"]["profile"]["share"][at_zero] == 0.0
    assert out["groups"]["at-baseline"]["failure_rate"] == 1.0
    assert out["groups"]["halfway"]["profile"]["share"][at_zero] == 1.0
    assert out["note"] == ""


def test_widened_intervals_hold_the_percentile_ones_about_the_same_estimates(result, percentile) -> None:
    """Only the interval method differs: the same point estimates (rliable's), and each widened
    interval contains rliable's percentile interval from the same replicates."""
    assert result["intervals"] == "widened" and percentile["intervals"] == "percentile"
    for name, group in result["groups"].items():
        theirs = percentile["groups"][name]
        assert group["iqm"]["estimate"] == theirs["iqm"]["estimate"]
        assert group["profile"]["share"] == theirs["profile"]["share"]
        low, high = group["iqm"]["interval"]
        assert low < theirs["iqm"]["interval"][0] < theirs["iqm"]["interval"][1] < high
        inside = np.array(group["profile"]["lower"]) <= np.array(theirs["profile"]["lower"]) + 1e-12
        assert inside.all() and (np.array(group["profile"]["upper"]) >= theirs["profile"]["upper"]).all()
    for name, better in result["improvement"].items():
        theirs = percentile["improvement"][name]
        assert better["estimate"] == theirs["estimate"]
        (low, high), (inner_low, inner_high) = better["interval"], theirs["interval"]
        assert low <= inner_low <= inner_high <= high
    with pytest.raises(SuiteError, match="intervals must be one of"):
        aggregate([], intervals="bca")


def test_profile_at_zero_is_one_minus_failure_rate(fixture, result) -> None:
    for group in result["groups"].values():
        at_zero = group["profile"]["taus"].index(0.0)
        assert group["profile"]["share"][at_zero] == pytest.approx(1 - group["failure_rate"])
        assert group["profile"]["lower"][at_zero] <= group["profile"]["share"][at_zero]
        assert group["profile"]["share"][at_zero] <= group["profile"]["upper"][at_zero]
        assert np.all(np.diff(group["profile"]["share"]) <= 0)  # a survival curve


def test_which_reported_median() -> None:
    """The best comparable median; not a mean, not a non-comparable one; raw (said so) without one."""
    reported = [
        _reported(59.1),
        _reported(64.7),
        _reported(90.0, comparable=False),
        _reported(80.0, statistic="mean"),
    ]
    scale = normalisation("cola", [_entry("cola", "a", [0.5], reported=reported)])
    assert scale["kind"] == "reported median" and scale["one"] == pytest.approx(0.647)
    assert scale["reference"]["value"] == 64.7

    raw = normalisation("cola", [_entry("cola", "a", [0.5], reported=[_reported(80.0, statistic="mean")])])
    assert raw["kind"] == "raw" and "no comparable reported median" in raw["why"]
    below = normalisation("rte", [_entry("rte", "a", [0.6], reported=[_reported(47.3)], baseline=0.53)])
    assert below["kind"] == "raw" and "not better than the baseline" in below["why"]
    perfect = normalisation("rte", [_entry("rte", "a", [0.6], reported=[])], fallback="perfect")
    assert perfect["kind"] == "perfect score" and (perfect["zero"], perfect["one"]) == (0.53, 1.0)
    lower = normalisation("loss", [_entry("loss", "a", [0.3], reported=[], higher=False)])
    assert lower["kind"] == "raw (negated: lower is better)" and lower["direction"] == -1

    entries = [_entry("cola", "a", [0.5, 0.6]), _entry("wnli", "a", [0.55, 0.6], reported=[])]
    out = aggregate(entries, nboot=0)
    assert out["groups"]["a"]["normalisation"] == {"cola": "reported median", "wnli": "raw"}
    assert "scales: reported median: cola; raw: wnli" in out["note"] and "not the baseline" in out["note"]
    assert out["groups"]["a"]["iqm"]["interval"] is None


def test_better_on_every_task_has_improvement_above_half() -> None:
    entries, _ = _fixture({"base": 0.0, "better": 0.6}, seed=5)
    out = aggregate(entries, reference="base", nboot=1000, seed=3)
    better = out["improvement"]["better"]
    assert better["estimate"] > 0.5 and better["interval"][0] > 0.5
    assert set(better["per_task"]) == set(TASKS) and better["tasks"] == sorted(TASKS)
    assert out["groups"]["better"]["iqm"]["interval"][0] > out["groups"]["base"]["iqm"]["interval"][1]


def test_tasks_weigh_the_same_whatever_their_runs() -> None:
    """4 runs at the reported median on one task, 12 at the baseline on another: half and half."""
    entries = [_entry("cola", "a", [0.591] * 4), _entry("rte", "a", [0.53] * 12)]
    group = aggregate(entries, nboot=200)["groups"]["a"]
    assert group["iqm"]["estimate"] == pytest.approx(0.5)
    assert group["profile"]["share"][group["profile"]["taus"].index(0.0)] == pytest.approx(0.5)
    assert group["runs"] == {"cola": 4, "rte": 12} and group["failure_rate"] == pytest.approx(0.5)


def test_diverged_runs_count_as_the_baseline_and_errored_trials_not_at_all() -> None:
    entry = _entry("cola", "a", [0.591, 0.591, None, 0.591])
    entry["runs"].append({"key": "x", "score": None, "failed": False, "outcome": "errored"})
    out = aggregate([entry, _entry("rte", "a", [0.7] * 4)], nboot=0)
    group = out["groups"]["a"]
    assert group["runs"] == {"cola": 4, "rte": 4} and group["diverged"] == {"cola": 1}
    assert group["failure_rate"] == pytest.approx(0.125)
    assert group["profile"]["share"][group["profile"]["taus"].index(0.0)] == pytest.approx(0.875)


def test_sizes_are_never_pooled() -> None:
    entries = [
        _entry("cola", "a", [0.5, 0.55], size=100),
        _entry("rte", "a", [0.6, 0.62], size=100),
        _entry("cola", "a", [0.58, 0.6], size=1000),
        _entry("rte", "a", [0.65, 0.66], size=1000),
        _entry("mrpc", "a", [0.8, 0.82], size="full"),
    ]
    with pytest.raises(SuiteError, match="sizes are never pooled"):
        aggregate(entries)
    out = aggregate_by_size(entries, nboot=50)
    assert list(out) == ["100", "1000"]  # full: one task only, nothing to aggregate across
    assert out["100"]["size"] == {"cola": 100, "rte": 100}


def test_one_rank_group_per_task() -> None:
    entries = [
        _entry("cola", "a", [0.5]),
        _entry("cola", "b", [0.5], eval_limit=200),
        _entry("rte", "a", [0.6]),
    ]
    with pytest.raises(SuiteError, match="rank group"):
        aggregate(entries)


def test_settings_of_a_group() -> None:
    entries = [
        _entry("cola", "a", [0.591] * 4, recipe="default", rank=2),
        _entry("cola", "a", [0.3] * 4, recipe="stable", rank=1),
        _entry("rte", "a", [0.7] * 4, recipe="default"),
        _entry("rte", "a", [0.7] * 4, recipe="stable"),
    ]
    with pytest.raises(SuiteError, match="entries \\(settings\\) on task cola"):
        aggregate(entries)
    best = aggregate(entries, settings="best", nboot=0)
    assert best["groups"]["a"]["runs"] == {"cola": 4, "rte": 4} and "optimistic" in best["note"]
    assert aggregate(entries, settings="pool", nboot=0)["groups"]["a"]["runs"] == {"cola": 8, "rte": 8}
    recipes = aggregate(entries, by="recipe", reference="default", nboot=200)
    assert set(recipes["groups"]) == {"default", "stable"}
    assert recipes["improvement"]["stable"]["per_task"]["cola"] == 0.0
    assert recipes["improvement"]["stable"]["per_task"]["rte"] == 0.5  # ties count a half
    both = aggregate(entries, by="model+recipe", nboot=0)
    assert set(both["groups"]) == {"a / default", "a / stable"}


def test_reference_must_be_a_group_and_seeds_are_stable(fixture) -> None:
    entries, _ = fixture
    with pytest.raises(SuiteError, match="reference 'nope'"):
        aggregate(entries, reference="nope", nboot=0)
    one = aggregate([e for e in entries if e["model"] != "worse"], reference="base", nboot=300, seed=4)
    two = aggregate(entries, reference="base", nboot=300, seed=4)
    # a group's interval does not move when another group joins
    assert one["groups"]["better"]["iqm"] == two["groups"]["better"]["iqm"]
    assert one["improvement"]["better"] == two["improvement"]["better"]


def test_incomplete_group_is_flagged() -> None:
    entries = [_entry("cola", "a", [0.5] * 4), _entry("rte", "a", [0.6] * 4), _entry("rte", "b", [0.7] * 4)]
    out = aggregate(entries, reference="a", nboot=100)
    assert out["groups"]["b"]["complete"] is False and "not on every task" in out["note"]
    assert out["improvement"]["b"]["tasks"] == ["rte"]


def test_the_leaderboard_aggregates_across_tasks_and_the_report_draws_the_profile() -> None:
    """`suite leaderboard` over several tasks: one aggregate per shared size (JSON-ready), else one
    over each task's single size; one task: none. The report's figure draws each model's profile."""
    import json

    import matplotlib.pyplot as plt

    from suite.outputs.leaderboard import cross_task
    from suite.outputs.plots import performance_profile

    entries, _ = _fixture({"base": 0.0, "better": 0.05})
    found = cross_task(entries)
    assert list(found) == ["1000"] and set(found["1000"]["groups"]) == {"base", "better"}
    assert json.loads(json.dumps(found)) == found  # plain JSON, no arrays
    figure = performance_profile(found["1000"])
    assert isinstance(figure, plt.Figure) and len(figure.axes[0].lines) >= 2
    plt.close(figure)
    own = {"cola": 1000, "mrpc": 200, "rte": 100}  # no size shared by two tasks
    apart = [
        {**e, "size": own[e["task"]], "rank_group": {**e["rank_group"], "size": own[e["task"]]}}
        for e in entries
    ]
    assert list(cross_task(apart)) == ["each task's own size"]
    assert cross_task([e for e in entries if e["task"] == "rte"]) is None
    assert performance_profile(None) == "one task: nothing to aggregate across tasks"


def test_the_leaderboard_names_its_reference_for_the_probability_of_improvement() -> None:
    from suite.errors import SuiteError
    from suite.outputs.leaderboard import cross_task, format_aggregates

    entries, _ = _fixture({"base": 0.0, "better": 0.5})
    found = cross_task(entries, reference="base")
    better = found["1000"]["improvement"]["better"]
    assert better["vs"] == "base" and better["estimate"] > 0.5 and better["interval"][0] > 0.5
    lines = format_aggregates(found)
    assert any(line.startswith("  P(better > base) averaged over tasks:") for line in lines)
    with pytest.raises(SuiteError, match="--reference"):
        cross_task(entries, reference="nobody")
