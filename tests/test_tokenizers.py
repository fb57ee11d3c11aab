"""Real tokenizer families through `load_tokenizer`: tiny tokenizers of each family's class
(WordPiece as BERT, byte-level BPE with the RoBERTa and the ModernBERT conventions,
SentencePiece Unigram as DeBERTa-v3), trained here on CoNLL sentences, saved beside the matching
tiny architecture and loaded from the folder as a checkpoint is. Words tagged one by one must be
tokenized as running text is (a byte-level word start carries its leading-space marker, whatever
the model type), and gold tags round-trip to entity F1 = 1.0 on CoNLL dev sentences.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import tiny_config

from suite.config.task import load_task
from suite.data.conll import read_conll
from suite.data.tagging import collate_tagging
from suite.heads.registry import prepare_task, tagging_scorer
from suite.model.encoders import encoder_inputs, load_encoder, load_tokenizer, with_prefix_space

REPO = Path(__file__).resolve().parent.parent
DEV_SENTENCES = 300  # blocks of eng.testa: sentences and -DOCSTART- lines
FAMILIES = ["bert", "roberta", "modernbert", "deberta-v3"]


def _train(family: str, corpus: list[str]):  # noqa: ANN202 (a tokenizers.Tokenizer)
    """The family's tokenizer model, pre-tokenizer and post-processor, as its checkpoints ship them."""
    from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer, SentencePieceUnigramTokenizer
    from tokenizers import processors as P

    if family == "bert":
        tok = BertWordPieceTokenizer(lowercase=False)
        tok.train_from_iterator(
            corpus, vocab_size=800, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        )
        tok.post_processor = P.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    elif family == "deberta-v3":  # Metaspace (prepend "always") over a Unigram model
        tok = SentencePieceUnigramTokenizer()
        tok.train_from_iterator(
            corpus,
            vocab_size=800,
            special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"],
            unk_token="[UNK]",
        )
        tok.post_processor = P.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", 1), ("[SEP]", 2)],
        )
    else:  # byte-level BPE; both checkpoints ship ByteLevel(add_prefix_space=false)
        tok = ByteLevelBPETokenizer(add_prefix_space=False)
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] if family == "roberta" else [
            "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"
        ]  # fmt: skip
        tok.train_from_iterator(corpus, vocab_size=800, special_tokens=specials)
        tok.post_processor = (
            P.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
            if family == "roberta"
            else P.TemplateProcessing(
                single="[CLS] $A [SEP]",
                pair="[CLS] $A [SEP] $B [SEP]",
                special_tokens=[("[CLS]", 1), ("[SEP]", 2)],
            )
        )
    return tok._tokenizer


SPECIALS = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
            "mask_token": "[MASK]"}  # fmt: skip
TOKENIZER_CONFIG = {
    "bert": {"tokenizer_class": "BertTokenizer", **SPECIALS, "do_lower_case": False},
    "roberta": {"tokenizer_class": "RobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                "cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
                "mask_token": "<mask>"},
    "modernbert": {"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS},
    "deberta-v3": {"tokenizer_class": "DebertaV2Tokenizer", **SPECIALS, "bos_token": "[CLS]",
                   "eos_token": "[SEP]", "do_lower_case": False},
}  # fmt: skip
ARCH = {"bert": "bert", "roberta": "roberta", "modernbert": "modernbert", "deberta-v3": "deberta-v2"}


@pytest.fixture(scope="module")
def checkpoints(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """family -> a local checkpoint folder: tiny random encoder + the trained tokenizer."""
    import torch
    from transformers import AutoModel

    corpus = [" ".join(s.tokens) for s in read_conll(shared_data / "conll2003/eng.train", tag_column=3)[:400]]
    root = tmp_path_factory.mktemp("checkpoints")
    folders = {}
    for family in FAMILIES:
        folder = root / family
        folder.mkdir()
        backend = _train(family, corpus)
        backend.save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG[family]))
        torch.manual_seed(0)
        AutoModel.from_config(tiny_config(ARCH[family], backend.get_vocab_size())).save_pretrained(folder)
        folders[family] = folder
    return folders


@pytest.fixture(scope="module")
def dev_task(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NER task over 64 CoNLL train sentences and the first DEV_SENTENCES dev sentences."""
    root = tmp_path_factory.mktemp("ner")
    data = root / "data" / "ner"
    data.mkdir(parents=True)
    for name, source, first in (("train.txt", "eng.train", 64), ("dev.txt", "eng.testa", DEV_SENTENCES)):
        blocks = (shared_data / "conll2003" / source).read_text().split("\n\n")
        (data / name).write_text("\n\n".join(blocks[1 : first + 1]) + "\n")
    task = root / "ner.yaml"
    text = (REPO / "tasks/ner.yaml").read_text().replace("local: conll2003", "local: ner")
    task.write_text(
        text.replace("eng.train", "train.txt").replace("eng.testa", "dev.txt").replace("[1000]", "[32]")
    )
    return task


def _sentences(task: Path) -> list[list[str]]:
    return [list(s.tokens) for s in read_conll(task.parent / "data/ner/dev.txt", tag_column=3)]


@pytest.mark.parametrize("family", FAMILIES)
def test_words_one_by_one_tokenize_as_running_text(family: str, checkpoints, dev_task: Path) -> None:  # noqa: ANN001
    tokenizer = load_tokenizer(str(checkpoints[family]))
    # Loaded as the checkpoint names its class (TokenizersBackend: transformers' generic fast class).
    expected = TOKENIZER_CONFIG[family]["tokenizer_class"].replace(
        "PreTrainedTokenizerFast", "TokenizersBackend"
    )
    assert type(tokenizer).__name__ == expected
    sentences = _sentences(dev_task)
    assert len(sentences) > 250
    marker = {"bert": None, "deberta-v3": "\u2581"}.get(family, "\u0120")  # Ġ: byte-level space
    for words in sentences:
        split = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
        assert split["input_ids"] == tokenizer(" ".join(words), add_special_tokens=False)["input_ids"], words
        if marker:  # every word's first piece carries the leading-space marker
            pieces = tokenizer.convert_ids_to_tokens(split["input_ids"])
            firsts = [
                pieces[i] for i, w in enumerate(split.word_ids()) if i == 0 or w != split.word_ids()[i - 1]
            ]
            assert all(p.startswith(marker) for p in firsts), (words, firsts)


def test_the_modernbert_convention_without_the_fix_tags_words_without_their_space(checkpoints) -> None:  # noqa: ANN001
    """The check above can fail: the same tokenizer as loaded before the prefix-space decision."""
    from transformers import AutoTokenizer

    raw = AutoTokenizer.from_pretrained(checkpoints["modernbert"])
    words = ["EU", "rejects", "German", "call"]
    pieces = raw.convert_ids_to_tokens(
        raw(words, is_split_into_words=True, add_special_tokens=False)["input_ids"]
    )
    assert not pieces[0].startswith("\u0120") and pieces != raw.tokenize(" " + " ".join(words))
    fixed = with_prefix_space(raw)
    ids = fixed(words, is_split_into_words=True, add_special_tokens=False)["input_ids"]
    assert fixed.convert_ids_to_tokens(ids) == fixed.tokenize(" ".join(words))


def test_a_byte_level_step_inside_a_sequence_gets_the_prefix_space_too() -> None:
    """GPT-NeoX / Llama-3 style: a regex Split, then ByteLevel without its own regex."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\s?\w+|\s?[^\s\w]+"), "isolated"),
            pre_tokenizers.ByteLevel(False, use_regex=False),
        ]
    )
    tokenizer = with_prefix_space(PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]"))
    words = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("Bonn")
    assert words[0][0] == "\u0120Bonn" and tokenizer.add_prefix_space


@pytest.mark.parametrize("family", FAMILIES)
def test_gold_tags_round_trip_with_each_family_and_its_architecture(
    family: str,
    checkpoints,
    dev_task: Path,  # noqa: ANN001
) -> None:
    tokenizer = load_tokenizer(str(checkpoints[family]))
    data = prepare_task(load_task(dev_task), dev_task.parent / "data", tokenizer).data
    features = data.features("dev", data.dev_indices())
    gold = [
        (f["sentence"], f["first_word"], [f["labels"][s] if s >= 0 else 0 for s in f["word_starts"]])
        for f in features
    ]
    scores, per_sentence = tagging_scorer(data)(gold)
    assert scores["entity_f1"] == 1.0 and scores["entity_f1_strict"] == 1.0
    assert len(per_sentence["gold"]) == len(_sentences(dev_task)) > 250 and sum(per_sentence["gold"]) > 300
    # The matching tiny architecture takes the features as they are batched for training.
    encoder = load_encoder(str(checkpoints[family]))
    batch = collate_tagging(tokenizer)(features[:8])
    hidden = encoder(**encoder_inputs(encoder, batch)).last_hidden_state
    assert hidden.shape == (*batch["input_ids"].shape, 32)


def test_a_checkpoint_saved_to_pad_left_is_loaded_to_pad_right(tiny_models, tiny_task) -> None:  # noqa: ANN001
    """Every head reads [CLS] at position 0 and labels padded after the tokens: a tokenizer saved
    with `padding_side: left` is loaded to pad on the right, so a classification batch of unequal
    lengths keeps [CLS] first in every row and its pads at the end."""
    import shutil

    folder = tiny_task.parent / "left-padding-bert"
    shutil.copytree(tiny_models["bert"], folder)
    config = folder / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "padding_side": "left"}))
    tokenizer = load_tokenizer(str(folder))
    assert tokenizer.padding_side == "right"
    rows = [tokenizer("a short one"), tokenizer("a much longer sentence than the first one is")]
    prepared = prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", tokenizer)
    batch = prepared.collate([dict(r) for r in rows])
    assert (batch["input_ids"][:, 0] == tokenizer.cls_token_id).all()
    lengths = [len(r["input_ids"]) for r in rows]
    for row, n in zip(batch["attention_mask"].tolist(), lengths, strict=True):
        assert row == [1] * n + [0] * (max(lengths) - n)
