// coalloc's web dashboard: read-only views of the documents `coalloc status --json` and
// `coalloc queue --json` print, polled from the same API routes. No library, nothing
// loaded from elsewhere; charts are plain SVG drawn here.
//
// Polling (each document is the one the CLI prints, from the same route):
// - the shown running job alone (`/api/v1/status?job=ID`: that job and every node) every
//   control period, at least every DETAIL_MIN_S: the chart's points, the nodes;
// - the queue (`/api/v1/queue`) and the whole status (`/api/v1/status`: finished jobs,
//   the other running jobs' points) every MIN_EVERY_S real seconds, or more seldom when
//   they are large: each at most BYTES_PER_S on average (a 1,000-job queue: every few s).
// Each status document seen adds one point per running job to a rolling history kept in
// the page (HISTORY_POINTS at most per job run), which the charts draw: the API keeps no
// per-period history.
"use strict";

const MIN_EVERY_S = 2.0;
const MAX_EVERY_S = 15.0;
const BYTES_PER_S = 50000;
const DETAIL_MIN_S = 0.5;
const HISTORY_POINTS = 600;
const FINISHED_ROWS = 200;
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
  "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

const token = new URLSearchParams(window.location.search).get("token") || "";
const state = {
  status: null,        // the last whole status document
  queue: null,         // the last queue rows
  queueText: "",       // ... as received (unchanged: not drawn again)
  selected: null,      // job id shown in the job panel
  history: new Map(),  // run id -> [{t, tvs: [...], phi}]
  controlPeriodS: 1.0, // real seconds per control period
  statusBytes: 0,      // size of the last whole status document
  queueBytes: 0,       // ... and of the last queue
  polls: 0,
};

// ------------------------------------------------------------------------ fetching
async function getJson(path) {
  const response = await fetch(path, {
    headers: { "Authorization": "Bearer " + token, "Accept": "application/json" },
    cache: "no-store",
  });
  const text = await response.text();
  if (!response.ok) {
    let message = "HTTP " + response.status;
    try { message = JSON.parse(text).error || message; } catch (e) { /* not JSON */ }
    throw new Error(path + ": " + message);
  }
  return { text: text, doc: JSON.parse(text) };
}

function showProblem(message) {
  const el = document.getElementById("problem");
  el.textContent = message || "";
  el.hidden = !message;
}

// ------------------------------------------------------------------------ formatting
function fmt(value, digits) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (typeof value !== "number") return String(value);
  const d = digits === undefined ? 1 : digits;
  return Math.abs(value) >= 1e5 ? value.toExponential(2) : value.toFixed(d);
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function replaceRows(table, rows) {
  const body = table.tBodies[0];
  const fragment = document.createDocumentFragment();
  rows.forEach(r => fragment.appendChild(r));
  body.replaceChildren(fragment);
}

function virtualTimes(job) {
  return job.subtasks.map(s => (s.controller_virtual_time !== undefined &&
    s.controller_virtual_time !== null) ? s.controller_virtual_time : s.virtual_time);
}

// ------------------------------------------------------------------------ history
function record(doc) {
  for (const job of doc.jobs) {
    if (job.state !== "running" || job.phase_difference === undefined) continue;
    const key = job.run_id || job.job_id;
    const tvs = virtualTimes(job);
    if (tvs.some(v => v === null || v === undefined)) continue;
    let points = state.history.get(key);
    if (!points) { points = []; state.history.set(key, points); }
    const last = points[points.length - 1];
    if (last && last.t >= doc.model_time) continue;
    points.push({ t: doc.model_time, tvs: tvs, phi: job.phase_difference });
    if (points.length > HISTORY_POINTS) points.splice(0, points.length - HISTORY_POINTS);
  }
}

// ------------------------------------------------------------------------ views
function renderSummary(st) {
  const jobs = st.jobs;
  const count = s => jobs.filter(j => j.state === s).length;
  const text = `${st.address} · policy ${st.policy} · model time ${fmt(st.model_time)} s ` +
    `(time scale ${st.time_scale}, control period ${fmt(state.controlPeriodS, 2)} real s) · ` +
    `${st.nodes.length} nodes · ${count("pending")} pending, ${count("running")} running, ` +
    `${jobs.length - count("pending") - count("running")} finished · ` +
    `updated ${new Date().toLocaleTimeString()}`;
  document.getElementById("summary").textContent = text;
}

function renderNodes(st) {
  replaceRows(document.getElementById("nodes"), st.nodes.map(n => {
    const row = document.createElement("tr");
    row.dataset.node = n.name;
    cell(row, n.name);
    const health = n.health || "up";
    cell(row, health + (n.ready || health !== "up" ? "" : " (not ready)"), "health-" + health);
    cell(row, (n.labels || []).join(", ") || "–");
    cell(row, fmt(n.speed_mhz, 0), "num");
    cell(row, String(n.cores), "num");
    const used = n.budget > 0 ? n.committed / n.budget : 0;
    const td = cell(row, "", "budget");
    const bar = document.createElement("span");
    bar.className = "bar";
    const fill = document.createElement("span");
    fill.style.width = Math.min(100, 100 * used).toFixed(0) + "%";
    bar.appendChild(fill);
    td.appendChild(bar);
    td.appendChild(document.createTextNode(
      ` ${fmt(n.committed)} / ${fmt(n.budget)} Mcycles/s (${(100 * used).toFixed(0)}%)`));
    cell(row, String(n.running_subtasks), "num");
    return row;
  }));
}

function startText(row) {
  if (row.state !== "pending") return row.start_at === null ? "–" : "started " + fmt(row.start_at);
  if (row.estimated_start === null || row.estimated_start === undefined) return "N/A";
  const when = row.estimated_start_time ? new Date(row.estimated_start_time).toLocaleTimeString()
    : "";
  return `${when} (model ${fmt(row.estimated_start)} s)`;
}

function renderQueue(rows) {
  replaceRows(document.getElementById("queue"), rows.map(r => {
    const row = document.createElement("tr");
    row.dataset.job = r.job_id;
    row.dataset.state = r.state;
    row.className = "clickable state-" + r.state + (r.job_id === state.selected ? " selected" : "");
    row.addEventListener("click", () => select(r.job_id));
    cell(row, r.job_id);
    cell(row, r.name);
    cell(row, r.user || "–");
    cell(row, r.state + (r.attempt > 1 ? ` (attempt ${r.attempt})` : ""));
    cell(row, String(r.priority), "num");
    cell(row, fmt(r.wait), "num");
    cell(row, startText(r));
    cell(row, r.state === "pending" ? (r.reason || "–") : (r.nodes || []).join(", "), "reason");
    return row;
  }));
}

function renderFinished(st) {
  const done = st.jobs.filter(j => j.state !== "pending" && j.state !== "running");
  done.sort((a, b) => (b.finished_at || 0) - (a.finished_at || 0));
  replaceRows(document.getElementById("finished"), done.slice(0, FINISHED_ROWS).map(j => {
    const row = document.createElement("tr");
    row.dataset.job = j.job_id;
    row.dataset.state = j.state;
    row.className = "clickable state-" + j.state + (j.job_id === state.selected ? " selected" : "");
    row.addEventListener("click", () => select(j.job_id));
    cell(row, j.job_id);
    cell(row, j.name);
    cell(row, j.state);
    cell(row, String(j.attempt), "num");
    cell(row, fmt(j.mean_phase_difference, 2), "num");
    cell(row, fmt(j.max_phase_difference, 2), "num");
    cell(row, j.window_violation_fraction === null || j.window_violation_fraction === undefined
      ? "–" : (100 * j.window_violation_fraction).toFixed(0) + "%", "num");
    cell(row, fmt(j.completion_skew, 2), "num");
    cell(row, fmt(j.turnaround), "num");
    cell(row, j.reason || "–", "reason");
    return row;
  }));
}

// ------------------------------------------------------------------------ charts
const SVG = "http://www.w3.org/2000/svg";
const BOX = { w: 640, h: 300, left: 64, right: 12, top: 12, bottom: 36 };

function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function ticks(lo, hi, n) {
  const span = hi - lo || 1;
  const raw = span / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(v);
  return out;
}

// Axes, scales and a clip area over [x0,x1] × [y0,y1]; returns the scale functions.
function frame(svg, x0, x1, y0, y1, xLabel, yLabel) {
  svg.replaceChildren();
  const sx = v => BOX.left + (v - x0) / ((x1 - x0) || 1) * (BOX.w - BOX.left - BOX.right);
  const sy = v => BOX.h - BOX.bottom - (v - y0) / ((y1 - y0) || 1) * (BOX.h - BOX.top - BOX.bottom);
  const grid = svgEl("g", { class: "grid" });
  for (const v of ticks(x0, x1, 6)) {
    grid.appendChild(svgEl("line", { x1: sx(v), x2: sx(v), y1: BOX.top, y2: BOX.h - BOX.bottom }));
    grid.appendChild(svgEl("text", { x: sx(v), y: BOX.h - BOX.bottom + 14, "text-anchor": "middle" },
      fmt(v, 0)));
  }
  for (const v of ticks(y0, y1, 5)) {
    grid.appendChild(svgEl("line", { x1: BOX.left, x2: BOX.w - BOX.right, y1: sy(v), y2: sy(v) }));
    grid.appendChild(svgEl("text", { x: BOX.left - 4, y: sy(v) + 4, "text-anchor": "end" },
      fmt(v, Math.abs(y1 - y0) < 10 ? 1 : 0)));
  }
  svg.appendChild(grid);
  svg.appendChild(svgEl("text", { class: "axis", x: (BOX.left + BOX.w - BOX.right) / 2,
    y: BOX.h - 4, "text-anchor": "middle" }, xLabel));
  svg.appendChild(svgEl("text", { class: "axis", x: 12, y: BOX.h / 2, "text-anchor": "middle",
    transform: `rotate(-90 12 ${BOX.h / 2})` }, yLabel));
  return { sx: sx, sy: sy };
}

function polyline(svg, points, attrs) {
  if (points.length === 0) return;
  svg.appendChild(svgEl("polyline", Object.assign({
    points: points.map(p => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "),
    fill: "none" }, attrs)));
}

function drawCharts(job, points) {
  const virtual = document.getElementById("chart-virtual");
  const phase = document.getElementById("chart-phase");
  virtual.dataset.points = String(points.length);
  phase.dataset.points = String(points.length);
  if (points.length === 0) {
    virtual.replaceChildren(svgEl("text", { x: 320, y: 150, "text-anchor": "middle" },
      "no history yet: the page draws what it sees while the job runs"));
    phase.replaceChildren();
    return;
  }
  const eT = job.overall_deviation, aT = job.asynchrony;
  const t0 = points[0].t, t1 = Math.max(points[points.length - 1].t, t0 + 1e-6);
  let lo = Infinity, hi = -Infinity;
  for (const p of points) for (const v of p.tvs) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  lo = Math.min(lo, t0 - (eT || 0)); hi = Math.max(hi, t1 + (eT || 0));
  const v = frame(virtual, t0, t1, lo, hi, "real time T_R (model s)", "T_V (model s)");
  if (eT !== null && eT !== undefined) {
    const band = [[v.sx(t0), v.sy(t0 + eT)], [v.sx(t1), v.sy(t1 + eT)],
      [v.sx(t1), v.sy(t1 - eT)], [v.sx(t0), v.sy(t0 - eT)]];
    virtual.appendChild(svgEl("polygon", { class: "band",
      points: band.map(p => p.join(",")).join(" ") }));
  }
  polyline(virtual, [[v.sx(t0), v.sy(t0)], [v.sx(t1), v.sy(t1)]], { class: "ideal" });
  const n = points[points.length - 1].tvs.length;
  for (let i = 0; i < n; i++) {
    polyline(virtual, points.filter(p => i < p.tvs.length).map(p => [v.sx(p.t), v.sy(p.tvs[i])]),
      { stroke: COLOURS[i % COLOURS.length], "stroke-width": 1.5, class: "subtask" });
  }
  let phiMax = aT || 0;
  for (const p of points) phiMax = Math.max(phiMax, p.phi || 0);
  const f = frame(phase, t0, t1, 0, phiMax * 1.1 || 1, "real time T_R (model s)", "Φ (model s)");
  if (aT !== null && aT !== undefined) {
    polyline(phase, [[f.sx(t0), f.sy(aT)], [f.sx(t1), f.sy(aT)]], { class: "window" });
  }
  polyline(phase, points.map(p => [f.sx(p.t), f.sy(p.phi || 0)]),
    { class: "phi", "stroke-width": 1.5 });
}

// ------------------------------------------------------------------------ job panel
function fact(parent, label, value) {
  const span = document.createElement("span");
  span.className = "fact";
  const b = document.createElement("b");
  b.textContent = label + " ";
  span.appendChild(b);
  span.appendChild(document.createTextNode(value));
  parent.appendChild(span);
}

function renderJob(job) {
  const detail = document.getElementById("job-detail");
  const title = document.getElementById("job-title");
  if (!job) {
    detail.hidden = true;
    title.textContent = state.selected ? state.selected + ": not known" : "none running";
    return;
  }
  detail.hidden = false;
  detail.dataset.job = job.job_id;
  detail.dataset.state = job.state;
  title.textContent = `${job.job_id} ${job.name} (${job.state}, ${job.qos})`;
  const facts = document.getElementById("job-facts");
  facts.replaceChildren();
  if (job.state === "running") {
    fact(facts, "Φ now", fmt(job.phase_difference, 2) + " s");
    fact(facts, "max Φ", fmt(job.max_phase_difference, 2) + " s");
    fact(facts, "window", job.window || "–");
    fact(facts, "mean T_V", fmt(job.mean_virtual));
  } else if (job.state !== "pending") {
    fact(facts, "mean Φ", fmt(job.mean_phase_difference, 2) + " s");
    fact(facts, "max Φ", fmt(job.max_phase_difference, 2) + " s");
    fact(facts, "turnaround", fmt(job.turnaround) + " s");
  }
  fact(facts, "A_t", fmt(job.asynchrony) + " s");
  fact(facts, "E_t", fmt(job.overall_deviation) + " s");
  fact(facts, "attempt", String(job.attempt));
  if (job.state === "pending") fact(facts, "waits", job.reason || "–");
  drawCharts(job, state.history.get(job.run_id || job.job_id) || []);
  const caps = job.rate_caps || [];
  replaceRows(document.getElementById("subtasks"), job.subtasks.map((s, i) => {
    const row = document.createElement("tr");
    const swatch = cell(row, String(s.index));
    swatch.style.borderLeft = "6px solid " + COLOURS[i % COLOURS.length];
    cell(row, s.node);
    // A member whose reported progress stalled (docs/coupled.md, "Progress").
    cell(row, (s.state || "–") + (s.stalled ? " (stalled)" : ""));
    cell(row, s.progress === null || s.progress === undefined ? "–"
      : (100 * s.progress).toFixed(0) + "%", "num");
    cell(row, fmt(virtualTimes(job)[i]), "num");
    cell(row, fmt(s.weight, 2), "num");
    cell(row, fmt(s.virtual_weight, 2), "num");
    cell(row, caps[s.index] ? fmt(caps[s.index], 2) : "none", "num");
    cell(row, s.exit_code === null || s.exit_code === undefined ? "–" : String(s.exit_code),
      "num");
    return row;
  }));
  const history = document.getElementById("job-history");
  history.replaceChildren(...(job.history || []).map((line, k) => {
    const li = document.createElement("li");
    li.textContent = `run ${k + 1} ended: ${line}`;
    return li;
  }));
}

function selectedJob() {
  if (!state.status) return null;
  return state.status.jobs.find(j => j.job_id === state.selected) || null;
}

function select(jobId) {
  state.selected = jobId;
  document.querySelectorAll("tr.selected").forEach(r => r.classList.remove("selected"));
  document.querySelectorAll(`tr[data-job="${CSS.escape(jobId)}"]`)
    .forEach(r => r.classList.add("selected"));
  renderJob(selectedJob());
}

// ------------------------------------------------------------------------ polling
function merge(doc) {
  // A one-job status: its job replaces the one in the last whole document.
  if (!state.status) return;
  state.status.model_time = Math.max(state.status.model_time, doc.model_time);
  for (const job of doc.jobs) {
    const k = state.status.jobs.findIndex(j => j.job_id === job.job_id);
    if (k >= 0) state.status.jobs[k] = job; else state.status.jobs.push(job);
  }
}

async function pollFull() {
  const status = await getJson("/api/v1/status");
  const st = status.doc;
  state.status = st;
  state.statusBytes = status.text.length;
  const period = (st.control_period || st.cycle || 1) / (st.time_scale || 1);
  state.controlPeriodS = period;
  record(st);
  if (!state.selected || !st.jobs.some(j => j.job_id === state.selected)) {
    const running = st.jobs.find(j => j.state === "running");
    state.selected = running ? running.job_id : null;
  }
  renderSummary(st);
  renderNodes(st);
  renderFinished(st);
  renderJob(selectedJob());
  markFirstRender();
}

function markFirstRender() {
  // Real ms from navigation start to the first whole view drawn (the status and the
  // queue both shown; read by bench/bench_dashboard.py).
  if (state.status && state.queue && !document.body.dataset.firstRenderMs) {
    document.body.dataset.firstRenderMs = performance.now().toFixed(0);
  }
}

async function pollQueue() {
  const queue = await getJson("/api/v1/queue");
  state.queueBytes = queue.text.length;
  if (queue.text === state.queueText) return;  // unchanged: not drawn again
  state.queueText = queue.text;
  state.queue = queue.doc;
  renderQueue(state.queue);
  markFirstRender();
}

async function pollDetail() {
  const job = selectedJob();
  if (!job || job.state !== "running") return;
  const one = await getJson("/api/v1/status?job=" + encodeURIComponent(job.job_id));
  merge(one.doc);
  record(one.doc);
  state.status.nodes = one.doc.nodes;
  renderSummary(state.status);
  renderNodes(state.status);
  renderJob(selectedJob());
}

function every(bytes) {
  return Math.min(MAX_EVERY_S, Math.max(MIN_EVERY_S, state.controlPeriodS, bytes / BYTES_PER_S));
}

function loop(task, every) {
  const run = async () => {
    try {
      await task();
      state.polls += 1;
      document.body.dataset.polls = String(state.polls);
      showProblem("");
    } catch (err) {
      showProblem(String(err.message || err));
    }
    setTimeout(run, every() * 1000);
  };
  run();
}

loop(pollFull, () => every(state.statusBytes));
loop(pollQueue, () => every(state.queueBytes));
loop(pollDetail, () => Math.max(DETAIL_MIN_S, state.controlPeriodS));
