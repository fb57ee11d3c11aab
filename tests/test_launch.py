"""`suite launch`: a study planned here, its workers submitted through submitit (local processes,
or a Slurm array whose parameters and sbatch script are checked without a cluster)."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections import Counter
from pathlib import Path

import optuna
import pytest

from suite.commands.cli import main
from suite.commands.launch import Launch, executor_parameters, job_ids, make_executor, slurm_minutes
from suite.errors import SpecError
from suite.model.devices import resolve_trainer
from suite.study.storage import split_password
from tests.test_workers import _sweep

POSTGRES = os.environ.get("SUITE_TEST_POSTGRES_URL")
needs_postgres = pytest.mark.skipif(
    not POSTGRES, reason="SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)"
)


def _launch(task: Path, model: Path, *extra: str) -> list[str]:
    """`suite launch` of the fixture task on the 2-setting x 4-seed sweep (8 trials)."""
    root = task.parent.parent
    return [
        "launch", str(task), "--model", str(model), "--sweep", str(_sweep(root)),
        "--out", str(root / "runs"), "--data-dir", str(root / "data"), "--quiet", *extra,
    ]  # fmt: skip


def _local(task: Path, model: Path, *extra: str) -> list[str]:
    return _launch(task, model, "--executor", "local", "--workers", "2", "--cpus-per-worker", "1", *extra)


def _trials(url: str, name: str | None = None) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=url).get_trials()


def _ended(trials: list[optuna.trial.FrozenTrial]) -> Counter:
    """Planned key -> how many of its trials ran to an end (a record, state COMPLETE)."""
    return Counter(t.user_attrs["key"] for t in trials if t.state.name == "COMPLETE")


def _storage_args(backend: str) -> tuple[list[str], str | None]:
    if backend == "sqlite":
        return [], None
    if not POSTGRES:
        pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
    name = f"launch-{uuid.uuid4().hex[:8]}"
    return ["--storage", POSTGRES, "--study", name], name


@pytest.mark.faults
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_local_launch_runs_every_planned_trial_once_and_reruns_resume(
    backend: str, tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    storage, name = _storage_args(backend)
    command = _local(tiny_task, tiny_models["bert"], *storage)
    assert main(command) == 0
    folder = next((tiny_task.parent.parent / "runs").glob("tiny/*"))
    url = POSTGRES if name else f"sqlite:///{folder / 'study.db'}"
    trials = _trials(url, name)
    ended = _ended(trials)
    assert len(trials) == 8 and len(ended) == 8 and set(ended.values()) == {1}  # each planned trial once
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert sorted(r["key"] for r in records) == sorted(ended)
    assert json.loads((folder / "leaderboard.json").read_text())["entries"]
    launches = json.loads((folder / "launch.json").read_text())["launches"]
    assert [(x["executor"], len(x["jobs"]), x["parameters"]["cpus_per_task"]) for x in launches] == [
        ("local", 2, 1)
    ]
    out = capsys.readouterr().out
    assert f"submitted 2 worker jobs (local): {' '.join(launches[0]['jobs'])}" in out
    # Planned without a stack (`launch` plans for other machines): the first worker stored its own.
    study = optuna.load_study(study_name=name, storage=url)
    assert study.user_attrs["fingerprint"]["stack.torch"] and study.user_attrs["fingerprint"]["threads"] == 1
    assert json.loads((folder / "run.json").read_text())["stack"]["torch"]
    assert {r["stack"]["torch"] for r in records} == {study.user_attrs["run_info"]["stack"]["torch"]}

    before = (folder / "trials.jsonl").read_text()
    assert main(command) == 0  # the same command again: resumes a finished study, submits nothing
    assert len(_trials(url, name)) == 8
    assert len(json.loads((folder / "launch.json").read_text())["launches"]) == 1
    assert (folder / "trials.jsonl").read_text() == before
    assert "every planned trial has ended; no worker submitted" in capsys.readouterr().out
    # Other workers, no --cpus-per-worker: the study's threads (1), not this machine's CPUs / 1.
    other = _launch(tiny_task, tiny_models["bert"], "--executor", "local", "--workers", "1", *storage)
    assert main(other) == 0
    assert "every planned trial has ended; no worker submitted" in capsys.readouterr().out
    # Other threads per worker, asked as the launch asks them: refused naming the flag typed.
    assert main([*other, "--cpus-per-worker", "2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --cpus-per-worker 2: the study runs 1 thread(s) per worker")

    if backend != "sqlite":
        return
    # The workers check the stack the study stored: another one fails their job, not the launch
    # (one worker job: each job checks for itself, and a job is a process that imports torch).
    study.set_user_attr("fingerprint", {**study.user_attrs["fingerprint"], "stack.numpy": "1.0.0"})
    assert main([*other, "--seeds", "5"]) == 1  # grown by 2 trials, which nobody may run
    err = capsys.readouterr().err
    refused = [line for line in err.splitlines() if line.startswith("job ")]
    assert len(refused) == 1 and all("SuiteError: study" in line for line in refused)
    assert all("stack.numpy 1.0.0 -> " in line and "--allow-stack-change" in line for line in refused)
    assert len(_ended(_trials(url, name))) == 8
    assert main([*other, "--seeds", "5", "--allow-stack-change"]) == 0
    ended = _ended(_trials(url, name))
    assert len(ended) == 10 and set(ended.values()) == {1}
    assert json.loads((folder / "run.json").read_text())["stack_mixed"] is True


@pytest.mark.faults
def test_a_rerun_after_killed_workers_resumes_without_rerunning_ended_trials(
    tiny_task: Path, tiny_models: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Both workers die in their second trial (as jobs past their time limit would): the launch
    exits 1 saying so; the same command again runs only what did not end, each trial once."""
    command = _local(tiny_task, tiny_models["bert"])
    monkeypatch.setenv("SUITE_HEARTBEAT_S", "5")  # a dead worker's trial is re-queued after 15 s
    monkeypatch.setenv("SUITE_KILL_AT", "evaluation:2")  # the jobs inherit it: each dies at its 2nd
    assert main(command) == 1
    err = capsys.readouterr().err
    assert err.count("ended without a result") == 2 and "rerun the same command" in err
    folder = next((tiny_task.parent.parent / "runs").glob("tiny/*"))
    url = f"sqlite:///{folder / 'study.db'}"
    first = {t.user_attrs["key"]: t for t in _trials(url) if t.state.name == "COMPLETE"}
    assert 1 <= len(first) <= 2

    monkeypatch.delenv("SUITE_KILL_AT")
    assert main(command) == 0
    trials = _trials(url)
    ended = _ended(trials)
    assert len(ended) == 8 and set(ended.values()) == {1}
    for key, trial in first.items():  # ended before: kept as they were, not run again
        again = next(t for t in trials if t.state.name == "COMPLETE" and t.user_attrs["key"] == key)
        assert again.number == trial.number and again.user_attrs["record"] == trial.user_attrs["record"]
    killed = [t for t in trials if t.state.name == "FAIL"]
    retried = [t for t in trials if "failed_trial" in t.system_attrs]
    assert len(killed) == len(retried) == 2  # the killed trials came back once each
    launches = json.loads((folder / "launch.json").read_text())["launches"]
    assert [len(x["jobs"]) for x in launches] == [2, 2]


@pytest.mark.parametrize(
    "storage", [None, "sqlite:////shared/study.db", "journal:/shared/study.log", "redis://host/0"]
)
def test_slurm_refuses_a_storage_its_nodes_cannot_share(
    storage: str | None, tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    extra = ["--storage", storage] if storage else []
    assert main(_launch(tiny_task, tiny_models["bert"], "--workers", "2", *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert "need a database server, --storage postgresql://... or mysql://..." in err
    assert not (tiny_task.parent.parent / "runs").exists()  # refused before planning anything


def test_local_jobs_with_gpus_are_refused_they_would_all_share_gpu_0(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    """submitit's local executor sets CUDA_VISIBLE_DEVICES=0..G-1 for every job, whatever the
    parent's list: `run --workers-per-gpu` is the local way."""
    assert main(_local(tiny_task, tiny_models["bert"], "--gpus-per-worker", "1")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--workers-per-gpu" in err
    assert not (tiny_task.parent.parent / "runs").exists()


def test_slurm_parameters_reach_submitit_and_the_sbatch_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from submitit.slurm.slurm import _make_sbatch_string

    how = Launch(
        executor="slurm",
        workers=4,
        partition="gpu",
        time="1-12:00:00",
        mem="32G",
        parallelism=2,
        options=("account=proj", "qos=high"),
    )
    parameters = executor_parameters(how, cpus=8, gpus=1, name="ner")
    assert parameters == {
        "name": "suite-ner",
        "cpus_per_task": 8,
        "gpus_per_node": 1,
        "timeout_min": 36 * 60,
        "slurm_partition": "gpu",
        "slurm_mem": "32G",
        "slurm_array_parallelism": 2,
        "slurm_additional_parameters": {"account": "proj", "qos": "high"},
    }
    _fake_slurm(tmp_path, monkeypatch)  # submitit's Slurm executor is built only where srun exists
    slurm = make_executor("slurm", tmp_path / "jobs", parameters)._executor.parameters
    script = _make_sbatch_string(command="run", folder=tmp_path / "jobs" / "%j", map_count=4, **slurm)
    for line in (
        "--partition=gpu", "--time=2160", "--mem=32G", "--cpus-per-task=8", "--gpus-per-node=1",
        "--array=0-3%2", "--account=proj", "--qos=high", "--job-name=suite-ner",
    ):  # fmt: skip
        assert f"#SBATCH {line}\n" in script, line
    cpu_only = executor_parameters(Launch(executor="slurm", workers=3), cpus=1, gpus=0, name="ner")
    assert "gpus_per_node" not in cpu_only and cpu_only["timeout_min"] == 240  # the 4:00:00 default
    assert cpu_only["slurm_array_parallelism"] == 3
    here = executor_parameters(Launch(executor="local", workers=2), cpus=1, gpus=0, name="ner")
    local = make_executor("local", tmp_path / "local", here)._executor.parameters
    assert local["timeout_min"] == 7 * 24 * 60  # not submitit's 2-minute local default


@pytest.mark.parametrize(
    "text, minutes",
    [("90", 90), ("30:30", 31), ("1:30:00", 90), ("2-0", 2880), ("1-2:30", 1590), ("1-00:00:01", 1441)],
)
def test_slurm_time_limits_in_sbatch_formats(text: str, minutes: int) -> None:
    assert slurm_minutes(text) == minutes


@pytest.mark.parametrize(
    "ids, shown",
    [
        (["4242_0", "4242_1", "4242_2", "4242_5", "4242_7", "4242_6"], "4242_[0-2,5-7]"),
        (["4243_0"], "4243_0"),
        (["4244"], "4244"),
        (["4245", "4246_1", "4246_0", "4247_3"], "4245 4246_[0-1] 4247_3"),
        (["31337", "31338"], "31337 31338"),  # local processes
    ],
)
def test_job_ids_are_written_as_squeue_writes_them(ids: list[str], shown: str) -> None:
    assert job_ids(ids) == shown


def test_bad_launch_options_are_one_line(tmp_path: Path) -> None:
    for bad in ("1h", "0", ""):
        with pytest.raises(SpecError, match="--slurm-time"):
            slurm_minutes(bad)
    with pytest.raises(SpecError, match="--slurm-mem"):
        executor_parameters(Launch(executor="slurm", workers=1, mem="lots"), 1, 0, "ner")
    with pytest.raises(SpecError, match="--slurm-option"):
        executor_parameters(Launch(executor="slurm", workers=1, options=("account",)), 1, 0, "ner")
    with pytest.raises(SpecError, match="--workers"):
        Launch(executor="local", workers=0)


def test_workers_on_cluster_gpus_are_planned_without_a_gpu_here() -> None:
    """A login node has no GPU: the trainer is resolved for the workers' GPUs, not this machine's."""
    assert resolve_trainer({}, gpus=1) == {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"}
    assert resolve_trainer({"precision": "16-mixed"}, gpus=2)["precision"] == "16-mixed"
    assert resolve_trainer({}, gpus=0)["accelerator"] == "cpu"
    with pytest.raises(SpecError, match="--accelerator cpu: the workers have 1 GPU"):
        resolve_trainer({"accelerator": "cpu"}, gpus=1)


def _fake_tools(root: Path, monkeypatch: pytest.MonkeyPatch, **scripts: str) -> None:
    """Shell commands named by `scripts` (name -> body) in root/bin, first on PATH."""
    bin_ = root / "bin"
    bin_.mkdir(exist_ok=True)
    for tool, body in scripts.items():
        (bin_ / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")


def _fake_slurm(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`srun` and an `sbatch` that keeps each script it is given and answers with job 4242."""
    sbatch = f'cp "$1" "{root}/sbatch-$$.sh"\necho "Submitted batch job 4242"'
    _fake_tools(root, monkeypatch, srun="exit 0", sbatch=sbatch)
    return root


@needs_postgres
def test_slurm_launch_submits_an_array_prints_how_to_watch_and_a_rerun_writes_the_outputs(
    tiny_task: Path,
    tiny_models: dict,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Against a fake sbatch: the array's script and job ids, then each job's pickled call run here
    as a node would run it, then the same command again: nothing left, nothing submitted."""
    from submitit.core.utils import DelayedSubmission

    name = f"slurm-{uuid.uuid4().hex[:8]}"
    _fake_slurm(tmp_path, monkeypatch)
    command = _launch(
        tiny_task, tiny_models["bert"], "--workers", "2", "--storage", POSTGRES, "--study", name
    )
    assert main([*command, "--slurm-partition", "cpu", "--cpus-per-worker", "1"]) == 0
    out = capsys.readouterr().out
    assert "submitted 2 worker jobs (slurm): 4242_[0-1]" in out
    assert "watch: optuna-dashboard 'postgresql://suite:***@" in out and "rerun this command" in out
    (script,) = tmp_path.glob("sbatch-*.sh")
    text = script.read_text()
    assert "#SBATCH --array=0-1%2\n" in text and "#SBATCH --partition=cpu\n" in text
    folder = next((tiny_task.parent.parent / "runs").glob("tiny/*"))
    (launched,) = json.loads((folder / "launch.json").read_text())["launches"]
    assert launched["jobs"] == ["4242_0", "4242_1"] and launched["storage"].startswith(
        "postgresql://suite:***@"
    )
    study = optuna.load_study(study_name=name, storage=POSTGRES)
    assert not any(k.startswith("stack.") for k in study.user_attrs["fingerprint"])  # left to the nodes
    assert Counter(t.state.name for t in study.get_trials()) == {"WAITING": 8}

    bare, password = split_password(POSTGRES)
    monkeypatch.setenv("PGPASSWORD", password or "")  # what sbatch hands each job, never a file
    for pickled in sorted((folder / "jobs").glob("4242_*/*_submitted.pkl")):  # as the nodes would
        job = DelayedSubmission.load(pickled)
        assert job.args[0].storage == bare  # the password-less URL
        assert re.fullmatch(r"ended \d trials?; no trial left to take", job.result())
    assert len(_ended(study.get_trials())) == 8
    assert main([*command, "--slurm-partition", "cpu", "--cpus-per-worker", "1"]) == 0
    assert len(list(tmp_path.glob("sbatch-*.sh"))) == 1  # nothing left to run: nothing submitted
    assert len((folder / "trials.jsonl").read_text().splitlines()) == 8


def test_the_first_worker_to_join_stores_the_stack_and_later_ones_are_checked_against_it(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from suite.study.planning import adopt_stack

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    study.set_user_attr("fingerprint", {"threads": 1})  # as `launch` stores it: no stack
    study.set_user_attr("run_info", {"stack": None, "threads": 1})
    first = SimpleNamespace(fingerprint={"threads": 1, "stack.gpu": "H100"}, stack={"gpu": "H100"})
    second = SimpleNamespace(fingerprint={"threads": 1, "stack.gpu": "A100"}, stack={"gpu": "A100"})
    assert adopt_stack(study, first) is True
    assert adopt_stack(study, second) is False  # too late: it is checked against the first one's
    assert study.user_attrs["fingerprint"] == {"threads": 1, "stack.gpu": "H100"}
    assert study.user_attrs["run_info"]["stack"] == {"gpu": "H100"}


def _fake_accounting(root: Path, monkeypatch: pytest.MonkeyPatch, sacct: str | None, squeue: str) -> None:
    """`sacct` and `squeue` that print these rows (or, for sacct None, fail as without accounting)."""
    disabled = 'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1'
    sacct_body = disabled if sacct is None else f"printf '{sacct}'"
    _fake_tools(root, monkeypatch, sacct=sacct_body, squeue=f"printf '{squeue}'")


def test_an_out_of_memory_job_is_reported_by_its_state_which_a_real_slurm_here_cannot_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OUT_OF_MEMORY needs cgroups, which this machine's Slurm has not: sacct is faked here."""
    from suite.study import slurm

    rows = "41_0|OUT_OF_MEMORY\\n41_1|COMPLETED\\n41_2|CANCELLED by 0\\n"
    _fake_accounting(tmp_path, monkeypatch, rows, "")
    assert slurm.end_states(["41_0", "41_1", "41_2"]) == {
        "41_0": "OUT_OF_MEMORY",
        "41_1": "COMPLETED",
        "41_2": "CANCELLED",
    }
    assert not slurm.running(["41_0", "41_1", "41_2"])  # squeue lists none of them: all ended


def test_without_accounting_an_ended_job_is_reported_by_squeue_or_as_unknown_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suite.study import slurm

    _fake_accounting(tmp_path, monkeypatch, None, "52_0|TIMEOUT\\n52_1|RUNNING\\n")
    assert slurm.running(["52_0", "52_1"])
    states = slurm.end_states(["52_0", "52_2"])
    assert states["52_0"] == "TIMEOUT"
    assert states["52_2"] == (
        "state unknown: sacct: error: Slurm accounting storage is disabled; squeue no longer does"
    )


def test_an_ended_job_is_reported_by_squeue_while_accounting_still_calls_it_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurmdbd records a job's end a moment after squeue shows it: squeue's ended state is taken,
    and a job only sacct lists, as running after a few looks, is unknown, saying so."""
    from suite.study import slurm

    _fake_accounting(tmp_path, monkeypatch, "62_0|RUNNING\\n62_1|RUNNING\\n", "62_0|COMPLETED\\n")
    states = slurm.end_states(["62_0", "62_1"], tries=2, wait_s=0.01)
    assert states == {
        "62_0": "COMPLETED",
        "62_1": "state unknown: sacct still says RUNNING; squeue no longer does",
    }


# The endings of `run` and `launch --wait`, from what the storage holds (no Slurm here).
def _key(i: int) -> str:
    return f"size=32|lr=0.0003,epochs=1|init={i},order={i + 1},subsample={i + 2}"


def _add(study: optuna.Study, i: int, state: str, system: dict | None = None, record: bool = False) -> int:
    """A trial of planned key `i` in `state`, with these system attributes; its number."""
    from optuna.trial import TrialState, create_trial

    attrs: dict = {"key": _key(i), "attempt": 1, "setting": {}}
    if record:
        attrs["record"] = {"key": _key(i), "outcome": "succeeded", "score": 0.5, "seeds": {}}
    value = 0.5 if state == "COMPLETE" else None
    study.add_trial(
        create_trial(state=TrialState[state], value=value, user_attrs=attrs, system_attrs=system or {})
    )
    return study.trials[-1].number


def _name(number: int, i: int) -> str:
    return f"trial {number} (size=32|...|init={i},order={i + 1},subsample={i + 2})"


def test_the_ending_says_why_each_planned_trial_did_not_end_and_what_to_do(
    capsys: pytest.CaptureFixture,
) -> None:
    """Each reason a planned trial did not end, read from the storage (what its worker wrote when
    it put it back, Optuna's mark on a copy queued after missed heartbeats, a trial still marked
    running), one line each, then one line of what to do: no "a worker died?" guess."""
    from suite.study.endings import PUT_BACK_ATTR
    from suite.study.worker import exit_status

    study = optuna.create_study()
    _add(study, 0, "COMPLETE", record=True)
    cancelled = _add(study, 1, "FAIL", {"worker": "vm:1"})
    noted = {"why": "cancel", "signal": "SIGTERM", "job": "30", "after_s": 56.2, "trial": cancelled}
    _add(study, 1, "WAITING", {PUT_BACK_ATTR: noted})
    stale = _add(study, 2, "FAIL")
    _add(study, 2, "WAITING", {"failed_trial": stale, PUT_BACK_ATTR: noted})  # a note its trial carried
    dead = _add(study, 3, "RUNNING", {"worker": "vm:2"})
    _add(study, 4, "WAITING")
    assert exit_status(study) == 1
    assert capsys.readouterr().err.splitlines() == [
        "1 of 5 planned trials ended; 4 did not:",
        f"  1 trial put back by a cancel (SIGTERM): {_name(cancelled, 1)} after 56 s in job 30",
        "  1 trial queued again after its worker stopped sending heartbeats (killed, or frozen): "
        + _name(stale, 2),
        "  1 trial still marked running: its worker died without putting it back (killed without a stop: a "
        f"node failure, the memory limit or SIGKILL): {_name(dead, 3)}",
        "  1 trial not started",
        "rerun the same command to run the 4 trials left (no attempt was spent)",
    ]

    capped = _add(study, 5, "FAIL")
    noted = {"why": "capped", "times": [27.0, 30.1], "limit_min": 1, "trial": capped, "job": "31_0"}
    _add(study, 5, "WAITING", {PUT_BACK_ATTR: noted})
    exit_status(study)
    lines = capsys.readouterr().err.splitlines()
    assert lines[1] == (
        f"  1 trial put back by a time limit shorter than a trial: {_name(capped, 5)}, stopped after 27, "
        "30 s by 2 limits of 1 min"
    )
    assert (
        lines[-1]
        == "rerun with a --slurm-time longer than 1 min to run the 5 trials left (no attempt was spent)"
    )


def test_every_planned_trial_ended_says_nothing_more_and_no_table_header_stands_alone(
    tiny_task: Path, tmp_path: Path
) -> None:
    from suite.config.task import load_task
    from suite.outputs.run_folder import format_summary
    from suite.study.worker import exit_status

    study = optuna.create_study()
    _add(study, 0, "COMPLETE", record=True)
    assert exit_status(study) == 0
    assert format_summary(load_task(tiny_task), [], tmp_path) == (
        f"tiny (accuracy x100, dev) -> {tmp_path / 'trials.jsonl'}: no trial has ended"
    )


def test_a_job_says_what_it_put_back_and_why_and_twice_at_one_limit_is_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`stopped` as a job of array 77 runs it after its worker put a trial back: the job's line,
    and the reason written on the trial's queued copy, which the study's ending reads. The same
    trial put back by a 1-minute limit's signal a second time is the cap: its array's other jobs
    are cancelled (here a stub: no scancel leaves this test), and their put-backs say why."""
    from optuna.trial import TrialState

    from suite.config.request import Request
    from suite.study import slurm_job
    from suite.study.endings import ending_lines
    from suite.study.job_log import JobLog, me
    from suite.study.plan import retry_attrs

    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    monkeypatch.setattr(slurm_job, "cancel_rest_of_array", lambda: 1)
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(storage=url, study_name="s")
    for i in (0, 1):
        study.enqueue_trial({}, user_attrs={"key": _key(i), "attempt": 1, "setting": {}})
    log = JobLog(Request(storage=url, study="s"))

    def put_back(i: int, why: str, limit: int | None) -> str:  # as `work` does, then the job
        (queued,) = [
            t for t in study.get_trials(states=(TrialState.WAITING,)) if t.user_attrs["key"] == _key(i)
        ]
        study._storage.set_trial_state_values(queued._trial_id, state=TrialState.RUNNING)
        study._storage.set_trial_system_attr(queued._trial_id, "worker", me())
        trial = optuna.Trial(study, queued._trial_id)
        study.tell(trial, state=TrialState.FAIL)
        study.enqueue_trial({}, user_attrs=retry_attrs(trial, 1), skip_if_exists=False)
        return slurm_job.stopped(log, why, limit)

    def ending() -> list[str]:
        return ending_lines(study.get_trials(), {_key(0), _key(1)}, 0, 2)[1:]

    assert put_back(0, "SIGTERM", 1) == (
        f"stopped by SIGTERM (a cancel, or Slurm ending the job): {_name(0, 0)} went back to the queue after "
        "0 s (no attempt spent)"
    )
    assert f"{_name(0, 0)} started" in capsys.readouterr().err  # its start, though no look saw it
    assert ending()[0] == f"  1 trial put back by a cancel (SIGTERM): {_name(0, 0)} after 0 s in job 77_0"
    assert put_back(0, "SIGUSR2", 1).startswith(
        f"stopped by the time limit's signal (SIGUSR2): {_name(2, 0)} went back"
    )
    assert ending() == [
        f"  1 trial put back by the time limit's signal: {_name(2, 0)} after 0 s in job 77_0",
        "  1 trial not started",
        "rerun the same command to run the 2 trials left (no attempt was spent); a trial that time limits "
        "stop twice needs a longer --slurm-time",
    ]
    assert put_back(0, "SIGUSR2", 1) == (
        f"time limit shorter than a trial: {_name(3, 0)} ran 0, 0 s before 2 time limits of 1 min and is not "
        "taken again by this launch (its 1 other job cancelled); rerun with a longer --slurm-time"
    )
    assert put_back(1, "SIGTERM", 1) == (
        "stopped by SIGTERM: this array was cancelled, its time limit shorter than a trial "
        f"(size=32|...|init=0,order=1,subsample=2): {_name(1, 1)} went back to the queue after 0 s (no "
        "attempt spent)"
    )
    assert ending() == [
        f"  1 trial put back by a time limit shorter than a trial: {_name(3, 0)}, stopped after 0, 0 s by 2 "
        "limits of 1 min",
        f"  1 trial put back when that cap cancelled its job: {_name(1, 1)} after 0 s in job 77_0",
        "rerun with a --slurm-time longer than 1 min to run the 2 trials left (no attempt was spent)",
    ]


def test_a_job_whose_trial_was_taken_over_says_so_not_that_it_simply_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A trial this job's worker ran, failed as stale by another worker (a missed heartbeat): the
    job's line names it as taken over, beside the trials it ended; each has its start and end line."""
    from suite.config.request import Request
    from suite.study.job_log import JobLog, me

    monkeypatch.setattr("suite.study.supervise._stop", None)  # this process received no stop
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(storage=url, study_name="s")
    for i in (0, 1):
        study.enqueue_trial({}, user_attrs={"key": _key(i), "attempt": 1, "setting": {}})
    log = JobLog(Request(storage=url, study="s"))
    taken, ended = study.ask(), study.ask()
    for trial in (taken, ended):
        study._storage.set_trial_system_attr(trial._trial_id, "worker", me())
    study.tell(taken, state=optuna.trial.TrialState.FAIL)  # another worker's stale check
    ended.set_user_attr(
        "record", {"key": _key(1), "outcome": "succeeded", "score": 0.5, "metric": "accuracy"}
    )
    study.tell(ended, 0.5)
    log.look(every=True)
    assert log.put_back(study) is None  # nor would a stop now take it for the trial it put back
    assert log.summary() == (
        f"ended 1 trial; {_name(0, 0)} was taken over after a missed heartbeat (its result is discarded); "
        "no trial left to take"
    )
    said = [line.split(" ", 1)[1] for line in capsys.readouterr().err.splitlines()]  # stamps aside
    assert said == [
        f"{_name(0, 0)} started",
        f"{_name(1, 1)} started",
        f"{_name(1, 1)} ended: succeeded, accuracy=0.5",
    ]
