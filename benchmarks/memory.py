"""Memory per process of `suite run --workers N`, before and after a change, in one invocation:

    SUITE_DATA_DIR=../shared/data python benchmarks/memory.py [--before 4d0a513] [--epochs 1] [--trials 20]

"Before" is the code of git revision `--before` (`git archive` into a temporary folder, run with
PYTHONPATH pointing to it); "after" is this working tree. Both run here, one after the other, on
the same tokenised features (a private feature cache, filled by `suite plan` before either runs).

1. The NER default (tasks/ner.yaml, profile default: MiniLM-L6, 1,000 training sentences, dev
   3,250 sentences: the curve sample each epoch, the whole set after the last, batch 16),
   `--seeds 4` trials on `--workers 2 --threads 1` (what `--workers auto` picks on 2 cores), with
   `--epochs` epochs per trial instead of 6 (`--epochs 6` is the default itself: ~10-13 min per trial per
   single-threaded worker on the 2-core machine, ~25 min per side). Per side: the `run` process's
   peak RSS while its workers train (sampled from /proc every 0.2 s) and over its whole life, the
   planning process's peak (a child that exited before the workers started, or, since the first
   worker plans, that worker), each worker's peak RSS (its trial records' `peak_rss_mb`, the
   process's peak so far), s/trial and worker CPU s/trial, and the dev scores (identical, or the
   benchmark says so); then the after/before ratios.
2. Flatness: one single-threaded worker over `--trials` trials of the NER smoke sizes (100
   sentences, 300 dev) at `--flat-epochs` epochs: each trial record's `peak_rss_mb`, first vs
   last, before and after.
3. `--stages`: a worker's RSS (anonymous and file-backed) and glibc heap at stage boundaries
   (imports, setup, each trial, after each trial), before and after, for the breakdown in
   benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TASK = "tasks/ner.yaml"
MB = 1024


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of a live process, in KiB ({} once it has ended)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    keys = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
    return {k: int(fields[k].split()[0]) for k in keys if k in fields}


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def role(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    if b"worker" in words:
        return "worker"
    if b"suite.study.offload" in words:
        return "planner"
    return "other"


class Sampler(threading.Thread):
    """Every 0.2 s: the root process and its children (workers, the planning one): each one's
    largest RSS seen, its last VmHWM and CPU seconds; the root's largest RSS while a worker runs."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.stop = root, threading.Event()
        self.procs: dict[int, dict[str, Any]] = {}
        self.waiting_rss = 0  # KiB

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            time.sleep(0.2)

    def sample(self) -> None:
        pids = [self.root, *children(self.root)]
        for pid in pids:
            status = proc_status(pid)
            if not status:
                continue
            seen = self.procs.setdefault(pid, {"role": "run" if pid == self.root else role(pid), "rss": 0})
            seen["rss"] = max(seen["rss"], status.get("VmRSS", 0))
            seen["anon"] = max(seen.get("anon", 0), status.get("RssAnon", 0))
            seen["hwm"] = status.get("VmHWM", 0)
            seen["cpu"] = cpu_seconds(pid) or seen.get("cpu", 0.0)
        status = proc_status(self.root)
        if status and any(self.procs.get(p, {}).get("role") == "worker" for p in pids[1:]):
            self.waiting_rss = max(self.waiting_rss, status.get("VmRSS", 0))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [p for p in self.procs.values() if p["role"] == kind]


def side_env(code: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(code), "SUITE_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}


def run_suite(code: Path, cache: Path, out: Path, args: list[str]) -> tuple[Sampler, list[dict], float]:
    """`python -m suite run` with `code` on PYTHONPATH, sampled; its trial records and wall time."""
    command = [sys.executable, "-m", "suite", "run", TASK, "--out", str(out), "--quiet", *args]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=side_env(code, cache), cwd=code, stdout=subprocess.DEVNULL)
    sampler = Sampler(process.pid)
    sampler.start()
    code_ = process.wait()
    seconds = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    if code_ != 0:
        raise SystemExit(f"{' '.join(command)}: exit code {code_} (PYTHONPATH={code})")
    records = [json.loads(line) for f in out.glob("**/trials.jsonl") for line in f.open()]
    return sampler, sorted(records, key=lambda r: r["trial_number"]), seconds


def default_study(code: Path, cache: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Section 1 for one side."""
    options = ["--profile", "default", "--workers", "2", "--threads", "1", "--seeds", str(args.seeds)]
    options += ["--set", f"sweep.hparams.epochs={args.epochs}"]
    sampler, records, seconds = run_suite(code, cache, out, options)
    workers = sampler.of("worker") + sampler.of("planner")  # the planner may be the first worker
    by_worker: dict[str, list[float]] = {}
    for r in records:
        by_worker.setdefault(r["worker"], []).append(r["peak_rss_mb"])
    run = sampler.of("run")[0]
    return {
        "waiting": sampler.waiting_rss / MB,
        "run_life": run["hwm"] / MB,
        "planner": max((p["hwm"] for p in sampler.of("planner")), default=0) / MB,
        "worker_records": [max(v) for v in by_worker.values()],
        "worker_sampled": [p["hwm"] / MB for p in workers],
        "worker_anon": [p["anon"] / MB for p in workers],
        "s_per_trial": statistics.mean(r["wall_time_s"] for r in records),
        "cpu_per_trial": sum(p["cpu"] for p in workers) / len(records),
        "wall": seconds,
        "scores": {r["key"]: r["score"] for r in records},
    }


def flat_study(code: Path, cache: Path, out: Path, args: argparse.Namespace) -> list[float]:
    """Section 2 for one side: each trial record's `peak_rss_mb` in the order the trials ran (the
    queue hands them out in no fixed order of their numbers). Before: the process's peak so far;
    after: the trial's own peak (the worker restarts the count as each trial starts)."""
    options = ["--profile", "smoke", "--workers", "1", "--threads", "1", "--seeds", str(args.trials)]
    options += ["--set", f"sweep.hparams.epochs={args.flat_epochs}"]
    _, records, _ = run_suite(code, cache, out, options)
    with closing(sqlite3.connect(next(out.glob("**/study.db")))) as db:
        ended = dict(db.execute("SELECT number, datetime_complete FROM trials"))
    return [r["peak_rss_mb"] for r in sorted(records, key=lambda r: ended[r["trial_number"]])]


STAGES = r"""
import ctypes, gc, json, sys, time
from pathlib import Path

libc = ctypes.CDLL("libc.so.6")


class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


libc.mallinfo2.restype = Info
rows = []


def mark(stage):
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    kib = {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}
    heap = libc.mallinfo2()
    rows.append({"stage": stage, **kib, "heap_used": heap.uordblks >> 10, "heap_free": heap.fordblks >> 10,
                 "mapped": heap.hblkhd >> 10})


mark("start")
import torch, lightning, transformers  # noqa: E401
mark("import torch, transformers, lightning")
from suite.study.worker import run_worker  # noqa: F401 - what `suite worker` imports before its setup
from suite.study import work  # noqa: F401
mark("import suite (worker)")
from suite.config.request import Request
from suite.study.plan import plan_trials
from suite.study.setup import setup_study
from suite.training.trial import run_trial
import contextlib
try:  # after: what suite.study.work.work does around its trials
    from suite.study.memory import release, trimming
except ImportError:  # before: nothing
    release, trimming = (lambda: None), contextlib.nullcontext

epochs, trials = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
request = Request(task="tasks/ner.yaml", workers="1", threads=1, quiet=True,
                  sets=(f"sweep.hparams.epochs={epochs}",), out=Path(sys.argv[3]))
s = setup_study(request)
mark("setup: data, tokeniser, model, pre-flight")
release()
mark("worker loop starts")
with trimming():
    for i, plan in enumerate(plan_trials(s.prepared.spec, s.sweep)[:trials]):
        start = time.perf_counter()
        record = run_trial(s.prepared, s.model, plan)
        mark(f"trial {i + 1} ends ({time.perf_counter() - start:.0f} s, F1 {record['score']:.4f})")
        del record
        release()
        mark(f"after trial {i + 1}")
print(json.dumps(rows))
"""


def stages(code: Path, cache: Path, out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    command = [sys.executable, "-c", STAGES, str(args.epochs), "2", str(out)]
    done = subprocess.run(command, env=side_env(code, cache), cwd=code, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"stages (PYTHONPATH={code}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def checkout(revision: str, folder: Path) -> Path:
    """The files of `revision`, without touching the repository's worktrees or index."""
    path = folder / f"before-{revision}"
    path.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(path)], input=archive.stdout, check=True)
    return path


def warm_cache(code: Path, cache: Path) -> None:
    """Both sides read the same tokenised features: `suite plan` writes them before either runs."""
    for profile in ("default", "smoke"):
        command = [sys.executable, "-m", "suite", "plan", TASK, "--profile", profile, "--threads", "1"]
        subprocess.run(command, env=side_env(code, cache), cwd=code, check=True, capture_output=True)


def ratio(after: float, before: float) -> str:
    return f"{after / before:.2f}x" if before else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="4d0a513", help="the git revision measured as 'before'")
    parser.add_argument(
        "--epochs", type=int, default=1, help="epochs per trial on the NER default (6: as is)"
    )
    parser.add_argument("--seeds", type=int, default=4, help="trials on the NER default (2 workers)")
    parser.add_argument("--trials", type=int, default=20, help="trials of the flatness check")
    parser.add_argument("--flat-epochs", type=int, default=1, help="epochs per flatness trial")
    parser.add_argument("--skip", choices=["default", "flat"], action="append", default=[])
    parser.add_argument("--stages", action="store_true", help="also the per-stage breakdown of a worker")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit("reads /proc: Linux only")

    with tempfile.TemporaryDirectory(prefix="suite-memory-") as tmp:
        folder = Path(tmp)
        sides = {"before": checkout(args.before, folder), "after": ROOT}
        cache = folder / "cache"
        start = time.perf_counter()
        warm_cache(ROOT, cache)
        results: dict[str, dict[str, Any]] = {name: {} for name in sides}
        for name, code in sides.items():
            if "default" not in args.skip:
                results[name]["default"] = default_study(code, cache, folder / name / "default", args)
            if "flat" not in args.skip:
                results[name]["flat"] = flat_study(code, cache, folder / name / "flat", args)
            if args.stages:
                results[name]["stages"] = stages(code, cache, folder / name / "stages", args)
        report(results, args, time.perf_counter() - start)


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace, seconds: float) -> None:
    before, after = results["before"], results["after"]
    print(f"before: {args.before}; after: the working tree; {seconds / 60:.0f} min in all\n")
    if "default" in after:
        b, a = before["default"], after["default"]
        print(
            f"NER default (1,000 sentences, dev 3,250, batch 16), {args.epochs} epoch(s) per trial, "
            f"{args.seeds} trials, --workers 2 --threads 1; peaks are RSS (VmHWM, ru_maxrss)"
        )
        print(f"{'':36s} {'before':>9s} {'after':>9s} {'ratio':>7s}")
        rows = [
            ("run process while waiting, MB", b["waiting"], a["waiting"]),
            ("run process, whole life, MB", b["run_life"], a["run_life"]),
            ("  planning process, MB", b["planner"], a["planner"]),
            ("worker peak (records, max), MB", max(b["worker_records"]), max(a["worker_records"])),
            ("worker peak (sampled, max), MB", max(b["worker_sampled"]), max(a["worker_sampled"])),
            ("  of it anonymous (sampled), MB", max(b["worker_anon"]), max(a["worker_anon"])),
            ("s/trial", b["s_per_trial"], a["s_per_trial"]),
            ("planner+worker CPU s/trial", b["cpu_per_trial"], a["cpu_per_trial"]),
            ("run wall s", b["wall"], a["wall"]),
        ]
        for label, x, y in rows:
            print(f"{label:36s} {x:9.1f} {y:9.1f} {ratio(y, x):>7s}")
        per = (
            ", ".join(f"{x:.0f}" for x in b["worker_records"]),
            ", ".join(f"{x:.0f}" for x in a["worker_records"]),
        )
        print(f"worker peaks (records): before {per[0]}; after {per[1]}")
        same = b["scores"] == a["scores"]
        print(f"dev scores: {'identical' if same else 'DIFFER'} ({len(a['scores'])} trials)\n")
        if not same:
            for key in sorted(set(b["scores"]) | set(a["scores"])):
                print(f"  {key}: before {b['scores'].get(key)} after {a['scores'].get(key)}")
    if "flat" in after:
        print(
            f"flatness: one worker x 1 thread, NER smoke sizes, {args.flat_epochs} epoch(s), "
            f"{args.trials} trials"
        )
        print("  trial records' peak_rss_mb in the order the trials ran (before: the process's peak so far;")
        print("  after: the trial's own peak); the largest of the later half over the largest of the first")
        for name, peaks in (("before", before["flat"]), ("after", after["flat"])):
            half = len(peaks) // 2
            print(
                f"  {name:6s} first {peaks[0]:.0f}, last {peaks[-1]:.0f} ({peaks[-1] / peaks[0] - 1:+.1%}); "
                f"max of the last {len(peaks) - half} / of the first {half}: "
                f"{max(peaks[half:]) / max(peaks[:half]) - 1:+.1%}"
            )
            print(f"         {' '.join(f'{x:.0f}' for x in peaks)}")
        print()
    if "stages" in after:
        print(
            f"a worker's stages ({args.epochs} epoch(s) per trial), MB: RSS (anon + file) | "
            "glibc heap in use / free, mapped"
        )
        for name in ("before", "after"):
            print(f"  {name}")
            for row in results[name]["stages"]:
                print(
                    f"    {row['stage']:44s} {row['VmRSS'] / MB:6.0f} ({row['RssAnon'] / MB:5.0f} + "
                    f"{row['RssFile'] / MB:4.0f}) peak {row['VmHWM'] / MB:6.0f} | "
                    f"{row['heap_used'] / MB:5.0f} / {row['heap_free'] / MB:5.0f}, {row['mapped'] / MB:4.0f}"
                )


if __name__ == "__main__":
    main()
