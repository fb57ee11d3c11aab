"""What `suite import` costs at 100,000 rows, against plain reading of the same file in the same run:

    python -m benchmarks.import_scale [--rows 100000] [--repeats 1]

Writes a CSV of one row per run (RTE; 4 sizes x 5 learning rates x 5 batch sizes x N/100 seeds, a
score per run) and the same rows as JSON lines, then times in fresh interpreters, one after another:
- `suite import` of each file, the import alone: every row read, checked, keyed and judged, the
  study's identity, trials.jsonl and run.json written. The leaderboard it then writes is left out
  (its statistics over 100,000 runs are `python -m benchmarks.scale`'s figures);
- the baseline: the same file read by the standard library (`csv.DictReader` with each cell made a
  number, or `json.loads` per line), the least any reader does.
Printed per file: wall seconds and peak RSS (ru_maxrss) of each, and import / baseline. The target:
100,000 rows in at most 30 s and 1 GB. The baseline of RTE is given (`--baseline`), so the task's
data is not read.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEAK = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
IMPORT = """
import sys
from unittest import mock
import suite.outputs.leaderboard as board
from suite.commands.cli import main
with mock.patch.object(board, "write_leaderboard", lambda *a, **k: None):  # the import alone
    code = main(["import", sys.argv[1], "--task", "rte", "--model", "bert-base-uncased",
                 "--baseline", "0.527", "--out", sys.argv[2]])
assert code == 0, code
"""
PLAIN = """
import csv, json, sys
path = sys.argv[1]
with open(path, newline="") as f:
    if path.endswith(".csv"):
        number = lambda v: v if v == "full" else float(v)
        rows = [{k: number(v) for k, v in r.items()} for r in csv.DictReader(f)]
    else:
        rows = [json.loads(line) for line in f if line.strip()]
assert rows
"""


def write_inputs(folder: Path, rows: int) -> tuple[Path, Path]:
    """The CSV and the JSON lines of `rows` runs (distinct keys), scores drawn from a fixed seed."""
    rng = random.Random(0)
    sizes, lrs, batches = (64, 500, 1000, "full"), (1e-5, 2e-5, 3e-5, 5e-5, 1e-4), (8, 16, 32, 64, 128)
    seeds = max(1, rows // (len(sizes) * len(lrs) * len(batches)))
    runs = [
        {
            "size": size,
            "seed": s,
            "lr": lr,
            "batch_size": b,
            "epochs": 3,
            "score": round(rng.uniform(0.45, 0.75), 4),
        }
        for size in sizes
        for lr in lrs
        for b in batches
        for s in range(seeds)
    ][:rows]
    table, lines = folder / f"runs-{rows}.csv", folder / f"runs-{rows}.jsonl"
    with table.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(runs[0]))
        writer.writeheader()
        writer.writerows(runs)
    lines.write_text("".join(json.dumps(r) + "\n" for r in runs))
    return table, lines


def timed(code: str, *args: str) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of `code` in a fresh interpreter (its own ru_maxrss)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{PEAK}", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return time.perf_counter() - start, int(done.stderr.split()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument(
        "--repeats", type=int, default=1, help="each timing this many times (the fastest kept)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for path in write_inputs(folder, args.rows):
            size = path.stat().st_size / 2**20
            plain = min((timed(PLAIN, str(path)) for _ in range(args.repeats)), key=lambda t: t[0])
            imported = min(
                (
                    timed(IMPORT, str(path), str(folder / f"out-{path.suffix[1:]}-{i}"))
                    for i in range(args.repeats)
                ),
                key=lambda t: t[0],
            )
            print(
                f"{path.suffix[1:]:5s} {args.rows:,} rows ({size:.1f} MB): suite import {imported[0]:.1f} s, "
                f"{imported[1]:.0f} MB peak; plain reading {plain[0]:.1f} s, {plain[1]:.0f} MB; "
                f"import / plain {imported[0] / plain[0]:.1f}x time"
            )


if __name__ == "__main__":
    main()
