"""The leaderboard page's hand-written CSS, controls and JS (inlined by suite/outputs/site.py)."""

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .3em; }
.sources, #count { color: #555; }
.controls { display: flex; gap: 1em; align-items: center; margin: .8em 0; }
input, select { font: inherit; padding: .2em .4em; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #e3e3e3; padding: .35em .5em; text-align: left; vertical-align: middle; }
th { background: #f5f5f5; position: sticky; top: 0; cursor: pointer; user-select: none; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td .ci { color: #777; font-size: .85em; }
td.setting { font-family: ui-monospace, monospace; font-size: .85em; white-space: nowrap; }
ul.reported { margin: 0; padding-left: 1em; }
.context { color: #888; font-size: .85em; }
td.group { color: #555; font-size: .85em; overflow-wrap: anywhere; min-width: 7em; }
td.noise.dev { color: #a94400; }
"""

NOISE_TITLE = (
    "share of the between-run variance a finite dev set adds (Jordan 2024): the variance of "
    "independent per-example outcomes at each example's correctness rate over the variance of the "
    "runs' scores; 'dev set' when it is at least half (more dev examples would help more than more "
    "seeds), 'seeds' otherwise; \u2013 when not available (accuracy or exact match with per-example "
    "outcomes of at least 3 runs)"
)

CONTROLS = """
<div class="controls">
  <label>Filter <input id="filter" type="search" placeholder="task, model, setting, size"></label>
  <label>Task <select id="task"><option value="">all</option></select></label>
  <span id="count"></span>
</div>
<table id="board">
  <thead><tr>
    <th data-key="rank">rank</th><th data-key="task">task</th><th data-key="metric">metric</th>
    <th data-key="model">model</th>
    <th data-key="size">size</th><th data-key="setting">setting</th><th data-key="runs">runs</th>
    <th data-key="median">median [95% CI]</th><th data-key="iqr">IQR</th>
    <th data-key="noise" title="{NOISE_TITLE}">dev-set noise</th>
    <th data-key="failure_rate">failure rate [95% CI]</th><th data-key="distribution">scores</th>
    <th data-key="reported">comparable reported numbers</th>
    <th data-key="group">ranked within</th><th data-key="board">from</th>
  </tr></thead>
  <tbody></tbody>
</table>
""".replace("{NOISE_TITLE}", NOISE_TITLE)

JS = """
(function () {
  "use strict";
  const rows = JSON.parse(document.getElementById("data").textContent);
  const body = document.querySelector("#board tbody");
  const state = { key: "rank", dir: 1, text: "", task: "" };

  const num = (v, digits) => (v === null || v === undefined ? "\\u2013" : v.toFixed(digits));
  // totals by number, then K-shot sizes ("16/class") by K, then full: as the leaderboard orders them
  const sizeValue = (s) =>
    s === "full" ? Infinity : String(s).endsWith("/class") ? 1e12 + parseInt(s, 10) : Number(s);

  function value(row, key) {
    if (key === "size") return sizeValue(row.size);
    if (key === "rank") return row.position;  // ranks are per group: the groups stay together
    if (key === "reported") return row.reported.length;
    if (key === "distribution") return row.median;
    if (key === "noise") return row.noise ? row.noise.share : null;
    return row[key];
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;   // no value: last in either direction
    if (b === null || b === undefined) return -1;
    if (typeof a === "number" && typeof b === "number") return (a - b) * state.dir;
    return String(a).localeCompare(String(b)) * state.dir;
  }

  function cell(tr, className, content) {
    const td = document.createElement("td");
    if (className) td.className = className;
    if (content instanceof Node) td.appendChild(content); else td.textContent = content;
    tr.appendChild(td);
    return td;
  }

  function withInterval(text, ci, digits, suffix) {
    const span = document.createElement("span");
    span.textContent = text;
    if (ci) {
      const small = document.createElement("span");
      small.className = "ci";
      small.textContent = " [" + num(ci[0], digits) + suffix + ", " + num(ci[1], digits) + suffix + "]";
      span.appendChild(small);
    }
    return span;
  }

  function reported(row) {
    const box = document.createElement("div");
    if (row.reported.length) {
      const list = document.createElement("ul");
      list.className = "reported";
      for (const r of row.reported) {
        const item = document.createElement("li");
        const runs = r.n_runs ? " of " + r.n_runs : "";
        const label = r.model + ": " + r.value.toFixed(1) + " (" + r.statistic + runs + ")";
        const link = document.createElement(r.url ? "a" : "span");
        link.textContent = label;
        link.title = r.source;
        if (r.url) { link.href = r.url; link.rel = "noopener"; }
        item.appendChild(link);
        if (r.percentile !== null && r.percentile !== undefined) {
          item.appendChild(document.createTextNode(" \\u2013 our percentile " + r.percentile.toFixed(0)));
        }
        for (const text of r.notes) {
          const note = document.createElement("div");
          note.className = "context";
          note.textContent = text;
          item.appendChild(note);
        }
        list.appendChild(item);
      }
      box.appendChild(list);
    }
    if (row.context) {
      const note = document.createElement("div");
      note.className = "context";
      note.textContent = row.context + " context number(s), not comparable";
      box.appendChild(note);
    }
    return box;
  }

  function noise(tr, n) {
    if (!n) {
      cell(tr, "num noise", "\\u2013").title = "no dev-set noise share for this entry";
      return;
    }
    const dev = n.dominates === "dev-set sampling";
    const label = num(n.share, 2) + (dev ? " (dev set)" : " (seeds)");
    const td = cell(tr, "num noise" + (dev ? " dev" : ""), label);
    const counts = n.runs ? ", " + n.runs + " runs on " + n.examples + " dev examples" : "";
    td.title = (100 * n.share).toFixed(0) + "% of the between-run variance is what the finite dev set " +
      "adds (Jordan 2024): noise variance " + n.noise_var.toExponential(2) + " of " +
      n.between_runs_var.toExponential(2) + counts + "; dominated by " + n.dominates;
  }

  function render(row) {
    const tr = document.createElement("tr");
    tr.className = "entry";
    cell(tr, "num", String(row.rank));
    cell(tr, "", row.task);
    cell(tr, "", row.metric + (row.split === "validation" ? "" : " (" + row.split + ")"));
    cell(tr, "", row.model);
    cell(tr, "num", String(row.size));
    cell(tr, "setting", row.setting).title = row.hparams;  // the whole setting
    cell(tr, "num", String(row.runs));
    const median = cell(tr, "num median", withInterval(num(row.median, 1), row.median_ci, 1, ""));
    median.title = "interval across " + row.unit;
    cell(tr, "num", num(row.iqr, 1));
    noise(tr, row.noise);
    const rate = row.failure_rate === null ? null : 100 * row.failure_rate;
    const ci = row.failure_ci ? [100 * row.failure_ci[0], 100 * row.failure_ci[1]] : null;
    cell(tr, "num", row.failure_unknown ? "unknown" : withInterval(num(rate, 0) + "%", ci, 0, "%"));
    const plot = cell(tr, "dist", "");
    plot.innerHTML = row.svg;  // built by suite/outputs/site.py from numbers only
    cell(tr, "", reported(row));
    cell(tr, "group", row.group);
    cell(tr, "group", row.board);
    return tr;
  }

  function update() {
    const text = state.text.toLowerCase();
    const shown = rows.filter((r) =>
      (!state.task || r.task === state.task) &&
      (!text || [r.task, r.model, r.setting, r.hparams, String(r.size), r.metric, r.board].join(" ")
        .toLowerCase().includes(text))
    );
    shown.sort((a, b) => compare(value(a, state.key), value(b, state.key)));
    body.replaceChildren(...shown.map(render));
    document.getElementById("count").textContent = shown.length + " of " + rows.length + " entries";
    for (const th of document.querySelectorAll("#board th")) {
      const order = state.dir > 0 ? "ascending" : "descending";
      if (th.dataset.key === state.key) th.setAttribute("aria-sort", order);
      else th.removeAttribute("aria-sort");
    }
  }

  for (const th of document.querySelectorAll("#board th")) {
    th.addEventListener("click", () => {
      state.dir = state.key === th.dataset.key ? -state.dir : 1;
      state.key = th.dataset.key;
      update();
    });
  }
  const select = document.getElementById("task");
  for (const task of [...new Set(rows.map((r) => r.task))].sort()) {
    const option = document.createElement("option");
    option.value = option.textContent = task;
    select.appendChild(option);
  }
  select.addEventListener("change", () => { state.task = select.value; update(); });
  const filter = document.getElementById("filter");
  filter.addEventListener("input", () => { state.text = filter.value; update(); });
  update();
})();
"""
