"""`data.hub` through `datasets.load_dataset`: the shipped hub blocks read files laid out as the
real hub datasets (GLUE, CoNLL-2003, WNUT-17, SQuAD) and give the same examples as the local
files; `local` wins when a data directory is set; bad hub blocks are one line, exit 2.

The files are parquet written here with the hub's features (ClassLabel names included) and
loaded by the packaged `parquet` loader: the same `load_dataset` call as a hub repository.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from suite.commands.cli import main
from suite.config.task import load_task
from suite.data.tables import read_rows
from suite.heads.registry import prepare_task
from suite.model.encoders import load_tokenizer

REPO = Path(__file__).resolve().parent.parent
N = 120  # rows per split: enough for every label, quick to tokenize

# The real hub layouts (nyu-mll/glue parquet, eriktks/conll2003, leondz/wnut_17): column names
# and ClassLabel names, and how a local row becomes a hub row.
GLUE = {
    "rte": (["sentence1", "sentence2"], ["entailment", "not_entailment"]),
    "mrpc": (["sentence1", "sentence2"], ["not_equivalent", "equivalent"]),
    "stsb": (["sentence1", "sentence2"], None),
    "cola": (["sentence"], ["unacceptable", "acceptable"]),
    "sst2": (["sentence"], ["negative", "positive"]),
}
CONLL_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
WNUT_TAGS = ["O"] + [
    f"{p}-{t}"
    for t in ("corporation", "creative-work", "group", "location", "person", "product")
    for p in "BI"
]  # noqa: E501


def _write(rows: dict[str, list], features: dict, path: Path) -> str:
    import datasets

    datasets.Dataset.from_dict(rows, features=datasets.Features(features)).to_parquet(str(path))
    return str(path)


def _hub_task(shipped: str, tmp_path: Path, files: dict[str, str], keep_local: bool = False, **edit) -> Path:
    """The shipped task with its hub block pointed at parquet files (its columns and labels kept)."""
    raw = yaml.safe_load((REPO / "tasks" / shipped).read_text())
    hub = {k: v for k, v in raw["data"]["hub"].items() if k not in ("name", "revision")}
    raw["data"]["hub"] = {**hub, "path": "parquet", "data_files": files, **edit}
    if not keep_local:
        raw["data"].pop("local")
    raw.pop("profiles", None)
    path = tmp_path / shipped
    path.write_text(yaml.safe_dump(raw))
    return path


def _glue_files(task: str, tmp_path: Path, shared_data: Path) -> dict[str, str]:
    """The first N local rows of each split, written in the hub's GLUE layout."""
    import datasets

    spec = load_task(REPO / "tasks" / f"{task}.yaml")
    names, classes = GLUE[task]
    files = {}
    for split in ("train", "validation"):
        path = shared_data / spec.data.local / getattr(spec.data, split)
        rows = read_rows(path, "tsv", spec.data.header, spec.data.columns)[:N]
        table = {hub: [r[local] for r in rows] for hub, local in zip(names, spec.data.text, strict=True)}
        if classes is None:
            table["label"] = [float(r[spec.data.label]) for r in rows]
            label = datasets.Value("float32")
        else:
            # Local labels are the class names (RTE) or their ids as text (MRPC, CoLA, SST-2).
            local = [r[spec.data.label] for r in rows]
            table["label"] = [classes.index(v) if v in classes else int(v) for v in local]
            label = datasets.ClassLabel(names=classes)
        table["idx"] = list(range(len(rows)))
        features = {n: datasets.Value("string") for n in names} | {
            "label": label,
            "idx": datasets.Value("int32"),
        }
        files[split] = _write(table, features, tmp_path / f"{task}-{split}.parquet")
    return files


@pytest.mark.parametrize("task", sorted(GLUE))
def test_shipped_glue_hub_blocks_give_the_local_examples(
    task: str, tmp_path: Path, shared_data: Path
) -> None:
    tokenizer = load_tokenizer("minilm-l6")
    files = _glue_files(task, tmp_path, shared_data)
    hub = prepare_task(load_task(_hub_task(f"{task}.yaml", tmp_path, files)), None, tokenizer).data
    local = prepare_task(load_task(REPO / "tasks" / f"{task}.yaml"), shared_data, tokenizer).data
    assert hub.sources["train"] == "hub:parquet:train" and hub.origin["kind"] == "hub"
    for key in ("train", "dev"):
        assert hub.texts[key] == local.texts[key][:N]
        assert hub.labels[key].tolist() == pytest.approx(local.labels[key][:N].tolist())


def _conll_files(shipped: str, tags: list[str], tmp_path: Path, shared_data: Path) -> dict[str, str]:
    """Local sentences (converted to IOB2) in the hub layout: tokens and ClassLabel ner_tags."""
    import datasets

    spec = load_task(REPO / "tasks" / shipped)
    data = prepare_task(spec, shared_data, load_tokenizer("minilm-l6")).data
    files = {}
    for split, key in (("train", "train"), ("validation", "dev")):
        sentences = data.sentences[key][:N]
        table = {
            "id": [str(i) for i in range(len(sentences))],
            "tokens": [list(s.tokens) for s in sentences],
            "ner_tags": [[tags.index(t) for t in s.tags] for s in sentences],
        }
        features = {
            "id": datasets.Value("string"),
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=tags)),
        }
        files[split] = _write(table, features, tmp_path / f"{spec.name}-{split}.parquet")
    return files


@pytest.mark.parametrize("shipped, tags", [("ner.yaml", CONLL_TAGS), ("wnut17.yaml", WNUT_TAGS)])
def test_shipped_tagging_hub_blocks_give_the_local_sentences(
    shipped: str, tags: list[str], tmp_path: Path, shared_data: Path
) -> None:
    tokenizer = load_tokenizer("minilm-l6")
    files = _conll_files(shipped, tags, tmp_path, shared_data)
    hub = prepare_task(load_task(_hub_task(shipped, tmp_path, files)), None, tokenizer).data
    local = prepare_task(load_task(REPO / "tasks" / shipped), shared_data, tokenizer).data
    for key in ("train", "dev"):
        assert [(s.tokens, s.tags) for s in hub.sentences[key]] == [
            (s.tokens, s.tags) for s in local.sentences[key][:N]
        ]
    assert any(t != "O" for s in hub.sentences["dev"] for t in s.tags)


def test_shipped_squad_hub_block_trains_on_subsamples_and_evaluates_the_dev_split(
    tmp_path: Path, shared_data: Path
) -> None:
    import datasets

    from suite.data.squad import read_mrqa

    pool = read_mrqa(shared_data / "squad_fewshot_splinter/squad-train-seed-42-num-examples-1024.jsonl")
    files = {}
    for split, examples in (("train", pool[:200]), ("validation", pool[200:260])):
        table = {
            "id": [e.id for e in examples],
            "title": ["t"] * len(examples),
            "context": [e.context for e in examples],
            "question": [e.question for e in examples],
            "answers": [
                {"text": [e.context[e.answer_start : e.answer_end]], "answer_start": [e.answer_start]}
                for e in examples
            ],  # fmt: skip
        }
        string = datasets.Value("string")
        features = {"id": string, "title": string, "context": string, "question": string, "answers":
                    datasets.Sequence({"text": string, "answer_start": datasets.Value("int32")})}  # fmt: skip
        files[split] = _write(table, features, tmp_path / f"squad-{split}.parquet")
    task = load_task(_hub_task("squad.yaml", tmp_path, files)).model_copy(update={"sizes": [64]})
    prepared = prepare_task(task, None, load_tokenizer("minilm-l6"))
    data = prepared.data
    first, second = data.train_indices(64, 1), data.train_indices(64, 2)
    assert len(first) == 64 and first.tolist() != second.tolist()
    assert len(data.dev) == 60 and prepared.eval_note is None  # the task's own split: no note
    features = data.features("train", first)
    answered = [f for f in features if f["start_positions"] > 0]
    assert len(answered) >= 60  # every question's answer lands in one of its windows


def test_local_wins_when_a_data_directory_is_set(tmp_path: Path, shared_data: Path) -> None:
    files = _glue_files("rte", tmp_path, shared_data)
    both = load_task(_hub_task("rte.yaml", tmp_path, files, keep_local=True))
    tokenizer = load_tokenizer("minilm-l6")
    local = prepare_task(both, shared_data, tokenizer).data
    assert local.sources["train"].endswith("glue/RTE/train.tsv") and local.origin["kind"] == "local"
    hub = prepare_task(both, None, tokenizer).data
    assert hub.sources["train"] == "hub:parquet:train"
    assert hub.origin == {
        "kind": "hub",
        "path": "parquet",
        "name": None,
        "revision": None,
        "data_files": files,
    }


def test_run_json_records_the_hub_source(tiny_task: Path, tiny_models, tmp_path: Path) -> None:  # noqa: ANN001
    import datasets

    raw = yaml.safe_load(tiny_task.read_text())
    files = {}
    for split, name in (("train", "train.tsv"), ("validation", "dev.tsv")):
        rows = read_rows(tiny_task.parent.parent / "data/tiny" / name, "tsv")
        table = {
            "a": [r["s1"] for r in rows],
            "b": [r["s2"] for r in rows],
            "y": [r["label"] == "yes" for r in rows],
        }
        features = {"a": datasets.Value("string"), "b": datasets.Value("string"), "y": datasets.Value("bool")}
        files[split] = _write(table, features, tmp_path / f"tiny-{split}.parquet")
    columns = {"a": "s1", "b": "s2", "y": "label"}
    raw["data"] = {**raw["data"], "hub": {"path": "parquet", "data_files": files, "columns": columns,
                                          "labels": {"True": "yes", "False": "no"}}}  # fmt: skip
    del raw["data"]["local"]
    tiny_task.write_text(yaml.safe_dump(raw))
    out = tmp_path / "runs"
    args = ["run", str(tiny_task), "--model", str(tiny_models["bert"]), "--out", str(out), "--quiet"]
    assert main(args) == 0
    info = json.loads(next(out.glob("tiny/*/run.json")).read_text())
    assert info["data_origin"] == {"kind": "hub", "path": "parquet", "name": None, "revision": None,
                                   "data_files": files}  # fmt: skip
    assert info["data_sources"] == {"train": "hub:parquet:train", "dev": "hub:parquet:validation"}
    assert all(info["data_sha256"].values())  # datasets' content fingerprints


@pytest.mark.parametrize(
    "edit, field",
    [
        ({"columns": {"sentence9": "sentence1"}}, "data.hub.columns': no column 'sentence9'"),
        (
            {"columns": {"sentence1": "premise"}},
            "data.hub.columns': hub:parquet:train has no column 'sentence1'",
        ),
        ({"labels": {"maybe": "entailment"}}, "data.hub.labels': label 'maybe' is not in hub:parquet:train"),
        ({"labels": {"0": "yes"}}, "data.hub.labels': 'yes' is not one of the spec's labels"),
        ({"labels": {"entailment": "not_entailment", "not_entailment": "entailment"}}, None),
        (
            {"validation_split": "dev"},
            "data.hub.validation_split': no split 'dev' (splits: train, validation)",
        ),
    ],
)
def test_bad_hub_block_is_one_line_naming_the_field(
    edit: dict,
    field: str | None,
    tmp_path: Path,
    shared_data: Path,
    capsys,  # noqa: ANN001
) -> None:
    files = _glue_files("rte", tmp_path, shared_data)
    task = _hub_task("rte.yaml", tmp_path, files, **edit)
    capsys.readouterr()  # the files' writing progress
    code = main(["run", str(task), "--out", str(tmp_path / "runs"), "--size", "8", "--seeds", "1",
                 "--quiet", "--threads", "1"] if field else ["validate", str(task)])  # fmt: skip
    err = capsys.readouterr().err
    if field is None:  # a swap of the two classes is a valid mapping
        assert code == 0 and not err
        return
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"field '{field}" in err
    assert not (tmp_path / "runs").exists()


def test_a_clone_without_the_data_offline_is_one_line_naming_the_dataset_and_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """No SUITE_DATA_DIR (a clone without ../shared/data): `run ner` reads the task's pinned hub
    source; where the hub cannot be reached that is one line, exit 2, before any trial, naming the
    dataset and where local data would come from instead."""
    import datasets

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'eriktks/conll2003' on the Hub (OfflineModeIsEnabled)\nmore")

    monkeypatch.delenv("SUITE_DATA_DIR", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert main(["run", "ner", "--out", str(tmp_path), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: task ner: field 'data.hub': dataset eriktks/conll2003 is not available (Couldn't reach "
        "'eriktks/conll2003' on the Hub (OfflineModeIsEnabled)); a task with a local folder reads it "
        "from --data-dir or SUITE_DATA_DIR instead (README, Install)"
    )
    assert not list(tmp_path.rglob("trials.jsonl"))  # no trial ran
