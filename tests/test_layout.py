"""The package layout is the flow: each stage imports only from earlier stages, no module imports
itself back through a circle, and argv stops at the commands."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from suite.identity import imports_of

SUITE = Path(__file__).resolve().parent.parent / "suite"
# Cross-cutting modules every stage may import (stage 0); nothing else sits beside the packages.
# `identity` is one because the feature cache (data) and the fingerprint (study) both need it.
CROSS_CUTTING = {"errors", "faults", "provenance", "identity"}


def stages() -> dict[str, int]:
    """Package -> its stage number, read from the `Stage N, name:` line of its docstring."""
    table = {}
    for init in sorted(SUITE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        found = re.match(r"Stage (\d+), (\w+):", doc)
        assert found, f"{init}: the docstring starts 'Stage N, {init.parent.name}: what it takes and gives'"
        assert found.group(2) == init.parent.name, f"{init}: names stage {found.group(2)!r}"
        table[init.parent.name] = int(found.group(1))
    return table


def module_name(path: Path) -> str:
    parts = path.relative_to(SUITE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every suite module `path` imports, at the top or inside a function (`from suite.x import y`
    counts `suite.x.y` when y is a module): the walk that derives the pinned code."""
    return imports_of(path)[0]


def stage_of(module: str, table: dict[str, int]) -> int | None:
    part = module.split(".")[1] if "." in module else ""
    return 0 if part in CROSS_CUTTING else table.get(part)


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) - {module_name(p)} for p in SUITE.rglob("*.py")}


def test_each_stage_imports_only_from_earlier_stages() -> None:
    table = stages()
    assert sorted(table.values()) == list(range(1, len(table) + 1)), table  # one stage each, in order
    late = []
    for module, targets in graph().items():
        if module in ("suite", "suite.__main__"):
            continue
        own = stage_of(module, table)
        assert own is not None, f"{module}: not in a stage package (add it to one, or to CROSS_CUTTING)"
        for target in targets:
            theirs = stage_of(target, table)
            if target != "suite" and theirs is not None and theirs > own:
                late.append(f"{module} (stage {own}) imports {target} (stage {theirs})")
    assert not late, "\n".join(late)


def find_circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (a depth-first search's back edge), or None."""
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (circle := visit(target, [*path, target])):
                return circle
        state[module] = "done"
        return None

    for module in sorted(edges):
        if module not in state and (circle := visit(module, [module])):
            return circle
    return None


def test_no_import_circle() -> None:
    assert find_circle(graph()) is None


def test_the_top_level_holds_packages_and_the_cross_cutting_modules_only() -> None:
    loose = {p.stem for p in SUITE.glob("*.py")} - {"__init__", "__main__"}
    assert loose == CROSS_CUTTING
    assert len(CROSS_CUTTING - {"errors"}) <= 3


def test_argv_stops_at_the_commands() -> None:
    readers = [
        str(p.relative_to(SUITE.parent))
        for p in SUITE.rglob("*.py")
        if "argparse" in imports_of(p)[1] and p.parent.name != "commands"
    ]
    assert not readers


def test_commands_hold_no_process_or_signal_code() -> None:
    """Commands parse, plan, call one function and print; starting, signalling and stopping
    processes is the study stage's (suite/study/supervise.py)."""
    held = {
        p.name: sorted(found)
        for p in (SUITE / "commands").glob("*.py")
        if (found := imports_of(p)[1] & {"signal", "ctypes", "subprocess"})
    }
    assert not held, held


def test_the_checks_catch_a_late_import_and_a_circle(tmp_path: Path) -> None:
    """The checks can fail: a stats module importing a command inside a function, and a circle."""
    late = tmp_path / "late.py"
    late.write_text("def f():\n    from suite.commands.run import run\n")
    table = stages()
    assert "suite.commands.run" in imports(late)
    assert stage_of("suite.commands.run", table) > stage_of("suite.stats.summary", table)
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None
