// The audit dashboard: the audit's own API for windows and named events, Prometheus (through the audit's
// /api/prometheus proxy) for alerts, lag, latency and the ETL; everything refreshes every REFRESH_MS.
"use strict";

const TIERS = ["producer", "datacenter", "mirror", "offline", "warehouse"];
const REFRESH_MS = 3000;
// A cell's colour by the tier's state in the window (the audit's tierStates): red where events were lost (or the
// tier could not be named, or the window is unaccounted for), amber where events were quarantined, duplicated or
// are short (lost or set aside before), grey while the tier is pending (not compared yet: lag, not loss), green,
// and purple where the tier holds events no producer the audit hears from created (unexpected: not ours, no loss).
const STATE_Z = {lost: 0, quarantined: 1, duplicated: 1, short: 1, pending: 2, complete: 3, unexpected: 4};
const Z_MAX = 4;
const COLOURS = [[0, "#d32f2f"], [0.125, "#d32f2f"], [0.125, "#ffa000"], [0.375, "#ffa000"], [0.375, "#9e9e9e"],
                 [0.625, "#9e9e9e"], [0.625, "#43a047"], [0.875, "#43a047"], [0.875, "#8e24aa"], [1, "#8e24aa"]];

async function getJson(path) {
  const answer = await fetch(path, {cache: "no-store"});
  return answer.json();
}

async function prometheus(query) {
  const body = await getJson("api/prometheus/query?query=" + encodeURIComponent(query));
  return body.status === "success" ? body.data.result : null;
}

function timeLabel(ms) {
  return new Date(ms).toISOString().substring(11, 19);
}

function cellText(w, tier) {
  const count = w.counts[tier];
  if (count === undefined) return "not counted";
  const ratio = w.completeness[tier];
  const state = (w.tierStates || {})[tier] || "complete";
  let text = count + " events" + (ratio === null || ratio === undefined ? "" : ", completeness " + ratio.toFixed(4));
  if (state === "pending") return text + ", pending: " + ((w.pending || {})[tier] || {}).waitingFor;
  if (state !== "complete") text += ", " + state;
  return text;
}

function drawGrid(windows) {
  const grid = document.getElementById("grid");
  const groups = new Map();
  for (const w of windows) {
    const key = w.topic + " / " + w.datacenter;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(w);
  }
  const keys = [...groups.keys()].sort();
  for (const child of [...grid.children]) {
    if (!keys.includes(child.dataset.key)) grid.removeChild(child);
  }
  for (const key of keys) {
    const rows = groups.get(key).sort((a, b) => a.windowStart - b.windowStart);
    let div = [...grid.children].find(c => c.dataset.key === key);
    if (!div) {
      div = document.createElement("div");
      div.className = "grid-row";
      div.dataset.key = key;
      div.dataset.topic = rows[0].topic;
      grid.appendChild(div);
    }
    const x = rows.map(w => timeLabel(w.windowStart));
    const z = TIERS.map(t => rows.map(w => w.counts[t] === undefined ? null
                                            : STATE_Z[(w.tierStates || {})[t] || "complete"]));
    const text = TIERS.map(t => rows.map(w => cellText(w, t)));
    const data = [{type: "heatmap", x: x, y: TIERS, z: z, text: text, hoverinfo: "x+y+text", zmin: 0, zmax: Z_MAX,
                   colorscale: COLOURS, showscale: false, xgap: 2, ygap: 2,
                   customdata: TIERS.map(() => rows.map(w => w.windowStart))}];
    const layout = {title: {text: key, font: {size: 13}}, height: 210, margin: {l: 90, r: 10, t: 30, b: 40},
                    yaxis: {autorange: "reversed"}, xaxis: {type: "category"}};
    Plotly.react(div, data, layout, {displayModeBar: false, responsive: true});
    if (!div.dataset.bound) {
      div.dataset.bound = "1";
      div.on("plotly_click", event => showNamed(div.dataset.key, event.points[0].customdata));
    }
  }
}

function idLines(ids, sign) {
  return Object.entries(ids || {}).map(([id, copies]) => `    ${id}` + (copies > 1 ? ` ${sign}${copies}` : ""));
}

async function showNamed(key, windowStart) {
  const [topic, datacenter] = key.split(" / ");
  const box = document.getElementById("named");
  const w = await getJson(`api/windows/${encodeURIComponent(topic)}/${encodeURIComponent(datacenter)}/${windowStart}`);
  const lines = [`${topic} ${datacenter} window ${new Date(windowStart).toISOString()}: ${w.state}`];
  let named = 0;
  for (const [tier, wait] of Object.entries(w.pending || {})) {
    lines.push(`pending at ${tier} (not compared yet): waiting for ${wait.waitingFor}`);
  }
  for (const tier of TIERS) {
    const ids = (w.lost || {})[tier] || {};
    const unnamed = (w.lostByCount || {})[tier] || 0;
    const lost = Object.values(ids).reduce((a, b) => a + b, 0) + unnamed;
    if (lost) {
      named += lost;
      lines.push(`lost at ${tier} (the first tier without them): ${lost}`
                 + (unnamed ? ` (${unnamed} not named: too many for the sketches)` : ""));
      lines.push(...idLines(ids, "x"));
    }
  }
  for (const q of w.quarantined || []) {
    named += q.count + q.withoutId;
    lines.push(`quarantined at ${q.tier} (${q.reason}): ${q.count + q.withoutId}`
               + (q.withoutId ? ` (${q.withoutId} without an event id)` : "")
               + (q.ids === null ? " (more than the sketch can name)" : ""));
    lines.push(...idLines(q.ids, "x"));
  }
  for (const [tier, ids] of Object.entries(w.duplicated || {})) {
    named += Object.keys(ids).length;
    lines.push(`duplicated at ${tier}: ${Object.keys(ids).length}`);
    lines.push(...idLines(ids, "+"));
  }
  for (const [tier, ids] of Object.entries(w.unexpected || {})) {
    named += Object.keys(ids).length;
    lines.push(`unexpected at ${tier} (held, created by no producer the audit hears from; not a duplicate): `
               + Object.keys(ids).length);
    lines.push(...idLines(ids, "x"));
  }
  for (const d of w.discrepancies || []) {
    if (!d.decoded) lines.push(`${d.earlier} -> ${d.later}: more than the sketch can name`);
  }
  if (w.identity) {
    const i = w.identity;
    lines.push(`identity at ${i.tier}: created ${i.created} = held ${i.held} - duplicates ${i.duplicates} - unexpected `
               + `${i.unexpected || 0} + lost ${i.lost} + quarantined ${i.quarantined}: `
               + (i.holds ? "holds" : "DOES NOT HOLD (unaccounted for)"));
  }
  if (!named && !(w.discrepancies || []).length) lines.push("no events named: every tier agrees");
  box.textContent = lines.join("\n");
  box.style.display = "block";
}

function drawAlerts(alerts) {
  const box = document.getElementById("alerts");
  if (alerts === null) { box.textContent = "Prometheus unreachable"; return; }
  const firing = alerts.filter(a => a.state === "firing");
  if (firing.length === 0) { box.innerHTML = '<span class="none">none</span>'; return; }
  box.innerHTML = "";
  for (const a of firing) {
    const line = document.createElement("div");
    line.className = "firing";
    const labels = Object.entries(a.labels).filter(([k]) => k !== "alertname").map(([k, v]) => `${k}=${v}`).join(" ");
    line.textContent = `${a.labels.alertname} ${labels}`;
    box.appendChild(line);
  }
}

function drawBars(id, result, label, unit) {
  const div = document.getElementById(id);
  if (result === null) { div.textContent = "Prometheus unreachable"; return; }
  if (result.length === 0) { div.textContent = "no data"; return; }
  const names = result.map(label);
  const values = result.map(r => Number(r.value[1]));
  Plotly.react(div, [{type: "bar", x: names, y: values}],
               {height: 260, margin: {l: 50, r: 10, t: 10, b: 80}, yaxis: {title: {text: unit}}},
               {displayModeBar: false, responsive: true});
}

function drawEtl(results) {
  const box = document.getElementById("etl");
  if (results.every(r => r === null)) { box.textContent = "Prometheus unreachable"; return; }
  const [success, rows, duration, runs, failures] = results;
  if (!success || success.length === 0) { box.textContent = "no ETL scheduler scraped"; return; }
  const by = (result, group) => (result || []).filter(r => r.metric.group === group).map(r => r.value[1]);
  let html = "<table><tr><th>group</th><th>last success</th><th>rows (last run)</th><th>duration s</th>"
    + "<th>runs</th><th>consecutive failures</th></tr>";
  for (const r of success) {
    const g = r.metric.group;
    html += `<tr><td>${g}</td><td>${new Date(Number(r.value[1]) * 1000).toISOString()}</td>`
      + `<td>${by(rows, g)[0] ?? "-"}</td><td>${Number(by(duration, g)[0] ?? 0).toFixed(1)}</td>`
      + `<td>${by(runs, g)[0] ?? "-"}</td><td>${by(failures, g)[0] ?? "-"}</td></tr>`;
  }
  box.innerHTML = html + "</table>";
}

function drawEtlRuns(runs) {
  const box = document.getElementById("etl-runs");
  if (runs === null) { box.textContent = ""; return; }
  if (runs.length === 0) { box.textContent = "no ETL run recorded yet"; return; }
  const rows = runs.map(r => {
    const cells = [new Date(r.startedAt * 1000).toISOString().substring(0, 19), r.outcome, r.rows,
                   r.durationS === null ? "-" : r.durationS.toFixed(1), r.skipped, r.error || ""];
    return "<tr>" + cells.map(c => `<td>${String(c).replace(/</g, "&lt;")}</td>`).join("") + "</tr>";
  });
  box.innerHTML = "<table><tr><th>started (UTC)</th><th>outcome</th><th>rows</th><th>seconds</th>"
    + "<th>offsets skipped</th><th>error</th></tr>" + rows.join("") + "</table>";
}

async function refresh() {
  try {
    const windows = (await getJson("api/windows")).windows;
    drawGrid(windows);
    const alerts = await getJson("api/prometheus/alerts");
    drawAlerts(alerts.status === "success" ? alerts.data.alerts : null);
    drawBars("lag", await prometheus("sum by (cluster, group) (kafka_consumergroup_lag)"),
             r => `${r.metric.cluster} ${r.metric.group}`, "records");
    let percentiles = null;
    for (const q of ["0.5", "0.99"]) {
      const result = await prometheus(
        `histogram_quantile(${q}, sum by (le, tier) (rate(audit_tier_latency_seconds_bucket[5m])))`);
      if (result !== null) {
        percentiles = (percentiles || []).concat(result.map(r => ({...r, q: q === "0.5" ? "p50" : "p99"})));
      }
    }
    drawBars("latency", percentiles, r => `${r.metric.tier} ${r.q}`, "seconds");
    drawEtl(await Promise.all(["etl_last_success_timestamp_seconds", "etl_last_run_rows",
                               "etl_last_run_duration_seconds", "sum by (group) (etl_runs_total)",
                               "etl_consecutive_failures"].map(prometheus)));
    drawEtlRuns((await getJson("api/etl/runs")).runs);
    const count = state => windows.filter(w => w.state === state).length;
    const unaccounted = windows.filter(w => w.unaccounted).length;
    document.getElementById("status").textContent =
      `${windows.length} windows reconciled: ${count("complete")} complete, ${count("incomplete")} incomplete, `
      + `${count("pending")} pending, ${unaccounted} unaccounted for; `
      + `updated ${new Date().toISOString().substring(11, 19)} UTC`;
  } catch (error) {
    document.getElementById("status").textContent = "audit service unreachable, retrying";
  }
  setTimeout(refresh, REFRESH_MS);
}

refresh();
