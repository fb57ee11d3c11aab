"""What a small study costs besides training, before and after a change, in one invocation:

    python -m benchmarks.overhead [--before REV] [--repeats 3]

A tiny task (48 learnable sentence pairs, a random 2-layer BERT of hidden size 32, 3 trials of 2
epochs) run by `suite run --workers 1` and `--workers 2`: the training is a fraction of a second,
so what is measured is what every study pays on top of it: the interpreters it starts (the run
and its workers; before the first worker planned, also a planning child), their imports, planning
and the pre-flight, and writing the outputs. The tests run hundreds of such studies, and a user's
`--workers auto` pays it per study.

"Before" is the code of git revision `--before` (`git archive`, run with PYTHONPATH pointing to it);
"after" is this working tree. Each side first runs once unmeasured (its features tokenised, its
caches filled), then the sides alternate `--repeats` times. Per side and worker count: the median
wall seconds and CPU seconds of the whole process tree (the run and every process it waited for),
then the after/before ratios.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.memory import checkout  # noqa: E402


def tiny_study(root: Path) -> tuple[Path, Path]:
    """The tests' tiny task (its YAML, data and sweep) and a random tiny BERT folder."""
    from tests.conftest import save_tiny_models, write_tiny_task

    return write_tiny_task(root), save_tiny_models(root / "models", ["bert"])["bert"]


def run_once(
    code: Path, cache: Path, task: Path, model: Path, out: Path, workers: int
) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, the run and every process it waited for) of one study."""
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable, "-m", "suite", "run", str(task), "--model", str(model), "--out", str(out),
        "--data-dir", str(task.parent.parent / "data"), "--workers", str(workers), "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(code), "SUITE_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, env=env, cwd=code, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)}: exit {done.returncode} (PYTHONPATH={code})\n{done.stderr[-2000:]}"
        )
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", default="HEAD", help="git revision of the 'before' side")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="suite-overhead-") as folder:
        root = Path(folder)
        task, model = tiny_study(root / "study")
        sides = {"before": checkout(args.before, root), "after": ROOT}
        figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for workers in (1, 2):
            for side, code in sides.items():  # unmeasured: features tokenised, caches filled
                run_once(code, root / f"cache-{side}", task, model, root / "out", workers)
            for _ in range(args.repeats):
                for side, code in sides.items():
                    figure = run_once(code, root / f"cache-{side}", task, model, root / "out", workers)
                    figures.setdefault((side, workers), []).append(figure)
    print(f"a 3-trial tiny study, before = {args.before}, after = the working tree; median of {args.repeats}")
    header = ("workers", "wall s before", "after", "ratio", "CPU s before", "after", "ratio")
    print("\n" + "  ".join(f"{h:>{w}}" for h, w in zip(header, (7, 13, 6, 5, 12, 6, 5), strict=True)))
    for workers in (1, 2):
        wall = {s: statistics.median(w for w, _ in figures[(s, workers)]) for s in sides}
        cpu = {s: statistics.median(c for _, c in figures[(s, workers)]) for s in sides}
        w, c = wall["after"] / wall["before"], cpu["after"] / cpu["before"]
        print(
            f"{workers:>7}  {wall['before']:>13.1f}  {wall['after']:>6.1f}  {w:>4.2f}x"
            f"  {cpu['before']:>12.1f}  {cpu['after']:>6.1f}  {c:>4.2f}x"
        )
    print(f"\n{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
