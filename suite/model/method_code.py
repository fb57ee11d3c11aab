"""The code a fine-tuning method runs, hashed: part of a study's identity, as the suite's own code
is (suite/identity.py, the code pin), and stamped on every record of a trial that ran it.

The hash covers every module under the method's top-level package that its module imports,
transitively (at the top or inside a function, absolute or relative), with the packages' `__init__`
files: found by reading the files (`ast`), as `identity.pinned_modules` follows the suite's own
imports. It is a hash of the files' bytes, so any edit, a comment too, is another method: the code
that ran is the code the hash names. A method installed from a distribution that is not editable
counts by the distribution's name and version instead (its files are the release's)."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import sys
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path

from suite.model.methods import split_path, with_current_dir


@dataclass(frozen=True)
class MethodCode:
    """A method's import path, the file of its module, and the hash of the code it runs."""

    path: str
    file: str
    hash: str

    def line(self) -> str:
        return f"method {self.path}: {self.file}, code {self.hash}"

    def record(self) -> dict[str, str]:
        """What a trial's record says of it (`method`)."""
        return {"path": self.path, "hash": self.hash}


def method_code(path: str) -> MethodCode:
    """The code of the method at `path`: its module as imported (or as an import would find it)."""
    with_current_dir()
    module = split_path(path)[0]
    files = module_files(module)
    if module not in files:
        return MethodCode(path, "(not found)", "(not found)")
    top = module.split(".")[0]
    released = _distribution(top, files[module])
    return MethodCode(path, _shown(files[module]), released or _digest(files))


def _shown(path: Path) -> str:
    """A file relative to the current directory where it lies below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _digest(files: dict[str, Path]) -> str:
    blob = hashlib.sha256()
    for name in sorted(files):
        blob.update(name.encode() + b"\0" + files[name].read_bytes() + b"\0")
    return blob.hexdigest()[:16]


def module_files(module: str) -> dict[str, Path]:
    """Module name -> source file: `module`, its packages, and every module of its top-level
    package that these import, transitively (modules without a Python source are left out)."""
    top = module.split(".")[0]
    found: dict[str, Path] = {}
    todo, seen = [module], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _source(name)
        if path is None:
            continue
        found[name] = path
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo += _parents(name)
        todo += [n for n in _imports(path, package) if n.split(".")[0] == top]
    return found


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _source(name: str) -> Path | None:
    """A module's Python source file, from the modules imported or found as an import would find
    it (nothing is imported here)."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return Path(file).resolve() if file and file.endswith(".py") else None
    locations = None
    spec = None
    for prefix in [*_parents(name), name]:
        held = sys.modules.get(prefix)
        spec = (
            held.__spec__ if held is not None and held.__spec__ else PathFinder.find_spec(prefix, locations)
        )
        if spec is None:
            return None
        locations = spec.submodule_search_locations
        if locations is None and prefix != name:
            return None
    origin = spec.origin if spec is not None and spec.has_location else None
    return Path(origin).resolve() if origin and origin.endswith(".py") else None


def _imports(path: Path, package: str) -> set[str]:
    """The modules `path` imports (`from a import b` names `a` and `a.b`), relative ones resolved
    against its `package`."""
    names: set[str] = set()
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):  # the import itself says what is wrong with the file
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                stem = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{stem}.{base}".strip(".") if stem else base
            if base:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


@functools.cache
def _owners() -> dict[str, list[str]]:
    from importlib import metadata

    return metadata.packages_distributions()


def _distribution(top: str, file: Path) -> str | None:
    """`name==version` of the non-editable distribution whose files hold `file`, else None."""
    from importlib import metadata

    for name in _owners().get(top, []):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if _editable(dist):
            continue
        root = Path(dist.locate_file("")).resolve()
        try:
            relative = file.relative_to(root).as_posix()
        except ValueError:
            continue
        if any(str(f) == relative for f in dist.files or ()):
            return f"{dist.metadata['Name']}=={dist.version}"
    return None


def _editable(dist: object) -> bool:
    text = dist.read_text("direct_url.json")  # type: ignore[attr-defined]
    if not text:
        return False
    try:
        return bool(json.loads(text).get("dir_info", {}).get("editable"))
    except (ValueError, AttributeError):
        return False


def codes(paths: list[str]) -> dict[str, MethodCode]:
    """Each method path's code, in the order given."""
    return {path: method_code(path) for path in dict.fromkeys(paths)}
