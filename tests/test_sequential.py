"""Sequential stopping (suite.stats.compare.sequential) by simulation with known answers: the width rule
must keep the final median interval's coverage (the current width alone does not: 91-92%), and the
decided rule its type-I error over repeated looks (a 95% interval at every look does not: 13-15%).

The simulations run the module's own vectorised code (`stacked_intervals`, the leaderboard's
median interval for T studies at once; `confirmed`; `stacked_shift`), and each rule also runs
through the record-level functions on a subset, so that the figures cannot drift from the code."""

from __future__ import annotations

import numpy as np
import pytest

from suite.stats.compare import hodges_lehmann
from suite.stats.compare import sequential as sq
from suite.stats.compare.studies import paired
from suite.stats.decide import paired_units, unpaired_units
from suite.stats.design import layout
from suite.stats.estimates import intervals, stacked_intervals
from tests.designs import grid_records, independent_records

START, BUDGET = 3, 30
LOOKS = sq.looks(START, BUDGET)  # 3, 5, 8, 12, 18, 27, 30
STUDIES = 3000  # Monte-Carlo SE of a 95% coverage: 0.4%
RESAMPLES = 500  # per simulated interval (the leaderboard: 2000); the percentiles' own noise is small
CENTRE = 0.85  # the true median of every simulated score distribution


def draw(rng: np.random.Generator, kind: str, sd: float, size: tuple[int, ...]) -> np.ndarray:
    """Scores with median CENTRE and standard deviation `sd` points: normal, or lognormal(0, 0.5)
    mirrored into a long lower tail (runs that partly collapse; skewness -1.75)."""
    z = rng.standard_normal(size)
    if kind == "normal":
        return CENTRE + sd / 100 * z
    spread = np.sqrt((np.exp(0.25) - 1) * np.exp(0.25))  # the sd of lognormal(0, 0.5)
    return CENTRE - sd / 100 * (np.exp(0.5 * z) - 1) / spread


def median_intervals(y: np.ndarray, seed: int) -> np.ndarray:
    """(T, 2) leaderboard median intervals of T studies of independent runs y (T, n); NaN: none."""
    if y.shape[1] < 2:
        return np.full((len(y), 2), np.nan)
    lay = layout(independent_records(y[:1]))
    chunks = [
        stacked_intervals(lay, y[i : i + 500, None, :, None], "median", RESAMPLES, seed + i)
        for i in range(0, len(y), 500)
    ]
    return np.concatenate(chunks)


def half(ci: np.ndarray) -> np.ndarray:
    return (ci[:, 1] - ci[:, 0]) / 2


def width_rule(y: np.ndarray, target: float, naive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each study (one entry) adds runs look by look until `confirmed` (naive: until its current
    half-width <= target) or the budget: its final interval (T, 2) and runs (T,)."""
    active, final, stopped = np.ones(len(y), bool), np.full((len(y), 2), np.nan), np.zeros(len(y), int)
    for n in LOOKS:
        idx = np.flatnonzero(active)
        if not idx.size:
            break
        now = median_intervals(y[idx, :n], seed=n)
        if naive:
            with np.errstate(invalid="ignore"):
                stop = half(now) <= target / 100
        else:
            stop = sq.confirmed(
                half(now), half(median_intervals(y[idx, : sq.earlier_look(n)], 1000 + n)), n, target
            )
        stop |= n == BUDGET
        final[idx[stop]], stopped[idx[stop]], active[idx[stop]] = now[stop], n, False
    return final, stopped


def covered(ci: np.ndarray) -> np.ndarray:
    return (ci[:, 0] <= CENTRE) & (CENTRE <= ci[:, 1])


# --- looks --------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, budget", [(3, 30), (1, 10), (4, 50), (5, 6), (3, 3), (7, 5)])
def test_looks_grow_from_the_current_runs_to_the_budget(start: int, budget: int) -> None:
    found = sq.looks(start, budget)
    assert found[0] == start and found[-1] == max(start, budget)
    assert all(b > a for a, b in zip(found, found[1:], strict=False))
    assert all(sq.next_look(a, budget) == b for a, b in zip(found, found[1:], strict=False))
    assert all(sq.earlier_look(b) == a for a, b in zip(found, found[1:], strict=False) if b < budget)
    assert sq.looks(3, 30) == [3, 5, 8, 12, 18, 27, 30]


# --- precise enough ----------------------------------------------------------------------------


def test_the_simulated_interval_is_the_leaderboards() -> None:
    """`stacked_intervals` on one study with the leaderboard's seed and resamples gives exactly
    `intervals`' median interval, which `halfwidth` reads."""
    rng = np.random.default_rng(0)
    for n in (3, 8, 18):
        y = draw(rng, "lognormal", 2.0, (1, n))
        records = independent_records(y)
        ci = stacked_intervals(layout(records), y[:, None, :, None], "median", 2000, 0)[0]
        assert np.allclose(ci, intervals(records)["median"]["ci95"])
        assert np.isclose(sq.halfwidth(records), (ci[1] - ci[0]) / 2)
    assert sq.halfwidth(independent_records(np.full((1, 3), 0.8))) is None  # 3 runs alike: no interval


# Measured coverage and mean runs (3000 studies each): in the module docstring of sequential.
CASES = [
    ("normal", 2.0, 1.0),
    ("normal", 1.0, 1.0),
    ("normal", 3.0, 2.0),
    ("normal", 0.5, 2.0),
    ("lognormal", 2.0, 1.0),
    ("lognormal", 3.0, 2.0),
]


@pytest.mark.simulation
@pytest.mark.parametrize("kind, sd, target", CASES)
def test_the_width_rule_keeps_the_final_interval_covering(kind: str, sd: float, target: float) -> None:
    """Coverage of the true median by the interval the rule stops at >= 93% at nominal 95%; the
    naive rule (stop once the current half-width <= target) falls below it in the harder cases."""
    rng = np.random.default_rng(CASES.index((kind, sd, target)))
    y = draw(rng, kind, sd, (STUDIES, BUDGET))
    final, n = width_rule(y, target)
    coverage = covered(final).mean()
    print(f"{kind} sd {sd} target {target}: coverage {coverage:.3f}, runs {n.mean():.1f}")
    assert coverage >= 0.93, coverage
    assert np.all(half(final)[n < BUDGET] <= target / 100)  # it stops only within the target


def test_the_naive_width_rule_undercovers() -> None:
    """Why `confirmed` asks an earlier nested sample: stopping on the current width alone selects
    the studies whose interval came out narrow by chance, and those miss (normal, sd 2, target 1)."""
    y = draw(np.random.default_rng(0), "normal", 2.0, (STUDIES, BUDGET))  # CASES[0]'s studies
    final, n = width_rule(y, 1.0, naive=True)
    print(f"naive: coverage {covered(final).mean():.3f}, runs {n.mean():.1f}")
    assert covered(final).mean() < 0.93


def test_precise_enough_on_records_agrees_with_the_simulation() -> None:
    """The record-level rule (`precise_enough` on 200 entries at once, the leaderboard's 2000
    resamples) stops the studies at the simulation's looks, up to bootstrap noise at the boundary
    (measured: 88% at the same look, mean runs 23.9 against 23.5), and its final intervals cover
    (92% of 200)."""
    kind, sd, target = "lognormal", 2.0, 1.0
    y = draw(np.random.default_rng(7), kind, sd, (200, BUDGET))
    _, simulated = width_rule(y, target)
    active, stopped, hits = list(range(len(y))), np.zeros(len(y), int), np.zeros(len(y), bool)
    for n in LOOKS:
        groups = [independent_records(y[i : i + 1, :n]) for i in active]
        found = sq.precise_enough(groups, target, BUDGET)
        assert found["n"] == [n] * len(active) and found["stop"] == (not found["not_yet"] or n == BUDGET)
        done = [i for k, i in enumerate(active) if k not in set(found["not_yet"]) or n == BUDGET]
        for i, group in zip(active, groups, strict=True):
            if i in done:
                ci = intervals(group)["median"]["ci95"]
                stopped[i], hits[i] = n, ci[0] <= CENTRE <= ci[1]
        active = [i for i in active if i not in done]
    agree = np.mean(stopped == simulated)
    print(
        f"records: coverage {hits.mean():.3f}, runs {stopped.mean():.1f} (simulated {simulated.mean():.1f})"
    )
    print(f"records: same look as simulated {agree:.3f}")
    assert agree >= 0.85 and abs(stopped.mean() - simulated.mean()) <= 1.5 and hits.mean() >= 0.9
    assert np.all(stopped >= 5)  # an earlier sample of 2 runs confirms nothing


def test_precise_enough_reports_and_words_the_verdict() -> None:
    rng = np.random.default_rng(3)
    tight, loose = (independent_records(draw(rng, "normal", sd, (1, 12))) for sd in (0.3, 3.0))
    found = sq.precise_enough([tight, loose], 1.0, BUDGET)
    assert found["not_yet"] == [1] and not found["stop"] and found["next_n"] == 18
    assert found["halfwidths"][0] <= 1.0 < found["halfwidths"][1] == found["widest"]
    assert found["verdict"].startswith("continue: 1 entry not yet within 1 points at n=12 (widest ")
    assert found["verdict"].endswith("; next n=18")
    done = sq.precise_enough([tight], 1.0, BUDGET)
    assert (
        done["precise"] and done["verdict"] == "stopped: every entry's median half-width <= 1 points at n=12"
    )
    spent = sq.precise_enough([tight, loose], 1.0, max_runs=12)
    assert spent["budget_spent"] and spent["next_n"] is None
    assert spent["verdict"].startswith("budget spent: 1 entry not yet within 1 points at n=12 (widest ")
    few = sq.precise_enough([independent_records(np.full((1, 3), 0.8))], 1.0, BUDGET)
    assert few["halfwidths"] == [None] and few["next_n"] == 5
    assert "1 with no interval yet" in few["verdict"]


# --- decided -----------------------------------------------------------------------------------

N_LOOKS = len(LOOKS)


def first_decided(xa: np.ndarray, xb: np.ndarray, paired: bool, alpha: float) -> np.ndarray:
    """(T,) the 1-based look at which each study's interval at level 1 - alpha first excludes 0
    (0: never within the budget)."""
    found = np.zeros(len(xa), int)
    for look, n in enumerate(LOOKS, 1):
        _, ci, _ = sq.stacked_shift(xa[:, :n], xb[:, :n], alpha, paired)
        with np.errstate(invalid="ignore"):
            now = (ci[:, 0] > 0) | (ci[:, 1] < 0)
        found = np.where((found == 0) & now, look, found)
    return found


def arms(rng: np.random.Generator, paired: bool, shift_sd: float, size: int) -> tuple[np.ndarray, ...]:
    """Two arms, sd 2 points each: paired runs share their seed's effect (half the variance)."""
    if paired:
        seed_effect = rng.standard_normal((size, BUDGET)) / np.sqrt(2)
        xa, xb = (
            CENTRE + 0.02 * (seed_effect + rng.standard_normal((size, BUDGET)) / np.sqrt(2)) for _ in "ab"
        )
        return xa, xb + 0.02 * shift_sd
    xa, xb = (draw(rng, "lognormal", 2.0, (size, BUDGET)) for _ in "ab")
    return xa, xb + 0.02 * shift_sd


@pytest.mark.parametrize("paired", [False, True])
def test_the_decided_rule_keeps_its_type_one_error(paired: bool) -> None:
    """Equal arms, 7 looks: <= 6% decide at some look with the Bonferroni split, while a 95%
    interval at every look decides far more often than 5% (so the correction is needed)."""
    xa, xb = arms(np.random.default_rng(11 + paired), paired, 0.0, STUDIES)
    corrected = (first_decided(xa, xb, paired, sq.look_alpha(N_LOOKS)) > 0).mean()
    naive = (first_decided(xa, xb, paired, 0.05) > 0).mean()
    print(f"paired {paired}: type-I {corrected:.3f}, naive {naive:.3f}")
    assert corrected <= 0.06 and naive > 0.06


@pytest.mark.parametrize("paired", [False, True])
def test_the_decided_rule_finds_a_real_difference_before_the_budget(paired: bool) -> None:
    xa, xb = arms(np.random.default_rng(21 + paired), paired, 2.0, STUDIES)
    look = first_decided(xa, xb, paired, sq.look_alpha(N_LOOKS))
    early = ((look > 0) & (look < N_LOOKS)).mean()
    runs = np.median(np.array(LOOKS)[look - 1])  # look 0 (never): the budget
    print(f"paired {paired}: decided before the budget {early:.3f}, median runs {runs:.0f}")
    assert early >= 0.9


def seeded_apart(y: np.ndarray) -> list[dict]:
    """Independent runs of arm B with seeds of their own: no pairs with arm A."""
    return [r | {"seeds": r["seeds"] | {"init": 1000 + r["seeds"]["init"]}} for r in independent_records(y)]


@pytest.mark.parametrize("paired", [False, True])
def test_decided_on_records_agrees_with_the_simulation(paired: bool) -> None:
    """`decided` on 200 simulated studies, look by look, gives the simulation's decisions and
    intervals exactly (both are exact rank intervals: no randomness)."""
    xa, xb = arms(np.random.default_rng(31 + paired), paired, 1.0, 200)
    level = sq.look_alpha(N_LOOKS)
    simulated = first_decided(xa, xb, paired, level)
    for i in range(len(xa)):
        for look, n in enumerate(LOOKS, 1):
            a = independent_records(xa[i : i + 1, :n])
            b = (independent_records if paired else seeded_apart)(xb[i : i + 1, :n])
            found = sq.decided(a, b, look, N_LOOKS)
            _, ci, used = sq.stacked_shift(xa[i : i + 1, :n], xb[i : i + 1, :n], level, paired)
            assert found["alpha_used"] == level and found["paired"] == used
            assert (
                found["interval"] is None
                if np.isnan(ci[0, 0])
                else np.allclose(found["interval"], 100 * ci[0])
            )
            if found["stop"]:
                assert found["decided"] == (simulated[i] == look)
                break
        else:
            raise AssertionError("the last look always stops")


def test_shift_intervals_at_95_are_compares() -> None:
    """At alpha 0.05 the level-aware intervals are exactly `suite compare`'s: unpaired
    Hodges-Lehmann (Moses), paired Hodges-Lehmann (signed rank), seed-unit t paired and unpaired."""
    rng = np.random.default_rng(5)
    ya, yb = draw(rng, "normal", 2.0, (1, 9)), draw(rng, "normal", 2.0, (1, 9))
    a, b = independent_records(ya), independent_records(yb)
    assert np.allclose(
        sq.shift_interval(a, seeded_apart(yb))["interval"], hodges_lehmann(ya[0], yb[0])["ci95"]
    )
    assert np.allclose(sq.shift_interval(a, b)["interval"], paired(a, b)["shift"]["ci95"])
    ga, gb = grid_records(rng.normal(size=(1, 3, 4))), grid_records(rng.normal(size=(1, 3, 4)))
    found = sq.shift_interval(ga, gb)
    assert found["paired"] and np.allclose(
        found["interval"], paired_units(list(zip(ga, gb, strict=True)))["ci95"]
    )
    apart = [r | {"seeds": r["seeds"] | {"subsample": 9}} for r in gb]
    found = sq.shift_interval(ga, apart)
    assert not found["paired"] and np.allclose(found["interval"], unpaired_units(ga, apart)["ci95"])


def test_decided_reports_and_words_the_verdict() -> None:
    a = independent_records(np.array([[0.80, 0.81, 0.79, 0.80, 0.82, 0.80, 0.81, 0.79, 0.80]]))
    b = seeded_apart(np.array([[0.85, 0.86, 0.84, 0.85, 0.87, 0.85, 0.86, 0.84, 0.85]]))
    found = sq.decided(a, b, 4, 7)
    assert found["decided"] and found["stop"] and found["look"] == 4 and found["alpha_used"] == 0.05 / 7
    assert found["verdict"].startswith("decided at look 4 of 7: B - A in [") and found["verdict"].endswith(
        "] points, B ahead"
    )
    same = sq.decided(a, seeded_apart(np.array([[r["score"] for r in a]])), 2, 7)
    assert not same["decided"] and not same["stop"] and same["verdict"].endswith("; continue")
    last = sq.decided(a, seeded_apart(np.array([[r["score"] for r in a]])), 7, 7)
    assert last["stop"] and last["verdict"].startswith("budget spent: not decided at look 7 of 7: B - A in [")
    few = sq.decided(a[:3], b[:3], 1, 7)
    assert (
        few["interval"] is None
        and few["verdict"] == "not decided at look 1 of 7: no 99.3% interval with these runs; continue"
    )
    with pytest.raises(ValueError):
        sq.decided(a, b, 8, 7)


KEYS = ("decided", "better", "stop")


def _negated(records: list[dict]) -> list[dict]:
    return [r | {"score": -r["score"]} for r in records]


def test_a_lower_is_better_metric_mirrors_the_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same runs with their scores negated, read as lower-is-better, give the same decisions
    and the same side ahead at every look, and intervals of the opposite sign; `--until-decided`
    (the recipes against their reference) too."""
    from suite.commands.until import _decided
    from suite.config import task

    monkeypatch.setattr(task, "LOWER_IS_BETTER", {"error_rate"})
    rng = np.random.default_rng(11)
    ya, yb = rng.normal(0.80, 0.01, (1, 9)), rng.normal(0.83, 0.01, (1, 9))
    a = independent_records(ya)
    for b in (independent_records(yb), seeded_apart(yb)):  # paired, then unpaired
        for look in range(1, 8):
            xa, xb = a[: 2 + look], b[: 2 + look]
            high = sq.decided(xa, xb, look, 7)
            low = sq.decided(_negated(xa), _negated(xb), look, 7, higher_is_better=False)
            assert [high[k] for k in KEYS] == [low[k] for k in KEYS]
            if high["interval"]:
                assert low["interval"] == pytest.approx([-high["interval"][1], -high["interval"][0]])
        assert high["decided"] and high["better"] == "B"

    def study(metric: str, sign: float) -> list[dict]:
        fields = {"metric": metric, "size": 100, "outcome": "succeeded"}
        return [
            r | fields | {"score": sign * r["score"], "trial_number": k, "hparams": {"recipe": name}}
            for name, y in (("base", ya), ("better", yb))
            for k, r in enumerate(independent_records(y))
        ]

    high = _decided(study("accuracy", 1), [3, 5, 9], 9, {}, True)
    low = _decided(study("error_rate", -1), [3, 5, 9], 9, {}, task.higher_is_better("error_rate"))
    assert high["stop"] and low["stop"]
    assert high["verdict"].startswith("better (B) vs base (A): decided at look")
    assert high["verdict"].endswith("B ahead") and low["verdict"].endswith("B ahead")
