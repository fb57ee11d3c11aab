"""K-shot sizes (`16/class`): K examples of every class per subsample seed, refused where there
are no classes to count, and comparable only with a reported number of the same K."""

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from suite.commands.cli import main
from suite.config.sweep import load_sweep
from suite.config.task import load_task, per_class_k, size_order
from suite.data.classification import ClassificationData
from suite.data.subsample import ClassTooSmall, per_class_indices, subsample_indices
from suite.errors import SpecError
from suite.stats.compare import reasons_not_comparable
from suite.study.setup import apply_overrides
from tests.conftest import run_tiny

REPO = Path(__file__).resolve().parent.parent
NAMES = ["a", "b", "c"]
LM_BFF_TASKS = ["sst2", "rte", "mrpc", "cola"]


def _labels() -> np.ndarray:
    """Three unbalanced classes (50, 30, 7 members), shuffled."""
    return np.random.default_rng(7).permutation([0] * 50 + [1] * 30 + [2] * 7)


def _one_line_error(capsys: pytest.CaptureFixture, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_every_class_gets_exactly_k_per_seed() -> None:
    labels = _labels()
    for seed in range(5):
        chosen = per_class_indices(labels, 6, seed, NAMES)
        counts = Counter()
        for i in chosen:  # counted by hand, one example at a time
            counts[NAMES[labels[i]]] += 1
        assert counts == {"a": 6, "b": 6, "c": 6}
        assert len(set(chosen.tolist())) == len(chosen) == 18
        assert chosen.tolist() == sorted(chosen.tolist())


def test_the_seed_alone_decides_the_draw() -> None:
    labels = _labels()
    draws = [tuple(per_class_indices(labels, 5, seed, NAMES)) for seed in range(6)]
    assert len(set(draws)) == 6  # different seeds, different sets
    assert draws[3] == tuple(per_class_indices(labels, 5, 3, NAMES))  # the same seed, the same set
    # Listing the classes in another order (so other label codes) draws the same examples.
    recode = np.array([2, 0, 1])
    reordered = [NAMES[1], NAMES[2], NAMES[0]]  # code 0 is now b, 1 is c, 2 is a
    assert tuple(per_class_indices(recode[labels], 5, 3, reordered)) == draws[3]


def test_k_larger_than_a_class_names_it_and_its_count() -> None:
    with pytest.raises(ClassTooSmall, match=r"class 'c' has 7 training examples, fewer than 8"):
        per_class_indices(_labels(), 8, 0, NAMES)
    with pytest.raises(ClassTooSmall, match=r"class 'd' has 0 training examples"):
        per_class_indices(_labels(), 1, 0, [*NAMES, "d"])  # a listed class with no example


def test_the_total_size_path_draws_what_it_drew_before() -> None:
    from sklearn.model_selection import train_test_split

    labels = np.random.default_rng(3).permutation([0] * 700 + [1] * 250 + [2] * 50)
    everything = np.arange(len(labels))
    for seed in (0, 1, 465539299):
        expected, _ = train_test_split(everything, train_size=100, stratify=labels, random_state=seed)
        assert np.array_equal(subsample_indices(len(labels), 100, seed, labels), np.sort(expected))
        plain = np.sort(np.random.default_rng(seed).choice(len(labels), 100, replace=False))
        assert np.array_equal(subsample_indices(len(labels), 100, seed), plain)


def test_task_data_draws_k_per_class_and_totals_as_before(tiny_task: Path) -> None:
    spec = load_task(tiny_task)
    data = ClassificationData(spec, tiny_task.parent.parent / "data", tokenizer=None)
    rows = (tiny_task.parent.parent / "data/tiny/train.tsv").read_text().splitlines()[1:]
    file_labels = [row.split("\t")[2] for row in rows]
    for seed in (0, 1):
        chosen = data.train_indices("4/class", seed)
        assert Counter(file_labels[i] for i in chosen) == {"no": 4, "yes": 4}
        total = subsample_indices(len(rows), 16, seed, data.labels["train"])
        assert np.array_equal(data.train_indices(16, seed), total)


def test_size_syntax() -> None:
    assert per_class_k("16/class") == 16 and per_class_k("1/class") == 1
    for other in (16, "16", "full", "0/class", "016/class", "16/classes", "x/class", "-1/class", None):
        assert per_class_k(other) is None, other
    assert sorted(["full", "16/class", 500, "4/class", 64], key=size_order) == [
        64, 500, "4/class", "16/class", "full",
    ]  # fmt: skip


def test_size_flag_parses_k_per_class(tiny_task: Path) -> None:
    spec = load_task(tiny_task)
    sweep = load_sweep(tiny_task.parent.parent / "sweeps/tiny.yaml")
    task, _ = apply_overrides(spec, sweep, ["16/class", "32"], None)
    assert task.sizes == ["16/class", 32]
    for bad in ("0/class", "16/klass"):
        with pytest.raises(SpecError, match="^--size: "):
            apply_overrides(spec, sweep, [bad], None)


@pytest.mark.parametrize(
    ("task", "why"),
    [("wnut17", "not tagging"), ("squad", "not span"), ("stsb", "a regression task has none")],
)
def test_refused_without_classes_to_count(capsys, task: str, why: str) -> None:  # noqa: ANN001
    err = _one_line_error(capsys, ["run", str(REPO / f"tasks/{task}.yaml"), "--size", "16/class", "--quiet"])
    assert err.startswith("error: --size: field 'sizes': size 16/class draws K examples per class")
    assert why in err


def test_refused_in_the_task_file(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    raw = yaml.safe_load((REPO / "tasks/stsb.yaml").read_text())
    path = tmp_path / "stsb.yaml"
    path.write_text(yaml.safe_dump({**raw, "sizes": ["16/class"]}))
    err = _one_line_error(capsys, ["run", str(path), "--quiet"])
    assert f"{path}: field 'sizes': size 16/class" in err


def test_k_larger_than_a_class_is_refused_before_training(capsys, tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    rows = (tiny_task.parent.parent / "data/tiny/train.tsv").read_text().splitlines()[1:]
    counts = Counter(row.split("\t")[2] for row in rows)
    k = max(counts.values()) + 1  # one more than the largest class holds
    args = ["--size", f"{k}/class"]
    run_tiny(tiny_task, tiny_models["bert"], *args, expect=2)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{tiny_task}: field 'sizes': size {k}/class" in err, err
    named = re.search(r"class '(\w+)' has (\d+) in \S*train\.tsv", err)
    assert named and int(named[2]) == counts[named[1]], err  # the class and its count in the file
    assert not list((tiny_task.parent.parent / "runs").rglob("trials.jsonl"))  # nothing trained


def test_a_k_shot_run_is_keyed_recorded_and_ranked_by_its_k(tiny_task: Path, tiny_models, capsys) -> None:  # noqa: ANN001
    from suite.outputs.leaderboard import write_leaderboard

    folder = run_tiny(tiny_task, tiny_models["bert"], "--size", "4/class")
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 3
    for r in records:
        assert r["size"] == "4/class" and r["key"].startswith("size=4/class|")
        assert r["n_train"] == 4 * 2  # K x classes
    assert "4/class" in capsys.readouterr().out  # the summary table's size column
    board = write_leaderboard([folder], folder / "board.json")
    assert [e["size"] for e in board["entries"]] == ["4/class"]
    assert board["entries"][0]["rank_group"]["size"] == "4/class"


def test_k_shot_numbers_compare_only_with_the_same_k() -> None:
    reported = {"model": "minilm-l6", "value": 60.0, "metric": "accuracy", "statistic": "mean", "n_runs": 5,
                "split": "dev", "size": "16/class", "source": "synthetic"}  # fmt: skip
    entry = {"model": "minilm-l6", "hub_id": None, "size": "16/class", "metric": "accuracy",
             "eval_split": "validation", "eval_set": None, "head": "auto"}  # fmt: skip
    assert reasons_not_comparable(reported, entry) == []
    for ours in ("8/class", 16, 32, "full"):  # another K, a total of K or of K x classes, the whole set
        reasons = reasons_not_comparable(reported, {**entry, "size": ours})
        assert any(r.startswith("training size: reported 16 examples per class (K-shot)") for r in reasons)
    for theirs in (None, 32):  # a total-size number is not comparable with a K-shot run
        reasons = reasons_not_comparable({**reported, "size": theirs}, entry)
        assert any(r.endswith("ours 16 examples per class (K-shot)") for r in reasons), reasons


def test_a_reported_block_takes_a_k_shot_size(tmp_path: Path) -> None:
    raw = yaml.safe_load((REPO / "tasks/sst2.yaml").read_text())
    raw["reported"] = [{**raw["reported"][0], "size": "16/class"}]
    path = tmp_path / "sst2.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_task(path).reported[0].size == "16/class"


@pytest.mark.parametrize("name", LM_BFF_TASKS)
def test_shipped_lm_bff_profiles(name: str) -> None:
    task = load_task(REPO / f"tasks/{name}.yaml", "lm-bff")
    assert task.sizes == ["16/class"] and not task.regression
    sweep = load_sweep(REPO / task.sweep, "lm-bff")
    assert sweep.seeds.subsample_seeds == [13, 21, 42, 87, 100]  # the paper's five data seeds
