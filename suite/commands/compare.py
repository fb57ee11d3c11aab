"""`suite compare`: one study's recipes (a table, or every pair with --all-pairs), two studies
(blocks, verdicts, P(A > B), a plot per block), or several (a matrix): never pooled across
(size, setting), and only studies of one task and metric (`check_studies`)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from suite.errors import SuiteError
from suite.outputs.run_folder import partial_note
from suite.outputs.unscored import no_score_lines
from suite.stats.compare import (
    check_studies,
    class_count,
    compare,
    compare_matrix,
    format_comparison,
    format_matrix,
    format_recipe_table,
    parse_setting,
    recipe_of,
    recipe_table,
    unstated,
)
from suite.study.records import load_run, runs, scored

Records = list[dict[str, Any]]


def compare_runs(
    run_a: Path,
    runs_b: list[Path],
    size: str | None,
    setting: str | None,
    reference: str | None,
    all_pairs: bool,
    plot: Path | None,
) -> None:
    """Print the comparison the arguments ask for (see the module's docstring); a study with no
    score at all leaves nothing to compare, and says so."""
    try:
        _compare(run_a, runs_b, size, setting, reference, all_pairs, plot)
    finally:
        gc.unfreeze()  # the studies `_study` froze are the collector's again (a caller lives on)


def _compare(
    run_a: Path, runs_b: list[Path], size: str | None, setting: str | None, reference: str | None,
    all_pairs: bool, plot: Path | None,
) -> None:  # fmt: skip
    info_a, a = _study(run_a)
    metric = info_a.get("task", {}).get("metric", {}).get("main", "score")
    chosen = parse_setting(setting)
    classes = class_count(info_a)  # the task's classes decide F1 and Matthews
    if not scored(a):
        print(f"nothing to compare: no trial of {run_a} produced a score")
        return
    if not runs_b:
        print(_recipes(run_a, info_a, a, size, chosen, reference, all_pairs, classes, metric))
        return
    if reference:
        raise SuiteError("--reference: names a recipe of one study; give one run folder")
    studies = [(str(run_a), a)]
    for run in runs_b:
        info, records = _study(run)
        check_studies(info_a, info)
        for line in unstated(info_a, info):  # an imported study: unpaired, and what it does not state
            print(f"{run_a} vs {run}: {line}" if len(runs_b) > 1 else line)
        if not scored(records):
            print(f"nothing to compare: no trial of {run} produced a score")
            return
        studies.append((str(run), records))
    if len(studies) > 2:
        print(format_matrix(compare_matrix(studies, size=size, setting=chosen, num_labels=classes)))
        return
    labels = (str(run_a), str(runs_b[0]))
    result = compare(a, studies[1][1], size=size, setting=chosen, num_labels=classes)
    print(format_comparison(result, labels, metric))
    if plot:
        _plot(result, a, studies[1][1], labels, metric, plot)


def _study(run: Path) -> tuple[dict[str, Any], Records]:
    """A run folder's (info, runs), after a line per (size, setting) of it that has no score."""
    info, trials = load_run(run)
    if note := partial_note(run, info):
        print(note)
    for line in no_score_lines(info.get("task", {}).get("name", "?"), trials):
        print(f"{run}: {line}")
    # The records live until the command exits and hold no reference cycle: out of the cycle
    # collector's passes from here (1 s of a 10 s comparison of two 10,000-trial studies).
    gc.freeze()
    return info, runs(trials)


def _recipes(
    run: Path, info: dict, records: Records, size: str | None, setting: Any, reference: str | None,
    all_pairs: bool, classes: int | None, metric: str,
) -> str:  # fmt: skip
    """One study's recipes: every pair (`all_pairs`) or the table against `reference`."""
    if all_pairs:
        names = list(dict.fromkeys(r for x in records if (r := recipe_of(x)) is not None))
        if len(names) < 2:
            raise SuiteError(f"{run}: --all-pairs compares the recipes of a study; it has {len(names)}")
        studies = [(name, [x for x in records if recipe_of(x) == name]) for name in names]
        return format_matrix(compare_matrix(studies, size=size, setting=setting, num_labels=classes))
    try:
        references = info.get("sweep", {}).get("references")
        tables = recipe_table(records, reference, size=size, setting=setting, references=references)
    except SuiteError as err:
        raise SuiteError(f"{run}: {err}") from None
    return format_recipe_table(tables, metric)


def _plot(result: dict, a: Records, b: Records, labels: tuple[str, str], metric: str, plot: Path) -> None:
    """One figure per block: never pooled."""
    from suite.outputs.plots import compare_runs as figure
    from suite.stats.compare import block_runs

    for name, runs_a, runs_b in block_runs(result, a, b):
        out = plot if len(result["blocks"]) == 1 else plot.with_name(f"{plot.stem}-{name}{plot.suffix}")
        figure(runs_a, runs_b, labels, metric).savefig(out, dpi=120)
        print(f"wrote {out}")
