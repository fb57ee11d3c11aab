"""The README's smoke command on real RTE with the bundled MiniLM (about a minute)."""

import json
from pathlib import Path

import pytest

from suite.commands.cli import main

REPO = Path(__file__).resolve().parent.parent


def _smoke(out: Path, data: Path, *extra: str) -> list[dict]:
    args = ["run", str(REPO / "tasks/rte.yaml"), "--profile", "smoke", "--out", str(out)]
    assert main([*args, "--data-dir", str(data), "--quiet", *extra]) == 0
    return [json.loads(line) for line in (out / "rte" / "minilm-l6" / "trials.jsonl").open()]


@pytest.mark.slow
def test_rte_smoke_is_reproducible_into_a_new_folder(tmp_path: Path, shared_data: Path) -> None:
    first = _smoke(tmp_path / "a", shared_data)
    assert len(first) >= 3
    assert len({(r["seeds"]["init"], r["seeds"]["order"]) for r in first}) == len(first)
    assert all(0.0 <= r["score"] <= 1.0 for r in first)
    assert all(r["n_train"] == 64 and r["n_dev"] == 277 for r in first)
    # A new study in a new folder: its first planned trial (the seed grid's first seeds, whatever
    # the number of seeds) trains to the same record as the first study's (one trial, not three).
    (again,) = _smoke(tmp_path / "b", shared_data, "--seeds", "1")
    (same,) = [r for r in first if r["key"] == again["key"]]
    fields = ("score", "scores", "epochs", "loss_curve", "per_example", "tokens")
    assert {f: again[f] for f in fields} == {f: same[f] for f in fields}
