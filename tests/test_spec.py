from pathlib import Path

import pytest
import yaml

from suite.commands.cli import main
from suite.config.reading import profile_names
from suite.config.sweep import load_sweep
from suite.config.task import load_task
from suite.errors import SpecError

REPO = Path(__file__).resolve().parent.parent
TASKS = sorted((REPO / "tasks").glob("*.yaml"))
SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", TASKS + SWEEPS, ids=lambda p: p.name)
def test_every_shipped_yaml_validates_in_every_profile(path: Path) -> None:
    load = load_task if path.parent.name == "tasks" else load_sweep
    assert load(path, None).name
    for profile in profile_names(path):
        load(path, profile)
    first = path.read_text().splitlines()[0]
    assert first.startswith("# python -m suite run "), "header comment gives the command"


def test_validate_command_accepts_shipped_files(capsys: pytest.CaptureFixture) -> None:
    assert main(["validate"]) == 0
    assert "ok" in capsys.readouterr().out


def _edited(tmp_path: Path, source: Path, edit) -> Path:  # noqa: ANN001
    raw = yaml.safe_load(source.read_text())
    edit(raw)
    target = tmp_path / source.name
    target.write_text(yaml.safe_dump(raw))
    return target


def test_unknown_field_names_file_and_field(tmp_path: Path) -> None:
    path = _edited(tmp_path, REPO / "tasks/rte.yaml", lambda r: r["data"].update(txt=["a"]))
    with pytest.raises(SpecError, match=r"rte\.yaml: field 'data\.txt': Extra inputs"):
        load_task(path)


def test_bad_value_names_field(tmp_path: Path) -> None:
    path = _edited(tmp_path, REPO / "tasks/rte.yaml", lambda r: r.update(head="pooling"))
    with pytest.raises(SpecError, match=r"field 'head'"):
        load_task(path)


def test_unknown_metric_is_rejected(tmp_path: Path) -> None:
    path = _edited(tmp_path, REPO / "tasks/rte.yaml", lambda r: r["metric"].update(main="bleu"))
    with pytest.raises(SpecError, match="unknown metric 'bleu'"):
        load_task(path)


def test_sweep_profile_overrides_and_unknown_profile() -> None:
    base = load_sweep(REPO / "sweeps/seeds.yaml", None)
    smoke = load_sweep(REPO / "sweeps/seeds.yaml", "smoke")
    assert smoke.hparams["epochs"] == 1 and base.hparams["epochs"] > 1
    assert smoke.hparams["batch_size"] == base.hparams["batch_size"]  # deep merge keeps the rest
    assert load_sweep(REPO / "sweeps/seeds.yaml", "default").seeds.init == 3
    with pytest.raises(SpecError, match="no profile 'huge'"):
        load_sweep(REPO / "sweeps/seeds.yaml", "huge")


def test_profile_cannot_smuggle_unknown_fields(tmp_path: Path) -> None:
    path = _edited(
        tmp_path,
        REPO / "sweeps/seeds.yaml",
        lambda r: r["profiles"]["smoke"]["hparams"].update(momentum=0.9),
    )
    with pytest.raises(SpecError, match=r"\(profile smoke\): .*unknown hyperparameter 'momentum'"):
        load_sweep(path, "smoke")


def test_validate_command_exits_2_on_a_bad_file(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = _edited(tmp_path, REPO / "tasks/rte.yaml", lambda r: r.update(sizes=[1]))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "field 'sizes'" in err


def test_list_command_shows_tasks_models_and_sweeps(capsys: pytest.CaptureFixture) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "  ner           tagging  entity_f1  sizes [1000]  sweep ner-seeds" in out
    assert "minilm-l6  bundled offline model" in out
    assert "  devlin        grid: lr, batch_size, epochs; seeds 3 repeats" in out


def test_the_bundled_alias_declares_its_head_and_the_study_records_the_concrete_one() -> None:
    """`classifier: model` (the default) is the alias's declared head (the bundled MiniLM: mean,
    the pooling it was trained with), `auto` for any other model; made concrete before the study
    is fingerprinted, and an explicit classifier always wins."""
    from suite.config.task import TaskSpec
    from suite.model.names import default_head, resolve
    from suite.study.setup import with_model_head

    assert default_head("minilm-l6") == "mean" and default_head(resolve("minilm-l6")) == "mean"
    assert default_head("google-bert/bert-base-uncased") == "auto"
    task = load_task(REPO / "tasks" / "rte.yaml")
    assert task.classifier == "model"
    assert with_model_head(task, "minilm-l6").classifier == "mean"
    assert with_model_head(task, "roberta-base").classifier == "auto"
    explicit = TaskSpec.model_validate({**task.model_dump(), "classifier": "cls"})
    assert with_model_head(explicit, "minilm-l6").classifier == "cls"


@pytest.fixture
def error_rate(monkeypatch: pytest.MonkeyPatch) -> str:
    """A lower-is-better classification metric, faked through the metric table."""
    from suite.config import task

    known = task.METRICS_BY_HEAD["classification"]
    monkeypatch.setattr(task, "LOWER_IS_BETTER", {"error_rate"})
    monkeypatch.setitem(task.METRICS_BY_HEAD, "classification", {*known, "error_rate"})
    return "error_rate"


def _metric(tmp_path: Path, name: str, **fields: object) -> Path:
    folder = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    return _edited(folder, REPO / "tasks/rte.yaml", lambda r: r.update(metric={"main": name, **fields}))


def test_the_direction_is_the_metrics_and_a_disagreeing_field_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, error_rate: str
) -> None:
    """Left out, the direction is filled in from the metric (so a spec that still carries the
    agreeing value is the same spec); a value that disagrees is one line naming file and field."""
    rte = REPO / "tasks/rte.yaml"
    given = load_task(_metric(tmp_path, "accuracy", higher_is_better=True))  # as older specs carry it
    left_out = load_task(_metric(tmp_path, "accuracy"))
    assert left_out.metric == given.metric and left_out.metric.higher_is_better
    assert load_task(_metric(tmp_path, error_rate)).metric.higher_is_better is False
    for name, given in (("accuracy", False), (error_rate, True)):
        flipped = _metric(tmp_path, name, higher_is_better=given)
        assert main(["validate", str(flipped)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(flipped) in err and "field 'metric.higher_is_better'" in err
        assert f"disagrees with {name}" in err
    assert main(["validate", str(rte), "--set", "metric.higher_is_better=false"]) == 2
    assert "field 'metric.higher_is_better'" in capsys.readouterr().err


def test_the_failure_rule_follows_the_metrics_direction(tmp_path: Path, error_rate: str) -> None:
    """A lower-is-better metric fails at or above the trivial baseline (less the margin) and above
    its threshold: judged on negated scores, it gives what a score gets on the plain ones."""
    from suite.config.task import FailureSpec
    from suite.heads.registry import PreparedTask
    from suite.training.trial import judge

    high, low = load_task(_metric(tmp_path, "accuracy")), load_task(_metric(tmp_path, error_rate))
    rules = [
        (FailureSpec(margin=0.02), FailureSpec(margin=0.02)),
        (FailureSpec(rule="threshold", threshold=0.6), FailureSpec(rule="threshold", threshold=-0.6)),
    ]
    for rule_high, rule_low in rules:
        h = PreparedTask(high.model_copy(update={"failure": rule_high}), None, None, None, {"accuracy": 0.55})
        lo = PreparedTask(low.model_copy(update={"failure": rule_low}), None, None, None, {error_rate: -0.55})
        for score in (0.4, 0.55, 0.56, 0.57, 0.58, 0.6, 0.61, 0.9):
            assert judge(h, score)[0] == judge(lo, -score)[0], (rule_high, score)
        assert judge(lo, -0.4)[0] is not None and judge(lo, -0.9) == (None, None)
