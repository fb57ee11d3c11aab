"""`suite site`: the static leaderboard page, rendered in headless Chromium (the system's
`chromium` driven by playwright; no browser download): one row per entry, sorting and filtering
work, each entry's dev-set noise share and each file's cross-task performance profile are shown,
the console has no errors, and the page makes no network request."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from suite.commands.cli import main
from suite.outputs.leaderboard import write_leaderboard
from suite.outputs.site import build_aggregates, build_rows

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


@pytest.fixture
def multitask(tmp_path: Path) -> Path:
    """A leaderboard of two models on two tasks at one size (so it has a cross-task aggregate);
    the rte runs store per-example outcomes (so those entries have a dev-set noise share)."""
    runs = tmp_path / "multi"
    document = write_leaderboard(
        [write_run(runs / "rte/bert-base", "rte", "bert-base", 0.62, 5, [REPORTED], examples=60),
         write_run(runs / "rte/minilm", "rte", "minilm", 0.50, 6, examples=60),
         write_run(runs / "sst2/bert-base", "sst2", "bert-base", 0.80, 7),
         write_run(runs / "sst2/minilm", "sst2", "minilm", 0.70, 8)],
        tmp_path / "m.json",
    )  # fmt: skip
    assert list(document["aggregates"]) == ["500"]
    assert set(document["aggregates"]["500"]["groups"]) == {"bert-base", "minilm"}
    noisy = [e["task"] for e in document["entries"] if e["examples"]["eval_noise"]]
    assert sorted(noisy) == ["rte"] * 4  # two settings per model
    return tmp_path / "m.json"


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@contextmanager
def _browser(page: Path) -> Iterator:  # a playwright Page
    """The page in headless chromium (or a skip); afterwards: no console error or warning, no
    request beyond the file itself."""
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
        view.goto(page.as_uri())
        yield view
        browser.close()
    assert not problems, problems
    assert all(url.startswith("file://") for url in requests), requests


def test_site_page_sorts_filters_and_is_self_contained(
    leaderboards: list[Path], tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    out = tmp_path / "site"
    assert main(["site", *map(str, leaderboards), "-o", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "<script src" not in page and "<link" not in page and "http://" not in page  # all inlined
    with _browser(out / "index.html") as view:
        rows = view.locator("#board tbody tr")
        assert rows.count() == 6  # one per entry of both leaderboards
        assert view.locator("#board tbody svg.dist").count() == 6
        assert view.locator("#board tbody svg.dist circle").count() == 6 * 6  # every run is a dot
        assert view.locator("td.noise").all_inner_texts() == ["\u2013"] * 6  # no per-example outcomes
        # one aggregate over both files' tasks (each file alone has one task)
        assert view.locator(".aggregate h3").all_inner_texts() == ["all inputs, size 500"]
        assert view.locator("svg.profile").count() == 1

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
    assert (tmp_path / "site.png").stat().st_size > 10_000


def test_site_of_a_bad_leaderboard_is_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 3, "entries": []}')
    assert main(["site", str(bad), "-o", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "bad.json: field" in err
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("where", ["file", "inside a file", "index.html a folder"])
def test_site_into_a_file_is_one_line_and_writes_nothing(
    leaderboards: list[Path],
    tmp_path: Path,
    capsys,
    where: str,  # noqa: ANN001
) -> None:
    """`-o` naming an existing file (or a path through one): one line, exit 2, the file untouched."""
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    out = {"file": taken, "inside a file": taken / "site", "index.html a folder": tmp_path / "site"}[where]
    if where == "index.html a folder":
        (out / "index.html").mkdir(parents=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["site", *map(str, leaderboards), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: -o {out}: ") and "Traceback" not in err
    assert "is a file, not a folder" in err or "is a folder, not the page" in err
    assert (
        taken.read_text() == "keep me"
        and sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    )


def test_site_reranks_entries_across_files(
    leaderboards: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file ranks its own entries; the page ranks all of them together within the rank
    groups (one rank 1 per group) and names each row's file (by its path from here)."""
    monkeypatch.chdir(tmp_path)
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


def _embedded(page: str, name: str) -> object:
    found = re.search(f'<script id="{name}" type="application/json">(.*?)</script>', page, re.S)
    assert found, name
    return json.loads(found.group(1).replace("<\\/", "</"))


def _noise_label(noise: dict) -> str:
    return f"{noise['share']:.2f} ({'dev set' if noise['dominates'] == 'dev-set sampling' else 'seeds'})"


def test_site_carries_the_noise_share_and_the_cross_task_aggregate(
    multitask: Path, leaderboards: list[Path], tmp_path: Path
) -> None:
    """Each row carries its entry's eval_noise; the page's data carries one cross-task aggregate
    per size over every input's entries (IQM, profile per model): for one input, the file's own."""
    document = json.loads(multitask.read_text())
    rows = {(r["task"], r["model"], r["median"]): r for r in build_rows([multitask])}
    assert len(rows) == len(document["entries"]) == 8
    for entry in document["entries"]:
        row = rows[(entry["task"], entry["model"], 100 * entry["summary"]["all"]["median"])]
        noise = entry["examples"]["eval_noise"]
        if noise is None:
            assert row["noise"] is None and row["task"] == "sst2"
        else:
            assert row["noise"]["share"] == noise["share"] and 0 <= noise["share"] <= 1
            assert row["noise"]["dominates"] == noise["dominates"] and row["noise"]["examples"] == 60

    (alone,) = build_aggregates([multitask])  # one input: the aggregate its leaderboard stored
    stored = document["aggregates"]["500"]
    assert (alone["board"], alone["size"]) == (f"{multitask.parent.name}/{multitask.name}", "500")
    assert set(alone["groups"]) == set(stored["groups"]) == {"bert-base", "minilm"}
    for name, group in alone["groups"].items():
        assert group["iqm"] == stored["groups"][name]["iqm"] and group["iqm"]["interval"] is not None
        profile = group["profile"]
        assert profile == {
            k: stored["groups"][name]["profile"][k] for k in ("taus", "share", "lower", "upper")
        }
        assert 0.0 in profile["taus"] and 1.0 in profile["taus"]
        assert len(profile["taus"]) == len(profile["share"]) == len(profile["lower"]) == len(profile["upper"])
        assert group["stood_for"]["rte"].endswith("(best of 2 settings)")  # two settings per model
    assert alone["normalisation"] == {t: n["kind"] for t, n in stored["normalisation"].items()}
    assert alone["note"] == stored["note"]

    out = tmp_path / "site"
    assert main(["site", str(leaderboards[0]), str(multitask), "-o", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "<script src" not in page and "http://" not in page and "https://cdn" not in page
    assert "function drawProfile(block)" in page and 'data-key="noise"' in page and "Jordan 2024" in page
    assert [r["noise"] for r in _embedded(page, "data")] == [
        r["noise"] for r in build_rows([leaderboards[0], multitask])
    ]
    (block,) = blocks = _embedded(page, "aggregates")  # over both files, not one per file
    assert blocks == build_aggregates([leaderboards[0], multitask])
    assert (block["board"], block["size"], set(block["normalisation"])) == (
        "all inputs",
        "500",
        {"rte", "sst2"},
    )
    # bert-base on rte: two settings in each file, one of the four stands for the task
    assert block["groups"]["bert-base"]["stood_for"]["rte"].endswith("(best of 4 settings)")
    assert block["groups"]["bert-base"]["stood_for"]["sst2"].endswith("(best of 2 settings)")  # m.json's


def test_site_draws_the_noise_share_and_a_profile_per_model(
    multitask: Path, leaderboards: list[Path], tmp_path: Path
) -> None:
    """In the browser: the noise column (label, tooltip, sorting) and, per aggregate, an inline SVG
    with a step line and a band per model, the tau 0 and tau 1 marks, and the IQM lines."""
    out = tmp_path / "site"
    assert main(["site", str(leaderboards[0]), str(multitask), "-o", str(out)]) == 0
    rows = build_rows([leaderboards[0], multitask])
    (stored,) = build_aggregates([leaderboards[0], multitask])
    with _browser(out / "index.html") as view:
        assert view.locator("#board tbody tr").count() == len(rows) == 12
        cells = view.locator("td.noise")
        expected = [_noise_label(r["noise"]) if r["noise"] else "\u2013" for r in rows]
        assert sorted(cells.all_inner_texts()) == sorted(expected) and expected.count("\u2013") == 8
        assert "Jordan 2024" in view.get_attribute("th[data-key=noise]", "title")
        view.click("th[data-key=noise]")  # ascending by share, entries without one last
        ordered = sorted((r["noise"] for r in rows if r["noise"]), key=lambda n: n["share"])
        assert cells.all_inner_texts() == [_noise_label(n) for n in ordered] + ["\u2013"] * 8
        assert "Jordan 2024" in cells.first.get_attribute("title")

        assert view.locator("svg.profile").count() == 1  # one aggregate: both files at size 500
        lines = view.locator("svg.profile path.share")
        models = lines.evaluate_all("ps => ps.map(p => p.dataset.model)")
        assert sorted(models) == ["bert-base", "minilm"]  # one step line per model
        for model, d in zip(
            models, lines.evaluate_all("ps => ps.map(p => p.getAttribute('d'))"), strict=True
        ):
            assert d.startswith("M") and d.count("H") == len(stored["groups"][model]["profile"]["taus"]) - 1
        assert view.locator("svg.profile path.band").count() == 2
        assert view.locator("svg.profile line.mark").count() == 2  # tau 0 and tau 1, dotted
        labels = view.locator("svg.profile text").all_text_contents()
        assert "constant prediction" in labels and "reference" in labels
        legend = view.locator("ul.iqm li").all_inner_texts()
        for name, group in stored["groups"].items():
            (lo, hi), estimate = group["iqm"]["interval"], group["iqm"]["estimate"]
            assert any(line.startswith(f"{name}: IQM {estimate:.2f} [{lo:.2f}, {hi:.2f}]") for line in legend)
        assert view.locator(".aggregate h3").all_inner_texts() == ["all inputs, size 500"]
        view.screenshot(path=str(tmp_path / "profile.png"), full_page=True)
