// Run charts: one plotly chart per metric, one colour per run, grouped in sections (pinned, the kind's key
// metrics, reward, KL and entropy, loss, throughput, time, other). The server downsamples (min/max per bucket)
// and smooths: the smoothed trace is the EMA of every row, at evenly spaced rows (selectors.metric_series).
// A live run is polled for rows after its last step; when some came, its whole series is fetched again at the
// same resolution (no more often than every 4 times that fetch took), so an open page never holds more points
// a trace than a reload would. Each run has three traces per chart: raw (faint), EMA-smoothed, and ✕ markers
// for NaN/Inf.
// A full load draws each chart once, one per animation frame, so the page stays responsive while 20 charts
// of several runs are drawn. Traces stay SVG: scattergl needs a WebGL context per chart and browsers keep
// only about 16 alive, so a 20-chart page would lose some.
(() => {
  "use strict";
  const container = document.getElementById("charts");
  if (!container) return;
  // Plotly reads every text it draws (titles, trace names, hover labels) as its own HTML subset, links and inline
  // styles included, and fills in %{...} in its templates: a metric logged as <a href=...> would be a link in the
  // chart's title, <b> a style the CSP refuses. Every name from users goes through this, and shows as typed.
  const asPlotlyText = (text) => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/{/g, "&#123;");
  const runs = JSON.parse(container.dataset.runs).map((run) => ({ ...run, label: asPlotlyText(run.label) }));
  // several runs: each chart has a legend under its x axis, so it gets the height for it (experiments.css)
  container.classList.toggle("several-runs", runs.length > 1);
  const COLORS = ["#3b5bdb", "#e8590c", "#2b8a3e", "#ae3ec9", "#c92a2a", "#0c8599", "#5c940d", "#862e9c"];
  const POLL_MS = 2000;
  const SMOOTHING_DEBOUNCE_MS = 250;
  const RELOAD_SPACING = 4;
  // The kind's key metrics come first, in this order (TRL's own spellings too, for runs logged without renaming).
  const KEY_METRICS = {
    grpo: ["reward/mean", "kl", "entropy", "loss"], dapo: ["reward/mean", "kl", "entropy", "loss"],
    ppo: ["reward/mean", "kl", "entropy", "loss"],
    dpo: ["rewards/accuracy", "rewards/accuracies", "rewards/margin", "rewards/margins", "loss"],
    reward_model: ["rewards/accuracy", "rewards/accuracies", "loss"], sft: ["loss", "lr"],
    external: ["reward/mean", "eval/accuracy", "rewards/accuracy", "kl", "entropy", "loss"],
  };
  // A metric's section, by its name (eval/ names go with what they evaluate); the first rule that matches.
  const SECTIONS = [
    ["reward", "Reward", /^(reward|rewards|advantage|accuracy)(\/|$)/],
    ["kl-entropy", "KL and entropy", /^(kl|entropy|clip_ratio)(\/|$)|(^|\/|_)kl$/],
    ["loss", "Loss and optimiser", /(^|\/|_)loss$|^(loss|value|grad_norm|lr|learning_rate)(\/|$)/],
    ["throughput", "Throughput", /^throughput(\/|$)|tokens|_per_second|_per_s$/],
    ["time", "Time", /^time(\/|$)|_runtime$|_time$|(^|\/)time_/],
    ["other", "Other", /./],
  ];
  const kind = container.dataset.kind; // "" when the runs compared are of several kinds: no key metrics, no pins
  const keyMetrics = KEY_METRICS[kind] || [];
  const xControl = document.querySelector("[data-chart-control=x]");
  const smoothingControl = document.querySelector("[data-chart-control=smoothing]");
  const state = {
    x: xControl ? xControl.value : "step",
    smoothing: smoothingControl ? Number(smoothingControl.value) : 0.6,
    charts: new Map(), // metric -> div
    data: new Map(), // metric -> per run {x, y, smoothedX, smoothed, badX, bad}
    seenStep: runs.map(() => 0), // of the newest row a poll has seen
    pending: runs.map(() => false), // rows came that the charts do not show yet
    nextReload: runs.map(() => 0), // performance.now() before which a live run's series is not fetched again
    offset: runs.map(() => 0), // subtracted from x (wall time: the run's first logged time)
    active: runs.map((run) => run.active),
    pinned: readPins(),
    generation: 0, // bumped when the x axis or the smoothing changes, so late answers of the old one are ignored
    drawn: false, // every chart of the latest full load is drawn
  };

  // Pins are the user's, per run kind, kept on the server (views.chart_pins): a chart pinned on one run opens
  // pinned on every run of its kind, in any browser.
  function readPins() {
    const pins = JSON.parse(container.dataset.pins || "[]");
    return new Set(pins);
  }

  async function savePins() {
    const csrf = JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
    const response = await fetch(container.dataset.pinsUrl, {
      method: "POST", headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify({ kind, metrics: [...state.pinned] }),
    });
    if (!response.ok) throw new Error(`${container.dataset.pinsUrl}: ${response.status}`);
  }

  function markerY(series, xs) {
    // A NaN has no height: draw its marker at the last finite value before it (or 0).
    return xs.map((x) => {
      let found = 0;
      for (let i = 0; i < series.x.length && series.x[i] <= x; i += 1) found = series.y[i];
      return found;
    });
  }

  function fromServer(series, index) {
    // Wall time is shown as seconds since the run's first logged step, so runs started apart still overlay.
    if (state.offset[index] === null) state.offset[index] = series.x[0] ?? series.nonfinite_x[0] ?? 0;
    const offset = state.offset[index];
    return {
      x: series.x.map((x) => x - offset), y: series.y,
      smoothedX: series.smoothed_x?.map((x) => x - offset) ?? null, smoothed: series.smoothed ?? null,
      badX: series.nonfinite_x.map((x) => x - offset), bad: series.nonfinite,
    };
  }

  function emptySeries() {
    return { x: [], y: [], smoothedX: null, smoothed: null, badX: [], bad: [] };
  }

  function traces(metric, seriesPerRun) {
    // Plotly keeps the arrays it is given (and may extend them): hand it copies, never state.data's own.
    return seriesPerRun.flatMap((series, index) => {
      const color = COLORS[index % COLORS.length];
      const group = `run-${runs[index].id}`;
      return [
        { x: [...series.x], y: [...series.y], mode: "lines", line: { color, width: 1 }, opacity: 0.25, hoverinfo: "skip",
          legendgroup: group, showlegend: false, name: `${runs[index].label} raw` },
        // Sparse series (an eval every N steps, or one at the end) get markers: one point has no line to draw.
        // No `smoothed` from the server (smoothing off, a short series, a learning rate): the values as they are.
        { x: [...(series.smoothedX ?? series.x)], y: [...(series.smoothed ?? series.y)],
          mode: series.x.length < 50 ? "lines+markers" : "lines",
          marker: { color, size: 5 }, line: { color, width: 2 },
          legendgroup: group, name: runs[index].label },
        { x: [...series.badX], y: markerY(series, series.badX), text: [...series.bad], mode: "markers",
          marker: { symbol: "x", size: 11, color: "#c92a2a" }, legendgroup: group, showlegend: false,
          name: `${runs[index].label} non-finite`, meta: asPlotlyText(metric),
          hovertemplate: "%{meta} = %{text} at %{x}<extra></extra>" },
      ];
    });
  }

  // A series that never changes (a constant learning rate of 1e-6) gets plotly's autorange of value +- 1, where
  // it reads as 0: its axis runs from 0 to twice the value instead, until a point that differs comes in.
  function constantValue(metric) {
    const values = (state.data.get(metric) || []).flatMap((series) => series.y).filter(Number.isFinite);
    if (!values.length) return null;
    const first = values[0];
    return first !== 0 && values.every((value) => value === first) ? first : null;
  }

  // Steps are whole numbers: no tick at 1.5. Over a short range plotly would pick a tick every 0.5, so the
  // ticks go one step apart there; over a longer one its own spacing is whole already and "d" prints it so.
  const SHORT_STEP_RANGE = 10;

  function stepTicks(low, high) {
    if (state.x !== "step") return {};
    return high - low <= SHORT_STEP_RANGE ? { tickformat: "d", tickmode: "linear", tick0: 0, dtick: 1 }
      : { tickformat: "d", tickmode: "auto" };
  }

  function xRange(metric) {
    const xs = (state.data.get(metric) || []).flatMap((series) => [...series.x, ...series.badX]);
    return xs.length ? [Math.min(...xs), Math.max(...xs)] : [0, 0];
  }

  function layout(metric) {
    const constant = constantValue(metric);
    const [low, high] = xRange(metric);
    return {
      title: { text: asPlotlyText(metric), font: { size: 13 } }, margin: { l: 50, r: 10, t: 30, b: 35 },
      yaxis: constant === null ? { autorange: true } : { range: [Math.min(0, 2 * constant), Math.max(0, 2 * constant)] },
      xaxis: { automargin: true, title: { text: { step: "step", wall_time: "seconds since start", tokens_seen: "tokens" }[state.x] },
        ...stepTicks(low, high) },
      showlegend: runs.length > 1,
      // Anchored to the bottom of the whole chart, not of the plot: the legend then sits below the x axis title
      // and the bottom margin grows to hold both (a legend placed at a fraction under the plot overlapped it).
      legend: { orientation: "h", x: 0, xanchor: "left", yref: "container", y: 0, yanchor: "bottom" },
      uirevision: state.x,
    };
  }

  function sectionOf(metric) {
    if (state.pinned.has(metric)) return "pinned";
    if (keyMetrics.includes(metric)) return "key";
    const name = metric.replace(/^eval\//, "");
    return SECTIONS.find(([, , rule]) => rule.test(name))[0];
  }

  const keyRank = (metric) => (keyMetrics.includes(metric) ? keyMetrics.indexOf(metric) : keyMetrics.length);
  const metricOrder = (a, b) => keyRank(a) - keyRank(b) || (a !== "loss") - (b !== "loss") || a.localeCompare(b);

  // One collapsible section (a <details>) per group, in this order; a section without charts is hidden.
  const sectionGrids = new Map();
  function buildSections() {
    container.replaceChildren();
    sectionGrids.clear();
    const all = [["pinned", "Pinned"], ["key", "Key metrics"], ...SECTIONS.map(([id, title]) => [id, title])];
    for (const [id, title] of all) {
      const section = document.createElement("details");
      section.className = "chart-section";
      section.dataset.section = id;
      section.open = true;
      section.hidden = true;
      const summary = document.createElement("summary");
      summary.textContent = title;
      const grid = document.createElement("div");
      grid.className = "charts";
      section.append(summary, grid);
      // a chart drawn or resized while its section was folded has no width: it is measured again on opening
      section.addEventListener("toggle", () => {
        if (!section.open) return;
        for (const div of grid.querySelectorAll(".chart")) if (div.data) Plotly.Plots.resize(div);
      });
      container.append(section);
      sectionGrids.set(id, grid);
    }
  }

  function placeCell(metric, cell) {
    const grid = sectionGrids.get(sectionOf(metric));
    const ordered = [...grid.children].map((other) => other.dataset.cell).filter((name) => name !== metric)
      .concat(metric).sort(metricOrder);
    const next = ordered[ordered.indexOf(metric) + 1];
    const previousSection = cell.closest(".chart-section");
    grid.insertBefore(cell, next ? grid.querySelector(`[data-cell="${CSS.escape(next)}"]`) : null);
    for (const section of [previousSection, grid.parentElement]) {
      if (section) section.hidden = !section.querySelector("[data-cell]");
    }
  }

  function pinButton(metric) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "pin";
    button.dataset.pin = metric;
    const update = () => {
      const pinned = state.pinned.has(metric);
      button.setAttribute("aria-pressed", String(pinned));
      button.textContent = pinned ? "Unpin" : "Pin";
      button.title = `${pinned ? "Unpin" : "Pin"} ${metric} ${pinned ? "from" : "to"} the top of every ${kind} run`;
    };
    button.addEventListener("click", () => {
      if (state.pinned.has(metric)) state.pinned.delete(metric);
      else state.pinned.add(metric);
      savePins().then(() => { button.dataset.saved = String(state.pinned.has(metric)); });
      update();
      placeCell(metric, button.parentElement);
      const div = state.charts.get(metric);
      if (div?.data) Plotly.Plots.resize(div); // its new grid may be wider or narrower
    });
    update();
    button.hidden = !kind; // runs of several kinds compared: a pin would have no kind to be kept for
    return button;
  }

  function addChartDiv(metric) {
    const cell = document.createElement("div");
    cell.className = "chart-cell";
    cell.dataset.cell = metric;
    const div = document.createElement("div");
    div.className = "chart";
    div.dataset.metric = metric;
    cell.append(pinButton(metric), div);
    placeCell(metric, cell);
    state.charts.set(metric, div);
    if (!state.data.has(metric)) state.data.set(metric, runs.map(emptySeries));
    return div;
  }

  function draw(metric, div) {
    div.dataset.constant = constantValue(metric) !== null ? "1" : "";
    const drawn = Plotly.newPlot(div, traces(metric, state.data.get(metric)), layout(metric), { responsive: true, displaylogo: false });
    div.on("plotly_relayout", (event) => onZoom(metric, event));
    return drawn;
  }

  function ensureChart(metric) {
    if (state.charts.has(metric)) return state.charts.get(metric);
    const div = addChartDiv(metric);
    draw(metric, div);
    return div;
  }

  const nextFrame = () => new Promise((resolve) => requestAnimationFrame(resolve));

  function url(run, params) {
    const query = new URLSearchParams({ x: state.x, ...params });
    return `${run.metrics_url}?${query}`;
  }

  // The whole series, downsampled and smoothed by the server (a full load, a live refresh, a smoothing change).
  const wholeUrl = (run) => url(run, { smoothing: state.smoothing });

  async function fetchJson(address) {
    const response = await fetch(address, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`${address}: ${response.status}`);
    return response.json();
  }

  async function loadAll() {
    const generation = ++state.generation;
    state.drawn = false;
    const answers = await Promise.all(runs.map((run) => fetchJson(wholeUrl(run))));
    if (generation !== state.generation) return;
    for (const div of state.charts.values()) Plotly.purge(div);
    buildSections();
    state.charts.clear();
    state.data.clear();
    const names = [...new Set(answers.flatMap((answer) => Object.keys(answer.series)))].sort(metricOrder);
    for (const metric of names) state.data.set(metric, runs.map(emptySeries));
    answers.forEach((answer, index) => {
      state.seenStep[index] = answer.last_step;
      state.pending[index] = false;
      state.active[index] = answer.status === "queued" || answer.status === "running";
      const firsts = Object.values(answer.series).flatMap((series) => [series.x[0], series.nonfinite_x[0]]);
      state.offset[index] = state.x === "wall_time" ? Math.min(...firsts.filter((x) => x !== undefined)) : 0;
      if (!Number.isFinite(state.offset[index])) state.offset[index] = state.x === "wall_time" ? null : 0;
      for (const [metric, series] of Object.entries(answer.series)) {
        state.data.get(metric)[index] = fromServer(series, index);
      }
    });
    // Every chart's box first (the page keeps its height), then one chart drawn per frame, top first.
    const divs = names.map(addChartDiv);
    for (const [position, metric] of names.entries()) {
      await nextFrame();
      if (generation !== state.generation) return;
      await draw(metric, divs[position]);
    }
    state.drawn = true;
  }

  // A run's whole series again (at the same resolution as a reload): every chart it is on is redrawn with it,
  // except a zoomed one, which keeps the range it was asked for until it is reset.
  async function reloadRun(index) {
    const generation = state.generation;
    const started = performance.now();
    const answer = await fetchJson(wholeUrl(runs[index]));
    if (generation !== state.generation) return;
    // A long series costs the server most of a second to read: a live page asks for it again no more often
    // than every RELOAD_SPACING times that, so one open page never keeps a database busy.
    state.nextReload[index] = performance.now() + RELOAD_SPACING * (performance.now() - started);
    state.seenStep[index] = answer.last_step;
    state.pending[index] = false;
    state.active[index] = answer.status === "queued" || answer.status === "running";
    for (const [metric, series] of Object.entries(answer.series)) {
      if (!state.data.has(metric)) state.data.set(metric, runs.map(emptySeries));
      state.data.get(metric)[index] = fromServer(series, index);
    }
    for (const metric of state.data.keys()) {
      const div = ensureChart(metric);
      if (div.dataset.zoomed) continue;
      div.dataset.constant = constantValue(metric) !== null ? "1" : "";
      Plotly.react(div, traces(metric, state.data.get(metric)), layout(metric));
    }
  }

  async function poll() {
    if (!state.drawn) return; // a full load (x axis change) is still drawing: its answers are newer anyway
    const generation = state.generation;
    await Promise.all(runs.map(async (run, index) => {
      if (!state.active[index]) return;
      // Only the rows after the last step seen (a few ms), to learn whether any came; then the whole series.
      const answer = await fetchJson(url(run, { after: state.seenStep[index] }));
      if (generation !== state.generation) return;
      state.active[index] = answer.status === "queued" || answer.status === "running";
      if (answer.last_step !== state.seenStep[index] || Object.keys(answer.series).length) state.pending[index] = true;
      state.seenStep[index] = answer.last_step;
      const ended = !state.active[index];
      if (ended || state.pending[index] && performance.now() >= state.nextReload[index]) await reloadRun(index);
    }));
  }

  async function onZoom(metric, event) {
    const div = state.charts.get(metric);
    if (event["xaxis.autorange"]) {
      delete div.dataset.zoomed;
      Plotly.react(div, traces(metric, state.data.get(metric)), layout(metric));
      return;
    }
    const low = event["xaxis.range[0]"];
    const high = event["xaxis.range[1]"];
    if (low === undefined || high === undefined) return;
    div.dataset.zoomed = "1";
    const answers = await Promise.all(runs.map((run, index) => {
      const offset = state.offset[index] ?? 0;
      return fetchJson(url(run, { x_min: low + offset, x_max: high + offset, metric, smoothing: state.smoothing }));
    }));
    const zoomed = answers.map((answer, index) => {
      const series = answer.series[metric];
      return series ? fromServer(series, index) : emptySeries();
    });
    const base = layout(metric);
    const zoomLayout = { ...base, xaxis: { ...base.xaxis, ...stepTicks(low, high), range: [low, high], autorange: false } };
    Plotly.react(div, traces(metric, zoomed), zoomLayout);
  }

  xControl?.addEventListener("change", () => {
    state.x = xControl.value;
    loadAll();
  });
  // The slider asks the server once it rests (one request per run, every chart's smoothed line in the answer):
  // the EMA of 100k rows is computed there, not over the points on screen.
  let smoothingTimer = null;
  smoothingControl?.addEventListener("input", () => {
    smoothingControl.nextElementSibling.value = smoothingControl.value;
    clearTimeout(smoothingTimer);
    smoothingTimer = setTimeout(() => {
      state.smoothing = Number(smoothingControl.value);
      state.generation += 1;
      if (!state.drawn) {
        loadAll(); // the full load under way asked with the old weight
        return;
      }
      runs.forEach((_, index) => reloadRun(index));
    }, SMOOTHING_DEBOUNCE_MS);
  });

  // A chart's data counts once the chart is drawn (a full load fills the data first, then draws frame by frame).
  const drawnData = (metric) => (state.charts.get(metric)?.data ? state.data.get(metric) : undefined);
  window.preflabCharts = {
    metrics: () => [...state.charts.keys()],
    points: (metric) => drawnData(metric)?.reduce((total, series) => total + series.x.length + series.badX.length, 0) ?? 0,
    nonfinite: (metric) => drawnData(metric)?.flatMap((series) => series.bad) ?? [],
    traceNames: (metric) => state.charts.get(metric)?.data.map((trace) => trace.name) ?? [],
    // Points a run has on the chart as drawn (for checks that every run's series is on screen).
    drawnPoints: (metric, index) => state.charts.get(metric)?.data?.[index * 3]?.x.length ?? 0,
    drawn: () => state.drawn,
    smoothing: () => state.smoothing,
    // The charts in page order, each with its section: [[section, metric], ...].
    layout: () => [...container.querySelectorAll(".chart-section:not([hidden]) [data-cell]")]
      .map((cell) => [cell.closest(".chart-section").dataset.section, cell.dataset.cell]),
  };

  loadAll().then(function loop() {
    if (state.active.some(Boolean)) setTimeout(() => poll().finally(loop), POLL_MS);
  });
})();
