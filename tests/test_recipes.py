"""The recipe table on synthetic studies with known effects, its tests checked by brute-force
simulation, and `suite compare RUN` end to end."""

import json
from pathlib import Path

import numpy as np
import pytest

from suite.cli import main
from suite.errors import SuiteError
from suite.recipes import failure_test, fisher_power, format_recipe_table, paired_shift, recipe_table, shift


def _runs(recipe: str, scores: np.ndarray, failed: np.ndarray, size: int = 100) -> list[dict]:
    """Runs of one recipe on seeds 0..n-1 (the same seeds for every recipe: paired)."""
    return [
        {
            "key": f"{recipe}|{i}",
            "size": size,
            "hparams": {"lr": 2e-5, "recipe": recipe},
            "seeds": {"init": i, "order": i, "subsample": 0},
            "outcome": "failed" if f else "succeeded",
            "failure": "baseline" if f else None,
            "score": float(s),
        }
        for i, (s, f) in enumerate(zip(scores, failed, strict=True))
    ]


def _study(rng: np.random.Generator, n: int, rates: dict[str, float], shifts: dict[str, float]) -> list[dict]:
    """Recipes with known failure rates; a succeeded run scores 0.65 + its seed's effect (shared
    across recipes) + the recipe's shift + noise; a failed run scores the majority baseline 0.5."""
    seed_effect = rng.normal(0, 0.03, n)
    out = []
    for recipe, rate in rates.items():
        failed = rng.random(n) < rate
        scores = np.where(failed, 0.5, 0.65 + seed_effect + shifts.get(recipe, 0.0) + rng.normal(0, 0.005, n))
        out += _runs(recipe, scores, failed)
    return out


def _rejects(p: float | None) -> bool:
    return p is not None and p <= 0.05


def test_a_recipe_that_halves_the_failure_rate_is_detected_at_the_stated_power() -> None:
    rng = np.random.default_rng(0)
    n, sims = 40, 400
    stated = fisher_power(0.6, 0.3, n, n)
    detected = 0
    for _ in range(sims):
        ref, new = (
            _runs(name, np.full(n, 0.5), rng.random(n) < p) for name, p in (("ref", 0.6), ("new", 0.3))
        )
        detected += _rejects(failure_test(ref, new)["fisher_p"])
    se = np.sqrt(stated * (1 - stated) / sims)
    assert 0.6 < stated < 0.9  # 40 runs a recipe: a halving from 60% is likely, not certain, to show
    assert abs(detected / sims - stated) < 3 * se
    null = sum(
        _rejects(failure_test(*(_runs(k, np.full(n, 0.5), rng.random(n) < 0.4) for k in "ab"))["fisher_p"])
        for _ in range(sims)
    )
    assert null / sims <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)  # Fisher is exact: at most its level


def test_the_table_states_the_power_its_reference_allows() -> None:
    study = _study(np.random.default_rng(1), 20, {"ref": 0.5, "new": 0.2}, {})
    (table,) = recipe_table(study)
    row = table["rows"][1]["vs_reference"]
    ref_rate = table["rows"][0]["failed"] / 20
    assert row["power_to_detect_halving"] == pytest.approx(fisher_power(ref_rate, ref_rate / 2, 20, 20))
    assert row["failure_rate_diff"] == pytest.approx(table["rows"][1]["failed"] / 20 - ref_rate)


def test_paired_shift_covers_the_true_shift_and_beats_the_unpaired_interval() -> None:
    """Seeds that move every recipe alike (std 3 points) hide a 1-point shift from an unpaired
    comparison; pairing by seeds cancels them. The exact interval covers at >= 95%."""
    rng = np.random.default_rng(2)
    sims, covered, widths = 300, 0, {"paired": [], "unpaired": []}
    for _ in range(sims):
        study = _study(rng, 8, {"ref": 0.0, "new": 0.0}, {"new": 0.01})
        ref, new = study[:8], study[8:]
        found = shift(ref, new)
        assert found["method"].startswith("paired")
        covered += found["ci95"][0] <= 0.01 <= found["ci95"][1]
        widths["paired"].append(np.diff(found["ci95"])[0])
        from suite.compare import hodges_lehmann

        widths["unpaired"].append(np.diff(hodges_lehmann(ref, new)["ci95"])[0])
    assert covered / sims >= 0.95 - 3 * np.sqrt(0.05 * 0.95 / sims)
    assert np.median(widths["paired"]) < 0.5 * np.median(widths["unpaired"])


def test_paired_shift_estimate_and_exact_interval_by_hand() -> None:
    d = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # 21 Walsh averages; n = 6: k = 1 (P(W+ <= 0) = 1/64)
    found = paired_shift(d)
    assert found["estimate"] == 3.5 and found["ci95"] == [1.0, 6.0]
    assert paired_shift(d[:5])["ci95"] is None  # 5 pairs: the smallest two-sided p is 1/16


def test_spread_test_detects_a_doubled_std_and_holds_its_level() -> None:
    from suite.compare import brown_forsythe

    rng = np.random.default_rng(3)
    sims, n = 300, 25
    power = np.mean([_rejects(brown_forsythe(rng.normal(0, 1, n), rng.normal(0, 2, n))) for _ in range(sims)])
    level = np.mean([_rejects(brown_forsythe(rng.normal(0, 1, n), rng.normal(0, 1, n))) for _ in range(sims)])
    assert power > 0.6 and level <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)


def test_table_rows_reference_and_errors() -> None:
    study = _study(
        np.random.default_rng(4), 10, {"bert-adam": 0.6, "mosbach": 0.1, "frozen": 0.0}, {"frozen": -0.05}
    )
    (table,) = recipe_table(study)
    assert [r["recipe"] for r in table["rows"]] == ["bert-adam", "mosbach", "frozen"]
    assert table["reference"] == "bert-adam" and table["rows"][0]["vs_reference"] is None
    assert all(r["median"]["ci95"] and r["failure_rate"]["ci95"] for r in table["rows"])
    (other,) = recipe_table(study, reference="mosbach")
    frozen = other["rows"][2]["vs_reference"]
    assert frozen["median_shift"]["method"].startswith("paired") and frozen["median_shift"]["estimate"] < 0
    text = format_recipe_table([other], "accuracy")
    assert "reference mosbach" in text and "(reference)" in text and "Fisher" in text
    with pytest.raises(SuiteError, match="--reference 'nope': no such recipe"):
        recipe_table(study, reference="nope")
    plain = [{**r, "hparams": {"lr": 2e-5}} for r in study]
    with pytest.raises(SuiteError, match="no recipes"):
        recipe_table(plain)


def test_compare_prints_the_recipe_table_of_one_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    study = _study(np.random.default_rng(5), 6, {"bert-adam": 0.5, "llrd-0.9": 0.2}, {})
    (tmp_path / "run.json").write_text(json.dumps({"task": {"metric": {"main": "accuracy"}}}))
    (tmp_path / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in study))
    assert main(["compare", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "recipes at size 100" in out and "llrd-0.9" in out and "reference bert-adam" in out
    assert main(["compare", str(tmp_path), "--reference", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0] and "no such recipe" in err[0]


def test_spread_test_needs_three_runs_a_side() -> None:
    """With 2 runs both deviate equally from their median: Levene's F is infinite at any spread."""
    from suite.compare import brown_forsythe

    assert brown_forsythe(np.array([0.47, 0.49]), np.array([0.40, 0.55])) is None
    assert brown_forsythe(np.array([0.47, 0.49, 0.50]), np.array([0.40, 0.55, 0.52])) is not None
