"""The leaderboard page's cross-task section (inlined by suite/outputs/site.py): per training size
over every input, each model's (and recipe's) performance profile as an inline SVG drawn by the page's JS
(no library: a step line per model with its bootstrap band, dotted lines at tau 0 and 1) and its
normalised interquartile mean with the 95% interval; the aggregate's note where there is none."""

SECTION = """
<section id="across">
  <h2>Across tasks</h2>
  <p class="sources">Per training size, over the entries of every input (Agarwal et al. 2021):
  each model's (and recipe's) performance profile, the share of its runs whose normalised score is
  above &tau; (0: the best constant prediction, 1: the task's reference; band: 95% bootstrap), and
  its interquartile mean (IQM) over all its runs, tasks weighted equally, with its 95% interval.
  Where a model has several settings on a task, its rank-1 one stands for the task (named under
  it).</p>
  <div id="profiles"></div>
</section>
"""

PROFILE_CSS = """
#across h2 { font-size: 1.15em; margin: 1.5em 0 .3em; }
#profiles { display: flex; flex-wrap: wrap; gap: 1.5em; }
.aggregate { max-width: 480px; }
.aggregate h3 { font-size: 1em; margin: .6em 0 .2em; }
.aggregate .note, .aggregate .scales { color: #666; font-size: .85em; margin: .2em 0; }
svg.profile text { font-size: 9px; fill: #444; }
ul.iqm { list-style: none; margin: .2em 0; padding: 0; font-variant-numeric: tabular-nums; }
ul.iqm .swatch { display: inline-block; width: .9em; height: .9em; margin-right: .4em; }
ul.iqm .stood { color: #666; font-size: .85em; margin-left: 1.3em; }
"""

PROFILE_JS = """
(function () {
  "use strict";
  const blocks = JSON.parse(document.getElementById("aggregates").textContent);
  const box = document.getElementById("profiles");
  const parsed = document.createElement("div");
  parsed.innerHTML = "<svg></svg>";
  const NS = parsed.firstChild.namespaceURI;  // SVG's, as the HTML parser gives it (no URL in the page)
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const W = 460, H = 250, LEFT = 40, RIGHT = 12, TOP = 26, BOTTOM = 34;

  function svgNode(parent, tag, attributes, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attributes)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    parent.appendChild(node);
    return node;
  }

  function html(parent, tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    parent.appendChild(node);
    return node;
  }

  // A step function (the share holds from one tau to the next), as SVG path commands.
  function steps(xs, ys, x, y) {
    let d = "M" + x(xs[0]).toFixed(1) + " " + y(ys[0]).toFixed(1);
    for (let i = 1; i < xs.length; i++) d += "H" + x(xs[i]).toFixed(1) + "V" + y(ys[i]).toFixed(1);
    return d;
  }

  function band(xs, lower, upper, x, y) {
    let d = steps(xs, upper, x, y);
    for (let i = xs.length - 1; i >= 0; i--) {
      d += "V" + y(lower[i]).toFixed(1) + (i > 0 ? "H" + x(xs[i - 1]).toFixed(1) : "");
    }
    return d + "Z";
  }

  function drawProfile(block) {
    const names = Object.keys(block.groups);
    const taus = names.flatMap((n) => block.groups[n].profile.taus);
    const low = Math.min(0, ...taus), high = Math.max(1, ...taus);
    const x = (t) => LEFT + (W - LEFT - RIGHT) * (t - low) / (high - low);
    const y = (s) => TOP + (H - TOP - BOTTOM) * (1 - s);
    const svg = document.createElementNS(NS, "svg");
    for (const [k, v] of Object.entries({ class: "profile", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
      role: "img", "aria-label": "performance profile of " + names.join(", ") })) svg.setAttribute(k, v);
    for (const s of [0, 0.25, 0.5, 0.75, 1]) {
      svgNode(svg, "line", { x1: LEFT, x2: W - RIGHT, y1: y(s), y2: y(s), stroke: s ? "#eee" : "#bbb" });
      svgNode(svg, "text", { x: LEFT - 4, y: y(s) + 3, "text-anchor": "end" }, String(s));
    }
    const apart = (t) => t === 0 || t === 1 || Math.min(Math.abs(t), Math.abs(t - 1)) > 0.1 * (high - low);
    for (const t of [low, 0, 1, high].filter((t, i, all) => all.indexOf(t) === i && apart(t))) {
      const label = t.toFixed(Number.isInteger(t) ? 0 : 2);
      svgNode(svg, "text", { x: x(t), y: H - BOTTOM + 11, "text-anchor": "middle" }, label);
    }
    svgNode(svg, "text", { x: (LEFT + W - RIGHT) / 2, y: H - 6, "text-anchor": "middle" },
      "normalised score \\u03c4");
    svgNode(svg, "text", { x: 10, y: (TOP + H - BOTTOM) / 2, "text-anchor": "middle",
      transform: `rotate(-90 10 ${(TOP + H - BOTTOM) / 2})` }, "share of runs above \\u03c4");
    for (const [t, label, row] of [[0, "constant prediction", 1], [1, "reference", 0]]) {
      svgNode(svg, "line", { class: "mark", x1: x(t), x2: x(t), y1: TOP - 12 + 10 * row, y2: H - BOTTOM,
        stroke: "#555", "stroke-dasharray": "2 3" });
      const anchor = t ? "end" : "start";  // "reference" left of its line, the other to the right
      svgNode(svg, "text", { x: x(t) + (t ? -3 : 3), y: TOP - 15 + 10 * row, "text-anchor": anchor }, label);
    }
    names.forEach((name, i) => {
      const p = block.groups[name].profile, colour = COLOURS[i % COLOURS.length];
      if (p.lower && p.upper) {
        svgNode(svg, "path", { class: "band", d: band(p.taus, p.lower, p.upper, x, y), fill: colour,
          "fill-opacity": 0.15, stroke: "none" });
      }
      const line = svgNode(svg, "path", { class: "share", d: steps(p.taus, p.share, x, y), fill: "none",
        stroke: colour, "stroke-width": 1.8, "data-model": name });
      svgNode(line, "title", {}, name);
    });
    return svg;
  }

  function interval(ci) {
    return ci ? " [" + ci[0].toFixed(2) + ", " + ci[1].toFixed(2) + "]" : "";
  }

  function legend(block) {
    const list = document.createElement("ul");
    list.className = "iqm";
    Object.entries(block.groups).forEach(([name, group], i) => {
      const item = html(list, "li", "", "");
      html(item, "span", "swatch").style.background = COLOURS[i % COLOURS.length];
      let text = name + ": IQM " + group.iqm.estimate.toFixed(2) + interval(group.iqm.interval);
      if (!group.complete) text += " (only " + group.tasks.join(", ") + ")";
      item.appendChild(document.createTextNode(text));
      item.title = "tasks: " + group.tasks.join(", ");
      for (const [task, entry] of Object.entries(group.stood_for || {})) {
        html(item, "div", "stood", task + ": " + entry);
      }
    });
    for (const [name, imp] of Object.entries(block.improvement || {})) {
      const text = "P(" + name + " > " + imp.vs + ") " + imp.estimate.toFixed(2) + interval(imp.interval);
      html(list, "li", "", text);
    }
    return list;
  }

  function render(block) {
    const div = html(box, "div", "aggregate");
    const size = /^(\\d+|full)$/.test(block.size) ? ", size " + block.size : ", " + block.size;
    html(div, "h3", "", block.board + (block.size === undefined ? "" : size));
    if (!block.groups) {
      html(div, "p", "note", block.note);
      return;
    }
    const scales = Object.entries(block.normalisation).map(([t, kind]) => t + ": " + kind).join("; ");
    html(div, "p", "scales", "1 = reference per task (" + scales + ")");
    div.appendChild(drawProfile(block));
    div.appendChild(legend(block));
    if (block.note) html(div, "p", "note", block.note);
  }

  if (!blocks.length) document.getElementById("across").hidden = true;
  blocks.forEach(render);
})();
"""
