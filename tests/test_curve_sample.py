"""The curve sample: each epoch evaluates a fixed sample of the evaluation set, the score is the
whole set's after the last epoch, and nothing that trains or scores changes with the sample."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from suite.config.sweep import HParams, load_sweep
from suite.config.task import DEFAULT_CURVE_SAMPLE, TaskSpec, load_task
from suite.data.squad import QAExample, windows
from suite.errors import SuiteError
from suite.heads.registry import PreparedTask, prepare_task, span_scorer, tagging_scorer
from suite.identity import study_fingerprint
from suite.model.encoders import load_tokenizer
from suite.study.resume import resumption, stored_task, with_stored_fields
from suite.training.replicas import run_replicates
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan

HP = HParams(lr=1e-3, batch_size=8, epochs=3)
SAME = ("outcome", "score", "scores", "per_example", "loss_curve", "tokens", "n_dev", "epochs_run")


def _prepared(task: Path, model: Path, curve_sample: int | str) -> PreparedTask:
    spec = load_task(task, sets={"curve_sample": curve_sample})
    root = task.parent if (task.parent / "data").is_dir() else task.parent.parent  # tiny_ner, tiny_task
    return prepare_task(spec, root / "data", load_tokenizer(str(model)))


def _sample_f1(per_example: dict[str, list], positions: np.ndarray) -> float:
    """Micro entity F1 over the sentences at `positions`, counted by hand from their counts."""
    correct, predicted, gold = (
        sum(per_example[k][p] for p in positions) for k in ("correct", "predicted", "gold")
    )
    return 2 * correct / (predicted + gold) if predicted + gold else 0.0


def test_the_sample_is_fixed_stratified_and_the_whole_set_when_no_smaller(tiny_models, tiny_task) -> None:
    model = tiny_models["bert"]
    prepared = _prepared(tiny_task, model, 10)
    positions = prepared.curve_positions()
    labels = prepared.data.labels["dev"][prepared.data.dev_indices()]
    assert len(labels) == 24 and labels.sum() == 12  # the tiny dev set is balanced
    assert len(set(positions.tolist())) == 10 and list(positions) == sorted(positions)
    assert labels[positions].sum() == 5  # stratified: 10 of 24 keeps half of each class
    np.random.seed(123)  # not the global streams: one sample for every trial of every study
    assert list(_prepared(tiny_task, model, 10).curve_positions()) == list(positions)
    for whole in (24, 500, "full"):
        assert _prepared(tiny_task, model, whole).curve_positions() is None
    assert load_task(tiny_task).curve_sample == DEFAULT_CURVE_SAMPLE


@pytest.mark.parametrize("fixture, sample", [("tiny_task", 10), ("tiny_ner", 12)])
def test_a_sampled_curve_leaves_training_and_the_score_bit_identical(
    fixture, sample, request, tiny_models
) -> None:
    task, model = request.getfixturevalue(fixture), tiny_models["bert"]
    plan = TrialPlan(32, HP, Seeds(init=1, order=2, subsample=3))
    whole = run_trial(_prepared(task, model, "full"), str(model), plan)
    prepared = _prepared(task, model, sample)
    sampled = run_trial(prepared, str(model), plan)
    assert whole["outcome"] != "errored", whole.get("reason")
    for field in SAME:
        assert sampled[field] == whole[field], field
    n = whole["evaluated_on"]["score"]["examples"]
    assert whole["evaluated_on"]["epochs"] == {"set": "whole", "examples": n}
    assert sampled["evaluated_on"] == {
        "epochs": {"set": "sample", "examples": sample, "seed": 0},
        "score": {"set": "whole", "examples": n},
    }
    # One curve point per epoch; the whole-set curve ends at the score, the sampled one at the
    # sample's share of the same final predictions.
    assert [e["epoch"] for e in sampled["epochs"]] == [e["epoch"] for e in whole["epochs"]] == [1, 2, 3]
    assert whole["epochs"][-1] == {"epoch": 3, **whole["scores"]}
    positions, per = prepared.curve_positions(), whole["per_example"]
    last = sampled["epochs"][-1]
    if fixture == "tiny_task":
        assert last["accuracy"] == pytest.approx(np.mean([per["correct"][p] for p in positions]), abs=1e-12)
    else:
        assert last["entity_f1"] == pytest.approx(_sample_f1(per, positions), abs=1e-12)
    for record in (whole, sampled):
        split = record["time_s"]
        assert set(split) == {"training", "curve_evaluation", "final_evaluation"}
        assert split["training"] > 0 and split["final_evaluation"] > 0 and split["curve_evaluation"] >= 0
        assert sum(split.values()) <= record["wall_time_s"]


def test_replicates_sample_their_curve_as_a_trial_does(tiny_models, tiny_task) -> None:
    model = tiny_models["bert"]
    plans = [TrialPlan(32, HP, Seeds(init=1 + r, order=2 + r, subsample=3)) for r in range(2)]
    whole = run_replicates(_prepared(tiny_task, model, "full"), str(model), plans)
    sampled = run_replicates(_prepared(tiny_task, model, 10), str(model), plans)
    for a, b in zip(whole, sampled, strict=True):
        assert a["outcome"] != "errored", a.get("reason")
        for field in SAME:
            assert b[field] == a[field], field
        assert b["evaluated_on"]["epochs"]["set"] == "sample" and len(b["epochs"]) == 3
        assert set(b["time_s"]) == {"training", "curve_evaluation", "final_evaluation"}


def _gold_windows(features: list[dict]) -> list[tuple[int, int, list[int]]]:
    return [
        (f["sentence"], f["first_word"], [f["labels"][s] if s >= 0 else 0 for s in f["word_starts"]])
        for f in features
    ]


def test_the_tagging_scorer_scores_the_sentences_asked(tiny_ner) -> None:
    prepared = prepare_task(load_task(tiny_ner), tiny_ner.parent / "data", load_tokenizer("minilm-l6"))
    data = prepared.data
    features = data.features("dev", data.dev_indices())
    # Gold tags for even sentences, O everywhere for odd ones: some entities found, some missed.
    predicted = [(s, w, tags if s % 2 == 0 else [0] * len(tags)) for s, w, tags in _gold_windows(features)]
    whole, per = tagging_scorer(data)(predicted)
    assert 0 < whole["entity_f1"] < 1
    positions = np.array([1, 2, 3, 5, 8, 13, 21])
    in_sample = [w for w in predicted if w[0] in set(positions.tolist())]  # what a curve evaluation sees
    scores, counts = tagging_scorer(data)(in_sample, positions)
    assert scores["entity_f1"] == pytest.approx(_sample_f1(per, positions), abs=1e-12)
    assert counts == {k: [v[p] for p in positions] for k, v in per.items()}


def test_the_span_scorer_scores_the_questions_asked() -> None:
    tokenizer = load_tokenizer("minilm-l6")
    filler = " ".join(f"Sentence {i} says nothing about rivers." for i in range(30))
    pool = []
    for i, (river, town) in enumerate([("Rhine", "Bonn"), ("Elbe", "Dresden"), ("Main", "Frankfurt")] * 2):
        context = f"{filler} The {river} flows through {town}. {filler}"
        start = context.index(f"The {river}")
        answer = f"The {river}"
        pool.append(
            QAExample(
                str(i), f"Which river flows through {town}?", context, (answer,), start, start + len(answer)
            )
        )
    features = windows(tokenizer, pool, max_length=96, stride=32, train=True)
    for number, feature in enumerate(features):
        feature["window"] = number
    start, end = {}, {}
    for w, f in enumerate(features):  # right for even questions, a word too long for odd ones
        start[w], end[w] = np.full(len(f["input_ids"]), -10.0), np.full(len(f["input_ids"]), -10.0)
        shift = f["example"] % 2 if f["start_positions"] > 0 else 0
        start[w][f["start_positions"]], end[w][f["end_positions"] + shift] = 10.0, 10.0
    data = SimpleNamespace(
        dev=pool,
        qa=SimpleNamespace(n_best=20, max_answer_length=30),
        features=lambda split, indices: features,
        dev_indices=lambda: np.arange(len(pool)),
        golds=lambda: [list(e.answers) for e in pool],
    )
    whole, per = span_scorer(data)(start, end)
    assert 0 < whole["exact_match"] < 1
    positions = np.array([0, 3, 4])
    seen = [w for w, f in enumerate(features) if f["example"] in {0, 3, 4}]  # a curve evaluation's windows
    scores, per_question = span_scorer(data)(
        {w: start[w] for w in seen}, {w: end[w] for w in seen}, positions
    )
    assert per_question == {k: [v[p] for p in positions] for k, v in per.items()}
    assert scores == {k: pytest.approx(np.mean(v)) for k, v in per_question.items()}


def _fingerprint(task: TaskSpec, sweep) -> dict:  # noqa: ANN001
    return study_fingerprint(task.model_dump(mode="json"), sweep.model_dump(mode="json"), {}, {}, 1, {})


def test_a_study_stored_before_the_sample_resumes_with_its_whole_set_curve(tiny_task) -> None:
    sweep = load_sweep(tiny_task.parent.parent / "sweeps" / "tiny.yaml")
    old = load_task(tiny_task, sets={"curve_sample": "full"})  # what a study before the field ran
    stored = _fingerprint(old, sweep)
    assert "task.curve_sample" not in stored  # the old behaviour: absent, as in older studies
    assert _fingerprint(load_task(tiny_task), sweep)["task.curve_sample"] == DEFAULT_CURVE_SAMPLE
    info = {"task": {k: v for k, v in old.model_dump(mode="json").items() if k != "curve_sample"}}
    assert TaskSpec.model_validate(stored_task(info["task"])).curve_sample == "full"
    # A rerun with the default resumes it as it was: the whole set each epoch.
    task = with_stored_fields(load_task(tiny_task), stored)
    assert task.curve_sample == "full"
    how = resumption(stored, _fingerprint(task, sweep), info, task, sweep, "s", "here")
    assert not how.grown and not how.stack_changed
    # A study that has the field keeps its own value; an explicit other size is another study.
    assert (
        with_stored_fields(load_task(tiny_task), _fingerprint(load_task(tiny_task), sweep)).curve_sample
        == 500
    )
    other = with_stored_fields(load_task(tiny_task, sets={"curve_sample": 200}), stored)
    with pytest.raises(SuiteError, match=r"task\.curve_sample \(absent\) -> 200"):
        resumption(stored, _fingerprint(other, sweep), info, other, sweep, "s", "here")


@pytest.mark.parametrize("bad", [0, -3, "half", 2.5, True])
def test_a_bad_curve_sample_names_the_field(tiny_task, bad) -> None:  # noqa: ANN001
    from suite.errors import SpecError

    with pytest.raises(SpecError, match="curve_sample"):
        load_task(tiny_task, sets={"curve_sample": bad})
