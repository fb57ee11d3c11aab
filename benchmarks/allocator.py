"""Where a worker's memory goes on the NER default, and what each allocator buys, in one
invocation:

    SUITE_DATA_DIR=../shared/data python -m benchmarks.allocator [--epochs 6] [--ways default,jemalloc]

1. Imports: the resident memory each library adds, imported in a worker's order (a fresh
   interpreter; the sum is what a worker holds before it reads any data).
2. One NER-default trial (MiniLM-L6, 1,000 training sentences, dev 3,250: the curve sample each
   epoch, the whole set after the last) per way, the ways side by side as two single-threaded
   processes on the 2-core machine (what `--workers auto` runs), each inside the worker's own
   memory handling (`suite.study.memory`: a collection after setup, a trim every 10 s under glibc). Per way:
   RSS after setup, the trial's peak RSS (its record's `peak_rss_mb`), CPU seconds, minor page
   faults and the final score (the allocator decides no number: scores must be identical).
   Ways: `default` (glibc's malloc, its mmap threshold rising to 32 MiB once a large block is
   freed), `mmap-1m` (fixed at 1 MiB: each larger tensor its own mapping, given back when freed),
   `jemalloc` (preloaded with the suite's own setting, what a worker runs where it is installed)
   and `tcmalloc` (gperftools' minimal build, preloaded); Debian's libjemalloc2 and
   libtcmalloc-minimal4.
3. At the trial's third step, the live tensors (storages reachable from Python): weights, gradients
   and AdamW's moments, against the RSS then.

The figures and what was decided from them: benchmarks/RESULTS.md ("A worker's memory, piece by
piece").
"""

from __future__ import annotations

import argparse
import ctypes.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from suite.study.memory import allocator_env

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = {"SUITE_ALLOCATOR": "system"}
# way -> (glibc's fixed mmap threshold or 0, what the trial's environment adds)
WAYS: dict[str, tuple[int, Callable[[], dict[str, str]]]] = {
    "default": (0, lambda: SYSTEM),
    "mmap-1m": (1 << 20, lambda: SYSTEM),
    "jemalloc": (0, lambda: allocator_env({})),  # the suite's own setting (Debian's libjemalloc2)
    "tcmalloc": (0, lambda: {"LD_PRELOAD": ctypes.util.find_library("tcmalloc_minimal") or ""}),
}
IMPORTS = [  # what a worker imports, in its order
    "torch", "transformers", "transformers.modeling_utils", "lightning.pytorch", "optuna",
    "suite.study.work", "suite.heads.tagging", "seqeval.metrics",
]  # fmt: skip

FOOTPRINT = r"""
import importlib, json, sys
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
rows, last = [], rss()
for name in sys.argv[1:]:
    importlib.import_module(name)
    now = rss()
    rows.append((name, now - last))
    last = now
print(json.dumps({"rows": rows, "total": last}))
"""

TRIAL = r"""
import ctypes, gc, json, os, resource, sys
from pathlib import Path
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
threshold, epochs, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
if threshold:
    assert ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, threshold) == 1
import lightning as L
import torch
from benchmarks.memory import proc_status
from suite.config.request import Request
from suite.study.memory import release, reset_peak, trimming
from suite.study.plan import plan_trials
from suite.study.setup import setup_study
from suite.training.trial import run_trial

def rss_mb():
    return proc_status(os.getpid())["VmRSS"] / 1024

class LiveTensors(L.Callback):
    seen = None
    def on_train_batch_end(self, trainer, module, outputs, batch, index):
        if index != 2:
            return
        storages = {}
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        weights = sum(p.numel() * p.element_size() for p in module.parameters())
        self.seen = {"tensors_mb": sum(storages.values()) / 2**20, "weights_mb": weights / 2**20,
                     "rss_mb": rss_mb()}

torch.set_num_threads(1)
request = Request(task="tasks/ner.yaml", workers="1", threads=1, quiet=True,
                  sets=(f"sweep.hparams.epochs={epochs}",), out=out)
setup = setup_study(request)
release()
after_setup = rss_mb()
probe = LiveTensors()
reset_peak()
start = resource.getrusage(resource.RUSAGE_SELF)
with trimming():
    plan = plan_trials(setup.prepared.spec, setup.sweep)[0]
    record = run_trial(setup.prepared, setup.model, plan, callbacks=[probe])
end = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "setup_mb": after_setup, "peak_mb": record["peak_rss_mb"], "score": record["score"],
    "cpu_s": end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime,
    "minflt": end.ru_minflt - start.ru_minflt, "live": probe.seen, "outcome": record["outcome"],
}))
"""


def footprint() -> dict:
    command = [sys.executable, "-c", FOOTPRINT, *IMPORTS]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def start(way: str, epochs: int, out: Path) -> subprocess.Popen:
    threshold, extra = WAYS[way]
    inherited = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF")}
    env = {**inherited, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **extra()}
    return subprocess.Popen(
        [sys.executable, "-c", TRIAL, str(threshold), str(epochs), str(out / way)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def trials(ways: list[str], epochs: int, out: Path) -> dict[str, dict]:
    """One trial per way, two at a time (single-threaded each: one per core)."""
    results = {}
    for pair in range(0, len(ways), 2):
        results |= finish({way: start(way, epochs, out) for way in ways[pair : pair + 2]})
    return results


def finish(running: dict[str, subprocess.Popen]) -> dict[str, dict]:
    results = {}
    for way, process in running.items():
        stdout, stderr = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{way}: exit {process.returncode}\n{stderr[-2000:]}")
        results[way] = json.loads(stdout.strip().splitlines()[-1])
        if results[way]["outcome"] == "errored":
            raise SystemExit(f"{way}: the trial errored; its figures are not a trial's")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=6, help="per trial (the NER default's: 6)")
    parser.add_argument("--ways", default="default,jemalloc", help=f"comma-separated, of {sorted(WAYS)}")
    parser.add_argument("--out", type=Path, default=Path("/tmp/suite-allocator"))
    args = parser.parse_args()
    ways = args.ways.split(",")
    if unknown := set(ways) - set(WAYS):
        parser.error(f"--ways: unknown {sorted(unknown)}; expected some of {sorted(WAYS)}")
    if absent := [
        way for way in ways if way in ("jemalloc", "tcmalloc") and not WAYS[way][1]().get("LD_PRELOAD")
    ]:
        install = "apt-get install libjemalloc2 libtcmalloc-minimal4"
        parser.error(f"--ways: {', '.join(absent)} not installed ({install})")
    subprocess.run(  # the features tokenised once, before the ways start side by side
        [sys.executable, "-m", "suite", "plan", "tasks/ner.yaml", "--threads", "1"],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip

    imports = footprint()
    print("resident memory each import adds, in a worker's order (MB):")
    for name, mb in imports["rows"]:
        print(f"  {name:32s} {mb:7.1f}")
    print(f"  {'total (interpreter included)':32s} {imports['total']:7.1f}\n")

    results = trials(ways, args.epochs, args.out)
    print(f"one NER-default trial of {args.epochs} epoch(s) per way, side by side, 1 thread each:")
    print(f"  {'way':10s} {'setup MB':>9s} {'peak MB':>8s} {'CPU s':>7s} {'faults':>10s}  score")
    for way, r in results.items():
        figures = f"{r['setup_mb']:9.1f} {r['peak_mb']:8.1f} {r['cpu_s']:7.1f} {r['minflt']:10d}"
        print(f"  {way:10s} {figures}  {r['score']!r}")
    base = results[ways[0]]
    for way in ways[1:]:
        r = results[way]
        peak, cpu = r["peak_mb"] / base["peak_mb"], r["cpu_s"] / base["cpu_s"]
        print(f"  {way}/{ways[0]}: peak {peak:.2f}x, CPU {cpu:.2f}x")
    if len({r["score"] for r in results.values()}) > 1:
        print("  SCORES DIFFER: the allocator must decide no number")
    live = base["live"]
    if live:
        print(
            f"\nat step 3 ({ways[0]}): live tensors {live['tensors_mb']:.1f} MB "
            f"(weights {live['weights_mb']:.1f} MB, "
            f"so {live['tensors_mb'] / live['weights_mb']:.1f}x weights: gradients and AdamW's two moments), "
            f"RSS {live['rss_mb']:.1f} MB"
        )


if __name__ == "__main__":
    main()
