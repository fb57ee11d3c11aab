"""Figures stay readable (reported-value labels never overlap) and never pool sizes or settings:
each report figure is drawn per (size, setting) or faceted by size, and a section the study's
design has nothing for is one line of text."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from suite.outputs import plots  # noqa: E402
from suite.outputs.leaderboard import write_leaderboard  # noqa: E402
from suite.outputs.plots import expected_max_curve, spread  # noqa: E402
from suite.study.records import load_run, setting_key, setting_labels  # noqa: E402
from tests.test_site import write_run  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _records(n: int = 20) -> list[dict]:
    scores = np.random.default_rng(0).normal(0.70, 0.02, size=n)
    return [
        {"score": float(s), "failed": False, "outcome": "succeeded", "hparams": {"lr": 2e-5}, "size": 500,
         "seeds": {"init": i, "order": i, "subsample": 0}}
        for i, s in enumerate(scores)
    ]  # fmt: skip


def _reported(values: list[float]) -> list[dict]:
    return [
        {"model": f"bert-base-{i}", "value": v, "statistic": "median", "n_runs": 5, "comparable": True}
        for i, v in enumerate(values)
    ]  # fmt: skip


@pytest.mark.parametrize("values", [[70.0 + 0.05 * i for i in range(14)], [69.3, 69.3, 69.3, 88.0, 88.1]])
def test_reported_labels_never_overlap(values: list[float]) -> None:
    reported = _reported(values) + [{**_reported([50.0])[0], "comparable": False}]  # context: not drawn
    fig = expected_max_curve(_records(), "accuracy", reported)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text().startswith("bert-base")]
    assert len(labels) == len(values)
    boxes = [Text.get_window_extent(t, renderer) for t in labels]  # the text, not its connector
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    legend = ax.get_legend().get_window_extent(renderer)
    figure = fig.bbox
    for box in boxes:
        assert not box.overlaps(legend)
        assert figure.x0 <= box.x0 and box.x1 <= figure.x1 and figure.y0 <= box.y0 and box.y1 <= figure.y1
    # Each label still points at its own value.
    assert sorted(t.xy[1] for t in labels) == pytest.approx(sorted(values))


def test_spread_keeps_order_gap_and_centre() -> None:
    out = spread([1.0, 1.0, 1.1, 5.0], gap=0.5)
    assert all(b - a >= 0.5 - 1e-12 for a, b in itertools.pairwise(out))
    assert np.mean(out) == pytest.approx(np.mean([1.0, 1.0, 1.1, 5.0]))
    assert spread([1.0, 3.0], gap=0.5) == [1.0, 3.0]


GRID = ((2e-5, 16), (4e-5, 16), (2e-5, 32), (4e-5, 32))


@pytest.fixture(scope="module")
def two_size_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A crossed-seed study at sizes 100 and 500, 4 settings each, with its leaderboard."""
    run = write_run(tmp_path_factory.mktemp("study") / "run", sizes=(100, 500), grid=GRID, crossed=True)
    write_leaderboard([run], run / "leaderboard.json")
    return run


def _execute_template(
    run: Path, monkeypatch: pytest.MonkeyPatch, entry_figures: int | None = None
) -> list[dict]:
    """Run the report template's code cells in this process (no kernel); return what each figure
    shows: its titles and, per axes, the y values it plots."""
    shown: list[dict] = []

    def record(fig: plt.Figure) -> None:
        titles = [fig._suptitle.get_text() if fig._suptitle else "", *(ax.get_title() for ax in fig.axes)]
        axes = [
            {"title": ax.get_title(),
             "lines": [line.get_ydata() for line in ax.lines] + [s[:, 1] for c in ax.collections
                       if isinstance(c, LineCollection) for s in c.get_segments()],
             "dots": [c.get_offsets()[:, 1] for c in ax.collections
                      if len(c.get_offsets()) and not isinstance(c, LineCollection)]}
            for ax in fig.axes
        ]  # fmt: skip
        shown.append({"titles": titles, "axes": axes})
        plt.close(fig)

    monkeypatch.setattr(plots, "show", record)
    namespace: dict = {}
    for cell in nbformat.read(REPO / "analysis/variance_report.ipynb", as_version=4).cells:
        if cell.cell_type == "code":
            exec(cell.source, namespace)  # noqa: S102
            if "parameters" in cell.metadata.get("tags", []):  # as `suite report` fills it
                namespace["RUN_DIR"] = str(run)
                namespace["ENTRY_FIGURES"] = (
                    namespace["ENTRY_FIGURES"] if entry_figures is None else entry_figures
                )
    return shown


def _sizes_named(text: str) -> set[str]:
    return set(re.findall(r"size (\w+)", text))


def test_a_two_size_report_draws_each_figure_per_size(
    two_size_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = _execute_template(two_size_run, monkeypatch)
    board = json.loads((two_size_run / "leaderboard.json").read_text())
    _, trials = load_run(two_size_run)
    for figure in shown:  # every figure or facet names one size; none names two
        assert any(_sizes_named(t) for t in figure["titles"]), figure["titles"]
        assert all(len(_sizes_named(t)) <= 1 for t in figure["titles"])
    curves = [f for f in shown if f["titles"][1].startswith("Expected maximum")]
    assert len(curves) == len(board["entries"]) == 8
    for figure, (label, _, records) in zip(curves, plots.by_entry(board["entries"], trials), strict=True):
        assert label in figure["titles"][1]
        first = figure["axes"][0]["lines"][0][0]  # n = 1: the mean of THAT entry's runs only
        assert first == pytest.approx(100 * np.mean([r["score"] for r in records]))
    (dist,) = [f for f in shown if f["titles"][0].startswith("Score per run")]
    for ax, size in zip(dist["axes"], (100, 500), strict=True):  # one facet per size, its runs only
        assert ax["title"] == f"size {size}"
        expected = sorted(100 * r["score"] for r in trials if r["size"] == size)
        assert sorted(np.concatenate(ax["dots"])) == pytest.approx(expected)
    assert [f["titles"][0] for f in shown if "lr x batch" in " ".join(f["titles"])] == [
        "size 100",
        "size 500",
    ]
    assert len([f for f in shown if "init seed x order seed" in f["titles"][1]]) == 8
    importance = [f["titles"][1] for f in shown if f["titles"][1].startswith("Hyperparameter importance")]
    assert importance == ["Hyperparameter importance (fANOVA, scaled): size 100",
                          "Hyperparameter importance (fANOVA, scaled): size 500"]  # fmt: skip
    (loss,) = [f for f in shown if f["titles"][0].startswith("Loss curves")]
    labels = setting_labels(trials)  # one panel per (size, setting), each with that unit's runs only
    units = [(size, labels[setting_key({"lr": lr, "batch_size": b, "epochs": 3})]) for size in (100, 500)
             for lr, b in GRID]  # fmt: skip
    assert [ax["title"] for ax in loss["axes"]] == [f"size {size}, {label}" for size, label in units]
    for ax, (size, label) in zip(loss["axes"], units, strict=True):
        own = [r for r in trials if r["size"] == size and labels[setting_key(r["hparams"])] == label]
        firsts = sorted(r["loss_curve"][0] for r in own)
        assert sorted(line[0] for line in ax["lines"]) == pytest.approx(firsts)


def test_past_its_limit_a_report_draws_each_sizes_best_ranked_entries_and_says_so(
    two_size_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    shown = _execute_template(two_size_run, monkeypatch, entry_figures=2)
    board = json.loads((two_size_run / "leaderboard.json").read_text())
    _, trials = load_run(two_size_run)
    best = [label for label, e, _ in plots.by_entry(board["entries"], trials) if e["rank"] == 1]
    assert len(best) == 2 and {_sizes_named(label).pop() for label in best} == {"100", "500"}
    curves = [f["titles"][1] for f in shown if f["titles"][1].startswith("Expected maximum")]
    assert curves == [f"Expected maximum performance: {label}" for label in best]
    assert len([f for f in shown if "init seed x order seed" in f["titles"][1]]) == 2
    (loss,) = [f for f in shown if f["titles"][0].startswith("Loss curves")]  # the study has no dev curves
    assert [ax["title"] for ax in loss["axes"]] == best
    (dist,) = [f for f in shown if f["titles"][0].startswith("Score per run")]  # not per entry: every run
    assert sum(len(np.concatenate(ax["dots"])) for ax in dist["axes"]) == len(trials)
    note = "figures for the best-ranked setting of each size (2 of 8 entries; every entry is in the tables"
    titles = [" ".join(f["titles"]) for f in shown]
    sections = ("Expected maximum", "init seed x order seed", "Where the variance comes from", "Loss curves")
    drew = [name for name in sections if any(name in t for t in titles)]
    assert len(drew) >= 3 and capsys.readouterr().out.count(note) == len(drew)  # not above "no dev curves"


def test_figure_entries_keep_each_sizes_best_ranked() -> None:
    entries = [
        (f"size {size}, lr={k}", {"size": size, "rank": k + 1, "rank_group": {"size": size}}, [])
        for size in (32, 64, 128) for k in range(5)
    ]  # fmt: skip
    drawn, note = plots.figure_entries(entries, 6)
    assert [(e["size"], e["rank"]) for _, e, _ in drawn] == [(s, r) for s in (32, 64, 128) for r in (1, 2)]
    assert note.startswith("figures for the 2 best-ranked settings of each size (6 of 15 entries;")
    assert plots.figure_entries(entries, 15) == (entries, None) == plots.figure_entries(entries, 0)
    drawn, note = plots.figure_entries(entries, 2)  # fewer than the sizes: each size's best still
    assert [e["rank"] for _, e, _ in drawn] == [1, 1, 1] and "setting of each size (3 of 15 entries" in note
    two_sets = [(f"{k}", {"size": 32, "rank": k % 4 + 1, "rank_group": {"size": 32, "eval_set": k // 4}}, [])
                for k in range(8)]  # fmt: skip
    drawn, _ = plots.figure_entries(two_sets, 4)  # two rank groups of one size: each its 2 best
    assert [(e["rank_group"]["eval_set"], e["rank"]) for _, e, _ in drawn] == [(0, 1), (0, 2), (1, 1), (1, 2)]


def test_figures_of_one_entry_refuse_pooled_records(two_size_run: Path) -> None:
    _, trials = load_run(two_size_run)
    with pytest.raises(ValueError, match="pass one entry's records"):
        plots.expected_max_curve(trials, "accuracy")
    with pytest.raises(ValueError, match="pass one entry's records"):
        plots.init_order_heatmap([r for r in trials if r["size"] == 100])  # one size, 4 settings


def test_a_section_that_does_not_apply_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Independent seeds, one setting per size: no lr x batch grid, no init x order grid, one
    variance component, no importance: each section is one line of text, no figure."""
    run = write_run(tmp_path / "run", sizes=(100, 500), grid=((2e-5, 16),))
    board = write_leaderboard([run], run / "leaderboard.json")
    _, trials = load_run(run)
    entries = plots.by_entry(board["entries"], trials)
    assert isinstance(plots.lr_batch_heatmaps(trials), str)
    plots.display([(label, plots.init_order_heatmap(rs, label)) for label, _, rs in entries])
    assert capsys.readouterr().out.strip().splitlines() == [
        "seeds drawn independently: no init x order grid (a crossed seed design draws one)"
    ]  # one line for both entries
    components = [plots.variance_components_bar(e["summary"]["variance_components"]) for _, e, _ in entries]
    assert all("'seed' = 100%" in c for c in components)
    assert all(isinstance(plots.importance_bar(e["importance"]), str) for _, e, _ in entries)
    plots.display([("size 100", "no loss curves recorded"), ("size 500", plt.figure())])
    out = capsys.readouterr().out.strip().splitlines()  # outside a notebook a shown figure prints its repr
    assert out[-1] == "size 100: no loss curves recorded"  # the entries it applies to are named


def test_lr_batch_heatmaps_never_pool_epochs(tmp_path: Path) -> None:
    records = []
    for epochs in (2, 3):
        _, trials = load_run(write_run(tmp_path / f"e{epochs}", grid=GRID))
        records += [{**r, "hparams": {**r["hparams"], "epochs": epochs}} for r in trials]
    heatmaps = plots.lr_batch_heatmaps(records)
    assert [label for label, _ in heatmaps] == ["size 500, epochs=2", "size 500, epochs=3"]
    for (_, fig), epochs in zip(heatmaps, (2, 3), strict=True):
        median, iqr = fig.axes[:2]  # then each one's colour bar, an axes of its own
        for ax, statistic in ((median, np.median), (iqr, lambda x: np.subtract(*np.percentile(x, [75, 25])))):
            lrs = [float(t.get_text()) for t in ax.get_yticklabels()]
            batches = [int(t.get_text()) for t in ax.get_xticklabels()]
            cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
            for (row, lr), (column, batch) in itertools.product(enumerate(lrs), enumerate(batches)):
                scores = [100 * r["score"] for r in records if r["hparams"] == {"lr": lr, "batch_size": batch,
                          "epochs": epochs} and r.get("score") is not None]  # fmt: skip
                assert cells[(row, column)] == f"{statistic(scores):.1f}"
            assert len(cells) == len(lrs) * len(batches) == 4
        plt.close(fig)
    missing = (2e-5, 32)  # no run at lr 2e-5, batch 32: a blank cell, without text
    gap = [
        r
        for r in records
        if r["hparams"]["epochs"] == 2 and (r["hparams"]["lr"], r["hparams"]["batch_size"]) != missing
    ]
    ((_, fig),) = plots.lr_batch_heatmaps(gap)
    assert len(fig.axes[0].texts) == 3 and np.ma.getmaskarray(fig.axes[0].images[0].get_array()).sum() == 1
    plt.close(fig)


def test_a_share_the_grid_cannot_bound_is_hatched_not_drawn_with_an_interval() -> None:
    """On a 3 x 3 grid the share intervals span nearly [0, 1]: the chart hatches those bars, draws
    no error bar for them and says how many seeds would bound them; a large grid draws them."""
    from matplotlib.patches import Rectangle

    from suite.stats.estimates import variance_components
    from tests.designs import grid_records

    rng = np.random.default_rng(0)
    for side, informative in ((3, False), (30, True)):
        y = (
            rng.normal(0, 1, (1, side, 1))
            + rng.normal(0, 1, (1, 1, side))
            + rng.normal(0, 0.5, (1, side, side))
        )
        result = variance_components(grid_records(y), resamples=500)
        fig = plots.variance_components_bar(result)
        bars = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_height() > 0]
        hatched = [b for b in bars if b.get_hatch()]
        label = fig.axes[0].get_xlabel()
        if informative:
            assert not hatched and "hatched" not in label
        else:
            assert hatched and "seeds per axis would bound them" in label
        plots.plt.close(fig)


def _curved(k: int, failed: bool) -> dict:
    return {
        "score": 0.5 if failed else 0.7,
        "failed": failed,
        "outcome": "failed" if failed else "succeeded",
        "size": 100,
        "hparams": {"lr": 2e-5},
        "seeds": {"init": k, "order": k, "subsample": 0},
        "loss_curve": [1.0, 0.8, 0.7 if not failed else 0.69],
        "epochs": [{"epoch": 1, "accuracy": 0.6}, {"epoch": 2, "accuracy": 0.5 if failed else 0.7}],
    }


def test_a_panel_of_thousands_of_runs_draws_a_stated_sample_with_its_failed_share() -> None:
    from suite.outputs.curves import CURVES_SHOWN, shown

    records = [_curved(k, failed=k % 10 == 0) for k in range(2_000)]  # 10% failed
    drawn = shown(records)
    assert len(drawn) == CURVES_SHOWN and sum(r["failed"] for r in drawn) == round(0.1 * CURVES_SHOWN)
    assert drawn == shown(records)  # seeded: the same report twice
    assert shown(records[:CURVES_SHOWN]) == records[:CURVES_SHOWN]  # under the limit: every run
    one_failed = [_curved(k, failed=k == 7) for k in range(1_000)]
    assert sum(r["failed"] for r in shown(one_failed)) == 1  # a rare failure is still drawn
    for figure in (plots.loss_curves(records), plots.dev_curves(records, "accuracy")):
        (ax,) = figure.axes
        blue, red = (c for c in ax.collections if isinstance(c, LineCollection))  # failed runs on top
        assert len(blue.get_segments()) + len(red.get_segments()) == CURVES_SHOWN
        assert len(red.get_segments()) == round(0.1 * CURVES_SHOWN) and red.get_zorder() > blue.get_zorder()
        assert ax.get_title().endswith(f"{CURVES_SHOWN} of 2000 runs drawn (a seeded sample)")
        plt.close(figure)


def test_curves_of_entries_that_recorded_none_are_one_line() -> None:
    records = [_curved(k, failed=False) for k in range(5)]
    assert (
        plots.loss_curves(records, only={("999", "{}")}) == "none of the entries drawn recorded these curves"
    )


def test_the_smoothed_loss_is_pandas_rolling_mean_missing_values_included() -> None:
    import pandas as pd

    from suite.outputs.curves import _trailing_mean

    loss = [0.9, 0.8, float("nan"), 0.7, 0.65, float("nan"), float("nan"), 0.5]
    for window in (1, 2, 3):
        expected = pd.Series(loss).rolling(window, min_periods=1).mean().to_numpy()
        assert np.allclose(_trailing_mean(loss, window), expected, equal_nan=True)


def test_the_expected_max_curve_is_drawn_at_points_a_reader_can_tell_apart() -> None:
    assert plots.curve_points(7) == list(range(1, 8))
    points = plots.curve_points(10_000)
    assert points[:100] == list(range(1, 101)) and points[-1] == 10_000 and len(points) < 170
    records = [_curved(k, failed=False) | {"score": 0.6 + 0.0001 * k} for k in range(400)]
    figure = expected_max_curve(records, "accuracy")
    assert len(figure.axes[0].lines[0].get_xdata()) == len(plots.curve_points(400))
    plt.close(figure)


def test_the_frame_has_a_row_a_run_as_pandas_builds_rows_of_dicts() -> None:
    """Built column by column, the frame is what a row of dicts a run made: the same columns in
    first-seen order, NaN for a seed a run lacks and for a run without a score (a float column),
    errored trials left out, a label per full setting; no run: the columns, empty."""
    import pandas as pd

    records = _records(4)
    for r, lr in zip(records, (2e-5, 3e-5, 2e-5, 3e-5), strict=True):
        r["hparams"] = {"lr": lr, "batch_size": 8, "epochs": 3}
    records[1]["seeds"] = {"order": 5, "init": 1}  # no subsample seed
    records[2]["score"] = None
    errored = {**records[3], "outcome": "errored", "score": None}
    got = plots.frame([*records, errored])
    rows = [
        {"score": None if r["score"] is None else 100 * r["score"], "failed": False, "size": "500",
         "setting": f"lr={r['hparams']['lr']:g}", **r["hparams"],
         **{f"{k}_seed": v for k, v in r["seeds"].items()}}
        for r in records
    ]  # fmt: skip
    pd.testing.assert_frame_equal(got, pd.DataFrame(rows), check_exact=True)
    assert (
        got["subsample_seed"].isna().tolist() == [False, True, False, False] and got["score"].dtype == float
    )
    assert list(plots.frame([errored]).columns) == plots.FRAME_COLUMNS and plots.frame([]).empty
