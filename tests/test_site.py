"""`suite site`: the static leaderboard page, rendered in headless Chromium (the system's
`chromium` driven by playwright; no browser download): one row per entry, sorting and filtering
work, the console has no errors, and the page makes no network request."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from suite.commands.cli import main
from suite.outputs.leaderboard import write_leaderboard
from suite.outputs.site import build_rows

REPORTED = {"model": "bert-base", "value": 69.3, "metric": "accuracy", "statistic": "median",
            "n_runs": 5, "split": "dev", "size": 500, "source": "Sanh et al. 2019, Table 1",
            "arxiv": "1910.01108"}  # fmt: skip


def write_run(
    folder: Path,
    task: str = "rte",
    model: str = "bert-base",
    centre: float = 0.6,
    seed: int = 0,
    reported: Sequence[dict] = (),
    *,
    sizes: Sequence[int | str] = (500,),
    grid: Sequence[tuple[float, int]] = ((2e-5, 16), (4e-5, 16)),
    crossed: bool = False,
    task_extra: dict | None = None,
    info_extra: dict | None = None,
    examples: int = 0,
) -> Path:
    """A run folder (run.json + trials.jsonl) without training: per size, each (lr, batch)
    setting x 6 seeds (independent, or a crossed 3 x 2 init x order grid), one run in 4 failed;
    a larger size scores higher; `examples` > 0 stores per-example outcomes on that many dev
    examples."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    info = {
        "task": {
            "name": task,
            "head": "classification",
            "labels": ["a", "b"],
            "eval_split": "validation",
            "metric": {"main": "accuracy", "extra": [], "higher_is_better": True},
            "max_length": 128,
            "eval_limit": None,
            "reported": list(reported),
            **(task_extra or {}),
        },
        "task_hash": "0",
        "model": model,
        "model_revision": None,
        "sweep": {"name": "seeds"},
        "profile": "default",
        "date": "2025-01-01T00:00:00+00:00",
        "git_commit": None,
        "versions": {},
        "data_origin": {"kind": "local", "folder": "data/rte"},
        "data_sha256": {"train": "1" * 64, "dev": "2" * 64},
        **(info_extra or {}),
    }
    records = []
    for s, size in enumerate(sizes):
        for lr, batch in grid:
            for i in range(6):
                failed = i % 4 == 0
                mean = centre + 0.1 * s + 200 * lr + batch / 1000
                score = 0.5 if failed else float(np.clip(rng.normal(mean, 0.03), 0, 1))
                seeds = {"init": i // 2, "order": i % 2} if crossed else {"init": i, "order": i}
                records.append(
                    {
                        "key": f"{size}-{lr}-{batch}-{i}",
                        "size": size,
                        "hparams": {"lr": lr, "batch_size": batch, "epochs": 3},
                        "seeds": {**seeds, "subsample": 0},
                        "outcome": "failed" if failed else "succeeded",
                        "failure": "baseline" if failed else None,
                        "attempt": 1,
                        "score": score,
                        "scores": {},
                        "failed": failed,
                        "reason": None,
                        "baseline": 0.5,
                        "head": "auto",
                        "loss_curve": list(np.linspace(0.7, 0.7 - score / 2, 8)),
                        **(_per_example(rng, score, examples) if examples else {}),
                    }
                )
    (folder / "run.json").write_text(json.dumps(info))
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def _per_example(rng: np.random.Generator, score: float, n: int) -> dict:
    labels = rng.integers(0, 2, n)
    right = rng.random(n) < score
    predictions = np.where(right, labels, 1 - labels)
    per = {
        "label": labels.tolist(),
        "prediction": predictions.tolist(),
        "correct": right.astype(int).tolist(),
    }
    return {"per_example": per, "n_dev": n}


@pytest.fixture
def leaderboards(tmp_path: Path) -> list[Path]:
    runs = tmp_path / "runs"
    first = write_leaderboard(
        [write_run(runs / "rte/bert-base", "rte", "bert-base", 0.62, 1, [REPORTED]),
         write_run(runs / "rte/minilm", "rte", "minilm", 0.50, 2, [REPORTED])],
        tmp_path / "a.json",
    )  # fmt: skip
    second = write_leaderboard(
        [write_run(runs / "sst2/minilm", "sst2", "minilm", 0.80, 3, [])], tmp_path / "b.json"
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


def test_site_reranks_entries_across_files(leaderboards: list[Path], tmp_path: Path) -> None:
    """Each file ranks its own entries; the page ranks all of them together within the rank
    groups (one rank 1 per group) and names each row's file."""
    third = tmp_path / "c.json"
    write_leaderboard(
        [write_run(tmp_path / "runs/rte/roberta", "rte", "roberta", 0.75, 4, [REPORTED])], third
    )
    assert sorted(e["rank"] for e in json.loads(third.read_text())["entries"]) == [1, 2]  # its own ranks
    rows = build_rows([*leaderboards, third])
    assert len(rows) == 8 and {r["board"] for r in rows} == {"a.json", "b.json", "c.json"}
    for task, count in (("rte", 6), ("sst2", 2)):  # one group per task here
        group = sorted((r for r in rows if r["task"] == task), key=lambda r: r["rank"])
        assert [r["rank"] for r in group] == list(range(1, count + 1))
        assert [r["median"] for r in group] == sorted((r["median"] for r in group), reverse=True)
        assert len({r["group"] for r in group}) == 1
    assert [r["board"] for r in rows if r["task"] == "rte"][:2] == ["c.json", "c.json"]  # the best file's
    assert (
        rows[0]["group"]
        == "dev, max_length 128, data " + json.loads(third.read_text())["entries"][0]["rank_group"]["data"]
    )
