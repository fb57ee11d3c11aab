"""Variance components against simulation with known answers: each test fails on a wrong formula
(a swapped divisor, a missing mean-square subtraction, a design the estimator ignores, an interval
that does not cover). Simulations are vectorised over studies: one array per design."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from suite.stats.estimates.components import (
    component_interval,
    crossed_components,
    independent_components,
    mean_squares,
    mls_interval,
    model,
    seeds_for_share,
    share_draws,
    variance_components,
    variance_shares,
)
from tests.designs import grid_records, independent_records

# Effect variances by axes: (0,) subsample, (1,) init, (2,) order, (0, 1) subsample x init, ...
SWEEP = {(0,): 0.5, (1,): 1.5, (2,): 0.5, (0, 1): 0.1, (0, 2): 0.1, (1, 2): 0.2, (0, 1, 2): 0.5}
GRID = {(0,): 1.0, (1,): 0.3, (0, 1): 0.5}  # one subsample seed: init, order, init x order + residual


def simulate(sizes: tuple[int, ...], truth: dict[tuple[int, ...], float], sims: int, seed: int) -> np.ndarray:
    """(sims, *sizes) scores: a normal effect per level combination of each effect's axes."""
    rng = np.random.default_rng(seed)
    y = np.zeros((sims, *sizes))
    for axes, var in truth.items():
        y = y + rng.normal(0, math.sqrt(var), [sims] + [n if a in axes else 1 for a, n in enumerate(sizes)])
    return y


def coverage(sizes: tuple[int, ...], design: str, truth: dict, sims: int = 2000) -> dict[str, float]:
    """Share of simulated studies whose MLS interval holds each component's true value."""
    m = model(sizes, design, shared=True)
    ms = mean_squares(simulate(sizes, truth, sims, seed=len(sizes)), m)
    out = {}
    for name, c in m.coefficients().items():
        true = sum(truth.get(e, 0.0) for e in m.names[name])
        low, high = mls_interval(ms, m.df, c)
        out[name] = float(((low <= true) & (true <= high)).mean())
    return out


def test_subsample_component_is_unbiased_on_the_sweeps_shared_seed_grid() -> None:
    """3 subsample seeds x 5 init x 5 order seeds, the same init and order seeds under every
    subsample seed (the sweep's grid), 4000 studies. The estimator that assumes those seeds are
    redrawn per subsample reads the subsample variance 0.5 as ~0.1: it subtracts init and order
    variance that the subsample means do not carry."""
    y = simulate((3, 5, 5), SWEEP, 4000, seed=0)
    est, nested = crossed_components(y), crossed_components(y, shared=False)
    for name, truth in (("subsample", 0.5), ("init", 1.5), ("order", 0.5), ("interaction+residual", 0.9)):
        se = est[name].std() / math.sqrt(len(y))
        assert est[name].mean() == pytest.approx(truth, abs=5 * se)
    tol = 5 * est["subsample"].std() / math.sqrt(len(y))
    assert tol < 0.06 and abs(nested["subsample"].mean() - 0.5) > 0.3  # the old formula: far outside


def test_crossed_components_recover_unequal_variances_on_non_square_grids() -> None:
    """6 init x 4 order seeds x 3 subsample seeds, 4000 studies; each tolerance is under half the
    bias of a wrong formula. Nested seeds (init 1.5, order 0.3, subsample 0.8, residual 0.5): a
    swapped divisor gives init 1.0, order 0.45; no MS_E subtraction 1.625, 0.383; no within-share
    subtraction subsample 1.146; residual over I*O 0.31. Shared seeds with interactions: swapped
    I and O divisors in the subsample x init / x order terms move subsample by >= 0.1."""
    nested = {(0,): 0.8, (0, 1): 1.5, (0, 2): 0.3, (0, 1, 2): 0.5}
    est = crossed_components(simulate((3, 6, 4), nested, 4000, seed=1), shared=False)
    for name, truth, tol in (("init", 1.5, 0.06), ("order", 0.3, 0.035), ("subsample", 0.8, 0.12)):
        assert tol > 4 * est[name].std() / math.sqrt(4000)  # many standard errors wide ...
        assert est[name].mean() == pytest.approx(truth, abs=tol)  # ... and still excludes the wrong formulas
    assert est["interaction+residual"].mean() == pytest.approx(0.5, abs=0.02)
    shared = {(0,): 0.8, (1,): 1.5, (2,): 0.3, (0, 1): 0.6, (0, 2): 0.4, (1, 2): 0.2, (0, 1, 2): 0.5}
    est = crossed_components(simulate((3, 6, 4), shared, 4000, seed=2))
    for name, truth, tol in (("subsample", 0.8, 0.05), ("init", 1.5, 0.06), ("order", 0.3, 0.035)):
        assert est[name].mean() == pytest.approx(truth, abs=tol)
    assert est["interaction+residual"].mean() == pytest.approx(1.7, abs=0.02)


def test_independent_components_recover_seed_and_subsample_variances() -> None:
    """Runs nested in subsample seeds, and the same run seeds under every subsample seed (a run
    effect 0.3 shared across subsamples): subsample stays 0.4, seed = run + residual."""
    y = simulate((4, 6), {(0,): 0.4, (0, 1): 0.7}, 4000, seed=3)
    est = independent_components(y, shared=False)
    assert est["seed"].mean() == pytest.approx(0.7, abs=0.02)
    assert est["subsample"].mean() == pytest.approx(0.4, abs=0.05)  # without the 0.7/6 share: 0.517
    est = independent_components(simulate((4, 6), {(0,): 0.4, (1,): 0.3, (0, 1): 0.4}, 4000, seed=4))
    assert est["seed"].mean() == pytest.approx(0.7, abs=0.02)
    assert est["subsample"].mean() == pytest.approx(0.4, abs=0.04)  # subtracting the run effect: 0.35


@pytest.mark.parametrize(
    ("sizes", "truth"), [((5, 5), GRID), ((5, 5), {(0,): 0.1, (1,): 0.1, (0, 1): 1.0}), ((3, 5, 5), SWEEP)]
)
def test_component_intervals_cover_at_nominal_95(sizes: tuple[int, ...], truth: dict) -> None:
    """MLS intervals, 2000 studies: 94-97% measured for every component (the percentile bootstrap
    they replace: 58% on 3 x 3, 77% on 5 x 5); above 99% would be needlessly wide."""
    found = coverage(sizes, "crossed", truth)
    assert set(found) == ({"subsample"} if len(sizes) == 3 else set()) | {
        "init",
        "order",
        "interaction+residual",
    }
    for name, share in found.items():
        assert 0.90 <= share <= 0.99, (name, share)


@pytest.mark.parametrize("runs", [3, 5, 10])
def test_seed_variance_interval_of_independent_runs_covers(runs: int) -> None:
    """One subsample seed: the chi-square interval of a variance, exact under normality."""
    assert coverage((runs,), "independent", {(0,): 0.7}, sims=4000)["seed"] == pytest.approx(0.95, abs=0.015)


def test_records_get_the_intervals_of_their_design() -> None:
    """variance_components reports the MLS interval of its own design, and at N = 3 independent
    runs the textbook chi-square interval [2 s^2 / chi2(0.975; 2), 2 s^2 / chi2(0.025; 2)]."""
    y = simulate((3, 5, 5), SWEEP, 1, seed=5)[0]
    found = variance_components(grid_records(y), resamples=200)["components"]
    m = model(y.shape, "crossed", shared=True)
    ms = mean_squares(y, m)
    for name, c in m.coefficients().items():
        low, high = mls_interval(ms, m.df, c)
        assert found[name]["ci95"] == pytest.approx([max(low, 0), max(high, 0)])
    runs = np.array([[0.3, 1.9, 1.1]])
    seed = variance_components(independent_records(runs), resamples=200)["components"]["seed"]
    s2 = runs.var(ddof=1)
    assert seed["ci95"] == pytest.approx(
        [2 * s2 / stats.chi2.ppf(0.975, 2), 2 * s2 / stats.chi2.ppf(0.025, 2)]
    )
    assert seed["estimate"] == pytest.approx(s2) and seed["df"] == pytest.approx(2)


def test_share_intervals_cover_and_say_when_they_cannot_bound_a_share() -> None:
    """GPQ share intervals cover (95-97% measured on 5 x 5); on a 3 x 3 grid they span most of
    [0, 1], so the share is flagged not informative, with the seeds per axis that would narrow its
    interval below 0.5; a 30 x 30 grid bounds it."""
    m = model((5, 5), "crossed", shared=True)
    ms = mean_squares(simulate((5, 5), GRID, 1000, seed=6), m)
    low, high = np.nanpercentile(
        share_draws(ms, m.df, m, 400, np.random.default_rng(0)), [2.5, 97.5], axis=-2
    )
    true = np.array([1.0, 0.3, 0.5]) / 1.8
    assert ((low <= true) & (true <= high)).mean(0) == pytest.approx([0.95] * 3, abs=0.04)
    small = variance_components(
        grid_records(simulate((1, 3, 3), {(1,): 1.0, (2,): 0.3, (1, 2): 0.5}, 1, 7)[0])
    )
    for name in ("init", "order", "interaction+residual"):
        part = small["components"][name]
        assert not part["share_informative"] and part["share_ci95"][1] - part["share_ci95"][0] >= 0.5
        assert part["seeds_per_axis_needed"] > 3 and part["runs_needed"] == part["seeds_per_axis_needed"] ** 2
    big = variance_components(
        grid_records(simulate((1, 30, 30), {(1,): 1.0, (2,): 0.3, (1, 2): 0.5}, 1, 8)[0])
    )
    assert all(
        c["share_informative"] and "seeds_per_axis_needed" not in c
        for c in big["components"].values()
        if c["identifiable"]
    )


def test_seeds_needed_for_a_share_match_simulated_studies() -> None:
    """At the seeds per axis `seeds_for_share` names, simulated studies' share intervals have a
    median width near 0.5 (formula at the expected mean squares); at two fewer seeds, wider."""
    m = model((3, 3), "crossed", shared=True)
    need = seeds_for_share(m, np.array([1.0, 0.3, 0.5]), "init")
    assert need is not None and 6 <= need <= 20

    def median_width(n: int) -> float:
        big = model((n, n), "crossed", shared=True)
        ms = mean_squares(simulate((n, n), GRID, 300, seed=n), big)
        low, high = np.nanpercentile(
            share_draws(ms, big.df, big, 400, np.random.default_rng(n))[..., 0], [2.5, 97.5], -1
        )
        return float(np.median(high - low))

    assert median_width(need) < 0.53 and median_width(need - 2) > 0.5


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
        assert 0 <= low <= high
    assert parts["interaction+residual"]["includes"][-1] == "residual (subsample x init x order)"
    assert parts["init"]["share"] > 0.5 and found["total"] == pytest.approx(
        sum(max(float(v), 0) for v in raw.values())
    )
    one = variance_components(grid_records(y[:1]), resamples=100)["components"]
    assert one["subsample"] == {"identifiable": False, "reason": "one subsample seed"}
    nested = variance_components(grid_records(y, nested=True), resamples=100)
    assert nested["components"]["init"]["includes"] == ["init within subsample"]
    assert nested["components"]["init"]["estimate"] == pytest.approx(
        float(crossed_components(y, False)["init"])
    )
    indep = variance_components(independent_records(rng.normal(size=(3, 5))), resamples=100)
    assert indep["design"] == "independent" and indep["components"]["seed"]["identifiable"]
    assert (
        not indep["components"]["init"]["identifiable"] and not indep["components"]["order"]["identifiable"]
    )


def test_a_missing_cell_gets_reml_estimates() -> None:
    """REML (MixedLM) equals the method of moments on a complete balanced grid whose estimates are
    all positive, which checks how effects map to variance components; with a cell missing it
    stays close to the complete grid's estimates."""
    from suite.stats.estimates.components import _reml

    y = simulate((3, 5, 5), {k: 3 * v for k, v in SWEEP.items()}, 1, seed=9)[0]
    m = model(y.shape, "crossed", shared=True)
    anova = np.linalg.solve(m.expected(), mean_squares(y, m))
    assert (anova > 0).all()
    assert _reml(y, m) == pytest.approx(anova, rel=0.02, abs=0.02)
    records = grid_records(y)
    records[7]["score"] = None
    found = variance_components(records, resamples=200)
    assert found["method"].startswith("REML")
    complete = variance_components(grid_records(y), resamples=200)["components"]
    for name in ("subsample", "init", "order", "interaction+residual"):
        part = found["components"][name]
        assert part["identifiable"] and part["estimate"] == pytest.approx(complete[name]["estimate"], rel=0.3)
        assert part["ci95"][0] <= part["estimate"] <= part["ci95"][1]


def test_a_negative_raw_component_is_reported_and_flagged() -> None:
    y = np.array([[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]])  # no init effect, all interaction
    init = variance_components(grid_records(y), resamples=50)["components"]["init"]
    assert init["estimate"] < 0 and init["truncated_at_0"] and init["share"] == 0.0
    assert init["df"] is None
    # the init seeds' means are equal (0.5 each): nothing bounds the init variance, and no [0, 0]
    assert init["ci95"] is None and init["ci95_note"].startswith("cannot bound")


def test_a_component_below_zero_gets_a_valid_upper_bound_not_zero_width() -> None:
    """3 x 3 grids with small init and order effects (0.1) beside an interaction of 1.0, 4000
    studies (Monte-Carlo SE 0.35 points at 95%): in 1.8-2% of them the MLS interval of init or
    order lies below 0 and was clipped to [0, 0]. Now its upper end is the MLS bound of the
    positive mean-square terms, which are at least the component: no zero width, coverage at
    least the old one's (measured: init 95.0 -> 96.2%, order 95.1 -> 96.5%)."""
    truth = {(0,): 0.1, (1,): 0.1, (0, 1): 1.0}
    m = model((3, 3), "crossed", shared=True)
    ms = mean_squares(simulate((3, 3), truth, 4000, seed=11), m)
    for name, c in m.coefficients().items():
        true = sum(truth.get(e, 0.0) for e in m.names[name])
        ci = component_interval(ms, m.df, c)
        low, high = mls_interval(ms, m.df, c)
        old = np.stack([np.maximum(low, 0), np.maximum(high, 0)], -1)
        assert np.all(ci[:, 1] > ci[:, 0])  # no NaN either: the runs vary in every study
        fell = high <= 0
        assert np.array_equal(ci[~fell], old[~fell])  # elsewhere the MLS interval, as before
        share = ((ci[:, 0] <= true) & (true <= ci[:, 1])).mean()
        assert share >= ((old[:, 0] <= true) & (true <= old[:, 1])).mean() and share >= 0.94, name
        if name != "interaction+residual":
            assert 0.005 <= fell.mean() <= 0.04, (name, fell.mean())  # the case is exercised
            positive = mls_interval(ms[fell], m.df, np.clip(c, 0, None))[1]
            assert np.allclose(ci[fell, 1], positive) and np.all(ci[fell, 0] == 0)


def test_tied_runs_bound_no_component() -> None:
    """Every run failed at the baseline: every mean square is 0 and [0, 0] would claim each
    variance is exactly 0; 9 tied runs say nothing about a run that differs."""
    found = variance_components(grid_records(np.full((1, 3, 3), 0.527)), resamples=50)["components"]
    for name in ("init", "order", "interaction+residual"):
        assert found[name]["ci95"] is None and found[name]["ci95_note"].startswith("cannot bound")
        assert found[name]["estimate"] == 0.0


def test_components_the_runs_vary_only_by_floating_point_residue_bound_nothing() -> None:
    """Scores that depend on the init seed only (each row repeated over 3 order seeds): order and
    residual mean squares are ~1e-32, rounding residue, and MLS gave [0.0, 7.2e-31] and
    [1.0e-32, 2.3e-31], a certainty of 0 the runs do not give. They count as 0 against the
    largest mean square: "cannot bound", as tied runs; init keeps its interval."""
    rows = np.array([0.6173, 0.6411, 0.6165])
    found = variance_components(grid_records(np.repeat(rows[None, :, None], 3, 2)), resamples=50)[
        "components"
    ]
    for name in ("order", "interaction+residual"):
        assert found[name]["ci95"] is None and found[name]["ci95_note"].startswith("cannot bound")
        assert found[name]["estimate"] == 0.0 and found[name]["share_ci95"] is None
    assert found["init"]["estimate"] == pytest.approx(
        rows.var(ddof=1)
    )  # 3 order seeds: the row mean square / 3
    low, high = found["init"]["ci95"]
    assert 0 < low < rows.var(ddof=1) < high


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


def test_variance_shares_need_a_crossed_grid_and_use_reml_on_an_incomplete_one() -> None:
    records, _ = _grid(1, 1, 1, n=4)
    holed = variance_shares(records[:-1])
    assert holed["components"]["method"].startswith("REML")
    assert holed["init"] + holed["order"] + holed["residual"] == pytest.approx(1.0)
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
