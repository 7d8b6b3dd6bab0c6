// voltbus dashboard: polls the JSON endpoints and draws tables, SVG charts and the span tree. No dependencies.
"use strict";
const state = { poll: 2000, run: "", rollout: "", drawn: {} };
const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : String(c ?? ""));
  return node;
}
function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}
const num = (v, d = 3) => (v === null || v === undefined ? "–" : Number.isInteger(v) ? String(v) : v.toFixed(d));
const age = (s) => (s === null || s === undefined ? "never" : `${num(s, 1)} s ago`);
function ids(list, most = 48) {
  if (!list) return "–";
  const shown = list.slice(0, most).map((v) => (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : v));
  return `[${shown.join(", ")}${list.length > most ? `, … (${list.length})` : ""}]`;
}

async function get(url) {
  const answer = await fetch(url, { cache: "no-store" });
  const body = await answer.json().catch(() => ({ error: `${answer.status} from ${url}` }));
  if (!answer.ok) throw Object.assign(new Error(body.error || answer.statusText), { state: body.state || "error" });
  return body;
}
function banner(kind, text) {
  const b = $("#banner");
  b.dataset.state = kind;
  b.textContent = text;
}
// Redraw a part only when its data changed, so selections and scroll positions survive polling.
function changed(key, data) {
  const text = JSON.stringify(data);
  if (state.drawn[key] === text) return false;
  state.drawn[key] = text;
  return true;
}
function fill(tbody, rows, empty, width) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { class: "empty", colspan: width }, empty))]));
}

function drawStatuses(table, rows) {
  fill($(`${table} tbody`), rows.map((r) => el("tr", { "data-status": r.status },
    el("td", {}, r.status), el("td", { class: "n", "data-n": r.n }, r.n))), "none yet", 2);
}
function drawWorkers(rows) {
  fill($("#workers tbody"), rows.map((w) => el("tr", { "data-worker": w.worker_id, "data-status": w.status },
    el("td", {}, w.worker_id), el("td", {}, w.status), el("td", {}, w.current_rollout_id || "–"),
    el("td", { class: w.heartbeat_age_s > 30 ? "stale" : "", "data-age": w.heartbeat_age_s }, age(w.heartbeat_age_s)))),
  "no runner has reported yet", 4);
}
function drawQuality(rows) {
  const cols = rows.length ? Object.keys(rows[0]) : [];
  $("#quality thead").replaceChildren(el("tr", {}, ...cols.map((c) => el("th", {}, c))));
  fill($("#quality tbody"), rows.map((r) => el("tr", { "data-run": r.run_id },
    ...cols.map((c) => el("td", { class: typeof r[c] === "number" ? "n" : "", "data-col": c },
      Array.isArray(r[c]) ? r[c].join(", ") : r[c] ?? "–")))), "no attempts to check yet", 1);
}
function drawRuns(runs) {
  const select = $("#run-select");
  if (!state.run && runs.length) state.run = runs[0].run_id;
  select.replaceChildren(...runs.map((r) => el("option", { value: r.run_id },
    `${r.run_id} (${r.algorithm || "?"}, ${r.status}, ${r.steps} steps)`)));
  select.value = state.run;
  if (!runs.length) { drawRun({ steps: [], versions: [] }); $("#run-info").textContent = "no training run yet"; }
}

// A line chart: series of {x, y} points, y up; each point a <circle class="point"> with data-x / data-y.
function chart(node, series, xLabel) {
  const W = 420, H = 200, L = 44, R = 10, T = 10, B = 28;
  const all = series.flatMap((s) => s.points).filter((p) => p.y !== null && p.y !== undefined);
  node.replaceChildren();
  if (!all.length) {
    node.append(Object.assign(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }), { textContent: "no data yet" }));
    return;
  }
  const xs = all.map((p) => p.x), ys = all.map((p) => p.y);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  node.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }), svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const [y, v] of [[sy(y0), y0], [sy(y1), y1]]) node.append(Object.assign(svg("text", { x: L - 4, y: y + 3, "text-anchor": "end" }), { textContent: num(v, 2) }));
  node.append(Object.assign(svg("text", { x: (L + W) / 2, y: H - 6, "text-anchor": "middle" }), { textContent: xLabel }));
  for (const s of series) {
    const pts = s.points.filter((p) => p.y !== null && p.y !== undefined);
    node.append(svg("polyline", { class: `line ${s.cls}`, points: pts.map((p) => `${sx(p.x)},${sy(p.y)}`).join(" ") }));
    for (const p of pts) {
      const dot = svg("circle", { class: `point ${s.cls}`, cx: sx(p.x), cy: sy(p.y), r: 3, "data-x": p.x, "data-y": p.y });
      dot.append(Object.assign(svg("title"), { textContent: `${p.label ?? p.x}: ${num(p.y)}` }));
      node.append(dot);
    }
  }
}
function drawRun(data) {
  const steps = data.steps;
  $("#run-info").textContent = steps.length ? `${steps.length} steps` : "no step completed yet";
  chart($("#reward-chart"), [{ cls: "mean", points: steps.map((s) => ({ x: s.step, y: s.reward_mean })) }], "step");
  chart($("#version-chart"), [{ cls: "mean", points: data.versions.map((v, i) =>
    ({ x: i + 1, y: v.reward_mean, label: `${v.resources_id} (${v.rollouts} rollouts)` })) }], "resources version (in order of use)");
  chart($("#staleness-chart"), [
    { cls: "mean", points: steps.map((s) => ({ x: s.step, y: s.staleness_mean })) },
    { cls: "max", points: steps.map((s) => ({ x: s.step, y: s.staleness_max })) }], "step");
  fill($("#staleness tbody"), steps.map((s) => el("tr", { "data-step": s.step },
    el("td", { class: "n" }, s.step), el("td", {}, s.sampled_with || "–"), el("td", {}, s.published || "–"),
    ...[s.reward_mean, s.reward_std, s.staleness_mean, s.staleness_max, s.rows_dropped_stale].map((v) => el("td", { class: "n" }, num(v))))),
  "no step completed yet", 8);
}

function spanTree(spans) {
  const byId = new Map(spans.map((s) => [s.span_id, s])), kids = new Map();
  for (const s of spans) {
    const parent = s.parent_id && byId.has(s.parent_id) && s.parent_id !== s.span_id ? s.parent_id : "";
    if (!kids.has(parent)) kids.set(parent, []);
    kids.get(parent).push(s);
  }
  const seen = new Set();
  const branch = (parent) => el("ul", { class: "span-tree" }, ...(kids.get(parent) || [])
    .sort((a, b) => a.sequence_id - b.sequence_id).filter((s) => !seen.has(s.span_id) && seen.add(s.span_id))
    .map((s) => el("li", { class: "span", "data-seq": s.sequence_id, "data-span-id": s.span_id, "data-parent-id": s.parent_id },
      el("span", { class: "label" }, `#${s.sequence_id} ${s.name} ${s.status_code || ""}`,
        s.end_time !== null && s.start_time !== null ? ` ${num(s.end_time - s.start_time, 3)} s` : ""), branch(s.span_id))));
  return branch("");
}
function drawRollout(data) {
  const box = $("#rollout-detail");
  if (!data.rollout) { box.replaceChildren(el("p", { class: "empty" }, `no rollout ${data.rollout_id} in the projection (yet)`)); return; }
  const r = data.rollout, parts = [el("p", { id: "rollout-head", "data-status": r.status },
    `${r.rollout_id}: ${r.status}, mode ${r.mode || "–"}, resources ${r.resources_id || "–"}, ${r.attempt_count} attempt(s)`)];
  for (const a of data.attempts) {
    const spans = data.spans.filter((s) => s.attempt_id === a.attempt_id);
    const calls = data.calls.filter((c) => c.attempt_id === a.attempt_id);
    const rewards = data.rewards.filter((w) => w.attempt_id === a.attempt_id);
    parts.push(el("div", { class: "attempt", "data-attempt": a.attempt_id },
      el("h3", {}, `attempt ${a.sequence_id} ${a.attempt_id}: ${a.status} on ${a.worker_id || "–"}${a.error_type ? ` (${a.error_type}: ${a.error_message})` : ""}`),
      spans.length ? spanTree(spans) : el("p", { class: "empty" }, "no spans"),
      calls.length ? el("table", { class: "calls" }, el("tr", {}, ...["call", "model", "status", "prompt ids", "response ids", "logprobs"].map((h) => el("th", {}, h))),
        ...calls.map((c) => el("tr", { class: "call", "data-call": c.call_id }, el("td", {}, c.call_id), el("td", {}, c.model || "–"), el("td", {}, c.status || "–"),
          el("td", { class: "ids" }, ids(c.prompt_ids)), el("td", { class: "ids" }, ids(c.response_ids)), el("td", { class: "ids" }, ids(c.logprobs)))))
        : el("p", { class: "empty" }, "no model calls"),
      rewards.length ? el("table", { class: "rewards" }, el("tr", {}, ...["reward", "dimensions", "call"].map((h) => el("th", {}, h))),
        ...rewards.map((w) => el("tr", { class: "reward", "data-value": w.value }, el("td", { class: "n" }, num(w.value)),
          el("td", {}, w.dimensions || "–"), el("td", {}, w.call_id || "–"))))
        : el("p", { class: "empty" }, "no reward")));
  }
  box.replaceChildren(...parts);
}
function drawPicker(rows) {
  const select = $("#rollout-select");
  select.replaceChildren(el("option", { value: "" }, "— pick a rollout —"),
    ...rows.map((r) => el("option", { value: r.rollout_id }, `${r.rollout_id} (${r.status})`)));
  select.value = rows.some((r) => r.rollout_id === state.rollout) ? state.rollout : "";
}

async function tick() {
  try {
    const o = await get("/api/overview");
    if (changed("rollouts", o.rollouts)) drawStatuses("#rollout-statuses", o.rollouts);
    if (changed("attempts", o.attempts)) drawStatuses("#attempt-statuses", o.attempts);
    $("#queue-size").textContent = o.rollouts.filter((r) => ["queuing", "requeuing"].includes(r.status)).reduce((n, r) => n + r.n, 0);
    if (changed("workers", o.workers)) drawWorkers(o.workers);
    if (changed("quality", o.quality)) drawQuality(o.quality);
    const h = o.log_health;
    $("#log-health").textContent = `log: ${h.quarantined} events in quarantine, ${h.gaps} gaps, ${h.divergences} divergences (SQL: quarantine, gaps, divergences)`;
    $("#log-health").dataset.state = h.quarantined + h.gaps + h.divergences ? "warn" : "ok";
    if (changed("runs", o.runs)) drawRuns(o.runs);
    const picker = await get("/api/rollouts");
    if (changed("picker", picker.rollouts)) drawPicker(picker.rollouts);
    if (state.run) { const run = await get(`/api/run?run_id=${encodeURIComponent(state.run)}`); if (changed("run", run)) drawRun(run); }
    if (state.rollout) { const ro = await get(`/api/rollout?rollout_id=${encodeURIComponent(state.rollout)}`); if (changed("rollout", ro)) drawRollout(ro); }
    if (o.empty) banner("empty", "No data yet: the projector answers, but no rollout, runner or training run has been recorded.");
    else banner("ok", "");
    $("#updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    if (err.state === "down") banner("down", `${err.message}. Start it with \`voltbus projector\` (or pass --projector-url).`);
    else if (err.state) banner("error", err.message);
    else banner("down", `The dashboard itself does not answer (${err.message}).`);
  } finally {
    setTimeout(tick, state.poll);
  }
}

// A selection redraws its part at once, without waiting for the next poll.
async function refresh() {
  try {
    if (state.run) { const run = await get(`/api/run?run_id=${encodeURIComponent(state.run)}`); if (changed("run", run)) drawRun(run); }
    if (state.rollout) { const ro = await get(`/api/rollout?rollout_id=${encodeURIComponent(state.rollout)}`); if (changed("rollout", ro)) drawRollout(ro); }
  } catch (err) { banner(err.state || "down", err.message); }
}
$("#run-select").addEventListener("change", (e) => { state.run = e.target.value; refresh(); });
$("#rollout-select").addEventListener("change", (e) => { state.rollout = e.target.value; refresh(); });
$("#rollout-go").addEventListener("click", () => { state.rollout = $("#rollout-id").value.trim(); refresh(); });
get("/api/config").then((c) => { state.poll = c.poll_s * 1000; $("#source").textContent = `projections from ${c.projector_url}`; }).catch(() => {}).finally(tick);
