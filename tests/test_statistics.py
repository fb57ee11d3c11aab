"""Statistics checked against brute force and synthetic data with known answers."""

import math

import numpy as np
import pytest
from scipy import stats

from suite.stats.estimates import (
    expected_max,
    explained_by_settings,
    gap_to_reported,
    hyperparameter_importance,
    seeds_needed,
    spread,
    summarize,
)
from suite.stats.estimates.expected_maximum import stacked_ci
from suite.stats.estimates.summary import stacked_runs_needed
from tests.designs import grid_records
from tests.test_uncertainty import covered, draw_runs, studies


def test_expected_max_matches_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(70, 5, size=25)
    curve = expected_max(scores, method="with_replacement")
    for n in (1, 3, 10, 25):
        draws = rng.choice(scores, size=(100_000, n), replace=True).max(axis=1)
        assert curve[n - 1]["mean"] == pytest.approx(draws.mean(), abs=0.05)
        assert curve[n - 1]["std"] == pytest.approx(draws.std(), abs=0.05)


def test_expected_max_at_one_is_the_mean_and_never_above_the_max() -> None:
    scores = [0.5, 0.9, 0.7, 0.7, 0.1]
    for method in ("with_replacement", "without_replacement", "auto"):
        curve = expected_max(scores, n_max=5, method=method)
        assert curve[0]["mean"] == pytest.approx(np.mean(scores))
        assert all(p["mean"] <= max(scores) + 1e-12 for p in curve)
        assert all(a["mean"] <= b["mean"] + 1e-12 for a, b in zip(curve, curve[1:], strict=False))
    # unbiased: the max of all N runs is our max; Dodge's redraws runs and stays below it
    assert expected_max(scores)[-1]["mean"] == pytest.approx(0.9)
    assert expected_max(scores, method="with_replacement")[-1]["mean"] < 0.9
    assert (
        len(expected_max(scores, n_max=8)) == 8
        and len(expected_max(scores, n_max=8, method="without_replacement")) == 5
    )


def test_failures_are_counted_and_reported_both_ways() -> None:
    records = [
        {"score": 0.80, "outcome": "succeeded"},
        {"score": 0.78, "outcome": "succeeded"},
        {"score": 0.52, "outcome": "failed", "failure": "baseline"},
        {"score": None, "outcome": "failed", "failure": "diverged"},
        {"score": None, "outcome": "errored", "reason": "error: RuntimeError: boom (x.py:1)"},
        {"score": None, "outcome": "pruned", "last_score": 0.9},
    ]
    s = summarize(records)
    # The crash and the pruned trial are not runs: counted apart, never in the failure rate.
    assert s["runs"] == 4 and s["failed"] == 2 and s["failure_rate"] == pytest.approx(0.5)
    assert s["errored"] == 1 and s["pruned"] == 1
    assert s["failure_kinds"] == {"baseline": 1, "diverged": 1}
    assert s["all"]["n"] == 3 and s["all"]["min"] == pytest.approx(0.52)
    assert s["excluding_failed"]["n"] == 2 and s["excluding_failed"]["min"] == pytest.approx(0.78)


def test_spread_by_hand() -> None:
    s = spread([1.0, 2.0, 3.0, 4.0, None, float("nan")])
    assert s == {
        "n": 4,
        "median": 2.5,
        "iqr": 1.5,
        "mean": 2.5,
        "std": pytest.approx(1.2909944),
        "min": 1.0,
        "max": 4.0,
    }


def test_gap_to_reported() -> None:
    scores = [0.60, 0.65, 0.70, 0.75, 0.80]
    single = gap_to_reported(scores, 72.0, "single")
    assert single["k"] == 1 and single["p_single_run_below"] == {"1": 0.6, "3": 0.4}
    # rank test: 3 of 5 at or below 72 -> P(<=) = 4/6, 2 of 5 at or above -> P(>=) = 3/6; above
    # our median, where 5 runs can never give p < 0.05 (smallest 2/6): no p, and the runs needed
    assert single["percentile"] == pytest.approx(100 * (4 / 6 + 1 - 3 / 6) / 2)
    assert single["p_two_sided"] is None and single["min_p"] == pytest.approx(2 / 6)
    assert single["note"] == "cannot decide with 5 runs; needs at least 39" and single["direction"] == "above"
    assert single["our_value"] == pytest.approx(70.0) and single["gap"] == pytest.approx(-2.0)
    median = gap_to_reported(scores, 72.0, "median", n_runs=5)
    assert median["k"] == 5 and 0.2 < median["p_two_sided"] <= 1 and 30 < median["percentile"] < 90
    assert "median of 5 runs" in median["reference"]
    assert gap_to_reported(scores, 95.0, "median", n_runs=5)["p_two_sided"] < 0.05
    assert gap_to_reported(scores, 72.0, "median")["k"] is None
    best = gap_to_reported(scores, 80.0, "max", n_runs=3)
    assert best["our_value"] == pytest.approx(100 * expected_max(scores)[2]["mean"])
    assert best["estimator"].startswith("unbiased")
    beyond = gap_to_reported(scores, 80.0, "max", n_runs=9)  # more runs than ours: our max, a bound
    assert beyond["estimator"].startswith("lower bound") and beyond["our_value"] == pytest.approx(80.0)
    assert beyond["our_value_is"].startswith("a lower bound")
    assert "note" in gap_to_reported(scores, 80.0, "range")


def test_importance_finds_the_parameter_that_matters() -> None:
    rng = np.random.default_rng(0)
    records = []
    for lr in (1e-5, 3e-5, 1e-4):
        for bs in (16, 32):
            for _ in range(4):
                score = {1e-5: 0.5, 3e-5: 0.7, 1e-4: 0.9}[lr] + rng.normal(0, 0.01)
                records.append(
                    {"score": score, "size": 100, "hparams": {"lr": lr, "batch_size": bs, "epochs": 3}}
                )
    importance = hyperparameter_importance(records)
    # between-setting variance 0.0267 (population), within 1e-4: explained ~ 0.996
    f = importance["explained_fraction"]
    assert f == pytest.approx(0.0267 / (0.0267 + 1e-4), abs=0.005)
    assert (
        set(importance["importances"]) == {"lr", "batch_size"} and importance["importances"]["lr"] > 0.9 * f
    )
    assert sum(importance["importances"].values()) == pytest.approx(f)
    assert importance["unexplained (seeds, noise)"] == pytest.approx(1 - f)


def test_importance_leaves_seed_noise_unexplained() -> None:
    """Settings that do not matter: R^2 over 12 settings of 3 runs is ~11/35 by chance alone;
    the explained fraction (omega^2) is ~0, and the rest is seeds and noise."""
    rng = np.random.default_rng(1)
    found = [explained_by_settings(list(rng.normal(0.7, 0.02, (12, 3)))) for _ in range(400)]
    assert np.mean([f["omega2"] for f in found]) == pytest.approx(0.0, abs=0.02)
    assert all(f["explained_fraction"] == max(f["omega2"], 0) for f in found)
    assert np.mean([f["r2"] for f in found]) == pytest.approx(11 / 35, abs=0.02)
    records = [
        {"score": 0.7 + rng.normal(0, 0.02), "size": 100, "hparams": {"lr": lr, "batch_size": bs}}
        for lr in (1e-5, 2e-5, 3e-5, 5e-5)
        for bs in (8, 16, 32)
        for _ in range(3)
    ]
    importance = hyperparameter_importance(records)
    assert importance["unexplained (seeds, noise)"] == pytest.approx(1 - importance["explained_fraction"])
    assert importance["settings"] == 12 and importance["runs"] == 36


def test_importance_on_a_recipe_sweep_keeps_the_recipe_one_factor() -> None:
    """Three recipes (full, lora, bitfit), each with its own lr and adapter settings, crossed with
    epochs {3, 6}, 4 seeds each. lr, adapter and lora_* are set by the recipe: no importance can
    split the recipe's effect between them, so they are one factor, `recipe`; epochs, crossed with
    it, stays its own. By hand: the recipe shifts 0 / 5 / 10 points, epochs 1 point, so the recipe
    holds nearly all the explained share."""
    rng = np.random.default_rng(4)
    recipes = {
        "full": ({"lr": 2e-5, "adapter": None, "lora_r": None, "lora_alpha": None}, 0.0),
        "lora": ({"lr": 5e-4, "adapter": "lora", "lora_r": 8, "lora_alpha": 16}, 0.05),
        "bitfit": ({"lr": 1e-3, "adapter": "bitfit", "lora_r": None, "lora_alpha": None}, 0.10),
    }
    records = [
        {
            "score": 0.6 + shift + 0.01 * (epochs == 6) + rng.normal(0, 0.003),
            "size": 100,
            "hparams": {"recipe": name, **params, "epochs": epochs},
        }
        for name, (params, shift) in recipes.items()
        for epochs in (3, 6)
        for _ in range(4)
    ]
    importance = hyperparameter_importance(records)
    assert set(importance["importances"]) == {"recipe", "epochs"}
    assert importance["factors"] == {"recipe": ["recipe", "adapter", "lora_alpha", "lora_r", "lr"]}
    assert importance["importances"]["recipe"] > 0.9 * importance["explained_fraction"]
    assert sum(importance["importances"].values()) == pytest.approx(importance["explained_fraction"])
    crossed = [r | {"hparams": r["hparams"] | {"lr": lr}} for r in records for lr in (2e-5, 5e-5)]
    assert set(hyperparameter_importance(crossed)["importances"]) == {"recipe", "epochs", "lr"}


# --- expected max: an interval for the estimate; seeds needed: a lower bound (simulations) ------


@pytest.mark.parametrize("kind", ["normal", "collapse0.4"])
def test_expected_max_interval_covers_the_true_expected_max(kind: str) -> None:
    """1000 studies each (MC SE 0.7-0.9%), N = 3, 5, 10 and 3 x 3, n in {1, 2, N/2, N}. Measured:
    normal 94.6-98.1%, 40% collapsed runs 92.9-98.8% where an interval is given (none where all
    runs tie); with the bootstrap SD alone (it cannot see above our max) 78-86% at n >= N/2."""
    rng = np.random.default_rng(21)
    for shape in ((3, 1), (5, 1), (10, 1), (3, 3)):
        big_n = shape[0] * shape[1]
        ns = sorted({1, 2, max(big_n // 2, 1), big_n})
        lay, y = studies(kind, shape, 1000, rng)
        ci = stacked_ci(lay, y, ns, resamples=200, seed=1)
        for i, n in enumerate(ns):
            true_max = float(draw_runs(kind, (400_000 // n, n), rng).max(1).mean())
            assert covered(ci[:, i], true_max)[0] >= 0.9, (shape, n)


def test_expected_max_past_our_runs_is_a_labelled_lower_bound() -> None:
    scores = list(np.random.default_rng(22).normal(0.7, 0.03, 5))
    curve = expected_max(scores, n_max=10)
    inside, beyond = curve[:5], curve[5:]
    assert all(not p["extrapolated"] and p["ci95"][0] < p["mean"] < p["ci95"][1] for p in inside)
    assert inside[-1]["std"] == 0.0 and inside[-1]["ci95"][1] > inside[-1]["ci95"][0]  # band 0, not the CI
    assert all(p["extrapolated"] and p["ci95"] is None for p in beyond)
    assert all(p["mean"] == max(scores) and p["estimator"].startswith("lower bound") for p in beyond)
    assert all(p["at_least"] == inside[-1]["ci95"][0] for p in beyond)
    dodge = expected_max(scores, n_max=10, method="with_replacement")  # the raw estimator on request
    assert dodge[-1]["mean"] < max(scores) and dodge[-1]["extrapolated"]


def test_seeds_needed_is_a_lower_bound_that_holds() -> None:
    """Truth: the runs a median needs for a 95% half-width of 1 point, 1.96^2 (pi/2) sd^2 / h^2
    (normal runs; collapsing runs: 1 / (4 f(median)^2), far more). 2000 studies (MC SE 0.7%).
    Measured share with truth >= bound: normal N = 3, 5, 10: 90.2-91.0% (median bound at N = 3:
    17 where 55 are needed), 3 x 3 grid 100%, 40% collapsed N = 3: 100%. A point forecast from 3
    runs cannot be within 2x in 70% (chi-square, 2 df: at most 47%; ours 48%), and as a bound it
    holds in 63% only."""
    rng, sd, target = np.random.default_rng(23), 0.03, 0.01
    truth_normal = math.ceil(1.959964**2 * math.pi / 2 * sd**2 / target**2)  # 55 runs
    median = stats.norm.ppf((0.5 - 0.4) / 0.6)  # 40% collapsed: the density at the median
    truth_collapse = math.ceil(1.959964**2 / (4 * (0.6 * stats.norm.pdf(median) / sd) ** 2) / target**2)
    for kind, shape in (("normal", (3, 1)), ("normal", (5, 1)), ("normal", (10, 1)), ("collapse0.4", (3, 1))):
        lay, y = studies(kind, shape, 2000, rng)
        bound, estimate = stacked_runs_needed(lay, 0.7 + sd * y, target)
        truth_runs = truth_normal if kind == "normal" else truth_collapse
        assert 0.88 <= np.mean(bound <= truth_runs) <= (0.95 if kind == "normal" else 1.0), (kind, shape)
        if shape == (3, 1) and kind == "normal":
            assert np.mean((estimate >= truth_normal / 2) & (estimate <= 2 * truth_normal)) < 0.7
            assert np.mean(estimate <= truth_normal) < 0.8
    lay, y = studies("normal", (3, 3), 2000, rng)  # init, order, residual sd each sd/sqrt(3)
    side = next(
        m for m in range(2, 999) if 1.959964**2 * sd**2 / 3 * (2 / m + math.pi / 2 / m**2) <= target**2
    )
    assert np.mean(stacked_runs_needed(lay, 0.7 + sd * y, target)[0] <= side**2) >= 0.88
    found = seeds_needed(grid_records(0.7 + sd * y[0]), resamples=300)
    assert found["bound"].startswith("at least") and found["targets"]["1"]["seeds_per_axis_needed"] >= 2


def test_summary_gives_the_expected_max_an_interval() -> None:
    s = summarize([{"score": v, "outcome": "succeeded"} for v in (0.6, 0.65, 0.7, 0.72, 0.75)])
    assert set(s["all"]["expected_max_ci95"]) == {"1", "5"} == set(s["all"]["expected_max"])
    low, high = s["all"]["expected_max_ci95"]["5"]
    assert s["all"]["expected_max"]["5"] == pytest.approx(0.75) and low < 0.75 < high


def _intervals_in(tree: object, path: str = "") -> list[tuple[str, list[float]]]:
    """Every [low, high] pair under a key naming an interval (ci95*, interval, lower/upper aside)."""
    found = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            here = f"{path}/{key}"
            if ("ci95" in str(key) or key == "interval") and isinstance(value, list) and len(value) == 2:
                found.append((here, value))
            else:
                found += _intervals_in(value, here)
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            found += _intervals_in(value, f"{path}/{i}")
    return found


def test_no_interval_in_a_summary_has_zero_width() -> None:
    """Studies whose runs tie, all or nearly all (every run failed at the baseline; one run of 7 or
    of a 3 x 3 grid succeeded; a whole init row collapsed; 11 or 8 of 12 failed): every interval
    anywhere in `summarize` (intervals, expected max, variance components, shares) is either
    absent or has width, but a median's where over half of all runs provably score it (exact
    binomial lower bound on the share at that value above 1/2, computed here by scipy)."""
    b = 0.527
    one_up = np.full((1, 3, 3), b)
    one_up[0, 1, 2] = 0.71
    row = np.random.default_rng(3).normal(0.7, 0.02, (1, 3, 3))
    row[0, 0] = b

    def failed(k: int, n: int) -> list[dict]:
        good = [{"score": 0.70 + 0.01 * i, "outcome": "succeeded"} for i in range(n - k)]
        return [{"score": b, "outcome": "failed"}] * k + good

    studies = {
        "6 failed": (failed(6, 6), 6),
        "3 x 3 failed": ([r | {"outcome": "failed"} for r in grid_records(np.full((1, 3, 3), b))], 3),
        "6 of 7 failed": (failed(6, 7), 7),
        "8 of 9 failed": (grid_records(one_up), 3),
        "a row collapsed": (grid_records(row), 3),
        "11 of 12 failed": (failed(11, 12), 12),
        "8 of 12 failed": (failed(8, 12), 12),
    }
    for name, (records, units) in studies.items():
        s = summarize(records, resamples=300)
        pairs = _intervals_in(s)
        assert pairs, name
        at_b = sum(r["score"] == b for r in records)
        share = stats.beta.ppf(0.025, at_b * units / len(records), units - at_b * units / len(records) + 1)
        for where, (low, high) in pairs:
            if where.endswith(("/median/ci95", "/ci95_median")) and share > 0.5:
                assert low == high == b, (name, where)  # pinned: the median is b
            else:
                assert high > low, (name, where, low, high)
    tied = summarize(studies["6 failed"][0], resamples=300)
    for block in ("mean", "std", "iqr"):
        assert tied["intervals"][block]["method"].startswith("cannot bound")
    assert tied["intervals"]["median"]["method"].startswith("the median is 0.527")
    assert tied["intervals"]["failure_rate"]["ci95"][1] == 1.0  # every run failed: [exact bound, 1]
    assert summarize(studies["8 of 12 failed"][0], resamples=300)["intervals"]["median"]["ci95"][1] > b


def test_normal_max_sd_equals_adaptive_quadrature() -> None:
    """The trapezoidal grid, all n at once, against scipy's adaptive quadrature of the max of n
    normals' density one n at a time (the way it was computed before), to 1e-9."""
    from scipy import integrate

    from suite.stats.estimates.expected_maximum import normal_max_sd

    def one(n: int) -> float:
        pdf = lambda x, p: x**p * n * stats.norm.pdf(x) * stats.norm.cdf(x) ** (n - 1)  # noqa: E731
        m1, m2 = (integrate.quad(pdf, -12, 12, args=(p,))[0] for p in (1, 2))
        return math.sqrt(max(m2 - m1**2, 0.0))

    ns = [1, 2, 3, 5, 10, 20, 50, 137, 1000, 10_000, 100_000]
    assert normal_max_sd(ns) == pytest.approx([one(n) for n in ns], abs=1e-9)
    assert normal_max_sd([2])[0] ** 2 == pytest.approx(1 - 1 / math.pi, abs=1e-9)  # Var(max of 2 normals)


def test_expected_max_at_some_n_equals_the_whole_curve_there() -> None:
    """`at` computes only the points asked for (those up to n_max): each is the whole curve's
    point, its interval included, inside our 12 runs and past them (the lower bound)."""
    records = grid_records(np.random.default_rng(5).normal(0.7, 0.02, (1, 4, 3)))  # 12 runs
    whole = expected_max(records, n_max=15, resamples=200)
    some = expected_max(records, n_max=15, resamples=200, at=[1, 5, 12, 15, 40])
    assert [p["n"] for p in some] == [1, 5, 12, 15]
    for point in some:  # to the last bits: a matrix product of another width sums in another order
        want = whole[point["n"] - 1]
        assert point.keys() == want.keys() and point["extrapolated"] == (point["n"] > 12)
        for key, value in point.items():
            assert value == (want[key] if isinstance(value, str) else pytest.approx(want[key], abs=1e-12))
