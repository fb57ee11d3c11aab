"""A record kept in a side file (suite/study/pending.py) is told only to the study it proves it
belongs to: the study's random id and the trial's key. SQLite's trial ids restart at 1 in every
storage, so a study's name and a trial id match every later study of that name: such a file is
left where it is, named in one warning, and never told, raised or deleted."""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from suite.study import pending
from suite.study.pending import Keeping, StorageWriteError, keep, pending_dirs, study_uid, tell_kept
from suite.study.storage import open_storage
from suite.study.supervise import WORKER_ATTR
from suite.study.work import conclude
from tests.conftest import run_tiny

pytestmark = pytest.mark.faults

NAME = "rte|minilm-l6|seeds|smoke"
KEYS = ("size=32|seeds=0", "size=32|seeds=1")


def _study(folder: Path, name: str = NAME) -> optuna.Study:
    """A planned study of two queued trials in a SQLite file of `folder`, with its id."""
    folder.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(storage=open_storage(f"sqlite:///{folder / 'study.db'}"), study_name=name)
    for key in KEYS:
        study.enqueue_trial({}, user_attrs={"key": key, "attempt": 1, "setting": {}})
    study_uid(study)
    return study


def _record(key: str, score: float, worker: str = "elsewhere:1") -> dict[str, Any]:
    return {"key": key, "outcome": "succeeded", "score": score, "attempt": 1, "worker": worker}


def _take(study: optuna.Study, worker: str) -> optuna.Trial:
    """Trial 1 (the first queued) set running by `worker`, as a worker's pop leaves it."""
    first = study.get_trials(deepcopy=False)[0]
    assert study._storage.set_trial_state_values(first._trial_id, state=TrialState.RUNNING)
    study._storage.set_trial_system_attr(first._trial_id, WORKER_ATTR, worker)
    return optuna.Trial(study, first._trial_id)


def _legacy(place: Path, study: str, trial_id: int, record: dict[str, Any]) -> Path:
    """A kept file as the version before study ids wrote it (the reproduction's own file)."""
    place.mkdir(parents=True, exist_ok=True)
    path = place / f"{hashlib.sha1(study.encode()).hexdigest()[:12]}-{trial_id}.json"
    path.write_text(json.dumps({"study": study, "trial_id": trial_id, "baseline": 0.527, "record": record}))
    return path


def _places(study: optuna.Study) -> Keeping:
    """The places a worker of `study` (a SQLite file) keeps records in, with the study's id."""
    return Keeping(pending_dirs(str(study._storage._backend.url), None), study_uid(study))


def _told(study: optuna.Study) -> dict[str, float | None]:
    """Key -> stored score of each trial that ended with a record."""
    return {
        t.user_attrs["key"]: t.value
        for t in study.get_trials()
        if t.state.is_finished() and "record" in t.user_attrs
    }


def _warned(capsys: pytest.CaptureFixture, *paths: Path) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: kept record"), err
    assert all(str(p) in err for p in paths) and "left untouched" in err, err
    return err


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of the test's own: the user cache's `pending/` lies under it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def test_the_reproduction_s_foreign_file_in_the_user_cache_is_left_with_one_warning(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture
) -> None:
    study = _study(tmp_path / "runs")
    cache = home / ".cache/suite/pending"
    foreign = _legacy(cache, NAME, 1, _record(KEYS[0], 0.527))
    before = foreign.read_bytes()
    assert tell_kept(study, _places(study), conclude) == 0
    _warned(capsys, foreign)
    assert foreign.read_bytes() == before and _told(study) == {}
    assert [t.state for t in study.get_trials()] == [TrialState.WAITING] * 2  # still queued, not told


def test_a_foreign_file_is_never_told_to_a_trial_another_worker_runs(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture
) -> None:
    """Two workers: one runs trial 1 while the other starts and reads the kept places. Neither a
    file of another study's id nor an old-format file (even beside this storage, with trial 1's key)
    whose keeper was not trial 1's worker is told to the running trial."""
    study = _study(tmp_path / "runs")
    running = _take(study, "this-host:111")
    keeping = _places(study)
    other = Keeping(keeping.places, "0" * 32)  # another study of this name: another id
    record = _record(KEYS[0], 0.99)
    foreign = keep(other, NAME, running, record, 0.527)  # same name, same trial id and key
    assert foreign is not None and foreign.parent == keeping.places[0]
    beside = _legacy(keeping.places[0], NAME, running._trial_id, record)  # an old file here, same key
    assert tell_kept(study, keeping, conclude) == 0
    _warned(capsys, foreign)
    assert study._storage.get_trial(running._trial_id).state == TrialState.RUNNING
    assert "record" not in study._storage.get_trial(running._trial_id).user_attrs
    assert foreign.is_file() and beside.is_file()  # the old one is left for the next run
    conclude(study, running, _record(KEYS[0], 0.61, "this-host:111"), 0.527)  # its own worker tells it
    assert _told(study) == {KEYS[0]: 0.61}
    assert tell_kept(study, keeping, conclude) == 0  # the key ended: the old file is done with
    assert not beside.exists() and foreign.is_file()


def test_the_same_study_in_another_storage_does_not_take_its_twin_s_record(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture
) -> None:
    here, there = _study(tmp_path / "a"), _study(tmp_path / "b")
    assert study_uid(here) != study_uid(there)
    cache = home / ".cache/suite/pending"
    trial = _take(here, "h:1")
    kept = keep(Keeping([cache], study_uid(here)), NAME, trial, _record(KEYS[0], 0.7, "h:1"), 0.527)
    assert kept is not None
    assert tell_kept(there, Keeping([cache], study_uid(there)), conclude) == 0
    _warned(capsys, kept)
    assert _told(there) == {} and kept.is_file()
    assert tell_kept(here, Keeping([cache], study_uid(here)), conclude) == 1  # its own study takes it
    assert _told(here) == {KEYS[0]: 0.7} and not kept.exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("place", ["beside the SQLite file", "suite-pending", "user cache"])
def test_a_full_disk_then_the_rerun_tells_its_own_record_from_each_place(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, place: str
) -> None:
    """The worker keeps its record where the storage failed (tell_or_keep), in the first place that
    takes it; the rerun tells it to the same trial, and the key ends once."""
    study = _study(tmp_path / "runs")
    url = f"sqlite:///{tmp_path / 'runs' / 'study.db'}"
    places = {  # first choice for a SQLite file, for a database server from a hand-started worker
        "beside the SQLite file": pending_dirs(url, None),
        "suite-pending": pending_dirs("postgresql://suite@localhost/db", None),
        "user cache": [tmp_path / "a-file", home / ".cache/suite/pending"],
    }[place]
    assert places[-1] == home / ".cache/suite/pending"
    assert places[0] == {
        "beside the SQLite file": tmp_path / "runs/study.db.pending",
        "suite-pending": tmp_path / "suite-pending",
        "user cache": tmp_path / "a-file",
    }[place]
    (tmp_path / "a-file").write_text("not a folder: the first place cannot take a record")
    keeping = Keeping(places, study_uid(study))
    trial = _take(study, f"{socket.gethostname()}:2")

    def full(*_: Any) -> None:
        raise StorageWriteError("full", "database or disk is full")

    monkeypatch.setattr(pending, "RETRY_WAITS_S", ())
    with pytest.raises(StorageWriteError, match="its record is kept in") as raised:
        record = _record(KEYS[0], 0.66, f"{socket.gethostname()}:2")
        pending.tell_or_keep(study, trial, record, 0.5, full, keeping)
    kept = Path(str(raised.value).split("kept in ")[1].split(" and told")[0])
    assert kept.parent == (places[-1] if place == "user cache" else places[0])
    assert json.loads(kept.read_text())["key"] == KEYS[0]
    assert tell_kept(study, keeping, conclude) == 1
    assert _told(study) == {KEYS[0]: 0.66} and not kept.exists()
    assert tell_kept(study, keeping, conclude) == 0 and capsys.readouterr().err == ""


def test_an_old_format_file_beside_its_storage_is_told_where_its_key_matches(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture
) -> None:
    """Files kept before studies had ids: told where they lie in the storage's own first place and
    their record's key is the trial's; one in the user cache (any study's) is left."""
    study = _study(tmp_path / "runs")
    keeping = _places(study)
    trial = _take(study, "h:5")
    wrong_key = _legacy(keeping.places[0], NAME, trial._trial_id + 1, _record(KEYS[0], 0.3, "h:5"))
    cached = _legacy(keeping.places[1], NAME, trial._trial_id, _record(KEYS[0], 0.4, "h:5"))
    ours = _legacy(keeping.places[0], NAME, trial._trial_id, _record(KEYS[0], 0.8, "h:5"))
    assert tell_kept(study, keeping, conclude) == 1
    _warned(capsys, wrong_key, cached)
    assert _told(study) == {KEYS[0]: 0.8} and not ours.exists() and wrong_key.is_file() and cached.is_file()


def test_a_record_is_told_to_the_twin_a_heartbeat_takeover_queued_and_waits_while_it_runs(
    tmp_path: Path, home: Path
) -> None:
    study = _study(tmp_path / "runs")
    keeping = _places(study)
    trial = _take(study, "h:7")
    kept = keep(keeping, NAME, trial, _record(KEYS[0], 0.75, "h:7"), 0.5)
    study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)  # failed as stale
    study.enqueue_trial({}, user_attrs={"key": KEYS[0], "attempt": 1, "setting": {}})  # its twin
    twin = study.get_trials()[-1]
    study._storage.set_trial_state_values(twin._trial_id, state=TrialState.RUNNING)  # another worker's
    assert tell_kept(study, keeping, conclude) == 0 and kept.is_file()  # left for the next run
    study._storage.set_trial_state_values(twin._trial_id, state=TrialState.FAIL)  # put back: queued again
    study.enqueue_trial({}, user_attrs={"key": KEYS[0], "attempt": 1, "setting": {}})
    assert tell_kept(study, keeping, conclude) == 1 and not kept.exists()
    assert _told(study) == {KEYS[0]: 0.75}
    assert sum(t.user_attrs["key"] == KEYS[0] for t in study.get_trials(states=(TrialState.WAITING,))) == 0


def test_a_garbage_file_is_left_in_one_warning_without_a_traceback(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture
) -> None:
    study = _study(tmp_path / "runs")
    keeping = _places(study)
    tag = hashlib.sha1(NAME.encode()).hexdigest()[:12]
    keeping.places[0].mkdir(parents=True)
    garbage = [keeping.places[0] / f"{tag}-{n}.json" for n in range(4)]
    for path, text in zip(garbage, ["{not json", "[]", '{"trial_id": "x"}', '{"trial_id": 1}'], strict=True):
        path.write_text(text)
    assert tell_kept(study, keeping, conclude) == 0
    err = _warned(capsys, *garbage[:3])
    assert "and 1 more" in err and all(p.is_file() for p in garbage)


def test_a_study_without_an_id_gets_one_once(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage, study_name=NAME)
    assert pending.UID_ATTR not in study.user_attrs
    uid = study_uid(study)
    assert len(uid) == 32 and study_uid(optuna.load_study(study_name=NAME, storage=storage)) == uid


def test_run_ends_with_its_table_beside_a_foreign_file_of_its_name(
    tiny_task: Path, tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
) -> None:  # fmt: skip
    """The reproduction: a file kept by an earlier study of this name (the old format, trial 1)
    sits in the user cache as a fresh study plans; it used to crash every later run of the name
    ("Cannot tell a WAITING trial") or, with a trial running, hand it another study's score."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    model = tiny_models["bert"]
    foreign = _legacy(tmp_path / "home/.cache/suite/pending", f"tiny|{model}|tiny|default", 1,
                      {**_record("size=32|other", 0.527), "worker": "elsewhere:1"})  # fmt: skip
    before = foreign.read_bytes()
    folder = run_tiny(tiny_task, model, "--threads", "1")
    out, err = capfd.readouterr()
    warned = [line for line in err.splitlines() if line.startswith("warning: kept record")]
    assert len(warned) == 1 and str(foreign) in warned[0], err[-3000:]
    assert foreign.read_bytes() == before
    assert "size setting" in out  # the summary table
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["outcome"] in ("succeeded", "failed") for r in records)
    assert all(r["score"] is not None for r in records)
    assert not any(r["worker"] == "elsewhere:1" for r in records)
