"""The outcome taxonomy on a real study: a crash is an errored trial (retried once, never a
failed run), a non-finite loss a diverged run, a one-class predictor a baseline failure; the
study goes on, the exit code says what is left, the report shows every bucket."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from suite.config.sweep import SeedSpec, child_seed, seed_grid
from suite.heads.classification import ClassificationModule
from suite.study.records import load_run, outcome
from tests.conftest import run_tiny

ORDER = [child_seed(0, "order", i) for i in range(4)]  # the tiny sweep's order seeds (master 0)


def _four_repeats(task: Path, lr: str = "1.0e-3", extra: str = "") -> None:
    sweep = task.parent.parent / "sweeps" / "tiny.yaml"
    sweep.write_text(
        f"name: tiny\nhparams: {{lr: {lr}, batch_size: 8, epochs: 2{extra}}}\n"
        "seeds: {master: 0, repeats: 4}\n"
    )


def _sabotage(monkeypatch) -> None:  # noqa: ANN001
    """Repeat 1 crashes, repeat 2 diverges, repeat 3 predicts one class (torch's seed during a
    trial is its order seed: suite.training.trial seeds dropout with it)."""
    loss, forward = ClassificationModule.loss, ClassificationModule.forward

    def sabotaged_loss(self, batch):  # noqa: ANN001, ANN202
        seed = torch.initial_seed()
        if seed == ORDER[1]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if seed == ORDER[2] and self.global_step >= 2:
            return loss(self, batch) * float("nan")
        return loss(self, batch)

    def one_class(self, batch):  # noqa: ANN001, ANN202
        logits = forward(self, batch)
        if torch.initial_seed() == ORDER[3]:
            return logits * 0 + torch.tensor([1.0, 0.0])
        return logits

    monkeypatch.setattr(ClassificationModule, "loss", sabotaged_loss)
    monkeypatch.setattr(ClassificationModule, "forward", one_class)


def test_each_fault_lands_in_its_bucket_and_the_study_goes_on(
    tiny_task: Path, tiny_models, monkeypatch, capsys
) -> None:  # noqa: ANN001, E501
    assert [s[1] for s in seed_grid(SeedSpec(repeats=4))] == ORDER
    _four_repeats(tiny_task)
    _sabotage(monkeypatch)
    folder = run_tiny(tiny_task, tiny_models["bert"], expect=1)  # an errored trial is left: exit 1
    err = capsys.readouterr().err
    assert "errored trial" in err and "illegal memory access" in err and "rerun" in err

    all_attempts = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    crashed = [r for r in all_attempts if r["seeds"]["order"] == ORDER[1]]
    assert [r["attempt"] for r in crashed] == [1, 2]  # retried once, with the same seeds
    assert {r["seeds"]["init"] for r in crashed} == {child_seed(0, "init", 1)}
    _, final = load_run(folder)
    by_order = {r["seeds"]["order"]: r for r in final}
    assert [outcome(by_order[s]) for s in ORDER[1:]] == ["errored", "failed", "failed"]
    healthy = by_order[ORDER[0]]  # the tiny task may or may not be learnt in 2 epochs
    assert outcome(healthy) in ("succeeded", "failed") and healthy["failure"] in (None, "baseline")
    assert by_order[ORDER[2]]["failure"] == "diverged" and by_order[ORDER[2]]["score"] is None
    assert by_order[ORDER[3]]["failure"] == "baseline" and by_order[ORDER[3]]["score"] == 0.5
    assert by_order[ORDER[1]]["score"] is None and not by_order[ORDER[1]]["failed"]

    (entry,) = json.loads((folder / "leaderboard.json").read_text())["entries"]
    summary = entry["summary"]
    assert summary["runs"] == 3 and summary["errored"] == 1  # the crash is not a run
    failed = 2 + healthy["failed"]
    assert summary["failed"] == failed and summary["failure_kinds"] == {"diverged": 1, "baseline": failed - 1}
    assert abs(summary["failure_rate"] - failed / 3) < 1e-9

    from suite.outputs.report import make_report

    _, page = make_report(folder)
    html = page.read_text()
    for word in ("errored", "diverged", "baseline", "illegal memory access"):
        assert word in html, word

    # The fix: the same command reruns the errored trial only, and now every trial is a run.
    monkeypatch.undo()
    run_tiny(tiny_task, tiny_models["bert"], expect=0)
    _, final = load_run(folder)
    assert [outcome(r) for r in final].count("errored") == 0 and len(final) == 4
    again = {r["seeds"]["order"]: r for r in final}
    assert again[ORDER[2]] == by_order[ORDER[2]]  # ended runs are kept, not rerun


def test_samplers_never_learn_from_crashes(tiny_task: Path, tiny_models, monkeypatch) -> None:  # noqa: ANN001
    import optuna

    _four_repeats(tiny_task)
    _sabotage(monkeypatch)
    folder = run_tiny(tiny_task, tiny_models["bert"], expect=1)
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{folder / 'study.db'}")
    states = {}
    for t in study.get_trials():
        states.setdefault(t.user_attrs["seeds"]["order"], []).append((t.state.name, t.value))
    assert states[ORDER[1]] == [("FAIL", None), ("FAIL", None)]
    # A diverged run is a poor result (the trivial baseline's score), not a missing one.
    assert states[ORDER[2]] == [("COMPLETE", 0.5)]


def test_huge_learning_rate_is_a_failed_run_never_an_error(tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    _four_repeats(tiny_task, lr="0.9", extra=", warmup_ratio: 0.0, max_grad_norm: 1.0e+9")
    folder = run_tiny(tiny_task, tiny_models["bert"])
    _, final = load_run(folder)
    assert {outcome(r) for r in final} <= {"failed", "succeeded"}
    assert any(r["outcome"] == "failed" for r in final)
    for r in final:
        assert r["failure"] in (None, "baseline", "diverged")
        assert (r["score"] is None) == (r["failure"] == "diverged")
