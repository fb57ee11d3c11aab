"""One hyperparameter sweep run four ways in one invocation, with the figures that decide what a
robustness study costs:

    SUITE_DATA_DIR=../shared/data python benchmarks/sweep.py [--quick] [--workers-check] [--hog] \
        [--device cuda]

(a) the suite as a user runs it (`suite run TASK --sweep ...`; random batches computed as
length-sorted pieces as the presets do, or `--suite-batches random|buckets`), (b) Hugging Face
`Trainer.hyperparameter_search` padding to 128 as run_glue does, (c) the same with dynamic
padding and length grouping, (d) a lean hand-written loop (benchmarks/baselines.py). Default
trial set: RTE, a seeded 500-example subsample, 2 epochs, dev evaluated after each epoch,
lr {2e-5, 5e-5} x batch {16, 32}; `--quick` is 128 examples, 1 epoch, lr 5e-5 (a few minutes).

Prints per way: s/trial over the whole sweep (process start to exit), real and padded training
tokens, useful GFLOP/s (6 N T_train + 2 N T_eval, N the non-embedding parameters) and their share
of the matmul peak measured in the same run on the same device (fp32 on the CPU, bf16 on a GPU:
benchmarks/device.py), per-trial overhead (trial start to first step,
and last evaluation to record written), per-sweep fixed cost (process start to the sweep's first
training step, and the last trial's end to the process's exit), peak RSS and its growth over the
trials, the dev scores (a speed-up must not move them), and the speed ratios a/b, a/c, a/d.
`--workers-check` adds the suite with 2 worker processes x 1 thread and its ratio to the lean
loop; `--hog` runs every way again beside a low-priority CPU hog (a nice-19 simulation per
thread) and prints each way's slowdown and whether the suite's ratio to the lean loop holds;
`--replicas` adds benchmarks/replicas.py. Every way runs on `--device` (default: where the
suite's trials run, so a GPU host benchmarks its GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: `benchmarks` itself must be importable
from benchmarks.device import DEVICES, accelerator, device_name, matmul_peak, resolve_device  # noqa: E402

WAYS = {
    "hf-pad128": "(b) HF hp-search, pad to 128",
    "hf-dynamic": "(c) HF, dynamic + group_by_length",
    "lean": "(d) lean hand-written loop",
}


def useful_flop(args: argparse.Namespace) -> float:
    """FLOPs a trial must do: forward+backward over real training tokens, forward over real dev
    tokens at each evaluation, through the non-embedding parameters."""
    from benchmarks.baselines import load_features
    from suite.config.task import load_task
    from suite.model.encoders import load_encoder

    _, train, dev = load_features(args.task, args.size)
    encoder = load_encoder(load_task(args.task).model)
    n = sum(p.numel() for name, p in encoder.named_parameters() if not name.startswith("embeddings."))
    real_train = sum(len(f["input_ids"]) for f in train) * args.epochs
    real_dev = sum(len(f["input_ids"]) for f in dev) * args.epochs
    return 6 * n * real_train + 2 * n * real_dev


def suite_way(args: argparse.Namespace, folder: Path, workers: int) -> dict[str, Any]:
    sweep = folder / "bench.yaml"
    sweep.write_text(
        "name: bench\n"
        f"hparams: {{epochs: {args.epochs}, warmup_ratio: 0.1, weight_decay: 0.01, bias_correction: true,"
        f" group_by_length: {str(args.suite_batches == 'buckets').lower()},"
        f" split_batches: {str(args.suite_batches == 'split').lower()}}}\n"
        "space:\n"
        f"  lr: {{type: categorical, choices: [{', '.join(f'{lr:.6e}' for lr in args.lr)}]}}\n"
        f"  batch_size: {{type: categorical, choices: {args.batch_size}}}\n"
        "sampler: {type: grid}\n"
        "seeds: {master: 0, repeats: 1, subsample_seeds: [0]}\n"
    )
    out = folder / f"runs-{workers}"
    command = [
        sys.executable,
        "-m",
        "suite",
        "run",
        args.task,
        "--sweep",
        str(sweep),
        "--size",
        str(args.size),
    ]
    command += [
        "--out",
        str(out),
        "--quiet",
        "--offline",
        "--workers",
        str(workers),
        "--threads",
        str(max(1, args.threads // workers)),  # the same cores in all: 2 workers x 1 thread on 2
        "--accelerator",
        accelerator(args.device),
    ]
    start, started_at = time.perf_counter(), time.time()
    subprocess.run(command, check=True, cwd=ROOT)
    total, exited_at = time.perf_counter() - start, time.time()
    records = [json.loads(line) for line in next(out.glob("*/*/trials.jsonl")).read_text().splitlines()]
    clock = trial_clock(next(out.glob("*/*/study.db")))
    trials = [
        {
            "lr": r["hparams"]["lr"],
            "batch_size": r["hparams"]["batch_size"],
            "seconds": r["wall_time_s"],
            "to_first_step": r["overhead_s"]["to_first_step"],
            "after_training": r["overhead_s"]["after_training"],
            "first_step_at": clock[r["trial_number"]][0] + r["overhead_s"]["to_first_step"],
            "ended_at": clock[r["trial_number"]][1],
            "scores": [e["accuracy"] for e in r["epochs"]],
            "train_real": r["tokens"]["real"],
            "train_padded": r["tokens"]["padded"],
            "peak_rss_mb": r["peak_rss_mb"],
        }
        for r in records
    ]
    return {"trials": trials, "total_s": total, **study_fixed_cost(trials, started_at, exited_at)}


def trial_clock(db: Path) -> dict[int, tuple[float, float]]:
    """Each trial's (start, end) from the study's storage, as the clock other processes read: Optuna
    stamps a trial when a worker takes it and when it is told (local time, as `time.time()`)."""
    import sqlite3
    from datetime import datetime

    with sqlite3.connect(db) as storage:
        rows = storage.execute("SELECT number, datetime_start, datetime_complete FROM trials").fetchall()
    stamp = lambda text: datetime.fromisoformat(text).timestamp()  # noqa: E731
    return {number: (stamp(start), stamp(end)) for number, start, end in rows if start and end}


def study_fixed_cost(trials: list[dict[str, Any]], started_at: float, exited_at: float) -> dict[str, float]:
    """What a way costs per sweep besides its trials: process start to the sweep's first training
    step (interpreters, imports, planning, loading) and the last trial's end to the process's exit
    (outputs, teardown, waiting workers)."""
    return {
        "to_first_step_s": min(t["first_step_at"] for t in trials) - started_at,
        "after_last_s": exited_at - max(t["ended_at"] for t in trials),
    }


def baseline_way(args: argparse.Namespace, folder: Path, way: str) -> dict[str, Any]:
    out = folder / f"{way}.json"
    command = [sys.executable, "-m", "benchmarks.baselines", way, "--out", str(out), "--task", args.task]
    command += ["--size", str(args.size), "--epochs", str(args.epochs), "--device", args.device]
    command += ["--lr", *map(str, args.lr), "--batch-size", *map(str, args.batch_size)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    start, started_at = time.perf_counter(), time.time()
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    total, exited_at = time.perf_counter() - start, time.time()
    result = json.loads(out.read_text())
    return {**result, "total_s": total, **study_fixed_cost(result["trials"], started_at, exited_at)}


def warm_features(args: argparse.Namespace) -> None:
    """The suite's feature cache filled for the subsample and the dev set, untimed: every way
    trains on those features, and whichever ran first would otherwise pay the tokenising alone."""
    load = f"from benchmarks.baselines import load_features; load_features({args.task!r}, {args.size})"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", load], check=True, cwd=ROOT, env=env)


def run_ways(args: argparse.Namespace, tmp: Path, suffix: str = "") -> dict[str, dict[str, Any]]:
    """Every asked way once, one after the other, each result saved as it ends."""
    ways: list[tuple[str, Any]] = []
    if "suite" in args.ways:
        ways.append(("(a) suite", lambda folder: suite_way(args, folder, workers=1)))
    if args.workers_check:
        ways.append(("(a2) suite --workers 2", lambda folder: suite_way(args, folder, workers=2)))
    ways += [(WAYS[w], lambda folder, w=w: baseline_way(args, folder, w)) for w in WAYS if w in args.ways]
    results = {}
    for name, way in ways:
        folder = Path(tempfile.mkdtemp(dir=tmp))
        results[name + suffix] = save(tmp, name + suffix, way(folder))
    return results


# A simulation as a statistics job on the same machine runs it: single-threaded draws and sorts.
HOG = (
    "import numpy as np\n"
    "rng = np.random.default_rng(0)\n"
    "while True:\n"
    "    np.sort(rng.standard_normal((64, 4096)), 1)\n"
)
HOGGED = " + hog"


@contextlib.contextmanager
def hogging(processes: int) -> Iterator[None]:
    """A low-priority CPU hog beside what runs inside: one single-threaded simulation per core,
    at nice 19 (what the scheduler gives it is what a shared machine takes from the sweep)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = ["nice", "-n", "19", sys.executable, "-c", HOG]
    hogs = [subprocess.Popen(command, env=env) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def save(folder: Path, name: str, result: dict[str, Any]) -> dict[str, Any]:
    (folder / f"{len(list(folder.glob('*.result.json')))}.result.json").write_text(
        json.dumps({"name": name, **result})
    )
    return result


def saved(folder: Path) -> list[tuple[str, Path]]:
    paths = sorted(folder.glob("*.result.json"), key=lambda p: int(p.name.split(".")[0]))
    return [(json.loads(p.read_text())["name"], p) for p in paths]


def report(results: dict[str, dict[str, Any]], flop: float, peak: float) -> None:
    print(
        f"\n{'':38s} {'':>8s} {'':>9s} {'':>8s} {'':>8s} {'':>8s} {'per trial':>18s} {'per sweep':>18s}\n"
        f"{'way':38s} {'s/trial':>8s} {'real tok':>9s} {'padding':>8s} {'GFLOP/s':>8s} {'of peak':>8s}"
        f" {'to 1st step':>11s} {'after':>6s} {'to 1st step':>11s} {'after':>6s}"
        f" {'RSS MB':>7s} {'growth':>7s}"
    )
    for name, result in results.items():
        trials = result["trials"]
        later = trials[1:] or trials  # overhead after the first trial (which also warms caches)
        seconds = per_trial(result)
        real = np.mean([t["train_real"] for t in trials])
        padding = np.sum([t["train_padded"] for t in trials]) / np.sum([t["train_real"] for t in trials]) - 1
        rss = [t["peak_rss_mb"] for t in trials]
        growth = rss[-1] / rss[0] - 1
        print(
            f"{name:38s} {seconds:8.1f} {real:9.0f} {padding:8.1%} {flop / seconds / 1e9:8.1f}"
            f" {flop / seconds / 1e9 / peak:8.1%} {np.mean([t['to_first_step'] for t in later]):11.2f}"
            f" {np.mean([t['after_training'] for t in later]):6.2f}"
            f" {result.get('to_first_step_s', np.nan):11.1f} {result.get('after_last_s', np.nan):6.1f}"
            f" {rss[-1]:7.0f} {growth:7.1%}"
        )
    print("\ndev accuracy after the last epoch, per (lr, batch) trial:")
    for name, result in results.items():
        scores = {(t["lr"], t["batch_size"]): t["scores"][-1] for t in result["trials"]}
        text = "  ".join(f"{lr:g}/{b}: {100 * s:.1f}" for (lr, b), s in sorted(scores.items()))
        print(f"  {name:38s} {text}   median {100 * np.median(list(scores.values())):.1f}")
    two, lean = "(a2) suite --workers 2", WAYS["lean"]  # the goal of --workers-check: >= 1.0x
    if two in results and lean in results:  # beside the hog: `report_hog`
        print(f"\n{two} against the lean loop: {per_trial(results[lean]) / per_trial(results[two]):.3f}x")
    report_hog(results)
    if "(a) suite" not in results:
        return
    suite = per_trial(results["(a) suite"])
    print("\nspeed-up of (a) the suite, s/trial ratio in this run:")
    for key, name in WAYS.items():
        if name in results:
            other = per_trial(results[name])
            print(f"  a/{name[1]} ({key}): {other / suite:.2f}x")
    if "(a2) suite --workers 2" in results:
        two = results["(a2) suite --workers 2"]
        print(
            f"  1 process x 2 threads vs 2 x 1: {two['total_s'] / results['(a) suite']['total_s']:.2f}x time"
        )


def per_trial(result: dict[str, Any]) -> float:
    """Seconds per trial over the whole sweep, process start to exit."""
    return result["total_s"] / len(result["trials"])


def report_hog(results: dict[str, dict[str, Any]]) -> None:
    """Each way's slowdown beside the hog, and whether the suite's ratio to the lean loop holds."""
    pairs = [(name, results[name], results[name + HOGGED]) for name in results if name + HOGGED in results]
    if not pairs:
        return
    print("\nbeside a nice-19 CPU hog (one per thread), s/trial alone -> beside it:")
    for name, alone, hogged in pairs:
        slower = per_trial(hogged) / per_trial(alone)
        print(f"  {name:38s} {per_trial(alone):7.1f} -> {per_trial(hogged):7.1f}  ({slower:.2f}x the time)")
    lean = WAYS["lean"]
    for name in ("(a) suite", "(a2) suite --workers 2"):
        if all(k in results for k in (name, lean, name + HOGGED, lean + HOGGED)):
            alone = per_trial(results[lean]) / per_trial(results[name])
            hogged = per_trial(results[lean + HOGGED]) / per_trial(results[name + HOGGED])
            print(
                f"  {name} against the lean loop: {alone:.3f}x alone, {hogged:.3f}x beside the hog"
                f" ({hogged / alone:.2f} of it; the goal: within 10%)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="tasks/rte.yaml")
    parser.add_argument("--size", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, nargs="+", default=[2e-5, 5e-5])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--quick", action="store_true", help="128 examples, 1 epoch, lr 5e-5 x batch {16, 32}"
    )
    parser.add_argument("--ways", nargs="+", default=["suite", *WAYS], choices=["suite", *WAYS])
    parser.add_argument(
        "--suite-batches",
        choices=["split", "random", "buckets"],
        default="split",
        help="the suite's batches: random, computed as length-sorted pieces (split, as the presets),"
        " random as they are, or whole-set length buckets",
    )
    parser.add_argument("--workers-check", action="store_true", help="also the suite as 2 workers x 1 thread")
    parser.add_argument(
        "--hog", action="store_true", help="every way again beside a nice-19 CPU hog (one per thread)"
    )
    parser.add_argument("--device", choices=DEVICES, default="auto", help="every way's (auto: the trials')")
    parser.add_argument("--replicas", action="store_true", help="also benchmarks/replicas.py")
    parser.add_argument(
        "--results-from", help="report the kept results of an earlier run (a raw results folder)"
    )
    args = parser.parse_args()
    if args.quick:
        args.size, args.epochs, args.lr = 128, 1, [5e-5]
    args.device = resolve_device(args.device)
    print(
        f"{' '.join(sys.argv)}\n{args.task}, {args.size} examples, {args.epochs} epochs, "
        f"grid {list(product(args.lr, args.batch_size))}, {args.threads} threads, "
        f"suite batches: {args.suite_batches}, device: {device_name(args.device)}"
    )
    peak, label = matmul_peak(args.device, args.threads)
    results: dict[str, dict[str, Any]] = {}
    if args.results_from:  # report a finished run again from its kept results
        results = {name: json.loads(path.read_text()) for name, path in saved(Path(args.results_from))}
    else:
        tmp = Path(tempfile.mkdtemp(prefix="suite-bench-"))  # kept: each way's raw results
        print(f"raw results in {tmp}")
        warm_features(args)
        results = run_ways(args, tmp)
        if args.hog:
            with hogging(args.threads):
                results |= run_ways(args, tmp, HOGGED)
    peak = max(peak, matmul_peak(args.device, args.threads)[0])
    flop = useful_flop(args)
    print(
        f"{label} {peak:.0f} GFLOP/s (best of the start and the end); useful work "
        f"{flop / 1e12:.2f} TFLOP per trial ({flop / peak / 1e9:.1f} s at peak)"
    )
    report(results, flop, peak)
    if args.replicas:
        replicas = [sys.executable, "-m", "benchmarks.replicas", "--device", args.device]
        subprocess.run(replicas, check=True, cwd=ROOT)


if __name__ == "__main__":
    main()
