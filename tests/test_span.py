"""Extractive QA: readers, the held-out pool, doc-stride windows, post-processing, SQuAD metric."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from suite.config.sweep import HParams
from suite.config.task import load_task
from suite.data.squad import QAExample, read_mrqa, read_squad_json, windows
from suite.heads.registry import prepare_task
from suite.heads.span import best_answers, collate_span
from suite.model.encoders import load_tokenizer
from suite.model.metrics import normalize_answer, squad_scores
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan
from tests.conftest import ARCHITECTURES

REPO = Path(__file__).resolve().parent.parent
SPLITS = "squad_fewshot_splinter"


def test_official_metric_on_tricky_answers() -> None:
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an apple, a pear and the fig") == "apple pear and fig"
    predictions = ["the Denver Broncos", "Broncos", "in 1996.", "Santa Clara, California", ""]
    golds = [
        ["Denver Broncos"],
        ["Denver Broncos", "The Broncos"],
        ["1996"],
        ["Levi's Stadium", "Santa Clara"],
        ["anything"],
    ]
    scores = squad_scores(predictions, golds)
    # EM: 1 (article dropped), 1 (second gold), 0, 0, 0 -> 2/5
    assert scores["exact_match"] == pytest.approx(2 / 5)
    # F1: 1, 1, "in 1996" vs "1996" = 2*(1/2*1)/(1/2+1) = 2/3, "santa clara california" vs
    # "santa clara" = 2*(2/3*1)/(2/3+1) = 0.8, empty = 0
    assert scores["f1"] == pytest.approx((1 + 1 + 2 / 3 + 0.8 + 0) / 5)


def test_readers(tmp_path: Path, shared_data: Path) -> None:
    squad = {
        "data": [
            {
                "paragraphs": [
                    {
                        "context": "Bonn is on the Rhine.",
                        "qas": [
                            {
                                "id": "q1",
                                "question": "Where is Bonn?",
                                "answers": [
                                    {"text": "on the Rhine", "answer_start": 8},
                                    {"text": "the Rhine", "answer_start": 11},
                                ],
                            }
                        ],
                    }
                ]
            }
        ]
    }
    (tmp_path / "s.json").write_text(json.dumps(squad))
    (example,) = read_squad_json(tmp_path / "s.json")
    assert example.answers == ("on the Rhine", "the Rhine") and (
        example.answer_start,
        example.answer_end,
    ) == (8, 20)
    examples = read_mrqa(shared_data / SPLITS / "squad-train-seed-42-num-examples-128.jsonl")
    assert len(examples) == 128
    targets = [e.context[e.answer_start : e.answer_end] for e in examples]
    # The located spans are the answers, up to MRQA's trimming (e.g. a dropped leading "The").
    assert squad_scores(targets, [list(e.answers) for e in examples])["exact_match"] > 0.97


@pytest.fixture(scope="module")
def squad(shared_data: Path):  # noqa: ANN201
    return prepare_task(load_task(REPO / "tasks/squad.yaml"), shared_data, load_tokenizer("minilm-l6"))


def test_held_out_pool_excludes_the_training_split(squad) -> None:  # noqa: ANN001
    data = squad.data
    assert len(data.pool) == 5010
    train = data.train_indices(128, 43)
    used = {data._current[i].id for i in train}
    assert len(used) == 128 and not used & {e.id for e in data.dev}
    assert len(data.dev) == 300  # the task's eval_limit
    first = [e.id for e in data.dev]
    data.train_indices(128, 44)
    overlap = len(set(first) & {e.id for e in data.dev})
    assert overlap >= 280  # a fixed pool order: splits are judged on (almost) the same questions
    note = squad.eval_note()
    assert note["label"].startswith("held-out SQuAD-train") and note["pool"] == 5010


def _gold_logits(features: list[dict]) -> tuple[dict, dict]:
    """What a perfect model outputs: a peak on the answer's tokens in the windows holding it."""
    start, end = {}, {}
    for w, f in enumerate(features):
        n = len(f["input_ids"])
        start[w], end[w] = np.full(n, -10.0), np.full(n, -10.0)
        s, e = f["start_positions"], f["end_positions"]
        start[w][s], end[w][e] = 10.0, 10.0  # (0, 0) = CLS, never a valid answer
    return start, end


def test_gold_spans_round_trip_to_em_f1_100(squad) -> None:  # noqa: ANN001
    pool = sorted(squad.data.pool, key=lambda e: -len(e.context))[:300]  # the longest contexts
    features = windows(squad.tokenizer, pool, max_length=192, stride=64, train=True)
    assert len(features) > 1.5 * len(pool)  # long contexts really span several windows
    answers = best_answers(features, [e.context for e in pool], *_gold_logits(features))
    scores = squad_scores(answers, [list(e.answers) for e in pool])
    assert scores == {"exact_match": 1.0, "f1": 1.0}


def test_answer_is_taken_from_the_window_that_holds_it(squad) -> None:  # noqa: ANN001
    filler = " ".join(f"Sentence {i} says nothing about rivers." for i in range(60))
    context = filler + " The Rhine flows through Bonn. " + filler
    start = context.index("The Rhine")
    example = QAExample("x", "Which river flows through Bonn?", context, ("The Rhine",), start, start + 9)
    features = windows(squad.tokenizer, [example], max_length=128, stride=32, train=True)
    holding = [w for w, f in enumerate(features) if f["start_positions"] > 0]
    assert len(features) >= 4 and holding and holding[0] > 0
    (answer,) = best_answers(features, [context], *_gold_logits(features))
    assert answer == "The Rhine"


def test_a_left_padding_tokenizer_gets_answer_positions_on_their_tokens(squad) -> None:  # noqa: ANN001
    """Answer positions count from the left, so tokens are padded on the right whatever side the
    tokenizer pads: each row of a batch is its window collated alone, then padding."""
    tokenizer = load_tokenizer("minilm-l6")
    tokenizer.padding_side = "left"
    features = windows(tokenizer, squad.data.pool[:6], max_length=192, stride=64, train=True)
    assert len({len(f["input_ids"]) for f in features}) > 1  # the batch really pads
    collate = collate_span(tokenizer)
    batch = collate(features)
    for row, feature in enumerate(features):
        alone, n = collate([feature]), len(feature["input_ids"])
        assert batch["input_ids"][row, :n].tolist() == alone["input_ids"][0].tolist() == feature["input_ids"]
        assert set(batch["input_ids"][row, n:].tolist()) <= {tokenizer.pad_token_id}
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (batch["input_ids"].shape[1] - n)
        start, end = int(batch["start_positions"][row]), int(batch["end_positions"][row])
        assert (start, end) == (feature["start_positions"], feature["end_positions"])
        if start:  # (0, 0): the answer is not in this window
            answer = tokenizer.decode(batch["input_ids"][row, start : end + 1]).replace(" ", "")
            gold = squad.data.pool[feature["example"]].answers[0]
            assert normalize_answer(answer) == normalize_answer(gold).replace(" ", "")


def test_models_without_token_type_ids_get_windows_too(tiny_tokenizers) -> None:  # noqa: ANN001
    example = QAExample("x", "Who?", "Peter Blackburn visited Bonn yesterday .", ("Peter Blackburn",), 0, 15)
    (feature,) = windows(tiny_tokenizers["bpe"], [example], 64, 16, train=True)
    text = tiny_tokenizers["bpe"].decode(
        feature["input_ids"][feature["start_positions"] : feature["end_positions"] + 1]
    )
    assert text.strip() == "Peter Blackburn"


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_span_head_trains_on_each_family(arch: str, tiny_models, shared_data: Path, tmp_path: Path) -> None:  # noqa: ANN001
    text = (REPO / "tasks/squad.yaml").read_text().replace("eval_limit: 300", "eval_limit: 8")
    (tmp_path / "squad.yaml").write_text(text)
    model = str(tiny_models[arch])
    task = prepare_task(load_task(tmp_path / "squad.yaml"), shared_data, load_tokenizer(model))
    record = run_trial(task, model, TrialPlan(16, HParams(lr=1e-3, batch_size=8, epochs=1), Seeds(1, 2, 42)))
    assert not (record["reason"] or "").startswith("error"), record["reason"]
    assert len(record["loss_curve"]) >= 2 and all(math.isfinite(v) for v in record["loss_curve"])
    assert set(record["scores"]) == {"f1", "exact_match"} and record["eval_set"]["questions"] == 8


def test_every_split_of_a_study_evaluates_on_one_held_out_set(shared_data: Path) -> None:
    """Pre-flight loads every planned split; from then on each split's evaluation set is the
    pool minus the union of all of them: the same questions for every trial."""
    from suite.config.sweep import load_sweep
    from suite.study.preflight import check_planned_inputs

    task = prepare_task(load_task(REPO / "tasks/squad.yaml"), shared_data, load_tokenizer("minilm-l6"))
    sweep = load_sweep(REPO / "sweeps/squad-seeds.yaml", "smoke")
    check_planned_inputs(task, sweep, "tasks/squad.yaml")
    data, sets, trained = task.data, [], set()
    for seed in sorted({s for s in task.data.qa.split_seeds})[:2]:
        indices = data.train_indices(task.spec.sizes[0], seed)
        trained |= {data._current[i].id for i in indices}
        sets.append([e.id for e in data.dev])
    assert sets[0] == sets[1] and len(sets[0]) == 300
    assert not trained & set(sets[0])  # no training question of any split is evaluated
