"""Writes analysis/variance_report.ipynb, the template `suite report` fills and executes.

Kept as code so the notebook's cells are reviewed like code: python analysis/make_template.py
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS = [
    new_markdown_cell(
        "# Variance report\n\nOne study's runs: how far the dev score moves with the seeds "
        "and hyperparameters, how often a run fails, and where published numbers fall."
    ),
    new_code_cell('RUN_DIR = "."', metadata={"tags": ["parameters"]}),
    new_code_cell(
        "import json\nfrom pathlib import Path\n\nimport pandas as pd\nfrom IPython.display import display\n\n"
        "from suite import plots\nfrom suite.records import counts, load_run, runs\n\n"
        "pd.set_option('display.max_colwidth', None)  # reasons are read whole\n"
        "run = Path(RUN_DIR)\n"
        "board = json.loads((run / 'leaderboard.json').read_text())\n"
        "info, trials = load_run(run)  # one final record per planned trial\n"
        "records = runs(trials)  # errored and pruned trials are not runs\n"
        "entry = board['entries'][0]\nmetric = entry['metric']\n"
        "rows = []\n"
        "for e in board['entries']:\n"
        "    for part in ('all', 'excluding_failed'):\n"
        "        s = e['summary'][part]\n"
        "        rows.append({'task': e['task'], 'model': e['model'], 'size': e['size'], 'sweep': e['sweep'],\n"
        "                     'pruner': e.get('pruner', 'none'), 'pruned': e['summary'].get('pruned', 0),\n"
        "                     'errored': e['summary'].get('errored', 0), 'runs': part, 'n': s['n'],\n"
        "                     'failed': e['summary']['failed'],\n"
        "                     **{k: 100 * s[k] for k in ('median', 'iqr', 'mean', 'std', 'min', 'max') if k in s},\n"
        "                     'median 95% CI': [round(100 * v, 2) for v in s['ci95_median'] or []]})\n"
        "display(pd.DataFrame(rows).round(2))"
    ),
    new_markdown_cell(
        "**Two kinds of uncertainty.** Every spread and confidence interval here is *across seeds*: "
        "it says how much the score of a re-run (new init, data order or subsample) would move. "
        "It is not the *across examples* uncertainty of one run's dev score (the per-example "
        "bootstrap stderr that lm-evaluation-harness prints), which shrinks with a larger dev set "
        "while the seed spread does not. A failed run scored no better than the trivial baseline "
        "(or diverged); crashed trials are not runs; statistics are shown with failures included and excluded."
    ),
    new_markdown_cell(
        "## Outcomes\n\nEvery planned trial ends as a *run* (succeeded, or failed: no better than "
        "the trivial baseline, or diverged) or as an *errored* trial (a crash: retried once, "
        "never in the failure rate) or *pruned* (stopped by a search-phase pruner)."
    ),
    new_code_cell(
        "display(pd.Series(counts(trials), name='trials').to_frame())\n"
        "odd = [{'trial': r.get('trial_number'), 'outcome': r.get('outcome'), 'failure': r.get('failure'),\n"
        "        'attempt': r.get('attempt', 1), 'seeds': r['seeds'], 'reason': r.get('reason')}\n"
        "       for r in trials if r.get('outcome') != 'succeeded']\n"
        "display(pd.DataFrame(odd) if odd else 'every planned trial succeeded')"
    ),
    new_markdown_cell("## Score distribution per setting"),
    new_code_cell("plots.show(plots.distribution(records, metric))"),
    new_markdown_cell(
        "## Expected maximum performance\n\nThe best dev score to expect from n runs "
        "(Dodge et al. 2019), with reported values as dashed lines."
    ),
    new_code_cell(
        "reported = [r for e in board['entries'] for r in e['reported']]\n"
        "plots.show(plots.expected_max_curve(records, metric, reported))"
    ),
    new_markdown_cell("## Learning rate x batch size"),
    new_code_cell("plots.show(plots.lr_batch_heatmaps(records))"),
    new_markdown_cell("## Init seed x data-order seed"),
    new_code_cell("plots.show(plots.init_order_heatmap(records))"),
    new_markdown_cell("## Variance shares (two-way random-effects ANOVA on the crossed grid)"),
    new_code_cell("plots.show(plots.variance_shares_bar(entry['variance_shares']))"),
    new_markdown_cell("## Hyperparameter importance (fANOVA)"),
    new_code_cell("plots.show(plots.importance_bar(entry['importance']))"),
    new_markdown_cell("## Loss curves"),
    new_code_cell("plots.show(plots.loss_curves(records))"),
    new_markdown_cell(
        "## Reported vs observed\n\nThe reported value's percentile in our runs, whether it "
        "lies in our 95% CI of the same statistic, and the chance that a single run of ours "
        "lands more than 1 or 3 points below it."
    ),
    new_code_cell(
        "table = pd.DataFrame([\n"
        "    {'size': e['size'], 'model (paper)': r['model'], 'reported': r['value'], 'statistic': r['statistic'],\n"
        "     'n_runs': r.get('n_runs'), 'ours': r['gap'].get('our_value'), 'gap': r['gap'].get('gap'),\n"
        "     'percentile': r['gap'].get('percentile'), 'in our CI': r['gap'].get('inside_ci'),\n"
        "     'P(run < rep-1)': r['gap'].get('p_single_run_below', {}).get('1'),\n"
        "     'P(run < rep-3)': r['gap'].get('p_single_run_below', {}).get('3'), 'source': r['source']}\n"
        "    for e in board['entries'] for r in e['reported']\n"
        "])\n"
        "display(table.round(2) if len(table) else 'no reported numbers for this metric and split')"
    ),
]


def main() -> None:
    notebook = new_notebook(
        cells=CELLS,
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(notebook, Path(__file__).with_name("variance_report.ipynb"))


if __name__ == "__main__":
    main()
