"""The catalog of hub tasks (every shipped task with no local data): each is pinned to a hub
revision, validates offline, and reads and trains one smoke trial from its fixture, a few dozen
rows laid out as the hub's refs/convert/parquet branch serves them (tests/fixtures/hub, written
by tests/fixtures/hub/write.py); `suite list` says where every task's data comes from.

A fixture stands in for the hub repository through the same `datasets.load_dataset` call: only
`path` (the repository -> its fixture folder) and the revision (a folder has none) change.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from suite.commands.cli import main
from suite.config.task import load_task
from suite.heads.registry import prepare_task
from suite.study.records import is_run, score

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "hub"
ROWS = 24  # per split in every fixture (write.py)


def _raw(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


CATALOG = sorted(p.stem for p in (REPO / "tasks").glob("*.yaml") if "local" not in _raw(p)["data"])


def _from_fixture(task: str, folder: Path) -> Path:
    """The shipped task with its hub repository replaced by the fixture folder."""
    raw = _raw(REPO / "tasks" / f"{task}.yaml")
    hub = raw["data"]["hub"]
    hub["path"] = str(FIXTURES / hub["path"])
    del hub["revision"]
    path = folder / f"{task}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_catalog_holds_the_hub_tasks_each_pinned_with_a_fixture() -> None:
    expected = {"qnli", "qqp", "mnli", "mnli-mm", "wnli", "boolq", "wic", "sst5", "mr", "cr", "subj"}
    assert expected | {"trec", "few-nerd"} <= set(CATALOG)
    for task in CATALOG:
        hub = _raw(REPO / "tasks" / f"{task}.yaml")["data"]["hub"]
        assert hub.get("revision"), f"{task}: not pinned to a hub revision"
        assert (FIXTURES / hub["path"]).is_dir(), f"{task}: no fixture for {hub['path']}"


@pytest.mark.parametrize("task", CATALOG)
def test_validates_offline_and_reads_its_fixture(task: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from suite.model.encoders import load_tokenizer

    assert main(["validate", str(REPO / "tasks" / f"{task}.yaml")]) == 0  # HF_HUB_OFFLINE: conftest
    fixture = _from_fixture(task, tmp_path)
    assert main(["validate", str(fixture)]) == 0
    assert capsys.readouterr().err == ""
    spec = load_task(fixture)
    data = prepare_task(spec, None, load_tokenizer("minilm-l6")).data
    assert data.origin["kind"] == "hub" and data.origin["path"] == str(FIXTURES / spec.data.hub.path)
    if spec.head == "tagging":
        # IO types become IOB2 spans: every entity starts with B- and the types are the spec's
        tags = [t for s in data.sentences["dev"] for t in s.tags]
        assert len(data.sentences["train"]) == ROWS and any(t.startswith("B-") for t in tags)
        assert {t[2:] for t in tags if t != "O"} <= set(spec.labels)
    else:
        # every class of the spec is present: ids were mapped onto the spec's own labels
        assert len(data.labels["train"]) == ROWS
        assert sorted(set(data.labels["dev"].tolist())) == list(range(len(spec.labels)))


@pytest.mark.parametrize("task", CATALOG)
def test_one_smoke_trial_trains_offline_from_its_fixture(task: str, tmp_path: Path, tiny_models) -> None:  # noqa: ANN001
    fixture = _from_fixture(task, tmp_path)
    out = tmp_path / "runs"
    args = ["run", str(fixture), "--model", str(tiny_models["bert"]), "--out", str(out), "--quiet",
            "--size", "16", "--seeds", "1", "--threads", "1", "--set", "sweep.hparams.epochs=1"]  # fmt: skip
    assert main(args) == 0
    folder = next(out.glob(f"{task}/*"))
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["size"] == 16
    assert is_run(records[0]) and 0.0 <= score(records[0]) <= 1.0, records[0].get("reason")
    assert records[0]["evaluated_on"]["score"]["examples"] == ROWS  # the fixture's whole dev split
    info = json.loads((folder / "run.json").read_text())
    assert info["data_origin"]["path"] == str(FIXTURES / load_task(fixture).data.hub.path)


def test_list_says_where_each_tasks_data_comes_from(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:  # noqa: ANN001
    def listed() -> dict[str, str]:
        assert main(["list"]) == 0
        lines = capsys.readouterr().out.splitlines()
        return {
            line.split()[0]: lines[i + 1].split("data: ", 1)[1]
            for i, line in enumerate(lines)
            if i + 1 < len(lines) and "data: " in lines[i + 1] and "data: " not in line
        }

    monkeypatch.setenv("SUITE_DATA_DIR", str(shared_data))
    with_data = listed()
    for task in CATALOG:
        hub = _raw(REPO / "tasks" / f"{task}.yaml")["data"]["hub"]
        assert with_data[task].startswith(f"hub {hub['path']}@{hub['revision']}"), with_data[task]
        assert "offline now: only from the datasets cache" in with_data[task]  # HF_HUB_OFFLINE
    assert with_data["rte"] == f"files glue/RTE (present under {shared_data})"

    monkeypatch.setenv("SUITE_DATA_DIR", str(tmp_path))  # a data directory without the files
    assert listed()["rte"] == f"files glue/RTE (missing under {tmp_path})"
    monkeypatch.delenv("SUITE_DATA_DIR")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    without = listed()
    assert without["rte"] == (
        "hub nyu-mll/glue rte@main: needs the network or a cache; files glue/RTE once a data directory is set"
    )
    assert set(without) == {p.stem for p in (REPO / "tasks").glob("*.yaml")}


def test_every_hub_task_maps_label_ids_to_names() -> None:
    """Each catalog task (and every other parquet-branch task) names its hub's label ids, so a
    parquet that carries no class names still reads names, never "0"/"1"."""
    branch = [
        p for p in (REPO / "tasks").glob("*.yaml") if "parquet" in str(_raw(p)["data"]["hub"].get("revision"))
    ]
    assert {p.stem for p in branch} >= set(CATALOG)
    for path in branch:
        spec = load_task(path, None)
        ids = list(spec.data.hub.labels or {})
        assert ids == [str(i) for i in range(len(ids))] and len(ids) >= 2, path.stem
        assert not any(label.isdigit() for label in [*spec.labels, *spec.data.hub.labels.values()]), path.stem


@pytest.mark.parametrize("task", ["mr", "few-nerd"])
def test_a_parquet_without_class_names_reads_the_same_labels(task: str, tmp_path: Path) -> None:
    """The fixture with its ClassLabel names stripped (plain integer ids, as a hub parquet may
    be): the same labels as with them."""
    import pyarrow.parquet as pq

    from suite.model.encoders import load_tokenizer

    named = _from_fixture(task, tmp_path)
    raw = _raw(named)
    plain = tmp_path / "plain"
    shutil.copytree(raw["data"]["hub"]["path"], plain)
    for file in plain.rglob("*.parquet"):
        table = pq.read_table(file)
        assert b"huggingface" in (table.schema.metadata or {})  # the features, ClassLabel names included
        pq.write_table(table.replace_schema_metadata(None), file)
    raw["data"]["hub"]["path"] = str(plain)
    stripped = tmp_path / "stripped.yaml"
    stripped.write_text(yaml.safe_dump(raw))
    tokenizer = load_tokenizer("minilm-l6")
    a, b = (prepare_task(load_task(p), None, tokenizer).data for p in (named, stripped))
    if task == "few-nerd":  # tags, per token
        assert [s.tags for s in a.sentences["dev"]] == [s.tags for s in b.sentences["dev"]]
    else:
        assert a.labels["dev"].tolist() == b.labels["dev"].tolist()
