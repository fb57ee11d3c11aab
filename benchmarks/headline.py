"""`make run` before and after a change, in one invocation: the headline study (tasks/ner.yaml,
profile default: MiniLM-L6, 1,000 training sentences, 6 seeds x 6 epochs) as `make run` starts it:

    SUITE_DATA_DIR=../shared/data python benchmarks/headline.py [--before 80e4613] [--seeds 6] [--epochs 6]

"Before" is the code of git revision `--before` (`git archive` into a temporary folder, run with
PYTHONPATH pointing to it; default 80e4613, the code `make run` took 17 min 18 s with: every epoch
evaluated the whole dev set, workers on glibc's malloc, the embedding gradient a fresh block per
call); "after" is this working tree. Each side runs `python -m suite run tasks/ner.yaml --profile
default --workers auto` (what `make run` runs: one single-threaded worker per core), one side after
the other, each from an empty feature cache as a fresh clone would, alone on the machine.
`--seeds`/`--epochs` shrink the study for a quicker look (the default is the study itself, ~30 min).

Prints per side: the study's wall time (process start to exit), per trial the mean wall time and
its split (training, curve evaluation, final evaluation: recorded since the curve sample; "-" where
the code did not record it), the workers' peak RSS (the trial records' largest), every seed's
final entity F1, whether each trial's score, per-sentence outcomes, loss curve and token counts
are bit-identical between the sides, and the after/before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: `benchmarks` itself must be importable
from benchmarks.memory import checkout  # noqa: E402

TASK = "tasks/ner.yaml"
PARTS = ("training", "curve_evaluation", "final_evaluation")
SAME = ("score", "per_example", "loss_curve", "tokens")


def run_side(code: Path, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """`make run`'s command with `code` on PYTHONPATH and a cache of its own: wall time, records."""
    out, cache = folder / "runs", folder / "cache"
    command = [sys.executable, "-m", "suite", "run", TASK, "--profile", "default", "--workers", "auto"]
    command += ["--out", str(out), "--quiet", "--seeds", str(args.seeds)]
    command += ["--set", f"sweep.hparams.epochs={args.epochs}"] if args.epochs != 6 else []
    env = {**os.environ, "PYTHONPATH": str(code), "SUITE_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    if "SUITE_DATA_DIR" in env:  # the before side runs in its own folder: a relative path would move
        env["SUITE_DATA_DIR"] = str(Path(env["SUITE_DATA_DIR"]).resolve())
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=code, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    records = [json.loads(line) for f in out.glob("**/trials.jsonl") for line in f.open()]
    return {"wall": seconds, "records": {r["key"]: r for r in records}}


def mean_part(records: list[dict[str, Any]], part: str) -> float | None:
    if not all("time_s" in r for r in records):
        return None  # the code of then did not split a trial's time
    return statistics.mean(r["time_s"][part] for r in records)


def report(sides: dict[str, dict[str, Any]], args: argparse.Namespace, seconds: float) -> bool:
    before, after = sides["before"], sides["after"]
    keys = sorted(before["records"])
    assert keys == sorted(after["records"]), "the two sides planned different trials"
    b_records = [before["records"][k] for k in keys]
    a_records = [after["records"][k] for k in keys]
    print(
        f"\nNER default (1,000 sentences, dev 3,250, batch 16), {len(keys)} seed(s) x {args.epochs} "
        f"epoch(s), `suite run --profile default --workers auto`; before: {args.before}, after: the "
        f"working tree; {seconds / 60:.1f} min in all\n"
    )
    print(f"{'seconds':28s} {'before':>9s} {'after':>9s} {'ratio':>7s}")
    rows = [("study (process start to exit)", before["wall"], after["wall"])]
    rows.append(
        (
            "per trial (mean wall time)",
            *(statistics.mean(r["wall_time_s"] for r in rs) for rs in (b_records, a_records)),
        )
    )
    rows += [(f"  {p.replace('_', ' ')}", mean_part(b_records, p), mean_part(a_records, p)) for p in PARTS]
    rows.append(
        ("worker peak RSS, MB (max)", *(max(r["peak_rss_mb"] for r in rs) for rs in (b_records, a_records)))
    )
    for label, b, a in rows:
        ratio = f"{a / b:6.2f}x" if a is not None and b else "      -"
        b_, a_ = ("-" if v is None else f"{v:.1f}" for v in (b, a))
        print(f"{label:28s} {b_:>9s} {a_:>9s} {ratio}")
    print("\nfinal entity F1 per seed (the whole dev set, after the last epoch):")
    identical = True
    for key, b, a in zip(keys, b_records, a_records, strict=True):
        same = all(b.get(f) == a.get(f) for f in SAME)
        identical &= same
        print(
            f"  {key}: before {b['score']!r}  after {a['score']!r}  {'bit-identical' if same else 'DIFFER'}"
        )
    print(f"score, per-sentence outcomes, loss curve, tokens: {'identical' if identical else 'DIFFER'}")
    return identical


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="80e4613", help="the git revision measured as 'before'")
    parser.add_argument("--seeds", type=int, default=6, help="seeds (trials); make run: 6")
    parser.add_argument("--epochs", type=int, default=6, help="epochs per trial; make run: 6")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="suite-headline-") as tmp:
        folder = Path(tmp)
        code = {"before": checkout(args.before, folder), "after": ROOT}
        start = time.perf_counter()
        sides = {}
        for name in ("before", "after"):
            sides[name] = run_side(code[name], folder / name, args)
            print(f"{name}: {sides[name]['wall']:.0f} s", flush=True)
        if not report(sides, args, time.perf_counter() - start):
            raise SystemExit("the scores differ: a speed-up must not change any number")


if __name__ == "__main__":
    main()
