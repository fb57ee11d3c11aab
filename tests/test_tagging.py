"""NER: CoNLL reading, IOB conversion, label alignment, windows, decoding and seqeval."""

from pathlib import Path

import numpy as np
import pytest

from suite.config.task import load_task
from suite.data.conll import iob1_to_iob2, iobes_to_iob2, read_conll
from suite.data.tagging import assemble, collate_tagging, word_windows
from suite.errors import DataError
from suite.heads.registry import prepare_task, tagging_scorer
from suite.model.encoders import load_tokenizer
from suite.model.metrics import entity_scores

REPO = Path(__file__).resolve().parent.parent


def test_reader_handles_docstart_blank_and_tab_only_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.conll"
    path.write_text(
        "-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\t\n"
        "Peter NNP I-NP I-PER\n\n\n-DOCSTART- -X- O O\n\nBonn NNP I-NP I-LOC\n"
    )
    sentences = read_conll(path, tag_column=3)
    assert [s.tokens for s in sentences] == [("EU", "rejects"), ("Peter",), ("Bonn",)]
    assert [s.document for s in sentences] == [1, 1, 2]


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.conll"
    path.write_text("EU I-ORG\nrejects\n")
    with pytest.raises(DataError, match=r"bad\.conll:2: expected a token and a tag column"):
        read_conll(path, tag_column=1)


def test_scheme_conversions() -> None:
    iob1 = ("I-ORG", "I-ORG", "O", "I-PER", "B-PER", "I-LOC", "I-PER")
    assert iob1_to_iob2(iob1) == ("B-ORG", "I-ORG", "O", "B-PER", "B-PER", "B-LOC", "B-PER")
    assert iobes_to_iob2(("S-PER", "O", "B-ORG", "E-ORG")) == ("B-PER", "O", "B-ORG", "I-ORG")


def test_real_files_read_with_published_counts(shared_data: Path) -> None:
    conll = read_conll(shared_data / "conll2003/eng.testa", tag_column=3)
    assert len(conll) == 3250 and sum(len(s.tokens) for s in conll) == 51362
    wnut = read_conll(shared_data / "wnut17/wnut17train.conll")
    assert len(wnut) == 3394 and sum(len(s.tokens) for s in wnut) == 62730


def test_unknown_tag_is_a_one_line_error(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / "t.conll").write_text("Bonn B-CITY\n\n")
    text = (REPO / "tasks/wnut17.yaml").read_text().replace("local: wnut17", "local: d")
    text = text.replace("wnut17train.conll", "t.conll").replace("emerging.dev.conll", "t.conll")
    (tmp_path / "t.yaml").write_text(text)
    with pytest.raises(DataError, match=r"t\.conll:1: tag 'B-CITY' is not O or B-/I-"):
        prepare_task(load_task(tmp_path / "t.yaml"), tmp_path, load_tokenizer("minilm-l6"))


def test_fixture_metric_counts_by_hand() -> None:
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-MISC", "I-MISC"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O", "O", "I-MISC"]]
    # Default (conlleval) mode: an I- after O starts an entity, so "I-MISC" alone is a MISC span
    # [3, 3] that does not match gold [2, 3]. Correct: PER, ORG = 2 of 4 predicted, 4 gold.
    scores = entity_scores(gold, pred)
    assert scores["precision"] == pytest.approx(2 / 4) and scores["recall"] == pytest.approx(2 / 4)
    assert scores["entity_f1"] == pytest.approx(0.5)
    # Strict IOB2: the stray I-MISC is not an entity at all: 2 correct of 3 predicted.
    assert scores["entity_f1_strict"] == pytest.approx(2 * (2 / 3) * (2 / 4) / (2 / 3 + 2 / 4))
    assert scores["f1_PER"] == 1.0 and scores["f1_LOC"] == 0.0 and scores["f1_MISC"] == 0.0


def test_word_windows_fit_the_budget() -> None:
    counts = np.array([3, 3, 3, 10, 1, 1])
    windows = word_windows(counts, budget=6)
    assert windows == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert assemble([(0, 2, [5]), (0, 0, [1, 2]), (1, 0, [3])], 2) == [[1, 2, 5], [3]]


@pytest.fixture(scope="module")
def conll_dev(shared_data: Path):  # noqa: ANN201
    task = load_task(REPO / "tasks/ner.yaml")
    return prepare_task(task, shared_data, load_tokenizer("minilm-l6"))


def _gold_windows(data, features) -> list:  # noqa: ANN001
    """What a perfect model predicts: each window's gold tag at each word's first sub-token."""
    return [
        (f["sentence"], f["first_word"], [f["labels"][s] if s >= 0 else 0 for s in f["word_starts"]])
        for f in features
    ]


def test_gold_tags_round_trip_to_f1_one_on_the_whole_dev_set(conll_dev) -> None:  # noqa: ANN001
    data = conll_dev.data
    features = data.features("dev", data.dev_indices())
    scores, per_sentence = tagging_scorer(data)(_gold_windows(data, features))
    assert len(data.dev_indices()) == 3250
    assert scores["entity_f1"] == 1.0 and scores["entity_f1_strict"] == 1.0
    # Every sentence's entities are all found, and the counts add up to the whole dev set's.
    assert per_sentence["correct"] == per_sentence["gold"] == per_sentence["predicted"]
    assert len(per_sentence["gold"]) == 3250 and sum(per_sentence["gold"]) == 5942


def test_long_sentence_gets_a_tag_for_every_word(conll_dev, tmp_path: Path) -> None:  # noqa: ANN001
    data = conll_dev.data
    words = ["Peter", "Blackburn", "visited", "Bonn", "yesterday"] * 60  # 300 words, > 128 tokens
    tags = ["B-PER", "I-PER", "O", "B-LOC", "O"] * 60
    from suite.data.conll import Sentence

    data.sentences["long"] = [Sentence(tuple(words), tuple(tags), 0, 1)]
    features = data._featurize("long", np.array([0]))
    assert len(features) > 2 and all(len(f["input_ids"]) <= 128 for f in features)
    predicted = assemble(_gold_windows(data, features), 1)
    assert len(predicted[0]) == len(words)
    assert [data.tags[t] for t in predicted[0]] == tags


@pytest.mark.parametrize("family", ["wordpiece", "bpe", "unigram"])
def test_labels_sit_on_each_words_first_subtoken(family: str, tiny_tokenizers, tiny_ner: Path) -> None:
    tokenizer = tiny_tokenizers[family]
    data = prepare_task(load_task(tiny_ner), tiny_ner.parent / "data", tokenizer).data
    indices = data.dev_indices()
    for feature, index in zip(data.features("dev", indices), indices, strict=True):
        sentence = data.sentences["dev"][index]
        starts = feature["word_starts"]
        assert len(starts) == len(sentence.tokens) and all(s > 0 for s in starts)
        assert [data.tags[feature["labels"][s]] for s in starts] == list(sentence.tags)
        others = [label for i, label in enumerate(feature["labels"]) if i not in set(starts)]
        assert set(others) == {-100}
        # The sub-tokens from one word's start to the next decode back to that word.
        ends = [*starts[1:], len(feature["input_ids"]) - 1]
        for start, end, word in zip(starts, ends, sentence.tokens, strict=True):
            text = tokenizer.decode(feature["input_ids"][start:end]).replace(" ", "")
            assert text.lower() == word.lower() or tokenizer.unk_token in text, (text, word)


def test_label_all_subtokens_continues_b_as_i(tiny_tokenizers, tiny_ner: Path) -> None:
    tiny_ner.write_text(
        tiny_ner.read_text().replace("label_all_subtokens: false", "label_all_subtokens: true")
    )
    data = prepare_task(load_task(tiny_ner), tiny_ner.parent / "data", tiny_tokenizers["bpe"]).data
    feature = data.features("dev", data.dev_indices())[0]
    starts = set(feature["word_starts"])
    inner = [data.tags[x] for i, x in enumerate(feature["labels"]) if x != -100 and i not in starts]
    assert inner and not any(t.startswith("B-") for t in inner)


def test_eval_split_test_reads_the_test_file(shared_data: Path, capsys) -> None:  # noqa: ANN001
    task = load_task(REPO / "tasks/ner.yaml").model_copy(update={"eval_split": "test"})
    data = prepare_task(task, shared_data, load_tokenizer("minilm-l6")).data
    assert data.sources["dev"].endswith("eng.testb") and len(data.sentences["dev"]) == 3453


def test_a_left_padding_tokenizer_gets_labels_on_their_tokens(tiny_ner: Path) -> None:
    """Labels, word starts and tokens are padded on one side, whatever side the tokenizer pads:
    each row of a batch is its example collated alone, then padding (and the padding only)."""
    tokenizer = load_tokenizer("minilm-l6")
    tokenizer.padding_side = "left"
    data = prepare_task(load_task(tiny_ner), tiny_ner.parent / "data", tokenizer).data
    features = data.features("dev", data.dev_indices())[:8]
    assert len({len(f["input_ids"]) for f in features}) > 1  # the batch really pads
    collate = collate_tagging(tokenizer)
    batch = collate(features)
    for row, feature in enumerate(features):
        alone = collate([feature])
        n = len(feature["input_ids"])
        for name, pad in (("input_ids", tokenizer.pad_token_id), ("attention_mask", 0), ("labels", -100)):
            assert batch[name][row, :n].tolist() == alone[name][0].tolist()
            assert set(batch[name][row, n:].tolist()) <= {pad}
        starts = feature["word_starts"]
        assert batch["word_starts"][row, : len(starts)].tolist() == starts
        assert all(batch["labels"][row, s] >= 0 for s in starts)  # each word's label sits on its start
