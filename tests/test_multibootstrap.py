"""Multi-Bootstrap (Sellam et al. 2022): the reference algorithm's replicates, coverage of a known
effect on synthetic per-example data, paired narrowing, automatic pairing."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from scipy import stats

from suite.model.metrics import classification_scores
from suite.stats.compare.multi_bootstrap import (
    arm_replicates,
    example_weights,
    multibootstrap,
    multibootstrap_replicates,
    summarise,
)
from suite.stats.estimates.example_metrics import mean_scores

# ---------------------------------------------------------------------------------------------
# The reference, google-research/language language/multiberts/multibootstrap.py, re-run literally:
# its per-replicate loop (seed draw(s), then one example draw, same RandomState calls), its
# macro-average (runs of a seed, then seeds) and its report_ci. Only change: the paired seed list
# is sorted (the reference takes a set's order, which is arbitrary).
# ---------------------------------------------------------------------------------------------


def _bsample(items, rng):
    return rng.choice(items, size=len(items), replace=True)


def reference_multibootstrap(seeds, intervention, preds, labels, score_fn, paired_seeds, nboot, rng):
    num_examples = len(labels)
    base_seed_to_row, expt_seed_to_row = defaultdict(list), defaultdict(list)
    for row, (seed, expt) in enumerate(zip(seeds, intervention, strict=True)):
        (expt_seed_to_row if expt else base_seed_to_row)[seed].append(row)
    if isinstance(rng, int):
        rng = np.random.RandomState(rng)
    if paired_seeds:
        common_seeds = sorted(set(base_seed_to_row).intersection(expt_seed_to_row))
    else:
        base_seeds, expt_seeds = sorted(base_seed_to_row), sorted(expt_seed_to_row)

    def _score_seeds(seeds_to_rows, seeds, row_score_fn):
        scores = []
        for s in seeds:
            scores.append(np.mean([row_score_fn(i) for i in seeds_to_rows[s]]))
        return np.mean(scores)

    samples = []
    for _ in range(nboot):
        if paired_seeds:
            base_seed_sample = _bsample(common_seeds, rng)
            expt_seed_sample = base_seed_sample
        else:
            base_seed_sample = _bsample(base_seeds, rng)
            expt_seed_sample = _bsample(expt_seeds, rng)
        jj = rng.choice(num_examples, size=num_examples, replace=True)
        selected_labels = labels[jj]
        score_row = lambda i: score_fn(selected_labels, preds[i, jj])  # noqa: E731, B023
        samples.append(
            (_score_seeds(base_seed_to_row, base_seed_sample, score_row),
             _score_seeds(expt_seed_to_row, expt_seed_sample, score_row))
        )  # fmt: skip
    return samples


def reference_report(samples, c=0.95, abs_threshold=None):
    quantiles = [(1 - c) / 2, 1 - (1 - c) / 2]
    base, expt = np.array(samples).T
    deltas = expt - base
    pval = np.mean(deltas <= 0)
    if pval == 0:
        pval = 1.0 / len(deltas)
    out = {
        "base": list(np.quantile(base, quantiles)),
        "expt": list(np.quantile(expt, quantiles)),
        "delta": {"mean": np.mean(deltas), "interval": list(np.quantile(deltas, quantiles)), "p": pval},
    }
    if abs_threshold is not None:
        out["p_margin"] = np.mean(deltas >= abs_threshold)
    return out


# ---------------------------------------------------------------------------------------------
# Fixtures: runs of two arms with per-example outcomes of every head kind
# ---------------------------------------------------------------------------------------------

N = 60
NBOOT = 40


def _classification(rng, n_labels, y, skill):
    keep = rng.random(len(y)) < skill
    pred = np.where(keep, y, rng.integers(0, n_labels, len(y)))
    return {
        "label": y.tolist(),
        "prediction": pred.tolist(),
        "correct": (pred == y).astype(int).tolist(),
    }, pred


def _regression(rng, y, skill):
    pred = np.round(skill * y + rng.normal(0, 1.2, len(y)), 0)  # coarse: ties on both sides
    return {"label": y.tolist(), "prediction": pred.tolist()}, pred


KINDS = {
    "accuracy": 3,
    "f1": 2,
    "f1-macro": 3,
    "matthews": 3,
    "pearson": "regression",
    "spearman": "regression",
    "exact_match": "qa",
    "qa-f1": "qa",
    "entity_f1": "ner",
    "precision": "ner",
}


def arm_runs(kind, metric, seeds, skill, rng, truth):
    """Runs of one arm: records, their predictions matrix (the reference's preds) and score_fn."""
    records, preds = [], []
    for init in seeds:
        if kind == "regression":
            per, pred = _regression(rng, truth, skill)
        elif kind == "qa":
            em = (rng.random(N) < skill).astype(float)
            f1 = np.where(em == 1, 1.0, np.round(rng.random(N) * 0.8, 2))
            per, pred = (
                {"exact_match": em.tolist(), "f1": f1.tolist()},
                (em if metric == "exact_match" else f1),
            )
        elif kind == "ner":
            predicted = rng.integers(0, 4, N)
            correct = np.minimum(predicted, rng.binomial(truth, skill))
            per = {"correct": correct.tolist(), "predicted": predicted.tolist(), "gold": truth.tolist()}
            pred = np.stack([correct, predicted, truth], -1)
        else:
            per, pred = _classification(rng, kind, truth, skill)
        records.append(
            {"outcome": "succeeded", "score": 0.5, "metric": metric, "per_example": per,
             "seeds": {"init": int(init), "order": int(init) + 100, "subsample": 0}}
        )  # fmt: skip
        preds.append(pred)
    return records, np.array(preds)


def score_fn(kind, metric):
    if kind == "qa":
        return lambda y, p: float(np.mean(p))
    if kind == "ner":
        tables = {
            "entity_f1": lambda c, p, g: 2 * c / (p + g) if p + g else 0.0,
            "precision": lambda c, p, g: c / p if p else 0.0,
        }
        return lambda y, p: tables[metric](*p.sum(0))
    name, n_labels = metric.split("-")[0], (kind if isinstance(kind, int) else 2)
    return lambda y, p: classification_scores([name], y, p, n_labels)[name]


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("name", list(KINDS))
def test_replicates_match_the_reference_loop(name: str, paired: bool) -> None:
    kind = KINDS[name]
    metric = {"f1-macro": "f1", "qa-f1": "f1"}.get(name, name)
    rng = np.random.default_rng(list(KINDS).index(name))
    truth = {
        "regression": np.round(rng.uniform(0, 5, N), 0),
        "qa": np.zeros(N),
        "ner": rng.integers(0, 4, N),
    }.get(kind, rng.integers(0, kind if isinstance(kind, int) else 2, N))
    seeds_a, seeds_b = [3, 1, 4, 0, 2], ([3, 1, 4, 0, 2] if paired else [11, 17, 13, 12])
    a, preds_a = arm_runs(kind, metric, seeds_a, 0.6, rng, truth)
    b, preds_b = arm_runs(kind, metric, seeds_b, 0.7, rng, truth)

    samples = reference_multibootstrap(
        seeds_a + seeds_b, [False] * len(a) + [True] * len(b), np.concatenate([preds_a, preds_b]),
        truth, score_fn(kind, name), paired, NBOOT, 7,
    )  # fmt: skip
    num_labels = 3 if name == "f1-macro" else None
    found = multibootstrap_replicates(a[::-1], b, NBOOT, seed=7, metric=metric, num_labels=num_labels)
    assert found["paired"] is paired and found["n_examples"] == N
    np.testing.assert_allclose(found["replicates"], np.array(samples), rtol=0, atol=1e-12)

    report = reference_report(samples, abs_threshold=0.05)
    result = multibootstrap(a, b, NBOOT, seed=7, margin=0.05, metric=metric, num_labels=num_labels)
    assert result["interval"] == pytest.approx(report["delta"]["interval"], abs=1e-12)
    assert result["arms"]["a"]["interval"] == pytest.approx(report["base"], abs=1e-12)
    assert result["arms"]["b"]["interval"] == pytest.approx(report["expt"], abs=1e-12)
    assert result["bootstrap_mean"] == pytest.approx(report["delta"]["mean"], abs=1e-12)
    assert result["p_one_sided"] == pytest.approx(report["delta"]["p"])
    assert result["p_margin"] == pytest.approx(report["p_margin"])
    # the full-data estimate: each run's metric on every example, averaged over runs
    full = score_fn(kind, name)
    expected = np.mean([full(truth, p) for p in preds_b]) - np.mean([full(truth, p) for p in preds_a])
    assert result["estimate"] == pytest.approx(expected, abs=1e-12)


def _grid_runs(rng, cells, truth, skill):
    """Classification runs at the given (init, order, subsample) seeds."""
    runs = []
    for init, order, sub in cells:
        per, _ = _classification(rng, 2, truth, skill)
        seeds = {"init": init, "order": order, "subsample": sub}
        runs.append(
            {"outcome": "succeeded", "score": 0.5, "metric": "accuracy", "per_example": per, "seeds": seeds}
        )
    return runs


def _accuracy(run, jj):
    return float(np.mean(np.array(run["per_example"]["correct"])[jj]))


def _choice(rng, m):
    return rng.choice(m, size=m, replace=True) if m > 1 else np.zeros(m, dtype=int)


def test_crossed_grid_resamples_init_and_order_seeds_not_cells() -> None:
    # Literal loop of the documented extension: per replicate, each arm draws its init seeds (rows)
    # and order seeds (columns), then one example draw; the arm's statistic is the mean over every
    # cell of the drawn rows x columns.
    rng = np.random.default_rng(1)
    truth = rng.integers(0, 2, N)
    a = _grid_runs(rng, [(i, o, 0) for i in (10, 11, 12) for o in (20, 21, 22, 23)], truth, 0.6)
    b = _grid_runs(rng, [(i, o, 0) for i in (30, 31) for o in (40, 41, 42)], truth, 0.7)
    found = multibootstrap_replicates(a, b, NBOOT, seed=3)
    assert not found["paired"] and found["units"][0].lay.design == "crossed"

    ref = np.random.RandomState(3)
    expected = []
    for _ in range(NBOOT):
        drawn = [(_choice(ref, inits), _choice(ref, orders)) for inits, orders in ((3, 4), (2, 3))]
        jj = ref.choice(N, size=N, replace=True)
        stats = []
        for runs, (rows, cols), n_orders in zip((a, b), drawn, (4, 3), strict=True):
            stats.append(np.mean([_accuracy(runs[r * n_orders + c], jj) for r in rows for c in cols]))
        expected.append(stats)
    np.testing.assert_allclose(found["replicates"], expected, rtol=0, atol=1e-12)

    # paired on the same grid: one row and one column draw per replicate, applied to both arms
    b = _grid_runs(rng, [(r["seeds"]["init"], r["seeds"]["order"], 0) for r in a], truth, 0.7)
    found = multibootstrap_replicates(a, b[::-1], NBOOT, seed=4)
    assert found["paired"] and "init x order seeds" in multibootstrap(a, b, NBOOT)["units"]
    ref = np.random.RandomState(4)
    expected = []
    for _ in range(NBOOT):
        rows, cols = _choice(ref, 3), _choice(ref, 4)
        jj = ref.choice(N, size=N, replace=True)
        expected.append(
            [np.mean([_accuracy(runs[r * 4 + c], jj) for r in rows for c in cols]) for runs in (a, b)]
        )
    np.testing.assert_allclose(found["replicates"], expected, rtol=0, atol=1e-12)


def test_subsample_seeds_with_their_own_runs_are_drawn_first_then_runs_within() -> None:
    rng = np.random.default_rng(2)
    truth = rng.integers(0, 2, N)
    cells = [(k, 50 + k, 0) for k in range(3)] + [(10 + k, 60 + k, 1) for k in range(4)]
    a = _grid_runs(rng, cells, truth, 0.6)
    found = multibootstrap_replicates(a, None, NBOOT, seed=5)
    ref = np.random.RandomState(5)
    expected = []
    for _ in range(NBOOT):
        subs = _choice(ref, 2)
        drawn = [(s, r) for s in subs for r in _choice(ref, (3, 4)[s])]
        jj = ref.choice(N, size=N, replace=True)
        expected.append(np.mean([_accuracy(a[(0, 3)[s] + r], jj) for s, r in drawn]))
    np.testing.assert_allclose(found["replicates"][:, 0], expected, rtol=0, atol=1e-12)
    single = multibootstrap(a, nboot=NBOOT, seed=5)
    assert single["p_one_sided"] is None and single["arms"]["b"] is None
    assert single["interval"][0] < single["estimate"] < single["interval"][1]


# ---------------------------------------------------------------------------------------------
# Coverage of a known effect on synthetic per-example data (vectorised over studies)
# ---------------------------------------------------------------------------------------------

BETA_A, BETA_B = 0.8, 1.0  # arm effects on the latent scale
DIFFICULTY, SEED_SD, NOISE_SD = 2.0, 0.15, 0.35  # example difficulty, seed effect, run x example sd
RHO = 0.7  # correlation of the two arms' seed (and run x example) effects under the same seed


def true_accuracy(beta: float) -> float:
    """P(beta + seed + difficulty + noise > 0) = Phi(beta / total sd): the accuracy over seeds and
    dev sets, the quantity the Multi-Bootstrap interval is for."""
    return float(stats.norm.cdf(beta / np.sqrt(DIFFICULTY**2 + SEED_SD**2 + NOISE_SD**2)))


def simulate(rng, studies: int, seeds: int, n: int, paired: bool) -> tuple[np.ndarray, np.ndarray]:
    """(studies, seeds, n) 0/1 correctness of A and B on one shared dev set per study: run r gets
    example j right when arm + seed_r + difficulty_j + noise_rj > 0 (most examples are right or wrong
    for every run, a few flip, as with real fine-tuning runs). Paired: the arms ran the same seeds
    (correlated seed and run x example effects); else independent seeds."""
    rho = RHO if paired else 0.0

    def correlated(shape, sd):
        first = rng.normal(0, sd, shape)
        return first, rho * first + np.sqrt(1 - rho**2) * rng.normal(0, sd, shape)

    difficulty = rng.normal(0, DIFFICULTY, (studies, 1, n))
    seed_a, seed_b = correlated((studies, seeds, 1), SEED_SD)
    noise_a, noise_b = correlated((studies, seeds, n), NOISE_SD)
    ya = (BETA_A + seed_a + difficulty + noise_a > 0).astype(float)
    return ya, (BETA_B + seed_b + difficulty + noise_b > 0).astype(float)


def simulated_intervals(seed: int, studies: int, seeds: int, n: int, nboot: int, paired: bool) -> dict:
    """Multi-Bootstrap of many simulated studies with the module's own pieces: one example draw per
    replicate shared by the arms, one seed draw shared when paired; intervals per study."""
    rng = np.random.default_rng(seed)
    ya, yb = simulate(rng, studies, seeds, n, paired)
    out = defaultdict(list)
    for lo in range(0, studies, 100):
        part = slice(lo, min(lo + 100, studies))
        t = ya[part].shape[0]
        ex = example_weights(rng.integers(0, n, (t, nboot, n)), n)
        runs_a = example_weights(rng.integers(0, seeds, (t, nboot, seeds)), seeds)
        runs_b = runs_a if paired else example_weights(rng.integers(0, seeds, (t, nboot, seeds)), seeds)
        rep_a = arm_replicates(mean_scores(ya[part], ex), runs_a)
        rep_b = arm_replicates(mean_scores(yb[part], ex), runs_b)
        found = summarise(rep_a, rep_b)
        out["interval"].append(found["interval"])
        out["arm_a"].append(found["arm_intervals"][0])
        out["arm_b"].append(found["arm_intervals"][1])
    return {k: np.concatenate(v) for k, v in out.items()}


def coverage(found: dict) -> float:
    truth = true_accuracy(BETA_B) - true_accuracy(BETA_A)
    lo, hi = found["interval"][:, 0], found["interval"][:, 1]
    return float(np.mean((lo <= truth) & (truth <= hi)))


@pytest.mark.simulation
@pytest.mark.parametrize("paired", [True, False])
def test_interval_covers_a_known_effect_at_nominal_95(paired: bool) -> None:
    found = simulated_intervals(200 + paired, studies=1000, seeds=8, n=300, nboot=400, paired=paired)
    assert 0.93 <= coverage(found) <= 0.97


def test_paired_interval_is_narrower_than_either_arms_own() -> None:
    found = simulated_intervals(21, studies=300, seeds=8, n=300, nboot=400, paired=True)
    width = {k: np.median(v[:, 1] - v[:, 0]) for k, v in found.items()}
    assert width["interval"] < 0.6 * min(width["arm_a"], width["arm_b"])  # measured 0.38 (paper: ~0.5)

    # end to end on one simulated study: paired beats each arm's own and the unpaired analysis
    rng = np.random.default_rng(5)
    ya, yb = simulate(rng, 1, 8, 300, paired=True)
    a, b = (
        [{"outcome": "succeeded", "score": float(y.mean()), "metric": "accuracy",
          "per_example": {"correct": y.astype(int).tolist()},
          "seeds": {"init": k, "order": k, "subsample": 0}} for k, y in enumerate(arm[0])]
        for arm in (ya, yb)
    )  # fmt: skip
    result = multibootstrap(a, b, nboot=500)
    own = [result["arms"][k]["interval"] for k in "ab"]
    width_of = lambda iv: iv[1] - iv[0]  # noqa: E731
    assert result["paired"] and width_of(result["interval"]) < min(map(width_of, own))
    unpaired = multibootstrap(a, b, nboot=500, paired=False)
    assert width_of(result["interval"]) < width_of(unpaired["interval"])
    assert result["estimate"] == pytest.approx(unpaired["estimate"]) == pytest.approx(yb.mean() - ya.mean())


# ---------------------------------------------------------------------------------------------
# Pairing and fallbacks
# ---------------------------------------------------------------------------------------------


def _runs(seeds, rng, truth, skill=0.7, **extra):
    return [
        {"outcome": "succeeded", "score": 0.5, "metric": "accuracy", "seeds": s,
         "per_example": _classification(rng, 2, truth, skill)[0], **extra}
        for s in seeds
    ]  # fmt: skip


def test_paired_automatically_only_when_seeds_match() -> None:
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, N)
    seeds = [{"init": k, "order": 10 + k, "subsample": 0} for k in range(5)]
    a = _runs(seeds, rng, truth)
    assert multibootstrap(a, _runs(seeds[::-1], rng, truth), nboot=50)["paired"]
    other = [*seeds[:4], {"init": 9, "order": 19, "subsample": 0}]
    assert not multibootstrap(a, _runs(other, rng, truth), nboot=50)["paired"]
    assert not multibootstrap(a, _runs(seeds[:3], rng, truth), nboot=50)["paired"]
    moved = [s | {"subsample": 1} for s in seeds]
    assert not multibootstrap(a, _runs(moved, rng, truth), nboot=50)["paired"]

    forced = multibootstrap(a, _runs(other, rng, truth), nboot=50, paired=True)
    assert (
        forced["paired"] and forced["arms"]["a"]["runs"] == 4 and "2 runs without a partner" in forced["note"]
    )
    with pytest.raises(ValueError):
        multibootstrap(a, _runs(moved, rng, truth), nboot=50, paired=True)
    # errored and pruned trials are not runs; a diverged run has no score
    broken = [
        {"outcome": "errored", "score": None, "seeds": seeds[0]},
        {"outcome": "pruned", "seeds": seeds[1]},
    ]
    assert multibootstrap(a, [*_runs(seeds, rng, truth), *broken], nboot=50)["paired"]


def test_without_per_example_outcomes_only_seeds_are_resampled() -> None:
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 2, N)
    seeds = [{"init": k, "order": 10 + k, "subsample": 0} for k in range(5)]
    a, b = _runs(seeds, rng, truth), _runs(seeds, rng, truth)
    for k, r in enumerate(a + b):
        r["score"] = 0.6 + 0.01 * k
    b[2]["per_example"] = None
    result = multibootstrap(a, b, nboot=200)
    assert result["n_examples"] is None and "not every run kept" in result["note"]
    assert result["estimate"] == pytest.approx(0.05)  # stored scores: 0.65..0.69 minus 0.60..0.64
    assert result["interval"] == pytest.approx([0.05, 0.05])  # paired: every pair differs by 0.05

    counts = {"correct": [1, 2], "predicted": [1, 2], "gold": [1, 3]}
    ner = [{"outcome": "succeeded", "score": 0.8, "metric": "entity_f1", "scores": {"entity_f1_strict": 0.7},
            "seeds": s, "per_example": counts} for s in seeds]  # fmt: skip
    strict = multibootstrap(ner, nboot=50, metric="entity_f1_strict")
    assert (
        strict["n_examples"] is None
        and "cannot be recomputed" in strict["note"]
        and strict["estimate"] == 0.7
    )
    assert multibootstrap(ner, nboot=50)["estimate"] == pytest.approx(2 * 3 / (3 + 4))


def test_one_sided_p_counts_ties_and_is_floored_at_one_over_nboot() -> None:
    rng = np.random.default_rng(6)
    truth = rng.integers(0, 2, N)
    seeds = [{"init": k, "order": 10 + k, "subsample": 0} for k in range(5)]
    a = _runs(seeds, rng, truth)
    same = multibootstrap(a, [dict(r) for r in a], nboot=100)  # B = A run for run: every replicate ties
    assert same["paired"] and same["p_one_sided"] == 1.0 and same["interval"] == [0.0, 0.0]
    b = _runs(seeds, rng, truth, skill=1.0)
    better = multibootstrap(a, b, nboot=100, margin=0.1)
    delta = np.diff(multibootstrap_replicates(a, b, nboot=100)["replicates"], axis=1)
    assert (delta > 0).all() and better["p_one_sided"] == 1 / 100
    assert better["p_margin"] == np.mean(delta >= 0.1) and 0 < better["p_margin"] < 1


def test_a_lower_is_better_metric_reads_p_and_the_margin_on_the_improvement() -> None:
    """Replicates negated and read as lower-is-better give the p and margin probability of the
    plain ones (B's improvement is A - B there), and the interval of the opposite sign."""
    rng = np.random.default_rng(8)
    rep_a, rep_b = rng.normal(0.60, 0.02, (3, 400)), rng.normal(0.62, 0.02, (3, 400))
    high = summarise(rep_a, rep_b, margin=0.01)
    low = summarise(-rep_a, -rep_b, margin=0.01, higher_is_better=False)
    for key in ("p_one_sided", "p_at_least_zero", "p_margin"):
        assert np.array_equal(high[key], low[key]), key
    assert np.allclose(low["interval"], -high["interval"][:, ::-1])
    by_hand = np.maximum(((rep_b - rep_a) <= 0).mean(-1), 1 / 400)
    assert np.array_equal(high["p_one_sided"], by_hand) and (high["p_one_sided"] < 0.5).all()


@pytest.mark.parametrize("bounds", [[125, 125], [7, 1, 7, 200], [2, 0, 3], [1], [300, 299, 300]])
def test_the_reference_draws_made_at_once_are_the_loops(bounds: list[int]) -> None:
    """`randint_rows` against the reference's own loop: per replicate, each bound's
    RandomState.choice in turn (equal bounds included: each draw keeps its own place)."""
    from suite.stats.compare.reference_draws import randint_rows

    for seed in (0, 5):
        found = randint_rows(seed, bounds, 40)
        ref = np.random.RandomState(seed)
        for b in range(40):
            for k, rows in zip(bounds, found, strict=True):
                assert np.array_equal(rows[b], _choice(ref, k))


def test_independent_arms_draw_at_once_what_the_replicate_loop_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.stats.compare import multi_bootstrap as mb
    from suite.stats.compare import reference_draws

    rng = np.random.default_rng(6)
    truth = rng.integers(0, 2, N)
    a = _grid_runs(rng, [(k, 100 + k, 0) for k in range(9)], truth, 0.6)[::-1]  # runs not in seed order
    b = _grid_runs(rng, [(50 + k, 200 + k, 0) for k in range(9)], truth, 0.7)
    at_once = multibootstrap_replicates(a, b, NBOOT, seed=8)["replicates"]
    monkeypatch.setattr(reference_draws, "MOST_VALUES", 0)  # too many to hold: the loop
    looped = multibootstrap_replicates(a, b, NBOOT, seed=8)["replicates"]
    assert np.array_equal(at_once, looped)
    units = [mb.Units.of([r["seeds"] for r in side]) for side in (a, b)]
    assert mb.draws(NBOOT, 8, units, N)[1] is not None  # the example draw rides along
