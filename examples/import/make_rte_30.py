"""Writes examples/import/rte-30.csv, the example of docs/runs.md: 30 synthetic RTE runs of
bert-base-uncased (10 seeds at each of 64, 500 and all training examples; lr 2e-5, batch 32, 3
epochs), drawn from a fixed seed so the file is the same on every machine. Not real runs: the
scores imitate RTE's (runs that collapse to the majority class score 0.527, the rest spread around
a size's typical accuracy), printed to 3 decimals as a results table would.

    python examples/import/make_rte_30.py
"""

import csv
import random
from pathlib import Path

# size -> (share of runs that learn, their mean accuracy, its spread): small sets collapse more
SIZES = {64: (0.4, 0.56, 0.02), 500: (0.7, 0.60, 0.02), "full": (0.9, 0.67, 0.02)}
MAJORITY = 146 / 277  # RTE dev: not_entailment is the majority class


def rows(seed: int = 63) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out = []
    for size, (learns, mean, sd) in SIZES.items():
        for run_seed in range(1, 11):
            accuracy = rng.gauss(mean, sd) if rng.random() < learns else MAJORITY
            correct = round(min(max(accuracy, 0.0), 1.0) * 277)  # a whole number of 277 examples
            score = f"{correct / 277:.3f}"
            setting = {"lr": "2e-5", "batch_size": 32, "epochs": 3}
            out.append({"size": size, "seed": run_seed, **setting, "score": score})
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("rte-30.csv")
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["size", "seed", "lr", "batch_size", "epochs", "score"])
        writer.writeheader()
        writer.writerows(rows())
    print(f"wrote {path}")
