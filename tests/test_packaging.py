"""The wheel carries the shipped tasks, sweeps and report template, and works from any directory."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed_and_the_shipped_folders_are_mapped() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "suite").rglob("__init__.py")} | {
        "suite.schemas"
    }
    mapped = {"suite.tasks": "tasks", "suite.sweeps": "sweeps", "suite.analysis": "analysis"}
    assert set(config["packages"]) == found | set(mapped)
    assert config["package-dir"] == mapped
    assert config["package-data"]["suite.analysis"] == ["*.ipynb"]


def _fresh_venv(root: Path) -> Path:
    """A venv without the suite that sees this interpreter's dependencies (torch, optuna, ...)
    through a path-only .pth: nothing to download, and the editable install of the source tree,
    whose hook lives in a .pth of its own, is not picked up."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    (purelib,) = (root / "lib").glob("python3.*/site-packages")
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return root / "bin"


@pytest.mark.slow
def test_the_wheel_runs_list_and_validate_from_an_empty_directory(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: the build writes build/ and egg-info beside the sources
    for name in ("suite", "tasks", "sweeps", "analysis"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)]
    subprocess.run([*build, str(source)], check=True, capture_output=True)
    (wheel,) = dist.glob("suite-*.whl")

    bin_dir = _fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # never the source tree
    install = [str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, env=env)
    empty = tmp_path / "empty"
    empty.mkdir()

    def suite(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(bin_dir / "suite"), *args], cwd=empty, env=env, capture_output=True, text=True
        )

    listed = suite("list")
    assert listed.returncode == 0, listed.stderr
    assert "tasks (shipped: run by name):" in listed.stdout and "  ner  " in listed.stdout
    assert "  devlin  " in listed.stdout and "local" not in listed.stdout
    checked = suite("validate", "ner", "--set", "sizes=[100]")
    assert checked.returncode == 0, checked.stderr
    installed = (tmp_path / "venv").resolve()
    shipped = Path(checked.stdout.split()[-1]).resolve()
    assert shipped.name == "ner.yaml" and installed in shipped.parents  # the wheel's copy
    every = suite("validate")  # the default: the shipped tasks and sweeps
    shipped_count = len([*(REPO / "tasks").glob("*.yaml"), *(REPO / "sweeps").glob("*.yaml")])
    assert every.returncode == 0 and every.stdout.count("ok ") == shipped_count, every.stdout + every.stderr
    template = subprocess.run(
        [
            str(bin_dir / "python"),
            "-c",
            "from suite.outputs.report import TEMPLATE; print(TEMPLATE.is_file(), TEMPLATE)",
        ],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
    )
    assert template.stdout.startswith("True ") and str(installed) in template.stdout, template.stderr
    # The whole flow from the wheel: plan and a (shrunk) smoke study of the shipped task.
    data = ["--data-dir", os.environ.get("SUITE_DATA_DIR", str(REPO.parent / "shared" / "data"))]
    small = ["--set", "sizes=[16]", "--seeds", "1", *data]
    planned = suite("plan", "ner", "--profile", "smoke", *small)
    assert planned.returncode == 0 and "estimate" in planned.stdout, planned.stdout + planned.stderr
    ran = suite("run", "ner", "--profile", "smoke", "--quiet", *small)
    assert ran.returncode == 0, ran.stderr  # every planned trial ended as a run
    assert (empty / "runs" / "ner" / "minilm-l6" / "leaderboard.json").is_file(), ran.stdout + ran.stderr


def test_the_package_asks_for_a_torch_range_and_the_install_step_pins_the_cpu_build() -> None:
    """Installing the suite on a GPU machine must keep its torch; the README and CI pin the build
    the tests run on, and that pin lies inside the package's range."""

    from packaging.requirements import Requirement

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    torch = next(Requirement(d) for d in pyproject["project"]["dependencies"] if d.startswith("torch"))
    assert not any(s.operator == "==" for s in torch.specifier) and len(torch.specifier) == 2
    texts = [(REPO / f).read_text() for f in ("README.md", "Makefile")]  # .ci/run runs the Makefile's
    pins = {m for text in texts for m in re.findall(r"torch==([\d.]+)", text)}
    assert pins == {"2.13.0"} and torch.specifier.contains("2.13.0")
    assert torch.specifier.contains("2.13.0+cu128")  # the same release built for a driver
