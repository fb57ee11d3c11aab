"""`suite compare`: two studies per shared (size, setting) block, tests that know when they can decide.

The calibration tests run the production tests vectorised over simulated null studies. Monte-Carlo
error at 2000 studies: 0.49 points at a true 5% rate, so the 6% bound is 2 standard errors above
the nominal level (seeds are fixed: each run sees the same studies). Exact tests sit at or below
their level by construction; what these catch is a wrong unit (cells for seeds), a wrong variance
or df, or a p printed where the test could never reach 0.05.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from suite.commands.cli import main
from suite.errors import SuiteError
from suite.stats.compare import compare, compare_block, format_comparison
from suite.stats.decide import exact, t_p, unit_t, welch_t
from suite.stats.estimates import wilson
from tests.designs import grid_records

SIMS = 2000
LEVEL = 0.06  # nominal 5% + 2 Monte-Carlo standard errors
KINDS = {"normal": 0.0, "collapse25": 0.25, "collapse40": 0.40}  # share of runs at the 0.5 baseline


def _rate(p: np.ndarray) -> float:
    return float(np.mean(np.nan_to_num(p, nan=1.0) <= 0.05))


def _study(sizes: dict, lr: float, n: int, shift: float = 0.0, seed_effect: np.ndarray | None = None) -> list:
    """Runs of one setting per size on seeds 0..n-1 (the same seeds at every size, as sweeps draw them)."""
    effect = np.zeros(n) if seed_effect is None else seed_effect
    return [
        {
            "score": base + shift + effect[i],
            "size": size,
            "hparams": {"lr": lr, "batch_size": 16},
            "seeds": {"init": i, "order": i, "subsample": 0},
            "outcome": "succeeded",
        }
        for size, base in sizes.items()
        for i in range(n)
    ]


# --- blocks: never pool sizes or settings ---------------------------------------------------------


def test_two_sizes_compare_per_block_with_the_pairs_found() -> None:
    """Sizes 15 points apart and B 1 point better at each: pooled, the size effect swamps the shift
    (and the seeds recur at every size, so seed pairing found nothing); per block it is +1 each."""
    effect = np.random.default_rng(0).normal(0, 0.03, 8)  # seeds move both studies alike
    a = _study({100: 0.60, "full": 0.75}, 1e-4, 8, 0.0, effect)
    b = _study({100: 0.60, "full": 0.75}, 3e-5, 8, 0.01, effect + np.linspace(-1e-3, 1e-3, 8))
    result = compare(a, b)
    assert [blk["block"] for blk in result["blocks"]] == ["size 100", "size full"]
    assert result["compared"] == {"lr": [1e-4, 3e-5]} and result["matched_on"] == []
    for blk in result["blocks"]:
        assert blk["median_diff"] == pytest.approx(0.01, abs=2e-3)
        assert blk["paired"]["n_pairs"] == 8 and blk["paired"]["median_diff"] == pytest.approx(0.01, abs=1e-3)
        assert blk["paired"]["test"]["p"] < 0.01  # Wilcoxon on 8 independent pairs: decidable
        assert blk["a"]["n"] == 8 and blk["a"]["iqr"] < 0.1  # one size's spread, not the size effect
    text = format_comparison(result, ("A", "B"), "accuracy")
    assert "size 100" in text and "size full" in text and "lr (A 0.0001, B 3e-05)" in text


def test_settings_match_on_what_varies_within_the_studies() -> None:
    """A grid over lr in both studies, warmup constant in each but different: one block per lr."""
    a = [r | {"hparams": {"lr": lr, "warmup": 0.1}} for lr in (1e-5, 2e-5) for r in _study({64: 0.6}, 0, 5)]
    b = [r | {"hparams": {"lr": lr, "warmup": 0.0}} for lr in (1e-5, 2e-5) for r in _study({64: 0.6}, 0, 5)]
    result = compare(a, b)
    assert result["compared"] == {"warmup": [0.1, 0.0]} and result["matched_on"] == ["lr"]
    assert [blk["block"] for blk in result["blocks"]] == ["size 64, lr=1e-05", "size 64, lr=2e-05"]
    assert all(blk["paired"]["n_pairs"] == 5 for blk in result["blocks"])
    (one,) = compare(a, b, setting={"lr": "2e-5"})["blocks"]
    assert one["setting"] == {"lr": 2e-5}
    with pytest.raises(SuiteError, match="warmup is what is compared"):
        compare(a, b, setting={"warmup": "0.1"})
    with pytest.raises(SuiteError, match="no such block"):
        compare(a, b, setting={"lr": "3e-5"})


def _write_run(folder: Path, records: list, **task: object) -> Path:
    folder.mkdir(parents=True)
    spec = {"name": "rte", "metric": {"main": "accuracy"}, "eval_split": "validation", "eval_limit": None}
    spec["max_length"] = 128
    info = {"task": spec | task, "data_sha256": {"train": "a" * 64, "dev": "b" * 64}}
    (folder / "run.json").write_text(json.dumps(info))
    keyed = [r | {"key": f"{r['size']}|{json.dumps(r['seeds'])}"} for r in records]
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keyed))
    return folder


def test_cli_selects_a_size_and_refuses_what_is_not_comparable(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    effect = np.array([0.0, 0.01, -0.01])
    a = _write_run(tmp_path / "a", _study({32: 0.6, 64: 0.7}, 1e-4, 3, 0.0, effect))
    b = _write_run(tmp_path / "b", _study({32: 0.6, 64: 0.7}, 3e-5, 3, 0.01, effect + [0.0, 0.002, 0.001]))
    assert main(["compare", str(a), str(b), "--size", "64"]) == 0
    out = capsys.readouterr().out
    assert "size 64" in out and "size 32" not in out
    assert "Mann-Whitney: cannot decide with 3 runs per arm; needs at least 4" in out
    assert "Wilcoxon signed-rank: cannot decide with 3 pairs; needs at least 6" in out
    apart = _write_run(tmp_path / "c", _study({100: 0.6}, 3e-5, 3))
    limited = _write_run(tmp_path / "d", _study({32: 0.6}, 3e-5, 3), eval_limit=300)
    for other, message in (
        (apart, "share no (size, setting): A has size 32; size 64, B has size 100"),
        (limited, "differ in task.eval_limit (full vs 300): their scores are not comparable"),
    ):
        assert main(["compare", str(a), str(other)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
    assert main(["compare", str(a), str(b), "--size", "48"]) == 2
    assert "--size 48: no such block" in capsys.readouterr().err


@pytest.mark.parametrize(
    "field, value",
    [("task.metric.main", {"metric": {"main": "f1"}}), ("task.max_length", {"max_length": 256})],
)
def test_cli_refuses_other_metrics_and_lengths(tmp_path: Path, capsys, field: str, value: dict) -> None:  # noqa: ANN001
    a = _write_run(tmp_path / "a", _study({32: 0.6}, 1e-4, 3))
    b = _write_run(tmp_path / "b", _study({32: 0.6}, 3e-5, 3), **value)
    assert main(["compare", str(a), str(b)]) == 2
    assert f"differ in {field}" in capsys.readouterr().err


def test_records_of_another_evaluation_set_are_refused() -> None:
    a = _study({32: 0.6}, 1e-4, 3)
    b = [
        r | {"eval_set": {"label": "held-out SQuAD-train, 300 questions"}} for r in _study({32: 0.6}, 3e-5, 3)
    ]
    with pytest.raises(SuiteError, match="differ in eval_set"):
        compare(a, b)


# --- small-N honesty: type-I error of every printed p ---------------------------------------------


def _arms(rng: np.random.Generator, kind: str, n: int, paired: bool = False, shift: float = 0.0) -> tuple:
    """(sims, n) scores of two arms; paired: a shared seed effect plus each arm's own."""
    shared = rng.normal(0, 0.03, (SIMS, n)) if paired else 0.0

    def arm(s: float) -> np.ndarray:
        y = 0.70 + s + shared + rng.normal(0, 0.03, (SIMS, n))
        return np.where(rng.random((SIMS, n)) < KINDS[kind], 0.5, y)

    return arm(0.0), arm(shift)


def _fisher(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n, cache = a.shape[1], {}
    fa, fb = (a == 0.5).sum(1), (b == 0.5).sum(1)
    return np.array([cache.setdefault(k, exact.fisher_p(k[0], n, k[1], n)) for k in zip(fa, fb, strict=True)])


@pytest.mark.parametrize("kind", list(KINDS))
def test_unpaired_tests_hold_their_level_at_5_and_10_runs(kind: str) -> None:
    rng = np.random.default_rng(1)
    for n in (5, 10):
        a, b = _arms(rng, kind, n)
        resamples = 200 if n == 10 else exact.RESAMPLES  # 10 vs 10: random splits, p = (k + 1) / (R + 1)
        rates = {
            "Mann-Whitney": _rate(exact.permutation_p(*exact.ranked(a, b), exact.mean_shift, resamples)),
            "medians": _rate(exact.permutation_p(a, b, exact.median_shift, resamples)),
            "Brown-Forsythe": _rate(exact.permutation_p(a, b, exact.spread_shift, resamples)),
            "Fisher": _rate(_fisher(a, b)),
        }
        _, ci = exact.moses_interval(a, b)
        rates["Moses interval excludes 0"] = float(np.mean((ci[:, 0] > 0) | (ci[:, 1] < 0)))
        assert max(rates.values()) <= LEVEL, (kind, n, rates)


def test_the_tests_that_cannot_decide_at_3_runs_say_so() -> None:
    rng = np.random.default_rng(2)
    a, b = (grid_records(rng.normal(0.7, 0.03, (1, 3, 1))) for _ in range(2))
    for r in a:
        r["hparams"] = {"lr": 1e-4}
    a[0] |= {"score": 0.5, "outcome": "failed"}
    blk = compare_block(a, b)
    needed = {"mann_whitney": 4, "permutation_median": 5, "brown_forsythe": 4, "failures": 14}
    for key, runs in needed.items():
        test = blk[key]
        assert not test["decidable"] and test["p"] is None and test["runs_needed"] == runs
        assert test["note"] == f"cannot decide with 3 runs per arm; needs at least {runs}"
    assert blk["hodges_lehmann"]["ci95"] is None
    assert blk["hodges_lehmann"]["note"] == "no 95% interval with 3 and 3 runs; needs at least 4 per arm"
    paired = blk["paired"]
    assert (
        paired["test"]["note"] == "cannot decide with 3 pairs; needs at least 6"
        and paired["shift"]["ci95"] is None
    )
    text = format_comparison(compare(a, b), ("A", "B"), "accuracy")
    assert "p=" not in text  # at 3 vs 3 no test prints a p-value


def test_permutation_of_medians_needs_five_runs_a_side() -> None:
    """Medians of 4 runs average the middle two: several splits share the most extreme value, so the
    smallest p is 4/70, not Mann-Whitney's 2/70."""
    x = np.arange(8.0)
    assert exact.smallest_p(x[:4], x[4:], exact.median_shift) == pytest.approx(4 / 70)
    assert exact.smallest_p(*exact.ranked(x[:4], x[4:]), exact.mean_shift) == pytest.approx(2 / 70)
    assert exact.runs_needed(exact.median_shift) == 5 and exact.runs_needed(exact.mean_shift) == 4
    tied = np.array([0.5, 0.5, 0.5, 0.71, 0.5, 0.5, 0.72, 0.73])  # 5 runs collapsed to one baseline
    assert exact.smallest_p(*exact.ranked(tied[:4], tied[4:]), exact.mean_shift) == pytest.approx(10 / 70)


@pytest.mark.parametrize("kind", list(KINDS))
def test_paired_signed_rank_holds_its_level_and_says_when_it_cannot_decide(kind: str) -> None:
    rng = np.random.default_rng(3)
    a, b = _arms(rng, kind, 10, paired=True)
    d = b - a
    decidable = (d != 0).sum(1) >= 6  # the compare path prints a p only from 6 pairs that differ
    assert _rate(np.where(decidable, exact.signed_rank_p(d), 1.0)) <= LEVEL
    _, ci = exact.walsh_interval(d)
    assert np.mean((ci[:, 0] > 0) | (ci[:, 1] < 0)) <= LEVEL
    for n in (3, 5):
        blk = compare_block(*(grid_records(y[None, :n, None]) for y in (a[0], b[0])))
        assert blk["paired"]["test"]["runs_needed"] == 6 and not blk["paired"]["test"]["decidable"]


def _crossed(rng: np.random.Generator, k: int, kind: str, shift: float = 0.0, cell: float = 0.01) -> tuple:
    """(sims, k, k) grids of two recipes on one init x order grid: shared init and order effects plus
    each recipe's own (it interacts with the seed); collapse: the lowest latent share at baseline."""
    init, order = rng.normal(0, 0.02, (SIMS, k, 1)), rng.normal(0, 0.02, (SIMS, 1, k))

    def arm(s: float) -> np.ndarray:
        own = rng.normal(0, 0.02, (SIMS, k, 1)) + rng.normal(0, 0.02, (SIMS, 1, k))
        latent = init + order + own + rng.normal(0, cell, (SIMS, k, k))
        cut = stats.norm.ppf(max(KINDS[kind], 1e-9)) * np.sqrt(4 * 0.02**2 + cell**2)
        return np.where(latent < cut, 0.5, 0.70 + s + latent)

    return arm(0.0), arm(shift)


@pytest.mark.parametrize("k", [3, 5])
def test_crossed_grid_tests_hold_their_level_where_cells_do_not(k: int) -> None:
    """The signed-rank test on cells (pairs sharing seeds treated as independent) rejects 17-34% of
    these null studies; the seed-unit tests stay under 6%, paired and unpaired, scores and failures."""
    rng = np.random.default_rng(4 + k)
    for kind in KINDS:
        a, b = _crossed(rng, k, kind)
        fa, fb = (a == 0.5) * 1.0, (b == 0.5) * 1.0
        rates = {
            "paired": _rate(t_p(*unit_t(b - a, 2))),
            "unpaired": _rate(t_p(*welch_t(a, 2, b, 2))),
            "failures paired": _rate(t_p(*unit_t(fb - fa, 2))),
            "failures unpaired": _rate(t_p(*welch_t(fa, 2, fb, 2))),
        }
        assert max(rates.values()) <= LEVEL, (k, kind, rates)
        assert _rate(exact.signed_rank_p((b - a).reshape(SIMS, -1)[:, :9])) > 0.12  # the unit matters


def test_seed_unit_test_holds_its_level_with_one_dominant_seed_axis() -> None:
    """Init effects dominate on a 2 x 3 grid: Satterthwaite's df (estimated from the same mean squares
    as the variance) rejected 8% here; the fewest df of the terms kept stays at the level."""
    rng = np.random.default_rng(8)
    sims = 2 * SIMS
    d = (
        rng.normal(0, 0.04, (sims, 2, 1))
        + rng.normal(0, 0.005, (sims, 1, 3))
        + rng.normal(0, 0.0025, (sims, 2, 3))
    )
    assert _rate(t_p(*unit_t(d, 2))) <= LEVEL


def test_seed_unit_test_has_power_when_cell_noise_dominates() -> None:
    """Truncated components keep the residual's df when the seed axes do not vary: a 2-point shift
    under 2-point cell noise on a 5 x 5 grid is found most of the time (untruncated, Satterthwaite: 11%)."""
    rng = np.random.default_rng(9)
    d = 0.02 + rng.normal(0, 0.02, (SIMS, 5, 5))
    assert _rate(t_p(*unit_t(d, 2))) > 0.5
    assert _rate(t_p(*unit_t(d - 0.02, 2))) <= LEVEL


def test_compare_prints_the_calibrated_seed_unit_test_on_a_crossed_grid() -> None:
    """The block's p is the vectorised test's p on the same data; no cell-based rank test is printed."""
    a, b = _crossed(np.random.default_rng(10), 3, "normal", shift=0.02)
    ra, rb = grid_records(a[:1]), grid_records(b[:1])
    for r in rb:
        r["hparams"] = {"lr": 2e-5}
    blk = compare(ra, rb)["blocks"][0]
    assert blk["design"] == "seed units" and blk["mann_whitney"] is None and blk["hodges_lehmann"] is None
    assert blk["paired"]["test"]["p"] == pytest.approx(float(t_p(*unit_t(b[:1] - a[:1], 2))[0]))
    assert blk["mean_shift"]["p"] == pytest.approx(float(t_p(*welch_t(a[:1], 2, b[:1], 2))[0]))
    assert "init x order seeds" in blk["paired"]["test"]["unit"]
    assert blk["brown_forsythe"]["note"] == "no spread test: the runs share seeds"
    text = format_comparison(compare(ra, rb), ("A", "B"), "accuracy")
    assert "Mann-Whitney" not in text and "t on seed units, paired: mean" in text


def test_compare_tests_spread_shift_failures_and_matched_seeds() -> None:
    rng = np.random.default_rng(7)
    seed_effect = rng.normal(0, 0.05, 30)  # the same seeds move both studies alike
    a = [
        {"score": 0.70 + e + rng.normal(0, 0.002), "outcome": "failed" if i < 6 else "succeeded", "seeds": s}
        for i, (e, s) in enumerate(
            zip(seed_effect, ({"init": i, "order": i, "subsample": 0} for i in range(30)), strict=True)
        )
    ]
    b = [{**r, "score": r["score"] + 0.01, "outcome": "succeeded"} for r in a]
    (result,) = compare(a, b)["blocks"]
    assert result["paired"]["n_pairs"] == 30 and result["paired"]["test"]["p"] < 0.001
    assert result["mann_whitney"]["p"] > 0.2  # the unpaired test cannot see 1 point under 5-point seed noise
    assert result["hodges_lehmann"]["estimate"] == pytest.approx(0.01, abs=0.02)
    assert result["a"]["failure_rate_ci95"] == pytest.approx(wilson(6, 30)["ci95"])
    assert result["failures"]["name"] == "Fisher" and result["failures"]["p"] < 0.05
    wide = [{"score": 0.7 + 4 * (r["score"] - 0.7)} for r in a]
    (spread,) = compare(a, wide)["blocks"]
    assert spread["brown_forsythe"]["p"] < 0.001 and spread["paired"] is None
    text = format_comparison(compare(a, b), ("A", "B"), "accuracy")
    for phrase in ("Hodges-Lehmann", "Brown-Forsythe", "Wilcoxon", "Wilson", "across runs"):
        assert phrase in text


def test_a_run_that_scored_exactly_zero_is_a_pair_not_a_missing_score() -> None:
    """Collapsed runs score exactly 0 (MCC, entity F1, EM): they are the runs a paired test must
    keep, not drop as if they had no score."""
    base = np.array([0.0, 0.0, 0.5, 0.6, 0.55, 0.0, 0.62, 0.58])
    a = [
        {"score": float(x), "seeds": {"init": i, "order": 50 + i, "subsample": 0}, "hparams": {}, "size": 64}
        for i, x in enumerate(base)
    ]
    b = [{**r, "score": r["score"] + 0.1} for r in a]
    (block,) = compare(a, b)["blocks"]
    assert block["paired"]["n_pairs"] == 8 and block["paired"]["median_diff"] == pytest.approx(0.1)
    assert block["paired"]["test"]["decidable"]


def test_a_matrix_of_studies_holm_corrects_every_pair() -> None:
    """Three studies on the same seeds: C is 5 points better than A and B, B equals A up to noise.
    Every pair is compared per block; Holm's adjusted p is never below the raw one and only the
    pairs with C differ."""
    from suite.stats.compare import compare_matrix, format_matrix

    effect = np.random.default_rng(1).normal(0, 0.02, 8)
    noise = np.random.default_rng(2).normal(0, 0.002, 8)
    a = _study({100: 0.60}, 1e-4, 8, 0.0, effect)
    b = _study({100: 0.60}, 3e-5, 8, 0.0, effect + noise)
    c = _study({100: 0.60}, 2e-5, 8, 0.05, effect)
    a, b, c = ([{**r, "metric": "accuracy"} for r in side] for side in (a, b, c))
    found = compare_matrix([("A", a), ("B", b), ("C", c)])
    pairs = {(r["a"], r["b"]): r for r in found["rows"]}
    assert found["comparisons"] == 3 and set(pairs) == {("A", "B"), ("A", "C"), ("B", "C")}
    assert all(r["p_holm"] >= r["p_two_sided"] and r["paired"] for r in found["rows"])
    assert pairs[("A", "C")]["differ"] and pairs[("B", "C")]["differ"] and not pairs[("A", "B")]["differ"]
    assert abs(pairs[("A", "C")]["estimate"] - 0.05) < 1e-9
    assert "3 comparisons" in format_matrix(found) and "Holm" in format_matrix(found)


def test_all_pairs_of_one_studys_recipes_are_holm_corrected(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`suite compare RUN --all-pairs`: the recipes of one study, every pair per block, Holm over all."""
    effect = np.random.default_rng(3).normal(0, 0.02, 8)
    records = []
    for name, shift in (("base", 0.0), ("same", 0.0), ("better", 0.05)):
        for r in _study({100: 0.60}, 1e-4, 8, shift, effect):
            records.append({**r, "metric": "accuracy", "hparams": {**r["hparams"], "recipe": name}})
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"task": {"metric": {"main": "accuracy"}}}))
    (run / "trials.jsonl").write_text(
        "".join(json.dumps({**r, "key": str(i)}) + "\n" for i, r in enumerate(records))
    )
    assert main(["compare", str(run), "--all-pairs"]) == 0
    out = capsys.readouterr().out
    assert "3 comparisons" in out and out.count("Holm") == 4
    assert "better - base" in out and "same - base" in out and "better - same" in out
    rows = [line for line in out.splitlines() if line.startswith("  ") and "Holm" in line]
    assert [line.endswith(": differ, better ahead") for line in rows] == [
        False,
        True,
        True,
    ]


# --- the metric's direction -------------------------------------------------------------------------


@pytest.fixture
def error_rate(monkeypatch: pytest.MonkeyPatch) -> str:
    """A lower-is-better metric, faked through the metric table."""
    from suite.config import task

    monkeypatch.setattr(task, "LOWER_IS_BETTER", {"error_rate"})
    return "error_rate"


def _mirrored(records: list, metric: str) -> list:
    return [{**r, "metric": metric, "score": -r["score"]} for r in records]


def test_a_lower_is_better_metric_mirrors_every_verdict(error_rate: str) -> None:
    """The runs of a higher-is-better metric, and the same runs with their scores negated under a
    lower-is-better one, must give the same verdicts (the same side ahead, the same p) and
    differences of the opposite sign."""
    effect = np.random.default_rng(5).normal(0, 0.02, 8)
    noise = np.random.default_rng(6).normal(0, 0.004, 8)
    a = [{**r, "metric": "accuracy"} for r in _study({100: 0.60}, 1e-4, 8, 0.0, effect)]
    b = [{**r, "metric": "accuracy"} for r in _study({100: 0.60}, 3e-5, 8, 0.02, effect + noise)]
    high, low = compare(a, b), compare(_mirrored(a, error_rate), _mirrored(b, error_rate))
    assert high["higher_is_better"] and not low["higher_is_better"]
    (h,), (lo,) = high["blocks"], low["blocks"]
    hv, lv = h["verdicts"], lo["verdicts"]
    assert hv["outperform"]["better"] == lv["outperform"]["better"] == "B"
    assert lv["outperform"]["p_a_beats_b"] == hv["outperform"]["p_a_beats_b"]
    assert lv["outperform"]["interval"] == hv["outperform"]["interval"]
    assert hv["aso"]["better"] == lv["aso"]["better"] == "B"
    assert lv["aso"]["epsilon_min"] == pytest.approx(hv["aso"]["epsilon_min"])
    hm, lm = hv["multibootstrap"], lv["multibootstrap"]
    assert lm["estimate"] == pytest.approx(-hm["estimate"]) and hm["estimate"] > 0
    assert lm["interval"] == pytest.approx([-hm["interval"][1], -hm["interval"][0]])
    assert lm["p_one_sided"] == hm["p_one_sided"] < 0.05  # B is better in both
    assert lo["paired"]["test"]["p"] == pytest.approx(h["paired"]["test"]["p"])
    text = format_comparison(low, ("A", "B"), error_rate)
    assert "error_rate (lower is better)" in text and "p(B - A >= 0)" in text
    # the metric table decides: the same negated runs under a higher-is-better name put A ahead
    plain = compare(_mirrored(a, "loss_like"), _mirrored(b, "loss_like"))["blocks"][0]["verdicts"]
    assert plain["outperform"]["better"] == plain["aso"]["better"] == "A"
    assert plain["multibootstrap"]["p_one_sided"] > 0.95


def test_a_matrix_names_the_side_ahead_by_the_metrics_direction(error_rate: str) -> None:
    from suite.stats.compare import compare_matrix

    effect = np.random.default_rng(1).normal(0, 0.02, 8)
    sides = [("A", 0.0), ("C", 0.05)]
    high = [(n, [{**r, "metric": "accuracy"} for r in _study({100: 0.6}, lr, 8, s, effect)])
            for (n, s), lr in zip(sides, (1e-4, 2e-5), strict=True)]  # fmt: skip
    low = [(n, _mirrored(runs, error_rate)) for n, runs in high]
    (h,), (lo,) = compare_matrix(high)["rows"], compare_matrix(low)["rows"]
    assert h["better"] == lo["better"] == "C" and h["differ"] and lo["differ"]
    assert lo["estimate"] == pytest.approx(-h["estimate"]) and lo["p_holm"] == h["p_holm"]


def test_macro_f1_keeps_the_tasks_classes_on_a_sample_missing_one(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Three classes; the evaluation sample holds no example of class 2 and no run predicts it.
    The Multi-Bootstrap's F1 is then the macro F1 over the task's three classes (class 2 scores 0),
    as the runs' own scores are, never the binary F1 of the two classes it sees."""
    from suite.model.metrics import classification_scores
    from suite.stats.compare import class_count

    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, 80)

    def side(skill: float, lr: float) -> list:
        out = []
        for r in _study({100: 0.0}, lr, 6):
            pred = np.where(rng.random(80) < skill, labels, 1 - labels)
            per = {"label": labels.tolist(), "prediction": pred.tolist()}
            score = classification_scores(["f1"], labels, pred, num_labels=3)["f1"]  # the run's own
            out.append({**r, "metric": "f1", "per_example": per, "score": score})
        return out

    a, b = side(0.6, 1e-4), side(0.8, 3e-5)
    info = {"task": {"head": "classification", "labels": ["x", "y", "z"], "metric": {"main": "f1"}}}
    assert class_count(info) == 3 and class_count({"task": {"head": "tagging", "labels": ["PER"]}}) is None
    mb = compare(a, b, num_labels=class_count(info))["blocks"][0]["verdicts"]["multibootstrap"]
    expected = np.mean([r["score"] for r in b]) - np.mean([r["score"] for r in a])  # sklearn, 3 classes
    assert mb["n_examples"] == 80 and mb["estimate"] == pytest.approx(expected)
    binary = compare(a, b)["blocks"][0]["verdicts"]["multibootstrap"]  # classes inferred from the sample
    inferred = [classification_scores(["f1"], labels, np.array(r["per_example"]["prediction"]), 2)["f1"]
                for r in b + a]  # fmt: skip
    assert binary["estimate"] == pytest.approx(np.mean(inferred[:6]) - np.mean(inferred[6:]))
    assert abs(binary["estimate"] - expected) > 0.01
    # `suite compare` passes the task's classes from run.json
    classes = {"head": "classification", "labels": ["x", "y", "z"], "metric": {"main": "f1"}}
    run_a, run_b = (_write_run(tmp_path / k, side, **classes) for k, side in (("a", a), ("b", b)))
    assert main(["compare", str(run_a), str(run_b)]) == 0
    assert "Multi-Bootstrap (6 seed-paired runs" in (out := capsys.readouterr().out)
    assert f"B - A {100 * expected:+.2f} [" in out
    other = _write_run(tmp_path / "c", b, **(classes | {"labels": ["x", "y"]}))
    assert main(["compare", str(run_a), str(other)]) == 2
    assert "differ in task.labels" in capsys.readouterr().err
