"""Reported numbers are compared only on equal terms; the rest is context with its reasons."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from suite.stats.compare import (
    data_digest,
    reasons_not_comparable,
    same_model,
    subsample_note,
    subsample_sd,
)
from suite.stats.estimates import gap_to_reported

REPO = Path(__file__).resolve().parent.parent
SMOKE = {  # `suite run tasks/rte.yaml --profile smoke`: the bundled MiniLM, 64 examples, dev
    "model": "minilm-l6", "hub_id": None, "size": 64, "metric": "accuracy",
    "eval_split": "validation", "eval_set": None, "head": "auto",
}  # fmt: skip


def test_no_shipped_rte_number_is_comparable_with_the_smoke_run() -> None:
    reported = yaml.safe_load((REPO / "tasks/rte.yaml").read_text())["reported"]
    assert reported
    for rep in reported:
        reasons = reasons_not_comparable(rep, SMOKE)
        assert reasons, rep  # BERT-large, full-data and other-checkpoint numbers are all context
        assert any(r.startswith("model") for r in reasons)
        assert any(r.startswith("training size") for r in reasons)  # none names size 64
    mosbach = next(r for r in reported if r["model"] == "bert-large-uncased")
    assert "training size: reported the full training set, ours 64" in reasons_not_comparable(mosbach, SMOKE)


def test_each_term_is_checked() -> None:
    ours = {"model": "minilm-l6", "value": 60.0, "metric": "accuracy", "statistic": "median", "n_runs": 5,
            "split": "dev", "size": 64, "same_as": ["all-MiniLM-L6-v2"], "source": "synthetic"}  # fmt: skip
    assert reasons_not_comparable(ours, SMOKE) == []
    changes = {
        "model": {"model": "bert-base-uncased", "same_as": None},
        "training size": {"size": None},
        "split": {"split": "test (GLUE server)"},
        "metric": {"metric": "f1"},
        "head": {"head": "cls"},
        "statistic": {"statistic": "test_server"},
    }
    for term, change in changes.items():
        reasons = reasons_not_comparable({**ours, **change}, SMOKE)
        assert any(r.startswith(term) for r in reasons), (term, reasons)
    held_out = {**SMOKE, "eval_set": "held-out SQuAD-train questions"}
    assert any(r.startswith("evaluation set") for r in reasons_not_comparable(ours, held_out))


def test_model_names_match_by_checkpoint_or_alias() -> None:
    assert same_model({"model": "bert-base-uncased (BERT-BASE)"}, "bert-base-uncased", None)
    assert same_model({"model": "bert-base-uncased"}, "my-bert", "google-bert/bert-base-uncased")
    assert not same_model({"model": "MiniLM-L6-H384-uncased"}, "minilm-l6", None)  # another checkpoint
    assert same_model({"model": "x", "same_as": ["minilm-l6"]}, "minilm-l6", None)


def test_a_reported_median_drawn_from_our_distribution_is_accepted_at_the_nominal_rate() -> None:
    """The acceptance check: a comparable synthetic median of 5 runs drawn from the run's own
    distribution is rejected (p < 0.05) about 5% of the time, not 20-70% as with our CI."""
    rng = np.random.default_rng(3)
    rejected = 0
    trials = 200
    for t in range(trials):
        ours = [
            {"score": float(s), "outcome": "succeeded", "hparams": {}, "size": 64,
             "seeds": {"init": i, "order": i, "subsample": 0}}
            for i, s in enumerate(rng.normal(0.6, 0.03, 25))
        ]  # fmt: skip
        reported = 100 * float(np.median(rng.normal(0.6, 0.03, 5)))
        gap = gap_to_reported(ours, reported, "median", n_runs=5, seed=t, resamples=1000)
        rejected += gap["p_two_sided"] < 0.05
    assert 0.01 <= rejected / trials <= 0.10


def test_an_eval_limit_subsample_of_dev_stays_comparable_with_its_sampling_error_named() -> None:
    ours = {"model": "minilm-l6", "value": 60.0, "metric": "accuracy", "statistic": "median", "n_runs": 5,
            "split": "dev", "size": 64, "source": "synthetic"}  # fmt: skip
    subsample = {**SMOKE, "eval_limit": 300, "eval_examples": 300, "eval_sd": 2.5}
    assert reasons_not_comparable(ours, subsample) == []
    note = "evaluated on 300 of the dev examples: sampling error (sd 2.50 points) added to the test"
    assert subsample_note(subsample) == note
    assert subsample_note(SMOKE) is None  # the whole dev set: nothing to add
    pool = {**subsample, "eval_set": "held-out SQuAD-train questions"}
    assert any(r.startswith("evaluation set") for r in reasons_not_comparable(ours, pool))  # still refused
    assert subsample_note(pool) is None
    longer = reasons_not_comparable({**ours, "max_length": 512}, {**SMOKE, "max_length": 128})
    assert any(r.startswith("max_length") for r in longer)  # checked where a paper states it


def test_subsample_sd_applies_the_finite_population_correction_when_the_full_size_is_known() -> None:
    assert subsample_sd(0.02, 300) == pytest.approx(2.0)  # N unknown: no correction (conservative)
    assert subsample_sd(0.02, 300, 1200) == pytest.approx(2.0 * 0.75**0.5)
    assert subsample_sd(0.02, 300, 300) == 0.0 and subsample_sd(None, 300) is None


def test_data_digest_is_the_content_or_the_origin_where_a_hash_is_unknown() -> None:
    hub = {"kind": "hub", "path": "nyu-mll/glue", "name": "rte", "revision": None}
    assert data_digest({"dev": "a"}, hub) == data_digest({"dev": "a"}, {"kind": "local", "folder": "x"})
    assert data_digest({"dev": "a"}, hub) != data_digest({"dev": "b"}, hub)
    assert data_digest({"dev": None}, hub) != data_digest({"dev": None}, {**hub, "revision": "v2"})
