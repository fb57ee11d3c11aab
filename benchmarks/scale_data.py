"""Synthetic studies for benchmarks/scale.py: run folders (run.json, trials.jsonl, study.db) of N
trials whose records are a real smoke study's with fresh seeds, scores and outcomes.

Each record keeps the real record's fields and sizes: per-example outcomes on an `eval_limit`
subsample of the dev set, a loss curve and a dev curve per epoch; about 5% of the runs fail (the
trivial baseline, 1 in 5 of them diverged, with no score) and 2% of the planned trials error once
(attempt 1 errored, attempt 2 a run). Two shapes: `one` (one setting, N seeds) and `grid`
(settings x seeds x sizes). study.db is written with SQL in Optuna's own schema, copied from the
real study's storage, so that `suite export` reads it as it reads any study.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

EVAL_LIMIT = 200  # per-example outcomes: the seeded dev subsample a CPU study scores on
EPOCHS = 3
STEPS = 60  # loss curve points per run
SIZES = (32, 64, 128, 256)
LRS = (1e-5, 2e-5, 3e-5, 5e-5, 1e-4)
BATCHES = (8, 16, 32, 64)


def seed_run(root: Path) -> Path:
    """A real smoke study's run folder (trained once, ~1 minute on 2 cores): the template."""
    folder = root / "rte" / "minilm-l6"
    if not (folder / "trials.jsonl").is_file():
        command = [sys.executable, "-m", "suite", "run", "rte", "--profile", "smoke"]
        subprocess.run([*command, "--size", "32", "--seeds", "2", "--out", str(root)], check=True)
    return folder


def shape_plan(shape: str, n: int) -> tuple[list[int], list[dict[str, Any]], int]:
    """(sizes, settings, seeds per (size, setting)) with about n trials in all."""
    if shape == "one":
        return [SIZES[0]], [{"lr": 2e-5, "batch_size": 16}], n
    sizes = list(SIZES[: 2 if n <= 1000 else 4])
    settings = [{"lr": lr, "batch_size": b} for lr in LRS for b in BATCHES]
    settings = settings[: max(2, min(len(settings), n // (len(sizes) * 10)))]
    return sizes, settings, max(1, n // (len(sizes) * len(settings)))


def make_records(
    template: dict[str, Any], shape: str, n: int, shift: float, seed: int
) -> list[dict[str, Any]]:
    """Every ended trial's record (an errored attempt and its retry are two), in trial order."""
    rng = np.random.default_rng(seed)
    sizes, settings, seeds = shape_plan(shape, n)
    labels = rng.integers(0, 2, EVAL_LIMIT)
    difficulty = rng.beta(2.0, 1.2, EVAL_LIMIT)  # each dev example's chance to be right
    out: list[dict[str, Any]] = []
    for size in sizes:
        subsample = int(rng.integers(2**31))
        for k, setting in enumerate(settings):
            hparams = {**template["hparams"], **setting}
            key = f"size={size}|" + ",".join(f"{a}={hparams[a]}" for a in sorted(hparams))
            skill = shift + 0.02 * k + 0.01 * np.log2(size / 32)
            right = rng.random((seeds, EVAL_LIMIT)) < np.clip(difficulty + skill - 0.25, 0, 1)
            for s in range(seeds):
                seeds_of = {
                    "init": int(rng.integers(2**31)),
                    "order": int(rng.integers(2**31)),
                    "subsample": subsample,
                }
                base = {**template, "hparams": hparams, "size": size, "n_train": size, "seeds": seeds_of}
                base["key"] = f"{key}|init={seeds_of['init']},order={seeds_of['order']},subsample={subsample}"
                retried = rng.random() < 0.02  # errored once, then ran
                if retried:
                    out.append(_errored(base, rng))
                out.append(_run(base | {"attempt": 2 if retried else 1}, right[s], labels, rng))
    for i, r in enumerate(out):
        r["trial_number"] = i
    return out


def _run(
    base: dict[str, Any], right: np.ndarray, labels: np.ndarray, rng: np.random.Generator
) -> dict[str, Any]:
    predictions = np.where(right, labels, 1 - labels)
    accuracy = float(right.mean())
    curve = [
        float(np.clip(accuracy - 0.03 * (EPOCHS - e) + rng.normal(0, 0.01), 0, 1))
        for e in range(1, EPOCHS + 1)
    ]
    loss = np.round(0.7 * np.exp(-np.arange(STEPS) / 30) + rng.normal(0, 0.02, STEPS), 5)
    record = {
        **base,
        "outcome": "succeeded",
        "failed": False,
        "failure": None,
        "reason": None,
        "score": accuracy,
        "scores": {"accuracy": accuracy, "f1": accuracy},
        "epochs": [{"accuracy": a, "epoch": e + 1, "f1": a} for e, a in enumerate(curve)],
        "epochs_run": EPOCHS,
        "evaluated_on": {
            "epochs": {"examples": EVAL_LIMIT, "set": "whole"},
            "score": {"examples": EVAL_LIMIT, "set": "whole"},
        },
        "n_dev": EVAL_LIMIT,
        "loss_curve": loss.tolist(),
        "per_example": {
            "correct": right.astype(int).tolist(),
            "label": labels.tolist(),
            "prediction": predictions.tolist(),
        },
        "wall_time_s": float(rng.uniform(20, 30)),
    }
    if rng.random() < 0.05:  # a failed run: no better than the trivial baseline, or diverged
        diverged = rng.random() < 0.2
        record |= {"outcome": "failed", "failed": True, "failure": "diverged" if diverged else "baseline"}
        record["reason"] = "loss diverged" if diverged else "dev accuracy no better than the trivial baseline"
        if diverged:
            record |= {"score": None, "scores": {}, "last_score": curve[0], "per_example": None}
    return record


def _errored(base: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    record = {**base, "attempt": 1, "outcome": "errored", "failed": False, "failure": None}
    record |= {
        "reason": "RuntimeError: synthetic worker crash",
        "score": None,
        "scores": {},
        "per_example": None,
    }
    record |= {"epochs": [], "loss_curve": [], "wall_time_s": float(rng.uniform(1, 5))}
    return record


def write_study(seed_folder: Path, folder: Path, records: list[dict[str, Any]]) -> None:
    """run.json (the real one, with an eval_limit), trials.jsonl and study.db (Optuna's schema)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = json.loads((seed_folder / "run.json").read_text())
    info["task"] = {**info["task"], "eval_limit": EVAL_LIMIT, "sizes": sorted({r["size"] for r in records})}
    (folder / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    with (folder / "trials.jsonl").open("w") as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
    _write_storage(seed_folder / "study.db", folder / "study.db", records)


def _write_storage(template: Path, path: Path, records: list[dict[str, Any]]) -> None:
    path.unlink(missing_ok=True)
    shutil.copy(template, path)
    db = sqlite3.connect(path)
    for table in (
        "trial_user_attributes",
        "trial_system_attributes",
        "trial_values",
        "trial_params",
        "trial_intermediate_values",
        "trial_heartbeats",
        "trials",
    ):
        db.execute(f"DELETE FROM {table}")
    study_id = db.execute("SELECT study_id FROM studies").fetchone()[0]
    start = "2026-01-01 00:00:00.000000"
    trials, values, attrs = [], [], []
    for i, r in enumerate(records):
        tid = i + 1
        state = "FAIL" if r["outcome"] == "errored" else "COMPLETE"
        trials.append((tid, i, study_id, state, start, start))
        if state == "COMPLETE" and r.get("score") is not None:
            values.append((tid, 0, r["score"], "FINITE"))
        plan = {
            "key": r["key"],
            "size": r["size"],
            "hparams": r["hparams"],
            "seeds": r["seeds"],
            "setting": {},
        }
        plan |= {"attempt": r["attempt"], "record": r}
        plan |= {f"hp.{k}": v for k, v in r["hparams"].items()} | {
            f"seed.{k}": v for k, v in r["seeds"].items()
        }
        attrs.extend((tid, k, json.dumps(v)) for k, v in plan.items())
    db.executemany("INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?)", trials)
    db.executemany(
        "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?, ?, ?, ?)", values
    )
    db.executemany("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)", attrs)
    db.commit()
    db.close()


def build(root: Path, seed_folder: Path, shape: str, n: int, twin: bool = False) -> Path:
    """The run folder of a synthetic study (cached under root); `twin`: a second study of the same
    plan, 1 point better, for `compare`."""
    folder = root / f"{shape}-{n}{'-b' if twin else ''}" / "rte" / "minilm-l6"
    if (folder / "study.db").is_file():
        return folder
    template = next(
        r
        for line in (seed_folder / "trials.jsonl").read_text().splitlines()
        if (r := json.loads(line))["score"]
    )
    records = make_records(template, shape, n, shift=0.01 if twin else 0.0, seed=n + (7 if twin else 0))
    write_study(seed_folder, folder, records)
    return folder
