"""`suite import FILE... --task TASK --model MODEL`: results trained elsewhere (a CSV or JSONL of
one row per run, Hugging Face Trainer output folders, a W&B or MLflow runs export) as a run folder
that every output command reads: leaderboard, report, site, compare, the gap to reported numbers.
Every bad row is one line naming the file, the row and the column, and nothing is written."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI builds this parser for every command: pydantic is imported when it runs
    from suite.config.runs_map import ImportRequest


def add_parser(sub: Any) -> None:
    """The `import` subcommand on the CLI's subparsers."""
    p = sub.add_parser(
        "import",
        help="results trained elsewhere (CSV, JSONL, Trainer output folders) as a run folder",
        description="Per-run results trained elsewhere, read into a run folder (trials.jsonl, run.json, "
        "leaderboard.json; no study.db) that leaderboard, report, site and compare read (docs/runs.md).",
    )
    p.add_argument(
        "files", nargs="+", help="CSV/TSV or JSONL files of one row per run, or Trainer output folders"
    )
    p.add_argument("--task", required=True, help="the task the runs fine-tuned (a name or YAML file)")
    p.add_argument(
        "--model", required=True, help="the checkpoint the runs started from, e.g. bert-base-uncased"
    )
    p.add_argument("--out", default="runs", help="runs folder (default: runs); writes OUT/<task>/<model>")
    p.add_argument("--map", help="a YAML of which column is what (docs/runs.md); else the flags below")
    for role, what in (
        ("score", "the main metric's final dev score"),
        ("seed", "one seed: init = order = seed; the size's one subsample draw (0 at full)"),
        ("size", "training examples, full or K/class"),
        ("outcome", "succeeded, failed, errored or pruned"),
        ("error", "an error message or a tracker's run state (other than finished: errored)"),
        ("attempt", "the attempt of a retried run"),
    ):
        p.add_argument(f"--{role}", metavar="COLUMN", help=f"the column of {what}")
    p.add_argument(
        "--hparam", action="append", metavar="NAME=COLUMN", help="a hyperparameter's column; repeatable"
    )
    p.add_argument(
        "--fixed", action="append", metavar="NAME=VALUE", help="a size or hyperparameter no column holds"
    )
    p.add_argument(
        "--folder-pattern",
        help="Trainer folders: placeholders in each folder's name, e.g. 'lr{lr}-seed{seed}'",
    )
    p.add_argument("--scale", type=float, default=1.0, help="divide scores by this: 100 for scores on 0-100")
    p.add_argument("--baseline", type=float, help="the failure rule's baseline on the runs' evaluation set "
                   "(default: computed from the task's data where it is reachable)")  # fmt: skip
    p.add_argument("--head", help="the classifier head the runs trained: auto (default), pooler, cls")
    p.add_argument("--max-length", type=int, help="the runs' maximum sequence length (default: not stated)")
    p.add_argument(
        "--eval-split", choices=["validation", "test"], default="validation", help="the split scored"
    )
    p.add_argument("--data-dir", help="benchmark data folder, for the baseline (default: $SUITE_DATA_DIR)")


def request_of(args: argparse.Namespace) -> ImportRequest:
    """The typed request of `suite import`: argv stops here."""
    from suite.config import runs_map
    from suite.config.runs_map import ImportRequest, map_from_flags, read_map

    roles = {k: getattr(args, k) for k in ("score", "seed", "size", "outcome", "error", "attempt")}
    roles["folder_pattern"] = args.folder_pattern
    flags = map_from_flags(roles, args.hparam or [], args.fixed or [])
    if args.map and flags is not None:
        from suite.errors import SpecError

        raise SpecError("--map: give the columns in the YAML or by flags, not both")
    return ImportRequest(
        files=tuple(Path(f) for f in args.files),
        task=args.task,
        model=args.model,
        out=Path(args.out),
        mapping=read_map(Path(args.map)) if args.map else flags,
        scale=args.scale,
        baseline=args.baseline,
        head=args.head,
        max_length=args.max_length,
        eval_split=args.eval_split,
        data_dir=Path(args.data_dir) if args.data_dir else None,
        max_bytes=runs_map.MAX_FILE_BYTES,
    )


def import_runs(request: ImportRequest) -> int:
    """Read every file, check every row, then write the run folder; prints what it added and the
    summary table. A bad row refuses the whole import before anything is written."""
    from suite.outputs.imported_folder import imported_summary, write_imported
    from suite.study.import_columns import columns_of
    from suite.study.import_files import read_input
    from suite.study.import_rows import records_of
    from suite.study.imported import evaluation, merged, run_info, study_folder_check
    from suite.study.storage import run_folder

    ev = evaluation(request)
    folder = run_folder(request.out, ev.task, request.model)
    previous, stored = study_folder_check(folder, ev.fingerprint)
    pattern = request.mapping.folder_pattern if request.mapping is not None else None
    batches = []
    for path in request.files:
        table = read_input(path, request.max_bytes, pattern)
        columns = columns_of(table, request.mapping, ev.rule)
        batches.append((table, columns, records_of(table, columns, ev.rule)))
    records, added = merged(stored, batches)
    tables = [table for table, _, _ in batches]
    info = run_info(previous, ev, tables, added)
    rows = sum(len(t.rows) for t in tables)
    if previous and info["imported"] == previous.get("imported"):  # every row, and file, seen before
        print(f"{folder}: nothing new in {rows} rows ({len(records)} runs in the study); nothing written")
        return 0
    write_imported(folder, info, records)
    baseline = ev.rule.baseline if ev.rule.baseline is not None else "unknown"
    print(
        f"{folder}: {sum(added)} new runs of {rows} rows read ({len(records)} in the study; "
        f"baseline: {baseline}, from {ev.baseline_from})"
    )
    unknown = ev.baseline_from if ev.rule.baseline is None and ev.rule.failure != "threshold" else None
    print(imported_summary(ev.task, folder, records, unknown))
    return 0
