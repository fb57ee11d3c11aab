"""`suite site`: the static leaderboard page, rendered in headless Chromium (the system's
`chromium` driven by playwright; no browser download): one row per entry, sorting and filtering
work, the console has no errors, and the page makes no network request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from suite.cli import main
from suite.leaderboard import write_leaderboard

REPORTED = {"model": "bert-base", "value": 69.3, "metric": "accuracy", "statistic": "median",
            "n_runs": 5, "split": "dev", "size": 500, "source": "Sanh et al. 2019, Table 1",
            "arxiv": "1910.01108"}  # fmt: skip


def _run(folder: Path, task: str, model: str, centre: float, seed: int, reported: list[dict]) -> Path:
    """A run folder (run.json + trials.jsonl) of two settings x 6 seeds, one run in 4 failed."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    info = {
        "task": {
            "name": task,
            "head": "classification",
            "labels": ["a", "b"],
            "eval_split": "validation",
            "metric": {"main": "accuracy", "extra": [], "higher_is_better": True},
            "reported": reported,
        },
        "task_hash": "0",
        "model": model,
        "model_revision": None,
        "sweep": {"name": "seeds"},
        "profile": "default",
        "date": "2025-01-01T00:00:00+00:00",
        "git_commit": None,
        "versions": {},
        "data_sha256": {},
    }
    records = []
    for lr in (2e-5, 4e-5):
        for i in range(6):
            failed = i % 4 == 0
            score = 0.5 if failed else float(np.clip(rng.normal(centre + 200 * lr, 0.03), 0, 1))
            records.append(
                {
                    "key": f"{lr}-{i}",
                    "size": 500,
                    "hparams": {"lr": lr, "batch_size": 16, "epochs": 3},
                    "seeds": {"init": i, "order": i, "subsample": 0},
                    "outcome": "failed" if failed else "succeeded",
                    "failure": "baseline" if failed else None,
                    "attempt": 1,
                    "score": score,
                    "scores": {},
                    "failed": failed,
                    "reason": None,
                    "baseline": 0.5,
                    "head": "auto",
                }
            )
    (folder / "run.json").write_text(json.dumps(info))
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.fixture
def leaderboards(tmp_path: Path) -> list[Path]:
    runs = tmp_path / "runs"
    first = write_leaderboard(
        [_run(runs / "rte/bert-base", "rte", "bert-base", 0.62, 1, [REPORTED]),
         _run(runs / "rte/minilm", "rte", "minilm", 0.50, 2, [REPORTED])],
        tmp_path / "a.json",
    )  # fmt: skip
    second = write_leaderboard(
        [_run(runs / "sst2/minilm", "sst2", "minilm", 0.80, 3, [])], tmp_path / "b.json"
    )
    assert len(first["entries"]) == 4 and len(second["entries"]) == 2
    return [tmp_path / "a.json", tmp_path / "b.json"]


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def test_site_page_sorts_filters_and_is_self_contained(
    leaderboards: list[Path], tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    out = tmp_path / "site"
    assert main(["site", *map(str, leaderboards), "-o", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "<script src" not in page and "<link" not in page and "http://" not in page  # all inlined
    executable = _chromium()
    if executable is None:
        pytest.skip("no chromium binary found (CI installs Debian's chromium in .ci/run)")
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        view = browser.new_page(viewport={"width": 1500, "height": 900})
        view.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        view.on("pageerror", lambda e: problems.append(str(e)))
        view.on("request", lambda r: requests.append(r.url))
        view.goto((out / "index.html").as_uri())
        rows = view.locator("#board tbody tr")
        assert rows.count() == 6  # one per entry of both leaderboards
        assert view.locator("#board tbody svg.dist").count() == 6
        assert view.locator("#board tbody svg.dist circle").count() == 6 * 6  # every run is a dot

        def medians() -> list[float]:
            return [float(t.split()[0]) for t in view.locator("td.median").all_inner_texts()]

        before = medians()
        view.click("th[data-key=median]")
        ascending = medians()
        assert ascending == sorted(before) and ascending != before
        view.click("th[data-key=median]")
        assert medians() == sorted(before, reverse=True)
        assert view.get_attribute("th[data-key=median]", "aria-sort") == "descending"

        view.fill("#filter", "minilm")
        assert rows.count() == 4 and all("minilm" in t for t in rows.all_inner_texts())
        view.select_option("#task", "sst2")
        assert rows.count() == 2 and view.inner_text("#count") == "2 of 6 entries"
        view.fill("#filter", "")
        view.select_option("#task", "")
        assert rows.count() == 6
        link = view.locator("ul.reported a").first  # a comparable reported number cites its paper
        assert link.get_attribute("href") == "https://arxiv.org/abs/1910.01108"
        view.screenshot(path=str(tmp_path / "site.png"), full_page=True)
        browser.close()
    assert not problems, problems
    assert all(url.startswith("file://") for url in requests), requests
    assert (tmp_path / "site.png").stat().st_size > 10_000


def test_site_of_a_bad_leaderboard_is_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 3, "entries": []}')
    assert main(["site", str(bad), "-o", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "bad.json: field" in err
    assert not (tmp_path / "site").exists()
