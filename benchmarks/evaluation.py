"""What the curve sample saves and what it leaves alone, on `make run`'s NER default trials
(tasks/ner.yaml, profile default: MiniLM-L6, 1,000 training sentences, dev 3,250 sentences),
before and after in one invocation:

    SUITE_DATA_DIR=../shared/data python benchmarks/evaluation.py [--seeds 6] [--epochs 6] [--threads 1]

before: `curve_sample: full` (every epoch evaluates the whole dev set, as trials did before the
sample); after: the task's default (each epoch but the last evaluates the 500-sentence curve sample,
the last is evaluated once, on the whole set). The same planned trials (the study's first `--seeds`
seeds, `--epochs` epochs each instead of 6), the two ways alternating which runs first, each in
this process on `--threads` threads (`make run` on 2 cores runs 2 workers x 1 thread).

Prints per trial and way: wall time (and the process's CPU time: on a shared machine the fairer
measure) and its split (training, curve evaluation, final evaluation,
overhead); the final F1 of every seed, which must be bit-identical with the per-sentence outcomes,
the loss curve and the token counts; the after/before ratio; the standard error of a curve point
(F1 on 500 of the 3,250 sentences, from the final per-sentence counts) beside the whole set's; and
from the measured costs per epoch, the same trial at `--project-epochs` epochs.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: the suite of this working tree

TASK = ROOT / "tasks/ner.yaml"
SAME = ("score", "scores", "per_example", "loss_curve", "tokens", "outcome")
PARTS = ("training", "curve_evaluation", "final_evaluation")


def prepared(curve: str | None, epochs: int, seeds: int) -> tuple[Any, list[Any]]:
    """The NER default with `curve_sample` (None: the task's default), and its first trials."""
    from suite.config.request import Request
    from suite.data.paths import data_dir
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_tokenizer
    from suite.study.plan import plan_trials
    from suite.study.setup import load_specs

    sets = (f"sweep.hparams.epochs={epochs}",) + ((f"curve_sample={curve}",) if curve else ())
    _, task, _, sweep = load_specs(Request(task=str(TASK), profile="default", sets=sets, seeds=seeds))
    task_ = prepare_task(task, data_dir(None), load_tokenizer(task.model))
    plans, data = plan_trials(task, sweep)[:seeds], task_.data
    data.features("dev", data.dev_indices())  # tokenised before any trial is timed
    for plan in plans:
        data.features("train", data.train_indices(plan.size, plan.seeds.subsample))
    return task_, plans


def cpu_seconds() -> float:
    """This process's CPU time (user + system): on a shared machine, the fairer measure of work."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def entity_f1(counts: dict[str, np.ndarray], rows: np.ndarray) -> float:
    c, p, g = (counts[k][rows].sum() for k in ("correct", "predicted", "gold"))
    return 2 * c / (p + g) if p + g else 0.0


def standard_errors(per_example: dict[str, list], sample: int, draws: int = 2000) -> tuple[float, float]:
    """(SD of the F1 of a random `sample` of the sentences around the whole set's, the whole set's
    own bootstrap SE), from one run's per-sentence entity counts."""
    counts = {k: np.asarray(v) for k, v in per_example.items()}
    n = len(counts["gold"])
    rng = np.random.default_rng(0)
    sampled = [entity_f1(counts, rng.choice(n, sample, replace=False)) for _ in range(draws)]
    whole = [entity_f1(counts, rng.integers(0, n, n)) for _ in range(draws)]
    return float(np.std(sampled)), float(np.std(whole))


def project(before: list[dict], after: list[dict], epochs: int, target: int) -> tuple[float, float]:
    """Seconds per trial at `target` epochs from the measured costs: training per epoch, a whole
    dev evaluation (before) and a sample one (after), the overhead per trial."""
    mean = statistics.mean
    train = mean(r["time_s"]["training"] for r in before + after) / epochs
    whole = mean(r["time_s"]["curve_evaluation"] + r["time_s"]["final_evaluation"] for r in before) / epochs
    final = mean(r["time_s"]["final_evaluation"] for r in after)
    sample = mean(r["time_s"]["curve_evaluation"] for r in after) / (epochs - 1) if epochs > 1 else 0.0
    overhead = mean(sum(r["overhead_s"].values()) for r in before + after)
    return target * (train + whole) + overhead, target * train + (target - 1) * sample + final + overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=6, help="trials (seeds) per way; make run: 6")
    parser.add_argument("--epochs", type=int, default=6, help="epochs per trial; make run: 6")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (make run: 1 per worker)")
    parser.add_argument("--project-epochs", type=int, default=6, help="epochs of the projected trial")
    args = parser.parse_args()

    import torch

    from suite.training.trial import run_trial

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    ways = {
        "before": prepared("full", args.epochs, args.seeds),
        "after": prepared(None, args.epochs, args.seeds),
    }
    sample = ways["after"][0].spec.curve_sample
    records: dict[str, list[dict]] = {"before": [], "after": []}
    for i, plans in enumerate(zip(ways["before"][1], ways["after"][1], strict=True)):
        assert plans[0].key == plans[1].key
        order = ["before", "after"] if i % 2 == 0 else ["after", "before"]  # the machine's drift, shared
        for name in order:
            task, _ = ways[name]
            cpu = cpu_seconds()
            records[name].append(run_trial(task, task.spec.model, plans[0]))
            r = records[name][-1]
            r["cpu_s"] = cpu_seconds() - cpu
            print(
                f"  seed {i + 1} {name:6s} {r['wall_time_s']:.1f} s ({r['cpu_s']:.0f} CPU s) F1 {r['score']}",
                flush=True,
            )
    report(records, args, sample, time.perf_counter() - start)


def report(records: dict[str, list[dict]], args: argparse.Namespace, sample: int, seconds: float) -> None:
    before, after = records["before"], records["after"]
    print(
        f"\nNER default (1,000 sentences, dev 3,250, batch 16), {args.seeds} seed(s) x {args.epochs} "
        f"epoch(s), {args.threads} thread(s); before: curve on the whole dev set, after: curve_sample "
        f"{sample}; {seconds / 60:.1f} min in all\n"
    )
    print(f"{'s per trial (mean)':28s} {'before':>9s} {'after':>9s} {'ratio':>7s}")
    mean = statistics.mean
    rows = [("wall time", mean(r["wall_time_s"] for r in before), mean(r["wall_time_s"] for r in after))]
    rows += [
        (
            f"  {p.replace('_', ' ')}",
            mean(r["time_s"][p] for r in before),
            mean(r["time_s"][p] for r in after),
        )
        for p in PARTS
    ]
    overhead = [mean(sum(r["overhead_s"].values()) for r in rs) for rs in (before, after)]
    rows.append(("  overhead", *overhead))
    rows.append(("CPU time", mean(r["cpu_s"] for r in before), mean(r["cpu_s"] for r in after)))
    for label, b, a in rows:
        print(f"{label:28s} {b:9.1f} {a:9.1f} {a / b if b else float('nan'):6.2f}x")
    print("\nfinal entity F1 per seed (the whole dev set, after the last epoch):")
    identical = True
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        same = all(b[k] == a[k] for k in SAME)
        identical &= same
        curve = a["epochs"][-1]["entity_f1"]
        print(
            f"  seed {i + 1}: before {b['score']!r}  after {a['score']!r}  "
            f"{'bit-identical' if same else 'DIFFER'}  (after's last curve point, on the sample: {curve:.4f})"
        )
    print(
        f"score, scores, per-sentence outcomes, loss curve, tokens: {'identical' if identical else 'DIFFER'}"
    )
    se_sample, se_whole = standard_errors(after[0]["per_example"], sample)
    print(
        f"\nstandard error of a curve point (F1 on {sample} of 3,250 sentences, seed 1's final outcomes): "
        f"{100 * se_sample:.2f} points; the whole set's own: {100 * se_whole:.2f}"
    )
    if args.epochs > 1:
        b, a = project(before, after, args.epochs, args.project_epochs)
        print(
            f"projected to {args.project_epochs} epochs from these costs per epoch: before {b:.0f} s, "
            f"after {a:.0f} s per trial ({a / b:.2f}x)"
        )
    if not identical:
        raise SystemExit("the scores differ: the curve sample must not change any score")


if __name__ == "__main__":
    main()
