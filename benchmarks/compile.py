"""Does `torch.compile` pay for itself over a sweep? The same trials run eagerly and with the
encoder compiled (`dynamic=True`: dynamic padding gives every batch its own length), each way in
one process so the compiled graphs are reused across its trials, compile time included:

    SUITE_DATA_DIR=../shared/data python -m benchmarks.compile [--size 128] [--trials 3]

Prints per way the wall time of every trial (the first compiled one carries the compilation),
the sweep total, the dev scores (a speed-up must not move them) and the ratio eager/compiled.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_way(args: argparse.Namespace, compiled: bool) -> list[dict]:
    """Trials of one way, in this process."""
    import torch

    import suite.training.trial
    from suite.config.sweep import HParams
    from suite.config.task import load_task
    from suite.data.paths import data_dir
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_encoder, load_tokenizer
    from suite.training.trial import run_trial
    from suite.training.trial_plan import Seeds, TrialPlan

    torch.set_num_threads(args.threads)
    spec = load_task(args.task)
    task = prepare_task(spec, data_dir(), load_tokenizer(spec.model))

    def encoder(name: str) -> torch.nn.Module:
        model = load_encoder(name)
        if compiled:
            model.compile(dynamic=True)  # in place: parameter names (and so optimizer groups) unchanged
        return model

    suite.training.trial.load_encoder = encoder
    hparams = HParams(lr=5e-5, batch_size=16, epochs=args.epochs, group_by_length=True)
    out = []
    for i in range(args.trials):
        plan = TrialPlan(args.size, hparams, Seeds(init=i, order=i, subsample=0))
        start = time.perf_counter()
        record = run_trial(task, spec.model, plan)
        out.append({"s": time.perf_counter() - start, "score": record["score"], "outcome": record["outcome"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=str(ROOT / "tasks/rte.yaml"))
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--way", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.way:  # a child: one way, results as JSON on stdout
        print(json.dumps(run_way(args, args.way == "compiled")))
        return
    results = {}
    for way in ("eager", "compiled"):  # each in a fresh process: no shared caches or warm-up
        child = [sys.executable, "-m", "benchmarks.compile", "--way", way, *sys.argv[1:]]
        done = subprocess.run(child, cwd=ROOT, capture_output=True, text=True, check=True)
        results[way] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{args.task}, {args.size} examples, {args.epochs} epoch(s), {args.trials} trials per way")
    for way, trials in results.items():
        times = " ".join(f"{t['s']:.1f}" for t in trials)
        scores = " ".join(t["outcome"] if t["score"] is None else f"{100 * t['score']:.1f}" for t in trials)
        print(f"  {way:9s} total {sum(t['s'] for t in trials):7.1f} s  per trial [{times}]  dev [{scores}]")
    total = {way: sum(t["s"] for t in trials) for way, trials in results.items()}
    print(f"eager / compiled over the sweep: {total['eager'] / total['compiled']:.2f}x")


if __name__ == "__main__":
    main()
