"""Token-tagging examples: CoNLL sentences -> word windows -> sub-token features, and back.

Labels are aligned with `word_ids()`: the word's tag on its first sub-token and the ignore
index on the rest (or, with `label_all_subtokens`, on every sub-token with B- continuing as
I-). A sentence longer than `max_length` sub-tokens is cut into consecutive word windows, so
every word gets a prediction; decoding reads each word's first sub-token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from suite.config.task import TaskSpec
from suite.data.cache import cached
from suite.data.classification import EVAL_SUBSAMPLE_SEED
from suite.data.conll import TO_IOB2, Sentence, check_tags, read_conll
from suite.data.hub import TAGGING_COLUMNS, data_origin, load_split, source_sha256, use_hub
from suite.data.paths import local_file
from suite.data.subsample import subsample_indices
from suite.errors import DataError
from suite.identity import tokenizer_fingerprint

IGNORE = -100
Features = list[dict[str, Any]]


def tag_vocabulary(types: list[str]) -> list[str]:
    """IOB2 tags in a fixed order: O, then B-/I- per entity type as listed in the spec."""
    return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]


class TaggingData:
    """One NER task's sentences (IOB2) and their windowed features for one tokenizer."""

    def __init__(self, spec: TaskSpec, root: Path | None, tokenizer: Any) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.tags = tag_vocabulary(spec.labels)
        self.tag_index = {t: i for i, t in enumerate(self.tags)}
        self.sources: dict[str, str] = {}
        self.origin = data_origin(spec.data, root)
        self.sentences: dict[str, list[Sentence]] = {}
        for split in ("train", spec.eval_split):
            self._load("train" if split == "train" else "dev", split, root)

    def _load(self, key: str, split: str, root: Path | None) -> None:
        data = self.spec.data
        if use_hub(data, root):
            rows, source = load_split(data.hub, split, list(TAGGING_COLUMNS), "tags", self.spec.name)
            sentences = [_hub_sentence(row, i, source, self.spec.name) for i, row in enumerate(rows)]
        else:
            path = local_file(root, data.local, getattr(data, split), split, self.spec.name)
            sentences, source = read_conll(path, data.token_column, data.tag_column), str(path)
        check_tags(sentences, self.spec.labels, source, data.tag_scheme)
        convert = TO_IOB2[data.tag_scheme]
        self.sentences[key] = [Sentence(s.tokens, convert(s.tags), s.document, s.line) for s in sentences]
        self.sources[key] = source

    @property
    def num_labels(self) -> int:
        return len(self.tags)

    def train_indices(self, size: int | str, subsample_seed: int) -> np.ndarray:
        # Sizes count sentences; stratified on "has an entity" so tiny sizes are not all-O.
        has_entity = np.array([any(t != "O" for t in s.tags) for s in self.sentences["train"]])
        return subsample_indices(len(has_entity), size, subsample_seed, has_entity.astype(int))

    def dev_indices(self) -> np.ndarray:
        size = self.spec.eval_limit or "full"
        return subsample_indices(len(self.sentences["dev"]), size, EVAL_SUBSAMPLE_SEED)

    def gold(self, split: str, indices: np.ndarray) -> list[list[str]]:
        return [list(self.sentences[split][i].tags) for i in indices]

    def features(self, split: str, indices: np.ndarray) -> Features:
        key = {
            "kind": "tagging",
            "tokenizer": tokenizer_fingerprint(self.tokenizer),
            "source": self.sources[split],
            "sha256": source_sha256(self.sources[split]),
            "tags": self.tags,
            "scheme": self.spec.data.tag_scheme,
            "all_subtokens": self.spec.tagging.label_all_subtokens,
            "max_length": self.spec.max_length,
            "indices": np.asarray(indices).tolist(),
        }
        return cached(key, lambda: self._featurize(split, indices))

    def _featurize(self, split: str, indices: np.ndarray) -> Features:
        budget = self.spec.max_length - self.tokenizer.num_special_tokens_to_add()
        sentences = [self.sentences[split][i] for i in indices]
        # One tokenizer call for all words gives each word's sub-token count.
        pieces = self.tokenizer(
            [list(s.tokens) for s in sentences], is_split_into_words=True, add_special_tokens=False
        )
        features: Features = []
        for position, sentence in enumerate(sentences):
            counts = np.bincount(
                [w for w in pieces.word_ids(position) if w is not None], minlength=len(sentence.tokens)
            )
            for start, end in word_windows(counts, budget):
                features.append(self._window(sentence, position, start, end))
        return features

    def _window(self, sentence: Sentence, position: int, start: int, end: int) -> dict[str, Any]:
        words = list(sentence.tokens[start:end])
        encoded = self.tokenizer(
            words, is_split_into_words=True, truncation=True, max_length=self.spec.max_length
        )
        word_ids = encoded.word_ids()
        # -1 marks a word the tokenizer dropped entirely (rare control characters): decoded as O.
        labels, word_starts, previous = [], [-1] * len(words), None
        for index, word in enumerate(word_ids):
            if word is None:
                labels.append(IGNORE)
            elif word != previous:
                labels.append(self.tag_index[sentence.tags[start + word]])
                word_starts[word] = index
            elif self.spec.tagging.label_all_subtokens:
                tag = sentence.tags[start + word]
                labels.append(self.tag_index["I-" + tag[2:] if tag.startswith("B-") else tag])
            else:
                labels.append(IGNORE)
            previous = word
        return {
            **{k: list(v) for k, v in encoded.items()},
            "labels": labels,
            "word_starts": word_starts,
            "sentence": position,
            "first_word": start,
        }


def _hub_sentence(row: dict[str, Any], index: int, source: str, task: str) -> Sentence:
    """A hub row's words and tags (one each); `line` 0 marks it as a row, not a file line."""
    tokens, tags = row["tokens"], row["tags"]
    if not isinstance(tokens, list) or not isinstance(tags, list) or len(tokens) != len(tags):
        raise DataError(f"task {task}: {source}: row {index + 1}: expected as many tags as tokens")
    return Sentence(tuple(str(t) for t in tokens), tuple(tags), index, 0)


def word_windows(counts: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive [start, end) word ranges whose sub-token counts fit the budget.

    A single word longer than the budget gets a window of its own (its later sub-tokens are
    truncated; its first one, the one that is scored, survives).
    """
    windows, start, used = [], 0, 0
    for i, n in enumerate(counts):
        n = max(int(n), 1)
        if used + n > budget and i > start:
            windows.append((start, i))
            start, used = i, 0
        used += n
    if len(counts):
        windows.append((start, len(counts)))
    return windows


def assemble(windows: list[tuple[int, int, list[int]]], n_sentences: int) -> list[list[int]]:
    """(sentence, first word, word predictions) per window -> one list per sentence."""
    out: list[list[int]] = [[] for _ in range(n_sentences)]
    for sentence, _, predictions in sorted(windows, key=lambda w: (w[0], w[1])):
        out[sentence].extend(predictions)
    return out


def collate_tagging(tokenizer: Any) -> Any:
    """Dynamic padding of the encoder inputs; labels padded with the ignore index. All on the right,
    whatever side the tokenizer pads: labels and word starts count positions from the left."""
    import torch

    def collate(batch: Features) -> dict[str, Any]:
        extra = ("labels", "word_starts", "sentence", "first_word")
        padded = tokenizer.pad(
            [{k: v for k, v in f.items() if k not in extra} for f in batch],
            padding_side="right",
            return_tensors="pt",
        )
        width = padded["input_ids"].shape[1]
        words = max(len(f["word_starts"]) for f in batch)
        padded["labels"] = torch.tensor([f["labels"] + [IGNORE] * (width - len(f["labels"])) for f in batch])
        padded["word_starts"] = torch.tensor(
            [f["word_starts"] + [-2] * (words - len(f["word_starts"])) for f in batch]
        )
        padded["sentence"] = torch.tensor([f["sentence"] for f in batch])
        padded["first_word"] = torch.tensor([f["first_word"] for f in batch])
        return padded

    return collate
