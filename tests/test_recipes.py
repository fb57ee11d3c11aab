"""The recipe table on synthetic studies with known effects, its tests checked by brute-force
simulation, per (size, setting), and `suite compare RUN` end to end."""

import json
from pathlib import Path

import numpy as np
import pytest

from suite.commands.cli import main
from suite.errors import SuiteError
from suite.stats.compare import hodges_lehmann
from suite.stats.compare.recipes import failures, fisher_power, format_recipe_table, recipe_table, shift
from suite.stats.decide import exact, unit_t
from suite.stats.decide.paired import METHOD
from suite.study.records import finite_scores
from tests.designs import grid_records


def _runs(
    recipe: str, scores: np.ndarray, failed: np.ndarray, size: int = 100, lr: float = 2e-5
) -> list[dict]:
    """Runs of one recipe on seeds 0..n-1 (the same seeds for every recipe: paired)."""
    return [
        {
            "key": f"{recipe}|{lr}|{i}",
            "size": size,
            "hparams": {"lr": lr, "recipe": recipe},
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
        detected += _rejects(failures(ref, new)["p"])
    se = np.sqrt(stated * (1 - stated) / sims)
    assert 0.6 < stated < 0.9  # 40 runs a recipe: a halving from 60% is likely, not certain, to show
    assert abs(detected / sims - stated) < 3 * se
    null = sum(
        _rejects(failures(*(_runs(k, np.full(n, 0.5), rng.random(n) < 0.4) for k in "ab"))["p"])
        for _ in range(sims)
    )
    assert null / sims <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)  # Fisher is exact: at most its level


def test_the_table_states_the_power_its_reference_allows() -> None:
    study = _study(np.random.default_rng(1), 20, {"ref": 0.5, "new": 0.2}, {})
    (table,) = recipe_table(study)
    row = table["rows"][1]["vs_reference"]
    ref_rate = table["rows"][0]["failed"] / 20
    assert row["failures"]["power_to_detect_halving"] == pytest.approx(
        fisher_power(ref_rate, ref_rate / 2, 20, 20)
    )
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
        assert found["paired"] and found["method"].startswith("paired Hodges-Lehmann")
        covered += found["ci95"][0] <= 0.01 <= found["ci95"][1]
        widths["paired"].append(np.diff(found["ci95"])[0])
        widths["unpaired"].append(np.diff(hodges_lehmann(finite_scores(ref), finite_scores(new))["ci95"])[0])
    assert covered / sims >= 0.95 - 3 * np.sqrt(0.05 * 0.95 / sims)
    assert np.median(widths["paired"]) < 0.5 * np.median(widths["unpaired"])


def test_paired_shift_estimate_and_exact_interval_by_hand() -> None:
    d = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # 21 Walsh averages; n = 6: k = 1 (P(W+ <= 0) = 1/64)
    estimate, ci = exact.walsh_interval(d)
    assert estimate == 3.5 and list(ci) == [1.0, 6.0]
    assert exact.walsh_interval(d[:5])[1] is None  # 5 pairs: the smallest two-sided p is 1/16


def test_spread_test_detects_a_doubled_std_and_holds_its_level() -> None:
    """Brown-Forsythe's statistic by permutation, 1000 studies of 25 runs a side (200 random splits
    each); Monte-Carlo error at 5%: 0.7 points."""
    rng = np.random.default_rng(3)
    sims, n = 1000, 25
    x = rng.normal(0, 1, (sims, n))
    power = np.mean(exact.permutation_p(x, rng.normal(0, 2, (sims, n)), exact.spread_shift, 200) <= 0.05)
    level = np.mean(exact.permutation_p(x, rng.normal(0, 1, (sims, n)), exact.spread_shift, 200) <= 0.05)
    assert power > 0.6 and level <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / sims)


def test_table_rows_reference_and_errors() -> None:
    study = _study(
        np.random.default_rng(4), 10, {"bert-adam": 0.6, "mosbach": 0.1, "frozen": 0.0}, {"frozen": -0.05}
    )
    (table,) = recipe_table(study)
    assert [r["recipe"] for r in table["rows"]] == ["bert-adam", "mosbach", "frozen"]
    assert table["reference"] == "bert-adam" and table["rows"][0]["vs_reference"] is None
    assert all(r["median"]["ci95"] and r["failure_rate"]["ci95"] for r in table["rows"])
    spread = table["rows"][2]["vs_reference"]["spread"]  # bert-adam fails half its runs, frozen none
    assert spread["decidable"] and spread["p"] < 0.05
    (other,) = recipe_table(study, reference="mosbach")
    frozen = other["rows"][2]["vs_reference"]
    assert frozen["median_shift"]["paired"] and frozen["median_shift"]["estimate"] < 0
    text = format_recipe_table([other], "accuracy")
    assert "default mosbach" in text and "(reference)" in text and "Fisher" in text
    assert all(r["reference"] == "mosbach" for r in other["rows"]) and "vs mosbach:" in text
    with pytest.raises(SuiteError, match="--reference 'nope': no such recipe"):
        recipe_table(study, reference="nope")
    plain = [{**r, "hparams": {"lr": 2e-5}} for r in study]
    with pytest.raises(SuiteError, match="no recipes"):
        recipe_table(plain)


def test_a_recipe_on_a_grid_gives_one_row_per_setting() -> None:
    """Recipes run on an lr grid: one table per (size, lr), each row exactly one setting, never the
    recipe's runs pooled over lr; the recipe's own hyperparameters are what is compared."""
    rng = np.random.default_rng(6)
    study = []
    for lr, base in ((2e-5, 0.6), (5e-5, 0.75)):  # lr moves every recipe by 15 points
        for recipe, extra in (("bert-adam", {"bias_correction": False}), ("mosbach", {"epochs": 6})):
            runs = _runs(recipe, base + rng.normal(0, 0.01, 6), np.zeros(6, bool), lr=lr)
            study += [r | {"hparams": r["hparams"] | extra} for r in runs]
    tables = recipe_table(study)
    assert [t["block"] for t in tables] == ["size 100, lr=2e-05", "size 100, lr=5e-05"]
    for t in tables:
        for row in t["rows"]:
            assert row["hparams"]["lr"] == t["setting"]["lr"] and row["iqr"]["estimate"] < 0.05
    (chosen,) = recipe_table(study, setting={"lr": "5e-5"})
    assert chosen["setting"] == {"lr": 5e-5}
    with pytest.raises(SuiteError, match="epochs is what is compared"):
        recipe_table(study, setting={"epochs": "6"})
    assert "recipes at size 100, lr=2e-05" in format_recipe_table(tables, "accuracy")


def test_recipes_on_a_crossed_grid_are_tested_on_seed_units() -> None:
    """On a shared init x order grid the paired shift is the seed-unit mean with its t interval (the
    cell-paired signed-rank interval rejected 20-30% of null studies), and failures use the seed-unit
    test, with no Fisher power claimed."""
    rng = np.random.default_rng(7)
    y = {
        name: 0.7 + rng.normal(0, 0.02, (1, 3, 1)) + rng.normal(0, 0.02, (1, 3, 3)) for name in ("ref", "new")
    }
    study = []
    for name, grid in y.items():
        runs = grid_records(grid)
        runs[0] |= {"score": 0.5, "outcome": "failed"}
        study += [r | {"hparams": {"lr": 2e-5, "recipe": name}} for r in runs]
    (table,) = recipe_table(study)
    versus = table["rows"][1]["vs_reference"]
    moved = versus["median_shift"]
    assert moved["paired"] and moved["method"] == METHOD
    d = y["new"] - y["ref"]
    d[0, 0, 0] = 0.0  # both recipes' first cell failed at the same baseline
    assert moved["estimate"] == pytest.approx(float(unit_t(d, 2)[0][0]))
    assert versus["failures"]["name"].startswith("failures, t on seed units")
    assert versus["failures"]["power_to_detect_halving"] is None
    assert versus["spread"]["note"] == "no spread test: the runs share seeds"


def test_each_row_is_tested_against_its_declared_reference_else_the_first_recipe(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Like for like: a recipe that declares `reference:` in the sweep (run.json's sweep.references)
    is tested against it, one without against the sweep's first recipe; the table names each."""
    rates = {"bert-adam": 0.5, "adamw": 0.3, "mosbach": 0.1, "llrd-0.9": 0.2}
    study = _study(np.random.default_rng(6), 6, rates, {})
    references = {"mosbach": "bert-adam", "llrd-0.9": "adamw"}
    (table,) = recipe_table(study, references=references)
    used = {r["recipe"]: r["reference"] for r in table["rows"]}
    assert used == {
        "bert-adam": "bert-adam",
        "adamw": "bert-adam",
        "mosbach": "bert-adam",
        "llrd-0.9": "adamw",
    }
    llrd = next(r for r in table["rows"] if r["recipe"] == "llrd-0.9")["vs_reference"]
    rate = {
        name: np.mean([r["outcome"] == "failed" for r in study if r["hparams"]["recipe"] == name])
        for name in rates
    }
    assert llrd["failure_rate_diff"] == pytest.approx(rate["llrd-0.9"] - rate["adamw"])
    sweep = {"references": references}
    (tmp_path / "run.json").write_text(json.dumps({"task": {"metric": {"main": "accuracy"}}, "sweep": sweep}))
    (tmp_path / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in study))
    assert main(["compare", str(tmp_path)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if "|" in line}
    assert (
        "vs adamw:" in rows["llrd-0.9"]
        and "vs bert-adam:" in rows["mosbach"]
        and "vs bert-adam:" in rows["adamw"]
    )
    assert rows["bert-adam"].endswith("(reference)")


def test_compare_prints_the_recipe_table_of_one_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    study = _study(np.random.default_rng(5), 6, {"bert-adam": 0.5, "llrd-0.9": 0.2}, {})
    (tmp_path / "run.json").write_text(json.dumps({"task": {"metric": {"main": "accuracy"}}}))
    (tmp_path / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in study))
    assert main(["compare", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "recipes at size 100" in out and "llrd-0.9" in out and "vs bert-adam:" in out
    assert main(["compare", str(tmp_path), "--reference", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0] and "no such recipe" in err[0]


def test_the_table_says_which_tests_cannot_decide_at_three_runs() -> None:
    """At 3 runs a recipe no test of the table reaches 0.05: each says so once, with the runs it needs."""
    study = _study(np.random.default_rng(8), 3, {"bert-adam": 0.34, "mosbach": 0.0}, {"mosbach": 0.01})
    (table,) = recipe_table(study)
    versus = table["rows"][1]["vs_reference"]
    assert versus["spread"]["note"] == "cannot decide with 3 runs per arm; needs at least 4"
    assert (
        versus["median_shift"]["ci95"] is None
        and "needs at least 4 per arm" in versus["median_shift"]["note"]
    )
    text = format_recipe_table([table], "accuracy")
    assert "p=" not in text and "Brown-Forsythe (permutation): cannot decide with 3 runs per arm" in text
