"""Bad data files: each case is one `error:` line naming the file and the line (or the question
id), exit code 2, no traceback, and no run folder, before any training. Fixtures are tiny files
written under tmp_path (the shared data is never touched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.commands.cli import main
from suite.data.conll import Sentence, check_tags, read_conll
from suite.errors import DataError

TSV_HEADER = "s1\ts2\tlabel\n"
TSV_ROWS = [f"red cat {i}\tblue dog {i}\t{'yes' if i % 2 else 'no'}\n" for i in range(16)]
CONLL_SENTENCES = [
    "Peter B-PER\nvisited O\nBonn B-LOC\n",
    "Anna B-PER\nMaria I-PER\nlives O\nin O\nNew B-LOC\nYork I-LOC\n",
    "It O\nrained O\n.\tO\n",
    "Paris B-LOC\nwelcomed O\nJohn B-PER\n",
]


def sweep(root: Path, subsample_seeds: str = "") -> Path:
    path = root / "sweeps" / "tiny.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    seeds = f"{{repeats: 1{', subsample_seeds: ' + subsample_seeds if subsample_seeds else ''}}}"
    path.write_text(f"name: tiny\nhparams: {{lr: 1.0e-3, batch_size: 4, epochs: 1}}\nseeds: {seeds}\n")
    return path


@pytest.fixture
def classification(tmp_path: Path) -> Path:
    """A TSV sentence-pair task (train 16, dev 8 rows) in tmp_path/data/tiny; returns its YAML."""
    data = tmp_path / "data" / "tiny"
    data.mkdir(parents=True)
    (data / "train.tsv").write_text(TSV_HEADER + "".join(TSV_ROWS))
    (data / "dev.tsv").write_text(TSV_HEADER + "".join(TSV_ROWS[:8]))
    task = tmp_path / "tasks" / "tiny.yaml"
    task.parent.mkdir()
    task.write_text(
        "name: tiny\nversion: 1\nhead: classification\n"
        "data: {local: tiny, format: tsv, train: train.tsv, validation: dev.tsv,"
        " text: [s1, s2], label: label}\n"
        f"labels: ['no', 'yes']\nmetric: {{main: accuracy}}\nmax_length: 32\nsizes: [8]\n"
        f"sweep: {sweep(tmp_path)}\n"
    )
    return task


@pytest.fixture
def jsonl_task(classification: Path) -> Path:
    """The same task as JSON Lines files."""
    data = classification.parent.parent / "data" / "tiny"
    for split, rows in (("train", TSV_ROWS), ("dev", TSV_ROWS[:8])):
        lines = [dict(zip(["s1", "s2", "label"], r.rstrip("\n").split("\t"), strict=True)) for r in rows]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    text = classification.read_text().replace("format: tsv", "format: jsonl").replace(".tsv", ".jsonl")
    classification.write_text(text)
    return classification


@pytest.fixture
def ner(tmp_path: Path) -> Path:
    """A two-column IOB2 NER task (train 8, dev 4 sentences) in tmp_path/data/ner."""
    data = tmp_path / "data" / "ner"
    data.mkdir(parents=True)
    (data / "train.conll").write_text("\n".join(CONLL_SENTENCES * 2))
    (data / "dev.conll").write_text("\n".join(CONLL_SENTENCES))
    task = tmp_path / "tasks" / "ner.yaml"
    task.parent.mkdir()
    task.write_text(
        "name: tinyner\nversion: 1\nhead: tagging\n"
        "data: {local: ner, format: conll, train: train.conll, validation: dev.conll, tag_scheme: iob2}\n"
        "labels: [PER, LOC]\nmetric: {main: entity_f1}\nmax_length: 32\nsizes: [4]\n"
        f"failure: {{rule: threshold, threshold: 0.05}}\nsweep: {sweep(tmp_path)}\n"
    )
    return task


def mrqa_row(qid: str, context: str, answer: str, spans: list | None = None) -> str:
    qa: dict = {"id": qid, "question": f"What is in {qid}?", "answers": [answer]}
    if spans is not None:
        qa["detected_answers"] = [{"text": answer, "char_spans": spans}]
    return json.dumps({"context": context, "qas": [qa]}) + "\n"


HEADER = json.dumps({"header": {"dataset": "SQuAD", "split": "train"}}) + "\n"


def mrqa_file(prefix: str, n: int) -> str:
    return HEADER + "".join(
        mrqa_row(f"{prefix}{i}", f"The river {i} flows through Bonn {i}.", f"Bonn {i}") for i in range(n)
    )


@pytest.fixture
def qa(tmp_path: Path) -> Path:
    """An MRQA few-shot task: one split file (size 4, seed 1) and an 8-question pool."""
    data = tmp_path / "data" / "qa"
    data.mkdir(parents=True)
    (data / "train-1-4.jsonl").write_text(mrqa_file("t", 4))
    (data / "pool.jsonl").write_text(mrqa_file("p", 8))
    task = tmp_path / "tasks" / "qa.yaml"
    task.parent.mkdir()
    task.write_text(
        "name: tinyqa\nversion: 1\nhead: span\n"
        "data: {local: qa, format: mrqa, train: 'train-{seed}-{size}.jsonl'}\n"
        "qa: {train_sizes: [4], split_seeds: [1], eval_pool: [pool.jsonl], doc_stride: 16}\n"
        "metric: {main: f1}\nmax_length: 64\nsizes: [4]\n"
        f"failure: {{rule: threshold, threshold: 0.05}}\nsweep: {sweep(tmp_path, '[1]')}\n"
    )
    return task


def squad_json(prefix: str, n: int, shift: int = 0) -> str:
    """SQuAD v1.1 JSON; `shift` moves the first answer's answer_start off its text."""
    paragraphs = []
    for i in range(n):
        context = f"The river {i} flows through Bonn {i}."
        start = context.index("Bonn") + (shift if i == 0 else 0)
        qas = [
            {
                "id": f"{prefix}{i}",
                "question": "Where?",
                "answers": [{"text": f"Bonn {i}", "answer_start": start}],
            }
        ]
        paragraphs.append({"context": context, "qas": qas})
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]})


@pytest.fixture
def squad(qa: Path) -> Path:
    """The QA task with SQuAD v1.1 JSON files."""
    data = qa.parent.parent / "data" / "qa"
    (data / "train-1-4.json").write_text(squad_json("t", 4))
    (data / "pool.json").write_text(squad_json("p", 8))
    qa.write_text(qa.read_text().replace("format: mrqa", "format: squad").replace(".jsonl", ".json"))
    return qa


def run_error(capsys: pytest.CaptureFixture, task: Path, model: Path) -> str:
    """`suite run` on a fixture task: exit 2, one `error:` line, no traceback, no run folder."""
    root = task.parent.parent
    out = root / "runs"
    args = ["run", str(task), "--model", str(model), "--out", str(out), "--data-dir", str(root / "data")]
    code = main([*args, "--quiet"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert code == 2, captured.err
    assert captured.err.count("\n") == 1, captured.err
    (line,) = captured.err.splitlines()
    assert line.startswith("error: ") and len(line) > len("error: ")
    assert not out.exists(), "nothing is written for bad input"
    return line


@pytest.fixture
def bert(tiny_models: dict[str, Path]) -> Path:
    return tiny_models["bert"]


# --- row-per-example files -------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "dev"])
def test_ragged_tsv_row(split: str, classification: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = classification.parent.parent / "data" / "tiny" / f"{split}.tsv"
    lines = path.read_text().splitlines(keepends=True)
    lines[4] = "only one field\tno\n"
    path.write_text("".join(lines))
    line = run_error(capsys, classification, bert)
    assert f"{path}:5: expected 3 fields, found 2" in line


def test_blank_tsv_lines_are_skipped_not_errors(classification: Path) -> None:
    from suite.data.tables import read_rows

    path = classification.parent.parent / "data" / "tiny" / "train.tsv"
    path.write_text(TSV_HEADER + "\n" + "".join(TSV_ROWS[:3]) + "\n\n" + TSV_ROWS[3])
    rows = read_rows(path, "tsv")
    assert len(rows) == 4 and rows.lines == [3, 4, 5, 8]  # line numbers count the blank lines


def test_unknown_label_in_the_dev_split(classification: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = classification.parent.parent / "data" / "tiny" / "dev.tsv"
    path.write_text(path.read_text().replace("\tyes\n", "\tmaybe\n", 1))
    line = run_error(capsys, classification, bert)
    assert str(path) in line and "label 'maybe'" in line and "line 3" in line


@pytest.mark.parametrize("content", ["header only", "0 bytes"])
@pytest.mark.parametrize("split", ["train", "dev"])
def test_empty_split_file(split: str, content: str, classification: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = classification.parent.parent / "data" / "tiny" / f"{split}.tsv"
    path.write_text(TSV_HEADER if content == "header only" else "")
    line = run_error(capsys, classification, bert)
    assert f"{path}: no examples" in line


def test_empty_jsonl_split(jsonl_task: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = jsonl_task.parent.parent / "data" / "tiny" / "dev.jsonl"
    path.write_text("\n\n")
    assert f"{path}: no examples" in run_error(capsys, jsonl_task, bert)


def test_non_utf8_tsv(classification: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = classification.parent.parent / "data" / "tiny" / "train.tsv"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[6] = b"caf\xe9 noir\tblue dog\tyes\n"  # Latin-1, not UTF-8
    path.write_bytes(b"".join(lines))
    line = run_error(capsys, classification, bert)
    assert f"{path}:7: not UTF-8 text (byte 0xe9)" in line


def test_non_utf8_jsonl(jsonl_task: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = jsonl_task.parent.parent / "data" / "tiny" / "train.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = b'{"s1": "\xff\xfe", "s2": "x", "label": "no"}\n'
    path.write_bytes(b"".join(lines))
    assert f"{path}:3: not UTF-8 text (byte 0xff)" in run_error(capsys, jsonl_task, bert)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ('{"s1": "a", "s2": "b"}', "line 4: column 'label' has no value"),
        ('{"s1": null, "s2": "b", "label": "no"}', "line 4: column 's1' has no value"),
        ('{"s1": ["a"], "s2": "b", "label": "no"}', "line 4: column 's1' has a list"),
        ('["a", "b", "no"]', ":4: expected a JSON object, got list"),
        ('{"s1": "a", "s2": "b", "label": "no"', ":4: not valid JSON"),
    ],
)
def test_malformed_jsonl_row(row: str, expected: str, jsonl_task: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = jsonl_task.parent.parent / "data" / "tiny" / "train.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = row + "\n"
    path.write_text("".join(lines))
    line = run_error(capsys, jsonl_task, bert)
    assert str(path) in line and expected in line


def test_jsonl_numbers_read_as_labels(jsonl_task: Path) -> None:
    """JSON numbers and booleans compare with the spec's labels as the text TSV would hold."""
    from suite.data.tables import read_rows

    path = jsonl_task.parent.parent / "data" / "tiny" / "x.jsonl"
    path.write_text('{"s1": 5, "label": 1}\n{"s1": "b", "label": true}\n')
    assert read_rows(path, "jsonl") == [{"s1": "5", "label": "1"}, {"s1": "b", "label": "True"}]


# --- CoNLL files -----------------------------------------------------------------------------


def test_one_column_conll_line(ner: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = ner.parent.parent / "data" / "ner" / "train.conll"
    path.write_text(path.read_text().replace("visited O\n", "visited\n", 1))
    line = run_error(capsys, ner, bert)
    assert f"{path}:2: expected a token and a tag column, found 1 field(s)" in line


@pytest.mark.parametrize("tag", ["S-PER", "E-LOC"])
def test_iobes_tag_in_an_iob2_file(tag: str, ner: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    """Needs suite/data/tagging.py to pass `data.tag_scheme` to check_tags."""
    path = ner.parent.parent / "data" / "ner" / "dev.conll"
    path.write_text(path.read_text().replace("Bonn B-LOC", f"Bonn {tag}", 1))
    line = run_error(capsys, ner, bert)
    assert f"{path}:3: tag {tag!r} is not O or B-/I- (tag_scheme iob2)" in line


def test_check_tags_follows_the_scheme(tmp_path: Path) -> None:
    sentences = [Sentence(("Peter", "Bonn", "Anna", "Maria"), ("S-PER", "O", "B-PER", "E-PER"), 0, 7)]
    check_tags(sentences, ["PER"], tmp_path / "x", "iobes")
    for scheme in ("iob1", "iob2"):
        with pytest.raises(DataError, match=rf"x:7: tag 'S-PER' is not O or B-/I- \(tag_scheme {scheme}\)"):
            check_tags(sentences, ["PER"], tmp_path / "x", scheme)
    with pytest.raises(DataError, match=r"x:8: tag 'B-LOC' is not O or B-/I-/E-/S- \(tag_scheme iobes\)"):
        check_tags([Sentence(("a", "b"), ("O", "B-LOC"), 0, 7)], ["PER"], tmp_path / "x", "iobes")


def test_non_utf8_conll(ner: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = ner.parent.parent / "data" / "ner" / "dev.conll"
    path.write_bytes(path.read_bytes().replace(b"Bonn B-LOC", b"K\xf6ln B-LOC", 1))
    assert f"{path}:3: not UTF-8 text (byte 0xf6)" in run_error(capsys, ner, bert)


@pytest.mark.parametrize("content", ["", "\n\n\t\n", "-DOCSTART- -X- O O\n\n"])
@pytest.mark.parametrize("split", ["train", "dev"])
def test_conll_split_without_sentences(split: str, content: str, ner: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = ner.parent.parent / "data" / "ner" / f"{split}.conll"
    path.write_text(content)
    assert f"{path}: no examples" in run_error(capsys, ner, bert)


def test_missing_dev_file(ner: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = ner.parent.parent / "data" / "ner" / "dev.conll"
    path.unlink()
    line = run_error(capsys, ner, bert)
    assert "field 'data.validation'" in line and f"not found: {path}" in line


def test_a_bom_does_not_become_part_of_the_first_token(tmp_path: Path) -> None:
    path = tmp_path / "bom.conll"
    path.write_text("\ufeff-DOCSTART- -X- O O\n\nBonn B-LOC\n", encoding="utf-8")
    (sentence,) = read_conll(path)
    assert sentence.tokens == ("Bonn",) and sentence.document == 1


# --- QA files --------------------------------------------------------------------------------


def _replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = text
    path.write_text("".join(lines))


def test_mrqa_answer_not_in_its_context(qa: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = qa.parent.parent / "data" / "qa" / "pool.jsonl"
    _replace_line(path, 3, mrqa_row("p1", "The river flows through Bonn.", "Cologne"))
    line = run_error(capsys, qa, bert)
    assert f"{path}:3: question 'p1': answer 'Cologne' not found in its context" in line


def test_mrqa_detected_span_outside_its_context(qa: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = qa.parent.parent / "data" / "qa" / "pool.jsonl"
    _replace_line(path, 4, mrqa_row("p2", "Bonn.", "Bonn", spans=[[40, 43]]))
    line = run_error(capsys, qa, bert)
    assert f"{path}:4: question 'p2': answer 'Bonn' not found in its context" in line


def test_mrqa_training_split_answer_not_in_its_context(qa: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    """The split file is read when the plan is checked (pre-flight), still before any training."""
    path = qa.parent.parent / "data" / "qa" / "train-1-4.jsonl"
    _replace_line(path, 2, mrqa_row("t0", "The river flows through Bonn.", "Cologne"))
    line = run_error(capsys, qa, bert)
    assert f"{path}:2: question 't0': answer 'Cologne' not found" in line


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ('{"context": "Bonn.", "qas": [{"id": "p3"', "not valid JSON"),
        ('{"context": "Bonn.", "qas": [{"id": "p3", "question": "Q?", "answers": []}]}', "question 'p3'"),
        ('{"context": "Bonn.", "qas": [{"question": "Q?", "answers": ["Bonn"]}]}', "field 'id'"),
        ('{"qas": []}', "field 'context'"),
    ],
)
def test_malformed_mrqa_line(row: str, expected: str, qa: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = qa.parent.parent / "data" / "qa" / "pool.jsonl"
    _replace_line(path, 5, row + "\n")
    line = run_error(capsys, qa, bert)
    assert f"{path}:5: " in line and expected in line


def test_non_utf8_mrqa(qa: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = qa.parent.parent / "data" / "qa" / "pool.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b"Bonn", b"B\xc3nn", 1)  # a truncated two-byte sequence
    path.write_bytes(b"".join(lines))
    assert f"{path}:6: not UTF-8 text (byte 0xc3)" in run_error(capsys, qa, bert)


def test_squad_answer_not_at_its_answer_start(squad: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = squad.parent.parent / "data" / "qa" / "pool.json"
    path.write_text(squad_json("p", 8, shift=2))
    line = run_error(capsys, squad, bert)
    assert str(path) in line and "question 'p0': answer 'Bonn 0' is not at answer_start 28" in line


def test_squad_file_that_is_not_json(squad: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = squad.parent.parent / "data" / "qa" / "pool.json"
    path.write_text('{"data": [\n  {"paragraphs": [}\n]}')
    assert f"{path}:2: not valid JSON" in run_error(capsys, squad, bert)


def test_empty_qa_pool(squad: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = squad.parent.parent / "data" / "qa" / "pool.json"
    path.write_text('{"version": "1.1", "data": []}')
    assert f"{path}: no examples" in run_error(capsys, squad, bert)


def test_missing_pool_file(qa: Path, bert: Path, capsys) -> None:  # noqa: ANN001
    path = qa.parent.parent / "data" / "qa" / "pool.jsonl"
    path.unlink()
    line = run_error(capsys, qa, bert)
    assert "eval_pool" in line and f"not found: {path}" in line


def test_qa_features_are_keyed_by_file_content(qa: Path, bert: Path) -> None:
    """An edited split file with the same question ids never reuses cached features."""
    from suite.config.task import load_task
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_tokenizer

    root, tokenizer = qa.parent.parent / "data", load_tokenizer(str(bert))

    def train_ids() -> list[list[int]]:
        data = prepare_task(load_task(qa), root, tokenizer).data
        return [f["input_ids"] for f in data.features("train", data.train_indices(4, 1))]

    before = train_ids()
    path = root / "qa" / "train-1-4.jsonl"
    path.write_text(path.read_text().replace("The river", "A long and winding river"))
    after = train_ids()
    assert len(before) == len(after) == 4 and before != after
    assert train_ids() == after  # the unchanged file reads the same features back
