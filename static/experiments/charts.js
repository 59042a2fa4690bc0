// Run charts: one plotly chart per metric, one colour per run. The server downsamples (min/max per bucket);
// live runs are polled for rows after the last step and the new points are appended (extendTraces), never
// redrawn. Each run has three traces per chart: raw (faint), EMA-smoothed, and ✕ markers for NaN/Inf.
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
  const xControl = document.querySelector("[data-chart-control=x]");
  const smoothingControl = document.querySelector("[data-chart-control=smoothing]");
  const state = {
    x: xControl ? xControl.value : "step",
    smoothing: smoothingControl ? Number(smoothingControl.value) : 0.6,
    charts: new Map(), // metric -> div
    data: new Map(), // metric -> per run {x, y, badX, bad}
    lastStep: runs.map(() => 0),
    offset: runs.map(() => 0), // subtracted from x (wall time: the run's first logged time)
    active: runs.map((run) => run.active),
    generation: 0, // bumped when the x axis changes, so late answers of the old axis are ignored
    drawn: false, // every chart of the latest full load is drawn
  };

  function smooth(ys, alpha, start = null) {
    let previous = start;
    return ys.map((y) => (previous = previous === null ? y : alpha * previous + (1 - alpha) * y));
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
      badX: series.nonfinite_x.map((x) => x - offset), bad: series.nonfinite,
    };
  }

  function emptySeries() {
    return { x: [], y: [], badX: [], bad: [] };
  }

  function traces(metric, seriesPerRun) {
    // Plotly keeps the arrays it is given and extendTraces appends to them: hand it copies, or every live
    // append would land twice (once through state.data, once through extendTraces).
    return seriesPerRun.flatMap((series, index) => {
      const color = COLORS[index % COLORS.length];
      const group = `run-${runs[index].id}`;
      return [
        { x: [...series.x], y: [...series.y], mode: "lines", line: { color, width: 1 }, opacity: 0.25, hoverinfo: "skip",
          legendgroup: group, showlegend: false, name: `${runs[index].label} raw` },
        // Sparse series (an eval every N steps, or one at the end) get markers: one point has no line to draw.
        { x: [...series.x], y: smooth(series.y, state.smoothing), mode: series.x.length < 50 ? "lines+markers" : "lines",
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

  function layout(metric) {
    const constant = constantValue(metric);
    return {
      title: { text: asPlotlyText(metric), font: { size: 13 } }, margin: { l: 50, r: 10, t: 30, b: 35 },
      yaxis: constant === null ? { autorange: true } : { range: [Math.min(0, 2 * constant), Math.max(0, 2 * constant)] },
      xaxis: { automargin: true, title: { text: { step: "step", wall_time: "seconds since start", tokens_seen: "tokens" }[state.x] } },
      showlegend: runs.length > 1,
      // Anchored to the bottom of the whole chart, not of the plot: the legend then sits below the x axis title
      // and the bottom margin grows to hold both (a legend placed at a fraction under the plot overlapped it).
      legend: { orientation: "h", x: 0, xanchor: "left", yref: "container", y: 0, yanchor: "bottom" },
      uirevision: state.x,
    };
  }

  const metricOrder = (a, b) => (a !== "loss") - (b !== "loss") || a.localeCompare(b);

  function addChartDiv(metric) {
    const div = document.createElement("div");
    div.className = "chart";
    div.dataset.metric = metric;
    const position = [...state.charts.keys(), metric].sort(metricOrder);
    const next = position[position.indexOf(metric) + 1];
    container.insertBefore(div, next ? state.charts.get(next) : null);
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

  async function fetchJson(address) {
    const response = await fetch(address, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`${address}: ${response.status}`);
    return response.json();
  }

  async function loadAll() {
    const generation = ++state.generation;
    state.drawn = false;
    const answers = await Promise.all(runs.map((run) => fetchJson(url(run, {}))));
    if (generation !== state.generation) return;
    for (const div of state.charts.values()) Plotly.purge(div);
    container.replaceChildren();
    state.charts.clear();
    state.data.clear();
    const names = [...new Set(answers.flatMap((answer) => Object.keys(answer.series)))].sort(metricOrder);
    for (const metric of names) state.data.set(metric, runs.map(emptySeries));
    answers.forEach((answer, index) => {
      state.lastStep[index] = answer.last_step;
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

  function append(index, answer) {
    for (const [metric, series] of Object.entries(answer.series)) {
      const isNew = !state.charts.has(metric);
      const div = ensureChart(metric);
      const stored = state.data.get(metric)[index];
      const lastSmooth = stored.y.length ? smooth(stored.y, state.smoothing).at(-1) : null;
      const shifted = fromServer(series, index);
      stored.x.push(...shifted.x);
      stored.y.push(...shifted.y);
      stored.badX.push(...shifted.badX);
      stored.bad.push(...shifted.bad);
      if (isNew || div.dataset.zoomed) {
        if (isNew) {
          div.dataset.constant = constantValue(metric) !== null ? "1" : "";
          Plotly.react(div, traces(metric, state.data.get(metric)), layout(metric));
        }
        continue;
      }
      if (div.dataset.constant && constantValue(metric) === null) {
        div.dataset.constant = "";
        Plotly.relayout(div, { "yaxis.autorange": true });
      }
      const base = index * 3;
      Plotly.extendTraces(div, {
        x: [shifted.x, shifted.x],
        y: [shifted.y, smooth(shifted.y, state.smoothing, lastSmooth)],
      }, [base, base + 1]);
      if (stored.x.length >= 50 && div.data[base + 1].mode !== "lines") {
        Plotly.restyle(div, { mode: "lines" }, [base + 1]); // dense now: the markers would only clutter
      }
      if (shifted.badX.length) {
        Plotly.extendTraces(div, {
          x: [shifted.badX], y: [markerY(stored, shifted.badX)], text: [shifted.bad],
        }, [base + 2]);
      }
    }
  }

  async function poll() {
    if (!state.drawn) return; // a full load (x axis change) is still drawing: its answers are newer anyway
    const generation = state.generation;
    await Promise.all(runs.map(async (run, index) => {
      if (!state.active[index]) return;
      const answer = await fetchJson(url(run, { after: state.lastStep[index] }));
      if (generation !== state.generation) return;
      state.lastStep[index] = answer.last_step;
      append(index, answer);
      state.active[index] = answer.status === "queued" || answer.status === "running";
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
      return fetchJson(url(run, { x_min: low + offset, x_max: high + offset, metric }));
    }));
    const zoomed = answers.map((answer, index) => {
      const series = answer.series[metric];
      return series ? fromServer(series, index) : emptySeries();
    });
    const zoomLayout = { ...layout(metric), xaxis: { ...layout(metric).xaxis, range: [low, high], autorange: false } };
    Plotly.react(div, traces(metric, zoomed), zoomLayout);
  }

  xControl?.addEventListener("change", () => {
    state.x = xControl.value;
    loadAll();
  });
  smoothingControl?.addEventListener("input", () => {
    state.smoothing = Number(smoothingControl.value);
    smoothingControl.nextElementSibling.value = smoothingControl.value;
    for (const [metric, div] of state.charts) {
      const smoothed = state.data.get(metric).map((series) => smooth(series.y, state.smoothing));
      Plotly.restyle(div, { y: smoothed }, runs.map((_, index) => index * 3 + 1));
    }
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
  };

  loadAll().then(function loop() {
    if (state.active.some(Boolean)) setTimeout(() => poll().finally(loop), POLL_MS);
  });
})();
