"""Whether a stored study resumes, grows or is refused, decided from its stored fingerprint.

- Same fingerprint: it resumes.
- A strict superset of its plan (more repeats or init/order seeds, more subsamples, more sizes,
  more recipes or grid values, a larger budget; everything else equal): it grows. Only the new
  trials are queued; the stored ones are untouched, and the seeds of earlier repeats never change
  (one seed stream per axis, `sweep.child_seed`). A TPE study grows its budget only: the sampler
  proposes the new settings, its stored ones cannot be re-planned with other seeds or sizes.
- Only the software stack differs and the user allows it (`--allow-stack-change`): it resumes,
  marked mixed in every output.
- A fine-tuning method whose code changed (`identity.METHOD`): refused in a line of its own
  naming the method: a fixed method is a new study.
- Anything else: refused, naming what changed.

A task field added after a study was stored (`identity.TASK_FIELDS_ADDED`) is absent from its
fingerprint and run info: the study keeps the behaviour that absence means (`with_stored_fields`,
`stored_task`), unless the command sets another value (then it is another study, refused).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from suite.config.sweep import SweepSpec, canonical
from suite.config.task import TaskSpec
from suite.errors import SuiteError
from suite.identity import METHOD, STACK, TASK_FIELDS_ADDED, differences, refusal, unused_libraries

# Fingerprint fields a plan may extend: whether it does is decided on the planned trials.
_GROWABLE = (
    "task.sizes",
    "sweep.seeds.repeats",
    "sweep.seeds.init",
    "sweep.seeds.order",
    "sweep.seeds.subsample",
    "sweep.seeds.subsample_seeds",
    "sweep.budget",
)
_GROWABLE_PREFIXES = ("sweep.space", "sweep.recipes.")


@dataclass(frozen=True)
class Resumption:
    """How a stored study continues: `grown` names the extended fields (empty: the same plan)."""

    grown: list[str] = field(default_factory=list)
    added: int = 0  # planned trials the stored plan did not have
    stored: int = 0  # planned trials of the stored plan
    stack_changed: list[str] = field(default_factory=list)  # allowed stack differences
    adopt_stack: bool = False  # stored before (some of) its stack was in a fingerprint: store it now

    def describe(self) -> str:
        parts = []
        if self.grown:
            parts.append(
                f"adds {self.added} trials to a stored study of {self.stored} ({', '.join(self.grown)})"
            )
        if self.stack_changed:
            changed = "; ".join(self.stack_changed)
            parts.append(f"resumed on another software stack ({changed}): mixed once a trial runs on it")
        return "; ".join(parts)


def with_stored_fields(task: TaskSpec, stored: dict[str, Any] | None) -> TaskSpec:
    """The task as the stored study (its fingerprint `stored`; None: a new study) runs it: a field
    the fingerprint lacks, left at its default by the command, takes the value its absence means
    (a study made before the field, or at that value). A value set otherwise is left for
    `resumption` to refuse."""
    if not stored:
        return task
    update = {
        name: old
        for name, old in TASK_FIELDS_ADDED.items()
        if f"task.{name}" not in stored and getattr(task, name) == TaskSpec.model_fields[name].default
    }
    return task.model_copy(update=update) if update else task


def stored_task(dumped: dict[str, Any]) -> dict[str, Any]:
    """A task as a study's run info holds it, with the fields added since it was stored at the values
    their absence means (for `TaskSpec.model_validate`)."""
    return {**TASK_FIELDS_ADDED, **dumped}


def resumption(
    stored: dict[str, Any] | None,
    current: dict[str, Any],
    info: dict[str, Any] | None,
    task: TaskSpec,
    sweep: SweepSpec,
    study: str,
    where: str,
    allow_stack_change: bool = False,
) -> Resumption:
    """How the stored study (its fingerprint and run info) continues with the current plan; a
    SuiteError naming the difference when it cannot."""
    if stored is None:
        raise SuiteError(refusal(study, where, None))
    stored, current = values_as_read(stored), values_as_read(current)
    if not any(k.startswith(STACK) for k in stored):  # made before the stack was in its identity
        recorded = {f"{STACK}{k}": v for k, v in ((info or {}).get("versions") or {}).items()}
        stored = {**stored, **{k: v for k, v in recorded.items() if k in current}}
    stored = unused_libraries(stored, current)
    # A stack entry the study predates (a library added to the stack later) is adopted: resumed and
    # recorded, not compared. A stored entry that differs is another stack.
    adopt = any(k.startswith(STACK) and k not in stored for k in current)
    current = {k: v for k, v in current.items() if not k.startswith(STACK) or k in stored}
    changed = [
        p
        for p in sorted(set(stored) | set(current))
        if stored.get(p, "(absent)") != current.get(p, "(absent)")
    ]
    if edited := [p for p in changed if p.startswith(METHOD) and p in stored and p in current]:
        raise SuiteError(method_refusal(study, where, edited[0], stored[edited[0]], current[edited[0]]))
    if spelled := [p for p in changed if _choices_as_strings(p, stored, current)]:
        raise SuiteError(refusal(study, where, _shown(stored, current, spelled)) + _STRING_CHOICES)
    stack = [p for p in changed if p.startswith(STACK)]
    # A head the stored plan never trained (absent) may join with new trials: its version is new;
    # so may a method (a new recipe's), or leave with its trials (the plan then refuses).
    fixed = [p for p in changed if not p.startswith(STACK) and not _growable(p) and not _joins(p, stored)]
    if fixed or (stack and not allow_stack_change):
        hint = " (or --allow-stack-change to resume on this stack)" if stack and not fixed else ""
        raise SuiteError(refusal(study, where, _shown(stored, current, fixed + stack)) + hint)
    grown = [p for p in changed if _growable(p) or _joins(p, stored)]
    stack_text = differences({p: stored.get(p) for p in stack}, {p: current.get(p) for p in stack}, limit=6)
    if not grown:
        return Resumption(stack_changed=stack_text, adopt_stack=adopt)
    return dataclasses.replace(
        _grown(grown, info, task, sweep, study, where, stored, current, stack_text), adopt_stack=adopt
    )


def _grown(
    grown: list[str],
    info: dict[str, Any] | None,
    task: TaskSpec,
    sweep: SweepSpec,
    study: str,
    where: str,
    stored: dict[str, Any],
    current: dict[str, Any],
    stack_text: list[str],
) -> Resumption:
    """A grown plan: every stored planned trial is still planned, and there are new ones."""
    from suite.study.plan import SETTINGS, plan_trials

    shown = _shown(stored, current, grown)
    if sweep.adaptive:
        old, new = _budget_slots(grown, task, sweep, stored, current, refusal(study, where, shown))
    elif not info or "task" not in info or "sweep" not in info:
        raise SuiteError(refusal(study, where, shown) + " (the stored study has no plan to extend)")
    else:  # both plans from the settings the study drew (random, QMC), not from the sampler again
        drawn = info.get(SETTINGS)
        before = TaskSpec.model_validate(stored_task(info["task"])), SweepSpec.model_validate(info["sweep"])
        old = {p.key for p in plan_trials(*before, drawn)}
        new = {p.key for p in plan_trials(task, sweep, drawn)}
    if new < old and info.get("grown"):  # the options that grew the study were left out of this command
        raise SuiteError(
            f"study {study!r} in {where} plans {len(old)} trials, this command {len(new)} of them "
            f"({'; '.join(shown)}): it was grown; rerun with the options that grew it (run.json: grown)"
        )
    if not old < new:
        dropped = len(old - new)
        why = f"drops {dropped} of its {len(old)} planned trials" if dropped else "plans the same trials"
        raise SuiteError(refusal(study, where, shown) + f" (not a superset of the stored plan: it {why})")
    return Resumption(grown=shown, added=len(new - old), stored=len(old), stack_changed=stack_text)


def _budget_slots(
    grown: list[str],
    task: TaskSpec,
    sweep: SweepSpec,
    stored: dict[str, Any],
    current: dict[str, Any],
    refused: str,
) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """A TPE plan as (setting, replicate) slots: its settings exist only in the storage, so only
    its budget can grow (workers ask the sampler for the new settings when the queue is empty)."""
    from suite.study.plan import replicates

    if grown != ["sweep.budget"]:
        raise SuiteError(
            f"{refused} (a TPE study grows only its budget: the settings it proposed cannot be "
            "re-planned with other seeds or sizes)"
        )
    per = range(replicates(task, sweep))
    old, new = (int(fp["sweep.budget"]) for fp in (stored, current))
    return {(s, r) for s in range(old) for r in per}, {(s, r) for s in range(new) for r in per}


def values_as_read(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """A fingerprint with its fixed and recipe hyperparameters as HParams reads them (as a spec now
    holds them, `sweep.canonical`): a study stored when `1e-4` stayed the string YAML reads is the
    study of 0.0001, and one of 0.0001 the study of `1e-4`."""
    fixed = ("sweep.hparams.", "sweep.recipes.")  # a recipe's path ends with its hyperparameter too
    return {
        k: canonical(k.rsplit(".", 1)[-1], v) if k.startswith(fixed) else v for k, v in fingerprint.items()
    }


# Choices are not read back so: Optuna's storage holds a categorical's choices, and a stored trial's
# strings are not the numbers new trials would suggest (Optuna refuses a changed categorical).
_STRING_CHOICES = " (its storage holds the choices as the strings YAML read then; now they read as numbers)"


def _choices_as_strings(path: str, stored: dict[str, Any], current: dict[str, Any]) -> bool:
    """A categorical's stored choices that differ from the current ones only as read (`1e-4`)."""
    old, new = stored.get(path), current.get(path)
    if not (path.startswith("sweep.space.") and path.endswith(".choices") and isinstance(old, list)):
        return False
    return old != new and [canonical(path.split(".")[2], c) for c in old] == new


def _joins(path: str, stored: dict[str, Any]) -> bool:
    """A head's version the stored plan lacks, or a method's code on one side only."""
    return (path.startswith("head_code.") and path not in stored) or path.startswith(METHOD)


def method_refusal(study: str, where: str, path: str, stored: Any, current: Any) -> str:
    """Why a stored study is not resumed with an edited method: its code is another method's."""
    return (
        f"study {study!r} in {where} ran method {path.removeprefix(METHOD)} at code {stored}; its "
        f"code here is {current} (edited since): a fixed method is a new study: add --study NAME or "
        "use another --out"
    )


def _growable(path: str) -> bool:
    return path in _GROWABLE or path.startswith(_GROWABLE_PREFIXES)


def _shown(stored: dict[str, Any], current: dict[str, Any], paths: list[str]) -> list[str]:
    return differences(
        {p: stored.get(p, "(absent)") for p in paths}, {p: current.get(p, "(absent)") for p in paths}
    )


def with_stack(info: dict[str, Any], stack: dict[str, Any]) -> dict[str, Any]:
    """Run info marked mixed, with `stack` among the stacks its trials ran on."""
    stacks = [x for x in info.get("stacks") or [info.get("stack")] if x]
    return {**info, "stacks": stacks if stack in stacks else [*stacks, stack], "stack_mixed": True}


def note_stack(study: Any, stack: dict[str, Any]) -> None:
    """A trial about to be told ran on `stack`: the study is marked mixed when that is not the
    stack of its identity (its fingerprint's stack fields; the versions its run info recorded for
    a study stored before stacks were) or not among the stacks it lists; only then, so a resumed
    study in which no trial ran on another stack stays unmixed. Read afresh just before writing:
    other workers may have added their stacks."""
    attrs = study.user_attrs
    info, stored = attrs.get("run_info") or {}, attrs.get("fingerprint") or {}
    known = [x for x in info.get("stacks") or [info.get("stack")] if x]
    if stack in known and info.get("stack_mixed"):
        return
    entries = (
        {k: v for k, v in stored.items() if k.startswith(STACK)}
        if known  # else stored before stacks: its first trials ran on the versions it recorded
        else {f"{STACK}{k}": v for k, v in (info.get("versions") or {}).items()}
    )
    ran = {path: _entry(stack, path.removeprefix(STACK)) for path in entries}
    if all(value is None or value == entries[path] for path, value in ran.items()) and (
        stack in known or not known
    ):
        return
    study.set_user_attr("run_info", with_stack(info, stack))


def _entry(stack: dict[str, Any], path: str) -> Any:
    """A fingerprint's stack field (`gpu.tf32`) read from a stack as a trial records it (None:
    the trial's stack has no such entry)."""
    try:
        return functools.reduce(lambda value, part: value[part], path.split("."), stack)
    except (KeyError, TypeError):
        return None
