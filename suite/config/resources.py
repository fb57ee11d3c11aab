"""Shipped tasks, sweeps and the report template, and finding a task or sweep by name.

A wheel carries the repository's top-level `tasks/`, `sweeps/` and `analysis/` inside the
package (`suite/tasks`, ...: see pyproject.toml), so they are found with importlib.resources
from any working directory. A source checkout or an editable install has no such copies and
reads the top-level folders themselves.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Literal

from suite.config.reading import one_line
from suite.errors import SpecError

Kind = Literal["tasks", "sweeps", "analysis"]
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # suite/config/resources.py -> the repository


def shipped_dir(kind: Kind) -> Path:
    """The shipped folder of `kind`: inside the installed package, else the source tree's."""
    packaged = files("suite") / kind
    if packaged.is_dir():  # an installed wheel: a real folder in site-packages
        return Path(str(packaged))
    return SOURCE_ROOT / kind


def local_dir(kind: Kind) -> Path | None:
    """`./tasks` or `./sweeps` of the working directory, unless absent or the shipped folder itself."""
    here = Path(kind)
    if not here.is_dir() or (shipped_dir(kind).is_dir() and here.samefile(shipped_dir(kind))):
        return None
    return here


def yaml_files(folder: Path) -> list[Path]:
    return sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])


def names(kind: Kind) -> dict[str, Path]:
    """Name -> file of every task or sweep a bare name can mean; a local file shadows a shipped one."""
    found = {p.stem: p for p in yaml_files(shipped_dir(kind))}
    if (local := local_dir(kind)) is not None:
        found.update({p.stem: p for p in yaml_files(local)})
    return found


def resolve(ref: str | Path, kind: Kind, what: str) -> Path:
    """A spec file as given when it exists; else `NAME`, `NAME.yaml` or `KIND/NAME.yaml` names a
    local (./KIND/NAME.yaml) or shipped one. `what` names the argument in the error."""
    path = Path(ref)
    if path.is_file():
        return path
    by_name = names(kind)
    if path.parent in (Path("."), Path(kind)) and path.suffix in ("", ".yaml", ".yml"):
        stem = path.name.removesuffix(path.suffix) if path.suffix else path.name
        if stem in by_name:
            return by_name[stem]
    known = ", ".join(sorted(by_name)) or "none"
    raise SpecError(
        one_line(f"{what} {str(ref)!r}: no such file, and no {kind[:-1]} by that name (known: {known})")
    )


def resolve_sweep_path(task_path: Path, sweep: str) -> Path:
    """A task's `sweep:` is relative to the working directory, else to the task's own root (its
    folder's parent, also inside an installed package), else a local or shipped sweep's name."""
    candidates = [Path(sweep), task_path.resolve().parent.parent / sweep]
    found = next((p for p in candidates if p.is_file()), None)
    if found is not None:
        return found
    try:
        return resolve(sweep, "sweeps", "sweep")
    except SpecError:
        raise SpecError(f"{task_path}: field 'sweep': sweep file not found: {sweep}") from None
