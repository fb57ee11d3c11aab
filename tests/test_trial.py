from pathlib import Path

import numpy as np
import pytest
import torch

from suite.config.sweep import HParams
from suite.config.task import FailureSpec, load_task
from suite.heads.classification import ClassificationModule
from suite.heads.registry import PreparedTask, prepare_task
from suite.model.encoders import load_tokenizer
from suite.training.trial import judge, run_trial
from suite.training.trial_plan import Seeds, TrialPlan

HP = HParams(lr=1e-3, batch_size=8, epochs=2)


@pytest.fixture
def prepared(tiny_models, tiny_task: Path) -> PreparedTask:
    model = str(tiny_models["bert"])
    return prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))


def test_same_trial_twice_gives_identical_metrics(prepared, tiny_models) -> None:
    model = str(tiny_models["bert"])
    plan = TrialPlan(32, HP, Seeds(init=11, order=12, subsample=13))
    a, b = run_trial(prepared, model, plan), run_trial(prepared, model, plan)
    assert a["epochs"] == b["epochs"] and a["loss_curve"] == b["loss_curve"]
    assert len(a["epochs"]) == 2 and a["n_train"] == 32


def test_each_seed_moves_its_own_factor(prepared, tiny_models) -> None:
    model = str(tiny_models["bert"])
    base = run_trial(prepared, model, TrialPlan(16, HP, Seeds(1, 1, 1)))
    for seeds in (Seeds(2, 1, 1), Seeds(1, 2, 1), Seeds(1, 1, 2)):
        other = run_trial(prepared, model, TrialPlan(16, HP, seeds))
        assert other["loss_curve"] != base["loss_curve"], seeds


def test_diverging_run_is_recorded_as_failed(prepared, tiny_models, monkeypatch) -> None:
    monkeypatch.setattr(ClassificationModule, "loss", lambda self, batch: torch.tensor(float("nan")))
    record = run_trial(prepared, str(tiny_models["bert"]), TrialPlan(16, HP, Seeds(1, 2, 3)))
    assert record["outcome"] == "failed" and record["failure"] == "diverged" and record["failed"]
    assert record["reason"].startswith("diverged: non-finite training loss")
    assert record["score"] is None and record["wall_time_s"] > 0


def test_crash_is_recorded_with_its_reason(prepared, tiny_models, monkeypatch) -> None:
    def boom(self, batch):  # noqa: ANN001, ANN202
        raise RuntimeError("out of memory")

    monkeypatch.setattr(ClassificationModule, "loss", boom)
    record = run_trial(prepared, str(tiny_models["bert"]), TrialPlan(16, HP, Seeds(1, 2, 3)))
    # A crash is infrastructure: an errored trial, never a failed run, and it has no score.
    assert record["outcome"] == "errored" and not record["failed"] and record["score"] is None
    assert "RuntimeError: out of memory" in record["reason"]


def test_user_error_inside_a_trial_is_not_an_outcome(prepared, tiny_models, monkeypatch) -> None:  # noqa: ANN001
    from suite.errors import DataError

    def missing(self, batch):  # noqa: ANN001, ANN202
        raise DataError("task tiny: field 'data.train': data file not found: x.tsv")

    monkeypatch.setattr(ClassificationModule, "loss", missing)
    with pytest.raises(DataError):
        run_trial(prepared, str(tiny_models["bert"]), TrialPlan(16, HP, Seeds(1, 2, 3)))


def test_non_finite_score_is_a_diverged_run_without_a_score(prepared, tiny_models, monkeypatch) -> None:  # noqa: ANN001
    # NaN never compares below a baseline: without this check a NaN regression score passed.
    monkeypatch.setattr(ClassificationModule, "epoch_metrics", lambda self: {"accuracy": float("nan")})
    record = run_trial(prepared, str(tiny_models["bert"]), TrialPlan(16, HP, Seeds(1, 2, 3)))
    assert record["outcome"] == "failed" and record["failure"] == "diverged"
    assert record["score"] is None and record["scores"] == {}


def test_failure_rule_against_the_trivial_baseline(prepared) -> None:
    base = prepared.baseline["accuracy"]
    assert base == pytest.approx(0.5)  # the tiny dev set is balanced
    assert judge(prepared, base)[0] == "baseline" and judge(prepared, base - 0.1)[0] == "baseline"
    assert judge(prepared, base + 0.01) == (None, None)
    assert judge(prepared, None)[0] == "diverged" and judge(prepared, float("nan"))[0] == "diverged"
    spec = prepared.spec.model_copy(update={"failure": FailureSpec(rule="threshold", threshold=0.9)})
    thresholded = PreparedTask(spec, prepared.data, None, None, prepared.baseline)
    assert judge(thresholded, 0.8)[0] == "threshold" and judge(thresholded, 0.95)[0] is None


def test_mrpc_baseline_is_the_all_positive_classifier(shared_data: Path) -> None:
    from suite.model.metrics import trivial_baseline

    task = load_task(Path(__file__).parent.parent / "tasks/mrpc.yaml")
    data = prepare_task(task, shared_data, load_tokenizer("minilm-l6")).data
    names = ["f1", "accuracy"]
    base = trivial_baseline(names, data.labels["dev"], False, 2)
    assert base["f1"] == pytest.approx(0.812, abs=1e-3) and base["accuracy"] == pytest.approx(0.684, abs=1e-3)
    assert np.bincount(data.labels["dev"]).tolist() == [129, 279]


class _AlwaysPrune:
    """An Optuna trial stand-in whose pruner stops every run after its first report."""

    def __init__(self) -> None:
        self.reports: list[tuple[float, int]] = []

    def report(self, value: float, step: int) -> None:
        self.reports.append((value, step))

    def should_prune(self) -> bool:
        return True


def test_pruned_run_is_recorded_as_pruned_not_failed(prepared, tiny_models) -> None:  # noqa: ANN001
    trial = _AlwaysPrune()
    record = run_trial(
        prepared, str(tiny_models["bert"]), TrialPlan(16, HP, Seeds(1, 2, 3)), pruning_trial=trial
    )
    assert (
        record["outcome"] == "pruned"
        and not record["failed"]
        and record["reason"].startswith("pruned: at epoch 1")
    )
    # A pruned trial is not a run: its last dev score is kept as history, never as a score.
    assert record["score"] is None and len(record["epochs"]) == 1
    assert trial.reports == [(record["last_score"], 1)]


def test_baseline_is_the_best_constant_on_the_evaluation_set() -> None:
    from suite.model.metrics import trivial_baseline

    # docs/design.md, Outcomes: the train majority (class 0 here) is not the best constant on dev (class 2).
    dev = np.array([2, 2, 2, 1, 1, 0])
    base = trivial_baseline(["accuracy", "f1", "matthews"], dev, False, num_labels=3)
    assert base["accuracy"] == pytest.approx(0.5) and base["matthews"] == 0.0
    assert base["f1"] == pytest.approx(
        max(2 * 0.5 / 1.5 / 3, 2 * (1 / 3) / (4 / 3) / 3, 2 * (1 / 6) / (7 / 6) / 3)
    )
    assert trivial_baseline(["pearson"], np.array([0.1, 0.5, 0.9]), True) == {"pearson": 0.0}


def test_f1_average_follows_the_spec_not_the_predictions() -> None:
    from suite.model.metrics import classification_scores

    y, p = np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0])  # a 3-class task; only 0/1 seen here
    macro = classification_scores(["f1"], y, p, num_labels=3)["f1"]
    assert macro == pytest.approx((0.8 + 2 / 3 + 0) / 3)  # macro over the spec's 3 classes, not binary
    assert classification_scores(["f1"], np.array([0, 1]), np.array([0, 0]), 2)["f1"] == 0.0


def _reads(monkeypatch) -> list[int]:  # noqa: ANN001
    """How many steps each read of the losses brings back (spied on `record_steps`)."""
    from suite.heads.base import EncoderModule

    sizes: list[int] = []
    record = EncoderModule.record_steps

    def spy(self):  # noqa: ANN001, ANN202
        if self._unread:
            sizes.append(len(self._unread))
        return record(self)

    monkeypatch.setattr(EncoderModule, "record_steps", spy)
    return sizes


def test_losses_read_back_every_few_steps_record_what_every_step_reads(
    prepared, tiny_models, monkeypatch
) -> None:  # noqa: ANN001
    """On a GPU the loss stays on the device and is read every few steps (and before each
    evaluation): a CUDA read waits for the queue. The record is the same as reading every step."""
    from suite.heads.base import EncoderModule

    model, plan = str(tiny_models["bert"]), TrialPlan(32, HP, Seeds(1, 2, 3))  # 2 epochs of 4 steps
    reads = _reads(monkeypatch)
    every_step = run_trial(prepared, model, plan)
    assert reads == [1] * 8  # the CPU reads every step, as before
    reads.clear()
    monkeypatch.setattr(EncoderModule, "loss_sync_steps", 3)
    batched = run_trial(prepared, model, plan)
    assert reads == [3, 1, 3, 1]  # every 3 steps, and what is left before each evaluation
    for field in ("loss_curve", "tokens", "epochs", "per_example", "score", "outcome"):
        assert batched[field] == every_step[field], field


@pytest.mark.parametrize("every", [3, 8])
def test_a_divergence_read_late_stops_the_run_as_at_its_own_step(
    every: int, prepared, tiny_models, monkeypatch
) -> None:  # noqa: ANN001
    """A non-finite loss at step 5, read at step 6 (every 3) or before the second evaluation
    (every 8): the same failed run, reason, loss curve, tokens and evaluations as read at once."""
    from suite.heads.base import EncoderModule

    loss = ClassificationModule.loss

    def nan_from_step_5(self, batch):  # noqa: ANN001, ANN202
        value = loss(self, batch)
        return value * float("nan") if self.global_step >= 5 else value

    monkeypatch.setattr(ClassificationModule, "loss", nan_from_step_5)
    model, plan = str(tiny_models["bert"]), TrialPlan(32, HP, Seeds(1, 2, 3))
    at_once = run_trial(prepared, model, plan)
    monkeypatch.setattr(EncoderModule, "loss_sync_steps", every)
    late = run_trial(prepared, model, plan)
    assert late["reason"] == at_once["reason"] == "diverged: non-finite training loss (nan) at step 5"
    assert len(late["loss_curve"]) == 5 and len(late["epochs"]) == 1 and late["score"] is None
    for field in ("outcome", "failure", "loss_curve", "tokens", "epochs", "last_score"):
        assert late[field] == at_once[field], field


def test_training_batches_are_cut_on_the_cpu_before_they_move(prepared, tiny_models, monkeypatch) -> None:  # noqa: ANN001
    """Lightning moves each training batch already cut into its pieces, with their shares and
    token counts as plain numbers: nothing about them is read back from the device."""
    from suite.heads.base import PIECES, EncoderModule

    moved: list[dict] = []
    transfer = EncoderModule.transfer_batch_to_device

    def spy(self, batch, device, dataloader_idx):  # noqa: ANN001, ANN202
        if self.trainer.training:
            moved.append(batch)
        return transfer(self, batch, device, dataloader_idx)

    monkeypatch.setattr(EncoderModule, "transfer_batch_to_device", spy)
    split = HP.model_copy(update={"split_batches": True})
    record = run_trial(prepared, str(tiny_models["bert"]), TrialPlan(32, split, Seeds(1, 2, 3)))
    assert len(moved) == 8 and all(PIECES in b for b in moved)
    assert all(isinstance(s, float) for b in moved for s in b["shares"])
    assert record["tokens"]["real"] == sum(b["tokens"][0] for b in moved)
    assert record["piece_cost"] == 64  # the CPU's: recorded with the trial


def test_on_a_device_without_pieces_split_batches_trains_whole_batches(
    prepared, tiny_models, monkeypatch
) -> None:  # noqa: ANN001
    """Where padding is nearly free (a GPU: `piece_cost` None), `split_batches: true` computes each
    batch whole, and the record says so: the same run as `split_batches: false`."""
    from suite.data import pieces

    assert pieces.piece_cost("gpu") is None and pieces.piece_cost("cpu") == pieces.PIECE_COST_TOKENS
    model = str(tiny_models["bert"])
    whole = run_trial(prepared, model, TrialPlan(32, HP, Seeds(1, 2, 3)))
    monkeypatch.setitem(pieces.DEVICE_PIECE_COST, "cpu", None)  # the CPU as a GPU decides
    split = run_trial(
        prepared, model, TrialPlan(32, HP.model_copy(update={"split_batches": True}), Seeds(1, 2, 3))
    )
    assert "piece_cost" not in whole and split["piece_cost"] is None
    for field in ("loss_curve", "tokens", "epochs"):
        assert split[field] == whole[field], field
