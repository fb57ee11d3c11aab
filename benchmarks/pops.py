"""How fast many workers pop planned trials from one study, and whether any trial is handed out
twice: N processes pop-and-complete M queued no-op trials the way `suite worker` pops them.

    python -m benchmarks.pops --storage postgresql://... [--workers 16] [--trials 2000] [--grpc]

`--grpc` puts Optuna's gRPC storage proxy between the workers and the database (one server
process holds the only database connection pool; workers talk to it). Prints the enqueue time,
pops per second over all workers, and the number of trials handed out more than once.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any

import optuna

POPPER = """
import sys, time
from benchmarks.pops import pop_all
popped, first, last = pop_all(sys.argv[1], sys.argv[2])
print(first, last, *popped)
"""


def connect(url: str) -> Any:
    """A storage from an RDB URL (Optuna's cached RDB storage, as workers use it, without the
    torch import of the suite's workers), or from `grpc://host:port` for the gRPC proxy."""
    if url.startswith("grpc://"):
        host, port = url.removeprefix("grpc://").split(":")
        return optuna.storages.GrpcStorageProxy(host=host, port=int(port))
    return optuna.storages.get_storage(url)


def pop_all(url: str, study_name: str) -> tuple[list[int], float, float]:
    """Pops queued trials until none is left, completing each at once (a no-op trial); returns
    the popped trial numbers and the wall-clock times of the first pop and of the end."""
    from suite.study.queue import pop_planned, queue_lock

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name=study_name, storage=connect(url))
    popped, first = [], time.time()
    while True:
        with queue_lock(study):
            trial = pop_planned(study)
        if trial is None:
            return popped, first, time.time()
        study.tell(trial, 0.0)
        popped.append(trial.number)


def plan(url: str, trials: int) -> tuple[str, float]:
    """A new study with `trials` queued trials; returns its name and the seconds enqueueing took."""
    name = f"queue-{uuid.uuid4().hex[:8]}"
    study = optuna.create_study(study_name=name, storage=connect(url))
    start = time.perf_counter()
    for i in range(trials):
        study.enqueue_trial({}, user_attrs={"key": str(i)}, skip_if_exists=False)
    return name, time.perf_counter() - start


def race(url: str, name: str, workers: int) -> tuple[list[int], float]:
    """`workers` processes pop the queue empty; returns every popped trial number and the seconds
    from the first pop of any worker to the end of the last (process start-up excluded)."""
    poppers = [
        subprocess.Popen([sys.executable, "-c", POPPER, url, name], stdout=subprocess.PIPE, text=True)
        for _ in range(workers)
    ]
    outputs = [p.communicate(timeout=1800)[0].split() for p in poppers]
    if bad := [p.returncode for p in poppers if p.returncode]:
        raise RuntimeError(f"{len(bad)} popper processes failed: {bad}")
    first, last = min(float(o[0]) for o in outputs), max(float(o[1]) for o in outputs)
    return [int(n) for o in outputs for n in o[2:]], last - first


def grpc_proxy(url: str) -> tuple[subprocess.Popen, str]:
    """Optuna's gRPC storage proxy over `url`, in its own process, on a free local port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import optuna, sys; optuna.logging.set_verbosity(40); optuna.storages.run_grpc_proxy_server("
        "optuna.storages.get_storage(sys.argv[1]), host='127.0.0.1', port=int(sys.argv[2]))"
    )
    server = subprocess.Popen([sys.executable, "-c", code, url, str(port)])
    for _ in range(600):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server, f"grpc://127.0.0.1:{port}"
        time.sleep(0.1)
    server.kill()
    raise RuntimeError("the gRPC proxy did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--storage", required=True)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--grpc", action="store_true")
    args = parser.parse_args()
    server, url = grpc_proxy(args.storage) if args.grpc else (None, args.storage)
    try:
        name, enqueue_s = plan(url, args.trials)
        popped, seconds = race(url, name, args.workers)
    finally:
        if server is not None:
            server.terminate()
    twice = sum(1 for n in Counter(popped).values() if n > 1)
    missing = args.trials - len(set(popped))
    print(
        f"{'gRPC proxy -> ' if args.grpc else ''}{args.storage.split('@')[-1]}: {args.trials} trials "
        f"enqueued in {enqueue_s:.1f} s; {args.workers} workers popped {len(popped)} in {seconds:.1f} s "
        f"= {len(popped) / seconds:.1f} pops/s; handed out twice: {twice}; missing: {missing}"
    )


if __name__ == "__main__":
    main()
