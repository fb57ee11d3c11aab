"""What the output commands cost at 100 to 100,000 trials, this checkout against a base revision
in the same run (benchmarks/scale_data.py builds the studies):

    python -m benchmarks.scale [--sizes 100 1000 10000 100000 | --quick] [--base 60caea7]

Per shape (`one`: one setting; `grid`: settings x seeds x sizes) and size, each command runs in a
fresh interpreter: `leaderboard`, the run's summary (`format_summary`, the table `run` prints, on
the stored study), `export`, `compare` (against a twin study of the same plan), `site` (on that
leaderboard) and `report` (up to --report-max trials: it executes a notebook; timed as after
`run`, which leaves the run folder's leaderboard written by the same code: made untimed first).
Printed: wall seconds and the child's peak RSS (ru_maxrss, its waited-for children included), the
ratios 10,000/100 and 100,000/10,000, `compare`'s blocks (its pairwise work grows with the
settings, not the trials) and the storage side (no target; `--storage-only` for it alone):
enqueueing N trials, one worker's take and a watcher's progress look at N queued, on SQLite and
PostgreSQL (`--postgres URL`, by default SUITE_TEST_POSTGRES_URL), and the progress looks at a
stored study of N ended runs.
A command past --timeout prints as `>T`; the base's later sizes of that command are skipped, and
`site` where its leaderboard timed out prints as `n/r` (not run).
First, in this process: the quartiles of bootstrap replicates (what a leaderboard's median and IQR
intervals read, suite.stats.estimates.uncertainty) ordered by a sort of each row and by a partition
at the places they read, 20,000,000 values at 1,000 to 100,000 a row, with the sort / partition
ratio (`--quantiles-only` for it alone).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.scale_data import build, seed_run, shape_plan

COMMANDS = ("leaderboard", "summary", "export", "compare", "site", "report")
NOT_RUN = ()  # a command that had no input: `site` where the leaderboard timed out
SUMMARY = (
    "import sys; from pathlib import Path; from suite.study.records import load_run; "
    "from suite.config.task import TaskSpec; from suite.outputs.run_folder import format_summary; "
    "info, records = load_run(sys.argv[1]); "
    "print(format_summary(TaskSpec.model_validate(info['task']), records, Path(sys.argv[1])))"
)
TAKE = """
import sys, time, optuna
from benchmarks.pops import plan
from suite.study.progress import study_progress
from suite.study.queue import fail_dead_trials, pop_planned, queue_lock
optuna.logging.set_verbosity(optuna.logging.ERROR)
url, n, takes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
name, enqueue_s = plan(url, n)
study = optuna.load_study(study_name=name, storage=url)
try:
    start = time.perf_counter()
    for _ in range(takes):  # a worker's take: put dead workers' trials back, pop one, end it
        with queue_lock(study):
            fail_dead_trials(study)
            trial = pop_planned(study)
        study.tell(trial, 0.0)
    took = (time.perf_counter() - start) / takes
    start = time.perf_counter()
    study_progress(study, n, 2)  # a watcher's look at the queue
    print(enqueue_s, took, time.perf_counter() - start)
finally:  # no queue left behind in a shared PostgreSQL
    optuna.delete_study(study_name=name, storage=url)
"""
PROGRESS = """
import sys, time, optuna
from suite.study.progress import study_progress
optuna.logging.set_verbosity(optuna.logging.ERROR)
url, planned, looks = sys.argv[1], int(sys.argv[2]), []
study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
for _ in range(2):  # the watcher's first look (Optuna's cache of ended trials cold), then the next
    start = time.perf_counter()
    study_progress(study, planned, 2)
    looks.append(time.perf_counter() - start)
print(*looks)
"""


def timed(argv: list[str], code: Path, cwd: Path, timeout: float) -> tuple[float, float] | None:
    """(seconds, peak RSS MB) of one command in a fresh interpreter on `code`; None past timeout."""
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = start + timeout
    while (done := os.wait4(child.pid, os.WNOHANG))[0] == 0:
        if time.perf_counter() > deadline:
            child.kill()
            child.wait()
            return None
        time.sleep(0.02)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(done[1])
    if child.returncode:
        raise RuntimeError(
            f"{' '.join(argv)} on {code}: exit {child.returncode}: {child.stderr.read().decode()[-800:]}"
        )
    return seconds, done[2].ru_maxrss / 1024


def warm(*folders: Path) -> None:
    """Read each study's files once before a code's commands, so that neither code's first
    command reads them from disk while the other's finds them in the page cache."""
    for folder in folders:
        for path in sorted(p for p in folder.iterdir() if p.is_file()):
            with path.open("rb") as f:
                while f.read(1 << 24):
                    pass


def command_line(name: str, folder: Path, twin: Path, out: Path) -> list[str]:
    suite = [sys.executable, "-m", "suite"]
    return {
        "leaderboard": [*suite, "leaderboard", str(folder), "-o", str(out / "leaderboard.json")],
        "summary": [sys.executable, "-c", SUMMARY, str(folder)],
        "export": [*suite, "export", str(folder), "-o", str(out / "export.jsonl")],
        "compare": [*suite, "compare", str(folder), str(twin)],
        "site": [*suite, "site", str(out / "leaderboard.json"), "-o", str(out / "site")],
        "report": [*suite, "report", str(folder)],
    }[name]


def measure(args: argparse.Namespace, codes: dict[str, Path], seed_folder: Path) -> dict[tuple, tuple | None]:
    """(code, shape, n, command) -> (seconds, MB) or None (past the timeout or not run)."""
    results: dict[tuple, tuple | None] = {}
    for shape in args.shapes:
        for n in args.sizes:
            folder, twin = (build(args.data, seed_folder, shape, n, t) for t in (False, True))
            for label, code in codes.items():
                warm(folder, twin)
                out = Path(tempfile.mkdtemp(prefix=f"scale-{label}-"))
                for name in COMMANDS:
                    smaller = [results.get((label, shape, m, name), ()) for m in args.sizes if m < n]
                    if (name == "report" and n > args.report_max) or any(r is None for r in smaller):
                        results[label, shape, n, name] = None
                        continue
                    if name == "site" and not results[label, shape, n, "leaderboard"]:
                        results[label, shape, n, name] = NOT_RUN  # no leaderboard to read
                        print(f"  {label:5s} {shape:4s} {n:>7,} {name:11s} not run (no leaderboard)")
                        continue
                    if name == "report":  # as `run` leaves the folder: its leaderboard, by this code
                        timed(command_line("leaderboard", folder, twin, folder), code, out, args.timeout)
                    got = timed(command_line(name, folder, twin, out), code, out, args.timeout)
                    results[label, shape, n, name] = got
                    cell = f"{got[0]:.2f} s {got[1]:.0f} MB" if got else f">{args.timeout:.0f} s"
                    print(f"  {label:5s} {shape:4s} {n:>7,} {name:11s} {cell}", flush=True)
    return results


def table(args: argparse.Namespace, codes: dict[str, Path], results: dict[tuple, tuple | None]) -> None:
    """Per shape: one row per command and code, a column per size, then the ratios."""
    pairs = [(a, b) for a, b in ((100, 10_000), (10_000, 100_000)) if a in args.sizes and b in args.sizes]

    def cell(label: str, shape: str, n: int, name: str) -> str:
        got = results.get((label, shape, n, name))
        skipped = name == "report" and n > args.report_max
        if got == NOT_RUN:
            return "n/r"
        return f"{got[0]:7.2f} s {got[1]:5.0f} MB" if got else ("-" if skipped else f">{args.timeout:.0f} s")

    def ratio(label: str, shape: str, name: str, a: int, b: int) -> str:
        x, y = results.get((label, shape, b, name)), results.get((label, shape, a, name))
        return f"{x[0] / y[0]:.1f}x" if x and y else "-"

    for shape in args.shapes:
        print(f"\nshape {shape}: seconds and peak RSS per command")
        for n in args.sizes:
            print(f"  {_shape_line(shape, n)}")
        print(
            f"{'':17s}"
            + "".join(f"{n:>18,}" for n in args.sizes)
            + "".join(f"{f'{b}/{a}':>13s}" for a, b in pairs)
        )
        for name in COMMANDS:
            for label in codes:
                row = "".join(f"{cell(label, shape, n, name):>18s}" for n in args.sizes)
                print(
                    f"{name:11s} {label:5s}{row}"
                    + "".join(f"{ratio(label, shape, name, a, b):>13s}" for a, b in pairs)
                )


def _shape_line(shape: str, n: int) -> str:
    sizes, settings, seeds = shape_plan(shape, n)
    blocks = len(sizes) * len(settings)
    plan = f"{len(sizes)} sizes x {len(settings)} settings x {seeds} seeds"
    return f"{n:,} trials: {plan} ({blocks} compare blocks)"


def storage(args: argparse.Namespace, codes: dict[str, Path], seed_folder: Path) -> None:
    """Enqueueing N planned trials, one worker's take with N queued and a watcher's look at them,
    on SQLite and on PostgreSQL (`--postgres`); then the watcher's looks at a stored `one` study
    of N ended runs with their records (SQLite)."""
    urls = {"SQLite": None, "PostgreSQL": args.postgres}
    sizes = [m for m in args.sizes if m <= 10_000]
    print("\nstorage (no target): enqueue N planned trials; one worker's take and a progress look, N queued")
    for kind, url in urls.items():
        if kind == "PostgreSQL" and not url:
            print("  PostgreSQL: not run (--postgres URL, or SUITE_TEST_POSTGRES_URL)")
            continue
        for label, code in codes.items():
            for n in sizes:
                with tempfile.TemporaryDirectory() as tmp:
                    line = _storage_script(TAKE, code, tmp, url or f"sqlite:///{tmp}/queue.db", str(n), "20")
                enqueue, take, look = (float(x) for x in line)
                print(
                    f"  {kind:10s} {label:5s} {n:>7,} trials: enqueued in {enqueue:7.2f} s, "
                    f"a take {1000 * take:6.1f} ms, a look {1000 * look:7.1f} ms"
                )
    print("progress looks at a stored study of N ended runs (SQLite): the first, then the next")
    for label, code in codes.items():
        for n in sizes:
            db = build(args.data, seed_folder, "one", n, False) / "study.db"
            with tempfile.TemporaryDirectory() as tmp:
                line = _storage_script(PROGRESS, code, tmp, f"sqlite:///{db}", str(n))
            first, then = (float(x) for x in line)
            print(f"  {label:5s} {n:>7,} runs: {first:6.2f} s, then {then:6.2f} s")


def _storage_script(script: str, code: Path, cwd: str, *argv: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{Path(__file__).parent.parent}"}
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def quantile_orders(
    lengths: tuple[int, ...] = (1_000, 2_000, 10_000, 100_000), cells: int = 20_000_000
) -> None:
    """Seconds to order bootstrap replicates (rows of runs drawn with replacement) for their
    quartiles, by a sort of each row and by a partition at the places the quartiles read (each
    row with the same count of values, as a leaderboard's are), best of 3, interleaved; the
    quartiles both give are checked equal."""
    import numpy as np

    from suite.stats.estimates import uncertainty

    levels = [0.25, 0.5, 0.75]
    print("quartiles of bootstrap replicates, 20,000,000 values: sort vs partition (s, best of 3)")
    for length in lengths:
        rng = np.random.default_rng(length)
        runs = np.round(rng.normal(0.8, 0.02, length), 4)  # scores to 4 decimals: ties, as F1 has
        x = runs[rng.integers(0, length, (cells // length, length))]
        places = np.unique([p for q in levels for p in uncertainty._places(q, np.array(length))[1:]])
        ways = {
            "sort": lambda v: np.sort(v, axis=-1),
            "partition": lambda v, at=places: np.partition(v, at, axis=-1),
        }
        best, found = dict.fromkeys(ways, float("inf")), {}
        for _ in range(3):
            for name, way in ways.items():
                start = time.perf_counter()
                found[name] = way(x)[:, places]
                best[name] = min(best[name], time.perf_counter() - start)
        same = "" if np.array_equal(found["sort"], found["partition"]) else ", QUARTILES DIFFER"
        print(
            f"  {len(x):>6,} rows x {length:>7,} runs: sort {best['sort']:.3f}, partition "
            f"{best['partition']:.3f}, sort / partition {best['sort'] / best['partition']:.2f}{same}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000, 100_000])
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 1,000")
    parser.add_argument("--shapes", nargs="+", default=["one", "grid"], choices=["one", "grid"])
    parser.add_argument("--base", default="60caea7", help="git revision to compare with ('' for none)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per command")
    parser.add_argument("--report-max", type=int, default=10_000, help="largest study `report` runs on")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "scale-data")
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--no-storage", action="store_true")
    side.add_argument("--storage-only", action="store_true", help="the storage side alone")
    side.add_argument("--quantiles-only", action="store_true", help="the quartiles' sort vs partition alone")
    parser.add_argument("--postgres", default=os.environ.get("SUITE_TEST_POSTGRES_URL"), help="URL")
    args = parser.parse_args()
    args.sizes = [100, 1_000] if args.quick else sorted(args.sizes)
    quantile_orders()
    if args.quantiles_only:
        return
    here = Path(__file__).resolve().parent.parent
    codes = {"this": here}
    if args.base:
        base = args.data / f"base-{args.base}"
        if not base.is_dir():
            subprocess.run(
                ["git", "-C", str(here), "worktree", "add", "--detach", str(base), args.base], check=True
            )
        codes["base"] = base
    seed_folder = seed_run(args.data / "seed")
    print(f"{sys.executable}; this = {here}, base = {args.base or 'none'}; sizes {args.sizes}")
    if not args.storage_only:
        table(args, codes, measure(args, codes, seed_folder))
    if not args.no_storage:
        storage(args, codes, seed_folder)


if __name__ == "__main__":
    main()
