"""Where a study lives: run folders, storage URLs (SQLite, PostgreSQL, MySQL, journal files)
opened with heartbeats, the Optuna study itself, and atomic writes of its output files."""

from __future__ import annotations

import functools
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback

from suite.config.request import model_problem
from suite.config.request import model_slug as slug_of
from suite.config.sweep import SweepSpec
from suite.config.task import TaskSpec
from suite.errors import SuiteError
from suite.faults import FAIL_ENV, fail_storage, reach

# Heartbeats, stale-trial retry and QMC are marked experimental by Optuna; they are what a
# shared study needs, so their warnings are silenced here once.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

HEARTBEAT_ENV = "SUITE_HEARTBEAT_S"  # seconds between heartbeats; stale after 3 missed


def model_slug(model: str) -> str:
    """The folder a model's runs sit in under their task's, refused where it would not be one folder
    name (`--model ..`; the request and the task's `model` field refuse it first)."""
    if problem := model_problem(model):
        raise SuiteError(f"model {model!r}: {problem}")
    return slug_of(model)


def run_folder(out: Path, task: TaskSpec, model: str) -> Path:
    """`<out>/<task>/<model>`, refused unless it lies two folders below --out: the last guard
    against a name that would write elsewhere. Its `..` are resolved as spelled, not through
    symlinks: a task folder the user linked to another disk stays theirs to use."""
    folder = out / task.name / model_slug(model)
    if Path(os.path.abspath(folder)).parent.parent != Path(os.path.abspath(out)):
        raise SuiteError(f"task {task.name!r}, model {model!r}: run folder {folder} is not under --out {out}")
    return folder


def sqlite_url(folder: Path) -> str:
    return f"sqlite:///{Path(folder).resolve() / 'study.db'}"


def storage_of(source: str | Path) -> str:
    """A storage URL as given, or the storage behind a run folder (its study.db, else the URL
    its run.json names)."""
    text = str(source)
    if "://" in text or text.startswith("journal:"):
        return text
    folder = Path(source)
    if (folder / "study.db").is_file():
        return sqlite_url(folder)
    info = folder / "run.json"
    if info.is_file() and "***" not in (url := json.loads(info.read_text()).get("storage", "***")):
        return url
    refuse_imported(folder, "no study.db: its trials.jsonl holds every record")
    raise SuiteError(f"{folder}: no study.db here (expected a runs/<task>/<model> folder or a storage URL)")


def public_url(url: str) -> str:
    """A storage URL without its password, for records and messages."""
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def split_password(url: str) -> tuple[str, str | None]:
    """A server URL without its password, and the password (decoded; None where it has none, or
    for a SQLite or journal file): what a job may carry in files and argv, and what it may not."""
    if not url.startswith(("postgresql", "mysql")):
        return url, None
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if not parsed.password:
        return url, None
    return parsed._replace(password=None).render_as_string(hide_password=False), str(parsed.password)


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An RDB URL (sqlite, postgresql, mysql) with heartbeats, or `journal:PATH` for a journal file.
    A file in a folder of imported runs is refused before it is created (`refuse_imported`)."""
    if (local := storage_file(url)) is not None:
        refuse_imported(local.parent)
    elif Path(url).is_dir():  # `--storage runs/rte/x`: a folder is not a URL, and may be imported runs
        refuse_imported(Path(url))
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        try:
            return JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
        except OSError as err:  # a missing folder, a read-only one
            raise SuiteError(f"--storage {public_url(url)!r}: cannot open ({err.strerror or err})") from None
    if not url.startswith(("sqlite:", "postgresql", "mysql")):
        raise SuiteError(
            f"--storage {public_url(url)!r}: expected sqlite:///, postgresql://, mysql:// or journal:PATH"
        )
    heartbeat = int(os.environ.get(HEARTBEAT_ENV, "30"))
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    try:
        storage = _BeatingStorage(
            url,
            engine_kwargs=engine,
            heartbeat_interval=heartbeat,
            grace_period=3 * heartbeat,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
        )
    except Exception as err:  # SQLAlchemy raises many kinds for a bad URL or a down server
        raise SuiteError(f"--storage {public_url(url)!r}: cannot open ({str(err).splitlines()[0]})") from None
    if os.environ.get(FAIL_ENV):
        fail_storage(storage.engine, url)
    return storage


class _BeatingStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose heartbeat skips a beat the storage cannot take (a full disk, a
    lost server) instead of ending its thread with a traceback: the worker's next write meets the
    same fault and says so in one line (suite/study/pending.py), and beats that stay missing make
    the trial stale, as a dead worker's."""

    def record_heartbeat(self, trial_id: int) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            super().record_heartbeat(trial_id)
        except (optuna.exceptions.StorageInternalError, SQLAlchemyError):
            pass


def storage_file(url: str) -> Path | None:
    """The file behind a SQLite or journal URL, resolved (another spelling of its path or a query
    such as `?timeout=` names the same file); None for a database server."""
    if url.startswith("journal:"):
        return Path(url.removeprefix("journal:")).resolve()
    if url.startswith("sqlite:///"):
        from sqlalchemy.engine import make_url

        database = make_url(url).database
        return Path(database).resolve() if database and database != ":memory:" else None
    return None


def stored_study(url: str, name: str) -> optuna.Study | None:
    """The study `name` if the storage already holds it; never creates a storage file or a study."""
    if name not in held_studies(url):
        return None
    return optuna.load_study(study_name=name, storage=open_storage(url))


def held_studies(url: str) -> list[str]:
    """The names of the studies a storage holds, read without writing: Optuna's tables are
    created only under the study's lock (their creation is not safe against a concurrent one),
    so a storage without them (a missing or empty file, another run creating them right now, a
    fresh database) holds none. A study's name is stored after its storage's setup completed, so
    opening a storage that holds it writes nothing."""
    try:
        if url.startswith("journal:"):
            local = storage_file(url)
            if local is None or not local.exists() or local.stat().st_size == 0:
                return []
            return optuna.study.get_all_study_names(open_storage(url))
        if url.startswith("sqlite:///") and (local := storage_file(url)) is not None:
            return _sqlite_names(local)
        if url.startswith(("postgresql", "mysql")):
            return _server_names(url)
    except SuiteError:
        raise
    except Exception as err:  # a down server, bad credentials, an unreadable file
        raise SuiteError(f"--storage {public_url(url)!r}: cannot open ({str(err).splitlines()[0]})") from None
    return optuna.study.get_all_study_names(open_storage(url))  # an in-memory URL, or refused there


def _sqlite_names(path: Path) -> list[str]:
    import sqlite3
    from contextlib import closing
    from urllib.parse import quote

    if not path.exists() or path.stat().st_size == 0:
        return []
    for mode in ("ro", "rw"):
        try:
            with closing(sqlite3.connect(f"file:{quote(str(path))}?mode={mode}", uri=True, timeout=60)) as db:
                query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'studies'"
                if db.execute(query).fetchone() is None:
                    return []
                return [row[0] for row in db.execute("SELECT study_name FROM studies")]
        except sqlite3.OperationalError as err:
            # A hot journal (a writer killed mid-write): only a connection that may write rolls it
            # back, as Optuna's own open does next; read-only, SQLite answers "readonly database".
            if mode == "rw" or "readonly" not in str(err):
                raise
    return []  # not reached: the read-write try returns or raises


@functools.cache
def server_engine(url: str) -> Any:
    """One small connection pool per server and process: the study lock and the
    lookups of which studies a server holds (a pop takes the lock once per trial)."""
    import sqlalchemy

    return sqlalchemy.create_engine(url, pool_pre_ping=True, pool_size=1, max_overflow=2)


def _server_names(url: str) -> list[str]:
    import sqlalchemy

    engine = server_engine(url)
    if not sqlalchemy.inspect(engine).has_table("studies"):
        return []
    with engine.connect() as connection:
        return [row[0] for row in connection.execute(sqlalchemy.text("SELECT study_name FROM studies"))]


OUTPUTS = ("run.json", "trials.jsonl", "leaderboard.json")


def outputs_study(folder: Path) -> str | None:
    """The study a run folder's outputs belong to: run.json's, else the first trial record's;
    None when it has none (or none that names a study)."""
    try:
        if (folder / "run.json").is_file():
            return json.loads((folder / "run.json").read_text()).get("study")
        if (folder / "trials.jsonl").is_file():
            with (folder / "trials.jsonl").open() as lines:
                first = next(lines, "").strip()
            return json.loads(first).get("study") if first else None
    except (OSError, ValueError, AttributeError):  # not ours to judge: the outputs are left alone
        return None
    return None


NOT_TRAINABLE = (
    "not a study the suite can train: nothing to run, launch or join; leaderboard, report, site and "
    "compare read it"
)


def refuse_imported(folder: Path, why: str = NOT_TRAINABLE) -> None:
    """Refuse to train in, or join, a run folder of runs imported from elsewhere (`suite import`):
    it has no storage and no plan, only the records it was given."""
    try:
        imported = json.loads((folder / "run.json").read_text()).get("imported")
    except (OSError, ValueError, AttributeError):
        return
    if imported:
        raise SuiteError(f"{folder}: imported runs (suite import), {why}")


def check_outputs_held(folder: Path, url: str) -> None:
    """Refuse a run folder whose outputs name a study the storage does not hold (an empty or a
    replaced study.db): this study's outputs would overwrite the only copy of that one's; and a
    folder of imported runs, which nothing trains."""
    refuse_imported(folder)
    named = outputs_study(folder)
    if named is None or named in held_studies(url):
        return
    raise SuiteError(
        f"{folder}: its outputs ({', '.join(OUTPUTS)}) are of study {named!r}, which {public_url(url)} "
        "does not hold (an empty or replaced study.db?); they are left untouched: restore the storage "
        "(or give its --storage), or move the outputs away to start a new study"
    )


def open_study(
    storage: optuna.storages.BaseStorage, name: str, sweep: SweepSpec, maximize: bool
) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        storage=storage,
        study_name=name,
        direction="maximize" if maximize else "minimize",
        sampler=sweep.make_sampler(),
        pruner=sweep.make_pruner(),
        load_if_exists=True,
    )


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """Atomic write: a crash mid-write never leaves a truncated trials file."""
    write_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def write_atomic(path: Path, text: str) -> None:
    """Write a temporary file beside `path`, then rename it into place; a full disk or an
    unwritable folder is one line naming the file."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        reach("outputs_write")
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise SuiteError(
            f"{path}: cannot write ({err.strerror or err}); the trials are kept in the "
            "storage: rerun the same command after the fix to write the outputs"
        ) from None
