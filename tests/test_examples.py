"""Per-example statistics: dev-set sampling error of one run, agreement across seeds."""

import numpy as np
import pytest

from suite.stats.estimates import agreement, dev_sampling_error, example_summary, fleiss_kappa


def test_fleiss_kappa_matches_the_worked_example() -> None:
    # Fleiss (1971) / Wikipedia's worked example: 10 subjects, 14 raters, 5 categories -> 0.210.
    table = np.array(
        [
            [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
        ]
    )  # fmt: skip
    assert fleiss_kappa(table) == pytest.approx(0.210, abs=5e-4)


def _fleiss_1971(table: np.ndarray) -> float:
    """Fleiss (1971)'s kappa by hand: the mean agreement of the examples against chance from the
    categories' shares; 1 where chance agreement is 1 (every rater in one category throughout)."""
    table = np.asarray(table, dtype=float)
    raters = table.sum(1)[0]
    p_category = table.sum(0) / table.sum()
    p_example = ((table**2).sum(1) - raters) / (raters * (raters - 1))
    expected = float((p_category**2).sum())
    return 1.0 if expected == 1 else float((p_example.mean() - expected) / (1 - expected))


def test_fleiss_kappa_is_the_1971_formula_on_random_tables() -> None:
    """300 random tables (1-59 examples, 2-5 categories, 2-11 raters, shares from even to nearly
    one-sided), a tenth with every rater in one category (chance agreement 1: statsmodels alone
    would give NaN) and a tenth unanimous per example: the same floats as Fleiss' formula."""
    rng = np.random.default_rng(64)
    for t in range(300):
        rows, k, raters = int(rng.integers(1, 60)), int(rng.integers(2, 6)), int(rng.integers(2, 12))
        table = np.zeros((rows, k), int)
        if t % 10 == 0:
            table[:, int(rng.integers(k))] = raters
        elif t % 10 == 1:
            table[np.arange(rows), rng.integers(0, k, rows)] = raters
        else:
            shares = rng.dirichlet(np.ones(k) * rng.choice([0.2, 1.0, 5.0]))
            table = np.array([rng.multinomial(raters, shares) for _ in range(rows)])
        found, expected = fleiss_kappa(table), _fleiss_1971(table)
        assert found == expected or (np.isnan(found) and np.isnan(expected)), (t, found, expected)
        assert t % 10 != 0 or found == 1.0


def test_dev_sampling_error_of_accuracy_is_the_binomial_one() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 2000)
    correct = rng.random(2000) < 0.7
    record = {
        "score": float(correct.mean()),
        "per_example": {
            "label": labels.tolist(),
            "prediction": np.where(correct, labels, 1 - labels).tolist(),
        },
    }
    error = dev_sampling_error(record, "accuracy")
    p = correct.mean()
    assert error["se"] == pytest.approx(np.sqrt(p * (1 - p) / 2000), rel=0.1)  # sqrt(p(1-p)/n)
    assert error["ci95"][0] < p < error["ci95"][1] and error["unit"].startswith("dev examples")


@pytest.mark.parametrize("num_labels", [2, 3])
def test_class_metrics_from_confusion_counts_are_scikit_learns(num_labels: int) -> None:
    """The bootstrap's fast metrics equal suite.model.metrics' (scikit-learn) on resamples,
    including degenerate ones: one class only, a class never predicted."""
    from suite.model.metrics import classification_scores
    from suite.stats.estimates.examples import FROM_CONFUSION, confusion

    rng = np.random.default_rng(1)
    labels, predictions = rng.integers(0, num_labels, 60), rng.integers(0, num_labels, 60)
    subsets = [rng.integers(0, 60, 60) for _ in range(200)] + [np.flatnonzero(labels == 0)]
    predictions_no_last = np.minimum(predictions, num_labels - 2)
    for i in subsets:
        for shown in (predictions, predictions_no_last, np.zeros_like(predictions)):
            expected = classification_scores(list(FROM_CONFUSION), labels[i], shown[i], num_labels)
            counts = confusion(labels[i], shown[i], num_labels)
            for name, metric in FROM_CONFUSION.items():
                assert metric(counts) == pytest.approx(expected[name], abs=1e-12), (name, i)


def test_ner_sampling_error_resamples_sentences_with_their_counts() -> None:
    record = {
        "score": 0.5,
        "per_example": {"correct": [1, 0] * 50, "predicted": [2, 0] * 50, "gold": [1, 1] * 50},
    }
    error = dev_sampling_error(record, "entity_f1")
    assert 0 < error["se"] < 0.1 and error["ci95"][0] <= 0.5 <= error["ci95"][1]
    one = {"score": 1.0, "per_example": {"correct": [1] * 20, "predicted": [1] * 20, "gold": [1] * 20}}
    assert dev_sampling_error(one, "entity_f1")["se"] == 0.0


def test_agreement_counts_flips_and_kappa() -> None:
    same = {"per_example": {"correct": [1, 0, 1, 1]}}
    assert agreement([same, same, same])["flip_share"] == 0.0
    assert agreement([same, same, same])["fleiss_kappa"] == pytest.approx(1.0)
    flipped = {"per_example": {"correct": [0, 0, 1, 1]}}
    result = agreement([same, flipped])
    assert result["flip_share"] == 0.25 and result["runs"] == 2 and result["examples"] == 4
    rng = np.random.default_rng(1)  # independent coin flips agree by chance only: kappa ~ 0
    coins = [{"per_example": {"correct": rng.integers(0, 2, 3000).tolist()}} for _ in range(5)]
    assert abs(agreement(coins)["fleiss_kappa"]) < 0.03


def test_example_summary_sets_seed_spread_beside_dev_error() -> None:
    records = [
        {"score": s, "per_example": {"exact_match": [1] * int(100 * s) + [0] * (100 - int(100 * s)),
                                     "f1": [1.0] * int(100 * s) + [0.0] * (100 - int(100 * s))}}
        for s in (0.3, 0.5, 0.7)
    ]  # fmt: skip
    summary = example_summary(records, "f1")
    assert summary["across_seeds_std"] == pytest.approx(0.2)
    assert 0.03 < summary["dev_se_median"] < 0.07  # sqrt(.25/100) = 0.05 for the middle run
    assert summary["agreement"]["runs"] == 3


def _noise_records(correct: np.ndarray) -> list[dict]:
    return [{"score": float(c.mean()), "per_example": {"correct": c.tolist()}} for c in correct]


def test_eval_noise_recovers_a_known_split_of_the_between_run_variance() -> None:
    """Runs that differ only by per-example coin flips are all dev-set noise (share ~1); a run-level
    shift adds known real spread, and the share falls to noise / (noise + shift variance)."""
    from suite.stats.estimates import eval_noise

    rng = np.random.default_rng(0)
    runs, n = 400, 400
    rate = rng.beta(4, 2, n)  # each example's chance to be right
    flips = (rng.random((runs, n)) < rate).astype(int)
    found = eval_noise(_noise_records(flips), "accuracy")
    assert found is not None and 0.85 < found["share"] <= 1.0 and found["dominates"] == "dev-set sampling"
    expected_noise = float((rate * (1 - rate)).sum() / n**2)
    assert abs(found["noise_var"] - expected_noise) / expected_noise < 0.1
    shift = rng.normal(0, 0.04, runs)[:, None]  # a run-level shift of each run's correctness rate
    shifted = (rng.random((runs, n)) < np.clip(rate + shift, 0, 1)).astype(int)
    found = eval_noise(_noise_records(shifted), "accuracy")
    truth = expected_noise / (expected_noise + 0.04**2)
    assert abs(found["share"] - truth) < 0.1 and found["dominates"] == "seeds (training)"
    assert eval_noise(_noise_records(flips), "f1") is None  # F1 is not a mean of 0/1 outcomes
    assert eval_noise(_noise_records(flips[:2]), "accuracy") is None


def _one_run_at_a_time(record: dict, metric: str, num_labels: int) -> dict:
    """The straightforward bootstrap the vectorised one replaced: RESAMPLES index draws from one
    generator seeded 0, each resample's score recomputed from its examples."""
    from suite.model.metrics import classification_scores
    from suite.stats.estimates.examples import RESAMPLES

    per = {k: np.asarray(v) for k, v in record["per_example"].items()}
    n = len(next(iter(per.values())))
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(RESAMPLES):
        i = rng.integers(0, n, n)
        if "label" in per:
            draws.append(
                classification_scores([metric], per["label"][i], per["prediction"][i], num_labels)[metric]
            )
        elif "gold" in per:
            denominator = per["predicted"][i].sum() + per["gold"][i].sum()
            draws.append(2 * per["correct"][i].sum() / denominator if denominator else 0.0)
        else:
            draws.append(per[metric][i].mean())
    return {"se": np.std(draws, ddof=1), "ci95": np.percentile(draws, [2.5, 97.5]).tolist(), "examples": n}


@pytest.mark.parametrize(
    ("kind", "metric", "num_labels"),
    [("class", "accuracy", 2), ("class", "f1", 2), ("class", "matthews", 3), ("class", "f1", 3),
     ("ner", "entity_f1", 2), ("qa", "f1", 2), ("qa", "exact_match", 2)],
)  # fmt: skip
def test_all_runs_at_once_equal_one_run_at_a_time(
    kind: str, metric: str, num_labels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dev_sampling_errors scores every run's resamples in one matrix product; each run's SE and
    interval equal the one-run bootstrap's to 1e-12 (runs of two dev-set sizes, one with no
    per-example outcomes, one diverged)."""
    from suite.stats.estimates import dev_sampling_errors

    # 250 resamples on both sides (both read the module's count): the reference scores each
    # resample through scikit-learn, 4x quicker than at the 1,000 a study uses, the same paths.
    monkeypatch.setattr("suite.stats.estimates.examples.RESAMPLES", 250)

    rng = np.random.default_rng(3)

    def per_example(n: int) -> dict:
        if kind == "class":
            labels = rng.integers(0, num_labels, n)
            shown = np.where(rng.random(n) < 0.7, labels, rng.integers(0, num_labels, n))
            return {"label": labels.tolist(), "prediction": shown.tolist()}
        if kind == "ner":
            correct = rng.integers(0, 3, n)
            return {
                "correct": correct.tolist(),
                **{k: (correct + rng.integers(0, 2, n)).tolist() for k in ("predicted", "gold")},
            }
        return {"exact_match": rng.integers(0, 2, n).tolist(), "f1": rng.random(n).tolist()}

    records = [{"score": 0.5, "per_example": per_example(n)} for n in (40, 40, 40, 23)]
    records += [{"score": 0.5}, {"score": None, "per_example": per_example(40)}]
    found = dev_sampling_errors(records, metric, num_labels)
    assert found[-2:] == [None, None]
    for record, got in zip(records[:-2], found[:-2], strict=True):
        want = _one_run_at_a_time(record, metric, num_labels)
        assert got["examples"] == want["examples"]
        assert got["se"] == pytest.approx(want["se"], abs=1e-12)
        assert got["ci95"] == pytest.approx(want["ci95"], abs=1e-12)
