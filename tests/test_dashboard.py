"""optuna-dashboard shows every trial's full setting (fixed and searched hparams, seeds, size),
read back through the dashboard's own HTTP API from its WSGI app, in-process."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from tests.conftest import run_tiny

optuna_dashboard = pytest.importorskip("optuna_dashboard")


def _get(app: Any, path: str) -> dict[str, Any]:
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    assert status[0].startswith("200"), (path, status, body[:200])
    return json.loads(body)


def test_dashboard_lists_every_trials_hparams_seeds_and_size(tiny_task: Path, tiny_models: dict) -> None:
    folder = run_tiny(tiny_task, tiny_models["bert"], "--set", "sweep.hparams.warmup_ratio=0.2")
    app = optuna_dashboard.wsgi(f"sqlite:///{folder / 'study.db'}")
    (study,) = _get(app, "/api/studies")["study_summaries"]
    detail = _get(app, f"/api/studies/{study['study_id']}")
    records = {r["trial_number"]: r for r in map(json.loads, (folder / "trials.jsonl").open())}
    assert len(detail["trials"]) == len(records) == 3
    for trial in detail["trials"]:
        attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
        record = records[trial["number"]]
        for name, value in record["hparams"].items():  # fixed ones too: this sweep searches nothing
            assert attrs[f"hp.{name}"] == str(value), name
        for axis, value in record["seeds"].items():
            assert attrs[f"seed.{axis}"] == str(value)
        assert attrs["size"] == "32" and attrs["hp.warmup_ratio"] == "0.2"
    assert (
        len({a["value"] for t in detail["trials"] for a in t["user_attrs"] if a["key"] == "seed.init"}) == 3
    )
    columns = {c["key"]: c["sortable"] for c in detail["union_user_attrs"]}
    assert columns["hp.lr"] and columns["seed.order"] and columns["size"]  # table columns to sort by
