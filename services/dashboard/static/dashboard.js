// voltbus dashboard: polls the JSON endpoints and draws tables, SVG charts and the span tree. No dependencies.
"use strict";
const state = { poll: 2000, run: "", picked: false, rollout: "", drawn: {} };
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
const open = (rid) => (rid ? el("a", { class: "open", "data-open": rid }, rid) : "–");
function workerRow(w) {
  return el("tr", { "data-worker": w.worker_id, "data-status": w.status, "data-stale": w.stale ? "1" : "0" },
    el("td", {}, w.worker_id), el("td", {}, w.stale ? `stale (last ${w.status})` : w.status), el("td", {}, open(w.current_rollout_id)),
    el("td", { class: w.stale ? "stale" : "", "data-age": w.heartbeat_age_s }, age(w.heartbeat_age_s)));
}
// Live runners in natural order (the query's), stale ones (stopped or hung) counted apart and folded away.
function drawWorkers(rows, staleS) {
  const live = rows.filter((w) => !w.stale), stale = rows.filter((w) => w.stale);
  const by = (s) => live.filter((w) => w.status === s).length;
  $("#runner-summary").textContent = rows.length
    ? `${live.length} live (${by("busy")} busy, ${by("idle")} idle${by("unknown") ? `, ${by("unknown")} unknown` : ""}), ${stale.length} stale`
    : "no runner has reported yet";
  fill($("#workers tbody"), live.map(workerRow), stale.length ? "no live runner: every runner is stale" : "no runner has reported yet", 4);
  $("#stale-runners").hidden = !stale.length;
  $("#stale-summary").textContent = `${stale.length} stale runner(s): no heartbeat for over ${num(staleS, 0)} s (stopped or hung)`;
  fill($("#stale-workers tbody"), stale.map(workerRow), "none", 4);
}
function drawFailures(rows, causes) {
  $("#failure-causes").textContent = causes.length
    ? causes.map((c) => `${c.status}${c.error_type ? ` (${c.error_type})` : ""} × ${c.n}`).join(" · ")
    : "nothing has failed";
  fill($("#failures tbody"), rows.map((f) => el("tr", { class: "failure", "data-rollout": f.rollout_id, "data-status": f.status },
    el("td", {}, open(f.rollout_id)), el("td", { class: "n" }, f.sequence_id), el("td", { class: "bad" }, f.status),
    el("td", {}, f.worker_id || "–"),
    el("td", { class: "why" }, [f.error_type, f.error_message].filter(Boolean).join(": ") || f.reason || "no reason recorded"))),
  "no failed attempt", 5);
}
function drawQuality(rows) {
  const cols = rows.length ? Object.keys(rows[0]) : [];
  $("#quality thead").replaceChildren(el("tr", {}, ...cols.map((c) => el("th", {}, c))));
  fill($("#quality tbody"), rows.map((r) => el("tr", { "data-run": r.run_id },
    ...cols.map((c) => el("td", { class: typeof r[c] === "number" ? "n" : "", "data-col": c },
      Array.isArray(r[c]) ? r[c].join(", ") : r[c] ?? "–")))), "no attempts to check yet", 1);
}
// The page opens on the newest run with data (steps or validation); a run the user picks stays.
function drawRuns(runs) {
  state.runs = runs;
  const select = $("#run-select");
  if (!state.picked || !runs.some((r) => r.run_id === state.run))
    state.run = (runs.find((r) => r.steps > 0 || r.validations > 0) || runs[0] || { run_id: "" }).run_id;
  select.replaceChildren(...runs.map((r) => el("option", { value: r.run_id },
    `${r.run_id} (${r.algorithm || "?"}, ${r.status}, ${r.steps || r.validations ? `${r.steps} steps` : "no data yet"})`)));
  select.value = state.run;
  const run = runs.find((r) => r.run_id === state.run);
  select.dataset.status = run ? run.status : "";
  $("#run-info").dataset.reason = run && run.reason ? run.reason : "";
  if (!runs.length) { drawRun({ steps: [], versions: [], validation: [] }); $("#run-info").textContent = "no training run yet"; }
}

// Axis ticks: for counts (integer), every whole number from 0 (at most 6 labels); else the two ends.
function ticks(lo, hi, integer) {
  if (!integer) return [lo, hi];
  const step = Math.max(1, Math.ceil(hi / 5)), out = [];
  for (let v = 0; v <= hi; v += step) out.push(v);
  return out;
}
// A line chart: series of {x, y} points, y up; each point a <circle class="point"> with data-x / data-y.
// opts.integer: y counts whole units, its axis starts at 0 and is labelled in whole numbers.
function chart(node, series, xLabel, opts = {}) {
  const W = 420, H = 200, L = 44, R = 10, T = 10, B = 28;
  const all = series.flatMap((s) => s.points).filter((p) => p.y !== null && p.y !== undefined);
  node.replaceChildren();
  if (!all.length) {
    node.append(Object.assign(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }), { textContent: "no data yet" }));
    return;
  }
  const xs = all.map((p) => p.x), ys = all.map((p) => p.y);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (opts.integer) { y0 = 0; y1 = Math.max(1, Math.ceil(y1)); }
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  node.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }), svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const v of ticks(y0, y1, opts.integer)) {
    if (opts.integer) node.append(svg("line", { class: "grid", x1: L, y1: sy(v), x2: W - R, y2: sy(v) }));
    node.append(Object.assign(svg("text", { class: "y-tick", x: L - 4, y: sy(v) + 3, "text-anchor": "end", "data-v": v }), { textContent: num(v, 2) }));
  }
  if (!opts.noXTicks) for (const v of [...new Set([Math.min(...xs), Math.max(...xs)])])
    node.append(Object.assign(svg("text", { class: "x-tick", x: sx(v), y: H - B + 11, "text-anchor": "middle" }), { textContent: num(v, 0) }));
  node.append(Object.assign(svg("text", { x: (L + W) / 2, y: H - 4, "text-anchor": "middle" }), { textContent: xLabel }));
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
  const steps = data.steps, val = data.validation || [];
  const reason = $("#run-info").dataset.reason;
  $("#run-info").textContent = (steps.length ? `${steps.length} steps` : "no step completed yet") +
    (val.length ? `; validation of ${val.length} version(s)` : "; no validation") + (reason ? `; ${reason}` : "");
  const valPoints = val.map((v) => ({ x: v.step, y: v.reward_mean, label: `${v.resources_id} (${v.ended} of ${v.rollouts} rollouts)` }));
  chart($("#reward-chart"), [{ cls: "mean", points: steps.map((s) => ({ x: s.step, y: s.reward_mean })) },
    { cls: "val", points: valPoints }], "step");
  chart($("#validation-chart"), [{ cls: "val", points: valPoints }], "step");
  fill($("#validation tbody"), val.map((v) => el("tr", { "data-version": v.resources_id },
    el("td", { class: "n" }, v.step), el("td", {}, v.resources_id), el("td", { class: "n" }, `${v.ended} of ${v.rollouts}`),
    el("td", { class: "n" }, num(v.reward_mean)))), "no validation rollout for this run", 4);
  chart($("#version-chart"), [{ cls: "mean", points: data.versions.map((v, i) =>
    ({ x: i + 1, y: v.reward_mean, label: `${v.resources_id} (${v.rollouts} rollouts)` })) }], "resources version (in order of use)");
  chart($("#staleness-chart"), [
    { cls: "mean", points: steps.map((s) => ({ x: s.step, y: s.staleness_mean })) },
    { cls: "max", points: steps.map((s) => ({ x: s.step, y: s.staleness_max })) }], "step", { integer: true });
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
const text = (t, none) => (t === null || t === undefined ? el("span", { class: "empty" }, none) : el("pre", { class: "text" }, t));
function callsTable(calls) {
  const heads = ["call", "model", "status", "prompt", "response", "prompt ids", "response ids", "logprobs"];
  return el("table", { class: "calls" }, el("tr", {}, ...heads.map((h) => el("th", {}, h))),
    ...calls.map((c) => el("tr", { class: "call", "data-call": c.call_id }, el("td", {}, c.call_id), el("td", {}, c.model || "–"),
      el("td", {}, c.status || "–", c.error ? el("div", { class: "bad" }, c.error) : ""),
      el("td", { class: "prompt-text" }, text(c.prompt_text, "no prompt text recorded")),
      el("td", { class: "response-text" }, text(c.response_text, "no response text recorded")),
      el("td", { class: "ids" }, ids(c.prompt_ids)), el("td", { class: "ids" }, ids(c.response_ids)), el("td", { class: "ids" }, ids(c.logprobs)))));
}
function drawRollout(data) {
  const box = $("#rollout-detail");
  if (!data.rollout) { box.replaceChildren(el("p", { class: "empty" }, `no rollout ${data.rollout_id} in the projection (yet)`)); return; }
  const r = data.rollout, parts = [el("p", { id: "rollout-head", "data-status": r.status },
    `${r.rollout_id}: ${r.status}${r.reason ? ` (${r.reason})` : ""}, mode ${r.mode || "–"}, resources ${r.resources_id || "–"}, ${r.attempt_count} attempt(s)`),
    el("div", { id: "rollout-input" }, el("b", {}, "task "), text(r.input, "no input"))];
  for (const a of data.attempts) {
    const spans = data.spans.filter((s) => s.attempt_id === a.attempt_id);
    const calls = data.calls.filter((c) => c.attempt_id === a.attempt_id);
    const rewards = data.rewards.filter((w) => w.attempt_id === a.attempt_id);
    const total = rewards.reduce((n, w) => n + (w.value ?? 0), 0);
    parts.push(el("div", { class: "attempt", "data-attempt": a.attempt_id },
      el("h3", {}, `attempt ${a.sequence_id} ${a.attempt_id}: ${a.status} on ${a.worker_id || "–"}${a.error_type ? ` (${a.error_type}: ${a.error_message})` : ""}`,
        rewards.length ? el("span", { class: "reward-total", "data-total": total }, `, reward ${num(total)}`) : ", no reward"),
      calls.length ? callsTable(calls) : el("p", { class: "empty" }, "no model calls"),
      rewards.length ? el("table", { class: "rewards" }, el("tr", {}, ...["reward", "dimensions", "call"].map((h) => el("th", {}, h))),
        ...rewards.map((w) => el("tr", { class: "reward", "data-value": w.value }, el("td", { class: "n" }, num(w.value)),
          el("td", {}, w.dimensions || "–"), el("td", {}, w.call_id || "–"))))
        : el("p", { class: "empty" }, "no reward"),
      el("details", { class: "spans", open: "" }, el("summary", {}, `${spans.length} span(s)`), spans.length ? spanTree(spans) : el("p", { class: "empty" }, "no spans"))));
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
    // The projector answered: say so at once, not after the run's and the rollout's reads below.
    if (o.empty) banner("empty", "No data yet: the projector answers, but no rollout, runner or training run has been recorded.");
    else banner("ok", "");
    if (changed("rollouts", o.rollouts)) drawStatuses("#rollout-statuses", o.rollouts);
    if (changed("attempts", o.attempts)) drawStatuses("#attempt-statuses", o.attempts);
    $("#queue-size").textContent = o.rollouts.filter((r) => ["queuing", "requeuing"].includes(r.status)).reduce((n, r) => n + r.n, 0);
    if (changed("workers", o.workers)) drawWorkers(o.workers, o.stale_s);
    if (changed("failures", [o.failures, o.failure_causes])) drawFailures(o.failures, o.failure_causes);
    if (changed("quality", o.quality)) drawQuality(o.quality);
    const h = o.log_health;
    $("#log-health").textContent = `log: ${h.quarantined} events in quarantine, ${h.gaps} gaps, ${h.divergences} divergences (SQL: quarantine, gaps, divergences)`;
    $("#log-health").dataset.state = h.quarantined + h.gaps + h.divergences ? "warn" : "ok";
    if (changed("runs", o.runs)) drawRuns(o.runs);
    const picker = await get("/api/rollouts");
    if (changed("picker", picker.rollouts)) drawPicker(picker.rollouts);
    if (state.run) { const run = await get(`/api/run?run_id=${encodeURIComponent(state.run)}`); if (changed("run", run)) drawRun(run); }
    if (state.rollout) { const ro = await get(`/api/rollout?rollout_id=${encodeURIComponent(state.rollout)}`); if (changed("rollout", ro)) drawRollout(ro); }
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
$("#run-select").addEventListener("change", (e) => {
  Object.assign(state, { run: e.target.value, picked: true });
  drawRuns(state.runs || []);
  refresh();
});
// A rollout id anywhere on the page (runners, failures) opens that rollout below.
document.addEventListener("click", (e) => {
  const rid = e.target.closest && e.target.closest("[data-open]")?.dataset.open;
  if (!rid) return;
  state.rollout = rid;
  $("#rollout-id").value = rid;
  refresh().then(() => $("#rollout-section").scrollIntoView());
});
$("#rollout-select").addEventListener("change", (e) => { state.rollout = e.target.value; refresh(); });
$("#rollout-go").addEventListener("click", () => { state.rollout = $("#rollout-id").value.trim(); refresh(); });
get("/api/config").then((c) => { state.poll = c.poll_s * 1000; $("#source").textContent = `projections from ${c.projector_url}`; }).catch(() => {}).finally(tick);
