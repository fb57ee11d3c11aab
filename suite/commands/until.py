"""`suite run --until-halfwidth H` and `--until-decided`: grow a study in rounds of seeds until it
answers, or its budget (`--max-runs` per entry) is spent, and say which.

Each round is a `suite run` with more repeats (a grown study: only the new trials train). The
stopping rules and their simulated coverage and type-I error are in suite/stats/compare/sequential.py;
the looks of `--until-decided` are planned once, when the study starts using them, and kept with
the study, so rerunning the command never adds looks the correction did not pay for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from suite.commands.run import run_study
from suite.config.request import Request
from suite.errors import SpecError
from suite.stats.compare import recipe_groups
from suite.stats.compare import sequential as seq
from suite.study.records import runs, setting_key
from suite.study.setup import Setup, load_specs, study_address
from suite.study.storage import stored_study

_LOOKS_ATTR = "until_decided_looks"


def run_until(request: Request, halfwidth: float | None, decided: bool, max_runs: int) -> int:
    """Rounds of `run` until every entry is precise enough (`halfwidth`, metric points) or every
    recipe comparison is decided; returns the last round's exit code."""
    sweep, stored = _checked(request, halfwidth, decided, max_runs)
    repeats = int((_run_info(stored).get("sweep") or {}).get("seeds", {}).get("repeats", 0))
    if repeats > sweep.seeds.repeats:  # a study grown before: go on from there
        request = dataclasses.replace(request, seeds=repeats)
    code, s, records = run_study(request)
    plan = _planned_looks(s, max_runs) if decided else []
    while True:
        n = s.sweep.seeds.repeats
        if halfwidth is not None:
            answer = seq.precise_enough(_entries(records), halfwidth, max_runs)
        else:
            answer = _decided(records, plan, n, s.sweep.references or {}, s.task.metric.higher_is_better)
        print(f"until: {answer['verdict']}")
        if answer["stop"] or code != 0:  # a round with errored trials stops: rerun after the fix
            return code
        following = seq.next_look(n, max_runs) if not plan else next((k for k in plan if k > n), None)
        if following is None:
            return code
        code, s, records = run_study(dataclasses.replace(request, seeds=following))


def _checked(request: Request, halfwidth: float | None, decided: bool, max_runs: int) -> tuple[Any, Any]:
    """The sweep and the stored study (None: none yet), after every refusal, before any training."""
    if halfwidth is not None and decided:
        raise SpecError("--until-halfwidth and --until-decided: give one stopping rule")
    if halfwidth is not None and halfwidth <= 0:
        raise SpecError(f"--until-halfwidth: expected a positive number of points, got {halfwidth}")
    _, task, sweep_path, sweep = load_specs(request)
    if sweep.seeds.design != "independent":
        raise SpecError(f"{sweep_path}: field 'seeds.design': --until-* grows independent draws, not grids")
    subsamples = len(sweep.seeds.subsample_seeds or range(sweep.seeds.subsample))
    if sweep.adaptive or sweep.pruner.type != "none" or subsamples > 1:
        raise SpecError(
            f"{sweep_path}: --until-* grows the repeats of planned settings with one subsample and no "
            "pruner (its rounds count runs per entry)"
        )
    if decided and not sweep.recipes:
        raise SpecError(f"{sweep_path}: field 'recipes': --until-decided compares the recipes of a study")
    if max_runs < sweep.seeds.repeats:
        raise SpecError(f"--max-runs {max_runs}: fewer than the {sweep.seeds.repeats} runs already planned")
    _, url, name = study_address(request, task, sweep)
    stored = stored_study(url, name)
    looks = stored.user_attrs.get(_LOOKS_ATTR) if stored is not None else None
    if decided and looks and looks[-1] != max_runs:  # new looks would spend alpha already split
        raise SpecError(
            f"--max-runs {max_runs}: this study's --until-decided looks were planned with --max-runs "
            f"{looks[-1]} ({', '.join(map(str, looks))}); rerun with it"
        )
    return sweep, stored


def _run_info(study: Any) -> dict[str, Any]:
    return (study.user_attrs.get("run_info") or {}) if study is not None else {}


def _entries(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each (size, setting)'s runs in the order they ran."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: r.get("trial_number", 0)):
        groups.setdefault((str(r["size"]), setting_key(r["hparams"])), []).append(r)
    return list(groups.values())


def _planned_looks(s: Setup, max_runs: int) -> list[int]:
    """The looks of `--until-decided`, fixed the first time a study uses them (kept with the study)."""
    import optuna

    from suite.study.storage import open_storage

    study = optuna.load_study(study_name=s.name, storage=open_storage(s.url))
    if stored := study.user_attrs.get(_LOOKS_ATTR):
        return stored
    planned = seq.looks(s.sweep.seeds.repeats, max_runs)
    study.set_user_attr(_LOOKS_ATTR, planned)
    return planned


def _decided(
    records: list[dict[str, Any]], plan: list[int], n: int, references: dict[str, str], higher: bool
) -> dict:
    """Every recipe against its reference (its declared one, else the first recipe) per size and
    setting, each at alpha / comparisons: decided when all are, stopping at the last planned look.
    `higher`: the metric's direction (the spec's, which is the metric's own)."""
    pairs = []
    for group in recipe_groups(runs(records)).values():
        first = next(iter(group))
        for name in group:
            ref = references.get(name, first)
            if name != ref and ref in group:
                pairs.append((f"{name} (B) vs {ref} (A)", group[ref], group[name]))
    if not pairs:
        return {"stop": True, "verdict": "no recipe has runs of its reference to compare with"}
    look = max(1, sum(1 for k in plan if k <= n))
    alpha = seq.ALPHA / len(pairs)
    results = [(name, seq.decided(a, b, look, len(plan), alpha, higher)) for name, a, b in pairs]
    done = all(r["decided"] for _, r in results)
    lines = "; ".join(f"{name}: {r['verdict']}" for name, r in results)
    return {"stop": done or look >= len(plan), "verdict": lines}
