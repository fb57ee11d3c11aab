"""One hyperparameter sweep run four ways in one invocation, with the figures that decide what a
robustness study costs:

    SUITE_DATA_DIR=../shared/data python benchmarks/sweep.py [--quick] [--workers-check] [--device cuda]

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
and last evaluation to record written), peak RSS and its growth over the trials, the dev scores
(a speed-up must not move them), and the speed ratios a/b, a/c, a/d. `--workers-check` adds the
suite with 2 worker processes x 1 thread; `--replicas` adds benchmarks/replicas.py. Every way
runs on `--device` (default: where the suite's trials run, so a GPU host benchmarks its GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
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
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    total = time.perf_counter() - start
    records = [json.loads(line) for line in next(out.glob("*/*/trials.jsonl")).read_text().splitlines()]
    trials = [
        {
            "lr": r["hparams"]["lr"],
            "batch_size": r["hparams"]["batch_size"],
            "seconds": r["wall_time_s"],
            "to_first_step": r["overhead_s"]["to_first_step"],
            "after_training": r["overhead_s"]["after_training"],
            "scores": [e["accuracy"] for e in r["epochs"]],
            "train_real": r["tokens"]["real"],
            "train_padded": r["tokens"]["padded"],
            "peak_rss_mb": r["peak_rss_mb"],
        }
        for r in records
    ]
    return {"trials": trials, "total_s": total}


def baseline_way(args: argparse.Namespace, folder: Path, way: str) -> dict[str, Any]:
    out = folder / f"{way}.json"
    command = [sys.executable, "-m", "benchmarks.baselines", way, "--out", str(out), "--task", args.task]
    command += ["--size", str(args.size), "--epochs", str(args.epochs), "--device", args.device]
    command += ["--lr", *map(str, args.lr), "--batch-size", *map(str, args.batch_size)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    total = time.perf_counter() - start
    return {**json.loads(out.read_text()), "total_s": total}


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
        f"\n{'way':38s} {'s/trial':>8s} {'real tok':>9s} {'padding':>8s} {'GFLOP/s':>8s} {'of peak':>8s}"
        f" {'to 1st step':>11s} {'after':>6s} {'RSS MB':>7s} {'growth':>7s}"
    )
    for name, result in results.items():
        trials = result["trials"]
        later = trials[1:] or trials  # overhead after the first trial (which also warms caches)
        per_trial = result["total_s"] / len(trials)
        real = np.mean([t["train_real"] for t in trials])
        padding = np.sum([t["train_padded"] for t in trials]) / np.sum([t["train_real"] for t in trials]) - 1
        rss = [t["peak_rss_mb"] for t in trials]
        growth = rss[-1] / rss[0] - 1
        print(
            f"{name:38s} {per_trial:8.1f} {real:9.0f} {padding:8.1%} {flop / per_trial / 1e9:8.1f}"
            f" {flop / per_trial / 1e9 / peak:8.1%} {np.mean([t['to_first_step'] for t in later]):11.2f}"
            f" {np.mean([t['after_training'] for t in later]):6.2f} {rss[-1]:7.0f} {growth:7.1%}"
        )
    print("\ndev accuracy after the last epoch, per (lr, batch) trial:")
    for name, result in results.items():
        scores = {(t["lr"], t["batch_size"]): t["scores"][-1] for t in result["trials"]}
        text = "  ".join(f"{lr:g}/{b}: {100 * s:.1f}" for (lr, b), s in sorted(scores.items()))
        print(f"  {name:38s} {text}   median {100 * np.median(list(scores.values())):.1f}")
    if "(a) suite" not in results:
        return
    suite = results["(a) suite"]["total_s"] / len(results["(a) suite"]["trials"])
    print("\nspeed-up of (a) the suite, s/trial ratio in this run:")
    for key, name in WAYS.items():
        if name in results:
            other = results[name]["total_s"] / len(results[name]["trials"])
            print(f"  a/{name[1]} ({key}): {other / suite:.2f}x")
    if "(a2) suite --workers 2" in results:
        two = results["(a2) suite --workers 2"]
        print(
            f"  1 process x 2 threads vs 2 x 1: {two['total_s'] / results['(a) suite']['total_s']:.2f}x time"
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
        if "suite" in args.ways:
            results["(a) suite"] = save(tmp, "(a) suite", suite_way(args, tmp, workers=1))
        if args.workers_check:
            results["(a2) suite --workers 2"] = save(
                tmp, "(a2) suite --workers 2", suite_way(args, tmp, workers=2)
            )
        for way in (w for w in WAYS if w in args.ways):
            results[WAYS[way]] = save(tmp, WAYS[way], baseline_way(args, tmp, way))
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
