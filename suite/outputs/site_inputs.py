"""What `suite site` reads and how its page names it: leaderboard JSON files or run folders (a
folder's study built as `suite leaderboard` builds it), each named by its path relative to the
working directory (outside it, by its shortest tail of at least two parts that no other input
shares), and each entry's setting as its recipe and what differs between the rows of its task."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from suite.errors import SuiteError
from suite.outputs.leaderboard import build, read_leaderboard, validate
from suite.study.records import load_run, setting_key, setting_labels

Documents = list[tuple[str, dict[str, Any]]]


def read_inputs(paths: list[Path]) -> Documents:
    """Each input's (validated) leaderboard with the name the page gives it."""
    return [(name, _document(p)) for p, name in zip(paths, input_names(paths), strict=True)]


def _document(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        return read_leaderboard(path)
    if not (path / "trials.jsonl").is_file():
        raise SuiteError(
            f"{path}: a folder without trials.jsonl; site takes leaderboard JSON files or run "
            "folders (runs/<task>/<model>)"
        )
    document = build([load_run(path)])  # fresh statistics, as `suite leaderboard` writes them
    validate(document, str(path))
    return document


def input_names(paths: list[Path]) -> list[str]:
    """Paths relative to the working directory; outside it, the shortest distinct tail."""
    here = Path.cwd().resolve()
    full = [p.resolve() for p in paths]
    names = []
    for path in full:
        if path.is_relative_to(here):
            names.append(str(path.relative_to(here)))
            continue
        for parts in range(min(2, len(path.parts)), len(path.parts) + 1):
            tail = path.parts[-parts:]
            if not any(other != path and other.parts[-parts:] == tail for other in full):
                break
        names.append(str(Path(*tail)))
    return names


def compact_settings(entries: list[dict[str, Any]]) -> list[str]:
    """Per entry: `recipe=NAME` for a recipe, else the hyperparameters that differ between the
    entries of its task without one (lr, bs and ep where none differ), as the CLI prints them."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        by_task[e["task"]].append({"hparams": e["setting"]})
    labels = {}
    for task, members in by_task.items():
        recipes = [m for m in members if m["hparams"].get("recipe")]
        plain = [m for m in members if not m["hparams"].get("recipe")]
        labels[task] = {**setting_labels(recipes), **setting_labels(plain)}
    return [labels[e["task"]][setting_key(e["setting"])] for e in entries]
