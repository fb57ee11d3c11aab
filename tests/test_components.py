"""Variance components against simulation with known answers: each test fails on a wrong
formula (a swapped divisor, a missing mean-square subtraction, a design the estimator ignores)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from suite.components import crossed_components, independent_components, variance_components, variance_shares
from tests.designs import grid_records, independent_records


def test_crossed_components_recover_unequal_variances_on_a_non_square_grid() -> None:
    """6 init x 4 order seeds x 3 subsample seeds; variances init 1.5, order 0.3, subsample 0.8,
    residual 0.5, averaged over 4000 simulated studies. Each tolerance is under half the bias of
    a wrong formula: a swapped divisor (init -> 1.0, order -> 0.45), no MS_E subtraction (init
    1.625, order 0.383), no expected within-share subtraction (subsample 1.146), residual over
    I*O (0.31)."""
    rng = np.random.default_rng(0)
    sims, n_s, n_i, n_o = 4000, 3, 6, 4
    y = (
        rng.normal(0, math.sqrt(0.8), (sims, n_s, 1, 1))
        + rng.normal(0, math.sqrt(1.5), (sims, n_s, n_i, 1))
        + rng.normal(0, math.sqrt(0.3), (sims, n_s, 1, n_o))
        + rng.normal(0, math.sqrt(0.5), (sims, n_s, n_i, n_o))
    )
    est = crossed_components(y)
    for name, truth, tol in (
        ("init", 1.5, 0.06),
        ("order", 0.3, 0.035),
        ("subsample", 0.8, 0.12),
        ("interaction+residual", 0.5, 0.02),
    ):
        se = est[name].std() / math.sqrt(sims)
        assert tol > 4 * se  # the tolerance is many standard errors wide ...
        assert est[name].mean() == pytest.approx(truth, abs=tol)  # ... and still excludes the wrong formulas


def test_independent_components_recover_seed_and_subsample_variances() -> None:
    rng = np.random.default_rng(1)
    sims, n_s, runs = 4000, 4, 6
    y = rng.normal(0, math.sqrt(0.4), (sims, n_s, 1)) + rng.normal(0, math.sqrt(0.7), (sims, n_s, runs))
    est = independent_components(y)
    assert est["seed"].mean() == pytest.approx(0.7, abs=0.02)
    assert est["subsample"].mean() == pytest.approx(0.4, abs=0.05)  # without the 0.7/6 share: 0.517


def test_variance_components_of_records_report_what_the_design_identifies() -> None:
    rng = np.random.default_rng(2)
    y = rng.normal(0, 1, (2, 6, 4)) + 3 * rng.normal(0, 1, (1, 6, 1))
    found = variance_components(grid_records(y), resamples=300)
    raw = crossed_components(y)
    parts = found["components"]
    assert found["design"] == "crossed" and found["unit"] == "init x order seeds x subsample seeds"
    for name in ("init", "order", "interaction+residual", "subsample"):
        assert parts[name]["identifiable"] and parts[name]["estimate"] == pytest.approx(float(raw[name]))
        assert parts[name]["truncated_at_0"] == (raw[name] < 0)
        low, high = parts[name]["ci95"]
        assert low <= high
    assert parts["init"]["share"] > 0.5 and found["total"] == pytest.approx(
        sum(max(float(v), 0) for v in raw.values())
    )
    one = variance_components(grid_records(y[:1]), resamples=100)["components"]
    assert one["subsample"] == {"identifiable": False, "reason": "one subsample seed"}
    indep = variance_components(independent_records(rng.normal(size=(3, 5))), resamples=100)
    assert indep["design"] == "independent" and indep["components"]["seed"]["identifiable"]
    assert (
        not indep["components"]["init"]["identifiable"] and not indep["components"]["order"]["identifiable"]
    )
    holed = grid_records(y)
    holed[3]["score"] = None
    assert not variance_components(holed)["components"]["init"]["identifiable"]


def test_a_negative_raw_component_is_reported_and_flagged() -> None:
    y = np.array([[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]])  # no init effect, all interaction
    init = variance_components(grid_records(y), resamples=50)["components"]["init"]
    assert init["estimate"] < 0 and init["truncated_at_0"] and init["share"] == 0.0


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


def test_variance_shares_keep_the_flat_keys_and_carry_the_components() -> None:
    records, _ = _grid(1.0, 1.0, 1.0, n=6)
    shares = variance_shares(records)
    assert shares["components"]["components"]["init"]["estimate"] == pytest.approx(
        shares["init"] * shares["total_variance"]
    )
    other = [{**r, "hparams": {"lr": 1}} for r in records] + [{**r, "hparams": {"lr": 2}} for r in records]
    assert variance_shares(other) is None  # never pooled over settings
