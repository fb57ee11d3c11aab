"""An error that repeats stops the study (suite/study/repeated_errors.py): once 3 errored trials
share a signature, no trial of what it covers starts; the run says so in one line and exits 1; the
same command after the fix trains every trial. An error confined to one setting stops that one."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import pytest
import torch
from optuna.trial import TrialState, create_trial

from suite.heads.classification import ClassificationModule
from suite.study.records import load_run, outcome
from suite.study.repeated_errors import REPEATS, error_signature, repeated_errors
from tests.conftest import run_tiny, save_tiny_models


def test_a_signature_drops_numbers_paths_and_the_location() -> None:
    a = "error: RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB on /dev/nvidia0 (trial.py:88)"
    b = "error: RuntimeError: CUDA out of memory. Tried to allocate 512 GiB on /dev/nvidia3 (amp.py:108)"
    expected = "RuntimeError: CUDA out of memory. Tried to allocate # GiB on <path>"
    assert error_signature(a) == error_signature(b) == expected
    assert error_signature("error: ValueError: bad at step 3") != error_signature(
        "error: KeyError: bad at step 3"
    )


def _trial(
    number: int, size: int, setting: dict, reason: str | None, epoch: int = 0
) -> optuna.trial.FrozenTrial:
    """A stored trial, ended at second `number`: errored with `reason` in plan `epoch`, or a run."""
    record = (
        {"outcome": "errored", "reason": reason, "plan_epoch": epoch} if reason else {"outcome": "succeeded"}
    )
    state = TrialState.FAIL if reason else TrialState.COMPLETE
    attrs = {"key": f"k{number}", "size": size, "setting": setting, "record": record}
    trial = create_trial(state=state, value=None if reason else 0.7, user_attrs=attrs)
    trial.number = number
    trial.datetime_complete = datetime(2026, 1, 1) + timedelta(seconds=number)
    return trial


OOM = "error: RuntimeError: CUDA out of memory. Tried to allocate {} MiB (trial.py:1)"


def test_an_error_of_one_setting_stops_that_setting_and_one_of_all_stops_the_study() -> None:
    trials = [
        _trial(i, 64, {"batch_size": 64, "lr": lr}, OOM.format(100 + i)) for i, lr in enumerate([1, 2, 3])
    ]
    trials += [_trial(3, 64, {"batch_size": 16, "lr": 1}, None)]
    (stop,) = repeated_errors(trials)
    assert stop.count == REPEATS and stop.scope == {"size": "64", "batch_size": "64"}
    assert "batch_size=64" in stop.line() and "lower batch_size" in stop.line()
    assert stop.covers(_trial(9, 64, {"batch_size": 64, "lr": 4}, None))
    assert not stop.covers(_trial(9, 64, {"batch_size": 16, "lr": 4}, None))
    assert repeated_errors(trials[:2]) == []  # two errors are not yet a repeat
    assert repeated_errors(trials, epoch=1) == []  # errors of an earlier plan do not count
    # A run of batch 64 ended before them: the error is not the setting's, so it stops the study
    # (the three came in a row, after the last run).
    everywhere = [
        _trial(-2, 64, {"batch_size": 16, "lr": 1}, None),
        _trial(-1, 64, {"batch_size": 64, "lr": 9}, None),
    ]
    assert repeated_errors([*everywhere, *trials[:3]])[0].scope is None


def test_errors_spread_among_runs_stop_nothing_and_a_retry_is_not_another_trial() -> None:
    """Three transient faults of one signature between runs of the same settings: not in a row, so
    no stop; one trial's two attempts count once."""
    fault = "error: RuntimeError: CUDA error: an illegal memory access was encountered (trial.py:1)"
    spread = []
    for i in range(3):
        spread += [_trial(2 * i, 64, {"lr": 1}, fault), _trial(2 * i + 1, 64, {"lr": 1}, None)]
    assert repeated_errors(spread) == []
    retried = [
        _trial(0, 64, {"lr": 1}, fault),
        _trial(1, 64, {"lr": 1}, fault),
        _trial(2, 64, {"lr": 2}, fault),
    ]
    retried[1].user_attrs["key"] = "k0"  # the second attempt of the first trial
    assert repeated_errors(retried) == []
    in_a_row = [*spread, *(_trial(10 + i, 64, {"lr": 1}, fault) for i in range(3))]
    assert repeated_errors(in_a_row)[0].count == 3


REPEATS_IN_SWEEP = 6


def _crash_everywhere(monkeypatch: pytest.MonkeyPatch, when: object = None) -> None:
    """Every trial (or those `when(module)` picks) crashes in its first step, each with another
    step number and address in its message: one signature."""
    loss = ClassificationModule.loss

    def crashing(self, batch):  # noqa: ANN001, ANN202
        if when is None or when(self):
            raise RuntimeError(f"illegal memory access at 0x{id(batch):x}, step {torch.initial_seed() % 97}")
        return loss(self, batch)

    monkeypatch.setattr(ClassificationModule, "loss", crashing)


def _trained(trace: Path) -> list[str]:
    return [line.split()[2] for line in trace.read_text().splitlines() if line.startswith("trial ")]


def test_an_error_on_every_trial_stops_the_study_after_three_and_a_rerun_trains_all(
    tiny_task: Path, tiny_models, monkeypatch, capsys, tmp_path: Path
) -> None:  # noqa: ANN001
    sweep = tiny_task.parent.parent / "sweeps" / "tiny.yaml"
    sweep.write_text(sweep.read_text().replace("repeats: 3", f"repeats: {REPEATS_IN_SWEEP}"))
    trace = tmp_path / "trace"
    monkeypatch.setenv("SUITE_TRACE", str(trace))
    _crash_everywhere(monkeypatch)
    folder = run_tiny(tiny_task, tiny_models["bert"], expect=1)
    out, err = capsys.readouterr()
    # No trial started once three planned trials shared the error (a retry may have been among the
    # trainings: one trial's two attempts count once).
    assert len(set(_trained(trace))) == REPEATS and len(_trained(trace)) < 2 * REPEATS
    stopped = [line for line in err.splitlines() if line.startswith("stopped")]
    assert len(stopped) == 1 and "every trial" in stopped[0] and "illegal memory access" in stopped[0]
    assert "rerun the same command" in stopped[0]
    assert "Traceback" not in out + err and "errored trial" not in err
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    unstarted = REPEATS_IN_SWEEP - len({r["key"] for r in records})  # a retry may be among the three
    assert f"{unstarted} planned trials not started" in stopped[0]
    assert len({r["key"] for r in records}) == REPEATS and all(outcome(r) == "errored" for r in records)
    assert all("Traceback" in r["trace"] and "illegal memory access" in r["trace"] for r in records)

    trace.unlink()  # the same command without a fix: three more trainings, and the same stop
    run_tiny(tiny_task, tiny_models["bert"], expect=1)
    assert len(set(_trained(trace))) == REPEATS and capsys.readouterr().err.count("stopped every trial") == 1

    monkeypatch.undo()  # the fix; the same command trains every trial, the errored ones again
    monkeypatch.setenv("SUITE_TRACE", str(trace))
    trace.unlink()
    run_tiny(tiny_task, tiny_models["bert"], expect=0)
    _, final = load_run(folder)
    assert len(final) == REPEATS_IN_SWEEP and all(outcome(r) != "errored" for r in final)
    assert sorted(_trained(trace)) == sorted(r["key"] for r in final)  # each once


def test_an_error_of_one_setting_stops_that_setting_only(
    tiny_task: Path, tiny_models, monkeypatch, capsys
) -> None:  # noqa: ANN001
    sweep = tiny_task.parent.parent / "sweeps" / "tiny.yaml"
    sweep.write_text(
        "name: tiny\nhparams: {batch_size: 8, epochs: 1}\n"
        "space: {lr: {type: categorical, choices: [1.0e-3, 2.0e-3]}}\nsampler: {type: grid}\n"
        "seeds: {master: 0, repeats: 4}\n"
    )
    _crash_everywhere(monkeypatch, when=lambda module: module.train_hparams.lr == 2e-3)
    folder = run_tiny(tiny_task, tiny_models["bert"], expect=1)
    out, err = capsys.readouterr()
    (stopped,) = [line for line in err.splitlines() if line.startswith("stopped")]
    assert "lr=0.002" in stopped and "Traceback" not in out + err
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    by_lr = {lr: [r for r in records if r["hparams"]["lr"] == lr] for lr in (1e-3, 2e-3)}
    assert len(by_lr[1e-3]) == 4 and all(outcome(r) != "errored" for r in by_lr[1e-3])
    bad = by_lr[2e-3]
    assert len({r["key"] for r in bad}) == REPEATS and all(outcome(r) == "errored" for r in bad)


def test_the_stop_s_advice_followed_after_fixing_a_model_folder_trains_the_errored_trials(
    tiny_task: Path, tiny_models, capsys, tmp_path: Path
) -> None:  # noqa: ANN001
    """A model folder whose tokenizer yields ids past the encoder's vocabulary errors every trial.
    Fixed, its hash is another study's: the same command is refused, and the stop's own advice
    (`--study NAME`) trains the planned trials on the fixed folder."""
    model = save_tiny_models(tmp_path / "broken", ["bert"], lambda c: setattr(c, "vocab_size", 64))["bert"]
    run_tiny(tiny_task, model, "--threads", "1", expect=1)
    (stopped,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("stopped")]
    assert stopped.endswith(
        "a fix to the model, data or method files is a new study: add --study NAME or use another --out"
    )
    shutil.rmtree(model)
    shutil.copytree(tiny_models["bert"], model)  # the fix
    run_tiny(tiny_task, model, "--threads", "1", expect=2)
    refused = capsys.readouterr().err
    assert "model.sha256" in refused and "start a new study with another --out or --study" in refused
    folder = run_tiny(tiny_task, model, "--threads", "1", "--study", "fixed")  # the advice, literally
    _, final = load_run(folder)
    assert len(final) == 3 and all(outcome(r) in ("succeeded", "failed") for r in final)
    assert all(r["study"] == "fixed" for r in final)
