"""Command line: `python -m suite run|plan|validate|list|...`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from suite.commands.crash import crashed
from suite.commands.preflight import preflight
from suite.config.request import Request
from suite.errors import SpecError, SuiteError, report

if TYPE_CHECKING:  # for the annotation only: each command is imported when it runs
    from suite.commands.launch import Launch

SET_HELP = (
    "override a field, the value read as YAML: task fields by path (sizes=[100], data.tag_scheme=iob2), "
    "sweep fields under sweep. (sweep.hparams.lr=1e-4); repeatable"
)


STORAGE_ENV = "SUITE_STORAGE"  # worker's and launch's storage without --storage: argv is in every `ps`
FROM_ENV = f"default: ${STORAGE_ENV}; best without its password, which ~/.pgpass or PGPASSFILE holds"


def _add_set_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", metavar="PATH=VALUE", help=SET_HELP)


def _add_run_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    _add_study_args(p)
    p.add_argument(
        "--workers",
        default="1",
        help="local worker processes sharing the storage; auto: one per GPU (see --workers-per-gpu), "
        "else the usable CPUs / the study's threads per worker (a new study: one single-threaded worker "
        "per CPU, 2 x 1 thread trains ~1.2x faster than 1 x 2 on 2 cores), never more than the trials "
        "still to run or than the memory fits (from the peak RSS its trials recorded)",
    )
    p.add_argument(
        "--workers-per-gpu",
        type=int,
        default=None,
        metavar="K",
        help="with --workers auto on GPUs: K workers share each visible device (default: as many as "
        "its free memory holds at a worker's measured peak, at most 8; a small model leaves a GPU "
        "mostly idle with one)",
    )
    _add_set_arg(p)
    _add_common_args(p)
    return p


def _add_study_args(p: argparse.ArgumentParser, storage_help: str | None = None) -> None:
    """What names a study and its plan: the options `run`, `plan` and `launch` share."""
    p.add_argument("task", help="a task name (suite list) or YAML file, e.g. ner or tasks/ner.yaml")
    p.add_argument("--model", help="alias, local folder or hub id (default: the task's model)")
    p.add_argument("--sweep", help="a sweep name or YAML file (default: the task's sweep)")
    p.add_argument("--profile", default="default", help="smoke | default | full (from the YAML)")
    p.add_argument("--out", default="runs", help="runs folder (default: runs)")
    p.add_argument(
        "--size",
        action="append",
        help="small-data size(s) instead of the task's: N examples, K/class (K per class) or full",
    )
    p.add_argument("--eval-split", choices=["validation", "test"], help="evaluate on this split")
    p.add_argument("--seeds", type=int, help="repeats (independent design) or N init x N order (crossed)")
    default = "Optuna storage URL (default: sqlite study.db in the run folder)"
    p.add_argument("--storage", help=storage_help or default)
    p.add_argument("--study", help="study name (default: task|model|sweep|profile)")


def _add_launch_args(p: argparse.ArgumentParser) -> None:
    _add_study_args(p, f"the workers' database URL ({FROM_ENV})")
    _add_set_arg(p)
    _add_common_args(p, threads=False)
    p.add_argument("--executor", choices=["slurm", "local"], default="slurm", help="where the workers run")
    p.add_argument("--workers", type=int, required=True, help="worker jobs (a Slurm job array)")
    p.add_argument(
        "--cpus-per-worker",
        type=int,
        help="CPUs (Slurm cpus-per-task) and torch threads of each worker (default: 1 on Slurm, "
        "the usable CPUs / workers locally)",
    )
    p.add_argument("--gpus-per-worker", type=int, default=0, help="GPUs of each worker (default 0: CPU)")
    p.add_argument("--slurm-partition", help="the partition to queue the jobs in")
    p.add_argument(
        "--slurm-time", help="each job's time limit: minutes, H:MM:SS or D-HH:MM:SS (default 4:00:00)"
    )
    p.add_argument("--slurm-mem", help="memory of each job, e.g. 16G")
    p.add_argument("--slurm-parallelism", type=int, help="at most this many jobs at once (default: all)")
    p.add_argument(
        "--slurm-option",
        action="append",
        metavar="KEY=VALUE",
        help="another sbatch option, e.g. account=myproject or qos=high; repeatable",
    )
    p.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        help="wait for the jobs, then write the outputs (default: local waits, slurm does not)",
    )


def _add_log_to_arg(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument(
        "--log-to",
        action="append",
        metavar="TRACKER",
        help="log every trial (and the study's summary) to mlflow[:URI], tensorboard[:DIR], csv[:DIR] "
        "or wandb[:PROJECT]; repeatable (default: none)",
    )
    return p


def _add_until_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--until-halfwidth",
        type=float,
        metavar="POINTS",
        help="add seeds in rounds until every entry's median 95%% interval is at most +-POINTS (x100)",
    )
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="add seeds in rounds until every recipe's difference from its reference is decided",
    )
    p.add_argument(
        "--max-runs", type=int, default=30, help="runs per entry the rounds may reach (default 30)"
    )


def _add_common_args(p: argparse.ArgumentParser, threads: bool = True) -> None:
    p.add_argument("--data-dir", help="benchmark data folder (default: $SUITE_DATA_DIR)")
    if threads:  # `launch` sets each worker's threads with --cpus-per-worker
        p.add_argument(
            "--threads",
            type=int,
            help="torch CPU threads per worker, fixed when a study is created (default: the stored "
            "study's; a new study: the CPUs this process may use, affinity and cgroup quota, / its workers)",
        )
    p.add_argument("--accelerator", help="cpu, gpu or auto (default: gpu when CUDA is present, else cpu)")
    p.add_argument("--devices", help="devices per trial: 1 (use --workers N for N GPUs)")
    p.add_argument("--strategy", help="Lightning strategy per trial: single-device only")
    p.add_argument("--precision", help="Lightning precision (default bf16-mixed on GPU, 32-true on CPU)")
    p.add_argument("--offline", action="store_true", help="never contact the Hugging Face hub")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--allow-stack-change",
        action="store_true",
        help="resume a study made with other library versions or hardware (marked mixed in every output)",
    )


def _count(flag: str, text: str) -> int:
    """A whole number of at least 0, or one line naming the flag (exit 2, before any work)."""
    value = int(text) if text.isascii() and text.strip().isdigit() else -1
    if value < 0:
        raise SpecError(f"{flag}: expected a whole number of at least 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="suite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_until_args(
        _add_log_to_arg(_add_run_args(sub.add_parser("run", help="run a task's study end to end")))
    )
    _add_run_args(sub.add_parser("plan", help="planned trials, how many the storage holds, estimated time"))
    _add_launch_args(
        sub.add_parser("launch", help="plan a study, then run its workers as Slurm (or local) jobs")
    )
    work = sub.add_parser("worker", help="join a running study and run trials until it is done")
    work.add_argument("--storage", help=f"the study's Optuna storage URL ({FROM_ENV})")
    work.add_argument("--study", required=True, help="the study name (`suite run` prints it)")
    work.add_argument(
        "--wait-for-go",
        action="store_true",
        help="import, then join only once a line 'go' comes on stdin (how `run` starts its other "
        "workers while the first one plans; the end of input ends the worker without joining)",
    )
    _add_common_args(work)
    _add_log_to_arg(work)
    export = sub.add_parser("export", help="write a storage's trials to JSONL or CSV")
    export.add_argument("run", nargs="?", default=".", help="run folder (its study.db)")
    export.add_argument("--storage", help="any Optuna storage URL instead of a run folder")
    export.add_argument("--study", help="this study (default: the run folder's own study)")
    export.add_argument("--all", action="store_true", help="every study in the storage")
    export.add_argument("-o", "--output", default="trials.jsonl", help=".jsonl or .csv")
    validate = sub.add_parser("validate", help="check task and sweep YAMLs (every profile)")
    validate.add_argument(
        "paths",
        nargs="*",
        help="YAML files, folders or names (default: ./tasks and ./sweeps, else the shipped)",
    )
    _add_set_arg(validate)
    sub.add_parser("list", help="list tasks, models and sweeps")
    board = sub.add_parser("leaderboard", help="merge run folders into one leaderboard JSON")
    board.add_argument("runs", nargs="+", help="run folders (runs/<task>/<model>)")
    board.add_argument("-o", "--output", default="leaderboard.json")
    board.add_argument(
        "--reference", help="across tasks: the model every other's probability of improvement is against"
    )
    from suite.commands.import_runs import add_parser as add_import

    add_import(sub)
    check = sub.add_parser("check-leaderboard", help="validate a leaderboard JSON against its schema")
    check.add_argument("path")
    report = sub.add_parser("report", help="execute the variance report notebook (.ipynb + .html)")
    report.add_argument("run", help="a run folder (runs/<task>/<model>)")
    report.add_argument(
        "--entry-figures",
        metavar="N",
        help="draw a figure per entry for at most N entries, past it each size's best-ranked; every "
        "entry stays in the tables (default 8; 0: every entry)",
    )
    site = sub.add_parser("site", help="a static, self-contained leaderboard page (site/index.html)")
    site.add_argument(
        "leaderboards", nargs="+", help="leaderboard JSON files or run folders (runs/<task>/<model>)"
    )
    site.add_argument("-o", "--output", default="site", help="folder for index.html (default: site)")
    comp = sub.add_parser(
        "compare",
        help="compare two studies, or the recipes of one study, per (size, setting)",
        description="Two studies (or the recipes of one) per shared (size, setting) block: sizes matched by "
        "value, settings on the hyperparameters that vary within the studies (those constant within "
        "each but different between them are what is compared); runs paired by seeds within a block.",
    )
    comp.add_argument("run_a")
    comp.add_argument(
        "run_b",
        nargs="*",
        help="omit for the recipe table of RUN_A's study; two or more: every pair, Holm-corrected",
    )
    comp.add_argument(
        "--reference",
        help="the recipe every other is tested against (default: each recipe's `reference:` in the sweep, "
        "else the first)",
    )
    comp.add_argument("--size", help="only this training size's block(s), e.g. 64 or full")
    comp.add_argument(
        "--setting",
        metavar="KEY=VALUE[,KEY=VALUE...]",
        help="only the block(s) with these hyperparameter values, e.g. lr=2e-5,batch_size=16 "
        "(numbers match by value: 2e-5 = 0.00002)",
    )
    comp.add_argument("--plot", help="also save a comparison figure (PNG) per block here (two runs)")
    comp.add_argument(
        "--all-pairs",
        action="store_true",
        help="one study's recipes: every pair per block (Multi-Bootstrap, Holm), not each vs its reference",
    )
    return parser


STUDY_COMMANDS = ("run", "plan", "launch", "worker")  # a `Request`; all but `worker` read specs


def entry() -> int:
    """`suite` and `python -m suite`: `main` in a process of its own, which a command that trains
    in it (`run --workers 1`, `worker`) may start again under jemalloc (suite/study/memory.py),
    and that ends without a teardown's collections (`skip_exit_collection`)."""
    from suite.study.memory import skip_exit_collection

    try:
        return main(restartable=True)
    finally:
        skip_exit_collection()


def main(argv: list[str] | None = None, restartable: bool = False) -> int:
    args = build_parser().parse_args(argv)
    request = None
    try:
        # Argument and spec errors first: the commands' modules import torch, transformers, optuna
        # (seconds), and a bad flag or YAML field, or an output that cannot be written, is answered
        # at once.
        preflight(args)
        request = request_of(args) if args.command in STUDY_COMMANDS else None
        if request is not None and request.log_to:  # a tracker not installed: before any training
            from suite.study.trackers import targets_of

            targets_of(request.log_to)
        if request is not None and request.task is not None:
            from suite.study.setup import read_specs

            read_specs(request)
        if request is not None:
            from suite.study.memory import allocator_setting, restart_with_allocator

            allocator_setting()  # a wrong SUITE_ALLOCATOR: one line, before anything runs
            here = args.command == "worker" or (args.command == "run" and request.workers == "1")
            if restartable and here:  # trials train in this process: under jemalloc where installed
                restart_with_allocator()
        if args.command == "run" and (args.until_halfwidth is not None or args.until_decided):
            from suite.commands.until import run_until

            return run_until(request, args.until_halfwidth, args.until_decided, args.max_runs)
        elif args.command == "run":
            from suite.commands.run import run

            return run(request)
        elif args.command == "plan":
            from suite.commands.plan import plan

            return plan(request)
        elif args.command == "launch":
            from suite.commands.launch import launch

            return launch(request, launch_of(args))
        elif args.command == "worker":
            from suite.commands.run import worker

            return worker(request, wait_for_plan=args.wait_for_go)
        elif args.command == "export":
            from suite.commands.run import export

            export(Path(args.run), args.storage, args.study, args.all, Path(args.output))
        elif args.command == "validate":
            from suite.commands.catalog import validate
            from suite.config.overrides import parse_sets

            return validate(args.paths, parse_sets(args.set))
        elif args.command == "list":
            from suite.commands.catalog import list_all

            list_all()
        elif args.command == "leaderboard":
            from suite.outputs.leaderboard import write_leaderboard

            doc = write_leaderboard([Path(r) for r in args.runs], Path(args.output), args.reference)
            print(f"{args.output}: {len(doc['entries'])} entries, schema v{doc['schema_version']}, valid")
            from suite.outputs.leaderboard import format_aggregates
            from suite.outputs.unscored import entry_lines

            for line in entry_lines(doc["entries"]):
                print(line)

            print(
                "\n".join(format_aggregates(doc.get("aggregates"))) or "one task: no aggregate across tasks"
            )
        elif args.command == "import":
            from suite.commands.import_runs import import_runs
            from suite.commands.import_runs import request_of as import_request

            return import_runs(import_request(args))
        elif args.command == "check-leaderboard":
            from suite.outputs.leaderboard import read_leaderboard

            doc = read_leaderboard(args.path)
            print(f"{args.path}: valid (schema v{doc['schema_version']}, {len(doc['entries'])} entries)")
        elif args.command == "report":
            from suite.outputs.entries import ENTRY_FIGURES
            from suite.outputs.report import make_report

            figures = (
                ENTRY_FIGURES if args.entry_figures is None else _count("--entry-figures", args.entry_figures)
            )
            notebook, page = make_report(Path(args.run), entry_figures=figures)
            print(f"wrote {notebook} and {page}")
            from suite.outputs.run_folder import partial_note

            if note := partial_note(Path(args.run)):
                print(note)
        elif args.command == "compare":
            from suite.commands.compare import compare_runs

            compare_runs(
                Path(args.run_a), [Path(r) for r in args.run_b or ()], args.size, args.setting,
                args.reference, args.all_pairs, Path(args.plot) if args.plot else None,
            )  # fmt: skip
        elif args.command == "site":
            from suite.outputs.site import write_site

            page, unscored = write_site([Path(p) for p in args.leaderboards], Path(args.output))
            print(f"wrote {page}", *unscored, sep="\n")
    except SuiteError as err:
        return report(err)
    except KeyboardInterrupt:  # `run` and `worker` say what ended before they re-raise
        return 130
    except Exception as err:  # not an input error: a bug, reported with its traceback kept
        return crashed(err, args, request)
    return 0


def request_of(args: argparse.Namespace) -> Request:
    """The typed request of `run`, `plan` or `worker`: argv stops here."""
    from suite.config.request import TRAINER_OPTIONS

    trainer = {n: getattr(args, n) for n in TRAINER_OPTIONS if getattr(args, n, None) is not None}
    return Request(
        task=getattr(args, "task", None),
        sweep=getattr(args, "sweep", None),
        profile=getattr(args, "profile", "default"),
        sets=tuple(getattr(args, "set", None) or ()),
        sizes=tuple(getattr(args, "size", None) or ()),
        seeds=getattr(args, "seeds", None),
        eval_split=getattr(args, "eval_split", None),
        model=getattr(args, "model", None),
        data_dir=Path(args.data_dir) if args.data_dir else None,
        out=Path(getattr(args, "out", "runs")),
        storage=storage_of(args),
        study=args.study,
        workers=str(getattr(args, "workers", "1")),
        workers_per_gpu=getattr(args, "workers_per_gpu", None),
        threads=getattr(args, "threads", None),
        trainer=trainer,
        offline=args.offline,
        quiet=args.quiet,
        allow_stack_change=args.allow_stack_change,
        log_to=tuple(getattr(args, "log_to", None) or ()),
        gpus_per_worker=getattr(args, "gpus_per_worker", None),
    )


def storage_of(args: argparse.Namespace) -> str | None:
    """`--storage`, else, for `worker` and `launch`, $SUITE_STORAGE (`worker` needs one)."""
    if args.storage or args.command not in ("worker", "launch"):
        return args.storage
    if url := os.environ.get(STORAGE_ENV, "").strip():
        return url
    if args.command == "worker":
        raise SpecError(f"worker: give the study's storage, --storage URL or ${STORAGE_ENV}")
    return None


def launch_of(args: argparse.Namespace) -> Launch:
    """How `launch` submits the workers (the study itself is `request_of(args)`)."""
    from suite.commands.launch import Launch

    return Launch(
        executor=args.executor,
        workers=args.workers,
        cpus_per_worker=args.cpus_per_worker,
        partition=args.slurm_partition,
        time=args.slurm_time,
        mem=args.slurm_mem,
        parallelism=args.slurm_parallelism,
        options=tuple(args.slurm_option or ()),
        wait=args.wait,
    )
