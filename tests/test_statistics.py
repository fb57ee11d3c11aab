"""Statistics checked against brute force and synthetic data with known answers."""

import numpy as np
import pytest

from suite.statistics import (
    bootstrap_ci,
    expected_max,
    gap_to_reported,
    hyperparameter_importance,
    spread,
    summarize,
    variance_shares,
)


def test_expected_max_matches_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(70, 5, size=25)
    curve = expected_max(scores)
    for n in (1, 3, 10, 25):
        draws = rng.choice(scores, size=(100_000, n), replace=True).max(axis=1)
        assert curve[n - 1]["mean"] == pytest.approx(draws.mean(), abs=0.05)
        assert curve[n - 1]["std"] == pytest.approx(draws.std(), abs=0.05)


def test_expected_max_at_one_is_the_mean_and_never_above_the_max() -> None:
    scores = [0.5, 0.9, 0.7, 0.7, 0.1]
    curve = expected_max(scores)
    assert curve[0]["mean"] == pytest.approx(np.mean(scores))
    assert all(p["mean"] <= max(scores) + 1e-12 for p in curve)
    assert all(a["mean"] <= b["mean"] + 1e-12 for a, b in zip(curve, curve[1:], strict=False))


@pytest.mark.parametrize("statistic, truth", [("mean", 0.0), ("median", 0.0)])
def test_bootstrap_ci_covers_the_truth_about_95_percent(statistic: str, truth: float) -> None:
    rng = np.random.default_rng(1)
    hits = 0
    trials = 300
    for i in range(trials):
        low, high = bootstrap_ci(rng.normal(truth, 1.0, size=40), statistic, seed=i, resamples=1000)
        hits += low <= truth <= high
    assert 0.90 <= hits / trials <= 0.985


def test_bootstrap_is_seeded() -> None:
    x = np.random.default_rng(2).normal(size=20)
    assert bootstrap_ci(x, seed=5) == bootstrap_ci(x, seed=5)
    assert bootstrap_ci([0.3]) is None


def _grid(sd_init: float, sd_order: float, sd_noise: float, n: int = 40, seed: int = 0):  # noqa: ANN202
    """Scores = init effect + order effect + noise on an n x n crossed grid, and the realised
    variance of each component (the target the ANOVA should recover)."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0, sd_init, n), rng.normal(0, sd_order, n)
    noise = rng.normal(0, sd_noise, (n, n))
    records = [
        {"score": a[i] + b[j] + noise[i, j], "seeds": {"init": i, "order": j, "subsample": 0}}
        for i in range(n)
        for j in range(n)
    ]
    return records, (a.var(ddof=1), b.var(ddof=1), noise.var())


def test_variance_shares_recover_known_components() -> None:
    for sds in ((2.0, 1.0, 1.0), (0.5, 2.0, 0.5), (1.0, 1.0, 3.0)):
        records, truth = _grid(*sds)
        shares = variance_shares(records)
        total = sum(truth)
        assert shares["init"] == pytest.approx(truth[0] / total, abs=0.03)
        assert shares["order"] == pytest.approx(truth[1] / total, abs=0.03)
        assert shares["residual"] == pytest.approx(truth[2] / total, abs=0.03)
        assert shares["total_variance"] == pytest.approx(total, rel=0.05)


def test_variance_shares_need_a_complete_crossed_grid() -> None:
    records, _ = _grid(1, 1, 1, n=3)
    assert variance_shares(records[:-1]) is None
    independent = [{"score": float(i), "seeds": {"init": i, "order": i, "subsample": 0}} for i in range(5)]
    assert variance_shares(independent) is None


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
    gap = gap_to_reported(scores, 72.0, "median")
    assert gap["percentile"] == pytest.approx(60.0)
    assert gap["p_single_run_below"] == {"1": 0.6, "3": 0.4}
    assert gap["our_value"] == pytest.approx(70.0) and gap["gap"] == pytest.approx(-2.0)
    assert gap["inside_ci"] is True
    assert gap_to_reported(scores, 95.0, "median")["inside_ci"] is False
    assert gap_to_reported(scores, 72.0, "single")["inside_ci"] is None


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
    assert set(importance) == {"lr", "batch_size"} and importance["lr"] > 0.9
