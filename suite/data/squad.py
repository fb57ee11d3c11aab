"""Extractive QA examples: SQuAD v1.1 JSON and MRQA JSONL readers, the few-shot split files,
the held-out evaluation pool, and doc-stride windows with offsets.

Offline there is no official SQuAD dev set: evaluation uses questions from the pool files that
are not in the training split in use (the five Splinter 1024-question files hold 5,010
distinct SQuAD-train questions), in a fixed seeded order, and every result says so.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suite.config.task import TaskSpec
from suite.data.cache import cached
from suite.data.classification import EVAL_SUBSAMPLE_SEED
from suite.data.hub import SPAN_COLUMNS, data_origin, load_split, source_sha256, use_hub
from suite.data.paths import local_file
from suite.data.subsample import subsample_indices
from suite.data.tables import read_text, text_lines
from suite.errors import DataError
from suite.identity import tokenizer_fingerprint
from suite.provenance import file_sha256

EVAL_POOL_LABEL = "held-out SQuAD-train questions (not the official SQuAD dev set)"


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple[str, ...]
    answer_start: int  # character span [start, end) of the training target in the context
    answer_end: int


def read_mrqa(path: Path) -> list[QAExample]:
    """MRQA JSONL: a header line, then one context per line with its questions."""
    examples = []
    for line_no, line in text_lines(read_text(path)):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{where}: not valid JSON ({err.msg})") from None
        if isinstance(row, dict) and "header" in row:
            continue
        context = _get(row, "context", str, where)
        for qa in _get(row, "qas", list, where):
            examples.append(_mrqa_example(qa, context, where))
    if not examples:
        raise DataError(f"{path}: no examples")
    return examples


def _mrqa_example(qa: Any, context: str, where: str) -> QAExample:
    qid = _get(qa, "id", str, where)
    where = f"{where}: question {qid!r}"
    answers = _get(qa, "answers", list, where)
    if not answers or not all(isinstance(a, str) for a in answers):
        raise DataError(f"{where}: field 'answers': expected a non-empty list of strings")
    # MRQA's detected char spans are inclusive and may differ from answers[0] (e.g. without a
    # leading "The"): they are the located target.
    try:
        spans = [(int(s), int(e)) for d in qa.get("detected_answers", []) for s, e in d["char_spans"]]
    except (KeyError, TypeError, ValueError):
        raise DataError(
            f"{where}: field 'detected_answers': expected char_spans [[start, end], ...]"
        ) from None
    start = spans[0][0] if spans else context.find(answers[0])
    end = spans[0][1] + 1 if spans else start + len(answers[0])
    if start < 0 or not start < end <= len(context):
        raise DataError(f"{where}: answer {answers[0]!r} not found in its context")
    return QAExample(qid, _get(qa, "question", str, where), context, tuple(answers), start, end)


def read_squad_json(path: Path) -> list[QAExample]:
    """SQuAD v1.1 JSON: data -> paragraphs -> qas; each answer must sit at its `answer_start`."""
    try:
        doc = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    examples = [
        _squad_example(qa, _get(p, "context", str, f"{path}"), f"{path}")
        for article in _get(doc, "data", list, f"{path}")
        for p in _get(article, "paragraphs", list, f"{path}")
        for qa in _get(p, "qas", list, f"{path}")
    ]
    if not examples:
        raise DataError(f"{path}: no examples")
    return examples


def _squad_example(qa: Any, context: str, where: str) -> QAExample:
    qid = _get(qa, "id", str, where)
    where = f"{where}: question {qid!r}"
    answers = _get(qa, "answers", list, where)
    if not answers:
        raise DataError(f"{where}: field 'answers': no answer")
    for answer in answers:
        text, start = _get(answer, "text", str, where), _get(answer, "answer_start", int, where)
        if not text or start < 0 or context[start : start + len(text)] != text:
            raise DataError(f"{where}: answer {text!r} is not at answer_start {start} of its context")
    first = answers[0]
    return QAExample(
        qid,
        _get(qa, "question", str, where),
        context,
        tuple(a["text"] for a in answers),
        first["answer_start"],
        first["answer_start"] + len(first["text"]),
    )


def _hub_example(row: dict[str, Any], index: int, source: str) -> QAExample:
    """A hub row in SQuAD's layout (answers: {text: [...], answer_start: [...]}), checked as a
    SQuAD v1.1 JSON question is."""
    answers = row["answers"]
    if not isinstance(answers, dict) or not isinstance(answers.get("text"), list):
        raise DataError(
            f"{source}: row {index + 1}: field 'answers': expected {{text: [...], answer_start: [...]}}"
        )
    spans = zip(answers["text"], answers.get("answer_start") or [], strict=False)
    qa = {**row, "answers": [{"text": text, "answer_start": start} for text, start in spans]}
    return _squad_example(
        qa, _get(row, "context", str, f"{source}: row {index + 1}"), f"{source}: row {index + 1}"
    )


def _get(obj: Any, key: str, kind: type, where: str) -> Any:
    """obj[key], of the given type, or a one-line error naming where it is missing."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    value = obj.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        got = "nothing" if value is None else type(value).__name__
        raise DataError(f"{where}: field {key!r}: expected {kind.__name__}, got {got}")
    return value


def read_qa(path: Path, fmt: str) -> list[QAExample]:
    return read_mrqa(path) if fmt == "mrqa" else read_squad_json(path)


class QAData:
    """Few-shot training splits by (size, split seed) and a held-out evaluation pool."""

    def __init__(self, spec: TaskSpec, root: Path | None, tokenizer: Any) -> None:
        self.spec, self.tokenizer, self.qa = spec, tokenizer, spec.qa
        self.root = root
        self.sources: dict[str, str] = {}
        self.origin = data_origin(spec.data, root)
        self.train: dict[str, list[QAExample]] = {}
        self.dev: list[QAExample] = []
        self._current: list[QAExample] = []
        self._current_file: str | None = None  # the training split file in use
        self.pool: list[QAExample] = []
        self.hub = use_hub(spec.data, root)
        if self.hub:
            self._load_hub()
            return
        pool: dict[str, QAExample] = {}
        for name in self.qa.eval_pool:
            path = local_file(root, spec.data.local, name, "qa.eval_pool", spec.name)
            for example in read_qa(path, spec.data.format):
                pool.setdefault(example.id, example)
            self.sources[f"pool:{name}"] = str(path)
        # A fixed, seeded order of the pool: the first eval_limit questions not in the training
        # split are evaluated, so evaluation sets of different splits overlap almost entirely.
        self.pool = sorted(
            pool.values(), key=lambda e: hashlib.sha256(f"{self.qa.eval_seed}:{e.id}".encode()).hexdigest()
        )

    def _load_hub(self) -> None:
        """A hub source: training subsamples are drawn from its train split (by the subsample
        seed), and its evaluation split (e.g. SQuAD's official dev set) is evaluated, or a fixed
        seeded sample of `eval_limit` questions of it."""
        loaded = {}
        for key, split in (("train", "train"), ("dev", self.spec.eval_split)):
            rows, source = load_split(self.spec.data.hub, split, list(SPAN_COLUMNS), None, self.spec.name)
            loaded[key] = [_hub_example(row, i, source) for i, row in enumerate(rows)]
            self.sources[key] = source
        self._current, dev = loaded["train"], loaded["dev"]
        limit = self.spec.eval_limit or "full"
        self.dev = [dev[i] for i in subsample_indices(len(dev), limit, EVAL_SUBSAMPLE_SEED)]

    @property
    def eval_label(self) -> str | None:
        """What the evaluation set is when it is not the task's own split (None: it is)."""
        return None if self.hub else EVAL_POOL_LABEL

    def _train_split(self, size: int | str, split_seed: int) -> tuple[str, list[QAExample]]:
        if str(size) not in {str(s) for s in self.qa.train_sizes} or split_seed not in self.qa.split_seeds:
            raise DataError(
                f"task {self.spec.name}: no few-shot split for size {size} and seed {split_seed} "
                f"(sizes {self.qa.train_sizes}, split seeds {self.qa.split_seeds})"
            )
        name = self.spec.data.train.format(seed=split_seed, size=size)
        if name not in self.train:
            path = local_file(self.root, self.spec.data.local, name, "train", self.spec.name)
            self.train[name] = read_qa(path, self.spec.data.format)
            self.sources[f"train:{name}"] = str(path)
        return name, self.train[name]

    @property
    def num_labels(self) -> int:
        return 2

    def train_indices(self, size: int | str, subsample_seed: int) -> np.ndarray:
        """The split file *is* the subsample: (size, seed) names it; returns its indices and
        makes the held-out evaluation set: the pool minus every training split loaded so far.
        Pre-flight loads every split of the plan first, so all trials of a study evaluate on
        one set (otherwise split 42's and 43's sets differ and the subsample variance would
        mix training data with evaluation-set changes)."""
        if self.hub:
            return subsample_indices(len(self._current), size, subsample_seed)
        name, split = self._train_split(size, subsample_seed)
        used = {e.id for examples in self.train.values() for e in examples}
        limit = self.spec.eval_limit or len(self.pool)
        self.dev = [e for e in self.pool if e.id not in used][:limit]
        self._current, self._current_file = split, name
        return np.arange(len(split))

    def dev_indices(self) -> np.ndarray:
        return np.arange(len(self.dev))

    def features(self, split: str, indices: np.ndarray) -> list[dict[str, Any]]:
        examples = self._current if split == "train" else self.dev
        key = {
            "kind": "span",
            "version": 2,
            "split": split,
            "tokenizer": tokenizer_fingerprint(self.tokenizer),
            "ids": [examples[i].id for i in indices],
            "max_length": self.spec.max_length,
            "stride": self.qa.doc_stride,
            "data": self._content_hashes(),
        }

        def build() -> list[dict[str, Any]]:
            chosen = [examples[i] for i in indices]
            features = windows(
                self.tokenizer, chosen, self.spec.max_length, self.qa.doc_stride, split == "train"
            )
            for number, feature in enumerate(features):
                feature["window"] = number
            return features

        return cached(key, build)

    def _content_hashes(self) -> dict[str, str | None]:
        """sha256 of the files behind the examples (the training split and the pool): an edited
        file with the same question ids never reuses stale features."""
        if self.hub:
            return {key: source_sha256(source) for key, source in self.sources.items()}
        keys = [f"pool:{name}" for name in self.qa.eval_pool]
        if self._current_file is not None:
            keys.append(f"train:{self._current_file}")
        return {key: file_sha256(self.sources[key]) for key in keys}

    def golds(self) -> list[list[str]]:
        return [list(e.answers) for e in self.dev]


def windows(
    tokenizer: Any, examples: list[QAExample], max_length: int, stride: int, train: bool
) -> list[dict[str, Any]]:
    """Question + context windows (`only_second` truncation, doc stride), as Hugging Face's
    run_qa prepares them: each window knows its example, its context-token offsets, and its
    answer's token span, or the CLS position when the answer is not inside it."""
    encoded = tokenizer(
        [e.question.lstrip() for e in examples],
        [e.context for e in examples],
        truncation="only_second",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    features = []
    for w in range(len(encoded["input_ids"])):
        example_index = encoded["overflow_to_sample_mapping"][w]
        sequence = encoded.sequence_ids(w)
        offsets = [o if sequence[i] == 1 else None for i, o in enumerate(encoded["offset_mapping"][w])]
        feature = {
            k: encoded[k][w] for k in encoded if k not in ("offset_mapping", "overflow_to_sample_mapping")
        }
        feature.update(example=example_index, offsets=offsets)
        if train:
            feature["start_positions"], feature["end_positions"] = _answer_span(
                examples[example_index], offsets
            )
        features.append(feature)
    return features


def _answer_span(example: QAExample, offsets: list[tuple[int, int] | None]) -> tuple[int, int]:
    start_char, end_char = example.answer_start, example.answer_end
    context = [i for i, o in enumerate(offsets) if o is not None]
    if offsets[context[0]][0] > start_char or offsets[context[-1]][1] < end_char:
        return 0, 0  # the answer is not (wholly) in this window: point at CLS
    start = next(i for i in context if offsets[i][1] > start_char)
    end = next(i for i in reversed(context) if offsets[i][0] < end_char)
    return start, end
