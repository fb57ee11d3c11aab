"""What a user asked for on the command line, as one typed, frozen value.

The CLI (suite/commands/cli.py) is the only place that reads argv: it builds a `Request`, and
every stage below takes the request or the setup resolved from it once (suite/study/setup.py).
Nothing below the commands mutates it or reads an `argparse.Namespace`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from suite.errors import SpecError

TRAINER_OPTIONS = ("accelerator", "devices", "strategy", "precision")

# A task's name and a model's slug become folders (`--out/<task>/<model>`): each must be one folder
# name, so that no spec or flag can nest folders, climb out of --out or replace it.
SEGMENT_RULE = "one folder name: no '/', '\\', NUL or line break, and not '.', '..' or empty"
_NOT_IN_A_SEGMENT = ("/", "\\", "\0", "\n", "\r")


def segment_problem(text: str) -> str | None:
    """Why `text` cannot be one folder name under --out; None where it can (dots inside a name,
    spaces and any other Unicode are fine)."""
    if text in ("", ".", "..") or any(c in text for c in _NOT_IN_A_SEGMENT):
        return f"{text!r} is not {SEGMENT_RULE}"
    return None


def model_slug(model: str) -> str:
    """The folder a model's runs sit in under their task's: a local folder by its own name, any
    other name with the characters a folder name should not hold made `_`."""
    name = Path(model).name if "/" in model and Path(model).exists() else model
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def model_problem(model: str) -> str | None:
    """Why a model's runs could not sit in a folder of their own (`..`, `.`, `/`, `./` or an empty
    name); None where they can."""
    if segment_problem(slug := model_slug(model)):
        return f"its runs' folder would be {slug!r}, which is not {SEGMENT_RULE}"
    return None


@dataclass(frozen=True)
class Request:
    """`suite run` / `suite plan` / `suite launch` (a task and its sweep from files) or `suite worker`
    (a stored study named by `storage` and `study`; `task` is then None)."""

    task: str | None = None  # a task name or YAML file
    sweep: str | None = None  # a sweep name or YAML file (default: the task's)
    profile: str = "default"
    sets: tuple[str, ...] = ()  # `--set PATH=VALUE`, in order
    sizes: tuple[str, ...] = ()  # `--size`, as given ("64", "full")
    seeds: int | None = None
    eval_split: str | None = None
    model: str | None = None  # default: the task's
    data_dir: Path | None = None  # default: $SUITE_DATA_DIR
    out: Path = Path("runs")
    storage: str | None = None  # default: sqlite study.db in the run folder
    study: str | None = None  # default: task|model|sweep|profile
    workers: str = "1"  # a positive count or `auto`
    # `auto` on GPUs: this many workers share each visible device (None: as many as its memory holds)
    workers_per_gpu: int | None = None
    # torch CPU threads of each worker; default: the stored study's, fixed when it was created
    # (a new study: the usable CPUs / its workers)
    threads: int | None = None
    trainer: dict[str, str] = field(default_factory=dict)  # Lightning options given (TRAINER_OPTIONS)
    offline: bool = False
    quiet: bool = False
    allow_stack_change: bool = False  # resume a study made on another software stack, marked mixed
    # `--log-to`: trackers every trial is logged to (suite/study/trackers.py); not the study's identity
    log_to: tuple[str, ...] = ()
    # `launch`: the study is planned here for workers on other machines (cluster nodes) with this many
    # GPUs each; the trainer is resolved for them and the software stack is left to the first worker.
    gpus_per_worker: int | None = None

    def __post_init__(self) -> None:
        worker_count(self.workers)
        if self.model is not None and (problem := model_problem(self.model)):
            raise SpecError(f"--model {self.model!r}: {problem}")
        if self.threads is not None and self.threads < 1:
            raise SpecError(f"--threads: expected a positive integer, got {self.threads}")
        if self.workers_per_gpu is not None and self.workers_per_gpu < 1:
            raise SpecError(f"--workers-per-gpu: expected a positive integer, got {self.workers_per_gpu}")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise SpecError(f"--gpus-per-worker: expected 0 or more, got {self.gpus_per_worker}")
        if unknown := set(self.trainer) - set(TRAINER_OPTIONS):
            raise SpecError(
                f"trainer options: unknown {sorted(unknown)} (known: {', '.join(TRAINER_OPTIONS)})"
            )


def worker_count(workers: str | int) -> int | None:
    """`--workers` as a count, None for `auto`; anything else is refused (checked with the other
    arguments, before any heavy import)."""
    if str(workers) == "auto":
        return None
    try:
        count = int(workers)
    except ValueError:
        count = 0
    if count < 1:
        raise SpecError(f"--workers: expected a positive integer or auto, got {str(workers)!r}")
    return count
