"""Writes analysis/variance_report.ipynb, the template `suite report` fills and executes.

Kept as code so the notebook's cells are reviewed like code: python analysis/make_template.py
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from suite.outputs.entries import ENTRY_FIGURES

CELLS = [
    new_markdown_cell(
        "# Variance report\n\nOne study's runs: how far the dev score moves with the seeds "
        "and hyperparameters, how often a run fails, and where published numbers fall."
    ),
    new_code_cell(
        f'RUN_DIR = "."\nENTRY_FIGURES = {ENTRY_FIGURES}  # per-entry figures: each size\'s best-ranked (0: every entry)',
        metadata={"tags": ["parameters"]},
    ),
    new_code_cell(
        "import json\nfrom pathlib import Path\n\nimport pandas as pd\nfrom IPython.display import display\n\n"
        "from suite.outputs import plots\nfrom suite.outputs.unscored import no_score_lines\nfrom suite.study.records import counts, load_run, runs, setting_key, setting_labels\n\n"
        "pd.set_option('display.max_colwidth', None)  # reasons are read whole\n"
        "run = Path(RUN_DIR)\n"
        "board = json.loads((run / 'leaderboard.json').read_text())\n"
        "info, trials = load_run(run)  # one final record per planned trial\n"
        "records = runs(trials)  # errored and pruned trials are not runs\n"
        "labels = setting_labels(trials)\n"
        "metric = board['entries'][0]['metric']\n"
        "entries = plots.by_entry(board['entries'], records)  # (label, entry, its runs): each figure's unit\n"
        "drawn, drawn_note = plots.figure_entries(entries, ENTRY_FIGURES)  # the entries a figure each draws\n\n"
        "def ci(block):  # x100; where the runs cannot bound it (e.g. all tied) it says so, never [b, b]\n"
        "    lo, hi = block.get('ci95') or (None, None)\n"
        "    if lo is None:\n"
        "        tied = block.get('tied')\n"
        "        said = (block.get('method') or '').startswith('cannot bound')\n"
        "        return f\"cannot bound: all {tied['runs']} runs alike\" if tied else ('cannot bound' if said else '')\n"
        "    low = block.get('coverage')  # at this entry's shape it covers below 93% somewhere: the range (docs/statistics.md)\n"
        "    return f'{100 * lo:.1f} to {100 * hi:.1f}' + (f\" (covers {low['measured']} at {low['shape']})\" if low else '')\n\n"
        "rows = []\n"
        "for e in board['entries']:  # one entry per task x size x setting, sizes in numeric order\n"
        "    s, i = e['summary'], e['summary']['intervals']\n"
        "    rows.append({'rank': e['rank'], 'size': e['size'], 'setting': labels.get(setting_key(e['setting']), '') + (' [mixed software stack]' if (e.get('stack') or {}).get('mixed') else ''), 'head': e['head'],\n"
        "                 'evaluated on': f\"{e['eval_limit']} examples (subsample)\" if e['eval_limit'] else (e['eval_set'] or 'full split'),\n"
        "                 'runs': s['runs'], 'errored': s['errored'], 'pruned': s['pruned'],\n"
        "                 'median': 100 * i['median']['estimate'] if i['median']['estimate'] is not None else None,\n"
        "                 'median 95% CI': ci(i['median']), 'IQR 95% CI': ci(i['iqr']), 'std 95% CI': ci(i['std']),\n"
        "                 'failure rate': f\"{s['failed']}/{s['runs']}\" if s['failure_rate'] is not None else 'unknown (no baseline)', 'failure 95% CI (seed units)': ci(i['failure_rate']),\n"
        "                 'intervals across': i['median']['unit']})\n"
        "display(pd.DataFrame(rows).round(2))\n"
        "for line in no_score_lines(info['task']['name'], trials):  # its row has no median\n"
        "    print(line)"
    ),
    new_markdown_cell(
        "**Two kinds of uncertainty.** Every interval above is *across seeds*: it resamples the seed "
        "design's units (runs for independent draws; init, order and subsample seeds independently "
        "for a crossed grid) and says how much a re-run of the study would move. The *across "
        "examples* uncertainty of one run's dev score (the per-example bootstrap stderr that "
        "lm-evaluation-harness prints) is the next table; it shrinks with a larger dev set while the "
        "seed spread does not. A failed run scored no better than the best constant prediction on "
        "the evaluation set (or diverged); crashed trials are not runs. **Which dominates**: the "
        "dev-set noise share (Jordan 2024) is the part of the runs' variance a finite dev set adds on "
        "its own, (1/n^2) sum p_i (1 - p_i) over the examples' correctness rates, divided by the "
        "observed variance: near 1, the seeds look unstable only because the dev set is small (a "
        "larger one, not more seeds, would steady the score); near 0, the training itself varies. "
        "Defined for accuracy and exact match."
    ),
    new_code_cell(
        "display(pd.DataFrame([{'size': e['size'], 'setting': labels.get(setting_key(e['setting']), ''),\n"
        "    'std across seeds (x100)': 100 * (e['examples']['across_seeds_std'] or float('nan')),\n"
        "    'dev-set stderr of one run (x100, across examples)': 100 * (e['examples']['dev_se_median'] or float('nan')),\n"
        "    'examples flipping across seeds': (e['examples']['agreement'] or {}).get('flip_share'),\n"
        "    \"Fleiss' kappa\": (e['examples']['agreement'] or {}).get('fleiss_kappa'),\n"
        "    'dev-set noise share (Jordan)': (e['examples'].get('eval_noise') or {}).get('share'),\n"
        "    'dominated by': (e['examples'].get('eval_noise') or {}).get('dominates'),\n"
        "    'runs for median +-0.5 / +-1 (at least)': '{} / {}'.format(*[(e['summary']['seeds_needed'] or {}).get('targets', {}).get(t, {}).get('runs_needed') for t in ('0.5', '1')]),\n"
        "} for e in board['entries']]).round(3))"
    ),
    new_markdown_cell(
        "## Recipes\n\nWhen the sweep lists `recipes:` (e.g. sweeps/stabilisers.yaml), each recipe "
        "against the first, as in Mosbach et al. 2021 Table 1 and Zhang et al. 2021 Table 2: failure "
        "rate, median, IQR and std (design bootstrap over seed units), and against the reference the "
        "failure-rate difference (Fisher, with the power it had to detect a halving), the std "
        "difference (Brown-Forsythe) and the Hodges-Lehmann median shift (paired by seeds when both "
        "recipes ran the same ones). `suite compare RUN --reference NAME` picks another reference."
    ),
    new_code_cell(
        "from suite.stats.compare import format_recipe_table, recipe_groups, recipe_table\n\n"
        "references = info.get('sweep', {}).get('references')  # each recipe's declared reference\n"
        "print(format_recipe_table(recipe_table(trials, references=references), metric) if recipe_groups(trials) else 'no recipes in this sweep')"
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
        "display(pd.DataFrame(odd)) if odd else print('every planned trial succeeded')"
    ),
    new_markdown_cell(
        "## Score distribution\n\nOne panel per training size (sizes are never pooled), the settings "
        "side by side within it; red dots are failed runs. Every figure below is drawn per size "
        "and setting (or faceted by size); a section the study's design has nothing for is one line. "
        "A figure per entry (expected maximum, seed grid, variance components, curves) is drawn for "
        "at most `ENTRY_FIGURES` entries (8 unless `suite report --entry-figures N` says otherwise; 0: "
        "all): past it, for each size's best-ranked settings, and a line says so. The tables hold every entry."
    ),
    new_code_cell("plots.display(plots.distribution(records, metric))"),
    new_markdown_cell(
        "## Expected maximum performance\n\nPer entry (size x setting): the best dev score to expect "
        "from n runs: the unbiased estimator without replacement (Tang et al. 2020) up to the number "
        "of runs, with the 95% interval of that estimate (across seeds); that entry's comparable "
        "reported values as dashed lines. Past our runs only a lower bound is known (our max), so the "
        "curve stops at n = N."
    ),
    new_code_cell(
        "plots.display([(label, plots.expected_max_curve(rs, metric, e['reported'], label)) for label, e, rs in drawn],\n"
        "              drawn_note)  # drawn_note: which entries, where not all"
    ),
    new_markdown_cell(
        "## Learning rate x batch size\n\nOne grid per size (and per value of any other varying hyperparameter)."
    ),
    new_code_cell("plots.display(plots.lr_batch_heatmaps(records))"),
    new_markdown_cell("## Init seed x data-order seed\n\nPer entry, on a crossed seed design."),
    new_code_cell(
        "plots.display([(label, plots.init_order_heatmap(rs, label)) for label, e, rs in drawn], drawn_note)"
    ),
    new_markdown_cell(
        "## Variance components per setting\n\nRandom-effects components (init, order, subsample, "
        "interaction + residual) for the seed design the sweep ran, with MLS 95% intervals and "
        "generalised-pivotal intervals for the shares; a share the design cannot bound is hatched, and "
        "a component it cannot identify is named under the axis."
    ),
    new_code_cell(
        "plots.display([(label, plots.variance_components_bar(e['summary']['variance_components'], label))\n"
        "               for label, e, rs in drawn], drawn_note)"
    ),
    new_markdown_cell(
        "## Hyperparameter importance per size\n\nfANOVA across one size's settings, scaled to the "
        "share of variance the settings explain."
    ),
    new_code_cell(
        "importance = {f\"size {e['size']}\": e['importance'] for e in board['entries']}  # one per size, on each of its entries\n"
        "plots.display([(size, plots.importance_bar(result, size)) for size, result in importance.items()])"
    ),
    new_markdown_cell(
        "## Across tasks\n\nA leaderboard over several tasks aggregates each model's runs (normalised per "
        "task: 0 = best constant prediction, 1 = the comparable reported median, else a perfect score): "
        "the share of runs above each normalised score, with its bootstrap band. One task: nothing to draw."
    ),
    new_code_cell(
        "aggregates = board.get('aggregates') or {}\n"
        "plots.display([(f'size {size}', plots.performance_profile(agg, f'size {size}')) for size, agg in aggregates.items() if isinstance(agg, dict)]\n"
        "              or aggregates.get('note', 'one task: nothing to aggregate across tasks'))"
    ),
    new_markdown_cell("## Loss curves per size and setting"),
    new_code_cell("plots.display(plots.loss_curves(records, plots.entry_keys(drawn)), drawn_note)"),
    new_markdown_cell(
        "## Dev curves per size and setting\n\nEach epoch's dev score, drawn from what each epoch evaluated: the "
        "task's curve sample (`curve_sample`: a fixed sample of the evaluation set, the same examples "
        "for every run; the title says which). Every statistic in this report uses the score on the "
        "whole evaluation set after the last epoch, not these points."
    ),
    new_code_cell("plots.display(plots.dev_curves(records, metric, plots.entry_keys(drawn)), drawn_note)"),
    new_markdown_cell(
        "## Reported vs observed\n\n**How to read a comparison.** A published number is compared "
        "only when it is *comparable*: same checkpoint, training size (none stated = the full "
        "training set), split and evaluation set, metric, head and a run statistic. A reported "
        "median or mean of k runs is placed in the distribution of that statistic over k runs "
        "drawn from ours (its percentile and a two-sided p); a reported max of k against our "
        "expected max of k; a single run against our distribution of one run. Unknown k is said, "
        "not assumed. It is never compared with the interval of our own N-run median, which "
        "shrinks with N until agreement is impossible. An entry scored on a seeded `eval_limit` "
        "subsample of the official dev set stays comparable, and its test adds the subsample's "
        "sampling error (`eval sd`, x100). Runs that carry no failure rule's baseline (plain or "
        "imported scores) have a reported median or mean tested as if no run could fail unseen: its "
        "note says that this test's type-I is not held where runs collapse. Everything else is "
        "context, listed with the reasons it is not comparable."
    ),
    new_code_cell(
        "comparable = [{'size': e['size'], 'setting': labels.get(setting_key(e['setting']), ''), 'model (paper)': r['model'],\n"
        "               'reported': r['value'], 'statistic': r['statistic'], 'k': r['gap'].get('k'),\n"
        "               'ours': r['gap'].get('our_value'), 'percentile': r['gap'].get('percentile'),\n"
        "               'p (two-sided)': r['gap'].get('p_two_sided'), 'against': r['gap'].get('reference'),\n"
        "               'eval sd': e['eval_sd'], 'note': '; '.join(filter(None, [r['gap'].get('note'), r['gap'].get('fallback'), *r['notes']])),\n"
        "               'source': r['source']}\n"
        "              for e in board['entries'] for r in e['reported'] if r['comparable']]\n"
        "display(pd.DataFrame(comparable).round(2)) if comparable else print('no comparable reported number')\n"
        "context = {(r['model'], r['value'], r['statistic'], r['source']): '; '.join(r['reasons'])\n"
        "           for e in board['entries'] for r in e['reported'] if not r['comparable']}\n"
        "display(pd.DataFrame([{'model (paper)': m, 'reported': v, 'statistic': st, 'source': src, 'not comparable because': why}\n"
        "                      for (m, v, st, src), why in context.items()])) if context else print('no context numbers')"
    ),
]


def main() -> None:
    for number, cell in enumerate(CELLS):  # stable ids: a regenerated template differs only where edited
        cell.id = f"cell-{number:02d}"
    notebook = new_notebook(
        cells=CELLS,
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(notebook, Path(__file__).with_name("variance_report.ipynb"))


if __name__ == "__main__":
    main()
